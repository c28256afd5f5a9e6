// MpiComm's exact collectives (mpi_comm.h): non-blocking MPI collectives polled until the
// deadline (through wait_until, transport.h); a timed-out one is abandoned, never freed.
// * Counts: MPI counts are int. allreduce/reduce/bcast are split into calls of at most
//   max_collective_count() elements; allgather(v)/gather/scatter/reduce_scatter_block/alltoallv
//   throw std::length_error when a count or displacement exceeds it.
#include <algorithm>
#include <string>

#include "mpi_internal.h"

namespace zccl::transport {

using mpi::Guard;
using mpi::to_int_count;

namespace {

MPI_Aint type_extent(MPI_Datatype type) {
  Guard g;
  MPI_Aint lb = 0, extent = 0;
  mpi::check_str(MPI_Type_get_extent(type, &lb, &extent), "MPI_Type_get_extent");
  return extent;
}

// Runs `post(offset, n, &request)` over [0, count) in pieces of at most max_collective_count().
template <class Post>
std::vector<MPI_Request> post_split(size_t count, Post post) {
  const size_t step = max_collective_count();
  std::vector<MPI_Request> reqs;
  size_t off = 0;
  do {
    const size_t n = std::min(step, count - off);
    MPI_Request r = MPI_REQUEST_NULL;
    post(off, static_cast<int>(n), &r);
    reqs.push_back(r);
    off += n;
  } while (off < count);
  return reqs;
}

// Address of element index*count of a buffer of elements with extent `ext`.
const char* element_at(const void* base, size_t index, size_t count, MPI_Aint ext) {
  return static_cast<const char*>(base) + static_cast<MPI_Aint>(index * count) * ext;
}

}  // namespace

void MpiComm::wait_collective(std::vector<MPI_Request>& reqs, const char* what, size_t count,
                              size_t bytes) const {
  std::vector<Request> pending;
  pending.reserve(reqs.size());
  for (MPI_Request r : reqs) {
    auto state = std::make_unique<mpi::RequestState>();
    state->what = what;
    state->comm = comm_;
    state->collective = true;
    state->bytes = count;
    state->parts.push_back(r);
    pending.emplace_back(std::move(state));
  }
  auto all_done = [&] {
    bool all = true;
    for (Request& r : pending) all = poll(r) && all;
    return all;
  };
  wait_until(timeout_, all_done, [&] {
    abandoned_ = true;
    throw TimeoutError("zccl: Timed out after " + std::to_string(timeout_.count()) + " ms in " +
                       what + " of " + std::to_string(count) + " elements on " +
                       mpi::comm_desc(comm_) + ", waiting for " + mpi::others_desc(rank_, size_) +
                       " (a rank failed, is far behind, or called a different collective); "
                       "the communicator is no longer usable");
  },
  // Polls without sleeping for as long as the bytes should take (transfer_spin_budget): libnbc
  // advances a collective's schedule only inside MPI_Test, so a sleeping rank held up every
  // round for every rank. On 2 cores with 3 ranks under WaitPolicy::Sleep a 16 MB
  // MPI_Iallreduce took 164 ms, 21 ms polling (benchmarks/exact_wait.py); now 23 ms.
  /*sleep_cap_us=*/200, /*idle=*/nullptr, wait_policy_, transfer_spin_budget(bytes));
}

void MpiComm::start_and_wait(const char* what, size_t count, size_t bytes,
                             const std::function<int(MPI_Request*)>& start) const {
  std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
  {
    Guard g;
    check(start(&reqs[0]), what);
  }
  wait_collective(reqs, what, count, bytes);
}

void MpiComm::barrier() const {
  start_and_wait("MPI_Ibarrier", 0, 0, [&](MPI_Request* r) {
    return MPI_Ibarrier(comm_, r);
  });
}

void MpiComm::allreduce(const void* send, void* recv, size_t count, ElemType elem,
                     ReduceKind kind) const {
  const MPI_Datatype type = mpi::datatype(elem);
  const MPI_Op op = mpi::op(kind, elem);
  if (count == 0) return;
  const MPI_Aint ext = type_extent(type);
  auto* d = static_cast<char*>(recv);
  // Open MPI's non-blocking allreduce (libnbc) falls back to a slower schedule for MPI_IN_PLACE
  // (measured on the emulated 1 Gbit/s cluster, 4 ranks, 4 MiB: 99 ms in place, 56 ms out of
  // place, 75 ms for the blocking call): an in-place call reduces from a copy instead.
  std::vector<char> copy;
  const char* s = static_cast<const char*>(send);
  if (send == kInPlace || send == recv) {
    copy.assign(d, d + count * static_cast<size_t>(ext));
    s = copy.data();
  }
  std::vector<MPI_Request> reqs;
  {
    Guard g;
    reqs = post_split(count, [&](size_t off, int n, MPI_Request* r) {
      check(MPI_Iallreduce(s + off * ext, d + off * ext, n, type, op, comm_, r),
            "MPI_Iallreduce");
    });
  }
  wait_collective(reqs, "MPI_Iallreduce", count, count * elem_size(elem));
}

void MpiComm::reduce(const void* send, void* recv, size_t count, ElemType elem, ReduceKind kind,
                  int root) const {
  const MPI_Datatype type = mpi::datatype(elem);
  const MPI_Op op = mpi::op(kind, elem);
  check_root(root, size_, "reduce");
  if (count == 0) return;
  const bool is_root = rank_ == root;
  const bool in_place = is_root && (send == kInPlace || send == recv);
  // A non-root passing MPI_IN_PLACE / send == recv means "reduce my recv buffer".
  const void* src = (!is_root && send == kInPlace) ? recv : send;
  const MPI_Aint ext = type_extent(type);
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(recv);
  std::vector<MPI_Request> reqs;
  {
    Guard g;
    reqs = post_split(count, [&](size_t off, int n, MPI_Request* r) {
      check(MPI_Ireduce(in_place ? MPI_IN_PLACE : s + off * ext,
                        is_root ? d + off * ext : nullptr, n, type, op, root, comm_, r),
            "MPI_Ireduce");
    });
  }
  wait_collective(reqs, "MPI_Ireduce", count, count * elem_size(elem));
}

void MpiComm::bcast(void* buf, size_t count, ElemType elem, int root) const {
  const MPI_Datatype type = mpi::datatype(elem);
  check_root(root, size_, "bcast");
  if (count == 0) return;
  const MPI_Aint ext = type_extent(type);
  auto* d = static_cast<char*>(buf);
  std::vector<MPI_Request> reqs;
  {
    Guard g;
    reqs = post_split(count, [&](size_t off, int n, MPI_Request* r) {
      check(MPI_Ibcast(d + off * ext, n, type, root, comm_, r), "MPI_Ibcast");
    });
  }
  wait_collective(reqs, "MPI_Ibcast", count, count * elem_size(elem));
}

void MpiComm::allgather(const void* send, void* recv, size_t count, ElemType elem) const {
  const MPI_Datatype type = mpi::datatype(elem);
  const int n = to_int_count(count, "allgather");
  const MPI_Aint ext = type_extent(type);
  const bool in_place =
      send == kInPlace || send == element_at(recv, rank_, count, ext);
  start_and_wait("MPI_Iallgather", count, count * size_ * elem_size(elem), [&](MPI_Request* r) {
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, type, recv, n, type, comm_, r);
  });
}

