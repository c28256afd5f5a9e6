// Per-block kernels of fZ-light: quantise 32 values, Lorenzo + bit-plane packing, and the inverse.
// AVX2 versions where the compiler targets AVX2, portable scalar versions otherwise; both produce
// byte-identical streams (the tests build the core both ways).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "fzlight.h"

namespace zccl::fz::block {

// Under AddressSanitizer the functions holding 512-bit values stay out of line: inlined into a
// large caller they make GCC align its whole frame to 64 bytes and zero locals with aligned
// 512-bit stores, and ASan's fake stack (detect_stack_use_after_return) hands out frames that
// are not 64-byte aligned, so those stores fault. The code is the same either way.
#if defined(__AVX512F__) && defined(__SANITIZE_ADDRESS__)
#define ZCCL_AVX512_INLINE inline __attribute__((noinline))
#else
#define ZCCL_AVX512_INLINE inline
#endif

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
  bool sure_path = false;  // float32: lanes passing sure_lanes8 skip the float64 check
};

// ---- Codes that need no float64 check (float32 values, float32 arithmetic) ----------------
// Let s = fl(x * inv_bin) in float32, Q = round(s), d = |s - Q| (exact: s and Q are within 0.5
// of each other, Sterbenz), and x' = fl(Q * bin) the float32 reconstruction (for the integer
// codes of fzcodes.h, x' = Q * bin exactly, which only helps). With u = 2^-24, bin and inv_bin
// normal floats and |inv_bin * bin - 1| <= 2^-23:
//   |x / bin - s| <= |s| 2^-23 (1.5 + tiny) (+ 2^-150 if s is subnormal),
//   |x' - Q bin| / bin <= |Q| u <= (|s| + 0.5) u,
// so |x - x'| / bin <= d + |s| 2^-22 (1 + tiny) + 2^-25. When the float32 sum fl(d + |s| 2^-22)
// is at most kSureLimit, d + |s| 2^-22 <= kSureLimit (1 + u) and |s| < 2^21, so |x - x'| / bin
// < 0.5 + 2^-11 - 2^-20 + 2^-22 < 0.5 + 2^-11 <= eb / bin, which sure_path_ok() checks once per
// bound (both codecs' bins are 2 eb (1 - 2^-10) or less, so it holds for every normal bin that
// cannot overflow). Such a lane is within the bound, so the float64 check would pass it too:
// skipping the check changes no code and no outlier.
// Others (|s| beyond ~2^21, s within ~|s| 2^-22 of a half-integer, NaN) take the float64 check.
inline constexpr float kSureLimit = 0.5f + 0x1p-11f - 0x1p-20f;  // exact in float32

inline bool sure_path_ok(double eb, float bin, float inv_bin) {
  // Passing lanes have |Q| <= 2^21 + 1, and |Q| * bin must not overflow: the argument assumes
  // Q * bin rounds like any product, and an infinite x' is never within the bound. (float64
  // values keep the float64 check: measured, the shortcut gained nothing there.)
  const double lo = static_cast<double>(std::numeric_limits<float>::min());
  const double hi = static_cast<double>(std::numeric_limits<float>::max()) * 0x1p-23;
  return static_cast<double>(bin) >= lo && static_cast<double>(bin) <= hi &&
         static_cast<double>(inv_bin) >= lo &&
         std::fabs(static_cast<double>(inv_bin) * static_cast<double>(bin) - 1.0) <= 0x1p-23 &&
         eb >= (0.5 + 0x1p-11) * static_cast<double>(bin) * (1.0 + 0x1p-40);
}

// --------------------------------------------------------------------------------------------
// Storage kinds. A value is stored as S and quantised in the compute type C: float32 and float64
// in themselves, float16 and bfloat16 in float32 (the widening is exact), their reconstruction
// C(q) * bin rounded to nearest-even into S. narrow/widen are the scalar conversions; the AVX2
// kernels below do the same operations eight lanes at a time (F16C for float16).

