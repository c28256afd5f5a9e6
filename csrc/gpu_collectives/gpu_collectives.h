// gZ collectives: the ZCCL algorithms for buffers in GPU memory, torch-free (transport::Comm for
// the bytes, zccl::gpu -- the cuSZp-style codec of compress/cuszp.h -- for the numerics).
//
// Design:
// * Uncompressed data never leaves the device. Each algorithm compresses on the device (on the
//   caller's stream), moves the compressed bytes, and decompresses / decompress-reduces on the
//   device. The bytes travel either straight from device memory (when the transport reads it:
//   Comm::device_memory(), a CUDA-aware MPI) or staged through pinned host buffers
//   (cudaMemcpyAsync + stream sync before the send; receive into pinned memory, then one H2D copy
//   of the compressed bytes).
// * All work is ordered on the one `GpuStream` passed in (the backend's stream); batches of
//   independent jobs (scatter's per-destination blocks, allgather's p-1 decompressions) fan out to
//   the workspace's auxiliary streams and join back. Every call returns with its device work
//   finished (it synchronises `stream` to read the decoders' error words and throws on a bad
//   stream), so work the caller enqueues on `stream` afterwards sees the result; the caller must
//   order `stream` after whatever produced the inputs (the backend does it with an event).
// * GpuWorkspace owns every device and pinned buffer, the auxiliary streams and events, grown on
//   demand and reused across calls, so the hot path makes no cudaMalloc/cudaMallocHost after
//   warm-up. One workspace per (device, worker thread); not thread-safe.
// * The same output bounds as the CPU algorithms (coll::output_error_bound stays valid):
//   ring SUM p*eb, RD SUM (p+p'-2)*eb, AVG those / p, MIN/MAX eb; data movement eb per value.
//   Every rank ends an allreduce, broadcast or allgather with bit-identical values (owners decode
//   their own streams; cfg.owner_exact keeps a broadcast root's and an allgather owner's exact).
// * First-step simplifications (see each .cu): the ring moves whole blocks per step (store and
//   forward) instead of the CPU's cut-through segments; broadcast is a binomial tree of one
//   whole-buffer stream instead of the CPU's pipelined chain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../collectives/collectives.h"
#include "../compress/cuszp.h"
#include "../transport/transport.h"

namespace zccl::gpucoll {

using coll::Algorithm;
using coll::Config;
using coll::ReduceOp;
using coll::Stats;
using fz::DType;
using gpu::GpuStream;
using transport::Comm;

// Device and pinned memory, auxiliary streams and events of the gZ collectives for one device.
// Construct with that device current (the constructor records it; every call re-selects it).
class GpuWorkspace {
 public:
  GpuWorkspace();
  ~GpuWorkspace();
  GpuWorkspace(const GpuWorkspace&) = delete;
  GpuWorkspace& operator=(const GpuWorkspace&) = delete;

  int device() const;

  struct Impl;  // gpu_common.h
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The algorithm of a GPU allreduce of `bytes` on p ranks: coll::route's (Device::Cuda), kept
// under this name for the backend's CUDA path until it calls coll::route itself.
inline Algorithm choose_allreduce(size_t bytes, int p, const Config& cfg) {
  return coll::route(coll::Collective::AllReduce, bytes, p, cfg, coll::Device::Cuda).algorithm;
}

// Every entry point below takes coll::route(..., Device::Cuda) and moves compressed data only:
// where the route says uncompressed (cfg.algorithm == Mpi, a lossless Auto allreduce,
// min_compress_bytes) and there is data to move, it throws std::invalid_argument (the caller
// moves uncompressed data itself). Arguments are checked as the CPU collectives check theirs.

// In place on `buf` (count values of dt, device memory).
void allreduce(Comm& comm, GpuWorkspace& ws, void* buf, size_t count, DType dt, ReduceOp op,
               const Config& cfg, GpuStream stream, Stats* stats = nullptr);

// recv holds size()*count values: rank r's block at r*count, decoded from r's stream on every
// rank (the own block too, unless cfg.owner_exact copies it exactly).
void allgather(Comm& comm, GpuWorkspace& ws, const void* send, void* recv, size_t count, DType dt,
               const Config& cfg, GpuStream stream, Stats* stats = nullptr);

// Every rank, the root included, ends with the root's decompressed values (cfg.owner_exact: the
// root's buffer is left untouched).
void broadcast(Comm& comm, GpuWorkspace& ws, void* buf, size_t count, DType dt, int root,
               const Config& cfg, GpuStream stream, Stats* stats = nullptr);

// blocks[q] (count values, device memory) goes to rank q; only the root reads `blocks`. The
// root compresses the p-1 foreign blocks as one batch on several streams and copies its own
// block exactly.
void scatter(Comm& comm, GpuWorkspace& ws, const std::vector<const void*>& blocks, void* recv,
             size_t count, DType dt, int root, const Config& cfg, GpuStream stream,
             Stats* stats = nullptr);

}  // namespace zccl::gpucoll
