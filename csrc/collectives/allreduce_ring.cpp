// Ring allreduce (ZCCL computation framework): reduce-scatter, then the data-movement allgather.
// Every rank ends with bit-identical values.
//
// SUM/AVG (n values, p ranks), one segmented pipeline over interleaved blocks (compute_common.h,
// RingSegments: the buffer is cut into segments of ~1 MiB and segment k belongs to block k % p,
// which balances the compressed bytes on the links whatever part of the buffer compresses well):
//   1. pipelined ring reduce-scatter (reduce_scatter_ring.cpp), in place: block r of buf ends
//      holding the reduction of block r on rank r, segment by segment;
//   2. as soon as segment j of block r is final (segment_done): compress it once, isend the
//      stream to next, and decode the stream into buf -- the owner must hold what everybody
//      else decodes, not its exact sum, or the replicas differ (fZ-light is deterministic);
//   3. allgather ring of compressed segments: at step t = 0 .. p-2 segment j of block r-t-1
//      arrives from prev; it is forwarded to next at once, as received (t < p-2), and then
//      decoded into its place. Compressed bytes are never decompressed and recompressed on the
//      way. The allgather runs on its own tag, its receives all posted before the
//      reduce-scatter starts, so the two stages overlap without any ordering between them.
//   4. AVG: divide everything by p at the very end (identical inputs -> identical quotients).
// SUM/AVG with eb > 0 and Config::integer_ring (opt-in) take allreduce_ring_integer.cpp
//   instead: the same ring adding quantisation codes as integers (same bound, p eb), on one
//   thread per rank whatever Config::threads says (so the thread count never changes a bit).
// MIN/MAX: one exchange of compressed blocks instead of step 1 (reduce_scatter_minmax.cpp),
//   with eb/2, then allgather_decompressed below (coll::allgatherv), also with eb/2.
//
// Cost (w bytes per value, ratio R, compressor throughputs C and D, reduction gamma):
//   p compressions and 2(p-1) decompressions of n/p values, 2(p-1)/p n w / R bytes sent by each
//   rank; with both stages pipelined by segments, the time tends to the larger of the link time
//   2 (p-1)/p n w beta / R and the codec time (n w / p) (p/C + 2(p-1)/D + (p-1) gamma).
//
// Output error (exact arithmetic):
//   SUM: (p-1) eb from the reduce-scatter chain + eb from the one compression of the allgather:
//        |result - exact| <= p eb   (collectives.h: "(p-1)*eb + eb").
//   AVG: p eb / p = eb.
//   MIN/MAX: exchange with eb/2 (error <= eb/2, see reduce_scatter_minmax.cpp), then one more
//        compression with eb/2 in the allgather: <= eb. (Recompressing a decoded value with the
//        same bound is often exact, but not always -- float32 codes above 2^21 can round to a
//        neighbour, and raw chunks are not on the quantisation grid -- so we do not rely on it.)
#include <algorithm>
#include <vector>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

template <class T>
void allgather_decompressed(Comm& comm, T* buf, const Blocks& blocks, double eb,
                            const Config& cfg, Stats& st) {
  const int r = comm.rank();
  T* own = buf + blocks.offset[static_cast<size_t>(r)];
  // with_error_bound() clears Algorithm::Mpi and min_compress_bytes, and some block is non-empty
  // (callers pass count >= 1), so allgatherv takes its compressed path. Without owner_exact it
  // decodes the own block from the stream it sent, as the others do: the same bits everywhere.
  // (owner_exact is the all_gather's setting; an all_reduce's replicas must stay identical.
  // Recompressing the exact own block instead gave other bits for half tensors, whose
  // reductions send half streams: found by tests/mpi/fuzz_checks.py.)
  Config c = with_error_bound(cfg, eb);
  c.owner_exact = false;
  Stats sub;
  allgatherv(comm, own, blocks.count[static_cast<size_t>(r)], buf, blocks.count, dtype_of<T>(),
             c, &sub);
  add_stats(st, sub);
}

