// Reduce to a root with compression: two algorithms.
//
// Ring (large messages; Algorithm::HalvingDoubling selects it too): reduce-scatter +
// data-movement gather.
//   1. SUM/AVG: the pipelined ring reduce-scatter (reduce_scatter_ring.cpp) on the all_reduce's
//      interleaved blocks (RingSegments: ~1 MiB segments, segment k in block k % p, so the links
//      carry equal shares of compressed bytes); MIN/MAX: the compressed exchange
//      (reduce_scatter_minmax.cpp) on contiguous blocks of ceil(n/p) values. Either leaves block
//      r reduced on rank r, in place in buf;
//   2. coll::gather of the blocks, packed (padded with zeros to the largest block, c values;
//      zeros compress to one byte per 32 values) to the root, which unpacks them into place:
//      each block is compressed once and decompressed once at the root.
//   Cost: (p-1) alpha + (p-1)/p n w (beta/R + 1/C + 1/D + gamma) for step 1 plus the gather's
//   log p alpha + (p-1)/p n w beta/R + n w/p /C + (p-1)/p n w /D.
//   Error: SUM (p-1) eb + eb = p eb (the root's own block only (p-1) eb if the gather keeps it
//   exact); AVG p eb / p = eb; MIN/MAX both stages at eb/2: eb.
//
// Binomial tree (small messages; Algorithm::RecursiveDoubling and CprP2P select it): relative
//   rank v = (r - root) mod p; for mask = 1, 2, 4, ..: if v has the bit, compress the subtree's
//   value and send it to v - mask, done; else if v + mask < p, receive that child's stream and
//   reduce it into buf (all children's receives are posted up front).
//   Cost: ceil(log2 p) * (alpha + n w (beta/R + 1/C + 1/D + gamma)).
//   Error: SUM every non-root rank's subtree value is compressed exactly once and each error
//   enters the root's sum once: (p-1) eb; AVG (p-1) eb / p. MIN/MAX: a value crosses at most
//   ceil(log2 p) compressions, each adding at most its bound to the worst error so far, so each
//   runs with eb / ceil(log2 p): eb.
// Both stay within output_error_bound(algorithm, op, p, eb, allreduce = true) of the same
// algorithm (Ring p eb; tree (p-1) eb <= RD's (p + p' - 2) eb and CprP2P's 2 (p-1) eb).
#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll {

