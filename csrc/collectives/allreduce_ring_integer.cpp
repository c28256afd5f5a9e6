// Ring allreduce on integer codes (SUM/AVG, eb > 0): the reduce-scatter adds quantisation codes
// as integers instead of decoding, adding floats and re-compressing at each hop (hZCCL's idea,
// see compress/fzcodes.h for the segment format and its arithmetic).
//
// Same ring and blocks as allreduce_ring.cpp (p ranks, rank r, block b belongs to rank b, S
// segments per block, interleaved in the buffer, each its own message; S is at least
// kLaneSegments while segments stay >= 64 KiB, so that threads have a segment each):
//   1. reduce-scatter, for (step s = 0 .. p-1, segment j) in order, block b = r-s-1 (mod p):
//        s = 0:       quantise segment j of the local block b into a code segment, isend to next;
//        1 <= s < p-1: wait for segment j of block b from prev, combine it with the local
//                     values' codes (unpack planes, add integers, re-pack: no float
//                     reconstruction, no re-quantisation of the partial), isend to next;
//        s = p-1:     b = r: the same combine gives the final codes of the own block; the
//                     segment is isent to next on the allgather tag, and the combine also
//                     writes its decoded values into buf (what every other rank decodes).
//   2. allgather: at step t = 0 .. p-2 segment j of block r-t-1 arrives from prev; it is
//      forwarded to next as soon as it arrived (t < p-2), also in the middle of a decode, and
//      decoded into its place. Every rank decodes the same segment of each block, the owner
//      included, so the replicas are bit-identical.
//   3. AVG: the caller divides by p at the very end.
// The allgather's receives are all posted before the reduce-scatter starts (their own tag), so
// the stages overlap; MPI is polled between blocks of 4096 values.
// Threads (Config::threads, 0: the OpenMP default; W = min(threads, S) lanes): the segments
// are independent streams. The reduce-scatter's combines are a flow of tasks (s, j) that the
// lanes take in order, each starting as soon as its segment has arrived (see below); only the
// calling thread polls and calls the transport, marking tasks ready and sending finished ones
// in order. (A first version took W segments at a time, waiting for all W receives before
// coding any and sending none before all W were coded: with S = W a whole step was
// store-and-forward.) The allgather's decodes are a flow too (RingAllgather): W lanes decode
// received segments in order while lane 0 forwards each arrival at once (windows of W decodes
// held each hop's forwards back by a whole window). Every wait of lane 0 is bounded by the
// communicator's deadline (run_flow), so a peer that never sends raises TimeoutError.
// A segment's bytes do not depend on the thread that coded it, so the result is bit-identical
// for every thread count; W = 1 (or a team of one) is the one-segment-at-a-time schedule.
//
// Cost (n values of w bytes, ratio R of the code segments, link beta, hop throughput H, decode
// throughput D): every rank quantises each of its n values once (inside the hops), runs p
// combines (the first one packs without unpacking) and p-1 decodes of n/p values and sends
// 2 (p-1)/p n w / R bytes; pipelined, the time tends to max(2 (p-1)/p n w beta / R,
// (n w / p) (p/H + (p-1)/D)). The float hop (allreduce_ring.cpp) spends a decode, a float add
// and a quantise-and-verify per hop instead of one combine, then compresses and decodes its own
// block once more for the allgather.
//
// Output error (exact arithmetic): every rank's value is quantised once within eb and the codes
// add exactly, so SUM: |result - exact| <= p eb (the same bound as the float ring's (p-1) eb +
// eb); AVG: eb. Rounding on top: one conversion of the exact Q * bin to T (float32), and at
// outlier indices (NaN, Inf, values off the grid) the float64 sum of the exact partials.
#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "../compress/fzlight.h"
#include "compute_common.h"

