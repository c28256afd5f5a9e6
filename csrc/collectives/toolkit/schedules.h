// Who talks to whom: the communication schedules of the CPU and GPU collectives, each written
// once -- ring neighbours, the binomial tree, recursive doubling with its fold -- and the block
// partition of a buffer over the ranks. Pure arithmetic on ranks and counts.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace zccl::coll::toolkit {

// x mod p in [0, p), for negative x too.
inline int mod(int x, int p) { return (x % p + p) % p; }

// Largest power of two <= p (p >= 1), the log2 of a power of two, and ceil(log2 p).
inline int pow2_floor(int p) {
  int q = 1;
  while (q <= p / 2) q *= 2;
  return q;
}
inline int log2_exact(int p2) {
  int l = 0;
  while ((1 << l) < p2) ++l;
  return l;
}
inline int ceil_log2(int p) { return log2_exact(p); }

// The ring rank -> rank + 1 (mod p).
struct Ring {
  Ring(int p_, int rank_) : p(p_), rank(rank_), next((rank_ + 1) % p_), prev((rank_ + p_ - 1) % p_) {}
  int p, rank, next, prev;
  // The rank (or block) k places before this one: (rank - k) mod p.
  int before(int k) const { return mod(rank - k, p); }
};

// Binomial tree rooted at `root` over p ranks, in virtual ranks v = (rank - root) mod p.
// Node v owns the subtree [v, v + span(v)) clipped to p, where span(0) is the smallest power of
// two >= p and span(v) = lowest set bit of v otherwise; its parent is v - span(v); its children
// are v + m for m = span(v)/2, span(v)/4, ..., 1 with v + m < p (largest subtree first).
struct Binomial {
  Binomial(int p_, int root_, int rank) : p(p_), root(root_), v(mod(rank - root_, p_)) {}
  int p, root, v;
  int rank_of(int vrank) const { return (vrank + root) % p; }
  int span(int vrank) const {
    if (vrank != 0) return vrank & -vrank;
    int s = 1;
    while (s < p) s <<= 1;
    return s;
  }
  // One past the last vrank of vrank's subtree.
  int subtree_end(int vrank) const {
    const long end = static_cast<long>(vrank) + span(vrank);
    return end < p ? static_cast<int>(end) : p;
  }
  int parent() const { return v == 0 ? -1 : v - span(v); }  // vrank, -1 at the root
  std::vector<int> children() const {                      // vranks, largest subtree first
    std::vector<int> out;
    for (int m = span(v) / 2; m >= 1; m /= 2) {
      if (v + m < p) out.push_back(v + m);
    }
    return out;
  }
};

// Recursive doubling over p ranks with the standard fold for a non-power-of-two p: p' = the
// largest power of two <= p, rem = p - p'. Among ranks 0 .. 2 rem - 1 each odd rank hands its
// data to the even rank below it (fold in) and gets the result back from it (fold out); the p'
// remaining ranks take new ranks 0 .. p'-1 (even r < 2 rem -> r/2, r >= 2 rem -> r - rem) and
// exchange with newrank ^ mask for mask = 1, 2, .., p'/2.
struct Doubling {
  Doubling(int p, int rank_)
      : rank(rank_), pp(pow2_floor(p)), rem(p - pp), rounds(log2_exact(pp)),
        newrank(rank_ < 2 * rem ? (rank_ % 2 == 1 ? -1 : rank_ / 2) : rank_ - rem) {}
  int rank;
  int pp, rem, rounds;
  int newrank;  // -1 on the odd folded ranks, which sit the rounds out
  // Stages a value passes through: the fold (if any) and every round.
  int stages() const { return rounds + (rem > 0 ? 1 : 0); }
  bool in_fold() const { return rank < 2 * rem; }
  bool fold_sender() const { return in_fold() && rank % 2 == 1; }
  int real_rank(int nr) const { return nr < rem ? 2 * nr : nr + rem; }
};

// p blocks over `total` values: block b is [offset[b], offset[b] + count[b]).
struct Blocks {
  std::vector<size_t> count;
  std::vector<size_t> offset;
  size_t max_count = 0;
  // The first total % p blocks hold ceil(total / p) values, the rest floor(total / p).
  static Blocks balanced(size_t total, int p) {
    Blocks b;
    const size_t np = static_cast<size_t>(p);
    b.count.resize(np);
    b.offset.resize(np);
    const size_t base = total / np, extra = total % np;
    size_t at = 0;
    for (size_t i = 0; i < np; ++i) {
      b.count[i] = base + (i < extra ? 1 : 0);
      b.offset[i] = at;
      at += b.count[i];
    }
    b.max_count = base + (extra ? 1 : 0);
    return b;
  }
  // Every block holds c = ceil(total / p) values except the last non-empty one (fewer) and any
  // after it (empty): padded to c, all blocks have one size (for equal-count gathers).
  static Blocks padded(size_t total, int p) {
    Blocks b;
    const size_t np = static_cast<size_t>(p);
    b.count.resize(np);
    b.offset.resize(np);
    const size_t c = total / np + (total % np ? 1 : 0);
    for (size_t i = 0; i < np; ++i) {
      const size_t start = std::min(total, i * c);
      b.offset[i] = start;
      b.count[i] = std::min(total, start + c) - start;
    }
    b.max_count = c;
    return b;
  }
};

}  // namespace zccl::coll::toolkit
