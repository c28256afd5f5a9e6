// Validation of torch's arguments on the caller's thread, before anything is queued: each
// check throws std::invalid_argument (Python ValueError) naming the op and the problem, so bad
// input never reaches a collective that would write the wrong number of bytes.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <vector>

namespace zccl::backend {

// A dense CPU tensor of a dtype the transport can move (the CPU device's tensor check).
void check_cpu_dense(const at::Tensor& t, const char* what);
// Exactly one tensor (its device and dtype are checked by the device that serves it).
void check_single(const std::vector<at::Tensor>& tensors, const char* what);
// A rank of a group of `size` (roots, peers).
void check_root(int64_t root, int size, const char* what);
// Output `a` against input `b`: same dtype, element count, device, dense layout.
void check_same(const at::Tensor& a, const at::Tensor& b, const char* what);
// all_gather_into_tensor: output holds world_size * input.numel() values of the input's dtype.
void check_all_gather_into(const at::Tensor& output, const at::Tensor& input, int p, const char* what);
// reduce_scatter_tensor: input holds world_size * output.numel() values of the output's dtype.
void check_reduce_scatter_into(const at::Tensor& output, const at::Tensor& input,
                               const c10d::ReduceOp& op, int p, const char* what);
// Sparse all_reduce: one sparse COO CPU tensor, SUM.
void check_sparse(const at::Tensor& t, const c10d::ReduceOp& op, const char* what);

}  // namespace zccl::backend
