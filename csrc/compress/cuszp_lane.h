// Per-value and per-warp arithmetic of the GPU codec (cuszp_kernels.cuh), as __host__ __device__
// functions so the CPU tests (tests/cuda/) can check the exact operations the kernels run
// against the CPU encoder: the quantiser, the warp bit transpose, the reduce ops.
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

#include "crc32c_combine.h"  // ZCCL_HD

namespace zccl::gpu::lane {

#if defined(__CUDA_ARCH__)
__device__ inline float mul_rn_f32(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ inline double widen_f32(float a) {
  double r;
  asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(a));
  return r;
}
#endif

template <class T>
struct Arith;

template <>
struct Arith<float> {
  using Bits = uint32_t;
  static constexpr float kCodeLimit = 1073741760.0f;  // = fz::block::kCodeLimit<float>
  static ZCCL_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return mul_rn_f32(a, b);
#else
    return a * b;
#endif
  }
  static ZCCL_HD float abs(float a) {
#if defined(__CUDA_ARCH__)
    return fabsf(a);
#else
    return std::fabs(a);
#endif
  }
  // rint then convert: in range (|s| < 2^30) the two agree with fzlight's nearbyint + cast.
  static ZCCL_HD int32_t round_to_code(float s) {
#if defined(__CUDA_ARCH__)
    return __float2int_rn(s);
#else
    return static_cast<int32_t>(std::nearbyint(s));
#endif
  }
  static ZCCL_HD float from_code(int32_t q) {
#if defined(__CUDA_ARCH__)
    return __int2float_rn(q);
#else
    return static_cast<float>(q);
#endif
  }
  // |x - r| in double (exact conversions, one rounded subtraction).
  static ZCCL_HD double err(float x, float r) {
#if defined(__CUDA_ARCH__)
    return fabs(__dsub_rn(widen_f32(x), widen_f32(r)));
#else
    return std::fabs(static_cast<double>(x) - static_cast<double>(r));
#endif
  }
};

template <>
struct Arith<double> {
  using Bits = uint64_t;
  static constexpr double kCodeLimit = 1073741760.0;
  static ZCCL_HD double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
  }
  static ZCCL_HD double abs(double a) {
#if defined(__CUDA_ARCH__)
    return fabs(a);
#else
    return std::fabs(a);
#endif
  }
  static ZCCL_HD int32_t round_to_code(double s) {
#if defined(__CUDA_ARCH__)
    return __double2int_rn(s);
#else
    return static_cast<int32_t>(std::nearbyint(s));
#endif
  }
  static ZCCL_HD double from_code(int32_t q) {
#if defined(__CUDA_ARCH__)
    return __int2double_rn(q);
#else
    return static_cast<double>(q);
#endif
  }
  static ZCCL_HD double err(double x, double r) {
#if defined(__CUDA_ARCH__)
    return fabs(__dsub_rn(x, r));
#else
    return std::fabs(x - r);
#endif
  }
};

// fzlight_block.h's quantize_one: code q = rint(x * inv_bin) when |x * inv_bin| < kCodeLimit and
// the reconstruction q * bin is within eb of x (checked in double). Returns false for a value to
// store exactly (NaN, Inf, code overflow, or a reconstruction that would miss eb); q is then 0.
template <class T>
ZCCL_HD inline bool quantize(T x, T inv_bin, T bin, double eb, int32_t& q) {
  using A = Arith<T>;
  const T scaled = A::mul(x, inv_bin);
  q = 0;
  if (!(A::abs(scaled) < A::kCodeLimit)) return false;
  const int32_t code = A::round_to_code(scaled);
  const T recon = A::mul(A::from_code(code), bin);
  if (!(A::err(x, recon) <= eb)) return false;
  q = code;
  return true;
}

// The decoder's reconstruction of a code: T(q) * bin.
template <class T>
ZCCL_HD inline T reconstruct(int32_t q, T bin) {
  return Arith<T>::mul(Arith<T>::from_code(q), bin);
}

// Bytes a 32-value block with code length L occupies in the payload (sign plane + L planes).
ZCCL_HD constexpr uint32_t block_bytes(uint32_t len) { return len == 0 ? 0u : 4u * (len + 1u); }

// One stage of a 32x32 bit-matrix transpose across a warp (lane r holds row r; bit c is column
// c). At stage s (16, 8, 4, 2, 1) lanes r and r^s swap the off-diagonal s x s blocks of their
// 2s x 2s block: the lower lane (bit s of r clear) keeps its columns with bit s clear and takes
// the partner's columns with bit s clear into its columns with bit s set; the upper lane the
// reverse. After the five stages lane c holds column c. Used both ways: magnitudes -> bit planes
// (encoder) and bit planes -> magnitudes (decoder).
ZCCL_HD constexpr uint32_t transpose_keep_mask(int s) {
  return s == 16 ? 0x0000FFFFu
         : s == 8 ? 0x00FF00FFu
         : s == 4 ? 0x0F0F0F0Fu
         : s == 2 ? 0x33333333u
                  : 0x55555555u;
}

ZCCL_HD constexpr uint32_t transpose_stage(uint32_t mine, uint32_t partner, int s, bool upper) {
  const uint32_t low = transpose_keep_mask(s);  // columns with bit s clear
  return upper ? (((partner >> s) & low) | (mine & ~low)) : ((mine & low) | ((partner << s) & ~low));
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
