// Tests of the TCP transport (csrc/transport/tcp) and the point-to-point exact collectives
// (csrc/transport/p2p_exact.h) on loopback, without torch or MPI: the parent opens one listener
// per rank, forks the ranks, and each rank connects the mesh and runs every check.
//
//   tcp_transport_test P   -> exit 0 when every rank passed; each failure is printed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../csrc/transport/backoff.h"
#include "../../csrc/transport/link_probe.h"
#include "../../csrc/transport/reduce_ops.h"
#include "../../csrc/transport/tcp/tcp_comm.h"

using namespace zccl::transport;
using zccl::transport::tcp::Listener;
using zccl::transport::tcp::TcpComm;

namespace {

int g_failures = 0;
int g_rank = 0;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      ++g_failures;                                                           \
      std::fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", g_rank,     \
                   __FILE__, __LINE__, #cond);                                \
      std::fprintf(stderr, __VA_ARGS__);                                      \
      std::fprintf(stderr, "\n");                                             \
    }                                                                         \
  } while (0)

// Deterministic bytes of message `id` from `from`.
std::vector<uint8_t> pattern(size_t n, int from, int id) {
  std::vector<uint8_t> v(n);
  uint32_t x = 2654435761u * static_cast<uint32_t>(from + 1) + 97u * static_cast<uint32_t>(id);
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

bool same_bytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

template <class F>
bool throws_with(F f, const std::string& needle, std::string* what = nullptr) {
  try {
    f();
  } catch (const std::exception& e) {
    if (what != nullptr) *what = e.what();
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

void ring_exchange(const Comm& c, int tag_base) {
  const int p = c.size(), me = c.rank();
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
    const int id = static_cast<int>(n % 1000);
    auto out = pattern(n, me, id);
    std::vector<uint8_t> in(n + 7, 0xEE);
    const size_t got = c.sendrecv(out.data(), n, (me + 1) % p, in.data(), in.size(), (me - 1 + p) % p,
                                  tag_base);
    CHECK(got == n, "ring of %zu bytes received %zu", n, got);
    in.resize(n);
    CHECK(in == pattern(n, (me - 1 + p) % p, id), "ring of %zu bytes: wrong content", n);
  }
}

void check_p2p(Comm& c) {
  const int p = c.size(), me = c.rank();
  ring_exchange(c, 5);
  if (p < 2) return;
  // Order on one (peer, tag): early messages (sent before the receives exist) and posted ones.
  if (me == 1) {
    for (int i = 0; i < 5; ++i) {
      auto v = pattern(100 + i, 1, i);
      c.send(v.data(), v.size(), 0, 9);
    }
  } else if (me == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let them arrive first
    for (int i = 0; i < 5; ++i) {
      std::vector<uint8_t> in(200);
      const size_t got = c.recv(in.data(), in.size(), 1, 9);
      in.resize(got);
      CHECK(in == pattern(100 + i, 1, i), "early message %d out of order", i);
    }
  }
  // Any source: every other rank sends its rank; rank 0 learns each sender.
  if (me == 0) {
    std::vector<int> seen(p, 0);
    for (int i = 1; i < p; ++i) {
      int32_t v = -1;
      Request r = c.irecv_any(&v, sizeof(v), 11);
      c.wait(r);
      CHECK(r.source == v && v > 0 && v < p, "any-source: source %d, value %d", r.source, v);
      if (v > 0 && v < p) ++seen[v];
    }
    for (int i = 1; i < p; ++i) CHECK(seen[i] == 1, "any-source: rank %d seen %d times", i, seen[i]);
  } else {
    const int32_t v = me;
    c.send(&v, sizeof(v), 0, 11);
  }
  // Truncation: a receive smaller than its message fails, and the stream stays in step.
  if (me == 1) {
    auto big = pattern(100000, 1, 3);
    c.send(big.data(), big.size(), 0, 13);
    auto small = pattern(10, 1, 4);
    c.send(small.data(), small.size(), 0, 13);
  } else if (me == 0) {
    std::vector<uint8_t> in(10);
    bool truncated = false;
    try {
      c.recv(in.data(), in.size(), 1, 13);
    } catch (const TransportError& e) {
      truncated = e.truncated() && std::string(e.what()).find("larger than") != std::string::npos;
    }
    CHECK(truncated, "a 100000-byte message into 10 bytes did not fail as truncated");
    CHECK(c.recv(in.data(), in.size(), 1, 13) == 10 && in == pattern(10, 1, 4),
          "the message after a truncated one is wrong");
  }
  // A send abandoned half-way still delivers its bytes (from a copy) and keeps the stream whole.
  const size_t huge = size_t{48} << 20;
  if (me == 1) {
    auto v = pattern(huge, 1, 5);
    {
      Request r = c.isend(v.data(), v.size(), 0, 15);
      c.test(r);
    }  // abandoned here
    std::fill(v.begin(), v.end(), uint8_t{0});
    auto after = pattern(64, 1, 6);
    c.send(after.data(), after.size(), 0, 15);
  } else if (me == 0) {
    std::vector<uint8_t> in(huge);
    CHECK(c.recv(in.data(), in.size(), 1, 15) == huge, "abandoned send: size");
    CHECK(in == pattern(huge, 1, 5), "abandoned send: content");
    std::vector<uint8_t> after(64);
    CHECK(c.recv(after.data(), 64, 1, 15) == 64 && after == pattern(64, 1, 6),
          "message after an abandoned send");
  }
  // A receive abandoned while its message arrives drops it; the next one is intact.
  if (me == 0) {
    std::vector<uint8_t> sink(huge);
    {
      Request r = c.irecv(sink.data(), sink.size(), 1, 17);
      for (int i = 0; i < 20; ++i) c.test(r);
    }
    std::vector<uint8_t> next(32);
    CHECK(c.recv(next.data(), 32, 1, 19) == 32 && next == pattern(32, 1, 7),
          "message after an abandoned receive");
  } else if (me == 1) {
    auto v = pattern(huge, 1, 8);
    c.send(v.data(), v.size(), 0, 17);
    auto w = pattern(32, 1, 7);
    c.send(w.data(), w.size(), 0, 19);
  }
  c.barrier();
  // A timeout names the peer.
  if (me == 0) {
    const auto saved = c.timeout();
    c.set_timeout(std::chrono::milliseconds(200));
    uint8_t b = 0;
    std::string what;
    CHECK(throws_with([&] { c.recv(&b, 1, p - 1, 21); }, "Timed out", &what) &&
              what.find("rank " + std::to_string(p - 1)) != std::string::npos,
          "timeout message: %s", what.c_str());
    c.set_timeout(saved);
  }
  // Bad arguments.
  uint8_t b = 0;
  CHECK(throws_with([&] { c.isend(&b, 1, p, 3); }, "out of range"), "peer out of range accepted");
  CHECK(throws_with([&] { c.isend(&b, 1, 0, -3); }, "out of range"), "negative tag accepted");
  c.barrier();
}

// Every rank's input for the collectives: deterministic per (rank, index).
template <class T>
std::vector<T> input(size_t n, int r, ElemType t) {
  std::vector<T> v(n);
  std::mt19937_64 g(1000003u * static_cast<unsigned>(r + 1) + n);
  for (auto& x : v) {
    if (t == ElemType::Bool) {
      x = static_cast<T>(g() % 2);
    } else if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>((static_cast<double>(g() % 2000001) - 1000000.0) / 3.7);
    } else {
      x = static_cast<T>(g() % 9 + 1);
    }
  }
  return v;
}

// The rank-order fold, written independently of reduce_ops for the combinations it covers.
template <class T>
T ref_op(T a, T b, ReduceKind op) {
  switch (op) {
    case ReduceKind::Sum: return static_cast<T>(a + b);
    case ReduceKind::Prod: return static_cast<T>(a * b);
    case ReduceKind::Min: return b < a ? b : a;
    case ReduceKind::Max: return a < b ? b : a;
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceKind::BXor: return static_cast<T>(a ^ b);
      case ReduceKind::LAnd: return static_cast<T>(a && b);
      case ReduceKind::LOr: return static_cast<T>(a || b);
      default: break;
    }
  }
  throw std::logic_error("ref_op");
}

template <class T>
std::vector<T> ref_fold(size_t n, int p, ElemType t, ReduceKind op) {
  std::vector<T> acc = input<T>(n, 0, t);
  for (int r = 1; r < p; ++r) {
    auto x = input<T>(n, r, t);
    for (size_t i = 0; i < n; ++i) acc[i] = ref_op(acc[i], x[i], op);
  }
  return acc;
}

template <class T>
void check_reductions(Comm& c, ElemType t, std::vector<ReduceKind> ops) {
  const int p = c.size(), me = c.rank();
  const std::vector<size_t> counts = {0, 1, size_t(p) - 1, size_t(p) + 1, 13, 2003, 9000, 700001};
  for (ReduceKind op : ops) {
    for (size_t n : counts) {
      const auto want = ref_fold<T>(n, p, t, op);
      auto mine = input<T>(n, me, t);
      std::vector<T> out(n);
      c.allreduce(mine.data(), out.data(), n, t, op);
      CHECK(same_bytes(out.data(), want.data(), n * sizeof(T)),
            "allreduce type %d op %d n %zu", int(t), int(op), n);
      std::vector<T> inplace = mine;
      c.allreduce(kInPlace, inplace.data(), n, t, op);
      CHECK(same_bytes(inplace.data(), want.data(), n * sizeof(T)),
            "in-place allreduce type %d op %d n %zu", int(t), int(op), n);
      for (int root = 0; root < p; ++root) {
        std::vector<T> r(n);
        c.reduce(mine.data(), r.data(), n, t, op, root);
        if (me == root) {
          CHECK(same_bytes(r.data(), want.data(), n * sizeof(T)),
                "reduce type %d op %d n %zu root %d", int(t), int(op), n, root);
        }
      }
      // reduce_scatter_block over p blocks of n/p+1 elements.
      const size_t blk = n / p + 1;
      const auto full = ref_fold<T>(blk * p, p, t, op);
      auto in_full = input<T>(blk * p, me, t);
      std::vector<T> part(blk);
      c.reduce_scatter_block(in_full.data(), part.data(), blk, t, op);
      CHECK(same_bytes(part.data(), full.data() + me * blk, blk * sizeof(T)),
            "reduce_scatter_block type %d op %d blk %zu", int(t), int(op), blk);
    }
  }
}

// fold's MIN/MAX give the same bits in either operand order (MPI may apply the operator built
// on it in any order on each rank): NaN wins, of two NaNs the larger bit pattern, -0 is below
// +0 (IEEE 754-2019 minimum/maximum).
template <class T>
void check_fold_order_free(ElemType t) {
  const T nan_a = std::numeric_limits<T>::quiet_NaN();
  const T nan_b = -std::numeric_limits<T>::quiet_NaN();  // other bits
  const T inf = std::numeric_limits<T>::infinity();
  const std::vector<T> values = {T(0), T(-0.0), T(1), T(-1), inf, -inf, nan_a, nan_b};
  for (ReduceKind op : {ReduceKind::Min, ReduceKind::Max}) {
    for (T a : values) {
      for (T b : values) {
        T ab = a, ba = b;
        fold(&ab, &b, 1, t, op);
        fold(&ba, &a, 1, t, op);
        CHECK(same_bytes(&ab, &ba, sizeof(T)), "fold op %d of %g and %g depends on the order",
              int(op), double(a), double(b));
        CHECK(std::isnan(ab) == (std::isnan(a) || std::isnan(b)), "fold op %d lost a NaN",
              int(op));
        if (a == 0 && b == 0) {
          CHECK(std::signbit(ab) == (op == ReduceKind::Min ? std::signbit(a) || std::signbit(b)
                                                           : std::signbit(a) && std::signbit(b)),
                "fold op %d of signed zeros", int(op));
        }
      }
    }
  }
}

void check_collectives(Comm& c) {
  const int p = c.size(), me = c.rank();
  check_fold_order_free<float>(ElemType::Float32);
  check_fold_order_free<double>(ElemType::Float64);
  check_reductions<double>(c, ElemType::Float64, {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod});
  check_reductions<float>(c, ElemType::Float32, {ReduceKind::Sum, ReduceKind::Min});
  check_reductions<int32_t>(c, ElemType::Int32, {ReduceKind::Sum, ReduceKind::Max, ReduceKind::BXor, ReduceKind::Prod});
  check_reductions<int64_t>(c, ElemType::Int64, {ReduceKind::Sum});
  check_reductions<uint8_t>(c, ElemType::UInt8, {ReduceKind::Sum, ReduceKind::Min});
  check_reductions<uint8_t>(c, ElemType::Bool, {ReduceKind::LAnd, ReduceKind::LOr});
  CHECK(throws_with([&] {
          double x = 1;
          c.allreduce(kInPlace, &x, 1, ElemType::Float64, ReduceKind::BXor);
        }, "floating-point"), "BXor on float64 accepted");
  c.barrier();  // the others may have thrown at the same place, or finished: resynchronise

  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{20000}, size_t{900001}}) {
    // bcast from every root (tree and chain).
    for (int root = 0; root < p; ++root) {
      auto v = me == root ? pattern(n, root, 1) : std::vector<uint8_t>(n, 0);
      c.bcast(v.data(), n, ElemType::UInt8, root);
      CHECK(v == pattern(n, root, 1), "bcast n %zu root %d", n, root);
    }
    // allgather, out of place and in place.
    std::vector<uint8_t> all(n * p), want(n * p);
    for (int r = 0; r < p; ++r) {
      auto v = pattern(n, r, 2);
      std::copy(v.begin(), v.end(), want.begin() + r * n);
    }
    auto mine = pattern(n, me, 2);
    c.allgather(mine.data(), all.data(), n, ElemType::UInt8);
    CHECK(all == want, "allgather n %zu", n);
    std::vector<uint8_t> inplace(n * p, 0);
    std::copy(mine.begin(), mine.end(), inplace.begin() + me * n);
    c.allgather(kInPlace, inplace.data(), n, ElemType::UInt8);
    CHECK(inplace == want, "in-place allgather n %zu", n);
    for (int root = 0; root < p; ++root) {
      std::vector<uint8_t> g(me == root ? n * p : 0);
      c.gather(mine.data(), g.data(), n, ElemType::UInt8, root);
      if (me == root) CHECK(g == want, "gather n %zu root %d", n, root);
      std::vector<uint8_t> s(n);
      c.scatter(me == root ? want.data() : nullptr, s.data(), n, ElemType::UInt8, root);
      CHECK(s == pattern(n, me, 2), "scatter n %zu root %d", n, root);
    }
  }
  // allgatherv with uneven counts, zeros included.
  std::vector<size_t> counts(p);
  for (int r = 0; r < p; ++r) counts[r] = (r % 3 == 1) ? 0 : 1000 * r + 3;
  size_t total = 0;
  std::vector<uint8_t> want;
  for (int r = 0; r < p; ++r) {
    auto v = pattern(counts[r], r, 3);
    want.insert(want.end(), v.begin(), v.end());
    total += counts[r];
  }
  std::vector<uint8_t> got(total);
  auto mine = pattern(counts[me], me, 3);
  c.allgatherv(mine.data(), counts[me], got.data(), counts, ElemType::UInt8);
  CHECK(got == want, "allgatherv");
  // alltoallv: rank i sends (i + j) % 4 * 100 elements to rank j.
  std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
  size_t st = 0, rt = 0;
  for (int j = 0; j < p; ++j) {
    sc[j] = static_cast<size_t>((me + j) % 4) * 100;
    sd[j] = st;
    st += sc[j];
    rc[j] = static_cast<size_t>((j + me) % 4) * 100;
    rd[j] = rt;
    rt += rc[j];
  }
  std::vector<int32_t> sbuf(st), rbuf(rt, -1);
  for (int j = 0; j < p; ++j) {
    for (size_t k = 0; k < sc[j]; ++k) sbuf[sd[j] + k] = me * 1000000 + j * 1000 + static_cast<int>(k);
  }
  c.alltoallv(sbuf.data(), sc, sd, rbuf.data(), rc, rd, ElemType::Int32);
  bool ok = true;
  for (int j = 0; j < p; ++j) {
    for (size_t k = 0; k < rc[j]; ++k) ok &= rbuf[rd[j] + k] == j * 1000000 + me * 1000 + static_cast<int>(k);
  }
  CHECK(ok, "alltoallv");
  c.barrier();
}

