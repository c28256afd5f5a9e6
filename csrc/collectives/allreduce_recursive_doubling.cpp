// Recursive-doubling allreduce with compression (whole buffer per round), with the standard fold
// for a non-power-of-two p. Every rank ends with bit-identical values.
//
// Let p' = the largest power of two <= p, rem = p - p'.
// Steps (rank r):
//   fold in  (rem > 0): among ranks 0 .. 2*rem-1, each odd rank r sends C(x_r) to r-1, which
//            computes v = op(x_{r-1}, D(C(x_r))); the odd ranks then wait; the remaining p' ranks
//            get new ranks 0 .. p'-1 (even r < 2*rem -> r/2, r >= 2*rem -> r - rem).
//   rounds   for mask = 1, 2, .., p'/2: partner = newrank ^ mask. Post the irecv of the
//            partner's stream, compress the own buffer chunk by chunk while polling it
//            (pipelined), send it, then decompress BOTH streams -- the partner's and the own one --
//            and set v = op(D(lower newrank's stream), D(higher newrank's stream)). Both partners
//            reduce the same two decoded arrays in the same order, so they hold bit-identical v;
//            by induction every rank of a group of 2*mask holds the same v after the round
//            (compression and decoding are deterministic functions of the values).
//   fold out (rem > 0): each folded even rank forwards the TWO compressed streams of its last
//            round (lower, higher) to its odd partner, which decodes them and applies the same
//            op in the same order: the odd ranks get the identical result, with no extra error
//            (one more message of the same size instead of a lossy recompression).
//
// Cost (n values of w bytes, L = log2 p', f = 1 if rem > 0; C, D compressor throughputs; R ratio):
//   T = (L + 2f) * alpha + L * n w (beta/R + 1/C + 2/D + gamma)
//       + f * n w (beta/R + 1/C + 1/D + gamma)          (fold in)
//       + f * n w (2 beta/R + 2/D + gamma)              (fold out)
//   For SUM/AVG the gamma terms are mostly gone: the add runs inside the second decode
//   (decompress_add); route.cpp's model keeps them, as it does for the ring's fused hop.
//   Latency-optimal (log p messages) but every round moves and compresses the whole buffer: the
//   choice for small and medium messages (see route.cpp).
//
// Output error bound, exact arithmetic:
//   SUM: every merge op(D(C(a)), D(C(b))) adds at most eb to each of its two operands. With E_k
//     the error of a value after round k, E_k <= E_{k-1}(a) + E_{k-1}(b) + 2 eb; a folded value
//     starts with eb (one compression), the others with 0. Summing over the merge tree:
//         |result - exact| <= [rem + 2 (p' - 1)] * eb = (p + p' - 2) * eb
//     (2(p-1) eb for a power of two; 3eb at p=3, 6eb at p=4, 7eb at p=5, 9eb at p=7). This is
//     twice the (p-1) eb of the textbook variant in which each rank adds its EXACT own buffer to
//     the partner's decoded one: that variant leaves the two partners with different values
//     (own exact + partner lossy differs from own lossy + partner exact), which lets DDP replicas
//     drift apart; identical replicas are worth the factor two here.
//   AVG: the SUM is divided by p once at the end: (p + p' - 2) * eb / p.
//   MIN/MAX: |min(a', b') - min(a, b)| <= max(|a'-a|, |b'-b|), so every stage (fold in, each
//     round) adds at most its per-compression bound to the worst error so far. We run each
//     compression with eb_s = eb / (L + f), giving |result - exact| <= eb as collectives.h states.
//   Floating-point rounding of the reductions comes on top (see reduce_scatter_ring.cpp).
#include <stdexcept>
#include <vector>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

namespace {

// buf = op(buf, D(stream)), in that operand order: SUM/AVG decode and add chunk by chunk
// (fz::decompress_add: buf + x', no decoded copy written and read again); MIN/MAX decode into
// `scratch` first.
template <class T>
void merge_stream(Codec& codec, const uint8_t* stream, size_t bytes, T* buf, T* scratch,
                  size_t count, int peer, ReduceOp op, const Config& cfg,
                  const fz::Progress* progress) {
  if (is_min_max(op)) {
    codec.decompress(stream, bytes, scratch, count, peer, progress);
    kernels::reduce_into(buf, buf, scratch, count, op, cfg.threads);
  } else {
    codec.decompress_add(stream, bytes, buf, buf, count, peer, progress);
  }
}

}  // namespace

