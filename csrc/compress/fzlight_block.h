// Per-block kernels of fZ-light: quantise 32 values, Lorenzo + bit-plane packing, and the inverse.
// AVX2 versions where the compiler targets AVX2, portable scalar versions otherwise; both produce
// byte-identical streams (the tests build the core both ways).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "fzlight.h"

namespace zccl::fz::block {

inline constexpr int kLen = static_cast<int>(kBlockLen);

// Largest |x / bin| quantised; beyond it a value is an outlier. Keeps |q| <= 2^30 - 1 so every
// Lorenzo delta fits in int32 and its magnitude in 31 bits.
template <class T>
inline constexpr T kCodeLimit = T(1073741760.0);  // 2^30 - 64, exact in float and double

// Forces a value to be materialised as rounded, so the compiler cannot fuse the multiply that
// produced it into a following subtraction (an FMA would verify a value the decoder never makes).
template <class V>
inline V materialize(V v) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(v));
#else
  __asm__("" : "+m"(v));
#endif
  return v;
}

template <class T>
struct Quantizer {
  T bin;      // reconstruction step: x' = T(q) * bin
  T inv_bin;  // 1 / bin rounded to T; a rounding slip only ever creates an outlier
  double eb;  // the bound every reconstruction is verified against, in double
};

// --------------------------------------------------------------------------------------------
// Scalar reference kernels.

template <class T>
inline bool quantize_one(T x, const Quantizer<T>& qz, int32_t& q) {
  const T scaled = x * qz.inv_bin;
  if (!(std::fabs(scaled) < kCodeLimit<T>)) return false;  // NaN, Inf or code overflow
  const T rounded = std::nearbyint(scaled);                 // ties to even, like the SIMD path
  q = static_cast<int32_t>(rounded);
  const T recon = materialize(static_cast<T>(q) * qz.bin);
  return std::fabs(static_cast<double>(x) - static_cast<double>(recon)) <= qz.eb;
}

// Quantises 32 values into q; returns a mask of the lanes that must be stored exactly.
template <class T>
inline uint32_t quantize_scalar(const T* x, const Quantizer<T>& qz, int32_t* q) {
  uint32_t bad = 0;
  for (int i = 0; i < kLen; ++i) {
    if (!quantize_one(x[i], qz, q[i])) bad |= 1u << i;
  }
  return bad;
}

// Lorenzo deltas against `prev`, then sign plane + L magnitude planes into words. Returns L.
inline int pack_scalar(const int32_t* q, int32_t prev, uint32_t* words) {
  uint32_t mags[kLen];
  uint32_t sign = 0, all = 0;
  for (int i = 0; i < kLen; ++i) {
    const int32_t d = q[i] - (i == 0 ? prev : q[i - 1]);
    const uint32_t neg = d < 0;
    sign |= neg << i;
    mags[i] = neg ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
    all |= mags[i];
  }
  if (all == 0) return 0;
  const int len = 32 - __builtin_clz(all);
  words[0] = sign;
  for (int j = 0; j < len; ++j) {
    uint32_t w = 0;
    for (int i = 0; i < kLen; ++i) w |= ((mags[i] >> j) & 1u) << i;
    words[1 + j] = w;
  }
  return len;
}

// Inverse of pack: reads the sign + len planes at `src`, prefix-sums from `carry`, reconstructs.
// Integer arithmetic wraps (uint32) so a hostile stream cannot cause undefined behaviour.
template <class T>
inline void unpack_scalar(const uint8_t* src, int len, int32_t& carry, T bin, T* out) {
  uint32_t acc = static_cast<uint32_t>(carry);
  if (len == 0) {
    const T v = static_cast<T>(carry) * bin;
    for (int i = 0; i < kLen; ++i) out[i] = v;
    return;
  }
  uint32_t words[33];
  std::memcpy(words, src, 4u * (len + 1));
  for (int i = 0; i < kLen; ++i) {
    uint32_t mag = 0;
    for (int j = 0; j < len; ++j) mag |= ((words[1 + j] >> i) & 1u) << j;
    acc += ((words[0] >> i) & 1u) ? 0u - mag : mag;
    out[i] = static_cast<T>(static_cast<int32_t>(acc)) * bin;
  }
  carry = static_cast<int32_t>(acc);
}

