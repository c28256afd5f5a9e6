// Per-value and per-warp arithmetic of the GPU codec (cuszp_kernels.cuh), as __host__ __device__
// functions so the CPU tests (tests/cuda/) can check the exact operations the kernels run
// against the CPU encoder: the storage kinds, the quantiser, the warp bit transpose, the reduce ops.
//
// Rounding is explicit: on the device every product is a round-to-nearest multiply that is never
// contracted into an FMA (which would verify a value the decoder never reconstructs), codes are
// rounded to nearest-even by the conversion instruction; on the host the same operations are
// plain IEEE arithmetic (the tests build with -ffp-contract=off), exactly what fzlight_block.h
// does. The float32 multiply and the float32 -> float64 widening are written in PTX without .ftz
// so that a build with -ftz=true or --use_fast_math cannot flush subnormals and change the bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "crc32c_combine.h"  // ZCCL_HD
#include "fzlight_block.h"   // the host's half conversions (float_to_half_rne, ...)
#include "fzlight_format.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace zccl::gpu::lane {

#if defined(__CUDA_ARCH__)
// The device side of Arith, by type: every rounding explicit, nothing contracted into an FMA.
__device__ inline float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float abs_of(float a) { return fabsf(a); }
__device__ inline double abs_of(double a) { return fabs(a); }
__device__ inline int32_t round_rn(float s) { return __float2int_rn(s); }
__device__ inline int32_t round_rn(double s) { return __double2int_rn(s); }
__device__ inline void from_int_rn(int32_t q, float& r) { r = __int2float_rn(q); }
__device__ inline void from_int_rn(int32_t q, double& r) { r = __int2double_rn(q); }
__device__ inline double widen_rn(float a) {
  double r;
  asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(a));
  return r;
}
__device__ inline double widen_rn(double a) { return a; }
#endif

// The quantiser's arithmetic in T (float or double): on the device the functions above, on the
// host plain IEEE arithmetic.
template <class T>
struct Arith {
  static constexpr T kCodeLimit = fz::block::kCodeLimit<T>;
  static ZCCL_HD T mul(T a, T b) {
#if defined(__CUDA_ARCH__)
    return mul_rn(a, b);
#else
    return a * b;
#endif
  }
  static ZCCL_HD T abs(T a) {
#if defined(__CUDA_ARCH__)
    return abs_of(a);
#else
    return std::fabs(a);
#endif
  }
  // rint then convert: in range (|s| < 2^30) the two agree with fzlight's nearbyint + cast.
  static ZCCL_HD int32_t round_to_code(T s) {
#if defined(__CUDA_ARCH__)
    return round_rn(s);
#else
    return static_cast<int32_t>(std::nearbyint(s));
#endif
  }
  static ZCCL_HD T from_code(int32_t q) {
#if defined(__CUDA_ARCH__)
    T r;
    from_int_rn(q, r);
    return r;
#else
    return static_cast<T>(q);
#endif
  }
  // |x - r| in double (exact conversions, one rounded subtraction).
  static ZCCL_HD double err(T x, T r) {
#if defined(__CUDA_ARCH__)
    return fabs(__dsub_rn(widen_rn(x), widen_rn(r)));
#else
    return std::fabs(static_cast<double>(x) - static_cast<double>(r));
#endif
  }
};

// ------------------------------------------------------------------------------------------
// Storage kinds (fzlight_block.h's KindF32/KindF64/KindF16/KindBF16). A kind K names how a value
// is stored (S: its bits, sizeof(S) bytes in the stream) and computed (C): float32 and float64 in
// themselves, float16 and bfloat16 in float32 (widening is exact). The decoder writes
// narrow(C(q) * bin), rounded to nearest-even into the half type; the encoder verifies exactly
// that value against eb. Values travel as bits, so NaN payloads and signed zeros survive.
struct Half {};      // IEEE binary16 (stream dtype 3)
struct BFloat16 {};  // bfloat16 (stream dtype 4)

