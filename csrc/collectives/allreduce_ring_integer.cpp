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
// Threads (Config::threads, 0: the OpenMP default; W = min(threads, S) lanes): the segments
// are independent streams. The reduce-scatter's combines are a flow of tasks (s, j) that the
// lanes take in order, each starting as soon as its segment has arrived (see below); only the
// calling thread polls and calls the transport, marking tasks ready and sending finished ones
// in order. (A first version took W segments at a time, waiting for all W receives before
// coding any and sending none before all W were coded: with S = W a whole step was
// store-and-forward.) The allgather's decodes run W at a time (run_lanes, compute_common.h).
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
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <thread>
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

  // The reduce-scatter as a flow of tasks k = s * S + j (step s, segment j), taken in order by
  // the lanes of one parallel region. Task k may run once its input (segment j of step s-1
  // from prev) has arrived and its send slot is free; only the calling thread (lane 0) calls
  // MPI: it marks tasks ready in order, and sends finished ones in order (one tag: the
  // receiver matches messages in the order they were sent), reposting each consumed receive
  // slot for step s+1. It does so while it waits and from its own combine's progress hook, so
  // a lane starts a segment as soon as it arrives rather than when a whole window has.
  const int total = p * S;
  std::vector<std::atomic<int>> state(static_cast<size_t>(total));  // 0 wait, 1 ready, 2 done
  std::vector<size_t> in_len(static_cast<size_t>(total)), out_len(static_cast<size_t>(total));
  int ready_upto = 0, sent_upto = 0;  // lane 0's: tasks marked ready / sent, in order
  auto step_of = [S](int k) { return k / S; };
  auto dst_of = [&](int k) {
    const int s = step_of(k), j = k % S;
    return s == p - 1 ? own_area + static_cast<size_t>(j) * cap : slots.send_buf(s, j);
  };
  // Lane 0 only: marks what became ready, sends what finished.
  auto service = [&] {
    poll_first(comm, ag_rx);
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
      const bool final_step = s == p - 1;
      Pending& send = final_step ? ag_tx[received + j] : slots.tx[slots.slot(s, j)];
      const size_t bytes = out_len[static_cast<size_t>(k)];
      send.start(comm.isend(dst_of(k), bytes, next, final_step ? ag_tag : rs_tag));
      st.bytes_sent += bytes;
      // The slot just consumed takes segment j of step s+1 (same parity as s-1).
      if (s >= 1 && s + 1 <= p - 2) slots.post_recv(s + 1, j);
      ++sent_upto;
    }
  };
  const fz::Progress serve = [&](uint64_t, uint64_t) { service(); };
  std::atomic<int> next_task{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(W));
#pragma omp parallel num_threads(W)
  {
    const int lane = omp_get_thread_num();
    try {
      for (int k = next_task.fetch_add(1); k < total && !failed.load();
           k = next_task.fetch_add(1)) {
        std::atomic<int>& st_k = state[static_cast<size_t>(k)];
        while (st_k.load(std::memory_order_acquire) != 1 && !failed.load()) {
          if (lane == 0) {
            service();
          } else {
            std::this_thread::yield();
          }
        }
        if (failed.load()) break;
        const int s = step_of(k), j = k % S, b = ring.before(s + 1);
        const uint8_t* in = s >= 1 ? slots.recv_buf(s - 1, j) : nullptr;
        T* const mine = buf + seg.begin(b, j);
        out_len[static_cast<size_t>(k)] = lanes[static_cast<size_t>(lane)].combine(
            in, in_len[static_cast<size_t>(k)], mine, seg.len(b, j), dst_of(k), cap, prev,
            lane == 0 ? &serve : nullptr, s == p - 1 ? mine : nullptr);
        st_k.store(2, std::memory_order_release);
      }
      if (lane == 0) {
        while (sent_upto < total && !failed.load()) service();
      }
    } catch (...) {
      errors[static_cast<size_t>(lane)] = std::current_exception();
      failed.store(true);
    }
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  finish_all(comm, slots.tx);

  // Decodes W segments at a time, in parallel, once the relay has forwarded them (each stream
  // keeps its own slot of ag_area, so it stays valid); lane 0 polls the allgather's receives
  // (the reduce-scatter's are all done by now).
  const fz::Progress poll = [&](uint64_t, uint64_t) { poll_first(comm, ag_rx); };
  auto on_lane = [&poll](int lane) { return lane == 0 ? &poll : nullptr; };
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
