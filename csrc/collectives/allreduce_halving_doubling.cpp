// Recursive-halving reduce-scatter + recursive-doubling allgather with compression (the
// Rabenseifner allreduce, as in Gloo's allreduce_halving_doubling and Thakur et al., "Optimization
// of Collective Communication Operations in MPICH", 2005), with the standard fold for a
// non-power-of-two p. Every rank ends with bit-identical values.
//
// Why: the ring needs 2(p-1) steps, so on fast links and many ranks its per-step costs dominate
// (SimGrid, 64 hosts at 100 Gbit/s: 126 ring steps, 0.56x of MPI). This schedule moves the same
// compressed bytes and does the same codec work in 2 log2(p') rounds.
//
// Layout: p' = the largest power of two <= p; the buffer is cut into p' interleaved blocks of
// ~1 MiB segments (RingSegments::interleaved: segment k belongs to block k % p'), so each half
// carries a fair share of a field whose compressibility varies along the buffer. Every segment
// is its own stream and its own message: compression, transfer and decoding overlap.
// Steps (rank r, newrank nr from Doubling; blocks numbered like newranks):
//   fold in  (rem = p - p' > 0): each odd rank r < 2 rem sends C(x_r), segment by segment, to
//            r-1, which adds the decoded values to its own; the odd ranks then wait (fold out).
//   halving  for mask = p'/2, .., 1: the partner is nr ^ mask; of the current range of 2 mask
//            blocks, keep the half that holds block nr and send the other half compressed;
//            add the partner's decoded half into the kept one (own values exact). After the
//            last round, block nr holds the full reduction. Two rounds overlap: a round's
//            segments arrive in two halves, first the blocks this rank gives away in the next
//            round, and once those are in the next round's compression and sends start while
//            the other half is still arriving. SUM/AVG: those sums are never written; each
//            segment is decoded, added and compressed chunk by chunk as it is sent
//            (Codec::recompress_add). MIN/MAX: reduced into the own values, then compressed.
//   own      compress block nr once (the final streams) and decode it in place: the owner holds
//            what everybody else decodes, or the replicas would differ.
//   doubling for mask = 1, .., p'/2: exchange every final stream held (mask blocks) with
//            nr ^ mask and decode the received ones in place. Streams are forwarded as
//            received, never recompressed.
//   fold out (rem > 0): each even rank r < 2 rem forwards all p' final streams to r+1, which
//            decodes them: the same bytes, so the same values.
//   AVG: divide by p at the very end (identical values -> identical quotients).
//
// Cost (n values of w bytes, L = log2 p', f = 1 if rem > 0, ratio R, codec throughputs C, D):
//   2 (L + f) alpha + max(2 (p'-1)/p' n w beta/R, codec) + f n w (2 beta/R + 1/C + 2/D + gamma),
//   codec = n w ((p'-1)/p' (1/C + 2/D + gamma) + 1/(p' C) + 1/(p' D)) -- the ring's codec work
//   with 2 log2 p' latency terms instead of 2 (p-1); each round adds about one segment's
//   compress + transfer + decode of pipeline fill (see route.cpp). Workspace: stream slots for
//   the final streams and for two rounds' sends and receives, about 3x the buffer's worst-case
//   compressed size, reserved but touched only as far as streams are written.
//
// Output error (exact arithmetic):
//   SUM: every combine adds one decoded partial (one compression, at most eb on top of the
//     errors the partial already carried) to an exact or partial own value. Summed over the
//     combine tree of p leaves (p - 1 combines, the fold's included), the reduced block is within
//     (p-1) eb; its one compression for the allgather adds eb: |result - exact| <= p eb, the
//     ring's bound.
//   AVG: p eb / p = eb.
//   MIN/MAX: |min(a', b') - min(a, b)| <= max(|a'-a|, |b'-b|); a value crosses at most
//     f + L + 1 compressions (fold, halving rounds, allgather), each run with
//     eb / (f + L + 1): |result - exact| <= eb.
//   Floating-point rounding of the reductions comes on top (see reduce_scatter_ring.cpp).
#include <optional>
#include <utility>
#include <vector>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

