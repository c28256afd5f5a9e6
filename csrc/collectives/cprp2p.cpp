// CprP2P: the naive way to add compression to a ring allreduce, kept as the baseline ZCCL
// improves on. Every send compresses (whole block, OpenMP, not pipelined), every receive
// decompresses, nothing overlaps: each step is compress -> blocking sendrecv -> decompress ->
// reduce. Forwarded data in the allgather stage is decompressed and compressed again at every hop.
//
// Steps (rank r, next = r+1, prev = r-1; blocks of ceil/floor(n/p) values, block b owned by b):
//   reduce-scatter, s = 0 .. p-2: send C(block r-s-1), recv block r-s-2, acc = local + D(recv).
//   allgather, s = 0 .. p-2: send C(block r-s) (at s = 0 the owner's reduced block, which the
//     owner then replaces by D(C(block)) as the others see it), recv block r-s-1 into D(recv).
//   AVG: divide by p at the end.
//
// Cost (n values of w bytes, ratio R, compressor throughputs C and D):
//   T = 2(p-1) * [alpha + (n w / p) * (beta/R + 1/C + 1/D)] + (p-1)(n w / p) gamma
//   i.e. 2(p-1) compressions of a block instead of ZCCL's p (ring + data-movement allgather), and
//   no overlap of compression with communication.
//
// Output error (exact arithmetic):
//   SUM: reduce-scatter chain (p-1) eb; the allgather stage recompresses the decoded block at each
//     of up to p-1 hops, each hop adding at most eb: |result - exact| <= 2 (p-1) eb.
//     (In practice recompressing a decoded value with the same eb usually reproduces it exactly --
//     its code rounds back to the same integer, see the test "recompression" -- so the allgather
//     stage then adds only eb; the worst case is what output_error_bound reports.)
//   AVG: 2 (p-1) eb / p.
//   MIN/MAX: |min(a', b) - min(a, b)| <= |a' - a|: every one of the 2(p-1) compressions on a
//     value's path adds at most its bound, so each runs with eb / (2(p-1)): total <= eb.
//   Bit-identical results across ranks hold whenever recompression of decoded values is lossless
//   (always for float64; for float32 when |x| / bin < 2^21, see the test); ZCCL's ring does not
//   depend on it.
#include <stdexcept>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

namespace {

// One blocking exchange step: compress `n_send` values at `src`, sendrecv, decode into `dst`.
// Returns the size of the stream sent (left in sbuf).
template <class T>
size_t step(Comm& comm, Codec& codec, const T* src, size_t n_send, T* dst, size_t n_recv,
            uint8_t* sbuf, uint8_t* rbuf, size_t cap, int tag, Stats& st) {
  const Ring ring(comm.size(), comm.rank());
  const size_t bytes = codec.compress(src, n_send, sbuf, cap);
  st.bytes_sent += bytes;
  const size_t got = comm.sendrecv(sbuf, bytes, ring.next, rbuf, cap, ring.prev, tag);
  codec.decompress(rbuf, got, dst, n_recv, ring.prev);
  return bytes;
}

}  // namespace

template <class T>
void cprp2p_reduce_scatter(Comm& comm, const RingBuffers<T>& io, const Blocks& blocks,
                           ReduceOp op, double eb, const Config& cfg, Stats& st) {
  const Ring ring(comm.size(), comm.rank());
  const int p = ring.p;
  if (p == 1) return;
  const int tag = comm.next_tag_base();
  Codec codec = Codec::for_reduction(dtype_of<T>(), eb, cfg, st);
  const size_t cap = codec.capacity(blocks.max_count);
  uint8_t* const sbuf = workspace_bytes(kSlotSend0, cap);
  uint8_t* const rbuf = workspace_bytes(kSlotRecv, cap);
  T* const scratch = workspace<T>(kSlotScratch, blocks.max_count);
  for (int s = 0; s < p - 1; ++s) {
    const int bs = ring.before(s + 1);
    const int br = ring.before(s + 2);
    const T* src = s == 0 ? io.loc(blocks, bs) : io.acc(blocks, bs);
    step(comm, codec, src, blocks.count[bs], scratch, blocks.count[br], sbuf, rbuf, cap, tag,
         st);
    kernels::reduce_into(io.acc(blocks, br), io.loc(blocks, br), scratch, blocks.count[br],
                         op, cfg.threads);
  }
}

template <class T>
void cprp2p_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb,
                      const Config& cfg, Stats& st) {
  const Ring ring(comm.size(), comm.rank());
  const int p = ring.p, r = ring.rank;
  if (p == 1) return;
  const double eb_hop = is_min_max(op) ? split_bound(eb, 2 * (p - 1)) : eb;
  const Blocks blocks = Blocks::balanced(count, p);
  const RingBuffers<T> io{buf, buf, nullptr};
  cprp2p_reduce_scatter(comm, io, blocks, op, eb_hop, cfg, st);

  const int tag = comm.next_tag_base();
  Codec codec = Codec::for_reduction(dtype_of<T>(), eb_hop, cfg, st);
  const size_t cap = codec.capacity(blocks.max_count);
  uint8_t* const sbuf = workspace_bytes(kSlotSend0, cap);
  uint8_t* const rbuf = workspace_bytes(kSlotRecv, cap);
  for (int s = 0; s < p - 1; ++s) {
    const int bs = ring.before(s);
    const int br = ring.before(s + 1);
    T* src = buf + blocks.offset[bs];
    const size_t sent = step(comm, codec, src, blocks.count[bs], buf + blocks.offset[br],
                             blocks.count[br], sbuf, rbuf, cap, tag, st);
    if (s == 0) {  // the owner keeps what the others decode from its stream
      codec.decompress(sbuf, sent, src, blocks.count[bs], r);
    }
  }
  if (op == ReduceOp::Avg) kernels::divide(buf, count, p, cfg.threads);
}

template void cprp2p_reduce_scatter<float>(Comm&, const RingBuffers<float>&, const Blocks&,
                                           ReduceOp, double, const Config&, Stats&);
template void cprp2p_reduce_scatter<double>(Comm&, const RingBuffers<double>&, const Blocks&,
                                            ReduceOp, double, const Config&, Stats&);
template void cprp2p_allreduce<float>(Comm&, float*, size_t, ReduceOp, double, const Config&,
                                      Stats&);
template void cprp2p_allreduce<double>(Comm&, double*, size_t, ReduceOp, double, const Config&,
                                       Stats&);

}  // namespace zccl::coll::compute