inline uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float bits_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// float -> IEEE binary16, round to nearest even (what F16C's vcvtps2ph with imm 0 and CUDA's
// __float2half_rn compute); NaN becomes a quiet NaN keeping the top payload bits.
inline uint16_t float_to_half_rne(float x) {
  uint32_t f = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  f &= 0x7FFFFFFFu;
  if (f > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((f >> 13) & 0x3FFu));
  if (f >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: infinity
  if (f < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), round(x * 2^24)
    const uint32_t exp = f >> 23;
    if (exp < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t mant = (f & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = f - (112u << 23);  // rebias the exponent from 127 to 15
  r += 0xFFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return bits_float(float_bits(v) | sign);
  }
  if (e == 31) return bits_float(sign | 0x7F800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// float -> bfloat16, round to nearest even (CUDA's __float2bfloat16_rn); NaN stays a quiet NaN.
inline uint16_t float_to_bf16_rne(float x) {
  const uint32_t f = float_bits(x);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);
  return static_cast<uint16_t>((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// A stream dtype computed on in itself (float, double).
template <class T, DType D>
struct KindSame {
  using S = T;
  using C = T;
  static constexpr DType kDType = D;
  static C widen(S x) { return x; }
  static S narrow(C x) { return x; }
};
// A 16-bit stream dtype computed on in float32 (widening is exact; narrowing rounds to nearest
// even).
template <DType D, float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
struct KindHalf {
  using S = uint16_t;
  using C = float;
  static constexpr DType kDType = D;
  static C widen(S x) { return Widen(x); }
  static S narrow(C x) { return Narrow(x); }
};
using KindF32 = KindSame<float, DType::Float32>;
using KindF64 = KindSame<double, DType::Float64>;
using KindF16 = KindHalf<DType::Float16, half_to_float, float_to_half_rne>;
using KindBF16 = KindHalf<DType::BFloat16, bf16_to_float, float_to_bf16_rne>;

template <class K>
inline constexpr bool kIsHalf = sizeof(typename K::S) == 2;

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

// The same for a half-precision value: quantised in float32, its reconstruction rounded to the
// half type and checked in double against the half input.
template <class K>
inline bool quantize_one_half(uint16_t x, const Quantizer<float>& qz, int32_t& q) {
  const float xf = K::widen(x);
  const float scaled = xf * qz.inv_bin;
  if (!(std::fabs(scaled) < kCodeLimit<float>)) return false;
  q = static_cast<int32_t>(std::nearbyint(scaled));
  const float recon = K::widen(K::narrow(materialize(static_cast<float>(q) * qz.bin)));
  return std::fabs(static_cast<double>(xf) - static_cast<double>(recon)) <= qz.eb;
}

// Quantises 32 values into q; returns a mask of the lanes that must be stored exactly.
template <class K>
inline uint32_t quantize_scalar(const typename K::S* x, const Quantizer<typename K::C>& qz,
                                int32_t* q) {
  uint32_t bad = 0;
  for (int i = 0; i < kLen; ++i) {
    bool ok;
    if constexpr (kIsHalf<K>) {
      ok = quantize_one_half<K>(x[i], qz, q[i]);
    } else {
      ok = quantize_one(x[i], qz, q[i]);
    }
    if (!ok) bad |= 1u << i;
  }
  return bad;
}

// Word j of a block's packed form (sign plane, then magnitude planes), little-endian u32 at any
// alignment: the packers write straight into a stream.
inline void store_word(uint8_t* words, int j, uint32_t w) { std::memcpy(words + 4 * j, &w, 4); }

// The packers and unpackers take the predictor as a template argument: kLorenzo (the default)
// codes Lorenzo deltas against the previous code (`prev` / `carry` before lane 0), false codes
// the codes themselves (a direct chunk, fzlight_format.h; `prev` and `carry` are then unused).

// The sign plane and L magnitude planes of a block (L = bit length of `all`, the OR of the 32
// magnitudes) into words; returns L (0: nothing written).
inline int write_planes_scalar(uint32_t sign, const uint32_t* mags, uint32_t all, uint8_t* words) {
  if (all == 0) return 0;
  const int len = 32 - __builtin_clz(all);
  store_word(words, 0, sign);
  for (int j = 0; j < len; ++j) {
    uint32_t w = 0;
    for (int i = 0; i < kLen; ++i) w |= ((mags[i] >> j) & 1u) << i;
    store_word(words, 1 + j, w);
  }
  return len;
}

// Lorenzo deltas against `prev` (or, !kLorenzo, the codes), then sign plane + L magnitude planes
// into words (at most 4 * 32 bytes, only the 4 * (L + 1) of the block written). Returns L.
template <bool kLorenzo = true>
inline int pack_scalar(const int32_t* q, int32_t prev, uint8_t* words) {
  uint32_t mags[kLen];
  uint32_t sign = 0, all = 0;
  for (int i = 0; i < kLen; ++i) {
    const int32_t d = kLorenzo ? q[i] - (i == 0 ? prev : q[i - 1]) : q[i];
    const uint32_t neg = d < 0;
    sign |= neg << i;
    mags[i] = neg ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
    all |= mags[i];
  }
  return write_planes_scalar(sign, mags, all, words);
}

// Inverse of pack: reads the sign + len planes at `src` and prefix-sums the deltas from `carry`,
// handing each lane's code to sink(i, code); carry becomes the last code (!kLorenzo: the signed
// magnitudes are the codes; carry is left alone). Integer arithmetic wraps (uint32) so a hostile
// stream cannot cause undefined behaviour.
template <bool kLorenzo = true, class Sink>
inline void unpack_codes_scalar_with(const uint8_t* src, int len, int32_t& carry, Sink&& sink) {
  uint32_t acc = static_cast<uint32_t>(carry);
  if (len == 0) {
    for (int i = 0; i < kLen; ++i) sink(i, kLorenzo ? carry : 0);
    return;
  }
  uint32_t words[33];  // read one by one: a copy of variable length compiles to `rep movsq`
  for (int j = 0; j <= len; ++j) std::memcpy(&words[j], src + 4 * j, 4);
  for (int i = 0; i < kLen; ++i) {
    uint32_t mag = 0;
    for (int j = 0; j < len; ++j) mag |= ((words[1 + j] >> i) & 1u) << j;
    const uint32_t d = ((words[0] >> i) & 1u) ? 0u - mag : mag;
    acc = kLorenzo ? acc + d : d;
    sink(i, static_cast<int32_t>(acc));
  }
  if (kLorenzo) carry = static_cast<int32_t>(acc);
}

// Reconstructs the values of a packed block: out[i] = S(C(code) * bin).
template <class K, bool kLorenzo = true>
inline void unpack_scalar(const uint8_t* src, int len, int32_t& carry, typename K::C bin,
                          typename K::S* out) {
  using C = typename K::C;
  unpack_codes_scalar_with<kLorenzo>(src, len, carry, [&](int i, int32_t code) {
    out[i] = K::narrow(static_cast<C>(code) * bin);
  });
}

// The codes of a packed block, as integers (the integer-domain reductions, fzcodes.h).
template <bool kLorenzo = true>
inline void unpack_codes_scalar(const uint8_t* src, int len, int32_t& carry, int32_t* q) {
  unpack_codes_scalar_with<kLorenzo>(src, len, carry, [q](int i, int32_t code) { q[i] = code; });
}

// The code length L that pack<kLorenzo>(q, prev, ...) returns, without writing any plane: the
// encoder sizes a chunk both ways before it packs one (SIMD versions below).
template <bool kLorenzo = true>
inline int code_length_scalar(const int32_t* q, int32_t prev) {
  uint32_t all = 0;
  for (int i = 0; i < kLen; ++i) {
    const int32_t d = kLorenzo ? q[i] - (i == 0 ? prev : q[i - 1]) : q[i];
    all |= d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
  }
  return all == 0 ? 0 : 32 - __builtin_clz(all);
}

// Bit length of |q[0]| | |q[31]|: a lower bound of a block's direct code length (two lanes).
inline int ends_length_scalar(const int32_t* q) {
  const auto mag = [](int32_t v) { return v < 0 ? 0u - static_cast<uint32_t>(v) : static_cast<uint32_t>(v); };
  const uint32_t m = mag(q[0]) | mag(q[kLen - 1]);
  return m == 0 ? 0 : 32 - __builtin_clz(m);
}

#if defined(__AVX2__)
// --------------------------------------------------------------------------------------------
// AVX2 kernels. Same arithmetic as the scalar ones, lane by lane.

// Eight half values widened to float32 lanes (exact), and float32 lanes rounded to nearest-even
// into the half type and widened back (the value the decoder writes, as float32).
template <class K>
inline __m256 load8_widen(const typename K::S* x);
template <class K>
inline __m256 round_trip8(__m256 v);
template <class K>
inline __m128i narrow8(__m256 v);

template <>
inline __m256 load8_widen<KindF32>(const float* x) { return _mm256_loadu_ps(x); }
template <>
inline __m256 round_trip8<KindF32>(__m256 v) { return v; }

template <>
inline __m128i narrow8<KindBF16>(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);  // never NaN here: reconstructions are finite or Inf
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(b, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  // Pack the eight 32-bit lanes (each < 2^16) into eight 16-bit values, in order.
  const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  return _mm_packus_epi32(lo, hi);
}
template <>
inline __m256 load8_widen<KindBF16>(const uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <>
inline __m256 round_trip8<KindBF16>(__m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(narrow8<KindBF16>(v)), 16));
}

#if defined(__F16C__)
template <>
inline __m128i narrow8<KindF16>(__m256 v) {
  return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
template <>
inline __m256 load8_widen<KindF16>(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
template <>
inline __m256 round_trip8<KindF16>(__m256 v) { return _mm256_cvtph_ps(narrow8<KindF16>(v)); }
#else
// AVX2 without F16C (rare): the scalar conversions, lane by lane.
template <>
inline __m128i narrow8<KindF16>(__m256 v) {
  alignas(32) float f[8];
  alignas(16) uint16_t h[8];
  _mm256_store_ps(f, v);
  for (int i = 0; i < 8; ++i) h[i] = float_to_half_rne(f[i]);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(h));
}
template <>
inline __m256 load8_widen<KindF16>(const uint16_t* x) {
  alignas(32) float f[8];
  for (int i = 0; i < 8; ++i) f[i] = half_to_float(x[i]);
  return _mm256_load_ps(f);
}
template <>
inline __m256 round_trip8<KindF16>(__m256 v) {
  alignas(16) uint16_t h[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(h), narrow8<KindF16>(v));
  return load8_widen<KindF16>(h);
}
#endif

// The lanes of 8 (scaled, rounded) pairs that pass the test at kSureLimit. The slack is taken
// as max(|s|, 1) 2^-22 (larger, so still sound): |s| 2^-22 of a small |s| is subnormal, and
// subnormal results cost a microcode assist each (the wavefield's near-zero values made the
// shortcut 25 % slower than the float64 check it skips).
inline uint32_t sure_lanes8(__m256 scaled, __m256 rounded) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 d = _mm256_and_ps(_mm256_sub_ps(scaled, rounded), abs_mask);
  const __m256 at_least_one = _mm256_max_ps(_mm256_and_ps(scaled, abs_mask), _mm256_set1_ps(1.0f));
  const __m256 slack = _mm256_mul_ps(at_least_one, _mm256_set1_ps(0x1p-22f));
  return static_cast<uint32_t>(_mm256_movemask_ps(
      _mm256_cmp_ps(_mm256_add_ps(d, slack), _mm256_set1_ps(kSureLimit), _CMP_LE_OQ)));
}

#if defined(__AVX512F__)
// sure_lanes8 on 16 lanes: the same operations, the mask of the lanes that pass.
ZCCL_AVX512_INLINE __mmask16 sure_lanes16(__m512 scaled, __m512 rounded) {
  const __m512 d = _mm512_abs_ps(_mm512_sub_ps(scaled, rounded));
  const __m512 at_least_one =
      _mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(scaled), _mm512_set1_ps(1.0f));
  const __m512 slack = _mm512_mul_ps(at_least_one, _mm512_set1_ps(0x1p-22f));
  return _mm512_cmp_ps_mask(_mm512_add_ps(d, slack), _mm512_set1_ps(kSureLimit), _CMP_LE_OQ);
}
#endif

// 8 float32-computed lanes (float32, or halves widened): returns the 8-bit mask of lanes to store
// exactly; writes 8 codes. The reconstruction is checked as the decoder will store it.
template <class K>
inline uint32_t quantize8(const typename K::S* x, const Quantizer<float>& qz, int32_t* q) {
  const __m256 v = load8_widen<K>(x);
  const __m256 scaled = _mm256_mul_ps(v, _mm256_set1_ps(qz.inv_bin));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 in_range =
      _mm256_cmp_ps(_mm256_and_ps(scaled, abs_mask), _mm256_set1_ps(kCodeLimit<float>), _CMP_LT_OQ);
  const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 safe = _mm256_and_ps(rounded, in_range);  // NaN/huge lanes become 0
  const __m256i code = _mm256_cvttps_epi32(safe);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), code);
  const __m256 recon = round_trip8<K>(
      materialize(_mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(qz.bin))));
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

// float32 values: the codes of 32 lanes when every lane passes the shortcut (kSureLimit), i.e.
// none needs the float64 check; false (codes unspecified) otherwise. A lane that passes has
// |s| < 2^21, far inside kCodeLimit, and is not NaN, so no range check is needed.
ZCCL_AVX512_INLINE bool quantize_sure32(const float* x, const Quantizer<float>& qz,
                                         int32_t* q) {
#if defined(__AVX512F__)
  const __m512 inv = _mm512_set1_ps(qz.inv_bin);
  __mmask16 sure = 0xFFFF;
  for (int k = 0; k < 2; ++k) {
    const __m512 scaled = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), inv);
    const __m512 rounded =
        _mm512_maskz_roundscale_ps(0xFFFF, scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_si512(q + 16 * k, _mm512_maskz_cvttps_epi32(0xFFFF, rounded));
    sure &= sure_lanes16(scaled, rounded);
  }
  return sure == 0xFFFF;
#else
  const __m256 inv = _mm256_set1_ps(qz.inv_bin);
  uint32_t sure = 0;
  for (int k = 0; k < 4; ++k) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), inv);
    const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * k), _mm256_cvttps_epi32(rounded));
    sure |= sure_lanes8(scaled, rounded) << (8 * k);
  }
  return sure == ~0u;
