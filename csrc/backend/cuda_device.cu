// The CUDA device of the zccl backend (device.h; built only with ZCCL_WITH_CUDA, by nvcc).
//
// Stream semantics (what DDP relies on):
//   * every CUDA op runs on a backend-owned stream per device (from torch's stream pool);
//   * on the caller's thread, an event recorded on the caller's current stream makes the backend
//     stream wait, so kernels the caller enqueued before the collective are seen by it;
//   * recordStream marks every tensor the op touches as used on the backend stream, so the
//     caching allocator does not hand its memory out while the op may still use it;
//   * the Work's future is created with the device and completed with the backend stream
//     current: it records an event there, and wait()/then()/value() make the consumer's current
//     stream wait on it.
// Float payloads over the threshold are compressed on the device (gpu_collectives/) in all_reduce
// (float16/bfloat16 staged as float32) and in broadcast, all_gather and scatter of float32/64:
// uncompressed data never leaves the GPU. reduce, reduce_scatter, gather, all_to_all, send/recv
// and half-precision data movement run the CPU's compressed collectives on pinned host copies
// (op_bodies.cpp, p2p.cpp). Other dtypes and payloads below the
// threshold move exactly: device pointers straight to MPI when it is CUDA-aware, else through a
// pinned host copy (these bytes are not compressible, so the round trip costs no more than the
// wire itself).
#ifdef ZCCL_WITH_CUDA

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "../gpu_collectives/gpu_collectives.h"
#include "device.h"
#include "routing.h"

namespace zccl::backend {
namespace {

// The current backend stream (the worker runs every CUDA body under a CUDAStreamGuard).
gpu::GpuStream current_stream() {
  return reinterpret_cast<gpu::GpuStream>(c10::cuda::getCurrentCUDAStream().stream());
}

class CudaDevice final : public Device {
 public:
  void check_tensor(const at::Tensor& t, const char* what) const override {
    if (!t.is_cuda()) {
      throw std::invalid_argument(std::string("zccl: ") + what + ": tensor is on " +
                                  t.device().str() + ", the others on CUDA");
    }
    if (t.layout() != at::kStrided) {
      throw std::invalid_argument(std::string("zccl: ") + what + ": sparse tensors are not supported");
    }
    (void)moved_as(t.scalar_type());  // throws for dtypes no collective moves (complex128, uint4, ...)
  }

  std::optional<c10::Stream> prepare(const std::vector<at::Tensor>& tensors) override {
    if (tensors.empty()) return std::nullopt;
    const c10::Device device = tensors[0].device();
    for (const auto& t : tensors) {
      if (t.device() != device) {
        throw std::invalid_argument("zccl: tensors on different devices (" + device.str() + " and " +
                                    t.device().str() + ")");
      }
    }
    const c10::cuda::CUDAStream stream = stream_of(device.index());
    // The backend stream waits for what the caller enqueued so far.
    c10::Event ready(c10::DeviceType::CUDA);
    ready.record(c10::cuda::getCurrentCUDAStream(device.index()));
    ready.block(stream);
    for (const auto& t : tensors) {
      if (t.has_storage() && t.storage().data_ptr().get() != nullptr) {
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
      }
    }
    return stream;
  }

  void run(const std::optional<c10::Stream>& stream, const std::function<void()>& body) override {
    if (!stream) {
      body();
      return;
    }
    c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, *stream));
    body();
  }

  bool widens_halves() const override { return true; }

  coll::Device kind() const override { return coll::Device::Cuda; }

  // The gZ collectives (gpu_collectives/): all_reduce (half tensors staged as float32), and
  // broadcast, all_gather and scatter of float32/float64 (their streams keep the tensor's type;
  // half tensors take the CPU's half streams, which hold the bound in the half type). The op
  // bodies run everything else with the CPU's collectives on pinned host copies.
  bool compresses(DeviceOp op, at::ScalarType dtype) const override {
    const bool wide = dtype == at::kFloat || dtype == at::kDouble;
    return op == DeviceOp::AllReduce ||
           (wide && (op == DeviceOp::Broadcast || op == DeviceOp::AllGather ||
                     op == DeviceOp::Scatter));
  }

