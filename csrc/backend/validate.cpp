#include "validate.h"

#include "device.h"

#include <stdexcept>
#include <string>

#include "routing.h"

namespace zccl::backend {

void check_cpu_dense(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu()) {
    if (t.is_cuda() && cuda_device_built()) {
      throw std::invalid_argument(std::string("zccl: ") + what + ": tensor is on " +
                                  t.device().str() + " where a CPU tensor is expected (an op's "
                                  "tensors must all be on one device)");
    }
    throw std::invalid_argument(std::string("zccl: ") + what + ": tensor is on " +
                                t.device().str() + "; this build of the zccl backend handles CPU "
                                "tensors only");
  }
  if (t.layout() != at::kStrided) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": sparse tensors are not supported");
  }
  (void)moved_as(t.scalar_type());  // throws for dtypes no collective moves (complex128, uint4, ...)
}

void check_single(const std::vector<at::Tensor>& tensors, const char* what) {
  if (tensors.size() != 1) {
    throw std::invalid_argument(std::string("zccl: ") + what + " takes exactly one tensor per call, got " +
                                std::to_string(tensors.size()));
  }
}

void check_root(int64_t root, int size, const char* what) {
  if (root < 0 || root >= size) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": root " + std::to_string(root) +
                                " is not a rank of this group (size " + std::to_string(size) + ")");
  }
}

// Output `a` against input `b`: same dtype, size, device, dense layout (a mismatch would make the
// op write a wrong number of bytes into `a`).
void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  if (a.device() != b.device() || a.layout() != at::kStrided) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": an output tensor is a " +
                                (a.layout() == at::kStrided ? "dense" : "sparse") + " tensor on " +
                                a.device().str() + ", the input a dense tensor on " + b.device().str());
  }
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel()) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": tensors must share dtype and size (" +
                                c10::toString(a.scalar_type()) + "[" + std::to_string(a.numel()) + "] vs " +
                                c10::toString(b.scalar_type()) + "[" + std::to_string(b.numel()) + "])");
  }
}

// all_gather_into_tensor: output holds world_size * input.numel() values of the input's dtype.
void check_all_gather_into(const at::Tensor& output, const at::Tensor& input, int p, const char* what) {
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * p) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": the output must hold world_size * input.numel() = " +
                                std::to_string(input.numel() * p) + " elements of the input's dtype " +
                                c10::toString(input.scalar_type()) + ", got " +
                                c10::toString(output.scalar_type()) + "[" + std::to_string(output.numel()) + "]");
  }
}

// reduce_scatter_tensor: input holds world_size * output.numel() values of the output's dtype.
void check_reduce_scatter_into(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op,
                               int p, const char* what) {
  validate_reduce(op, input.scalar_type(), what);
  if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * p) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": the input must hold world_size * output.numel() = " +
                                std::to_string(output.numel() * p) + " elements of the output's dtype " +
                                c10::toString(output.scalar_type()) + ", got " +
                                c10::toString(input.scalar_type()) + "[" + std::to_string(input.numel()) + "]");
  }
}

void check_sparse(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  const bool served = t.device().is_cpu() || (t.is_cuda() && cuda_device_built());
  if (!served || t.layout() != at::kSparse) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": sparse all_reduce takes one sparse "
                                "COO tensor on the CPU" + (cuda_device_built() ? " or CUDA" : "") +
                                ", got a " + t.device().str() + " tensor");
  }
  if (op.op_ != c10d::ReduceOp::SUM) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": sparse tensors support ReduceOp.SUM "
                                "only (as with Gloo), got ReduceOp." + op_name(op.op_));
  }
  validate_reduce(op, t.scalar_type(), what);  // a sum: dtypes with arithmetic only
  const at::ScalarType type = t.scalar_type();
  if (type == at::kUInt16 || type == at::kUInt32 || type == at::kUInt64) {
    // Summing sparse tensors is torch's coalesce, which has no kernel for these.
    throw std::invalid_argument(std::string("zccl: ") + what + ": sparse tensors of " +
                                c10::toString(type) + " cannot be summed (torch's coalesce has "
                                "no kernel for unsigned 16/32/64-bit integers)");
  }
}


}  // namespace zccl::backend
