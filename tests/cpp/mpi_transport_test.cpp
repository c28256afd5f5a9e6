// Tests of csrc/transport (run under mpirun at any number of ranks, including 1).
//
// Usage: mpi_transport_test [--preinit-serialized]
//   --preinit-serialized  the program initialises MPI itself with MPI_THREAD_SERIALIZED before
//                         the transport is used: covers "MPI initialised by someone else" (not
//                         finalised by finalize_if_owned) and the process-wide lock used below
//                         MPI_THREAD_MULTIPLE (two threads then drive two communicators at once).
//
// Covered: initialisation and thread level, duplicate/subgroup (odd subset, reordered ranks,
// invalid arguments), byte point-to-point of 0..n bytes with receive capacities above the message,
// messages split into pieces (with a small piece size through the testing hook) including exact
// multiples of the piece size, truncation errors (MpiError with MPI_ERR_TRUNCATE), test()/wait()/
// wait_all(), moving and destroying active requests (cancellation), deadlines (a receive nobody
// sends -> TimeoutError naming operation, peer and tag; the program goes on afterwards), a timed
// out collective, tag blocks (range, cycling, agreement across ranks), every exact collective
// (in-place and out-of-place, every root, counts split into several MPI calls, counts too large
// for one call), concurrent use from two threads, and destruction after MPI_Finalize.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "../../csrc/transport/mpi_comm.h"
#include "mpi_test_util.h"

// The MPI implementation (raw() and the MPI-level checks); the interface is transport::Comm.
using Comm = zccl::transport::MpiComm;
using zccl::transport::ElemType;
using zccl::transport::ReduceKind;
using zccl::transport::MpiError;
using zccl::transport::Request;
using zccl::transport::TimeoutError;

namespace {

// Deterministic byte pattern for a message from `src` to `dst` of `n` bytes (distinct per pair).
std::vector<unsigned char> pattern(int src, int dst, size_t n, int salt) {
  std::vector<unsigned char> v(n);
  uint32_t s = 2166136261u ^ static_cast<uint32_t>(src * 7919 + dst * 104729 + salt * 31);
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = static_cast<unsigned char>(s >> 24);
  }
  return v;
}

void test_basics(Comm& c) {
  CHECK(c.size() >= 1);
  int wr = -1, ws = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  CHECK(c.rank() == wr);
  CHECK(c.size() == ws);
  CHECK(c.raw() != MPI_COMM_WORLD);
  int cmp = 0;
  MPI_Comm_compare(c.raw(), MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT);
  MPI_Errhandler eh;
  MPI_Comm_get_errhandler(c.raw(), &eh);
  CHECK(eh == MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&eh);
  c.barrier();
}

void test_tags(Comm& c) {
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(c.raw(), MPI_TAG_UB, &ub, &flag);
  CHECK(flag && *ub >= 32767);
  const int tag_ub = *ub;
  // All ranks see the same sequence.
  const int b0 = c.next_tag_base();
  const auto all = c.allgather_u64(static_cast<uint64_t>(b0));
  for (uint64_t v : all) CHECK(v == static_cast<uint64_t>(b0));
  const int b1 = c.next_tag_base();
  CHECK(b1 == b0 + Comm::kTagsPerOp || b1 == 1);
  // Cycle through the whole tag space once: every block in [1, MPI_TAG_UB), back to the start.
  const long blocks = (tag_ub - 1) / Comm::kTagsPerOp;
  int prev = b1;
  long steps = 0;
  int maxb = b1, minb = b1;
  for (;;) {
    const int b = c.next_tag_base();
    ++steps;
    CHECK(b >= 1 && b + Comm::kTagsPerOp - 1 < tag_ub);
    CHECK((b - 1) % Comm::kTagsPerOp == 0);
    CHECK(b == prev + Comm::kTagsPerOp || (b == 1 && prev + 2L * Comm::kTagsPerOp > tag_ub));
    maxb = std::max(maxb, b);
    minb = std::min(minb, b);
    prev = b;
    if (b == b1) break;
    CHECK(steps <= blocks);
  }
  CHECK(steps == blocks);
  CHECK(minb == 1);
}

