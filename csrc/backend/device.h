// What an op body of the zccl backend needs from the device its tensors live on. The op bodies
// (op_bodies.cpp) are written once against this interface; CpuDevice (cpu_device.cpp) and
// CudaDevice (cuda_device.cu, CUDA builds only) implement it. Following c10d's Gloo backend,
// which writes an op once and lets its CUDA variant override only staging and stream sync.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <c10/core/Stream.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../collectives/collectives.h"

namespace zccl::backend {

// The compressed collectives; a device's `compresses()` says which it runs itself.
enum class DeviceOp : uint8_t {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  Gather,
  Scatter,
  AllToAll,
};

class Device {
 public:
  virtual ~Device() = default;

  // ---- caller's thread ----
  // Throws std::invalid_argument naming `what` unless `t` is a dense tensor of this device of a
  // dtype the transport moves.
  virtual void check_tensor(const at::Tensor& t, const char* what) const = 0;
  // Orders the op after what the caller enqueued on `tensors` and returns the stream the op runs
  // on (nullopt: no streams on this device).
  virtual std::optional<c10::Stream> prepare(const std::vector<at::Tensor>& tensors) = 0;

  // ---- worker thread ----
  // Runs `body` with `stream` (prepare's result) current.
  virtual void run(const std::optional<c10::Stream>& stream, const std::function<void()>& body) = 0;
  // Whether the reductions send float32 streams for float16/bfloat16 tensors (they always
  // accumulate in float32) instead of rounding each partial result to a half stream.
  virtual bool widens_halves() const = 0;
  // Which collectives run the compressed calls (coll::route() takes it into account).
  virtual coll::Device kind() const = 0;
  // Whether this device has its own compressed `op` for tensors of `dtype` (for the reductions:
  // the float32/float64 staging of a half tensor). The op bodies run the CPU device's on host
  // copies of the buffers where it has not. Data movement is never widened: a half tensor widened
  // to float32, compressed within eb and rounded back can miss eb by half a unit of the half type.
  virtual bool compresses(DeviceOp op, at::ScalarType dtype) const = 0;
  // Finite min/max of a contiguous floating tensor.
  virtual fz::FiniteRange value_range(const at::Tensor& t, int threads) = 0;
  // A tensor holding `t`'s bytes for whoever reads them next (the exact transport, the CPU's
  // codec): `t` itself where that reader can read it (host memory; device memory too with
  // `device_ok`, for a transport that reads it: Comm::device_memory()), else a host copy
  // (filled from `t` when `read`). from_host() writes it back into `t`; it does nothing when
  // host_view returned `t` itself.
  virtual at::Tensor host_view(const at::Tensor& t, bool read, bool device_ok) = 0;
  virtual void from_host(at::Tensor& t, const at::Tensor& host) = 0;

  // The compressed collectives (collectives.h has their contracts); `dt` is the staged buffer's
  // type. Those a device does not have (compresses()) are never asked for: they throw.
  virtual void allreduce(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt,
                         coll::ReduceOp op, const coll::Config& cfg, coll::Stats* stats) = 0;
  virtual void reduce(transport::Comm&, void*, uint64_t, fz::DType, coll::ReduceOp, int,
                      const coll::Config&, coll::Stats*) {
    missing("reduce");
  }
  virtual void broadcast(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt, int root,
                         const coll::Config& cfg, coll::Stats* stats) = 0;
  virtual void allgather(transport::Comm& comm, const void* in, void* out, uint64_t n,
                         fz::DType dt, const coll::Config& cfg, coll::Stats* stats) = 0;
  virtual void reduce_scatter(transport::Comm&, const void*, void*, uint64_t, fz::DType,
                              coll::ReduceOp, const coll::Config&, coll::Stats*) {
    missing("reduce_scatter");
  }
  virtual void gather(transport::Comm&, const void*, void*, uint64_t, fz::DType, int,
                      const coll::Config&, coll::Stats*) {
    missing("gather");
  }
  virtual void scatter(transport::Comm& comm, const std::vector<const void*>& blocks, void* out,
                       uint64_t n, fz::DType dt, int root, const coll::Config& cfg,
                       coll::Stats* stats) = 0;
  virtual void alltoallv(transport::Comm&, const void*, const std::vector<size_t>&,
                         const std::vector<size_t>&, void*, const std::vector<size_t>&,
                         const std::vector<size_t>&, fz::DType, const coll::Config&,
                         coll::Stats*) {
    missing("all_to_all");
  }

 private:
  [[noreturn]] static void missing(const char* op) {
    throw std::logic_error(std::string("zccl: this device has no compressed ") + op);
  }
};

std::unique_ptr<Device> make_cpu_device();
// Whether this build has the CUDA device (ZCCL_WITH_CUDA).
bool cuda_device_built();
// Throws when the extension was built without its CUDA path.
std::unique_ptr<Device> make_cuda_device();

}  // namespace zccl::backend