#endif
}

template <class K, std::enable_if_t<std::is_same_v<typename K::C, float>, int> = 0>
inline uint32_t quantize(const typename K::S* x, const Quantizer<float>& qz, int32_t* q) {
  if constexpr (std::is_same_v<typename K::S, float>) {
    if (qz.sure_path && quantize_sure32(x, qz, q)) return 0;  // same codes as quantize8's
  }
  uint32_t bad = 0;
  for (int k = 0; k < 4; ++k) bad |= quantize8<K>(x + 8 * k, qz, q + 8 * k) << (8 * k);
  return bad;
}

template <class K, std::enable_if_t<std::is_same_v<K, KindF64>, int> = 0>
inline uint32_t quantize(const double* x, const Quantizer<double>& qz, int32_t* q) {
  uint32_t bad = 0;
  for (int k = 0; k < 8; ++k) bad |= quantize4(x + 4 * k, qz, q + 4 * k) << (4 * k);
  return bad;
}

#if defined(__AVX512F__)
// Two 256-bit halves joined, and one half taken back. The masked forms with a zero source are
// used because GCC 12's plain ones (cast, zext, insert, extract) start from an "undefined"
// register that -Wmaybe-uninitialized reports.
inline __m512i join512(__m256i low, __m256i high) {
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_mask_inserti64x4(zero, 0xFF, _mm512_mask_inserti64x4(zero, 0xFF, zero, low, 0),
                                 high, 1);
}
template <int kHalf>
inline __m256i half256(__m512i v) {
  return _mm512_maskz_extracti64x4_epi64(0xFF, v, kHalf);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__GFNI__)