// Ring exchange of n bytes per rank with a receive capacity of n + extra.
void ring_exchange(zccl::transport::Comm& c, size_t n, size_t extra, int tag, int salt) {
  const int p = c.size(), r = c.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const auto out = pattern(r, right, n, salt);
  std::vector<unsigned char> in(n + extra + 1, 0xAB);  // +1 guard byte, never written
  const size_t got = c.sendrecv(out.data(), n, right, in.data(), n + extra, left, tag);
  CHECK_MSG(got == n, "received " + std::to_string(got) + " of " + std::to_string(n));
  const auto want = pattern(left, r, n, salt);
  CHECK(n == 0 || std::memcmp(in.data(), want.data(), n) == 0);
  for (size_t i = n; i < in.size(); ++i) CHECK(in[i] == 0xAB);
}

void test_p2p(Comm& c) {
  const int base = c.next_tag_base();
  int salt = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{100003}}) {
    for (size_t extra : {size_t{0}, size_t{1}, size_t{5000}}) {
      ring_exchange(c, n, extra, base, ++salt);
    }
  }
  // Everyone to everyone at once, distinct tags per source; test() polling then wait_all().
  const int p = c.size(), r = c.rank();
  const int tag = c.next_tag_base();
  std::vector<std::vector<unsigned char>> outs(p), ins(p);
  std::vector<Request> reqs;
  for (int q = 0; q < p; ++q) {
    ins[q].assign(1000 + q, 0);
    reqs.push_back(c.irecv(ins[q].data(), ins[q].size(), q, tag + (q % Comm::kTagsPerOp)));
  }
  for (int q = 0; q < p; ++q) {
    outs[q] = pattern(r, q, 1000 + r, 99);
    reqs.push_back(c.isend(outs[q].data(), outs[q].size(), q, tag + (r % Comm::kTagsPerOp)));
  }
  for (auto& rq : reqs) CHECK(rq.active() || !rq.active());
  size_t polls = 0;
  while (polls < 3) {
    bool all = true;
    for (auto& rq : reqs) all = c.test(rq) && all;
    if (all) break;
    ++polls;
  }
  c.wait_all(reqs);
  for (int q = 0; q < p; ++q) {
    CHECK(reqs[q].received == 1000 + static_cast<size_t>(q));
    size_t rec = 0;
    CHECK(c.test(reqs[q], &rec));  // finished requests stay finished
    CHECK(rec == 1000 + static_cast<size_t>(q));
    CHECK(!reqs[q].active());
    CHECK(ins[q] == pattern(q, r, 1000 + q, 99));
  }
  // Blocking wrappers: send/recv to self and around the ring.
  {
    const int t = c.next_tag_base();
    const auto msg = pattern(r, r, 333, 5);
    std::vector<unsigned char> got(400);
    Request rr = c.irecv(got.data(), got.size(), r, t);
    c.send(msg.data(), msg.size(), r, t);
    CHECK(c.wait(rr) == 333);
    CHECK(std::equal(msg.begin(), msg.end(), got.begin()));
    if (p > 1) {
      const int right = (r + 1) % p, left = (r - 1 + p) % p;
      std::vector<unsigned char> in(64);
      if (r % 2 == 0) {
        c.send(msg.data(), 64, right, t + 1);
        CHECK(c.recv(in.data(), in.size(), left, t + 1) == 64);
      } else {
        CHECK(c.recv(in.data(), in.size(), left, t + 1) == 64);
        c.send(msg.data(), 64, right, t + 1);
      }
    }
  }
  // Argument errors.
  unsigned char b = 0;
  CHECK_THROWS(c.isend(&b, 1, p, 1), std::invalid_argument, "peer");
  CHECK_THROWS(c.irecv(&b, 1, -1, 1), std::invalid_argument, "peer");
  CHECK_THROWS(c.isend(&b, 1, 0, -5), std::invalid_argument, "tag");
  CHECK_THROWS(c.isend(nullptr, 1, 0, 1), std::invalid_argument, "null");
  c.barrier();
}

