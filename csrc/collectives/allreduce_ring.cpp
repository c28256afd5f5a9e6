// Ring allreduce (ZCCL computation framework): reduce-scatter, then the data-movement allgather.
// Every rank ends with bit-identical values.
//
// Steps (n values, p ranks; blocks of ceil(n/p) for the first n % p ranks, floor(n/p) after):
//   1. SUM/AVG: pipelined ring reduce-scatter (reduce_scatter_ring.cpp), in place: block r of buf
//      ends holding the reduction of block r on rank r.
//      MIN/MAX: one exchange of compressed blocks instead (reduce_scatter_minmax.cpp), eb/2.
//   2. allgather stage (allgather_decompressed below): coll::allgatherv compresses each rank's
//      reduced block once, moves the compressed streams, and decompresses each once on arrival.
//      The owner of a block must hold what everybody else decoded, not its exact value, or the
//      replicas differ; fZ-light is deterministic, so the owner gets the same values by decoding
//      its own stream (kAllgathervDecodesOwnBlock), or, if allgatherv hands back the exact own
//      block, by compressing and decoding its block once more with the same parameters.
//   3. AVG: divide everything by p at the very end (identical inputs -> identical quotients).
//
// Cost (w bytes per value, ratio R, compressor throughputs C and D, reduction gamma):
//   reduce-scatter (p-1) [alpha + (n w/p)(beta/R + 1/C + 1/D + gamma)] (compression overlapped
//   with transfers) + allgather (p-1) [alpha + (n w/p) (beta/R + 1/D)] + (n w/p)/C:
//   p compressions and 2(p-1) decompressions of n/p values, 2(p-1)/p n w / R bytes sent.
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

// Whether coll::allgatherv leaves on each rank, in its own slot, the values decoded from its own
// stream (then nothing more is needed for identical replicas). It does not: allgather_ring.cpp
// copies the own block exactly, so the owner compresses and decodes its block once more.
constexpr bool kAllgathervDecodesOwnBlock = false;

template <class T>
void allgather_decompressed(Comm& comm, T* buf, const Blocks& blocks, double eb,
                            const Config& cfg, Stats& st) {
  const int r = comm.rank();
  const size_t mine = blocks.count[static_cast<size_t>(r)];
  T* own = buf + blocks.offset[static_cast<size_t>(r)];
  // with_error_bound() clears Algorithm::Mpi and min_compress_bytes, and some block is non-empty
  // (callers pass count >= 1), so allgatherv takes its compressed path -- the own-block step
  // below assumes it.
  const Config c = with_error_bound(cfg, eb);
  Stats sub;
  allgatherv(comm, own, mine, buf, blocks.count, dtype_of<T>(), c, &sub);  // own slot untouched
  add_stats(st, sub);
  if (!kAllgathervDecodesOwnBlock) {
    // Deterministic codec, same parameters: the same values the other ranks decoded.
    Codec codec(dtype_of<T>(), eb, c, st);
    const size_t cap = codec.capacity(mine);
    uint8_t* stream = workspace_bytes(kSlotSend0, cap);
    const size_t bytes = codec.compress(own, mine, stream, cap);
    codec.decompress(stream, bytes, own, mine, r);
  }
}

template <class T>
void ring_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb, const Config& cfg,
                    Stats& st) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Blocks blocks = Blocks::balanced(count, p);
  double eb_gather = eb;
  if (is_min_max(op)) {
    eb_gather = split_bound(eb, 2);
    exchange_reduce_scatter(comm, buf, buf + blocks.offset[r], blocks, op, eb_gather, cfg, st);
  } else {
    ring_reduce_scatter(comm, RingBuffers<T>{buf, buf, nullptr}, blocks, op, eb, cfg, st);
  }
  allgather_decompressed(comm, buf, blocks, eb_gather, cfg, st);
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