#define ZCCL_GFNI_PLANES 1
// Bit planes by 8x8 bit-matrix transposes (GFNI's affine transform, AVX512-VBMI's byte
// permutes): a block's 32 magnitudes and its planes are the same 32 x len bit matrix, read by
// rows or by columns. The plane loops below cost a few instructions per plane; these cost a few
// per 16 planes. A qword is an 8x8 matrix, one byte per row; gf2p8affine(unit, A) makes byte k of
// the result from bit k of every row of A (row 7 - i into bit i), so the tables put rows in
// reverse order to get the plain transpose. Same streams as every other path (core_test
// --digest compares the builds).
namespace planes {

struct Table {
  alignas(64) uint8_t at[64];
};

// Planes 16h .. 16h+15 as loaded (byte 4w + g: plane w's bits of values 8g .. 8g+7) -> qword
// 4b + g holding those 8 bytes of planes 8b .. 8b+7, in reverse plane order.
constexpr Table rows_of_planes() {
  Table t{};
  for (int b = 0; b < 2; ++b)
    for (int g = 0; g < 4; ++g)
      for (int i = 0; i < 8; ++i) {
        t.at[8 * (4 * b + g) + 7 - i] = static_cast<uint8_t>(4 * (8 * b + i) + g);
      }
  return t;
}
// Transposed planes (byte 32b + v: byte b of value v's magnitude, planes 0-15 in the first
// register, 16-31 in the second) -> the magnitudes of values 16h .. 16h+15, 4 bytes each.
constexpr Table magnitudes_of_bytes(int h) {
  Table t{};
  for (int v = 0; v < 16; ++v)
    for (int b = 0; b < 4; ++b) {
      t.at[4 * v + b] = static_cast<uint8_t>(64 * (b / 2) + 32 * (b % 2) + 16 * h + v);
    }
  return t;
}
// Magnitudes (values 0-15 in the first register, 16-31 in the second) -> qword 4(b-2h) + g
// holding byte b of values 8g .. 8g+7, in reverse value order (bytes 2h and 2h+1).
constexpr Table rows_of_values(int h) {
  Table t{};
  for (int b = 2 * h; b < 2 * h + 2; ++b)
    for (int g = 0; g < 4; ++g)
      for (int i = 0; i < 8; ++i) {
        const int v = 8 * g + i;
        t.at[8 * (4 * (b - 2 * h) + g) + 7 - i] =
            static_cast<uint8_t>(64 * (v / 16) + 4 * (v % 16) + b);
      }
  return t;
}
// Transposed magnitudes (qword 4b + g, byte k: plane 8b+k's bits of values 8g .. 8g+7) -> plane
// words, byte 4(8b + k) + g.
constexpr Table words_of_rows() {
  Table t{};
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 8; ++k)
      for (int g = 0; g < 4; ++g) {
        t.at[4 * (8 * b + k) + g] = static_cast<uint8_t>(8 * (4 * b + g) + k);
      }
  return t;
}

inline constexpr Table kRowsOfPlanes = rows_of_planes();
inline constexpr Table kMagnitudesLow = magnitudes_of_bytes(0);
inline constexpr Table kMagnitudesHigh = magnitudes_of_bytes(1);
inline constexpr Table kRowsOfValuesLow = rows_of_values(0);
inline constexpr Table kRowsOfValuesHigh = rows_of_values(1);
inline constexpr Table kWordsOfRows = words_of_rows();

// The masked forms with every byte selected: GCC 12's plain ones warn (see join512).
inline constexpr __mmask64 kAll = ~0ULL;

// Bytes of `v` picked by table `t`.
inline __m512i permute(const Table& t, __m512i v) {
  return _mm512_maskz_permutexvar_epi8(kAll, _mm512_load_si512(t.at), v);
}
// Bytes of the 128-byte pair (a, b) picked by table `t`.
inline __m512i permute2(const Table& t, __m512i a, __m512i b) {
  return _mm512_maskz_permutex2var_epi8(kAll, a, _mm512_load_si512(t.at), b);
}

// Every qword's 8x8 bit matrix transposed, rows taken in reverse order (see above).
inline __m512i transpose8x8(__m512i rows) {
  const __m512i unit = _mm512_set1_epi64(0x8040201008040201LL);
  return _mm512_maskz_gf2p8affine_epi64_epi8(kAll, unit, rows, 0);
}

// The first min(n, 16) of 16 dwords.
inline __mmask16 first(int n) {
  return _cvtu32_mask16(n >= 16 ? 0xFFFFu : (1u << (n > 0 ? n : 0)) - 1u);
}

// Up to 16 plane words at `src` (only the first n are read) -> 32 bytes per group of 8 planes.
inline __m512i load_transposed(const uint8_t* src, int n) {
  return transpose8x8(permute(kRowsOfPlanes, _mm512_maskz_loadu_epi32(first(n), src)));
}

