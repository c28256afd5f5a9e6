// RAII CUDA resources, the GpuWorkspace, CUDA-aware MPI detection and the staging of compressed
// bytes between device memory and MPI (see gpu_common.h).
#include "gpu_common.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

// Open MPI declares MPIX_Query_cuda_support() in its extensions header.
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

namespace zccl::gpucoll {
namespace detail {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw gpu::CudaError(std::string("zccl gpu: ") + what + " failed: " + cudaGetErrorString(rc));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

uint8_t* DeviceBuffer::get(size_t bytes) {
  if (bytes > cap_ || ptr_ == nullptr) {
    // Grow by half again so a slowly growing message size does not reallocate every call.
    const size_t want = std::max<size_t>({bytes, cap_ + cap_ / 2, 4096});
    if (ptr_ != nullptr) check(cudaFree(ptr_), "cudaFree");
    ptr_ = nullptr;
    cap_ = 0;
    check(cudaMalloc(&ptr_, want), "cudaMalloc (gZ workspace)");
    cap_ = want;
  }
  return static_cast<uint8_t*>(ptr_);
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

uint8_t* PinnedBuffer::get(size_t bytes) {
  if (bytes > cap_ || ptr_ == nullptr) {
    const size_t want = std::max<size_t>({bytes, cap_ + cap_ / 2, 4096});
    if (ptr_ != nullptr) check(cudaFreeHost(ptr_), "cudaFreeHost");
    ptr_ = nullptr;
    cap_ = 0;
    check(cudaMallocHost(&ptr_, want), "cudaMallocHost (gZ staging)");
    cap_ = want;
  }
  return static_cast<uint8_t*>(ptr_);
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
Stream::~Stream() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
}

Event::Event() { check(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreate"); }
Event::~Event() {
  if (e_ != nullptr) cudaEventDestroy(e_);
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

BlockSplit::BlockSplit(size_t n, int p) : count(static_cast<size_t>(p)), offset(static_cast<size_t>(p)) {
  const size_t np = static_cast<size_t>(p), base = n / np, extra = n % np;
  size_t at = 0;
  for (size_t i = 0; i < np; ++i) {
    count[i] = base + (i < extra ? 1 : 0);
    offset[i] = at;
    at += count[i];
  }
  max_count = base + (extra ? 1 : 0);
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

std::vector<size_t> ring_allgather_streams(Comm& comm, Wire& wire, size_t cap, size_t own_len,
                                           const std::vector<bool>& nonempty, int tag,
                                           cudaStream_t stream) {
  const int p = comm.size(), r = comm.rank();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  std::vector<size_t> lens(static_cast<size_t>(p), 0);
  lens[static_cast<size_t>(r)] = own_len;
  // Step t: forward block r-t (own at t = 0, else what arrived at step t-1), receive block r-t-1.
  // Each block has its own region, so nothing is overwritten while it is still being sent.
  for (int t = 0; t < p - 1; ++t) {
    const size_t sb = static_cast<size_t>((r - t + p) % p), rb = static_cast<size_t>((r - t - 1 + 2 * p) % p);
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
    // Job j runs on aux stream j % width: workspace 1 + j % width belongs to that stream.
    job.workspace = ws.codec_ws(1 + static_cast<int>(j % static_cast<size_t>(width)), dt,
                                largest, chunk_len, &job.ws_bytes);
    job.err_pinned = errs + j;
    jobs.push_back(job);
  }
  if (!jobs.empty()) {
    ws.fork(stream, width);
    std::vector<GpuStream> streams;
    for (int i = 0; i < width; ++i) streams.push_back(reinterpret_cast<GpuStream>(ws.aux[i].get()));
    gpu::decompress_batch(jobs.data(), jobs.size(), streams.data(), streams.size());
    ws.join(stream, width);
  }
  wire.release(stream);  // the wire is free once the stream passed the copies and the decoders
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after decompress)");
  for (size_t j = 0; j < peers.size(); ++j) check_decoded(errs[j], what, peers[j]);
}

}  // namespace detail

// ------------------------------------------------------------------------------------------

bool cuda_aware_mpi() {
  static const bool aware = [] {
    if (const char* env = std::getenv("ZCCL_CUDA_AWARE")) {
      if (std::strcmp(env, "0") == 0) return false;
      if (std::strcmp(env, "1") == 0) return true;
      throw std::invalid_argument(std::string("zccl: ZCCL_CUDA_AWARE must be 0 or 1, got '") + env + "'");
    }
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    transport::ensure_initialized();
    return MPIX_Query_cuda_support() == 1;
#else
    return false;  // no way to ask: staging through pinned memory is always correct
#endif
  }();
  return aware;
}

GpuWorkspace::GpuWorkspace() : impl_(std::make_unique<Impl>()) {
  detail::check(cudaGetDevice(&impl_->device), "cudaGetDevice");
  impl_->cuda_aware = cuda_aware_mpi();
}

GpuWorkspace::~GpuWorkspace() = default;

int GpuWorkspace::device() const { return impl_->device; }
bool GpuWorkspace::cuda_aware() const { return impl_->cuda_aware; }

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

void GpuWorkspace::Impl::fork(cudaStream_t main, int n) {
  detail::check(cudaEventRecord(fork_event.get(), main), "cudaEventRecord (fork)");
  for (int i = 0; i < n; ++i) {
    detail::check(cudaStreamWaitEvent(aux[i].get(), fork_event.get(), 0), "cudaStreamWaitEvent (fork)");
  }
}

void GpuWorkspace::Impl::join(cudaStream_t main, int n) {
  for (int i = 0; i < n; ++i) {
    detail::check(cudaEventRecord(join_event[i].get(), aux[i].get()), "cudaEventRecord (join)");
    detail::check(cudaStreamWaitEvent(main, join_event[i].get(), 0), "cudaStreamWaitEvent (join)");
  }
}

}  // namespace zccl::gpucoll