// Two threads use two communicators of one mesh at once: their messages never mix.
void check_duplicate(Comm& c) {
  std::unique_ptr<Comm> d = c.duplicate();
  std::atomic<int> failures{0};
  auto traffic = [&](Comm& comm, int id) {
    const int p = comm.size(), me = comm.rank();
    for (int i = 0; i < 30; ++i) {
      auto out = pattern(5000 + id, me, 100 * id + i);
      std::vector<uint8_t> in(6000);
      const size_t got = comm.sendrecv(out.data(), out.size(), (me + 1) % p, in.data(), in.size(),
                                       (me - 1 + p) % p, 7);
      in.resize(got);
      if (in != pattern(5000 + id, (me - 1 + p) % p, 100 * id + i)) ++failures;
    }
  };
  std::thread t([&] { traffic(*d, 2); });
  traffic(c, 1);
  t.join();
  CHECK(failures == 0, "%d messages mixed between duplicated communicators", failures.load());
  d->barrier();
  // An exact collective the others never join times out naming them (d is dropped after).
  if (c.rank() == 0 && c.size() > 1) {
    d->set_timeout(std::chrono::milliseconds(200));
    std::string what;
    CHECK(throws_with([&] { d->barrier(); }, "waiting for rank(s) " + std::to_string(c.size() - 1), &what),
          "exact collective timeout: %s", what.c_str());
  }
  c.barrier();
}

