// gZ scatter (data-movement framework): the root compresses the p-1 foreign blocks as one batch
// spread over the workspace's auxiliary streams (multi-stream compression: small blocks alone
// would leave most of the GPU idle), sends each stream straight to its destination, and copies
// its own block exactly; every other rank receives one stream and decodes it once.
//
// Cost at the root: (p-1) compressions of n values overlapped on the device, (p-1) n w / R bytes
// sent; elsewhere one decompression. Output error: eb (the root's own block is exact).
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "gpu_common.h"

namespace zccl::gpucoll {

void scatter(Comm& comm, GpuWorkspace& ws, const std::vector<const void*>& blocks, void* recv,
             size_t count, DType dt, int root, const Config& cfg, GpuStream stream, Stats* stats) {
  Stats local;
  Stats& st = stats != nullptr ? *stats : local;
  st = Stats{};
  const int p = comm.size(), r = comm.rank();
  if (root < 0 || root >= p) throw std::invalid_argument("zccl gpu scatter: root out of range");
  if (r == root && static_cast<int>(blocks.size()) != p) {
    throw std::invalid_argument("zccl gpu scatter: the root needs one block per rank");
  }
  if (count == 0) return;
  const auto start = std::chrono::steady_clock::now();
  detail::DeviceScope scope(ws.device());
  auto& w = ws.impl();
  const cudaStream_t s = detail::raw(stream);
  const size_t es = detail::dtype_size(dt);
  const size_t cap = detail::capacity(dt, count, cfg.chunk_len);
  const int tag = comm.next_tag_base();

  if (r != root) {
    detail::Wire wire(w, detail::kRecv, cap);
    wire.before_receive();
    const size_t len = comm.recv(wire.wire(), cap, root, tag);
    wire.land(0, len, s);
    size_t dws = 0;
    void* codec = w.codec_ws(0, dt, count, cfg.chunk_len, &dws);
    int32_t* err = w.errs(1);
    gpu::decompress(wire.dev(), len, recv, dt, count, codec, dws, stream, err);
    wire.release(s);
    detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (after decompress)");
    detail::check_decoded(*err, "scatter", root);
    st.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }

  st.bytes_in = static_cast<uint64_t>(p) * count * es;
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
    job.workspace = w.codec_ws(1 + static_cast<int>(jobs.size() % static_cast<size_t>(width)), dt,
                               count, cfg.chunk_len, &job.ws_bytes);
    job.size_pinned = sizes + q;
    jobs.push_back(job);
    dests.push_back(q);
  }
  if (!jobs.empty()) {
    w.fork(s, width);
    std::vector<GpuStream> streams;
    for (int i = 0; i < width; ++i) streams.push_back(reinterpret_cast<GpuStream>(w.aux[i].get()));
    gpu::compress_batch(jobs.data(), jobs.size(), streams.data(), streams.size());
    w.join(s, width);
  }
  // 2. The own block, exactly, on the main stream behind the batch.
  detail::check(cudaMemcpyAsync(recv, blocks[static_cast<size_t>(root)], count * es,
                                cudaMemcpyDeviceToDevice, s),
                "cudaMemcpyAsync (own block)");
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (after compress batch)");
  st.bytes_compressed = static_cast<uint64_t>(p - 1) * count * es;

  // 3. Each stream to its destination (staged: one D2H copy per stream, then one sync).
  std::vector<transport::Request> sends;
  if (!w.cuda_aware) {
    for (const int q : dests) {
      const size_t off = static_cast<size_t>(q) * cap;
      detail::check(cudaMemcpyAsync(all.wire(off), all.dev(off), sizes[q], cudaMemcpyDeviceToHost, s),
                    "cudaMemcpyAsync (compressed block to pinned staging)");
    }
    detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (before MPI send)");
  }
  for (const int q : dests) {
    sends.push_back(comm.isend(all.wire(static_cast<size_t>(q) * cap), sizes[q], q, tag));
    st.bytes_sent += sizes[q];
  }
  comm.wait_all(sends);
  st.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace zccl::gpucoll