void test_pieces(Comm& c) {
  const size_t piece = 1000;
  zccl::transport::set_max_piece_bytes(piece);
  CHECK(zccl::transport::max_piece_bytes() == piece);
  const int tag = c.next_tag_base();
  int salt = 100;
  for (size_t n : {size_t{0}, size_t{999}, size_t{1000}, size_t{1001}, size_t{2000},
                   size_t{2999}, size_t{5003}}) {
    for (size_t extra : {size_t{0}, size_t{1}, size_t{1000}, size_t{3500}}) {
      ring_exchange(c, n, extra, tag, ++salt);
    }
  }
  // Truncation: a message larger than the capacity is an MpiError of class MPI_ERR_TRUNCATE,
  // for a single piece and in a later piece. The sender's side completes normally.
  const int p = c.size(), r = c.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  for (size_t n : {size_t{600}, size_t{1800}}) {
    const int t = c.next_tag_base();
    const auto out = pattern(r, right, n, 7);
    std::vector<unsigned char> in(n);
    Request s = c.isend(out.data(), n, right, t);
    Request q = c.irecv(in.data(), n - 100, left, t);
    bool threw = false;
    try {
      c.wait(q);
    } catch (const MpiError& e) {
      threw = true;
      CHECK_MSG(e.error_class() == MPI_ERR_TRUNCATE, e.what());
      CHECK_MSG(std::string(e.what()).find("from rank " + std::to_string(left)) !=
                    std::string::npos,
                e.what());
    }
    CHECK(threw);
    c.wait(s);
    c.barrier();
  }
  zccl::transport::set_max_piece_bytes(0);  // clamps to 1
  CHECK(zccl::transport::max_piece_bytes() == 1);
  ring_exchange(c, 5, 3, c.next_tag_base(), 1);
  zccl::transport::set_max_piece_bytes(size_t{1} << 30);
  c.barrier();
}

