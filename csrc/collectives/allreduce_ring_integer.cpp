// Ring allreduce on integer codes (SUM/AVG, eb > 0): the reduce-scatter adds quantisation codes
// as integers instead of decoding, adding floats and re-compressing at each hop (hZCCL's idea,
// see compress/fzcodes.h for the segment format and its arithmetic).
//
// Same ring, blocks and segments as allreduce_ring.cpp (p ranks, rank r, block b belongs to rank
// b, each block cut into S segments of ~1 MiB that travel as their own messages):
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
#include <optional>
#include <vector>

#include "compute_common.h"

namespace zccl::coll::compute {

template <class T>
bool integer_ring_allreduce(Comm& comm, T* buf, const Blocks& blocks, double eb,
                            const Config& cfg, Stats& st) {
  const Ring ring(comm.size(), comm.rank());
  const int p = ring.p, next = ring.next, prev = ring.prev;
  std::optional<CodeCodec> maybe = CodeCodec::for_reduction(eb, p, st);
  if (!maybe) return false;
  CodeCodec& codec = *maybe;
  st.integer_hop = true;
  const int ag_tag = comm.next_tag_base();
  const int rs_tag = comm.next_tag_base();
  const RingSegments seg = RingSegments::plan(blocks, dtype_of<T>(), cfg);
  const int S = seg.per_block;
  const size_t cap = codec.capacity(seg.seg_len);

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
  auto at = [&seg](auto* base, int j, size_t n) { return n ? base + seg.begin(j) : base; };

  for (int s = 0; s <= p - 1; ++s) {
    const int b = ring.before(s + 1);  // sent at step s, received at step s-1
    const size_t count = blocks.count[b];
    T* const block = buf + blocks.offset[b];
    for (int j = 0; j < S; ++j) {
      const size_t n = seg.len(count, j);
      const uint8_t* in = nullptr;
      size_t in_len = 0;
      if (s >= 1) {
        in_len = slots.rx[slots.slot(s - 1, j)].finish(comm);
        in = slots.recv_buf(s - 1, j);
      }
      if (s <= p - 2) {
        Pending& send = slots.tx[slots.slot(s, j)];
        send.finish(comm);  // the send of step s-2 from this slot
        uint8_t* const dst = slots.send_buf(s, j);
        const size_t bytes = codec.combine(in, in_len, at(block, j, n), n, dst, cap, prev, &poll);
        send.start(comm.isend(dst, bytes, next, rs_tag));
        st.bytes_sent += bytes;
      } else {
        // The final codes: the allgather segment, and (the same values every other rank will
        // decode from it) this rank's result, written over its local values in one pass.
        uint8_t* const dst = own_area + static_cast<size_t>(j) * cap;
        T* const own = at(block, j, n);
        const size_t bytes = codec.combine(in, in_len, own, n, dst, cap, prev, &poll, own);
        ag_tx[received + j].start(comm.isend(dst, bytes, next, ag_tag));
        st.bytes_sent += bytes;
      }
      // The slot just consumed takes segment j of step s+1 (same parity as s-1).
      if (s >= 1 && s + 1 <= p - 2) slots.post_recv(s + 1, j);
    }
  }
  finish_all(comm, slots.tx);

  relay_allgather(comm, ring, S, ag_rx, ag_tx, ag_area, cap, ag_tag, st,
                  [&](const uint8_t* stream, size_t got, int b, int j) {
                    const size_t n = seg.len(blocks.count[b], j);
                    codec.decode(stream, got, at(buf + blocks.offset[b], j, n), n, prev, &poll);
                  });
  return true;
}

template bool integer_ring_allreduce<float>(Comm&, float*, const Blocks&, double,
                                            const Config&, Stats&);
template bool integer_ring_allreduce<double>(Comm&, double*, const Blocks&, double,
                                             const Config&, Stats&);

}  // namespace zccl::coll::compute
