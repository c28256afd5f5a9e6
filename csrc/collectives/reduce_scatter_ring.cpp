// Ring reduce-scatter with the pipelined compressor (ZCCL computation framework), SUM and AVG.
//
// Steps (p ranks, rank r, next = r+1, prev = r-1 mod p; block b of the layout belongs to rank b):
//   for s = 0 .. p-2:
//     send block  bs = r-s-1 (mod p): at s = 0 this rank's own value, later the partial sum
//                                      accumulated at step s-1;
//     recv block  br = r-s-2 (mod p): the partial sum of ranks br+1 .. r-1 from prev.
//     1. post irecv of the incoming compressed block (capacity fz::max_compressed_size: the
//        compressed size is unknown in advance);
//     2. make sure the send of step s-2 finished (two send buffers: double buffering);
//     3. compress block bs chunk by chunk (fz::compress with a Progress hook); between chunks the
//        hook polls (Comm::test) the pending irecv and the send of step s-1, so MPI moves bytes
//        while this rank compresses;
//     4. isend the stream to next;
//     5. wait for the incoming stream, decompress it (polling the fresh send between chunks),
//        and reduce: acc(br) = local(br) + decompressed.
//   After step p-2 (br = r) acc(r) holds the full reduction of block r.
//
// Cost (n values of w bytes in total, blocks of n/p values, compression ratio R, compressor
// throughputs C and D bytes/s, link alpha/beta, reduction gamma per byte):
//   T = (p-1) * [alpha + (n w / p) * (beta / R + 1/C + 1/D + gamma)]
//   minus the overlap of step 3 with the transfers of steps s-1 and s (pipelining): in the limit
//   a step costs max(compress, transfer) rather than their sum.
//
// Output error (SUM), for each value of block r, in exact arithmetic:
//   the partial forwarded at step s is compressed once (error <= eb) and then added to exact local
//   values, so every one of the p-1 compressions on the chain adds at most eb to the final value:
//       |result - exact sum| <= (p-1) * eb.
//   AVG: the caller divides the SUM by p at the very end, so the bound is (p-1) * eb / p.
//   Floating-point: on top of that, each of the p-1 additions rounds once (at most u * |partial|,
//   u = 2^-24 for float32, 2^-53 for float64); the tests account for it explicitly.
//   eb = 0 (lossless streams): the result is the float sum in ring order, bit-exact modulo order.
#include <stdexcept>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

template <class T>
void ring_reduce_scatter(Comm& comm, const RingBuffers<T>& io, const Blocks& blocks, ReduceOp op,
                         double eb, const Config& cfg, Stats& st) {
  if (is_min_max(op)) {
    throw std::logic_error("zccl: ring_reduce_scatter handles SUM/AVG only (MIN/MAX: exchange)");
  }
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const int tag = comm.next_tag_base();

  Codec codec(dtype_of<T>(), eb, cfg, st);
  const size_t cap = codec.capacity(blocks.max_count);
  uint8_t* const sbuf[2] = {workspace_bytes(kSlotSend0, cap), workspace_bytes(kSlotSend1, cap)};
  uint8_t* const rbuf = workspace_bytes(kSlotRecv, cap);
  T* const scratch = workspace<T>(kSlotScratch, blocks.max_count);
  Pending tx[2], rx;

  for (int s = 0; s < p - 1; ++s) {
    const int bs = ((r - s - 1) % p + p) % p;
    const int br = ((r - s - 2) % p + p) % p;
    const int cur = s % 2, other = 1 - cur;

    // 1. The incoming block travels while we compress ours.
    rx.start(comm.irecv(rbuf, cap, prev, tag));
    // 2. sbuf[cur] was last used by the send of step s-2.
    tx[cur].finish(comm);

    // 3. Pipelined compression, polling both transfers between chunks.
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      rx.poll(comm);
      tx[other].poll(comm);
    };
    const T* src = s == 0 ? io.loc(blocks, bs) : io.acc(blocks, bs);
    const size_t bytes = codec.compress(src, blocks.count[bs], sbuf[cur], cap, &poll);

    // 4. Forward it.
    tx[cur].start(comm.isend(sbuf[cur], bytes, next, tag));
    st.bytes_sent += bytes;

    // 5. Receive, decompress (keeping the sends moving), reduce with the local block.
    const size_t got = rx.finish(comm);
    const fz::Progress poll_tx = [&](uint64_t, uint64_t) {
      tx[cur].poll(comm);
      tx[other].poll(comm);
    };
    codec.decompress(rbuf, got, scratch, blocks.count[br], prev, &poll_tx);
    kernels::reduce_into(io.acc(blocks, br), io.loc(blocks, br), scratch, blocks.count[br],
                         op, cfg.threads);
  }
  tx[0].finish(comm);
  tx[1].finish(comm);
}

template void ring_reduce_scatter<float>(Comm&, const RingBuffers<float>&, const Blocks&,
                                         ReduceOp, double, const Config&, Stats&);
template void ring_reduce_scatter<double>(Comm&, const RingBuffers<double>&, const Blocks&,
                                          ReduceOp, double, const Config&, Stats&);

}  // namespace zccl::coll::compute