namespace {

using namespace compute;

template <class T>
void ring_reduce(Comm& comm, T* buf, size_t count, ReduceOp op, int root, const Config& cfg,
                 Stats& st) {
  const int p = comm.size(), r = comm.rank();
  const double eb = cfg.error_bound;
  double eb_gather = eb;
  // Where each rank's reduced values lie in buf: (offset, count) runs in order.
  std::vector<std::vector<std::pair<size_t, size_t>>> runs(static_cast<size_t>(p));
  if (is_min_max(op)) {
    const Blocks blocks = Blocks::padded(count, p);
    eb_gather = split_bound(eb, 2);
    exchange_reduce_scatter(comm, buf, buf + blocks.offset[r], blocks, op, eb_gather, cfg, st);
    for (int b = 0; b < p; ++b) runs[b].emplace_back(blocks.offset[b], blocks.count[b]);
  } else {
    const RingSegments seg = RingSegments::interleaved(count, p, dtype_of<T>(), cfg);
    ring_reduce_scatter(comm, RingBuffers<T>{buf, buf, nullptr}, seg, op, eb, cfg, st);
    for (int b = 0; b < p; ++b) {
      for (int j = 0; j < seg.per_block; ++j) runs[b].emplace_back(seg.begin(b, j), seg.len(b, j));
    }
  }
  auto values_of = [&](int b) {
    size_t n = 0;
    for (const auto& run : runs[b]) n += run.second;
    return n;
  };
  size_t c = 0;  // the gather's block: the largest rank's values, the others padded with zeros
  for (int b = 0; b < p; ++b) c = std::max(c, values_of(b));
  T* const mine = workspace<T>(kSlotScratch, c);
  T* at = mine;
  for (const auto& [offset, n] : runs[r]) at = std::copy(buf + offset, buf + offset + n, at);
  std::fill(at, mine + c, T(0));
  T* const all = r == root ? workspace<T>(kSlotScratch2, c * static_cast<size_t>(p)) : nullptr;
  Stats sub;
  gather(comm, mine, all, c, dtype_of<T>(), root, with_error_bound(cfg, eb_gather), &sub);
  add_stats(st, sub);
  if (r != root) return;
  for (int b = 0; b < p; ++b) {
    const T* from = all + static_cast<size_t>(b) * c;
    for (const auto& [offset, n] : runs[b]) {
      std::copy(from, from + n, buf + offset);
      from += n;
    }
  }
}

template <class T>
void tree_reduce(Comm& comm, T* buf, size_t count, ReduceOp op, int root, const Config& cfg,
                 Stats& st) {
  const int p = comm.size();
  const Binomial tree(p, root, comm.rank());
  const double eb =
      is_min_max(op) ? split_bound(cfg.error_bound, ceil_log2(p)) : cfg.error_bound;
  const int tag = comm.next_tag_base();
  Codec codec = Codec::for_reduction(dtype_of<T>(), eb, cfg, st);
  const size_t cap = codec.capacity(count);

  // Children smallest subtree first: the order of the reductions into buf.
  std::vector<int> children = tree.children();
  std::reverse(children.begin(), children.end());
  for (int& child : children) child = tree.rank_of(child);
  std::vector<Bytes> rbufs;
  std::vector<Pending> rx(children.size());
  for (size_t i = 0; i < children.size(); ++i) {
    rbufs.emplace_back(cap);
    rx[i].start(comm.irecv(rbufs[i].data(), cap, children[i], tag));
  }
  Buffer<T> scratch(children.empty() || !is_min_max(op) ? 0 : count);  // MIN/MAX only
  for (size_t i = 0; i < children.size(); ++i) {
    const size_t got = rx[i].finish(comm);
    if (is_min_max(op)) {
      codec.decompress(rbufs[i].data(), got, scratch.data(), count, children[i]);
      kernels::reduce_into(buf, buf, scratch.data(), count, op, cfg.threads);
    } else {
      codec.decompress_add(rbufs[i].data(), got, buf, buf, count, children[i]);
    }
  }
  if (tree.parent() >= 0) {
    Bytes sbuf(cap);
    const size_t bytes = codec.compress(buf, count, sbuf.data(), cap);
    st.bytes_sent += bytes;
    comm.send(sbuf.data(), bytes, tree.rank_of(tree.parent()), tag);
  }
}

template <class T>
void reduce_typed(Comm& comm, T* buf, size_t count, ReduceOp op, int root, const Config& cfg,
                  Algorithm alg, Stats& st) {
  const int p = comm.size(), r = comm.rank();
  const size_t bytes = count * sizeof(T);
  switch (alg) {
    case Algorithm::Mpi:
      if (p > 1) {
        comm.reduce(r == root ? transport::kInPlace : buf, buf, count, elem_type(dtype_of<T>()),
                    reduce_kind(op), root);
        st.bytes_sent += r == root ? 0 : bytes;  // a tree sends each rank's data once
      }
      break;
    case Algorithm::Ring:
    case Algorithm::HalvingDoubling: ring_reduce(comm, buf, count, op, root, cfg, st); break;
    case Algorithm::RecursiveDoubling:
    case Algorithm::CprP2P: tree_reduce(comm, buf, count, op, root, cfg, st); break;
    case Algorithm::Auto: throw std::logic_error("zccl reduce: no algorithm resolved");
  }
  if (op == ReduceOp::Avg && r == root) kernels::divide(buf, count, p, cfg.threads);
}

}  // namespace

void reduce(Comm& comm, void* buf, size_t count, DType dt, ReduceOp op, int root,
            const Config& cfg, Stats* stats) {
  const char* name = "reduce";
  check_reduction(dt, op, name);
  check_config(cfg, name);
  check_buffer(buf, count, name, "buf");
  check_root(root, comm.size(), name);
  CallStats cs(stats);
  cs.s.bytes_in = count * fz::dtype_size(dt);
  const Route rt = route(Collective::Reduce, cs.s.bytes_in, comm.size(), cfg);
  if (dt == DType::Float32) {
    reduce_typed(comm, static_cast<float*>(buf), count, op, root, cfg, rt.algorithm, cs.s);
  } else {
    reduce_typed(comm, static_cast<double*>(buf), count, op, root, cfg, rt.algorithm, cs.s);
  }
  cs.done(rt.algorithm);
}

}  // namespace zccl::coll
