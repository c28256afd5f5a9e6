// Shared machinery of the gZ collectives (CUDA side): RAII wrappers of CUDA resources, the
// workspace's slots, the movement of compressed bytes between device memory and MPI (straight
// from device memory with CUDA-aware MPI, else staged through pinned host memory) and the
// device codec calls with their checks. Timing, schedules, routing and argument checks are the
// CPU collectives' toolkit (csrc/collectives/toolkit). Only the gpu_*.cu files include this
// header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "../collectives/toolkit/schedules.h"
#include "../collectives/toolkit/timing.h"
#include "../collectives/toolkit/validate.h"
#include "gpu_collectives.h"

namespace zccl::gpucoll::detail {

// Throws gpu::CudaError naming `what` and cudaGetErrorString(rc) unless rc == cudaSuccess.
void check(cudaError_t rc, const char* what);

// Device or pinned (page-locked) host memory grown on demand (contents are not kept when it
// grows): the workspace's slots, and what async copies and staged MPI use.
enum class Memory { Device, Pinned };
template <Memory kind>
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  ~GrowingBuffer();
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  uint8_t* get(size_t bytes);  // at least `bytes` (256-byte aligned, as cudaMalloc gives)

 private:
  void* ptr_ = nullptr;
  size_t cap_ = 0;
};
using DeviceBuffer = GrowingBuffer<Memory::Device>;
using PinnedBuffer = GrowingBuffer<Memory::Pinned>;

// Owns a CUDA stream or event handle, destroyed with the workspace.
template <class Handle, cudaError_t (*destroy)(Handle)>
class CudaHandle {
 public:
  explicit CudaHandle(Handle h) : h_(h) {}
  ~CudaHandle() {
    if (h_ != nullptr) destroy(h_);
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  Handle get() const { return h_; }

 private:
  Handle h_;
};
cudaStream_t new_stream();  // non-blocking: never synchronises with the legacy default stream
cudaEvent_t new_event();    // timing disabled: used for ordering only
struct Stream : CudaHandle<cudaStream_t, cudaStreamDestroy> {
  Stream() : CudaHandle(new_stream()) {}
};
struct Event : CudaHandle<cudaEvent_t, cudaEventDestroy> {
  Event() : CudaHandle(new_event()) {}
};

// Makes `device` current for a scope (the worker thread may serve several devices).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// One purpose per slot, as the CPU's workspace (an algorithm never hands a slot it still uses to
// something it calls).
enum Slot : int { kSend, kRecv, kRecv2, kStreams, kScratch, kSlotCount };
constexpr int kAuxStreams = 4;  // batch width (scatter's blocks, allgather's decompressions)

}  // namespace zccl::gpucoll::detail

namespace zccl::gpucoll {

struct GpuWorkspace::Impl {
  int device = 0;
  bool cuda_aware = false;  // the current call's transport reads device memory (set by Call)
  detail::DeviceBuffer dev[detail::kSlotCount];
  detail::PinnedBuffer host[detail::kSlotCount];
  detail::Event host_free[detail::kSlotCount];  // recorded after the last stream use of host[i]
  detail::PinnedBuffer sizes_buf;  // compressed sizes (size_t), one per job
  detail::PinnedBuffer errs_buf;   // decoder error words (int32), one per job
  detail::DeviceBuffer codec[detail::kAuxStreams + 1];  // cuSZp workspaces: main, then aux
  detail::Stream aux[detail::kAuxStreams];
  detail::Event fork_event;
  detail::Event join_event[detail::kAuxStreams];