namespace zccl::coll::compute {

template <class T>
bool integer_ring_allreduce(Comm& comm, T* buf, const RingSegments& seg, double eb,
                            const Config& cfg, Stats& st) {
  const Ring ring(comm.size(), comm.rank());
  const int p = ring.p, next = ring.next, prev = ring.prev;
  std::optional<CodeCodec> first = CodeCodec::for_reduction(eb, p, st);
  if (!first) return false;
  st.integer_hop = true;
  const int ag_tag = comm.next_tag_base();
  const int rs_tag = comm.next_tag_base();
  const int S = seg.per_block;
  const int W = std::clamp(cfg.threads > 0 ? cfg.threads : fz::default_threads(), 1, S);
  // One codec per lane, each counting into its own Stats (lane 0: the call's); the other lanes'
  // byte counts are added at the end, not their seconds (they ran alongside lane 0's).
  std::vector<Stats> lane_stats(static_cast<size_t>(W));
  std::vector<CodeCodec> lanes{*first};
  for (int t = 1; t < W; ++t) lanes.push_back(*CodeCodec::for_reduction(eb, p, lane_stats[t]));
  const size_t cap = lanes[0].capacity(seg.seg_len);

  uint8_t* const own_area = workspace_bytes(kSlotScratch2, S * cap);  // own final segments
  RingAllgather allgather(comm, ring, S, cap, ag_tag, st);  // every receive posted
  ParitySlots slots(comm, p, S, cap, prev, rs_tag);        // receives of steps 0 and 1 posted

  // The reduce-scatter as a flow of tasks k = s * S + j (step s, segment j; run_flow). Task k
  // is ready once its input (segment j of step s-1 from prev) has arrived and its send slot is
  // free. Lane 0's service marks tasks ready in order and sends finished ones in order (one
  // tag: the receiver matches messages in the order they were sent), reposting each consumed
  // receive slot for step s+1, and forwards the allgather's arrivals; it runs while lane 0
  // waits and from its own combine's progress hook, so a lane starts a segment as soon as it
  // arrives rather than when a whole window has.
  const int total = p * S;
  std::vector<std::atomic<int>> state(static_cast<size_t>(total));  // 0 wait, 1 ready, 2 done
  std::vector<size_t> in_len(static_cast<size_t>(total)), out_len(static_cast<size_t>(total));
  int ready_upto = 0, sent_upto = 0;  // lane 0's: tasks marked ready / sent, in order
  auto step_of = [S](int k) { return k / S; };
  auto dst_of = [&](int k) {
    const int s = step_of(k), j = k % S;
    return s == p - 1 ? own_area + static_cast<size_t>(j) * cap : slots.send_buf(s, j);
  };
  FlowControl flow;
  flow.ready = [&](int k) {
    return state[static_cast<size_t>(k)].load(std::memory_order_acquire) != 0;
  };
  flow.settled = [&] { return sent_upto == total; };
  flow.service = [&] {
    allgather.service();
    while (ready_upto < total) {
      const int k = ready_upto, s = step_of(k), j = k % S;
      // From step 2 on, this slot's previous occupant (task k - 2S) must have been sent (and
      // the receive for this step posted in its place) and its send must have completed.
      if (s >= 2 && k - 2 * S >= sent_upto) break;
      if (s <= p - 2) {
        Pending& tx = slots.tx[slots.slot(s, j)];
        tx.poll(comm);
        if (!tx.done) break;
      }
      if (s >= 1) {
        Pending& rx = slots.rx[slots.slot(s - 1, j)];
        rx.poll(comm);
        if (!rx.done) break;
        in_len[static_cast<size_t>(k)] = rx.bytes;
      }
      state[static_cast<size_t>(k)].store(1, std::memory_order_release);
      ++ready_upto;
    }
    while (sent_upto < total &&
           state[static_cast<size_t>(sent_upto)].load(std::memory_order_acquire) == 2) {
      const int k = sent_upto, s = step_of(k), j = k % S;
      const size_t bytes = out_len[static_cast<size_t>(k)];
      if (s == p - 1) {
        allgather.send_own(j, dst_of(k), bytes);
      } else {
        slots.tx[slots.slot(s, j)].start(comm.isend(dst_of(k), bytes, next, rs_tag));
        st.bytes_sent += bytes;
      }
      // The slot just consumed takes segment j of step s+1 (same parity as s-1).
      if (s >= 1 && s + 1 <= p - 2) slots.post_recv(s + 1, j);
      ++sent_upto;
    }
  };
  const fz::Progress serve = [&](uint64_t, uint64_t) { flow.service(); };
  run_flow(comm, flow, total, W, "a reduce-scatter segment", prev, [&](int lane, int k) {
    const int s = step_of(k), j = k % S, b = ring.before(s + 1);
    const uint8_t* in = s >= 1 ? slots.recv_buf(s - 1, j) : nullptr;
    T* const mine = buf + seg.begin(b, j);
    out_len[static_cast<size_t>(k)] = lanes[static_cast<size_t>(lane)].combine(
        in, in_len[static_cast<size_t>(k)], mine, seg.len(b, j), dst_of(k), cap, prev,
        lane == 0 ? &serve : nullptr, s == p - 1 ? mine : nullptr);
    state[static_cast<size_t>(k)].store(2, std::memory_order_release);
  });
  finish_all(comm, slots.tx);

  // The allgather: every received segment decoded on W lanes while lane 0 forwards arrivals.
  allgather.decode_all(W, [&](int lane, const uint8_t* stream, size_t got, int b, int j) {
    lanes[static_cast<size_t>(lane)].decode(stream, got, buf + seg.begin(b, j), seg.len(b, j),
                                            prev, lane == 0 ? allgather.progress() : nullptr);
  });
  for (int t = 1; t < W; ++t) st.bytes_compressed += lane_stats[t].bytes_compressed;
  return true;
}

template bool integer_ring_allreduce<float>(Comm&, float*, const RingSegments&, double,
                                            const Config&, Stats&);
template bool integer_ring_allreduce<double>(Comm&, double*, const RingSegments&, double,
                                             const Config&, Stats&);

}  // namespace zccl::coll::compute
