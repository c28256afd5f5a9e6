// gZ allgather (data-movement framework): compress the own block once on the device, ring of
// compressed streams (forwarded as received, never recompressed), then the p-1 foreign blocks
// decompressed as one batch on the workspace's auxiliary streams. As in the CPU's
// allgather_ring.cpp, the own block is decoded from its own stream in the same batch, so every
// rank holds the same bits for every block; with cfg.owner_exact (or p == 1) it is copied exactly.
//
// Cost: one compression and p (p-1 with owner_exact) decompressions of n values, (p-1) n w / R
// bytes sent per rank, p-1 latency terms. Output error: eb per value (own block exact with
// cfg.owner_exact).
#include <vector>

#include "gpu_common.h"

namespace zccl::gpucoll {

void allgather(Comm& comm, GpuWorkspace& ws, const void* send, void* recv, size_t count, DType dt,
               const Config& cfg, GpuStream stream, Stats* stats) {
  const char* name = "allgather";
  coll::toolkit::check_config(cfg, name);
  coll::toolkit::check_buffer(send, count, name, "send");
  coll::toolkit::check_buffer(recv, count, name, "recv");
  coll::toolkit::CallStats cs(stats);
  const int p = comm.size(), r = comm.rank();
  const size_t es = detail::dtype_size(dt), own = static_cast<size_t>(r);
  cs.s.bytes_in = count * es;
  const coll::Route rt =
      coll::route(coll::Collective::AllGather, cs.s.bytes_in, p, cfg, coll::Device::Cuda);
  detail::require_compressed(rt, count, name);
  if (count == 0) {
    cs.done(rt.algorithm);
    return;
  }
  detail::Call call(ws, stream, comm);
  auto* out = static_cast<uint8_t*>(recv);

  // The own block, exactly (nothing to do when send already is recv's own slot), unless it is
  // decoded from its stream below.
  const bool decode_own = !cfg.owner_exact && p > 1;
  if (!decode_own && send != out + own * count * es) {
    detail::check(cudaMemcpyAsync(out + own * count * es, send, count * es, cudaMemcpyDeviceToDevice, call.s),
                  "cudaMemcpyAsync (own block)");
  }
  if (p == 1) {
    detail::check(cudaStreamSynchronize(call.s), "cudaStreamSynchronize");
    cs.done(rt.algorithm);
    return;
  }

  const size_t cap = detail::capacity(dt, count, cfg.chunk_len);
  const int tag = comm.next_tag_base();
  detail::Wire all(call.w, detail::kStreams, cap * static_cast<size_t>(p));
  const size_t own_len = detail::compress_sync(call.w, send, dt, count, cfg.error_bound, cfg.chunk_len,
                                               all.dev(own * cap), cap, call.s);
  all.publish(own * cap, own_len, call.s);
  cs.s.bytes_compressed = count * es;

  const std::vector<bool> nonempty(static_cast<size_t>(p), true);
  const std::vector<size_t> lens =
      detail::ring_allgather_streams(comm, all, cap, own_len, nonempty, tag, call.s);
  const size_t next = static_cast<size_t>((r + 1) % p);
  for (size_t q = 0; q < lens.size(); ++q) {
    if (q != next) cs.s.bytes_sent += lens[q];  // every stream but next's passes through here
  }
  std::vector<void*> dsts(static_cast<size_t>(p));
  for (size_t q = 0; q < dsts.size(); ++q) dsts[q] = out + q * count * es;
  detail::decode_batch(call.w, all, cap, lens, dsts, std::vector<size_t>(static_cast<size_t>(p), count),
                       decode_own ? -1 : r, dt, cfg.chunk_len, call.s, "all_gather");
  cs.done(rt.algorithm);
}

}  // namespace zccl::gpucoll