// The len planes at `src` (unaligned; nothing past them is read) -> the 32 magnitudes, values
// 0-15 in lo and 16-31 in hi.
ZCCL_AVX512_INLINE void to_magnitudes(const uint8_t* src, int len, __m512i& lo, __m512i& hi) {
  const __m512i low = load_transposed(src, len);
  const __m512i high = len > 16 ? load_transposed(src + 64, len - 16) : _mm512_setzero_si512();
  lo = permute2(kMagnitudesLow, low, high);
  hi = permute2(kMagnitudesHigh, low, high);
}

// Inverse: the magnitudes (all below 2^len) -> len plane words at `dst` (nothing past them is
// written).
ZCCL_AVX512_INLINE void from_magnitudes(__m512i lo, __m512i hi, int len, uint8_t* dst) {
  const __m512i low = transpose8x8(permute2(kRowsOfValuesLow, lo, hi));
  _mm512_mask_storeu_epi32(dst, first(len), permute(kWordsOfRows, low));
  if (len > 16) {
    const __m512i high = transpose8x8(permute2(kRowsOfValuesHigh, lo, hi));
    _mm512_mask_storeu_epi32(dst + 64, first(len - 16), permute(kWordsOfRows, high));
  }
}

}  // namespace planes
#endif

// The OR of 8 lanes: the horizontal OR of a block's magnitudes decides its code length.
inline uint32_t or_of_lanes(__m256i v) {
  __m128i r = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  r = _mm_or_si128(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_or_si128(r, _mm_shuffle_epi32(r, 0xB1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(r));
}

#if !defined(__AVX512F__)
// Lorenzo deltas of lanes 8k .. 8k+7 (`cur`), called for k = 0..3 in turn: each lane's previous
// code is the codes shifted up by one lane across the 32; `carry` holds the previous group's
// last code in every lane (prev, broadcast, before k = 0) and is advanced to cur's.
inline __m256i lorenzo_deltas8(__m256i cur, __m256i& carry) {
  const __m256i before = _mm256_blend_epi32(
      _mm256_permutevar8x32_epi32(cur, _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6)), carry, 0x01);
  carry = _mm256_permutevar8x32_epi32(cur, _mm256_set1_epi32(7));
  return _mm256_sub_epi32(cur, before);
}

// code_length_scalar, eight lanes at a time, each lane's previous code formed in registers as
// pack_regs does: loads at q + 8k - 1 would span two of the 32-byte stores quantize() made, which
// store forwarding cannot serve (the AVX-512 version below says what that cost).
template <bool kLorenzo = true>
inline int code_length(const int32_t* q, int32_t prev) {
  __m256i all = _mm256_setzero_si256();
  __m256i carry = _mm256_set1_epi32(prev);
  for (int k = 0; k < 4; ++k) {
    const __m256i cur = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * k));
    const __m256i d = kLorenzo ? lorenzo_deltas8(cur, carry) : cur;
    all = _mm256_or_si256(all, _mm256_abs_epi32(d));
  }
  const uint32_t any = or_of_lanes(all);
  return any == 0 ? 0 : 32 - __builtin_clz(any);
}

// ends_length_scalar from the 32-byte halves quantize() stored (for the same reason).
inline int ends_length(const int32_t* q) {
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i last = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 24));
  const uint32_t m = static_cast<uint32_t>(_mm256_extract_epi32(_mm256_abs_epi32(first), 0)) |
                     static_cast<uint32_t>(_mm256_extract_epi32(_mm256_abs_epi32(last), 7));
  return m == 0 ? 0 : 32 - __builtin_clz(m);
}
#endif

#if defined(__AVX512F__)
// The OR of the 32 lanes of lo and hi.
inline uint32_t or_of_lanes16(__m512i lo, __m512i hi) {
  const __m512i all = _mm512_or_si512(lo, hi);
  return or_of_lanes(_mm256_or_si256(half256<0>(all), half256<1>(all)));
}

// The sign plane and L magnitude planes of a block (magnitudes of lanes 0-15 in mlo, 16-31 in
// mhi; L = bit length of `any`, their OR) into words; returns L (0: nothing written).
ZCCL_AVX512_INLINE int write_planes16(uint32_t sign, __m512i mlo, __m512i mhi, uint32_t any,
                                      uint8_t* words) {
  if (any == 0) return 0;
  const int len = 32 - __builtin_clz(any);
  store_word(words, 0, sign);
#if defined(ZCCL_GFNI_PLANES)
  planes::from_magnitudes(mlo, mhi, len, words + 4);
#else
  // One mask test per 16 lanes and plane (the AVX2 loop below needs four movemasks and four
  // shifts per plane for the 32 lanes).
  for (int j = len - 1; j >= 0; --j) {
    const __m512i bit = _mm512_set1_epi32(static_cast<int>(1u << j));
    store_word(words, 1 + j,
               static_cast<uint32_t>(_cvtmask16_u32(_mm512_test_epi32_mask(mlo, bit))) |
                   static_cast<uint32_t>(_cvtmask16_u32(_mm512_test_epi32_mask(mhi, bit))) << 16);
  }
#endif
  return len;
}

// Codes of lanes 0-15 (lo) and 16-31 (hi) to their Lorenzo deltas, in place: each lane's
// previous code is the codes shifted up by one lane across the 32, prev in lane 0.
ZCCL_AVX512_INLINE void lorenzo_deltas16(int32_t prev, __m512i& lo, __m512i& hi) {
  const __m512i before_lo = _mm512_maskz_alignr_epi32(0xFFFF, lo, _mm512_set1_epi32(prev), 15);
  hi = _mm512_sub_epi32(hi, _mm512_maskz_alignr_epi32(0xFFFF, hi, lo, 15));
  lo = _mm512_sub_epi32(lo, before_lo);
}