namespace {

// Blocks first .. first + count - 1.
struct BlockRange {
  int first = 0;
  int count = 0;
};

// The segments of up to two block ranges, every segment of `a`'s blocks, then `b`'s: the order in
// which one step's streams travel (one message each, on one tag: MPI keeps the order of a pair).
struct Segments {
  BlockRange a, b;
  int S = 1;  // segments per block
  int size() const { return (a.count + b.count) * S; }
  int split() const { return a.count * S; }  // the index of b's first segment
  int block(int i) const {
    const int k = i / S;
    return k < a.count ? a.first + k : b.first + (k - a.count);
  }
  int segment(int i) const { return i % S; }
  // The stream slot of (block, segment) in an area holding every block's segments.
  size_t slot(int i) const { return static_cast<size_t>(block(i)) * S + segment(i); }
};

// One halving round in flight: its peer, the blocks this rank keeps, the segments it receives (in
// arrival order) and where, the receives, and the sends of the blocks it gives away.
struct Round {
  int peer = -1;
  int keep_first = 0;
  Segments in;
  uint8_t* rx_area = nullptr;
  std::vector<Pending> rx, tx;
};

template <class T>
class HalvingDoubling {
 public:
  HalvingDoubling(Comm& comm, T* buf, size_t count, ReduceOp op, double eb, const Config& cfg,
                  Stats& st)
      : comm_(comm), buf_(buf), op_(op), cfg_(cfg), st_(st), rd_(comm.size(), comm.rank()),
        seg_(RingSegments::interleaved(count, rd_.pp, dtype_of<T>(), cfg)),
        codec_(Codec::for_reduction(dtype_of<T>(),
                                    is_min_max(op) ? split_bound(eb, rd_.stages() + 1) : eb, cfg,
                                    st)),
        cap_(codec_.capacity(seg_.seg_len)), S_(seg_.per_block) {
    const int tag = comm.next_tag_base();
    tag_fold_ = tag;
    tag_half_ = tag + 1;
    tag_gather_ = tag + 2;
    tag_out_ = tag + 3;
    const size_t all = static_cast<size_t>(rd_.pp) * S_;
    half_ = all / 2 * cap_;
    final_ = workspace_bytes(kSlotSend1, all * cap_);
    final_len_.assign(all, 0);
    // Two rounds overlap (see halve()): a send and a receive area per round parity. Together
    // they hold every segment (p' is even), which the fold's streams need.
    tx_area_ = workspace_bytes(kSlotSend0, 2 * half_);
    rx_area_ = workspace_bytes(kSlotRecv, 2 * half_);
    scratch_ = workspace<T>(kSlotScratch, seg_.seg_len);
  }

  void run() {
    const int r = comm_.rank();
    const Segments everything{{0, rd_.pp}, {}, S_};
    if (rd_.fold_sender()) {
      std::vector<Pending> tx(static_cast<size_t>(everything.size()));
      send(everything, r - 1, tag_fold_, tx_area_, tx, {});
      finish_all(comm_, tx);
      std::vector<Pending> rx = post(everything, r - 1, tag_out_, final_, true);
      decode_final(everything, r - 1, rx, {});
      return;
    }
    if (rd_.in_fold()) {  // absorb r+1
      Round fold;
      fold.peer = r + 1;
      fold.in = everything;
      fold.rx_area = rx_area_;
      fold.rx = post(everything, r + 1, tag_fold_, rx_area_, false);
      add(fold, 0, fold.in.size(), nullptr);
    }
    halve();
    // Block nr is reduced: its final streams, decoded in place like everyone else's copy.
    const int nr = rd_.newrank;
    const Segments own{{nr, 1}, {}, S_};
    for (int i = 0; i < own.size(); ++i) {
      const size_t k = own.slot(i);
      T* const dst = values(own, i);
      final_len_[k] = codec_.compress(dst, len(own, i), final_ + k * cap_, cap_);
      codec_.decompress(final_ + k * cap_, final_len_[k], dst, len(own, i), r);
    }
    for (int mask = 1; mask < rd_.pp; mask *= 2) {
      const int partner = nr ^ mask;
      const Segments mine{{nr & ~(mask - 1), mask}, {}, S_};
      const Segments theirs{{partner & ~(mask - 1), mask}, {}, S_};
      const int peer = rd_.real_rank(partner);
      std::vector<Pending> rx = post(theirs, peer, tag_gather_, final_, true);
      std::vector<Pending> tx(static_cast<size_t>(mine.size()));
      forward(mine, peer, tag_gather_, tx);
      decode_final(theirs, peer, rx, {&tx});
      finish_all(comm_, tx);
    }
    if (rd_.in_fold()) {
      std::vector<Pending> tx(static_cast<size_t>(everything.size()));
      forward(everything, r + 1, tag_out_, tx);
      finish_all(comm_, tx);
    }
  }