  fz::FiniteRange value_range(const at::Tensor& t, int) override {
    // The range of a half tensor is taken on its (exact) float32 widening.
    if (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) {
      return value_range(t.to(at::kFloat), 0);
    }
    const fz::DType dt = compressed_dtype(t.scalar_type());
    const uint64_t n = static_cast<uint64_t>(t.numel());
    // Scratch from the caching allocator (no cudaMalloc once warm) and a pinned result word.
    const size_t ws_bytes = gpu::workspace_bytes(dt, n == 0 ? 1 : n);
    at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, t.options().dtype(at::kByte));
    at::Tensor result = at::empty({static_cast<int64_t>(sizeof(gpu::RangeResult))},
                                  at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    auto* out = reinterpret_cast<gpu::RangeResult*>(result.data_ptr());
    gpu::finite_range(t.data_ptr(), dt, n, ws.data_ptr(), ws_bytes, current_stream(), out);
    c10::cuda::getCurrentCUDAStream().synchronize();
    fz::FiniteRange r;
    r.min = out->min;
    r.max = out->max;
    r.any_finite = out->any_finite != 0;
    return r;
  }

  at::Tensor host_view(const at::Tensor& t, bool read, bool device_ok) override {
    if (device_ok) {
      c10::cuda::getCurrentCUDAStream().synchronize();  // the transport reads device memory: data must be there
      return t;
    }
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
    if (read) host.copy_(t);  // synchronous D2H: the transport or codec needs the bytes now
    return host;
  }

  void from_host(at::Tensor& t, const at::Tensor& host) override {
    if (!host.is_same(t)) t.copy_(host, /*non_blocking=*/true);  // the pinned allocator keeps host alive
  }

  void allreduce(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt, coll::ReduceOp op,
                 const coll::Config& cfg, coll::Stats* stats) override {
    gpucoll::allreduce(comm, workspace(), buf, n, dt, op, cfg, current_stream(), stats);
  }
  void broadcast(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt, int root,
                 const coll::Config& cfg, coll::Stats* stats) override {
    gpucoll::broadcast(comm, workspace(), buf, n, dt, root, cfg, current_stream(), stats);
  }
  void allgather(transport::Comm& comm, const void* in, void* out, uint64_t n, fz::DType dt,
                 const coll::Config& cfg, coll::Stats* stats) override {
    gpucoll::allgather(comm, workspace(), in, out, n, dt, cfg, current_stream(), stats);
  }
  void scatter(transport::Comm& comm, const std::vector<const void*>& blocks, void* out,
               uint64_t n, fz::DType dt, int root, const coll::Config& cfg,
               coll::Stats* stats) override {
    gpucoll::scatter(comm, workspace(), blocks, out, n, dt, root, cfg, current_stream(), stats);
  }

 private:
  c10::cuda::CUDAStream stream_of(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = streams_.find(device);
    if (it == streams_.end()) {
      it = streams_.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
    }
    return it->second;
  }

  // The current device's workspace (worker thread only: the stream guard made it current).
  gpucoll::GpuWorkspace& workspace() {
    auto& ws = workspaces_[c10::cuda::current_device()];
    if (!ws) ws = std::make_unique<gpucoll::GpuWorkspace>();
    return *ws;
  }

  std::mutex mutex_;  // streams_: created on callers' threads
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams_;
  std::map<c10::DeviceIndex, std::unique_ptr<gpucoll::GpuWorkspace>> workspaces_;  // worker only
};

}  // namespace

bool cuda_device_built() { return true; }
std::unique_ptr<Device> make_cuda_device() { return std::make_unique<CudaDevice>(); }

}  // namespace zccl::backend

#endif  // ZCCL_WITH_CUDA