// pack() on codes in registers: lanes 0-15 in lo, 16-31 in hi.
template <bool kLorenzo = true>
ZCCL_AVX512_INLINE int pack16x2(__m512i lo, __m512i hi, int32_t prev, uint8_t* words) {
  __m512i dlo = lo, dhi = hi;
  if constexpr (kLorenzo) lorenzo_deltas16(prev, dlo, dhi);
  const __m512i zero = _mm512_setzero_si512();
  const uint32_t sign = _cvtmask16_u32(_mm512_cmplt_epi32_mask(dlo, zero)) |
                        _cvtmask16_u32(_mm512_cmplt_epi32_mask(dhi, zero)) << 16;
  const __m512i mlo = _mm512_maskz_abs_epi32(0xFFFF, dlo);
  const __m512i mhi = _mm512_maskz_abs_epi32(0xFFFF, dhi);
  return write_planes16(sign, mlo, mhi, or_of_lanes16(mlo, mhi), words);
}

// pack() on codes already in registers: lanes 8k .. 8k+7 in codes[k].
template <bool kLorenzo = true>
ZCCL_AVX512_INLINE int pack_regs(const __m256i* codes, int32_t prev, uint8_t* words) {
  return pack16x2<kLorenzo>(join512(codes[0], codes[1]), join512(codes[2], codes[3]), prev, words);
}

template <bool kLorenzo = true>
ZCCL_AVX512_INLINE int pack(const int32_t* q, int32_t prev, uint8_t* words) {
  return pack16x2<kLorenzo>(_mm512_loadu_si512(q), _mm512_loadu_si512(q + 16), prev, words);
}

// code_length_scalar with pack16x2's arithmetic. The block is read as the two 64-byte halves
// quantize() stored, the deltas formed in registers: the AVX2 version's loads at q + 8k - 1 span
// two of those stores, cannot be forwarded from them, and stalled the encoder (the other kind's
// length, sized for every block: +34 % on the ring hop of noise, where the codes were just
// stored).
template <bool kLorenzo = true>
ZCCL_AVX512_INLINE int code_length(const int32_t* q, int32_t prev) {
  __m512i dlo = _mm512_loadu_si512(q), dhi = _mm512_loadu_si512(q + 16);
  if constexpr (kLorenzo) lorenzo_deltas16(prev, dlo, dhi);
  const uint32_t any = or_of_lanes16(_mm512_maskz_abs_epi32(0xFFFF, dlo),
                                     _mm512_maskz_abs_epi32(0xFFFF, dhi));
  return any == 0 ? 0 : 32 - __builtin_clz(any);
}

// ends_length_scalar from the block's two 64-byte halves, for the reason code_length reads
// them whole: a 4-byte load of q[31] out of the 64-byte store quantize() made stalled the
// encoder (a third of its time on the wavefield's ring hop).
ZCCL_AVX512_INLINE int ends_length(const int32_t* q) {
  const __m512i lo = _mm512_loadu_si512(q), hi = _mm512_loadu_si512(q + 16);
  // Lane 0: q[31], lane 1: q[0]. (The maskz_ forms: GCC 12 warns of the plain ones' undefined
  // pass-through operand.)
  const __m512i ends = _mm512_maskz_abs_epi32(0x3, _mm512_maskz_alignr_epi32(0x3, lo, hi, 15));
  const __m256i low = half256<0>(ends);
  const uint32_t m = static_cast<uint32_t>(_mm256_extract_epi32(low, 0)) |
                     static_cast<uint32_t>(_mm256_extract_epi32(low, 1));
  return m == 0 ? 0 : 32 - __builtin_clz(m);
}
#else
// The sign plane and L magnitude planes of a block (magnitudes of lanes 8k .. 8k+7 in mag[k];
// L = bit length of `any`, their OR) into words; returns L (0: nothing written). mag is
// consumed.
inline int write_planes8(uint32_t sign, __m256i* mag, uint32_t any, uint8_t* words) {
  if (any == 0) return 0;
  const int len = 32 - __builtin_clz(any);
  store_word(words, 0, sign);
  // Short codes: the 32 magnitudes narrowed to bytes (len <= 8) or 16-bit words (len <= 16), in
  // lane order, bit len-1 at the top of each; a plane is then one movemask of the bytes (of
  // their signed-saturated pack, for words) instead of four, and a doubling per element moves to
  // the next plane. Same planes as below, fewer instructions per plane.
  if (len <= 16) {
    const __m128i shift = _mm_cvtsi32_si128((len <= 8 ? 8 : 16) - len);
    __m256i m[4];
    for (int k = 0; k < 4; ++k) m[k] = _mm256_sll_epi32(mag[k], shift);
    if (len <= 8) {
      // packus: [m0 0-3, m1 0-3 | m0 4-7, m1 4-7] and the same of m2, m3, then bytes
      // [m0 0-3, m1 0-3, m2 0-3, m3 0-3 | m0 4-7, ...]: dwords 0,4,1,5,2,6,3,7 are lane order.
      __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(m[0], m[1]), _mm256_packus_epi32(m[2], m[3]));
      b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      for (int j = len - 1; j >= 0; --j) {
        store_word(words, 1 + j, static_cast<uint32_t>(_mm256_movemask_epi8(b)));
        b = _mm256_add_epi8(b, b);
      }
      return len;
    }
    // Words [m0 0-7 | m2 0-7] and [m1 0-7 | m3 0-7]: their signed pack is lanes 0-31 in order,
    // each byte's sign that of its word (saturation keeps the sign).
    __m256i a = _mm256_permute4x64_epi64(_mm256_packus_epi32(m[0], m[2]), 0xD8);
    __m256i c = _mm256_permute4x64_epi64(_mm256_packus_epi32(m[1], m[3]), 0xD8);
    for (int j = len - 1; j >= 0; --j) {
      store_word(words, 1 + j, static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_packs_epi16(a, c))));
      a = _mm256_add_epi16(a, a);
      c = _mm256_add_epi16(c, c);
    }
    return len;
  }
  // Move bit len-1 to the sign position, then walk down one plane per doubling.
  const __m128i shift = _mm_cvtsi32_si128(32 - len);
  for (int k = 0; k < 4; ++k) mag[k] = _mm256_sll_epi32(mag[k], shift);
  for (int j = len - 1; j >= 0; --j) {
    uint32_t w = 0;
    for (int k = 0; k < 4; ++k) {
      w |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(mag[k]))) << (8 * k);
      mag[k] = _mm256_add_epi32(mag[k], mag[k]);
    }
    store_word(words, 1 + j, w);
  }
  return len;
}