  size_t* sizes(size_t n);
  int32_t* errs(size_t n);  // zeroed
  // cuSZp workspace i (0: the main stream's) for (dt, count, chunk_len).
  void* codec_ws(int i, DType dt, uint64_t count, uint32_t chunk_len, size_t* bytes);
  // Job j of a batch over `width` aux streams runs on aux stream j % width, with its workspace
  // (that stream's, sized for `count` values).
  void* job_ws(size_t j, int width, DType dt, uint64_t count, uint32_t chunk_len, size_t* bytes);
  // Aux streams 0..n-1 wait for `main`'s work so far (fork returns them) / `main` waits for
  // theirs.
  std::vector<GpuStream> fork(cudaStream_t main, int n);
  void join(cudaStream_t main, int n);
};

namespace detail {

inline cudaStream_t raw(GpuStream s) { return reinterpret_cast<cudaStream_t>(s); }

// One gZ call: the workspace's device made current for its duration, the workspace's buffers,
// and the caller's stream; the compressed bytes go straight from device memory when `comm` reads
// it, else through pinned host memory (Wire).
struct Call {
  Call(GpuWorkspace& ws, GpuStream stream, const Comm& comm)
      : scope(ws.device()), w(ws.impl()), s(raw(stream)) {
    w.cuda_aware = comm.device_memory();
  }
  DeviceScope scope;
  GpuWorkspace::Impl& w;
  cudaStream_t s;
};

// Throws std::invalid_argument unless the route compresses (or there is nothing to move): the
// gZ collectives only move compressed data, the caller moves the rest.
void require_compressed(const coll::Route& route, size_t count, const char* op);

// Compressed bytes that MPI reads or writes: `region` bytes at offset `offset` of slot `slot`,
// device side and -- staged -- its pinned host mirror. wire() is what MPI is given.
class Wire {
 public:
  Wire(GpuWorkspace::Impl& ws, Slot slot, size_t bytes);
  uint8_t* dev(size_t offset = 0) { return dev_ + offset; }
  uint8_t* wire(size_t offset = 0) { return (staged_ ? host_ : dev_) + offset; }
  // Device bytes [offset, offset+n) were produced on `stream`: make them readable by MPI (one
  // D2H copy when staged) and wait for the stream.
  void publish(size_t offset, size_t n, cudaStream_t stream);
  // Before MPI writes into the wire: wait for stream work still reading it (an earlier H2D).
  void before_receive();
  // MPI filled wire bytes [offset, offset+n): make the device copy hold them (async H2D when
  // staged, ordered on `stream`; the host side is marked busy until the copy ran).
  void land(size_t offset, size_t n, cudaStream_t stream);
  // The stream's work so far is the last use of this wire (decoders reading the device side).
  void release(cudaStream_t stream);

 private:
  GpuWorkspace::Impl& ws_;
  Slot slot_;
  bool staged_;
  uint8_t* dev_;
  uint8_t* host_ = nullptr;
};

// Compresses `count` values at device `src` into dev `dst` on `stream` and returns the stream's
// size (synchronises: MPI needs the size).
size_t compress_sync(GpuWorkspace::Impl& ws, const void* src, DType dt, uint64_t count, double eb,
                     uint32_t chunk_len, uint8_t* dst, size_t cap, cudaStream_t stream);

// Throws std::runtime_error naming the op and the peer when a decoder error word is set.
void check_decoded(int32_t err, const char* what, int peer);

// Decodes the `len` bytes at `offset` of `wire` (device side, landed) into dst (count values),
// or with `reduce` into dst = op(dst, decoded); then releases the wire, synchronises and checks
// the decoder (check_decoded, naming `what` and the sender `peer`).
void decode(GpuWorkspace::Impl& ws, Wire& wire, size_t offset, size_t len, void* dst, DType dt,
            uint64_t count, uint32_t chunk_len, cudaStream_t stream, const char* what, int peer,
            std::optional<gpu::ReduceOp> reduce = std::nullopt);

// Worst-case stream size of `count` values rounded up to 256 bytes (0 for count 0).
size_t capacity(DType dt, uint64_t count, uint32_t chunk_len);

using fz::dtype_size;
inline gpu::ReduceOp gpu_op(ReduceOp op) { return static_cast<gpu::ReduceOp>(op); }

// Ring allgather of compressed streams. Region q (`cap` bytes at q*cap of the Wire) ends
// holding rank q's stream for every q with nonempty[q]; the caller has written its own stream
// (own_len bytes) into its region on the device and published it. Streams are forwarded as
// received, never recompressed; staged, each arrival is copied to the device at once (async).
// Returns every region's stream length.
std::vector<size_t> ring_allgather_streams(Comm& comm, Wire& wire, size_t cap, size_t own_len,
                                           const std::vector<bool>& nonempty, int tag,
                                           cudaStream_t stream);

// Decodes streams (region q of `wire`, lens[q] bytes) into dsts[q] (counts[q] values) for every
// q != skip with a nonzero length, as one batch on the aux streams; synchronises and checks.
void decode_batch(GpuWorkspace::Impl& ws, Wire& wire, size_t cap, const std::vector<size_t>& lens,
                  const std::vector<void*>& dsts, const std::vector<size_t>& counts, int skip,
                  DType dt, uint32_t chunk_len, cudaStream_t stream, const char* what);

// The two allreduce algorithms (gpu_allreduce_ring.cu, gpu_allreduce_rd.cu); count > 0, p > 1.
void ring_allreduce(Comm& comm, GpuWorkspace::Impl& ws, void* buf, size_t count, DType dt,
                    ReduceOp op, const Config& cfg, cudaStream_t stream, Stats& st);
void rd_allreduce(Comm& comm, GpuWorkspace::Impl& ws, void* buf, size_t count, DType dt,
                  ReduceOp op, const Config& cfg, cudaStream_t stream, Stats& st);

}  // namespace detail
}  // namespace zccl::gpucoll