 private:
  // The recursive halving, two rounds overlapping: the segments of a round arrive in two halves,
  // first the blocks this rank gives away in the next round; as soon as those are added, the
  // next round's sends start, while the other half of this round is still arriving.
  void halve() {
    Round cur = start(rd_.pp / 2, 0, 0, nullptr);
    for (int mask = rd_.pp / 2, k = 0; mask >= 1; mask /= 2, ++k) {
      // SUM/AVG: the sums of the blocks given away next are never written; the next round's
      // sends decode, add and compress them from cur's streams (Codec::recompress_add).
      const bool fused = mask > 1 && !is_min_max(op_);
      if (!fused) add(cur, 0, cur.in.split(), nullptr);
      std::optional<Round> next;
      if (mask > 1) next = start(mask / 2, cur.keep_first, (k + 1) % 2, &cur, fused);
      add(cur, cur.in.split(), cur.in.size(), next ? &*next : nullptr);
      finish_all(comm_, cur.tx);
      if (!next) break;
      cur = std::move(*next);
    }
  }

  // The blocks [first, first + mask) as newrank x receives them in the halving round of `mask`:
  // the half x gives away in the next round first (all of it in `a` in the last round).
  Segments arrival(int x, int first, int mask) const {
    if (mask == 1) return Segments{{first, 1}, {first + 1, 0}, S_};
    const int h = mask / 2;
    const bool keeps_upper = (x & h) != 0;
    return Segments{{keeps_upper ? first : first + h, h}, {keeps_upper ? first + h : first, h},
                    S_};
  }

  // Starts the halving round of `mask` over the blocks [first, first + 2 mask): posts the
  // receives of the kept half, compresses and sends the other half (in the order the peer
  // processes it), polling `busy`'s transfers too. `fused`: the sent half's own values are
  // busy's first half without its received streams added yet; each is added as it is compressed.
  Round start(int mask, int first, int parity, Round* busy, bool fused = false) {
    const int nr = rd_.newrank, q = nr ^ mask;
    const bool upper = (nr & mask) != 0;
    Round round;
    round.peer = rd_.real_rank(q);
    round.keep_first = upper ? first + mask : first;
    round.in = arrival(nr, round.keep_first, mask);
    round.rx_area = rx_area_ + static_cast<size_t>(parity) * half_;
    round.rx = post(round.in, round.peer, tag_half_, round.rx_area, false);
    const Segments out = arrival(q, upper ? first : first + mask, mask);
    round.tx = std::vector<Pending>(static_cast<size_t>(out.size()));
    std::vector<std::vector<Pending>*> polled = {&round.rx};
    if (busy != nullptr) polled = {&round.rx, &busy->rx, &busy->tx};
    send(out, round.peer, tag_half_, tx_area_ + static_cast<size_t>(parity) * half_, round.tx,
         polled, fused ? busy : nullptr);
    return round;
  }

  // Adds the decoded segments [from, to) of round `r` to the own values, polling `other`'s
  // transfers too.
  void add(Round& r, int from, int to, Round* other) {
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      poll_first(comm_, r.tx);
      if (other != nullptr) {
        poll_first(comm_, other->rx);
        poll_first(comm_, other->tx);
      }
    };
    for (int i = from; i < to; ++i) {
      const size_t got = r.rx[i].finish(comm_);
      const size_t n = len(r.in, i);
      T* const own = values(r.in, i);
      if (is_min_max(op_)) {
        codec_.decompress(r.rx_area + i * cap_, got, scratch_, n, r.peer, &poll);
        kernels::reduce_into(own, own, scratch_, n, op_, cfg_.threads);
      } else {  // SUM/AVG: decoded and added chunk by chunk, no pass over a scratch
        codec_.decompress_add(r.rx_area + i * cap_, got, own, own, n, r.peer, &poll);
      }
    }
  }

  T* values(const Segments& l, int i) const {
    return buf_ + seg_.begin(l.block(i), l.segment(i));
  }
  size_t len(const Segments& l, int i) const { return seg_.len(l.block(i), l.segment(i)); }