void test_timeouts(Comm& c) {
  const int p = c.size(), r = c.rank();
  const auto saved = c.timeout();
  c.set_timeout(std::chrono::milliseconds(200));
  const int tag = c.next_tag_base() + 17;
  const int peer = (r + 1) % p;
  {
    std::vector<unsigned char> buf(64);
    const auto t0 = std::chrono::steady_clock::now();
    Request q = c.irecv(buf.data(), buf.size(), peer, tag);
    bool threw = false;
    try {
      c.wait(q);
    } catch (const TimeoutError& e) {
      threw = true;
      const std::string m = e.what();
      CHECK_MSG(m.find("irecv") != std::string::npos, m);
      CHECK_MSG(m.find("rank " + std::to_string(peer)) != std::string::npos, m);
      CHECK_MSG(m.find("tag " + std::to_string(tag)) != std::string::npos, m);
      CHECK_MSG(m.find("200 ms") != std::string::npos, m);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(threw);
    CHECK_MSG(secs >= 0.19 && secs < 20.0, std::to_string(secs));
    CHECK(q.active());
    // Destroying it cancels the receive (no later message can land in `buf`).
  }
  // wait_all and sendrecv time out too; the destructors cancel everything.
  {
    std::vector<unsigned char> a(8), b(8);
    std::vector<Request> reqs;
    reqs.push_back(c.irecv(a.data(), a.size(), peer, tag + 1));
    reqs.push_back(c.irecv(b.data(), b.size(), peer, tag + 2));
    CHECK_THROWS(c.wait_all(reqs), TimeoutError, "tag " + std::to_string(tag + 1));
    if (p > 1) {  // (with one rank the send to self would match the receive)
      CHECK_THROWS(c.sendrecv(a.data(), 0, r, b.data(), 8, peer, tag + 3), TimeoutError,
                   "irecv");
    }
  }
  // Move-assigning over an active request cancels the old one.
  {
    std::vector<unsigned char> a(8);
    Request q = c.irecv(a.data(), a.size(), peer, tag + 4);
    CHECK(q.active());
    Request moved(std::move(q));
    CHECK(moved.active());
    CHECK(!q.active());  // NOLINT(bugprone-use-after-move): moved-from is inactive by contract
    moved = Request();
    CHECK(!moved.active());
  }
  // The program continues normally: the cancelled receives never match later traffic.
  c.set_timeout(saved);
  c.barrier();
  ring_exchange(c, 100, 0, tag, 77);  // same tag as the cancelled receive
  ring_exchange(c, 100, 0, tag + 1, 78);

  // A collective that not every rank joins in time: TimeoutError on the waiting ranks. Rank 0
  // joins later, which completes the abandoned operation, so the communicator is freed cleanly.
  if (p > 1) {
    auto bad = Comm::duplicate(c.raw());
    bad->set_timeout(std::chrono::milliseconds(200));
    if (r != 0) {
      CHECK_THROWS(bad->barrier(), TimeoutError, "MPI_Ibarrier");
    }
    c.barrier();
    bad->set_timeout(std::chrono::milliseconds(60000));
    if (r == 0) bad->barrier();
  }
  c.barrier();
}

void test_collectives(Comm& c, size_t max_count) {
  zccl::transport::set_max_collective_count(max_count);
  const int p = c.size(), r = c.rank();
  const size_t P = static_cast<size_t>(p);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{50}}) {
    // allreduce, out of place and in place (sums of small integers are exact in double).
    std::vector<double> x(n), y(n, -1.0);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>((r + 1) * 1000 + i);
    c.allreduce(x.data(), y.data(), n, ElemType::Float64, ReduceKind::Sum);
    for (size_t i = 0; i < n; ++i) {
      CHECK(y[i] == static_cast<double>(1000 * p * (p + 1) / 2 + p * static_cast<long>(i)));
    }
    std::vector<double> z = x;
    c.allreduce(z.data(), z.data(), n, ElemType::Float64, ReduceKind::Max);
    for (size_t i = 0; i < n; ++i) CHECK(z[i] == static_cast<double>(p * 1000 + i));
    z = x;
    c.allreduce(zccl::transport::kInPlace, z.data(), n, ElemType::Float64, ReduceKind::Min);
    for (size_t i = 0; i < n; ++i) CHECK(z[i] == static_cast<double>(1000 + i));

    for (int root = 0; root < p; ++root) {
      // reduce
      std::vector<int64_t> a(n), out(n, -7);
      for (size_t i = 0; i < n; ++i) a[i] = r * 10 + static_cast<int64_t>(i);
      c.reduce(a.data(), out.data(), n, ElemType::Int64, ReduceKind::Sum, root);
      if (r == root) {
        for (size_t i = 0; i < n; ++i) CHECK(out[i] == 10 * p * (p - 1) / 2 + p * (int64_t)i);
      }
      std::vector<int64_t> inplace = a;
      c.reduce(inplace.data(), inplace.data(), n, ElemType::Int64, ReduceKind::Max, root);
      if (r == root) {
        for (size_t i = 0; i < n; ++i) CHECK(inplace[i] == (p - 1) * 10 + (int64_t)i);
      }
      // bcast
      std::vector<double> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = r == root ? 0.5 + root + i : -1.0;
      c.bcast(b.data(), n, ElemType::Float64, root);
      for (size_t i = 0; i < n; ++i) CHECK(b[i] == 0.5 + root + i);
      if (n > max_count) continue;  // the block collectives below refuse such counts
      // gather / scatter, out of place and in place at the root
      std::vector<double> blk(n), all(P * n, -1.0);
      for (size_t i = 0; i < n; ++i) blk[i] = r * 100.0 + i;
      c.gather(blk.data(), all.data(), n, ElemType::Float64, root);
      if (r == root) {
        for (size_t q = 0; q < P; ++q)
          for (size_t i = 0; i < n; ++i) CHECK(all[q * n + i] == q * 100.0 + i);
        std::fill(all.begin(), all.end(), -1.0);
        std::copy(blk.begin(), blk.end(), all.begin() + r * n);
        c.gather(all.data() + r * n, all.data(), n, ElemType::Float64, root);
        for (size_t q = 0; q < P; ++q)
          for (size_t i = 0; i < n; ++i) CHECK(all[q * n + i] == q * 100.0 + i);
      } else {
        c.gather(blk.data(), nullptr, n, ElemType::Float64, root);
      }
      std::vector<double> src(P * n), part(n, -1.0);
      for (size_t k = 0; k < P * n; ++k) src[k] = root * 1e6 + k;
      c.scatter(r == root ? src.data() : nullptr, part.data(), n, ElemType::Float64, root);
      for (size_t i = 0; i < n; ++i) CHECK(part[i] == root * 1e6 + r * n + i);
    }
    if (n > max_count) {
      std::vector<double> all(P * n);
      CHECK_THROWS(c.allgather(x.data(), all.data(), n, ElemType::Float64), std::length_error,
                   "exceeds");
      CHECK_THROWS(c.scatter(all.data(), x.data(), n, ElemType::Float64, 0), std::length_error,
                   "split the operation");
      continue;
    }
    // allgather, out of place and in place
    std::vector<double> all(P * n, -1.0);
    c.allgather(x.data(), all.data(), n, ElemType::Float64);
    for (size_t q = 0; q < P; ++q)
      for (size_t i = 0; i < n; ++i) CHECK(all[q * n + i] == (q + 1) * 1000.0 + i);
    std::fill(all.begin(), all.end(), -1.0);
    std::copy(x.begin(), x.end(), all.begin() + r * n);
    c.allgather(all.data() + r * n, all.data(), n, ElemType::Float64);
    for (size_t q = 0; q < P; ++q)
      for (size_t i = 0; i < n; ++i) CHECK(all[q * n + i] == (q + 1) * 1000.0 + i);
    // reduce_scatter_block
    std::vector<double> rs_in(P * n), rs_out(n, -1);
    for (size_t k = 0; k < P * n; ++k) rs_in[k] = static_cast<double>(k + r);
    c.reduce_scatter_block(rs_in.data(), rs_out.data(), n, ElemType::Float64, ReduceKind::Sum);
    for (size_t i = 0; i < n; ++i) {
      CHECK(rs_out[i] == static_cast<double>(p * (r * n + i) + p * (p - 1) / 2));
    }
  }
  if (max_count < 1000) {  // every rank refuses (before any MPI call), so nobody waits
    std::vector<size_t> big(P, max_count + 1), zero(P, 0);
    std::vector<double> buf(P * (max_count + 1));
    CHECK_THROWS(c.alltoallv(buf.data(), big, zero, buf.data(), zero, zero, ElemType::Float64),
                 std::length_error, "alltoallv");
    CHECK_THROWS(c.allgatherv(buf.data(), max_count + 1, buf.data(), big, ElemType::Float64),
                 std::length_error, "allgatherv");
    CHECK_THROWS(c.reduce_scatter_block(buf.data(), buf.data(), max_count + 1, ElemType::Float64,
                                        ReduceKind::Sum),
                 std::length_error, "reduce_scatter_block");
    zccl::transport::set_max_collective_count(static_cast<size_t>(INT_MAX));
    return;
  }
  // allgatherv: rank q contributes q+1 values (and 0 for the last rank when p > 1).
  {
    std::vector<size_t> counts(P);
    for (size_t q = 0; q < P; ++q) counts[q] = (q + 1 == P && P > 1) ? 0 : q + 1;
    std::vector<double> mine(counts[r]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = r * 10.0 + i;
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<double> out(total, -1.0);
    c.allgatherv(mine.data(), mine.size(), out.data(), counts, ElemType::Float64);
    size_t k = 0;
    for (size_t q = 0; q < P; ++q)
      for (size_t i = 0; i < counts[q]; ++i) CHECK(out[k++] == q * 10.0 + i);
    CHECK_THROWS(c.allgatherv(mine.data(), mine.size() + 1, out.data(), counts, ElemType::Float64),
                 std::invalid_argument, "differs");
    counts.push_back(1);
    CHECK_THROWS(c.allgatherv(mine.data(), mine.size(), out.data(), counts, ElemType::Float64),
                 std::invalid_argument, "entries");
  }
  // alltoallv: r sends (r + q) % 3 values to q, packed with a gap of 2 between blocks.
  {
    std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
    size_t so = 0, ro = 0;
    for (size_t q = 0; q < P; ++q) {
      sc[q] = (r + q) % 3;
      sd[q] = so;
      so += sc[q] + 2;
      rc[q] = (q + r) % 3;
      rd[q] = ro;
      ro += rc[q] + 2;
    }
    std::vector<double> s(so), d(ro, -1.0);
    for (size_t q = 0; q < P; ++q)
      for (size_t i = 0; i < sc[q]; ++i) s[sd[q] + i] = r * 1000.0 + q * 10.0 + i;
    c.alltoallv(s.data(), sc, sd, d.data(), rc, rd, ElemType::Float64);
    for (size_t q = 0; q < P; ++q) {
      for (size_t i = 0; i < rc[q]; ++i) CHECK(d[rd[q] + i] == q * 1000.0 + r * 10.0 + i);
      CHECK(d[rd[q] + rc[q]] == -1.0);  // the gaps are untouched
    }
    sc.pop_back();
    CHECK_THROWS(c.alltoallv(s.data(), sc, sd, d.data(), rc, rd, ElemType::Float64),
                 std::invalid_argument, "entries");
  }
  // allgather_u64 of large values, barrier, bad roots.
  const auto v = c.allgather_u64((uint64_t{1} << 40) + static_cast<uint64_t>(r));
  CHECK(v.size() == P);
  for (size_t q = 0; q < P; ++q) CHECK(v[q] == (uint64_t{1} << 40) + q);
  c.barrier();
  double d = 0;
  CHECK_THROWS(c.bcast(&d, 1, ElemType::Float64, p), std::invalid_argument, "root");
  CHECK_THROWS(c.reduce(&d, &d, 1, ElemType::Float64, ReduceKind::Sum, -1), std::invalid_argument, "root");
  CHECK_THROWS(c.gather(&d, &d, 1, ElemType::Float64, p + 3), std::invalid_argument, "root");
  CHECK_THROWS(c.scatter(&d, &d, 1, ElemType::Float64, -2), std::invalid_argument, "root");
  zccl::transport::set_max_collective_count(static_cast<size_t>(INT_MAX));
}