void MpiComm::allgatherv(const void* send, size_t count, void* recv,
                      const std::vector<size_t>& counts, ElemType elem) const {
  const MPI_Datatype type = mpi::datatype(elem);
  check_allgatherv_counts(counts, count, rank_, size_);
  std::vector<int> c(size_), displ(size_);
  size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    c[r] = to_int_count(counts[r], "allgatherv");
    displ[r] = to_int_count(total, "allgatherv");
    total += counts[r];
  }
  const MPI_Aint ext = type_extent(type);
  const bool in_place =
      send == kInPlace || send == element_at(recv, 1, displ[rank_], ext);
  start_and_wait("MPI_Iallgatherv", total, total * elem_size(elem), [&](MPI_Request* r) {
    return MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, c[rank_], type, recv, c.data(),
                           displ.data(), type, comm_, r);
  });
}

namespace {
// The arguments of a rooted gather or scatter: `own` is this rank's block (gather's send,
// scatter's recv), `all` the root's p blocks; in place at the root when `own` is kInPlace or
// already sits in its slot of `all`.
struct Rooted {
  MPI_Datatype type;
  int n;
  bool is_root;
  bool in_place;
};
Rooted rooted(const char* what, ElemType elem, size_t count, int root, int rank, int size,
              const void* own, const void* all) {
  check_root(root, size, what);
  Rooted a{mpi::datatype(elem), to_int_count(count, what), rank == root, false};
  a.in_place = a.is_root &&
               (own == kInPlace || own == element_at(all, rank, count, type_extent(a.type)));
  return a;
}
}  // namespace

