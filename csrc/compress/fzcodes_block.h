// The integer code segments' probe (fzcodes.h, fzcodes.cpp's kKindGroup): a block of 32 codes
// sized both ways, Lorenzo deltas from the previous code and the codes themselves ("direct"),
// and packed as the kind direct_wins names, in one pass. The kind is applied with masks, not
// branches (GCC otherwise duplicates the plane writer per kind and branches between the
// copies). Built on fzlight_block.h's plane writers, with the same AVX-512 / AVX2 / scalar
// split; all three give the same planes. Blocks are read back with fzlight_block.h's unpackers
// of the kind their length byte names.
#pragma once

#include <cstdint>

#include "fzlight_block.h"

namespace zccl::fz::block {

// Whether the bit length of a is below that of b (branch-free: a < b, and a ^ b has b's top bit).
inline unsigned fewer_bits(uint32_t a, uint32_t b) {
  return static_cast<unsigned>(a < b) & static_cast<unsigned>((a ^ b) > a);
}

// Whether a block whose magnitudes OR to `direct_or` as codes and to `lorenzo_or` as deltas is
// packed direct: when the codes need fewer bits than the deltas, or as many and `tie_direct`
// (the encoder passes the kind its previous group took: on noise half the blocks tie, on smooth
// data at coarse bounds many do, and either kind should stick); never when the deltas need none
// (a Lorenzo block repeating the previous code has no length byte).
inline bool direct_wins(uint32_t direct_or, uint32_t lorenzo_or, bool tie_direct) {
  const unsigned direct_fewer = fewer_bits(direct_or, lorenzo_or);
  const unsigned lorenzo_fewer = fewer_bits(lorenzo_or, direct_or);
  const unsigned tie = (direct_fewer | lorenzo_fewer) ^ 1u;
  return static_cast<bool>(static_cast<unsigned>(lorenzo_or != 0) &
                           (direct_fewer | (tie & static_cast<unsigned>(tie_direct))));
}

// A block's kind as a mask (all ones: direct), opaque to the optimiser: given the bool, GCC 12
// duplicated the rest of the packer for each kind and branched between the copies, which cost
// the hop 30 % on noise (mispredicted). Every selection below is made with this mask instead.
inline uint32_t opaque_mask(bool direct) {
  uint32_t mask = 0u - static_cast<uint32_t>(direct);
  asm("" : "+r"(mask));
  return mask;
}

// ---- Scalar ----

// Packs q as the kind direct_wins names (a tie: the kind `direct` holds on entry) into words
// (at most 4 * 33 bytes); returns L and sets `direct` to the kind packed.
inline int pack_either_scalar(const int32_t* q, int32_t prev, uint8_t* words, bool& direct) {
  uint32_t deltas[kLen], codes[kLen];
  uint32_t delta_sign = 0, code_sign = 0, delta_or = 0, code_or = 0;
  uint32_t before = static_cast<uint32_t>(prev);
  for (int i = 0; i < kLen; ++i) {
    const uint32_t c = static_cast<uint32_t>(q[i]);
    const uint32_t d = c - before;  // wraps like uint32 (honest codes never reach 2^31)
    before = c;
    delta_sign |= (d >> 31) << i;
    code_sign |= (c >> 31) << i;
    deltas[i] = (d >> 31) ? 0u - d : d;
    codes[i] = (c >> 31) ? 0u - c : c;
    delta_or |= deltas[i];
    code_or |= codes[i];
  }
  direct = direct_wins(code_or, delta_or, direct);
  return direct ? write_planes_scalar(code_sign, codes, code_or, words)
                : write_planes_scalar(delta_sign, deltas, delta_or, words);
}

#if defined(__AVX512F__)
// ---- AVX-512: 16 lanes per register ----

ZCCL_AVX512_INLINE int pack_either16x2(__m512i lo, __m512i hi, int32_t prev, uint8_t* words,
                                       bool& direct) {
  const __m512i dlo =
      _mm512_sub_epi32(lo, _mm512_maskz_alignr_epi32(0xFFFF, lo, _mm512_set1_epi32(prev), 15));
  const __m512i dhi = _mm512_sub_epi32(hi, _mm512_maskz_alignr_epi32(0xFFFF, hi, lo, 15));
  const __m512i code_lo = _mm512_maskz_abs_epi32(0xFFFF, lo);
  const __m512i code_hi = _mm512_maskz_abs_epi32(0xFFFF, hi);
  const __m512i delta_lo = _mm512_maskz_abs_epi32(0xFFFF, dlo);
  const __m512i delta_hi = _mm512_maskz_abs_epi32(0xFFFF, dhi);
  const uint32_t code_or = or_of_lanes16(code_lo, code_hi);
  const uint32_t delta_or = or_of_lanes16(delta_lo, delta_hi);
  const uint32_t mask = opaque_mask(direct_wins(code_or, delta_or, direct));
  direct = mask != 0;
  const __mmask16 take = _cvtu32_mask16(mask);
  const __m512i zero = _mm512_setzero_si512();
  const uint32_t sign =
      _cvtmask16_u32(_mm512_cmplt_epi32_mask(_mm512_mask_mov_epi32(dlo, take, lo), zero)) |
      _cvtmask16_u32(_mm512_cmplt_epi32_mask(_mm512_mask_mov_epi32(dhi, take, hi), zero)) << 16;
  return write_planes16(sign, _mm512_mask_mov_epi32(delta_lo, take, code_lo),
                        _mm512_mask_mov_epi32(delta_hi, take, code_hi),
                        (code_or & mask) | (delta_or & ~mask), words);
}

// pack_either_scalar on codes in registers: lanes 8k .. 8k+7 in codes[k].
ZCCL_AVX512_INLINE int pack_either_regs(const __m256i* codes, int32_t prev, uint8_t* words,
                                        bool& direct) {
  return pack_either16x2(join512(codes[0], codes[1]), join512(codes[2], codes[3]), prev, words,
                         direct);
}

#elif defined(__AVX2__)
// ---- AVX2: 8 lanes per register ----

// pack_either_scalar on codes in registers: lanes 8k .. 8k+7 in codes[k].
inline int pack_either_regs(const __m256i* codes, int32_t prev, uint8_t* words, bool& direct) {
  const __m256i rotate = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
  __m256i delta_mag[4], code_mag[4];
  uint32_t delta_sign = 0, code_sign = 0;
  __m256i delta_all = _mm256_setzero_si256(), code_all = _mm256_setzero_si256();
  __m256i carry = _mm256_set1_epi32(prev);
  for (int k = 0; k < 4; ++k) {
    const __m256i cur = codes[k];
    const __m256i shifted =
        _mm256_blend_epi32(_mm256_permutevar8x32_epi32(cur, rotate), carry, 0x01);
    const __m256i delta = _mm256_sub_epi32(cur, shifted);
    delta_sign |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(delta))) << (8 * k);
    code_sign |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(cur))) << (8 * k);
    delta_mag[k] = _mm256_abs_epi32(delta);
    code_mag[k] = _mm256_abs_epi32(cur);
    delta_all = _mm256_or_si256(delta_all, delta_mag[k]);
    code_all = _mm256_or_si256(code_all, code_mag[k]);
    carry = _mm256_permutevar8x32_epi32(cur, _mm256_set1_epi32(7));
  }
  const uint32_t delta_or = or_of_lanes(delta_all), code_or = or_of_lanes(code_all);
  const uint32_t mask = opaque_mask(direct_wins(code_or, delta_or, direct));
  direct = mask != 0;
  const __m256i take = _mm256_set1_epi32(static_cast<int32_t>(mask));
  for (int k = 0; k < 4; ++k) delta_mag[k] = _mm256_blendv_epi8(delta_mag[k], code_mag[k], take);
  return write_planes8((code_sign & mask) | (delta_sign & ~mask), delta_mag,
                       (code_or & mask) | (delta_or & ~mask), words);
}

#endif

// ---- Whatever this build has ----

// Packs the 32 codes at q as the kind direct_wins names (a tie: the kind `direct` holds on
// entry); returns L and sets `direct` to the kind packed.
inline int pack_either(const int32_t* q, int32_t prev, uint8_t* words, bool& direct) {
#if defined(__AVX2__)
  __m256i codes[4];
  for (int k = 0; k < 4; ++k) {
    codes[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * k));
  }
  return pack_either_regs(codes, prev, words, direct);
#else
  return pack_either_scalar(q, prev, words, direct);
#endif
}

}  // namespace zccl::fz::block
