// RAII CUDA resources, the GpuWorkspace and the staging of compressed bytes between device memory
// and the transport (see gpu_common.h).
#include "gpu_common.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace zccl::gpucoll {
namespace detail {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw gpu::CudaError(std::string("zccl gpu: ") + what + " failed: " + cudaGetErrorString(rc));
  }
}

namespace {

void* allocate(Memory kind, size_t bytes) {
  void* p = nullptr;
  if (kind == Memory::Device) {
    check(cudaMalloc(&p, bytes), "cudaMalloc (gZ workspace)");
  } else {
    check(cudaMallocHost(&p, bytes), "cudaMallocHost (gZ staging)");
  }
  return p;
}

cudaError_t release(Memory kind, void* p) { return kind == Memory::Device ? cudaFree(p) : cudaFreeHost(p); }

}  // namespace

template <Memory kind>
GrowingBuffer<kind>::~GrowingBuffer() {
  if (ptr_ != nullptr) release(kind, ptr_);
}

template <Memory kind>
uint8_t* GrowingBuffer<kind>::get(size_t bytes) {
  if (bytes > cap_ || ptr_ == nullptr) {
    // Grow by half again so a slowly growing message size does not reallocate every call.
    const size_t want = std::max<size_t>({bytes, cap_ + cap_ / 2, 4096});
    if (ptr_ != nullptr) check(release(kind, ptr_), kind == Memory::Device ? "cudaFree" : "cudaFreeHost");
    ptr_ = nullptr;
    cap_ = 0;
    ptr_ = allocate(kind, want);
    cap_ = want;
  }
  return static_cast<uint8_t*>(ptr_);
}

template class GrowingBuffer<Memory::Device>;
template class GrowingBuffer<Memory::Pinned>;

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

DeviceScope::DeviceScope(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
}
DeviceScope::~DeviceScope() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0) cudaSetDevice(previous_);
}

size_t capacity(DType dt, uint64_t count, uint32_t chunk_len) {
  if (count == 0) return 0;
  // Rounded up to 256 bytes: streams stored at q * capacity stay as aligned as cudaMalloc's
  // memory (the codec's vector loads and the workspace checks may rely on it).
  constexpr size_t kAlign = 256;
  const size_t bytes = gpu::max_compressed_size(dt, count, chunk_len);
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

void require_compressed(const coll::Route& route, size_t count, const char* op) {
  if (!route.compressed && count > 0) {
    throw std::invalid_argument(std::string("zccl gpu ") + op +
                                ": the Mpi algorithm moves uncompressed data; the caller handles "
                                "it (route() returned Mpi)");
  }
}

void check_decoded(int32_t err, const char* what, int peer) {
  if (err != 0) {
    throw std::runtime_error(std::string("zccl: ") + what + ": the compressed stream from rank " +
                             std::to_string(peer) + " failed to decode on the GPU (" +
                             gpu::error_string(err) + "); sizes or dtypes may differ across ranks");
  }
}

size_t compress_sync(GpuWorkspace::Impl& ws, const void* src, DType dt, uint64_t count, double eb,
                     uint32_t chunk_len, uint8_t* dst, size_t cap, cudaStream_t stream) {
  size_t ws_bytes = 0;
  void* codec = ws.codec_ws(0, dt, count, chunk_len, &ws_bytes);
  size_t* size = ws.sizes(1);
  fz::CompressParams params;
  params.error_bound = eb;
  params.chunk_len = chunk_len;
  gpu::compress(src, dt, count, params, dst, cap, codec, ws_bytes,
                reinterpret_cast<GpuStream>(stream), size);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after compress)");
  return *size;
}

Wire::Wire(GpuWorkspace::Impl& ws, Slot slot, size_t bytes)
    : ws_(ws), slot_(slot), staged_(!ws.cuda_aware), dev_(ws.dev[slot].get(bytes)) {
  if (staged_) {
    // The previous call may have left an H2D copy from this host slot in flight.
    check(cudaEventSynchronize(ws.host_free[slot].get()), "cudaEventSynchronize");
    host_ = ws.host[slot].get(bytes);
  }
}

