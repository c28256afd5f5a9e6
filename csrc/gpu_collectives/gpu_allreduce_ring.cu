// gZ ring allreduce (SUM/AVG): ring reduce-scatter of compressed blocks, then the data-movement
// allgather of the owners' compressed blocks. Every rank ends with bit-identical values.
//
// First step, store and forward: each step moves one whole block (the CPU's allreduce_ring.cpp
// cuts blocks into segments and forwards them cut-through; doing that here means a segment loop
// around the same calls plus double-buffered wires -- the next step for a GPU session).
//
// Steps (rank r, p ranks, balanced blocks of n/p values; next = r+1, prev = r-1):
//   1. reduce-scatter, s = 0 .. p-2: compress block r-s-1 (own values at s = 0, else the partial
//      sum received at s-1) on the device, send its stream to next; receive block r-s-2's stream
//      from prev and decompress-reduce it into place (fused kernel). After p-1 steps block r is
//      final on rank r.
//   2. compress block r once, decode the own stream into place (the owner must hold what all
//      others decode, else replicas differ), and ring-allgather the streams: forwarded as
//      received, decoded once each, as one batch on the auxiliary streams.
//   3. AVG: divide everything by p at the end (identical inputs -> identical quotients).
//
// Cost per rank: p compressions, 2(p-1) decompressions of n/p values, 2(p-1)/p n w / R bytes on
// the wire (+ the same in D2H/H2D copies when staged), 2(p-1) latency terms plus two stream
// syncs per step.
//
// Output error (exact arithmetic): (p-1) eb along the reduce-scatter chain + eb in step 2:
// SUM p eb, AVG eb, as coll::output_error_bound(Ring, ...) states.
#include <vector>

#include "gpu_common.h"

namespace zccl::gpucoll::detail {

void ring_allreduce(Comm& comm, GpuWorkspace::Impl& ws, void* buf, size_t count, DType dt,
                    ReduceOp op, const Config& cfg, cudaStream_t stream, Stats& st) {
  const coll::toolkit::Ring ring(comm.size(), comm.rank());
  const int p = ring.p, r = ring.rank, next = ring.next, prev = ring.prev;
  const size_t es = dtype_size(dt);
  const double eb = cfg.error_bound;
  auto* base = static_cast<uint8_t*>(buf);
  const coll::toolkit::Blocks blocks = coll::toolkit::Blocks::balanced(count, p);
  const size_t cap = capacity(dt, blocks.max_count, cfg.chunk_len);
  const int tag = comm.next_tag_base();

  // 1. Reduce-scatter.
  {
    Wire send(ws, kSend, cap);
    Wire recv(ws, kRecv, cap);
    size_t ws_bytes = 0;  // the codec workspace, sized once for the largest block
    ws.codec_ws(0, dt, blocks.max_count, cfg.chunk_len, &ws_bytes);
    for (int s = 0; s < p - 1; ++s) {
      const size_t sb = static_cast<size_t>(ring.before(s + 1));
      const size_t rb = static_cast<size_t>(ring.before(s + 2));
      transport::Request rreq, sreq;
      if (blocks.count[rb] > 0) {
        recv.before_receive();
        rreq = comm.irecv(recv.wire(), cap, prev, tag);
      }
      if (blocks.count[sb] > 0) {
        const size_t len = compress_sync(ws, base + blocks.offset[sb] * es, dt, blocks.count[sb], eb,
                                         cfg.chunk_len, send.dev(), cap, stream);
        send.publish(0, len, stream);
        sreq = comm.isend(send.wire(), len, next, tag);
        st.bytes_sent += len;
        st.bytes_compressed += blocks.count[sb] * es;
      }
      if (blocks.count[rb] > 0) {
        const size_t got = comm.wait(rreq);
        recv.land(0, got, stream);
        decode(ws, recv, 0, got, base + blocks.offset[rb] * es, dt, blocks.count[rb], cfg.chunk_len,
               stream, "all_reduce (ring reduce-scatter)", prev, gpu::ReduceOp::Sum);
      }
      if (blocks.count[sb] > 0) comm.wait(sreq);
    }
  }

  // 2. Compress the own final block once, decode it in place, ring-allgather the streams.
  Wire all(ws, kStreams, cap * static_cast<size_t>(p));
  const size_t own = static_cast<size_t>(r);
  size_t own_len = 0;
  if (blocks.count[own] > 0) {
    void* mine = base + blocks.offset[own] * es;
    own_len = compress_sync(ws, mine, dt, blocks.count[own], eb, cfg.chunk_len, all.dev(own * cap),
                            cap, stream);
    st.bytes_compressed += blocks.count[own] * es;
    size_t dws = 0;
    void* codec = ws.codec_ws(0, dt, blocks.count[own], cfg.chunk_len, &dws);
    int32_t* err = ws.errs(1);
    gpu::decompress(all.dev(own * cap), own_len, mine, dt, blocks.count[own], codec, dws,
                    reinterpret_cast<GpuStream>(stream), err);
    all.publish(own * cap, own_len, stream);  // also waits for the decode
    check_decoded(*err, "all_reduce (own block)", r);
  }
  std::vector<bool> nonempty(static_cast<size_t>(p));
  std::vector<void*> dsts(static_cast<size_t>(p));
  for (size_t q = 0; q < nonempty.size(); ++q) {
    nonempty[q] = blocks.count[q] > 0;
    dsts[q] = base + blocks.offset[q] * es;
  }
  const std::vector<size_t> lens =
      ring_allgather_streams(comm, all, cap, own_len, nonempty, tag + 1, stream);
  for (size_t q = 0; q < lens.size(); ++q) {
    if (q != own) st.bytes_sent += lens[q] * (q == static_cast<size_t>(next) ? 0 : 1);
  }
  st.bytes_sent += own_len;
  decode_batch(ws, all, cap, lens, dsts, blocks.count, r, dt, cfg.chunk_len, stream,
               "all_reduce (ring allgather)");

  // 3. AVG.
  if (op == ReduceOp::Avg) {
    gpu::divide(buf, dt, count, p, reinterpret_cast<GpuStream>(stream));
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after divide)");
  }
}

}  // namespace zccl::gpucoll::detail
