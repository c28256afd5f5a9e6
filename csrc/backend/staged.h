// Helpers shared by the CPU and CUDA op bodies of the backend: the staged buffer of the
// compressed path and the REL-bound arithmetic. Device-agnostic (ATen ops run on the current
// stream, so on the CUDA path they are ordered on the backend stream).
#pragma once

#include <ATen/ATen.h>

#include <cmath>

namespace zccl::backend {

// The buffer a collective works on: a float32 widening of half types when `widen_half` (the
// reductions, which accumulate in float32), the tensor itself when it is contiguous and
// `own_copy` is false, a contiguous copy otherwise (own_copy: the buffer is changed before the
// call may still be refused, as PREMUL_SUM's factor is applied). write_back() copies it back.
struct Staged {
  at::Tensor original;
  at::Tensor buffer;
  explicit Staged(const at::Tensor& t, bool widen_half, bool own_copy = false) : original(t) {
    const bool half = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
    if (widen_half && half) {
      buffer = t.to(at::kFloat).contiguous();  // always a new tensor
    } else if (own_copy) {
      buffer = t.clone(at::MemoryFormat::Contiguous);
    } else {
      buffer = t.contiguous();
    }
  }
  void write_back() {
    if (!buffer.is_same(original)) original.copy_(buffer.view(original.sizes()));
  }
};

// rel * (hi - lo), computed so that a range wider than the double range still gives a finite
// bound; 0 (store exactly) when there is no finite value (lo > hi).
inline double rel_bound(double rel, double lo, double hi) {
  if (!(lo <= hi)) return 0.0;
  const double range = hi - lo;
  return std::isfinite(range) ? rel * range : rel * hi - rel * lo;
}

}  // namespace zccl::backend
