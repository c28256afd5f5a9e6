// Ring reduce-scatter with the pipelined compressor (ZCCL computation framework), SUM and AVG.
//
// Ring (p ranks, rank r, next = r+1, prev = r-1 mod p; block b of the layout -- contiguous or
// interleaved, see RingSegments -- belongs to rank b):
// at step s = 0 .. p-2 rank r sends block bs = r-s-1 (mod p) -- its own values at s = 0, later
// the partial sum it accumulated at step s-1 -- and receives block r-s-2 from prev, the partial
// sum of ranks r-s-1 .. r-1. After step p-2 block r holds the full reduction.
//
// Segments (compute_common.h, RingSegments): each block is cut into S segments of ~1 MiB, each
// compressed as its own stream and sent as its own message. Rank r works through (step, segment)
// in order; for (s, j):
//   1. s = 0: compress segment j of the own values of block bs chunk by chunk (polling MPI) and
//      isend it to next.
//   2. 1 <= s <= p-2: wait for segment j of step s-1 (block bs) and until the send that last
//      used this send slot (step s-2) finished; then, chunk by chunk (polling MPI), decode it,
//      add local(bs)[j] and compress the sum into the send slot (Codec::recompress_add: the
//      partial sum is never written to memory); isend it, and repost its receive slot for
//      segment j of step s+1.
//   3. s = p-1 (the final reduce of the own block): decode segment j, adding local(r)[j], into
//      acc(r)[j]; segment_done(j), if given.
// So while segment j is compressed, the segments before it are on the wire, and a segment moves
// on to the next rank as soon as it arrived (cut-through), instead of each step compressing a
// whole block, sending it, and waiting for the whole incoming block before decompressing it
// (the block-per-step version spent ~2x the link time on the emulated 1 Gbit/s cluster). All
// messages share one tag: MPI keeps the order of messages between two ranks on a tag, and both
// sides post and send in (step, segment) order. Receives of steps 0 and 1 are posted up front,
// later ones as slots free up, so a rendezvous-sized message always finds its receive posted.
//
// Cost (n values of w bytes in total, blocks of n/p values, compression ratio R, compressor
// throughputs C and D bytes/s, link alpha/beta, reduction gamma per byte): the work is
//   (p-1) * [alpha * S + (n w / p) * (beta / R + 1/C + 1/D + gamma)]
// but with segments the compression, the transfers and the decompression of different segments
// overlap: in the limit the reduce-scatter costs (p-1) * (n w / p) * max(beta / R, 1/C + 1/D +
// gamma) plus one segment's latency per step.
//
// Output error (SUM), for each value of block r, in exact arithmetic:
//   the partial forwarded at step s is compressed once (error <= eb) and then added to exact local
//   values, so every one of the p-1 compressions on the chain adds at most eb to the final value:
//       |result - exact sum| <= (p-1) * eb.
//   (Segmenting changes nothing: every value is still compressed once per step, with eb.)
//   AVG: the caller divides the SUM by p at the very end, so the bound is (p-1) * eb / p.
//   Floating-point: on top of that, each of the p-1 additions rounds once (at most u * |partial|,
//   u = 2^-24 for float32, 2^-53 for float64); the tests account for it explicitly.
//   eb = 0 (lossless streams): the result is the float sum in ring order, bit-exact modulo order.
#include <stdexcept>
#include <vector>

#include "compute_common.h"

namespace zccl::coll::compute {

template <class T>
void ring_reduce_scatter(Comm& comm, const RingBuffers<T>& io, const RingSegments& seg,
                         ReduceOp op, double eb, const Config& cfg, Stats& st,
                         const SegmentDone* segment_done) {
  if (is_min_max(op)) {
    throw std::logic_error("zccl: ring_reduce_scatter handles SUM/AVG only (MIN/MAX: exchange)");
  }
  if (io.single != nullptr && seg.is_interleaved()) {
    throw std::logic_error("zccl: ring_reduce_scatter: an output block needs contiguous blocks");
  }
  const Ring ring(comm.size(), comm.rank());
  const int p = ring.p, next = ring.next, prev = ring.prev;
  if (p == 1) return;
  const int tag = comm.next_tag_base();

  const int S = seg.per_block;
  Codec codec = Codec::for_reduction(dtype_of<T>(), eb, cfg, st);
  const size_t cap = codec.capacity(seg.seg_len);
  T* const scratch = workspace<T>(kSlotScratch, seg.seg_len);
  ParitySlots slots(comm, p, S, cap, prev, tag);  // receives of steps 0 and 1 posted
  // One MPI_Test between chunks drives every transfer; the next receive is the one that matters.
  const fz::Progress poll = [&](uint64_t, uint64_t) {
    poll_first(comm, slots.rx);
    poll_first(comm, slots.tx);
  };

  // Compresses segment j of step s with `code(dst)` into its send slot (once the send that last
  // used it, at step s-2, is done) and sends it to next.
  auto send_segment = [&](int s, int j, auto&& code) {
    Pending& send = slots.tx[slots.slot(s, j)];
    send.finish(comm);
    uint8_t* const dst = slots.send_buf(s, j);
    const size_t bytes = code(dst);
    send.start(comm.isend(dst, bytes, next, tag));
    st.bytes_sent += bytes;
  };
  for (int s = 0; s <= p - 1; ++s) {
    const int b = ring.before(s + 1);  // sent at step s, received at step s-1
    for (int j = 0; j < S; ++j) {
      const size_t n = seg.len(b, j);
      const T* const own = io.loc(seg, b, j);
      if (s == 0) {
        send_segment(s, j, [&](uint8_t* dst) { return codec.compress(own, n, dst, cap, &poll); });
        continue;
      }
      const size_t got = slots.rx[slots.slot(s - 1, j)].finish(comm);
      const uint8_t* const in = slots.recv_buf(s - 1, j);
      if (s <= p - 2) {
        // A partial sum that moves on is decoded, added and compressed chunk by chunk, never
        // written out (the scratch only serves half streams).
        send_segment(s, j, [&](uint8_t* dst) {
          return codec.recompress_add(in, got, own, n, prev, scratch, dst, cap, &poll);
        });
        if (s + 1 <= p - 2) slots.post_recv(s + 1, j);  // same slot: (s+1) % 2 == (s-1) % 2
      } else {
        // The own block's final sum, decoded and added chunk by chunk into acc.
        codec.decompress_add(in, got, own, io.acc(seg, b, j), n, prev, &poll);
        if (segment_done != nullptr) (*segment_done)(j);
      }
    }
  }
  finish_all(comm, slots.tx);
}

template void ring_reduce_scatter<float>(Comm&, const RingBuffers<float>&, const RingSegments&,
                                         ReduceOp, double, const Config&, Stats&,
                                         const SegmentDone*);
template void ring_reduce_scatter<double>(Comm&, const RingBuffers<double>&,
                                          const RingSegments&, ReduceOp, double, const Config&,
                                          Stats&, const SegmentDone*);

}  // namespace zccl::coll::compute