void Wire::publish(size_t offset, size_t n, cudaStream_t stream) {
  if (staged_ && n > 0) {
    check(cudaMemcpyAsync(host_ + offset, dev_ + offset, n, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (compressed bytes to pinned staging)");
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (before MPI send)");
}

void Wire::before_receive() {
  // Staged: an H2D copy may still read the host side. CUDA-aware: a decoder may still read the
  // device side; the stream's last event covers both.
  check(cudaEventSynchronize(ws_.host_free[slot_].get()), "cudaEventSynchronize (before MPI receive)");
}

void Wire::land(size_t offset, size_t n, cudaStream_t stream) {
  if (staged_ && n > 0) {
    check(cudaMemcpyAsync(dev_ + offset, host_ + offset, n, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (received compressed bytes to the device)");
  }
  check(cudaEventRecord(ws_.host_free[slot_].get(), stream), "cudaEventRecord");
}

void Wire::release(cudaStream_t stream) {
  check(cudaEventRecord(ws_.host_free[slot_].get(), stream), "cudaEventRecord");
}

void decode(GpuWorkspace::Impl& ws, Wire& wire, size_t offset, size_t len, void* dst, DType dt,
            uint64_t count, uint32_t chunk_len, cudaStream_t stream, const char* what, int peer,
            std::optional<gpu::ReduceOp> reduce) {
  size_t ws_bytes = 0;
  void* codec = ws.codec_ws(0, dt, count, chunk_len, &ws_bytes);
  int32_t* err = ws.errs(1);
  const GpuStream gs = reinterpret_cast<GpuStream>(stream);
  if (reduce) {
    gpu::decompress_reduce(wire.dev(offset), len, dst, dst, dt, count, *reduce, codec, ws_bytes,
                           gs, err);
  } else {
    gpu::decompress(wire.dev(offset), len, dst, dt, count, codec, ws_bytes, gs, err);
  }
  wire.release(stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after decompress)");
  check_decoded(*err, what, peer);
}

std::vector<size_t> ring_allgather_streams(Comm& comm, Wire& wire, size_t cap, size_t own_len,
                                           const std::vector<bool>& nonempty, int tag,
                                           cudaStream_t stream) {
  const coll::toolkit::Ring ring(comm.size(), comm.rank());
  const int p = ring.p, r = ring.rank, next = ring.next, prev = ring.prev;
  std::vector<size_t> lens(static_cast<size_t>(p), 0);
  lens[static_cast<size_t>(r)] = own_len;
  // Step t: forward block r-t (own at t = 0, else what arrived at step t-1), receive block r-t-1.
  // Each block has its own region, so nothing is overwritten while it is still being sent.
  for (int t = 0; t < p - 1; ++t) {
    const size_t sb = static_cast<size_t>(ring.before(t)), rb = static_cast<size_t>(ring.before(t + 1));
    transport::Request recv, send;
    if (nonempty[rb]) recv = comm.irecv(wire.wire(rb * cap), cap, prev, tag);
    if (nonempty[sb]) send = comm.isend(wire.wire(sb * cap), lens[sb], next, tag);
    if (nonempty[rb]) {
      lens[rb] = comm.wait(recv);
      wire.land(rb * cap, lens[rb], stream);
    }
    if (nonempty[sb]) comm.wait(send);
  }
  return lens;
}

void decode_batch(GpuWorkspace::Impl& ws, Wire& wire, size_t cap, const std::vector<size_t>& lens,
                  const std::vector<void*>& dsts, const std::vector<size_t>& counts, int skip,
                  DType dt, uint32_t chunk_len, cudaStream_t stream, const char* what) {
  std::vector<gpu::DecompressJob> jobs;
  std::vector<int> peers;
  for (size_t q = 0; q < lens.size(); ++q) {
    if (static_cast<int>(q) == skip || lens[q] == 0 || counts[q] == 0) continue;
    peers.push_back(static_cast<int>(q));
  }
  int32_t* errs = ws.errs(peers.size());
  const int width = static_cast<int>(std::min<size_t>(peers.size(), kAuxStreams));
  // Each aux stream's workspace is sized once for the largest job: growing it while building
  // the jobs would free memory an earlier job of the same stream already points to.
  size_t largest = 0;
  for (const int q : peers) largest = std::max(largest, counts[static_cast<size_t>(q)]);
  for (size_t j = 0; j < peers.size(); ++j) {
    const size_t q = static_cast<size_t>(peers[j]);
    gpu::DecompressJob job;
    job.src = wire.dev(q * cap);
    job.len_bound = lens[q];
    job.dst = dsts[q];
    job.dtype = dt;
    job.count = counts[q];
    job.workspace = ws.job_ws(j, width, dt, largest, chunk_len, &job.ws_bytes);
    job.err_pinned = errs + j;
    jobs.push_back(job);
  }
  if (!jobs.empty()) {
    const std::vector<GpuStream> streams = ws.fork(stream, width);
    gpu::decompress_batch(jobs.data(), jobs.size(), streams.data(), streams.size());
    ws.join(stream, width);
  }
  wire.release(stream);  // the wire is free once the stream passed the copies and the decoders
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after decompress)");
  for (size_t j = 0; j < peers.size(); ++j) check_decoded(errs[j], what, peers[j]);
}

}  // namespace detail

// ------------------------------------------------------------------------------------------

GpuWorkspace::GpuWorkspace() : impl_(std::make_unique<Impl>()) {
  detail::check(cudaGetDevice(&impl_->device), "cudaGetDevice");
}

GpuWorkspace::~GpuWorkspace() = default;

int GpuWorkspace::device() const { return impl_->device; }

size_t* GpuWorkspace::Impl::sizes(size_t n) {
  return reinterpret_cast<size_t*>(sizes_buf.get(std::max<size_t>(n, 1) * sizeof(size_t)));
}

int32_t* GpuWorkspace::Impl::errs(size_t n) {
  auto* e = reinterpret_cast<int32_t*>(errs_buf.get(std::max<size_t>(n, 1) * sizeof(int32_t)));
  std::fill(e, e + n, 0);
  return e;
}

void* GpuWorkspace::Impl::codec_ws(int i, DType dt, uint64_t count, uint32_t chunk_len,
                                   size_t* bytes) {
  *bytes = gpu::workspace_bytes(dt, std::max<uint64_t>(count, 1), chunk_len);
  return codec[i].get(*bytes);
}

void* GpuWorkspace::Impl::job_ws(size_t j, int width, DType dt, uint64_t count, uint32_t chunk_len,
                                 size_t* bytes) {
  return codec_ws(1 + static_cast<int>(j % static_cast<size_t>(width)), dt, count, chunk_len, bytes);
}

std::vector<GpuStream> GpuWorkspace::Impl::fork(cudaStream_t main, int n) {
  detail::check(cudaEventRecord(fork_event.get(), main), "cudaEventRecord (fork)");
  std::vector<GpuStream> streams;
  for (int i = 0; i < n; ++i) {
    detail::check(cudaStreamWaitEvent(aux[i].get(), fork_event.get(), 0), "cudaStreamWaitEvent (fork)");
    streams.push_back(reinterpret_cast<GpuStream>(aux[i].get()));
  }
  return streams;
}

void GpuWorkspace::Impl::join(cudaStream_t main, int n) {
  for (int i = 0; i < n; ++i) {
    detail::check(cudaEventRecord(join_event[i].get(), aux[i].get()), "cudaEventRecord (join)");
    detail::check(cudaStreamWaitEvent(main, join_event[i].get(), 0), "cudaStreamWaitEvent (join)");
  }
}

}  // namespace zccl::gpucoll
