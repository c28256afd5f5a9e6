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
//            last round, block nr holds the full reduction.
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
//   with 2 log2 p' latency terms instead of 2 (p-1); rounds run one after the other, so each
//   adds one segment's compress + transfer + decode of pipeline fill (see route.cpp).
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
#include <vector>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

namespace {

// The streams of one step between two ranks: segment i of a list of (block, segment) pairs
// travels in its own message, in list order, on one tag (MPI keeps the order of one pair).
struct SegmentList {
  int first_block = 0;  // blocks first_block .. first_block + blocks - 1, every segment of each
  int blocks = 0;
  int S = 1;
  int size() const { return blocks * S; }
  int block(int i) const { return first_block + i / S; }
  int segment(int i) const { return i % S; }
  // The stream slot of (block, segment) in an area holding every block's segments.
  size_t slot(int i) const { return static_cast<size_t>(block(i)) * S + segment(i); }
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
    final_ = workspace_bytes(kSlotSend1, all * cap_);
    final_len_.assign(all, 0);
    tx_area_ = workspace_bytes(kSlotSend0, all / 2 * cap_);
    rx_area_ = workspace_bytes(kSlotRecv, (rd_.rem > 0 ? all : all / 2) * cap_);
    scratch_ = workspace<T>(kSlotScratch, seg_.seg_len);
  }

  void run() {
    const int r = comm_.rank();
    const SegmentList everything{0, rd_.pp, S_};
    if (rd_.fold_sender()) {
      std::vector<Pending> tx(static_cast<size_t>(everything.size()));
      send(everything, r - 1, tag_fold_, final_, false, tx);
      finish_all(comm_, tx);
      receive_final(everything, r - 1, tag_out_);
      return;
    }
    if (rd_.in_fold()) combine(everything, r + 1, tag_fold_);
    const int nr = rd_.newrank;
    int lo = 0;  // the current range of blocks: [lo, lo + 2 mask)
    for (int mask = rd_.pp / 2; mask >= 1; mask /= 2) {
      const bool upper = (nr & mask) != 0;
      const SegmentList keep{upper ? lo + mask : lo, mask, S_};
      const SegmentList give{upper ? lo : lo + mask, mask, S_};
      const int peer = rd_.real_rank(nr ^ mask);
      rx_ = std::vector<Pending>(static_cast<size_t>(keep.size()));
      for (int i = 0; i < keep.size(); ++i) {
        rx_[i].start(comm_.irecv(rx_area_ + i * cap_, cap_, peer, tag_half_));
      }
      std::vector<Pending> tx(static_cast<size_t>(give.size()));
      send(give, peer, tag_half_, tx_area_, false, tx);
      add_received(keep, peer, tx);
      finish_all(comm_, tx);
      lo = keep.first_block;
    }
    // Block nr is reduced: its final streams, decoded in place like everyone else's copy.
    const SegmentList own{nr, 1, S_};
    for (int i = 0; i < own.size(); ++i) {
      const size_t k = own.slot(i);
      T* const dst = values(own, i);
      final_len_[k] = codec_.compress(dst, len(own, i), final_ + k * cap_, cap_);
      codec_.decompress(final_ + k * cap_, final_len_[k], dst, len(own, i), r);
    }
    for (int mask = 1; mask < rd_.pp; mask *= 2) {
      const int partner = nr ^ mask;
      const SegmentList mine{nr & ~(mask - 1), mask, S_};
      const SegmentList theirs{partner & ~(mask - 1), mask, S_};
      const int peer = rd_.real_rank(partner);
      std::vector<Pending> tx(static_cast<size_t>(mine.size()));
      rx_ = std::vector<Pending>(static_cast<size_t>(theirs.size()));
      for (int i = 0; i < theirs.size(); ++i) {
        rx_[i].start(comm_.irecv(final_ + theirs.slot(i) * cap_, cap_, peer, tag_gather_));
      }
      send(mine, peer, tag_gather_, final_, true, tx);
      decode_received(theirs, peer, tx);
      finish_all(comm_, tx);
    }
    if (rd_.in_fold()) {
      std::vector<Pending> tx(static_cast<size_t>(everything.size()));
      send(everything, r + 1, tag_out_, final_, true, tx);
      finish_all(comm_, tx);
    }
  }