void MpiComm::gather(const void* send, void* recv, size_t count, ElemType elem, int root) const {
  const Rooted a = rooted("gather", elem, count, root, rank_, size_, send, recv);
  start_and_wait("MPI_Igather", count, count * size_ * elem_size(elem), [&](MPI_Request* r) {
    return MPI_Igather(a.in_place ? MPI_IN_PLACE : send, a.n, a.type,
                       a.is_root ? recv : nullptr, a.n, a.type, root, comm_, r);
  });
}

void MpiComm::scatter(const void* send, void* recv, size_t count, ElemType elem,
                      int root) const {
  const Rooted a = rooted("scatter", elem, count, root, rank_, size_, recv, send);
  start_and_wait("MPI_Iscatter", count, count * size_ * elem_size(elem), [&](MPI_Request* r) {
    return MPI_Iscatter(a.is_root ? send : nullptr, a.n, a.type,
                        a.in_place ? MPI_IN_PLACE : recv, a.n, a.type, root, comm_, r);
  });
}

void MpiComm::reduce_scatter_block(const void* send, void* recv, size_t count, ElemType elem,
                                ReduceKind kind) const {
  const MPI_Datatype type = mpi::datatype(elem);
  const MPI_Op op = mpi::op(kind, elem);
  const int n = to_int_count(count, "reduce_scatter_block");
  const bool in_place = send == kInPlace || send == recv;
  start_and_wait("MPI_Ireduce_scatter_block", count, count * size_ * elem_size(elem),
                 [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, n, type, op, comm_, r);
  });
}

void MpiComm::alltoallv(const void* send, const std::vector<size_t>& send_counts,
                     const std::vector<size_t>& send_displs, void* recv,
                     const std::vector<size_t>& recv_counts,
                     const std::vector<size_t>& recv_displs, ElemType elem) const {
  const MPI_Datatype type = mpi::datatype(elem);
  const size_t p = static_cast<size_t>(size_);
  if (send_counts.size() != p || send_displs.size() != p || recv_counts.size() != p ||
      recv_displs.size() != p) {
    throw std::invalid_argument("zccl: alltoallv: counts and displacements need " +
                                std::to_string(p) + " entries each");
  }
  std::vector<int> sc(p), sd(p), rc(p), rd(p);
  size_t total = 0;
  for (size_t i = 0; i < p; ++i) {
    sc[i] = to_int_count(send_counts[i], "alltoallv");
    sd[i] = to_int_count(send_displs[i], "alltoallv");
    rc[i] = to_int_count(recv_counts[i], "alltoallv");
    rd[i] = to_int_count(recv_displs[i], "alltoallv");
    total += recv_counts[i];
  }
  start_and_wait("MPI_Ialltoallv", total, total * elem_size(elem), [&](MPI_Request* r) {
    return MPI_Ialltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type,
                          comm_, r);
  });
}

}  // namespace zccl::transport