#if defined(__CUDA_ARCH__)
__device__ inline void cast_bits(uint32_t b, float& f) { f = __uint_as_float(b); }
__device__ inline void cast_bits(float f, uint32_t& b) { b = __float_as_uint(f); }
__device__ inline void cast_bits(uint64_t b, double& d) { d = __longlong_as_double(static_cast<long long>(b)); }
__device__ inline void cast_bits(double d, uint64_t& b) { b = static_cast<uint64_t>(__double_as_longlong(d)); }
#endif
// The value whose bits `v` holds (a same-size reinterpretation): the device's register moves, the
// host's memcpy.
template <class To, class From>
ZCCL_HD inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of one size");
  To out;
#if defined(__CUDA_ARCH__)
  cast_bits(v, out);
#else
  std::memcpy(&out, &v, sizeof(To));
#endif
  return out;
}
ZCCL_HD inline float f32_of_bits(uint32_t b) { return bit_cast<float>(b); }
ZCCL_HD inline uint32_t bits_of_f32(float f) { return bit_cast<uint32_t>(f); }

// float32 -> bfloat16 bits, round to nearest even, for any non-NaN input (subnormals, infinities
// and overflow to infinity included): integer arithmetic, so the device gives the CPU's bits
// (fz::block::float_to_bf16_rne) on every architecture. Equal to __float2bfloat16_rn except for
// NaN inputs, which the codec never narrows (reconstructions are finite or infinite).
ZCCL_HD constexpr uint16_t bf16_round_bits(uint32_t f) {
  return static_cast<uint16_t>((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

template <class K>
struct Kind;

template <>
struct Kind<float> {
  using S = uint32_t;
  using C = float;
  static constexpr uint8_t kDType = 1;
  static ZCCL_HD C widen(S b) { return f32_of_bits(b); }
  static ZCCL_HD S narrow(C v) { return bits_of_f32(v); }
};

template <>
struct Kind<double> {
  using S = uint64_t;
  using C = double;
  static constexpr uint8_t kDType = 2;
  static ZCCL_HD C widen(S b) { return bit_cast<double>(b); }
  static ZCCL_HD S narrow(C v) { return bit_cast<uint64_t>(v); }
};

template <>
struct Kind<Half> {
  using S = uint16_t;
  using C = float;
  static constexpr uint8_t kDType = 3;
  static ZCCL_HD C widen(S b) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(b));  // exact
#else
    return fz::block::half_to_float(b);
#endif
  }
  static ZCCL_HD S narrow(C v) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(v));  // cvt.rn.f16.f32: IEEE round to nearest even
#else
    return fz::block::float_to_half_rne(v);
#endif
  }
};

template <>
struct Kind<BFloat16> {
  using S = uint16_t;
  using C = float;
  static constexpr uint8_t kDType = 4;
  static ZCCL_HD C widen(S b) { return f32_of_bits(static_cast<uint32_t>(b) << 16); }  // exact
  static ZCCL_HD S narrow(C v) {
#if defined(__CUDA_ARCH__)
    return bf16_round_bits(bits_of_f32(v));
#else
    return fz::block::float_to_bf16_rne(v);
#endif
  }
};

template <class K>
inline constexpr bool kIsHalf = sizeof(typename Kind<K>::S) == 2;

// The quantiser on stored bits: fzlight_block.h's quantize_one (float32/float64) and
// quantize_one_half (float16/bfloat16, whose reconstruction is narrowed before the check).
// Returns false for a value to store exactly (NaN, Inf, code overflow, or a reconstruction that
// would miss eb); q is then 0.
template <class K>
ZCCL_HD inline bool quantize_bits(typename Kind<K>::S x, typename Kind<K>::C inv_bin,
                                  typename Kind<K>::C bin, double eb, int32_t& q) {
  using C = typename Kind<K>::C;
  using A = Arith<C>;
  const C xv = Kind<K>::widen(x);
  const C scaled = A::mul(xv, inv_bin);
  q = 0;
  if (!(A::abs(scaled) < A::kCodeLimit)) return false;
  const int32_t code = A::round_to_code(scaled);
  C recon = A::mul(A::from_code(code), bin);
  if constexpr (kIsHalf<K>) recon = Kind<K>::widen(Kind<K>::narrow(recon));
  if (!(A::err(xv, recon) <= eb)) return false;
  q = code;
  return true;
}