#if defined(__AVX2__)
// --------------------------------------------------------------------------------------------
// AVX2 kernels. Same arithmetic as the scalar ones, lane by lane.

// 8 float lanes: returns the 8-bit mask of lanes to store exactly; writes 8 codes.
inline uint32_t quantize8(const float* x, const Quantizer<float>& qz, int32_t* q) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256 scaled = _mm256_mul_ps(v, _mm256_set1_ps(qz.inv_bin));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 in_range =
      _mm256_cmp_ps(_mm256_and_ps(scaled, abs_mask), _mm256_set1_ps(kCodeLimit<float>), _CMP_LT_OQ);
  const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 safe = _mm256_and_ps(rounded, in_range);  // NaN/huge lanes become 0
  const __m256i code = _mm256_cvttps_epi32(safe);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), code);
  const __m256 recon =
      materialize(_mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(qz.bin)));
  // Verify |x - x'| <= eb in double, as the contract states.
  const __m256d eb = _mm256_set1_pd(qz.eb);
  const __m256d abs_mask_d = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  const __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                   _mm256_cvtps_pd(_mm256_castps256_ps128(recon)));
  const __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)),
                                   _mm256_cvtps_pd(_mm256_extractf128_ps(recon, 1)));
  const int ok_lo = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_and_pd(lo, abs_mask_d), eb, _CMP_LE_OQ));
  const int ok_hi = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_and_pd(hi, abs_mask_d), eb, _CMP_LE_OQ));
  const uint32_t ok = static_cast<uint32_t>(_mm256_movemask_ps(in_range)) &
                      static_cast<uint32_t>(ok_lo | (ok_hi << 4));
  return ~ok & 0xFFu;
}

// 4 double lanes: returns the 4-bit mask of lanes to store exactly; writes 4 codes.
inline uint32_t quantize4(const double* x, const Quantizer<double>& qz, int32_t* q) {
  const __m256d v = _mm256_loadu_pd(x);
  const __m256d scaled = _mm256_mul_pd(v, _mm256_set1_pd(qz.inv_bin));
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  const __m256d in_range = _mm256_cmp_pd(_mm256_and_pd(scaled, abs_mask),
                                         _mm256_set1_pd(kCodeLimit<double>), _CMP_LT_OQ);
  const __m256d rounded = _mm256_round_pd(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i code = _mm256_cvttpd_epi32(_mm256_and_pd(rounded, in_range));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), code);
  const __m256d recon =
      materialize(_mm256_mul_pd(_mm256_cvtepi32_pd(code), _mm256_set1_pd(qz.bin)));
  const __m256d err = _mm256_and_pd(_mm256_sub_pd(v, recon), abs_mask);
  const __m256d ok = _mm256_and_pd(in_range, _mm256_cmp_pd(err, _mm256_set1_pd(qz.eb), _CMP_LE_OQ));
  return ~static_cast<uint32_t>(_mm256_movemask_pd(ok)) & 0xFu;
}

inline uint32_t quantize(const float* x, const Quantizer<float>& qz, int32_t* q) {
  uint32_t bad = 0;
  for (int k = 0; k < 4; ++k) bad |= quantize8(x + 8 * k, qz, q + 8 * k) << (8 * k);
  return bad;
}

inline uint32_t quantize(const double* x, const Quantizer<double>& qz, int32_t* q) {
  uint32_t bad = 0;
  for (int k = 0; k < 8; ++k) bad |= quantize4(x + 4 * k, qz, q + 4 * k) << (4 * k);
  return bad;
}

