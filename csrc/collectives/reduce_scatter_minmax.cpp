// MIN/MAX reduce-scatter by one exchange of compressed blocks (no ring: a ring would recompress
// partial results, and a raw local value that beats a decoded partial makes errors pile up).
//
// Steps (rank r): coll::alltoallv sends block j of this rank's buffer to rank j, compressed once
// with eb (nothing to itself); rank r receives the p-1 decoded versions of its own block, one per
// peer, and reduces them together with its EXACT own block in rank order:
//     out = op(...op(op(v_0, v_1), v_2)..., v_{p-1}),   v_r = own exact, v_j = D(C(x_j[r])).
//
// Cost (n values of w bytes over p blocks): the alltoallv's (p-1) alpha + (p-1)/p n w beta/R plus
// compressing n w (p-1)/p bytes, decompressing the same amount, and (p-1)/p n w gamma.
// Same volume as the ring reduce-scatter, each block compressed exactly once.
//
// Output error: every input value is compressed at most once, |v_j - x_j| <= eb, and MIN/MAX are
// 1-Lipschitz in the max norm: |min_j v_j - min_j x_j| <= max_j |v_j - x_j| <= eb.
// (NaN in any input gives NaN; compression keeps NaN and Inf exactly.)
#include <algorithm>
#include <vector>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll::compute {

template <class T>
void exchange_reduce_scatter(Comm& comm, const T* local, T* out, const Blocks& blocks,
                             ReduceOp op, double eb, const Config& cfg, Stats& st) {
  const int p = comm.size(), r = comm.rank();
  const size_t np = static_cast<size_t>(p);
  const size_t mine = blocks.count[static_cast<size_t>(r)];
  if (p == 1) {
    if (out != local) std::copy(local, local + mine, out);
    return;
  }
  // Slot j of `got` holds v_j; slot r gets the exact own block (out may alias it in local).
  T* const got = workspace<T>(kSlotScratch, mine * np);
  std::vector<size_t> send_counts(np), send_displs(np), recv_counts(np), recv_displs(np);
  for (size_t j = 0; j < np; ++j) {
    const bool self = j == static_cast<size_t>(r);
    send_counts[j] = self ? 0 : blocks.count[j];
    send_displs[j] = blocks.offset[j];
    recv_counts[j] = self ? 0 : mine;
    recv_displs[j] = j * mine;
  }
  Stats sub;
  alltoallv(comm, local, send_counts, send_displs, got, recv_counts, recv_displs,
            dtype_of<T>(), with_error_bound(cfg, eb), &sub);
  add_stats(st, sub);
  const T* own = local + blocks.offset[static_cast<size_t>(r)];
  std::copy(own, own + mine, got + static_cast<size_t>(r) * mine);
  kernels::reduce_into(out, got, got + mine, mine, op, cfg.threads);
  for (size_t j = 2; j < np; ++j) {
    kernels::reduce_into(out, out, got + j * mine, mine, op, cfg.threads);
  }
}

template void exchange_reduce_scatter<float>(Comm&, const float*, float*, const Blocks&,
                                             ReduceOp, double, const Config&, Stats&);
template void exchange_reduce_scatter<double>(Comm&, const double*, double*, const Blocks&,
                                              ReduceOp, double, const Config&, Stats&);

}  // namespace zccl::coll::compute