// The decoder's value for a code: narrow(C(q) * bin), as stored bits.
template <class K>
ZCCL_HD inline typename Kind<K>::S reconstruct_bits(int32_t q, typename Kind<K>::C bin) {
  using A = Arith<typename Kind<K>::C>;
  return Kind<K>::narrow(A::mul(A::from_code(q), bin));
}

// The same on values, for float and double (the host tests call it with values).
template <class T>
ZCCL_HD inline bool quantize(T x, T inv_bin, T bin, double eb, int32_t& q) {
  return quantize_bits<T>(Kind<T>::narrow(x), inv_bin, bin, eb, q);
}

// The decoder's reconstruction of a code as a value: T(q) * bin.
template <class T>
ZCCL_HD inline T reconstruct(int32_t q, T bin) {
  return Kind<T>::widen(reconstruct_bits<T>(q, bin));
}

// Bytes of a chunk's block bitmap, versions >= 2 (fzlight_format.h's bitmap_bytes, for the device).
ZCCL_HD constexpr uint32_t bitmap_bytes(uint32_t nblocks) { return (nblocks + 7) / 8; }
static_assert(bitmap_bytes(161) == fz::format::bitmap_bytes(161), "bitmap size as in fzlight_format.h");

// Bytes a 32-value block with code length L occupies in the payload (sign plane + L planes).
ZCCL_HD constexpr uint32_t block_bytes(uint32_t len) { return len == 0 ? 0u : 4u * (len + 1u); }

// One stage of a 32x32 bit-matrix transpose across a warp (lane r holds row r; bit c is column
// c). At stage s (16, 8, 4, 2, 1) lanes r and r^s swap the off-diagonal s x s blocks of their
// 2s x 2s block: the lower lane (bit s of r clear) keeps its columns with bit s clear and takes
// the partner's columns with bit s clear into its columns with bit s set; the upper lane the
// reverse. After the five stages lane c holds column c. Used both ways: magnitudes -> bit planes
// (encoder) and bit planes -> magnitudes (decoder).
//
// Written as one rotate and one bitwise select per lane, (mine & keep) | (rotl(partner) & ~keep),
// so that the lower and the upper lane run the same instructions with their own constants (a
// lower lane rotates left by s, an upper lane right by s, i.e. left by 32 - s; the rotation
// moves no bit into a kept column, which the host test checks against the definition): three
// instructions per stage with the shuffle, where a branch on the lane's half costs both paths.
ZCCL_HD constexpr uint32_t transpose_low_mask(int s) {
  return s == 16 ? 0x0000FFFFu
         : s == 8 ? 0x00FF00FFu
         : s == 4 ? 0x0F0F0F0Fu
         : s == 2 ? 0x33333333u
                  : 0x55555555u;
}
ZCCL_HD constexpr uint32_t transpose_keep(unsigned lane, int s) {
  return (lane & static_cast<unsigned>(s)) != 0 ? ~transpose_low_mask(s) : transpose_low_mask(s);
}
ZCCL_HD constexpr unsigned transpose_rot(unsigned lane, int s) {
  return (lane & static_cast<unsigned>(s)) != 0 ? 32u - static_cast<unsigned>(s) : static_cast<unsigned>(s);
}
// x rotated left by r (1..31).
ZCCL_HD inline uint32_t rotl32(uint32_t x, unsigned r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(x, x, r);
#else
  return (x << r) | (x >> (32u - r));
#endif
}
ZCCL_HD inline uint32_t transpose_stage(uint32_t mine, uint32_t partner, uint32_t keep, unsigned rot) {
  return (mine & keep) | (rotl32(partner, rot) & ~keep);
}

// The CPU's reduce ops (csrc/collectives/reduce_kernels.h) on values, deciding which operand's
// bits to return for MIN/MAX so NaN payloads survive: true means "take b".
template <class T>
ZCCL_HD inline bool min_takes_b(T a, T b) {
  return !(a != a) && ((b != b) || b < a);
}
template <class T>
ZCCL_HD inline bool max_takes_b(T a, T b) {
  return !(a != a) && ((b != b) || b > a);
}

}  // namespace zccl::gpu::lane