// time_ring_exchanges (link_probe.h): the same times on every rank (the slowest rank's), both
// positive and finite; its argument errors.
void check_link_probe(Comm& c) {
  const LinkTimes t = time_ring_exchanges(c, 1 << 16, 3, 2);
  CHECK(t.small_seconds > 0 && t.large_seconds > 0 && std::isfinite(t.large_seconds),
        "times %g %g", t.small_seconds, t.large_seconds);
  const double mine[2] = {t.small_seconds, t.large_seconds};
  double lo[2] = {0, 0};
  c.allreduce(mine, lo, 2, ElemType::Float64, ReduceKind::Min);
  CHECK(lo[0] == mine[0] && lo[1] == mine[1], "ranks got different times");
  CHECK(throws_with([&] { time_ring_exchanges(c, 1, 3, 2); }, "probe_bytes must be >= 2"),
        "probe_bytes 1 accepted");
  CHECK(throws_with([&] { time_ring_exchanges(c, 64, 0, 2); }, "repeats >= 1"), "repeats 0");
  CHECK(throws_with([&] { time_ring_exchanges(c, 64, 3, 0); }, "small_exchanges >= 1"),
        "small_exchanges 0");
}

int run_rank(const Listener& listener, int rank, int size, const std::vector<std::string>& addrs) {
  g_rank = rank;
  try {
    auto comm = TcpComm::connect(listener, rank, size, addrs, 0x5eed, std::chrono::seconds(60));
    CHECK(comm->rank() == rank && comm->size() == size, "rank/size");
    check_p2p(*comm);
    check_collectives(*comm);
    check_duplicate(*comm);
    check_link_probe(*comm);
    // A peer that goes away fails a receive from it, naming it (last: the mesh is broken after).
    if (size >= 2) {
      comm->barrier();
      if (rank == size - 1) return g_failures == 0 ? 0 : 1;  // exits: its sockets close
      if (rank == 0) {
        uint8_t b = 0;
        std::string what;
        CHECK(throws_with([&] { comm->recv(&b, 1, size - 1, 23); }, "rank " + std::to_string(size - 1), &what),
              "a closed peer: %s", what.c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: exception: %s\n", rank, e.what());
    return 2;
  }
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

// Backoff (backoff.h): the Sleep policy sleeps only after its spins and yields, and never before
// the end of a spinning stretch; Spin never sleeps. Counted through the idle callback, which
// stands in for each sleep (no timing involved).
int check_backoff() {
  using zccl::Backoff;
  using zccl::WaitPolicy;
  const auto sleeps_in = [](Backoff b) {
    int sleeps = 0;
    for (int i = 0; i < 1000; ++i) b.pause([&](std::chrono::microseconds) { ++sleeps; });
    return sleeps;
  };
  const auto now = Backoff::Clock::now();
  const int plain = sleeps_in(Backoff(200, WaitPolicy::Sleep));
  CHECK(plain > 0 && plain < 1000, "Sleep policy: %d sleeps in 1000 pauses", plain);
  CHECK(sleeps_in(Backoff(200, WaitPolicy::Spin)) == 0, "Spin policy slept");
  const int stretch = sleeps_in(Backoff(200, WaitPolicy::Sleep, now + std::chrono::hours(1)));
  CHECK(stretch == 0, "slept %d times within the spinning stretch", stretch);
  const int ended = sleeps_in(Backoff(200, WaitPolicy::Sleep, now - std::chrono::seconds(1)));
  CHECK(ended == plain, "after the stretch: %d sleeps, %d without one", ended, plain);
  return g_failures;
}

// A one-rank communicator whose transfers finish after a set number of polls. Its idle() counts
// the sleeps a wait takes instead of sleeping, and its transfers of at least `polled_from` bytes
// "take" an hour of polling (Comm::polled_transfer_time), so the checks below need no timing.
class PolledComm final : public P2pExactComm {
 public:
  PolledComm(int polls, size_t polled_from) : polls_(polls), polled_from_(polled_from) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int tag_ub() const override { return 32767; }
  std::unique_ptr<Comm> duplicate() const override { return nullptr; }
  std::unique_ptr<Comm> subgroup(const std::vector<int>&) const override { return nullptr; }
  void idle(std::chrono::microseconds) const override { ++sleeps; }
  std::chrono::microseconds polled_transfer_time(size_t bytes) const override {
    asked = bytes;
    return bytes >= polled_from_ ? std::chrono::hours(1) : std::chrono::microseconds(0);
  }
  mutable int sleeps = 0;
  mutable size_t asked = 0;

 protected:
  struct Countdown : RequestState {
    explicit Countdown(int n) : left(n) {}
    bool active() const override { return left > 0; }
    int left;
  };
  Request post_send(const void*, size_t, int, int) const override { return start(); }
  Request post_recv(void*, size_t, int, int) const override { return start(); }
  bool poll(Request& req) const override {
    auto* c = static_cast<Countdown*>(req.state());
    return c == nullptr || --c->left <= 0;
  }
  std::string describe(const Request&) const override { return "a countdown"; }

 private:
  Request start() const { return Request(std::make_unique<Countdown>(polls_)); }
  int polls_;
  size_t polled_from_;
};

// Comm::wait and wait_all poll without sleeping for the transport's time for what they wait for
// (the largest of wait_all's requests), and sleep as the policy says without it; requests know
// what they move (a send's bytes, a receive's capacity).
int check_polled_waits() {
  const size_t big = size_t{1} << 20, small = 64;
  std::vector<uint8_t> buf(big);
  PolledComm comm(/*polls=*/5000, /*polled_from=*/big);
  Request send = comm.isend(buf.data(), big, 0, 1);
  Request recv = comm.irecv(buf.data(), small, 0, 1);
  CHECK(send.bytes == big && recv.bytes == small, "request bytes %zu / %zu", send.bytes,
        recv.bytes);
  comm.wait(send);
  CHECK(comm.asked == big && comm.sleeps == 0, "a large send asked for %zu and slept %d times",
        comm.asked, comm.sleeps);
  comm.wait(recv);
  CHECK(comm.asked == small && comm.sleeps > 0, "a small receive asked for %zu, slept %d times",
        comm.asked, comm.sleeps);
  comm.sleeps = 0;
  std::vector<Request> both;
  both.push_back(comm.irecv(buf.data(), small, 0, 2));
  both.push_back(comm.isend(buf.data(), big, 0, 2));
  comm.wait_all(both);
  CHECK(comm.asked == big && comm.sleeps == 0, "wait_all asked for %zu and slept %d times",
        comm.asked, comm.sleeps);
  comm.set_wait_policy(WaitPolicy::Spin);
  Request spun = comm.irecv(buf.data(), small, 0, 3);
  comm.wait(spun);
  CHECK(comm.sleeps == 0, "the Spin policy slept %d times", comm.sleeps);
  return g_failures;
}

int main(int argc, char** argv) {
  const int p = argc > 1 ? std::atoi(argv[1]) : 3;
  if (p < 1) return 2;
  if (check_backoff() != 0) return 1;
  if (check_polled_waits() != 0) return 1;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::vector<std::string> addrs;
  for (int r = 0; r < p; ++r) {
    listeners.push_back(std::make_unique<Listener>("127.0.0.1"));
    addrs.push_back(listeners.back()->address());
  }
  // A stray connection (another session's hello) to rank 0 is refused, not taken for a peer.
  std::unique_ptr<zccl::transport::tcp::Fd> stray;
  if (p >= 2) {
    const std::string a = addrs[0];
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(a.substr(a.rfind(':') + 1))));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    stray = std::make_unique<zccl::transport::tcp::Fd>(socket(AF_INET, SOCK_STREAM, 0));
    if (connect(stray->get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return 3;
    const uint32_t hello[6] = {0x5443435a, 1, 1, static_cast<uint32_t>(p), 0xbad, 0};
    if (write(stray->get(), hello, sizeof(hello)) != sizeof(hello)) return 3;
  }
  std::vector<pid_t> kids;
  for (int r = 0; r < p; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int rc = run_rank(*listeners[r], r, p, addrs);
      std::fflush(stderr);
      _exit(rc);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed == 0) std::printf("TCP TRANSPORT OK (%d ranks)\n", p);
  return failed == 0 ? 0 : 1;
}
