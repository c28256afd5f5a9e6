// gZ scatter (data-movement framework): the root compresses the p-1 foreign blocks as one batch
// spread over the workspace's auxiliary streams (multi-stream compression: small blocks alone
// would leave most of the GPU idle), sends each stream straight to its destination, and copies
// its own block exactly; every other rank receives one stream and decodes it once.
//
// Cost at the root: (p-1) compressions of n values overlapped on the device, (p-1) n w / R bytes
// sent; elsewhere one decompression. Output error: eb (the root's own block is exact).
#include <algorithm>
#include <vector>

#include "gpu_common.h"

namespace zccl::gpucoll {

void scatter(Comm& comm, GpuWorkspace& ws, const std::vector<const void*>& blocks, void* recv,
             size_t count, DType dt, int root, const Config& cfg, GpuStream stream, Stats* stats) {
  const char* name = "scatter";
  const int p = comm.size(), r = comm.rank();
  coll::toolkit::check_root(root, p, name);
  if (r == root) {
    coll::toolkit::check_block_list(blocks.size(), p, name);
    for (const void* b : blocks) coll::toolkit::check_buffer(b, count, name, "a block");
  }
  coll::toolkit::check_config(cfg, name);
  coll::toolkit::check_buffer(recv, count, name, "recv");
  coll::toolkit::CallStats cs(stats);
  const size_t es = detail::dtype_size(dt);
  const coll::Route rt =
      coll::route(coll::Collective::Scatter, count * es, p, cfg, coll::Device::Cuda);
  detail::require_compressed(rt, count, name);
  if (count == 0) {
    cs.done(rt.algorithm);
    return;
  }
  detail::Call call(ws, stream, comm);
  auto& w = call.w;
  const size_t cap = detail::capacity(dt, count, cfg.chunk_len);
  const int tag = comm.next_tag_base();

  if (r != root) {
    detail::Wire wire(w, detail::kRecv, cap);
    wire.before_receive();
    const size_t len = comm.recv(wire.wire(), cap, root, tag);
    wire.land(0, len, call.s);
    detail::decode(w, wire, 0, len, recv, dt, count, cfg.chunk_len, call.s, "scatter", root);
    cs.done(rt.algorithm);
    return;
  }

  cs.s.bytes_in = static_cast<uint64_t>(p) * count * es;
  detail::Wire all(w, detail::kStreams, cap * static_cast<size_t>(p));
  // 1. Compress the foreign blocks as one batch: job j on aux stream j % width.
  const int width = std::min(p - 1, detail::kAuxStreams);
  size_t* sizes = w.sizes(static_cast<size_t>(p));
  std::vector<gpu::CompressJob> jobs;
  std::vector<int> dests;
  for (int q = 0; q < p; ++q) {
    if (q == root) continue;
    gpu::CompressJob job;
    job.src = blocks[static_cast<size_t>(q)];
    job.dtype = dt;
    job.count = count;
    job.params.error_bound = cfg.error_bound;
    job.params.chunk_len = cfg.chunk_len;
    job.dst = all.dev(static_cast<size_t>(q) * cap);
    job.dst_cap = cap;
    job.workspace = w.job_ws(jobs.size(), width, dt, count, cfg.chunk_len, &job.ws_bytes);
    job.size_pinned = sizes + q;
    jobs.push_back(job);
    dests.push_back(q);
  }
  if (!jobs.empty()) {
    const std::vector<GpuStream> streams = w.fork(call.s, width);
    gpu::compress_batch(jobs.data(), jobs.size(), streams.data(), streams.size());
    w.join(call.s, width);
  }
  // 2. The own block, exactly, on the main stream behind the batch.
  detail::check(cudaMemcpyAsync(recv, blocks[static_cast<size_t>(root)], count * es,
                                cudaMemcpyDeviceToDevice, call.s),
                "cudaMemcpyAsync (own block)");
  detail::check(cudaStreamSynchronize(call.s), "cudaStreamSynchronize (after compress batch)");
  cs.s.bytes_compressed = static_cast<uint64_t>(p - 1) * count * es;

  // 3. Each stream to its destination (staged: one D2H copy per stream, then one sync).
  std::vector<transport::Request> sends;
  if (!w.cuda_aware) {
    for (const int q : dests) {
      const size_t off = static_cast<size_t>(q) * cap;
      detail::check(cudaMemcpyAsync(all.wire(off), all.dev(off), sizes[q], cudaMemcpyDeviceToHost, call.s),
                    "cudaMemcpyAsync (compressed block to pinned staging)");
    }
    detail::check(cudaStreamSynchronize(call.s), "cudaStreamSynchronize (before MPI send)");
  }
  for (const int q : dests) {
    sends.push_back(comm.isend(all.wire(static_cast<size_t>(q) * cap), sizes[q], q, tag));
    cs.s.bytes_sent += sizes[q];
  }
  comm.wait_all(sends);
  cs.done(rt.algorithm);
}

}  // namespace zccl::gpucoll