inline int pack(const int32_t* q, int32_t prev, uint32_t* words) {
  // Previous code for each lane: q shifted up by one lane across the 32, with prev in lane 0.
  const __m256i rotate = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
  __m256i mag[4];
  uint32_t sign = 0;
  __m256i all = _mm256_setzero_si256();
  int32_t carry = prev;
  for (int k = 0; k < 4; ++k) {
    const __m256i cur = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * k));
    const __m256i shifted = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(cur, rotate),
                                               _mm256_set1_epi32(carry), 0x01);
    const __m256i delta = _mm256_sub_epi32(cur, shifted);
    sign |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(delta))) << (8 * k);
    mag[k] = _mm256_abs_epi32(delta);
    all = _mm256_or_si256(all, mag[k]);
    carry = q[8 * k + 7];
  }
  // Horizontal OR of the magnitudes decides the code length.
  __m128i r = _mm_or_si128(_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
  r = _mm_or_si128(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_or_si128(r, _mm_shuffle_epi32(r, 0xB1));
  const uint32_t any = static_cast<uint32_t>(_mm_cvtsi128_si32(r));
  if (any == 0) return 0;
  const int len = 32 - __builtin_clz(any);
  words[0] = sign;
  // Move bit len-1 to the sign position, then walk down one plane per doubling.
  const __m128i shift = _mm_cvtsi32_si128(32 - len);
  for (int k = 0; k < 4; ++k) mag[k] = _mm256_sll_epi32(mag[k], shift);
  for (int j = len - 1; j >= 0; --j) {
    uint32_t w = 0;
    for (int k = 0; k < 4; ++k) {
      w |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(mag[k]))) << (8 * k);
      mag[k] = _mm256_add_epi32(mag[k], mag[k]);
    }
    words[1 + j] = w;
  }
  return len;
}

// Inclusive prefix sum of 8 int32 lanes plus `carry` (broadcast); wraps like uint32.
inline __m256i scan8(__m256i x, __m256i carry) {
  x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
  x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
  const __m256i low_total = _mm256_permutevar8x32_epi32(x, _mm256_set1_epi32(3));
  x = _mm256_add_epi32(x, _mm256_blend_epi32(_mm256_setzero_si256(), low_total, 0xF0));
  return _mm256_add_epi32(x, carry);
}

inline void store_codes(__m256i codes, float bin, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(bin)));
}

inline void store_codes(__m256i codes, double bin, double* out) {
  const __m256d b = _mm256_set1_pd(bin);
  _mm256_storeu_pd(out, _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(codes)), b));
  _mm256_storeu_pd(out + 4,
                   _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(codes, 1)), b));
}

template <class T>
inline void unpack(const uint8_t* src, int len, int32_t& carry, T bin, T* out) {
  __m256i acc = _mm256_set1_epi32(carry);
  if (len == 0) {
    for (int k = 0; k < 4; ++k) store_codes(acc, bin, out + 8 * k);
    return;
  }
  uint32_t words[33];
  std::memcpy(words, src, 4u * (len + 1));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int k = 0; k < 4; ++k) {
    const __m256i idx = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * k));
    __m256i mag = _mm256_setzero_si256();
    for (int j = len - 1; j >= 0; --j) {
      const __m256i bit = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(words[1 + j])), idx), one);
      mag = _mm256_or_si256(_mm256_add_epi32(mag, mag), bit);
    }
    const __m256i neg = _mm256_sub_epi32(
        _mm256_setzero_si256(),
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(words[0])), idx), one));
    const __m256i delta = _mm256_sub_epi32(_mm256_xor_si256(mag, neg), neg);
    const __m256i codes = scan8(delta, acc);
    store_codes(codes, bin, out + 8 * k);
    acc = _mm256_permutevar8x32_epi32(codes, _mm256_set1_epi32(7));
  }
  carry = _mm256_cvtsi256_si32(acc);
}

#else

template <class T>
inline uint32_t quantize(const T* x, const Quantizer<T>& qz, int32_t* q) {
  return quantize_scalar(x, qz, q);
}
inline int pack(const int32_t* q, int32_t prev, uint32_t* words) { return pack_scalar(q, prev, words); }
template <class T>
inline void unpack(const uint8_t* src, int len, int32_t& carry, T bin, T* out) {
  unpack_scalar(src, len, carry, bin, out);
}

#endif

}  // namespace zccl::fz::block
