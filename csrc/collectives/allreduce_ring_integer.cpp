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
//      forwarded to next as received (t < p-2) and decoded into its place. Every rank decodes
//      the same segment of each block, the owner included, so the replicas are bit-identical.
//   3. AVG: the caller divides by p at the very end.
// The allgather's receives are all posted before the reduce-scatter starts (their own tag), so
// the stages overlap; MPI is polled between blocks of 4096 values.
// Threads (Config::threads, 0: the OpenMP default): the segments of a step are independent
// streams, so they are taken W = threads at a time: the calling thread waits for the window's
// receives in order, the W combines (or, in the allgather, decodes) run in parallel, one
// segment per thread (run_lanes, compute_common.h), then the window's sends go out in order.
// Only the calling thread polls and calls the transport. A segment's bytes do not depend on
// the thread that coded it, so the result is bit-identical for every thread count; W = 1 is the
// one-segment-at-a-time schedule.
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

  // Allgather: the own segments (S slots), then one slot per received segment (forwarded from
  // where it landed), all receives posted first; then the reduce-scatter's parity slots.
  const size_t received = static_cast<size_t>(p - 1) * S;
  uint8_t* const own_area = workspace_bytes(kSlotScratch2, S * cap);
  uint8_t* const ag_area = workspace_bytes(kSlotSend1, received * cap);
  std::vector<Pending> ag_rx(received), ag_tx(received + S);
  for (size_t k = 0; k < received; ++k) {
    ag_rx[k].start(comm.irecv(ag_area + k * cap, cap, prev, ag_tag));
  }
  ParitySlots slots(comm, p, S, cap, prev, rs_tag);  // receives of steps 0 and 1 posted
  const fz::Progress poll = [&](uint64_t, uint64_t) {
    poll_first(comm, slots.rx);
    poll_first(comm, ag_rx);
  };
  auto on_lane = [&poll](int lane) { return lane == 0 ? &poll : nullptr; };

  std::vector<size_t> in_len(static_cast<size_t>(W)), out_len(static_cast<size_t>(W));
  for (int s = 0; s <= p - 1; ++s) {
    const int b = ring.before(s + 1);  // sent at step s, received at step s-1
    const bool final_step = s == p - 1;
    // The final step's segment j is the allgather's own segment j, and (the same values every
    // other rank will decode from it) this rank's result, written over its local values.
    auto dst_of = [&](int j) {
      return final_step ? own_area + static_cast<size_t>(j) * cap : slots.send_buf(s, j);
    };
    for (int j0 = 0; j0 < S; j0 += W) {
      const int w = std::min(W, S - j0);
      for (int k = 0; k < w; ++k) {
        const int j = j0 + k;
        in_len[k] = s >= 1 ? slots.rx[slots.slot(s - 1, j)].finish(comm) : 0;
        if (!final_step) slots.tx[slots.slot(s, j)].finish(comm);  // step s-2's send, same slot
      }
      run_lanes(w, W, [&](int lane, int k) {
        const int j = j0 + k;
        const size_t n = seg.len(b, j);
        const uint8_t* in = s >= 1 ? slots.recv_buf(s - 1, j) : nullptr;
        T* const mine = buf + seg.begin(b, j);
        out_len[k] = lanes[lane].combine(in, in_len[k], mine, n, dst_of(j), cap, prev,
                                         on_lane(lane), final_step ? mine : nullptr);
      });
      for (int k = 0; k < w; ++k) {
        const int j = j0 + k;
        Pending& send = final_step ? ag_tx[received + j] : slots.tx[slots.slot(s, j)];
        send.start(comm.isend(dst_of(j), out_len[k], next, final_step ? ag_tag : rs_tag));
        st.bytes_sent += out_len[k];
        // The slot just consumed takes segment j of step s+1 (same parity as s-1).
        if (s >= 1 && s + 1 <= p - 2) slots.post_recv(s + 1, j);
      }
    }
  }
  finish_all(comm, slots.tx);

  // Decodes W segments at a time, in parallel, once the relay has forwarded them (each stream
  // keeps its own slot of ag_area, so it stays valid).
  struct Received {
    const uint8_t* stream;
    size_t bytes;
    int block, segment;
  };
  std::vector<Received> window;
  auto decode_window = [&] {
    run_lanes(static_cast<int>(window.size()), W, [&](int lane, int k) {
      const Received& r = window[static_cast<size_t>(k)];
      lanes[lane].decode(r.stream, r.bytes, buf + seg.begin(r.block, r.segment),
                         seg.len(r.block, r.segment), prev, on_lane(lane));
    });
    window.clear();
  };
  relay_allgather(comm, ring, S, ag_rx, ag_tx, ag_area, cap, ag_tag, st,
                  [&](const uint8_t* stream, size_t got, int b, int j) {
                    window.push_back({stream, got, b, j});
                    if (static_cast<int>(window.size()) == W) decode_window();
                  });
  decode_window();
  for (int t = 1; t < W; ++t) st.bytes_compressed += lane_stats[t].bytes_compressed;
  return true;
}

template bool integer_ring_allreduce<float>(Comm&, float*, const RingSegments&, double,
                                            const Config&, Stats&);
template bool integer_ring_allreduce<double>(Comm&, double*, const RingSegments&, double,
                                             const Config&, Stats&);

}  // namespace zccl::coll::compute