void test_subgroup(Comm& c) {
  const int p = c.size(), r = c.rank();
  // An odd subset in reverse order: every other rank, from the top (p=1: {0}; p=4: {2, 0}...).
  std::vector<int> ranks;
  for (int q = (p - 1) - ((p - 1) % 2); q >= 0; q -= 2) ranks.push_back(q);
  if (ranks.size() % 2 == 0 && p > 1) ranks.push_back(1);  // make the size odd
  c.set_timeout(std::chrono::milliseconds(60000));
  auto sub = c.subgroup(ranks);
  const auto pos = std::find(ranks.begin(), ranks.end(), r);
  if (pos == ranks.end()) {
    CHECK(sub == nullptr);
  } else {
    CHECK(sub != nullptr);
    CHECK(sub->size() == static_cast<int>(ranks.size()));
    CHECK(sub->rank() == static_cast<int>(pos - ranks.begin()));
    CHECK(sub->timeout() == c.timeout());  // inherited
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(dynamic_cast<Comm&>(*sub).raw(), &eh);  // an MpiComm too
    CHECK(eh == MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);
    const auto v = sub->allgather_u64(static_cast<uint64_t>(r));
    for (size_t i = 0; i < ranks.size(); ++i) CHECK(v[i] == static_cast<uint64_t>(ranks[i]));
    ring_exchange(*sub, 1234, 10, sub->next_tag_base(), 3);
    double s = 1.0;
    sub->allreduce(&s, &s, 1, ElemType::Float64, ReduceKind::Sum);
    CHECK(s == static_cast<double>(ranks.size()));
    // A subgroup of a subgroup.
    auto subsub = sub->subgroup({0});
    CHECK((subsub != nullptr) == (sub->rank() == 0));
  }
  CHECK_THROWS(c.subgroup({}), std::invalid_argument, "at least one");
  CHECK_THROWS(c.subgroup({0, p}), std::invalid_argument, "out of range");
  CHECK_THROWS(c.subgroup({0, 0}), std::invalid_argument, "twice");
  c.barrier();
}