 private:
  T* values(const SegmentList& l, int i) const {
    return buf_ + seg_.begin(l.block(i), l.segment(i));
  }
  size_t len(const SegmentList& l, int i) const { return seg_.len(l.block(i), l.segment(i)); }

  // Sends the segments of `l` to `peer`: from `area` at their slot when `forward` (final
  // streams, already compressed, lengths in final_len_), else compressed now into `area` (the
  // i-th at i * cap_, or at the slot when area is final_) while the pending receives progress.
  void send(const SegmentList& l, int peer, int tag, uint8_t* area, bool forward,
            std::vector<Pending>& tx) {
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      poll_first(comm_, rx_);
      poll_first(comm_, tx);
    };
    for (int i = 0; i < l.size(); ++i) {
      const size_t k = l.slot(i);
      uint8_t* const stream = area + (area == final_ ? k : static_cast<size_t>(i)) * cap_;
      size_t bytes = 0;
      if (forward) {
        bytes = final_len_[k];
      } else {
        bytes = codec_.compress(values(l, i), len(l, i), stream, cap_, &poll);
      }
      tx[i].start(comm_.isend(stream, bytes, peer, tag));
      st_.bytes_sent += bytes;
    }
  }

  // Adds the decoded segments of `l`, arriving from `peer` into rx_area_ (posted in rx_), to the
  // own values.
  void add_received(const SegmentList& l, int peer, std::vector<Pending>& tx) {
    const fz::Progress poll = [&](uint64_t, uint64_t) { poll_first(comm_, tx); };
    for (int i = 0; i < l.size(); ++i) {
      const size_t got = rx_[i].finish(comm_);
      const size_t n = len(l, i);
      codec_.decompress(rx_area_ + i * cap_, got, scratch_, n, peer, &poll);
      T* const own = values(l, i);
      kernels::reduce_into(own, own, scratch_, n, op_, cfg_.threads);
    }
  }

  // The fold's receiving side: every segment of r+1, added to the own values.
  void combine(const SegmentList& l, int peer, int tag) {
    rx_ = std::vector<Pending>(static_cast<size_t>(l.size()));
    for (int i = 0; i < l.size(); ++i) {
      rx_[i].start(comm_.irecv(rx_area_ + i * cap_, cap_, peer, tag));
    }
    std::vector<Pending> none;
    add_received(l, peer, none);
  }

  // Decodes the final streams of `l`, arriving from `peer` at their slots (posted in rx_), in place.
  void decode_received(const SegmentList& l, int peer, std::vector<Pending>& tx) {
    const fz::Progress poll = [&](uint64_t, uint64_t) {
      poll_first(comm_, rx_);
      poll_first(comm_, tx);
    };
    for (int i = 0; i < l.size(); ++i) {
      const size_t k = l.slot(i);
      final_len_[k] = rx_[i].finish(comm_);
      codec_.decompress(final_ + k * cap_, final_len_[k], values(l, i), len(l, i), peer, &poll);
    }
  }

  // The fold's odd rank: every final stream from `peer`, decoded in place.
  void receive_final(const SegmentList& l, int peer, int tag) {
    rx_ = std::vector<Pending>(static_cast<size_t>(l.size()));
    for (int i = 0; i < l.size(); ++i) {
      rx_[i].start(comm_.irecv(final_ + l.slot(i) * cap_, cap_, peer, tag));
    }
    std::vector<Pending> none;
    decode_received(l, peer, none);
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
  uint8_t* final_ = nullptr;     // every block's final streams, at slot block * S + segment
  std::vector<size_t> final_len_;
  uint8_t* tx_area_ = nullptr;   // a halving round's outgoing streams
  uint8_t* rx_area_ = nullptr;   // a halving round's (or the fold's) incoming streams
  T* scratch_ = nullptr;         // one decoded segment
  std::vector<Pending> rx_;      // the receives of the current step
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