  // Posts the receives of `l` from `peer`: into `area` at the segments' slots when `at_slot`
  // (final streams), else the i-th at i * cap_.
  std::vector<Pending> post(const Segments& l, int peer, int tag, uint8_t* area, bool at_slot) {
    std::vector<Pending> rx(static_cast<size_t>(l.size()));
    for (int i = 0; i < l.size(); ++i) {
      const size_t k = at_slot ? l.slot(i) : static_cast<size_t>(i);
      rx[i].start(comm_.irecv(area + k * cap_, cap_, peer, tag));
    }
    return rx;
  }

  // Compresses the segments of `l` into `area` (the i-th at i * cap_) and sends each to `peer`
  // on tx[i] as soon as it is ready, while the transfers of tx and `polled` progress. With
  // `plus`: a segment's values plus the stream `plus` received for it (in its first half).
  void send(const Segments& l, int peer, int tag, uint8_t* area, std::vector<Pending>& tx,
            const std::vector<std::vector<Pending>*>& polled, Round* plus = nullptr) {
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      for (std::vector<Pending>* v : polled) poll_first(comm_, *v);
      poll_first(comm_, tx);
    };
    for (int i = 0; i < l.size(); ++i) {
      uint8_t* const stream = area + static_cast<size_t>(i) * cap_;
      size_t bytes = 0;
      if (plus == nullptr) {
        bytes = codec_.compress(values(l, i), len(l, i), stream, cap_, &poll);
      } else {
        const int j = (l.block(i) - plus->in.a.first) * S_ + l.segment(i);
        const size_t got = plus->rx[j].finish(comm_);
        bytes = codec_.recompress_add(plus->rx_area + j * cap_, got, values(l, i), len(l, i),
                                      plus->peer, scratch_, stream, cap_, &poll);
      }
      tx[i].start(comm_.isend(stream, bytes, peer, tag));
      st_.bytes_sent += bytes;
    }
  }

  // Sends the final streams of `l` (at their slots of final_) to `peer` on tx[i].
  void forward(const Segments& l, int peer, int tag, std::vector<Pending>& tx) {
    for (int i = 0; i < l.size(); ++i) {
      const size_t k = l.slot(i);
      tx[i].start(comm_.isend(final_ + k * cap_, final_len_[k], peer, tag));
      st_.bytes_sent += final_len_[k];
    }
  }

  // Decodes the final streams of `l` from `peer`, arriving at their slots (posted in rx), in
  // place, while the transfers of `polled` progress.
  void decode_final(const Segments& l, int peer, std::vector<Pending>& rx,
                    const std::vector<std::vector<Pending>*>& polled) {
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      poll_first(comm_, rx);
      for (std::vector<Pending>* v : polled) poll_first(comm_, *v);
    };
    for (int i = 0; i < l.size(); ++i) {
      const size_t k = l.slot(i);
      final_len_[k] = rx[i].finish(comm_);
      codec_.decompress(final_ + k * cap_, final_len_[k], values(l, i), len(l, i), peer, &poll);
    }
  }

  Comm& comm_;
  T* buf_;
  ReduceOp op_;
  const Config& cfg_;
  Stats& st_;
  Doubling rd_;
  RingSegments seg_;
  Codec codec_;
  size_t cap_;
  int S_;
  int tag_fold_ = 0, tag_half_ = 0, tag_gather_ = 0, tag_out_ = 0;
  size_t half_ = 0;              // bytes of half the blocks' stream slots
  uint8_t* final_ = nullptr;     // every block's final streams, at slot block * S + segment
  std::vector<size_t> final_len_;
  uint8_t* tx_area_ = nullptr;   // outgoing streams: the halving rounds' by parity, the fold's
  uint8_t* rx_area_ = nullptr;   // their (or the fold's) incoming streams, by round parity
  T* scratch_ = nullptr;         // one decoded segment
};

}  // namespace

template <class T>
void halving_doubling_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb,
                                const Config& cfg, Stats& st) {
  if (comm.size() == 1) return;
  HalvingDoubling<T>(comm, buf, count, op, eb, cfg, st).run();
  if (op == ReduceOp::Avg) kernels::divide(buf, count, comm.size(), cfg.threads);
}

template void halving_doubling_allreduce<float>(Comm&, float*, size_t, ReduceOp, double,
                                                const Config&, Stats&);
template void halving_doubling_allreduce<double>(Comm&, double*, size_t, ReduceOp, double,
                                                 const Config&, Stats&);

}  // namespace zccl::coll::compute
