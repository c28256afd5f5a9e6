// The zccl backend's path for CUDA tensors (built only with ZCCL_WITH_CUDA; compiled by nvcc).
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
// Float payloads (float32/64, float16/bfloat16 widened on the device) over the threshold are
// compressed on the device (gpu_collectives/): uncompressed data never leaves the GPU. Other
// dtypes and payloads below the threshold move exactly: device pointers straight to MPI when it
// is CUDA-aware, else a device -> pinned host -> MPI -> pinned host -> device round trip (these
// bytes are not compressible, so the round trip costs no more than the wire itself).
#ifdef ZCCL_WITH_CUDA

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "../gpu_collectives/gpu_collectives.h"
#include "routing.h"
#include "staged.h"
#include "zccl_backend.h"

namespace zccl::backend {

struct ZcclBackend::CudaState {
  std::mutex mutex;                                  // streams: created on callers' threads
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::map<c10::DeviceIndex, std::unique_ptr<gpucoll::GpuWorkspace>> workspaces;  // worker only

  c10::cuda::CUDAStream stream(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = streams.find(device);
    if (it == streams.end()) {
      it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
    }
    return it->second;
  }
  // Called with the device current (the worker's stream guard).
  gpucoll::GpuWorkspace& workspace(c10::DeviceIndex device) {
    auto& ws = workspaces[device];
    if (!ws) ws = std::make_unique<gpucoll::GpuWorkspace>();
    return *ws;
  }
};

void ZcclBackend::CudaStateDeleter::operator()(CudaState* state) const { delete state; }

namespace {

// What a CUDA collective is, for the agreement exchange (agreement.h).
CallDescription cuda_call(OpKind op, const at::Tensor& t, uint64_t n, int reduce_op = -1, int root = -1) {
  return describe_call(op, static_cast<int>(t.scalar_type()), n, reduce_op, root);
}

std::runtime_error not_cuda(const char* what, const at::Tensor& t) {
  return std::runtime_error(std::string("zccl: ") + what + ": tensor is on " + t.device().str());
}

// The current backend stream (the worker runs every CUDA body under a CUDAStreamGuard).
gpu::GpuStream current_stream() {
  return reinterpret_cast<gpu::GpuStream>(c10::cuda::getCurrentCUDAStream().stream());
}

// Runs an exact MPI operation on the bytes of `dev` (a contiguous CUDA tensor): the device
// pointer itself with CUDA-aware MPI, else a pinned host copy (copied in when `read`, back when
// `write`). The copies run on the current (backend) stream.
void exact_on_host(at::Tensor& dev, bool read, bool write, const std::function<void(void*)>& mpi) {
  if (gpucoll::cuda_aware_mpi()) {
    c10::cuda::getCurrentCUDAStream().synchronize();  // MPI reads device memory: data must be there
    mpi(dev.data_ptr());
    return;
  }
  at::Tensor host = at::empty(dev.sizes(), dev.options().device(at::kCPU).pinned_memory(true));
  if (read) host.copy_(dev);  // synchronous D2H: MPI needs the bytes now
  mpi(host.data_ptr());
  if (write) dev.copy_(host, /*non_blocking=*/true);  // the pinned allocator keeps host alive
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Caller's thread.

c10::Stream ZcclBackend::cuda_prepare(const std::vector<at::Tensor>& tensors, const char* what) {
  if (tensors.empty()) throw std::invalid_argument(std::string("zccl: ") + what + ": no tensors");
  const c10::Device device = tensors[0].device();
  for (const auto& t : tensors) {
    if (!t.is_cuda()) throw not_cuda(what, t);
    if (t.device() != device) {
      throw std::invalid_argument(std::string("zccl: ") + what + ": tensors on different devices (" +
                                  device.str() + " and " + t.device().str() + ")");
    }
    if (t.layout() != at::kStrided) {
      throw std::invalid_argument(std::string("zccl: ") + what + ": sparse tensors are not supported");
    }
    (void)mpi_datatype(t.scalar_type());  // throws for unsupported dtypes
  }
  if (!cuda_) cuda_.reset(new CudaState());
  const c10::cuda::CUDAStream stream = cuda_->stream(device.index());
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

c10::intrusive_ptr<c10d::Work> ZcclBackend::cuda_allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOp& op,
                                                           const char* name, c10d::OpType type) {
  for (const auto& t : tensors) validate_reduce(op, t.scalar_type(), name);
  const c10::Stream stream = cuda_prepare(tensors, name);
  std::vector<at::Tensor> ts = tensors;
  return enqueue(
      name, type, tensors,
      [this, ts, op, stream](const CallConfig& cfg) mutable {
        c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
        for (auto& t : ts) run_cuda_allreduce(t, op, cfg);
      },
      stream);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::cuda_broadcast(std::vector<at::Tensor>& tensors, int root) {
  const c10::Stream stream = cuda_prepare(tensors, "broadcast");
  at::Tensor t = tensors[0];
  return enqueue(
      "broadcast", c10d::OpType::BROADCAST, tensors,
      [this, t, root, stream](const CallConfig& cfg) mutable {
        c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
        run_cuda_broadcast(t, root, cfg);
      },
      stream);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::cuda_allgather(std::vector<at::Tensor> outputs,
                                                           const at::Tensor& input, bool into_tensor) {
  std::vector<at::Tensor> all = outputs;
  all.push_back(input);
  const char* name = into_tensor ? "all_gather_into_tensor" : "all_gather";
  const c10::Stream stream = cuda_prepare(all, name);
  at::Tensor in = input;
  return enqueue(
      name, into_tensor ? c10d::OpType::_ALLGATHER_BASE : c10d::OpType::ALLGATHER, outputs,
      [this, in, outputs, into_tensor, stream](const CallConfig& cfg) mutable {
        c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
        if (into_tensor) {
          run_cuda_allgather(in, outputs[0], cfg);
          return;
        }
        at::Tensor flat = at::empty({in.numel() * static_cast<int64_t>(outputs.size())}, in.options());
        run_cuda_allgather(in, flat, cfg);
        for (size_t r = 0; r < outputs.size(); ++r) {
          outputs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view(outputs[r].sizes()));
        }
      },
      stream);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::cuda_scatter(at::Tensor& output, std::vector<at::Tensor> inputs,
                                                         int root) {
  std::vector<at::Tensor> all = inputs;
  all.push_back(output);
  const c10::Stream stream = cuda_prepare(all, "scatter");
  at::Tensor out = output;
  return enqueue(
      "scatter", c10d::OpType::SCATTER, {output},
      [this, out, inputs, root, stream](const CallConfig& cfg) mutable {
        c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
        run_cuda_scatter(inputs, out, root, cfg);
      },
      stream);
}

// ------------------------------------------------------------------------------------------
// Worker thread, backend stream current.

fz::FiniteRange ZcclBackend::cuda_range(const at::Tensor& t) const {
  // The GPU codec has no half streams: the range of a half tensor is taken on its widening.
  if (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) return cuda_range(t.to(at::kFloat));
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

void ZcclBackend::run_cuda_allreduce(at::Tensor& t, const c10d::ReduceOp& op, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const auto cop = compressed_op(op);
  const bool half = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
  bool compress = cop.has_value() && compressed_path(t.scalar_type(), n, cfg);
  Staged s(t, compress || half);
  const double eb = agree("all_reduce", cuda_call(OpKind::AllReduce, t, n, static_cast<int>(op.op_)), &s.buffer, cfg, compress);
  if (n == 0) return;
  const coll::Config cc = coll_config(cfg, eb);
  const size_t bytes = n * s.buffer.element_size();
  if (compress && gpucoll::choose_allreduce(bytes, comm_->size(), cc) == coll::Algorithm::Mpi) {
    compress = false;  // eb == 0 or an explicit Mpi: exact
  }
  if (compress) {
    auto& ws = cuda_->workspace(t.device().index());
    coll::Stats stats;
    gpucoll::allreduce(*comm_, ws, s.buffer.data_ptr(), n, compressed_dtype(s.buffer.scalar_type()), *cop,
                       cc, current_stream(), &stats);
    record("all_reduce", stats, eb);
  } else {
    const MPI_Datatype type = mpi_datatype(s.buffer.scalar_type());
    const MPI_Op mop = mpi_op(op, s.buffer.scalar_type());
    exact_on_host(s.buffer, true, true, [&](void* p) { comm_->allreduce(MPI_IN_PLACE, p, n, type, mop); });
    if (op.op_ == c10d::ReduceOp::AVG) s.buffer.div_(comm_->size());
  }
  s.write_back();
}

void ZcclBackend::run_cuda_broadcast(at::Tensor& t, int root, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const bool compress = compressed_path(t.scalar_type(), n, cfg);
  Staged s(t, compress);
  double eb = agree("broadcast", cuda_call(OpKind::Broadcast, t, n, -1, root), nullptr, cfg, false);
  if (n == 0) return;
  if (compress) {
    if (comm_->rank() == root) eb = local_bound({s.buffer}, cfg);
    auto& ws = cuda_->workspace(t.device().index());
    coll::Stats stats;
    gpucoll::broadcast(*comm_, ws, s.buffer.data_ptr(), n, compressed_dtype(s.buffer.scalar_type()), root,
                       coll_config(cfg, eb), current_stream(), &stats);
    record("broadcast", stats, eb);
  } else {
    const MPI_Datatype type = mpi_datatype(s.buffer.scalar_type());
    const bool at_root = comm_->rank() == root;
    exact_on_host(s.buffer, at_root, !at_root, [&](void* p) { comm_->bcast(p, n, type, root); });
  }
  s.write_back();
}

void ZcclBackend::run_cuda_allgather(const at::Tensor& in, at::Tensor& flat_out, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(in.numel());
  const bool compress = compressed_path(in.scalar_type(), n, cfg);
  Staged src(in, compress);
  Staged dst(flat_out, compress);
  const double eb = agree("all_gather", cuda_call(OpKind::AllGather, in, n), &src.buffer, cfg, compress);
  if (n == 0) return;
  if (compress) {
    auto& ws = cuda_->workspace(in.device().index());
    coll::Stats stats;
    gpucoll::allgather(*comm_, ws, src.buffer.data_ptr(), dst.buffer.data_ptr(), n,
                       compressed_dtype(src.buffer.scalar_type()), coll_config(cfg, eb), current_stream(),
                       &stats);
    record("all_gather", stats, eb);
  } else {
    const MPI_Datatype type = mpi_datatype(in.scalar_type());
    exact_on_host(src.buffer, true, false, [&](void* sp) {
      exact_on_host(dst.buffer, false, true, [&](void* rp) { comm_->allgather(sp, rp, n, type); });
    });
  }
  dst.write_back();
}

void ZcclBackend::run_cuda_scatter(const std::vector<at::Tensor>& ins, at::Tensor& out, int root,
                                   const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(out.numel());
  const bool compress = compressed_path(out.scalar_type(), n, cfg);
  Staged dst(out, compress);
  double eb = agree("scatter", cuda_call(OpKind::Scatter, out, n, -1, root), nullptr, cfg, false);
  if (n == 0) return;
  if (!compress) {
    const MPI_Datatype type = mpi_datatype(out.scalar_type());
    std::vector<at::Tensor> parts;
    for (const auto& t : ins) parts.push_back(t.reshape({-1}));
    at::Tensor flat = ins.empty() ? at::empty({0}, out.options()) : at::cat(parts);
    exact_on_host(flat, !ins.empty(), false, [&](void* sp) {
      exact_on_host(dst.buffer, false, true,
                    [&](void* rp) { comm_->scatter(ins.empty() ? nullptr : sp, rp, n, type, root); });
    });
    dst.write_back();
    return;
  }
  // Each block is read where it lies (widened/contiguous copies only where needed).
  std::vector<at::Tensor> staged;
  std::vector<const void*> blocks;
  for (const auto& t : ins) {
    staged.push_back(Staged(t, true).buffer);
    blocks.push_back(staged.back().data_ptr());
  }
  if (!staged.empty()) eb = local_bound(staged, cfg);
  auto& ws = cuda_->workspace(out.device().index());
  coll::Stats stats;
  gpucoll::scatter(*comm_, ws, blocks, dst.buffer.data_ptr(), n, compressed_dtype(dst.buffer.scalar_type()),
                   root, coll_config(cfg, eb), current_stream(), &stats);
  record("scatter", stats, eb);
  dst.write_back();
}

}  // namespace zccl::backend

#endif  // ZCCL_WITH_CUDA