// Two threads, each driving its own communicator (exercises MPI_THREAD_MULTIPLE or, below it,
// the transport's process-wide lock).
void test_threads(Comm& c) {
  auto c1 = Comm::duplicate(c.raw());
  auto c2 = Comm::duplicate(c.raw());
  auto work = [](Comm* cm, int salt) {
    for (int it = 0; it < 20; ++it) {
      ring_exchange(*cm, 3000 + it * 17, 5, cm->next_tag_base(), salt + it);
      double s = 1.0;
      cm->allreduce(&s, &s, 1, ElemType::Float64, ReduceKind::Sum);
      CHECK(s == cm->size());
    }
  };
  std::thread t1(work, c1.get(), 1000);
  std::thread t2(work, c2.get(), 2000);
  t1.join();
  t2.join();
  c.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  bool preinit = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--preinit-serialized") preinit = true;
  }
  if (preinit) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    const int got = zccl::transport::ensure_initialized();
    CHECK(got == provided);
    CHECK(!zccl::transport::thread_multiple() || provided == MPI_THREAD_MULTIPLE);
  } else {
    int init = 0;
    MPI_Initialized(&init);
    CHECK(!init);
    const int got = zccl::transport::ensure_initialized();
    CHECK(got >= MPI_THREAD_SINGLE);
    CHECK(zccl::transport::ensure_initialized() == got);  // idempotent
    MPI_Initialized(&init);
    CHECK(init);
  }
  zccl::transport::check(MPI_SUCCESS, "nothing");
  CHECK_THROWS(zccl::transport::check(MPI_ERR_COUNT, "MPI_Fake"), MpiError, "MPI_Fake");

  {
    auto d = zccl::transport::MpiComm::duplicate(MPI_COMM_WORLD);
    CHECK(d->timeout() == std::chrono::minutes(30));  // the documented default
  }
  auto c = Comm::duplicate(MPI_COMM_WORLD, std::chrono::milliseconds(60000));
  CHECK(c->timeout() == std::chrono::milliseconds(60000));
  test_basics(*c);
  test_tags(*c);
  test_p2p(*c);
  test_pieces(*c);
  test_timeouts(*c);
  test_collectives(*c, static_cast<size_t>(INT_MAX));
  test_collectives(*c, 7);  // elementwise collectives split into calls of 7; others refuse > 7
  test_subgroup(*c);
  test_threads(*c);

  // A communicator that outlives MPI: its destructor must not call MPI_Comm_free.
  auto late = zccl::transport::MpiComm::duplicate(MPI_COMM_WORLD);
  c.reset();
  if (preinit) {
    zccl::transport::finalize_if_owned();  // not ours: must not finalise
    int fin = 0;
    MPI_Finalized(&fin);
    CHECK(!fin);
    late->barrier();
    MPI_Finalize();
  } else {
    zccl::transport::finalize_if_owned();
    int fin = 0;
    MPI_Finalized(&fin);
    CHECK(fin);
    zccl::transport::finalize_if_owned();  // idempotent
    CHECK_THROWS(zccl::transport::ensure_initialized(), MpiError, "finalized");
  }
  late.reset();
  std::printf("mpi_transport_test OK\n");
  return 0;
}
