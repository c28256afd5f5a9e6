// Elementwise reduction kernels of the computation framework (sum / min / max of float32 and
// float64, division for AVG). Internal to csrc/collectives.
//
// Determinism: every kernel computes out[i] = f(a[i], b[i]) with a fixed operand order and no
// reassociation, so two ranks that reduce the same two inputs get bit-identical outputs (what the
// allreduce algorithms rely on to keep replicas identical). OpenMP only splits the index range,
// which changes nothing in the values.
//
// NaN: SUM propagates NaN through IEEE addition (Inf + -Inf = NaN as usual). MIN and MAX also
// propagate NaN (unlike std::min/MPI_MIN, whose result depends on the operand order): if a[i] is
// NaN the result is a[i], else if b[i] is NaN it is b[i]. On ties (including -0 vs +0) MIN and
// MAX return a[i].
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "collectives.h"

namespace zccl::coll::kernels {

// Below this many values a parallel region costs more than the loop.
inline constexpr size_t kParallelMin = size_t{1} << 16;

inline int kernel_threads(int threads, size_t n) {
  if (n < kParallelMin) return 1;
  const int t = threads > 0 ? threads : omp_get_max_threads();
  const size_t units = n / kParallelMin;
  return static_cast<int>(units < static_cast<size_t>(t) ? (units == 0 ? 1 : units) : t);
}

template <class T>
inline T sum_op(T a, T b) {
  return a + b;
}
template <class T>
inline T min_op(T a, T b) {
  // a != a: NaN test that stays correct without -ffast-math assumptions.
  return a != a ? a : (b != b ? b : (b < a ? b : a));
}
template <class T>
inline T max_op(T a, T b) {
  return a != a ? a : (b != b ? b : (b > a ? b : a));
}

template <class T, T (*F)(T, T)>
inline void apply(T* out, const T* a, const T* b, size_t n, int threads) {
  const int nt = kernel_threads(threads, n);
  if (nt <= 1) {
    for (size_t i = 0; i < n; ++i) out[i] = F(a[i], b[i]);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out[i] = F(a[i], b[i]);
}

// out[i] = op(a[i], b[i]); out may alias a or b (elementwise). AVG reduces like SUM (the
// division by p happens once, at the end, in `divide`).
template <class T>
inline void reduce_into(T* out, const T* a, const T* b, size_t n, ReduceOp op, int threads) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: apply<T, sum_op<T>>(out, a, b, n, threads); return;
    case ReduceOp::Min: apply<T, min_op<T>>(out, a, b, n, threads); return;
    case ReduceOp::Max: apply<T, max_op<T>>(out, a, b, n, threads); return;
  }
}

// x[i] /= p (correctly rounded division, so the AVG of identical sums is identical everywhere).
template <class T>
inline void divide(T* x, size_t n, int p, int threads) {
  const T d = static_cast<T>(p);
  const int nt = kernel_threads(threads, n);
  if (nt <= 1) {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] / d;
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) x[i] = x[i] / d;
}

}  // namespace zccl::coll::kernels