template <class T>
void recursive_doubling_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb,
                                  const Config& cfg, Stats& st) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Doubling rd(p, r);
  const double eb_s = is_min_max(op) ? split_bound(eb, rd.stages()) : eb;

  const int tag = comm.next_tag_base();
  const int tag_fold_in = tag, tag_round = tag + 1, tag_lo = tag + 2, tag_hi = tag + 3;

  Codec codec = Codec::for_reduction(dtype_of<T>(), eb_s, cfg, st);
  const size_t cap = codec.capacity(count);
  uint8_t* const own_s = workspace_bytes(kSlotSend0, cap);
  uint8_t* const peer_s = workspace_bytes(kSlotRecv, cap);
  T* const other = workspace<T>(kSlotScratch, count);  // the partner's decoded buffer
  Pending tx, rx, rx2;

  // ---- Fold in: odd ranks below 2*rem hand their data to the even rank below them. ----
  if (rd.fold_sender()) {
    // Post the receives of the final two streams first; compress while polling them.
    rx.start(comm.irecv(own_s, cap, r - 1, tag_lo));
    rx2.start(comm.irecv(peer_s, cap, r - 1, tag_hi));
    uint8_t* const mine = workspace_bytes(kSlotSend1, cap);
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      rx.poll(comm);
      rx2.poll(comm);
    };
    const size_t bytes = codec.compress(buf, count, mine, cap, &poll);
    tx.start(comm.isend(mine, bytes, r - 1, tag_fold_in));
    st.bytes_sent += bytes;
    tx.finish(comm);
    // ---- Fold out (receiving side): the same two streams, the same op, the same order. ----
    const size_t lo_bytes = rx.finish(comm);
    codec.decompress(own_s, lo_bytes, buf, count, r - 1);
    const size_t hi_bytes = rx2.finish(comm);
    merge_stream(codec, peer_s, hi_bytes, buf, other, count, r - 1, op, cfg, nullptr);
    if (op == ReduceOp::Avg) kernels::divide(buf, count, p, cfg.threads);
    return;
  }
  if (rd.in_fold()) {  // even folded rank: absorb r+1 (only this rank holds the sum: own exact)
    const size_t got = comm.recv(peer_s, cap, r + 1, tag_fold_in);
    merge_stream(codec, peer_s, got, buf, other, count, r + 1, op, cfg, nullptr);
  }
  const int newrank = rd.newrank;

  // ---- Rounds: whole-buffer exchange with newrank ^ mask. ----
  // A round's two streams, the lower newrank's and the higher one's (the fold out forwards the
  // last round's).
  struct Stream {
    const uint8_t* data = nullptr;
    size_t bytes = 0;
    int from = -1;
  };
  Stream lo, hi;
  for (int mask = 1; mask < rd.pp; mask <<= 1) {
    const int pn = newrank ^ mask;
    const int peer = rd.real_rank(pn);
    rx.start(comm.irecv(peer_s, cap, peer, tag_round));
    const fz::Progress poll = [&](uint64_t, uint64_t) { rx.poll(comm); };
    const size_t own_bytes = codec.compress(buf, count, own_s, cap, &poll);
    tx.start(comm.isend(own_s, own_bytes, peer, tag_round));
    st.bytes_sent += own_bytes;
    const Stream own{own_s, own_bytes, r}, theirs{peer_s, rx.finish(comm), peer};
    lo = newrank < pn ? own : theirs;
    hi = newrank < pn ? theirs : own;
    // op(D(lo), D(hi)), exactly as the partner computes it (the operand order decides NaN
    // payloads and signed zeros): lo decoded over buf (its exact values are no longer needed),
    // hi merged into it, while the send progresses.
    const fz::Progress poll_tx = [&](uint64_t, uint64_t) { tx.poll(comm); };
    codec.decompress(lo.data, lo.bytes, buf, count, lo.from, &poll_tx);
    merge_stream(codec, hi.data, hi.bytes, buf, other, count, hi.from, op, cfg, &poll_tx);
    tx.finish(comm);  // own_s is rewritten next round
  }

  // ---- Fold out: forward the last round's two streams (lo first). ----
  if (rd.in_fold()) {
    std::vector<transport::Request> reqs;
    reqs.push_back(comm.isend(lo.data, lo.bytes, r + 1, tag_lo));
    reqs.push_back(comm.isend(hi.data, hi.bytes, r + 1, tag_hi));
    st.bytes_sent += lo.bytes + hi.bytes;
    comm.wait_all(reqs);
  }
  if (op == ReduceOp::Avg) kernels::divide(buf, count, p, cfg.threads);
}

template void recursive_doubling_allreduce<float>(Comm&, float*, size_t, ReduceOp, double,
                                                  const Config&, Stats&);
template void recursive_doubling_allreduce<double>(Comm&, double*, size_t, ReduceOp, double,
                                                   const Config&, Stats&);

}  // namespace zccl::coll::compute