// pack() on codes already in registers: lanes 8k .. 8k+7 in codes[k].
template <bool kLorenzo = true>
inline int pack_regs(const __m256i* codes, int32_t prev, uint8_t* words) {
  __m256i mag[4];
  uint32_t sign = 0;
  __m256i all = _mm256_setzero_si256();
  __m256i carry = _mm256_set1_epi32(prev);
  for (int k = 0; k < 4; ++k) {
    const __m256i delta = kLorenzo ? lorenzo_deltas8(codes[k], carry) : codes[k];
    sign |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(delta))) << (8 * k);
    mag[k] = _mm256_abs_epi32(delta);
    all = _mm256_or_si256(all, mag[k]);
  }
  return write_planes8(sign, mag, or_of_lanes(all), words);
}

template <bool kLorenzo = true>
inline int pack(const int32_t* q, int32_t prev, uint8_t* words) {
  __m256i codes[4];
  for (int k = 0; k < 4; ++k) {
    codes[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * k));
  }
  return pack_regs<kLorenzo>(codes, prev, words);
}
#endif

// Inclusive prefix sum of 8 int32 lanes plus `carry` (broadcast); wraps like uint32.
inline __m256i scan8(__m256i x, __m256i carry) {
  x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
  x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
  const __m256i low_total = _mm256_permutevar8x32_epi32(x, _mm256_set1_epi32(3));
  x = _mm256_add_epi32(x, _mm256_blend_epi32(_mm256_setzero_si256(), low_total, 0xF0));
  return _mm256_add_epi32(x, carry);
}

#if defined(__AVX512F__)
// Inclusive prefix sum of 16 int32 lanes (wrapping like uint32): four shifted adds.
inline __m512i scan16(__m512i x) {
  const __m512i zero = _mm512_setzero_si512();
  x = _mm512_add_epi32(x, _mm512_maskz_alignr_epi32(0xFFFF, x, zero, 15));
  x = _mm512_add_epi32(x, _mm512_maskz_alignr_epi32(0xFFFF, x, zero, 14));
  x = _mm512_add_epi32(x, _mm512_maskz_alignr_epi32(0xFFFF, x, zero, 12));
  return _mm512_add_epi32(x, _mm512_maskz_alignr_epi32(0xFFFF, x, zero, 8));
}
#endif

template <class K>
inline void store_codes(__m256i codes, float bin, uint16_t* out) {
  const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(bin));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), narrow8<K>(v));
}

template <class K>
inline void store_codes(__m256i codes, float bin, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(bin)));
}

template <class K>
inline void store_codes(__m256i codes, double bin, double* out) {
  const __m256d b = _mm256_set1_pd(bin);
  _mm256_storeu_pd(out, _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(codes)), b));
  _mm256_storeu_pd(out + 4,
                   _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(codes, 1)), b));
}

#if defined(__AVX512F__)
// The codes of a packed block, sixteen lanes at a time: sink16(h, codes of lanes 16h .. 16h+15).
template <bool kLorenzo = true, class Sink16>
ZCCL_AVX512_INLINE void unpack_codes16_with(const uint8_t* src, int len, int32_t& carry,
                                            Sink16&& sink16) {
  if (len == 0) {
    const __m512i same = _mm512_set1_epi32(kLorenzo ? carry : 0);
    sink16(0, same);
    sink16(1, same);
    return;
  }
  __m512i lo, hi;  // the magnitudes of lanes 0-15 and 16-31
  uint32_t sign;
  std::memcpy(&sign, src, 4);
#if defined(ZCCL_GFNI_PLANES)
  planes::to_magnitudes(src + 4, len, lo, hi);
#else
  // 16 lanes per register: each plane is one masked OR per register instead of a broadcast,
  // a variable shift, an AND and an OR per 8 lanes.
  // (Each plane read in place: copying the variable-length planes out first compiles to
  // `rep movsq`, slow to start for a few words.)
  const __m512i one512 = _mm512_set1_epi32(1);
  lo = _mm512_setzero_si512();
  hi = _mm512_setzero_si512();
  for (int j = len - 1; j >= 0; --j) {
    uint32_t w;
    std::memcpy(&w, src + 4 + 4 * j, 4);
    const __m512i lo2 = _mm512_add_epi32(lo, lo), hi2 = _mm512_add_epi32(hi, hi);
    lo = _mm512_mask_or_epi32(lo2, _cvtu32_mask16(w & 0xFFFFu), lo2, one512);
    hi = _mm512_mask_or_epi32(hi2, _cvtu32_mask16(w >> 16), hi2, one512);
  }
#endif
  const __m512i zero512 = _mm512_setzero_si512();
  lo = _mm512_mask_sub_epi32(lo, _cvtu32_mask16(sign & 0xFFFFu), zero512, lo);
  hi = _mm512_mask_sub_epi32(hi, _cvtu32_mask16(sign >> 16), zero512, hi);
  if constexpr (!kLorenzo) {  // a direct block: the signed magnitudes are the codes
    sink16(0, lo);
    sink16(1, hi);
    return;
  }
  // Prefix sums inside the block first, the carry added last: from block to block only
  // carry += total depends on the previous block (the 8-lane scans chained a cross-lane permute
  // per 8 lanes).
  lo = scan16(lo);
  const __m512i low_total = _mm512_maskz_permutexvar_epi32(0xFFFF, _mm512_set1_epi32(15), lo);
  hi = _mm512_add_epi32(scan16(hi), low_total);
  const uint32_t total =
      static_cast<uint32_t>(_mm512_cvtsi512_si32(_mm512_maskz_alignr_epi32(0xFFFF, hi, hi, 15)));
  const __m512i base = _mm512_set1_epi32(carry);
  lo = _mm512_add_epi32(lo, base);
  hi = _mm512_add_epi32(hi, base);
  sink16(0, lo);
  sink16(1, hi);
  carry = static_cast<int32_t>(static_cast<uint32_t>(carry) + total);
}