namespace {

// Steps 2-3 above for SUM/AVG: the reduce-scatter runs inside, calling back per final segment.
template <class T>
void pipelined_sum_allreduce(Comm& comm, T* buf, const RingSegments& seg, ReduceOp op, double eb,
                             const Config& cfg, Stats& st) {
  const Ring ring(comm.size(), comm.rank());
  const int p = ring.p, r = ring.rank, next = ring.next, prev = ring.prev;
  const int tag = comm.next_tag_base();  // the allgather's; the reduce-scatter takes the next
  const int S = seg.per_block;
  Codec codec = Codec::for_reduction(dtype_of<T>(), eb, cfg, st);
  const size_t cap = codec.capacity(seg.seg_len);
  // Own segments' streams (S slots), then every received segment (one slot each: a received
  // stream is forwarded from where it landed, so no slot is reused within a call).
  const size_t received = static_cast<size_t>(p - 1) * S;
  uint8_t* const own_area = workspace_bytes(kSlotScratch2, S * cap);
  uint8_t* const rx_area = workspace_bytes(kSlotSend1, received * cap);
  std::vector<Pending> rx(received), tx(received + S);
  for (size_t k = 0; k < received; ++k) rx[k].start(comm.irecv(rx_area + k * cap, cap, prev, tag));
  const fz::Progress poll = [&](uint64_t, uint64_t) {
    poll_first(comm, rx);
    poll_first(comm, tx);
  };

  const SegmentDone start_allgather = [&](int j) {
    const size_t n = seg.len(r, j);
    T* const own = buf + seg.begin(r, j);
    uint8_t* const stream = own_area + static_cast<size_t>(j) * cap;
    const size_t bytes = codec.compress(own, n, stream, cap, &poll);
    tx[received + j].start(comm.isend(stream, bytes, next, tag));
    st.bytes_sent += bytes;
    codec.decompress(stream, bytes, own, n, r, &poll);
  };
  ring_reduce_scatter(comm, RingBuffers<T>{buf, buf, nullptr}, seg, op, eb, cfg, st,
                      &start_allgather);

  relay_allgather(comm, ring, S, rx, tx, rx_area, cap, tag, st,
                  [&](const uint8_t* stream, size_t got, int b, int j) {
                    codec.decompress(stream, got, buf + seg.begin(b, j), seg.len(b, j), prev,
                                     &poll);
                  });
}

}  // namespace

template <class T>
void ring_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb, const Config& cfg,
                    Stats& st) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  if (is_min_max(op)) {
    const Blocks blocks = Blocks::balanced(count, p);
    const double eb_half = split_bound(eb, 2);
    exchange_reduce_scatter(comm, buf, buf + blocks.offset[r], blocks, op, eb_half, cfg, st);
    allgather_decompressed(comm, buf, blocks, eb_half, cfg, st);
    return;
  }
  // The integer ring codes one segment per thread: its plan gives every block kLaneSegments
  // segments where they stay >= 64 KiB (16 hosts, 64 MB: 16 of 256 KB instead of 4 of 1 MiB).
  const bool integer = cfg.integer_ring && integer_ring_allreduce(
      comm, buf, RingSegments::interleaved(count, p, dtype_of<T>(), cfg, kLaneSegments), eb, cfg,
      st);
  if (!integer) {
    pipelined_sum_allreduce(comm, buf, RingSegments::interleaved(count, p, dtype_of<T>(), cfg),
                            op, eb, cfg, st);
  }
  if (op == ReduceOp::Avg) kernels::divide(buf, count, p, cfg.threads);
}

template void allgather_decompressed<float>(Comm&, float*, const Blocks&, double, const Config&,
                                            Stats&);
template void allgather_decompressed<double>(Comm&, double*, const Blocks&, double,
                                             const Config&, Stats&);
template void ring_allreduce<float>(Comm&, float*, size_t, ReduceOp, double, const Config&,
                                    Stats&);
template void ring_allreduce<double>(Comm&, double*, size_t, ReduceOp, double, const Config&,
                                     Stats&);

}  // namespace zccl::coll::compute