// The same, eight lanes at a time: sink(k, codes of lanes 8k .. 8k+7).
template <bool kLorenzo = true, class Sink>
ZCCL_AVX512_INLINE void unpack_codes_with(const uint8_t* src, int len, int32_t& carry, Sink&& sink) {
  unpack_codes16_with<kLorenzo>(src, len, carry, [&](int h, __m512i codes) {
    sink(2 * h, half256<0>(codes));
    sink(2 * h + 1, half256<1>(codes));
  });
}
#else
// Word w's 32 bits as 32 bytes in lane order: 0xFF where the bit is set, else 0.
inline __m256i bit_bytes(uint32_t w) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(w)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                       3, 3, 3, 3, 3, 3));
  const __m256i bits = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
}

// Bytes 8k .. 8k+7 of v as eight int32 lanes, zero-extended (magnitudes) or sign-extended
// (0 / -1 masks), for k = 0..3.
template <bool kSigned>
inline void widen_bytes(__m256i v, __m256i* out) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    out[k] = kSigned ? _mm256_cvtepi8_epi32(parts[k]) : _mm256_cvtepu8_epi32(parts[k]);
  }
}

// The codes of a packed block, eight lanes at a time: sink(k, codes of lanes 8k .. 8k+7).
// Codes of up to 8 (16) bits are gathered in bytes (16-bit words) across all 32 lanes, each plane
// spread to one byte per lane by one shuffle and compare; longer ones lane group by lane group.
template <bool kLorenzo = true, class Sink>
inline void unpack_codes_with(const uint8_t* src, int len, int32_t& carry, Sink&& sink) {
  if (len == 0) {
    const __m256i same = _mm256_set1_epi32(kLorenzo ? carry : 0);
    for (int k = 0; k < 4; ++k) sink(k, same);
    return;
  }
  // Plane j's word (0: signs), read in place: copying the variable-length planes out first
  // compiled to `rep movsq`, half of the AVX2 decoder's time.
  const auto word = [src](int j) {
    uint32_t w;
    std::memcpy(&w, src + 4 * j, 4);
    return w;
  };
  __m256i mag[4];
  if (len <= 8) {
    __m256i acc = _mm256_setzero_si256();  // doubling, then +1 where the plane's bit is set
    for (int j = len - 1; j >= 0; --j) {
      acc = _mm256_sub_epi8(_mm256_add_epi8(acc, acc), bit_bytes(word(1 + j)));
    }
    widen_bytes<false>(acc, mag);
  } else if (len <= 16) {
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();  // lanes 0-15, 16-31
    for (int j = len - 1; j >= 0; --j) {
      const __m256i set = bit_bytes(word(1 + j));
      lo = _mm256_sub_epi16(_mm256_add_epi16(lo, lo), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(set)));
      hi = _mm256_sub_epi16(_mm256_add_epi16(hi, hi), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(set, 1)));
    }
    mag[0] = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(lo));
    mag[1] = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(lo, 1));
    mag[2] = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(hi));
    mag[3] = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(hi, 1));
  } else {
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int k = 0; k < 4; ++k) {
      const __m256i idx = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * k));
      mag[k] = _mm256_setzero_si256();
      for (int j = len - 1; j >= 0; --j) {
        const __m256i bit = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word(1 + j))), idx), one);
        mag[k] = _mm256_or_si256(_mm256_add_epi32(mag[k], mag[k]), bit);
      }
    }
  }
  __m256i neg[4];  // -1 in the lanes whose sign bit is set
  widen_bytes<true>(bit_bytes(word(0)), neg);
  __m256i acc = _mm256_set1_epi32(carry);
  for (int k = 0; k < 4; ++k) {
    const __m256i delta = _mm256_sub_epi32(_mm256_xor_si256(mag[k], neg[k]), neg[k]);
    if constexpr (!kLorenzo) {  // a direct block: the signed magnitudes are the codes
      sink(k, delta);
      continue;
    }
    const __m256i codes = scan8(delta, acc);
    sink(k, codes);
    acc = _mm256_permutevar8x32_epi32(codes, _mm256_set1_epi32(7));
  }
  if (kLorenzo) carry = _mm256_cvtsi256_si32(acc);
}
#endif

template <class K, bool kLorenzo = true>
ZCCL_AVX512_INLINE void unpack(const uint8_t* src, int len, int32_t& carry, typename K::C bin,
                               typename K::S* out) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<K, KindF32>) {  // 16 lanes per conversion, product and store
    const __m512 b = _mm512_set1_ps(bin);
    unpack_codes16_with<kLorenzo>(src, len, carry, [&](int h, __m512i codes) {
      _mm512_storeu_ps(out + 16 * h, _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, codes), b));
    });
    return;
  }
#endif
  unpack_codes_with<kLorenzo>(src, len, carry,
                              [&](int k, __m256i codes) { store_codes<K>(codes, bin, out + 8 * k); });
}

template <bool kLorenzo = true>
ZCCL_AVX512_INLINE void unpack_codes(const uint8_t* src, int len, int32_t& carry, int32_t* q) {
#if defined(__AVX512F__)
  unpack_codes16_with<kLorenzo>(src, len, carry,
                                [q](int h, __m512i codes) { _mm512_storeu_si512(q + 16 * h, codes); });
#else
  unpack_codes_with<kLorenzo>(src, len, carry, [q](int k, __m256i codes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * k), codes);
  });
#endif
}

#else

template <class K>
inline uint32_t quantize(const typename K::S* x, const Quantizer<typename K::C>& qz, int32_t* q) {
  return quantize_scalar<K>(x, qz, q);
}
template <bool kLorenzo = true>
inline int pack(const int32_t* q, int32_t prev, uint8_t* words) {
  return pack_scalar<kLorenzo>(q, prev, words);
}
template <bool kLorenzo = true>
inline int code_length(const int32_t* q, int32_t prev) {
  return code_length_scalar<kLorenzo>(q, prev);
}
inline int ends_length(const int32_t* q) { return ends_length_scalar(q); }
template <class K, bool kLorenzo = true>
inline void unpack(const uint8_t* src, int len, int32_t& carry, typename K::C bin,
                   typename K::S* out) {
  unpack_scalar<K, kLorenzo>(src, len, carry, bin, out);
}
template <bool kLorenzo = true>
inline void unpack_codes(const uint8_t* src, int len, int32_t& carry, int32_t* q) {
  unpack_codes_scalar<kLorenzo>(src, len, carry, q);
}

#endif

}  // namespace zccl::fz::block
