// Tests of the data-movement collectives of csrc/collectives (allgather, allgatherv, broadcast,
// scatter, gather, alltoallv) under mpirun at any number of ranks, including 1.
//
// Usage: mpi_datamove_test [--large]
//   --large  adds ~1e6+3-value cases (run at a couple of rank counts only: the machine is small).
//
// Every output value is checked against the input it came from: |x - x'| <= eb computed in double
// for finite values on the compressed paths, bit-exact for eb == 0, for non-finite values (NaN,
// +/-Inf), for own blocks / the root's buffer, and for the uncompressed paths (Algorithm::Mpi,
// payloads under min_compress_bytes, count 0). Data differs per rank and per destination and
// contains NaN, Inf, -0, denormals and huge values. Receive buffers carry guard values after the
// end that must stay untouched. Counts 0, 1, p-1, p+1, 257 (prime), 5003 (prime, several chunks),
// every root, float32 and float64, bounds 0 / 1e-4 / 1e-2, in-place variants, a subgroup with an
// odd number of ranks, Stats, size mismatches across ranks (std::runtime_error "size mismatch
// across ranks", no hang, the communicator usable afterwards) and invalid arguments.
// The pipelined broadcast/scatter also run with tiny forced segments and frames (many segments
// per call, segment sizes that are not multiples of the chunk length, a partial last segment,
// segments in many frames, one and two codec threads), with size mismatches across segmented
// calls, and
// against a hand-made root that sends frames dividing a segment exactly (must decode), and
// corrupt, short and wrong-count segments and a malformed plan (the receiver raises, never
// crashes, and drains every segment).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "../../csrc/collectives/collectives.h"
#include "../../csrc/transport/mpi_comm.h"
#include "mpi_test_util.h"

namespace coll = zccl::coll;
namespace fz = zccl::fz;
using coll::Algorithm;
using coll::Comm;
using coll::Config;
using coll::DType;
using coll::Stats;

namespace {

bool g_large = false;

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::Float32 : DType::Float64;
}

// Value i of the block that `owner` sends to `dest` (salt separates test cases).
template <class T>
T value(int owner, int dest, size_t i, int salt) {
  switch (i % 97) {
    case 13:
      return std::numeric_limits<T>::quiet_NaN();
    case 29:
      return std::numeric_limits<T>::infinity();
    case 31:
      return -std::numeric_limits<T>::infinity();
    case 37:
      return static_cast<T>(-0.0);
    case 41:
      return std::numeric_limits<T>::denorm_min() * 3;
    case 43:
      return static_cast<T>(sizeof(T) == 4 ? 3e37 : 1e300) * (owner % 2 ? -1 : 1);
    default:
      break;
  }
  const double noise = static_cast<double>((i * 2654435761u + owner * 40503u) % 1000) / 1000.0;
  return static_cast<T>(100.0 * std::sin(0.001 * static_cast<double>(i) + owner) +
                        owner * 10.0 + dest * 0.5 + salt * 0.25 + 1e-3 * noise);
}

template <class T>
std::vector<T> block(int owner, int dest, size_t n, int salt) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value<T>(owner, dest, i, salt);
  return v;
}

constexpr size_t kGuard = 4;
template <class T>
T guard_value() {
  return static_cast<T>(-12345.75);
}

template <class T>
std::vector<T> with_guard(size_t n) {
  return std::vector<T>(n + kGuard, guard_value<T>());
}

template <class T>
void check_guard(const std::vector<T>& v, size_t n, const std::string& what) {
  const T g = guard_value<T>();
  for (size_t i = n; i < v.size(); ++i) {
    CHECK_MSG(std::memcmp(&v[i], &g, sizeof(T)) == 0, what + ": guard overwritten");
  }
}

// got[i] vs want[i]: bit-exact when `exact` or for non-finite values, else |x - x'| <= eb.
template <class T>
void check_values(const T* got, const T* want, size_t n, double eb, bool exact,
                  const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    if (exact || !std::isfinite(want[i])) {
      if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
        CHECK_MSG(false, what + ": value " + std::to_string(i) + " is " + std::to_string(got[i]) +
                             ", expected exactly " + std::to_string(want[i]));
      }
    } else {
      const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
      if (!(err <= eb)) {
        CHECK_MSG(false, what + ": value " + std::to_string(i) + " is " + std::to_string(got[i]) +
                             ", expected " + std::to_string(want[i]) + " within " +
                             std::to_string(eb) + " (error " + std::to_string(err) + ")");
      }
    }
  }
}

struct Case {
  Config cfg;
  bool exact_all = false;  // uncompressed path expected (or eb == 0): everything bit-exact
  std::string name;
};

// The owner's own block is exact only with cfg.owner_exact (or on an exact path); otherwise
// it holds the decoded values every other rank holds.
bool owner_keeps_exact(const Case& c) { return c.exact_all || c.cfg.owner_exact; }

// Every rank's `v` (n values) must be bit-identical to rank 0's (replica collectives).
template <class T>
void check_identical(const Comm& comm, const T* v, size_t n, const std::string& what) {
  const int p = comm.size();
  std::vector<T> all(n * static_cast<size_t>(p));
  const size_t bytes = n * sizeof(T);
  std::vector<unsigned char> mine(bytes);
  if (bytes) std::memcpy(mine.data(), v, bytes);
  comm.allgather(mine.data(), all.data(), bytes, zccl::transport::ElemType::UInt8);
  for (int q = 1; q < p; ++q) {
    CHECK_MSG(bytes == 0 || std::memcmp(all.data(), all.data() + q * n, bytes) == 0,
              what + ": rank " + std::to_string(q) + " holds other bits than rank 0");
  }
}

std::string desc(const char* op, const Case& c, size_t n, int salt) {
  return std::string(op) + " [" + c.name + " n=" + std::to_string(n) +
         " salt=" + std::to_string(salt) + "]";
}

void check_stats(const Stats& st, const Case& c, bool compressed_path, Algorithm compressed_alg,
                 const std::string& what) {
  if (compressed_path) {
    const Algorithm want =
        c.cfg.algorithm == Algorithm::CprP2P ? Algorithm::CprP2P : compressed_alg;
    CHECK_MSG(st.algorithm == want, what);
  } else {
    CHECK_MSG(st.algorithm == Algorithm::Mpi, what);
    CHECK_MSG(st.bytes_compressed == 0, what);
  }
  CHECK_MSG(st.total_seconds >= 0 && st.compress_seconds >= 0 && st.decompress_seconds >= 0,
            what);
}

// Whether a call of `bytes` payload on p ranks takes a compressed path with this config.
bool compressed(const Case& c, int p, size_t n, size_t bytes) {
  return !(c.cfg.algorithm == Algorithm::Mpi || p == 1 || n == 0 ||
           bytes < c.cfg.min_compress_bytes);
}

template <class T>
void test_allgather(Comm& comm, const Case& c, size_t n, int salt) {
  const int p = comm.size(), r = comm.rank();
  const size_t P = static_cast<size_t>(p);
  const double eb = c.cfg.error_bound;
  const auto mine = block<T>(r, -1, n, salt);
  // Out of place.
  auto out = with_guard<T>(P * n);
  Stats st;
  coll::allgather(comm, mine.data(), out.data(), n, dtype_of<T>(), c.cfg, &st);
  const std::string what = desc("allgather", c, n, salt);
  for (int q = 0; q < p; ++q) {
    const auto want = block<T>(q, -1, n, salt);
    check_values(out.data() + q * n, want.data(), n, eb, q == r ? owner_keeps_exact(c) : c.exact_all,
                 what + " block " + std::to_string(q));
  }
  check_guard(out, P * n, what);
  if (!c.cfg.owner_exact) check_identical(comm, out.data(), P * n, what);
  const bool cp = compressed(c, p, n, n * sizeof(T));
  check_stats(st, c, cp, Algorithm::Ring, what);
  CHECK(st.bytes_in == n * sizeof(T));
  if (cp) CHECK(st.bytes_compressed == n * sizeof(T));
  // In place: send is recv's own slot.
  auto inplace = with_guard<T>(P * n);
  std::copy(mine.begin(), mine.end(), inplace.begin() + r * n);
  coll::allgather(comm, inplace.data() + r * n, inplace.data(), n, dtype_of<T>(), c.cfg);
  for (int q = 0; q < p; ++q) {
    const auto want = block<T>(q, -1, n, salt);
    check_values(inplace.data() + q * n, want.data(), n, eb,
                 q == r ? owner_keeps_exact(c) : c.exact_all,
                 what + " in place, block " + std::to_string(q));
  }
  check_guard(inplace, P * n, what + " in place");
  if (!c.cfg.owner_exact) check_identical(comm, inplace.data(), P * n, what + " in place");
}

template <class T>
void test_allgatherv(Comm& comm, const Case& c, size_t n, int salt) {
  const int p = comm.size(), r = comm.rank();
  const double eb = c.cfg.error_bound;
  std::vector<size_t> counts(p);
  for (int q = 0; q < p; ++q) counts[q] = (q % 3 == 1) ? 0 : n + static_cast<size_t>(q);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const auto mine = block<T>(r, -2, counts[r], salt);
  auto out = with_guard<T>(total);
  Stats st;
  coll::allgatherv(comm, mine.data(), counts[r], out.data(), counts, dtype_of<T>(), c.cfg, &st);
  const std::string what = desc("allgatherv", c, n, salt);
  size_t off = 0;
  for (int q = 0; q < p; ++q) {
    const auto want = block<T>(q, -2, counts[q], salt);
    check_values(out.data() + off, want.data(), counts[q], eb,
                 q == r ? owner_keeps_exact(c) : c.exact_all, what + " block " + std::to_string(q));
    off += counts[q];
  }
  check_guard(out, total, what);
  if (!c.cfg.owner_exact) check_identical(comm, out.data(), total, what);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  check_stats(st, c, compressed(c, p, largest, largest * sizeof(T)), Algorithm::Ring, what);
}

template <class T>
void test_broadcast(Comm& comm, const Case& c, size_t n, int salt) {
  const int p = comm.size(), r = comm.rank();
  const double eb = c.cfg.error_bound;
  for (int root = 0; root < p; ++root) {
    const auto src = block<T>(root, -3, n, salt + root);
    auto buf = with_guard<T>(n);
    if (r == root) std::copy(src.begin(), src.end(), buf.begin());
    Stats st;
    coll::broadcast(comm, buf.data(), n, dtype_of<T>(), root, c.cfg, &st);
    const std::string what = desc("broadcast", c, n, salt) + " root " + std::to_string(root);
    check_values(buf.data(), src.data(), n, eb, r == root ? owner_keeps_exact(c) : c.exact_all,
                 what);
    check_guard(buf, n, what);
    if (!c.cfg.owner_exact) check_identical(comm, buf.data(), n, what);
    const bool cp = compressed(c, p, n, n * sizeof(T));
    check_stats(st, c, cp, Algorithm::Auto, what);
    if (r != root) CHECK(st.bytes_compressed == 0);
    if (r == root && cp) CHECK_MSG(st.bytes_compressed == n * sizeof(T), what);
    if ((r != root || !c.cfg.owner_exact) && cp) CHECK_MSG(st.decompress_seconds > 0, what);
  }
}

template <class T>
void test_scatter(Comm& comm, const Case& c, size_t n, int salt) {
  const int p = comm.size(), r = comm.rank();
  const size_t P = static_cast<size_t>(p);
  const double eb = c.cfg.error_bound;
  for (int root = 0; root < p; ++root) {
    std::vector<T> src;
    if (r == root) {
      src.resize(P * n);
      for (int q = 0; q < p; ++q) {
        const auto b = block<T>(root, q, n, salt);
        std::copy(b.begin(), b.end(), src.begin() + q * n);
      }
    }
    auto out = with_guard<T>(n);
    Stats st;
    coll::scatter(comm, r == root ? src.data() : nullptr, out.data(), n, dtype_of<T>(), root,
                  c.cfg, &st);
    const std::string what = desc("scatter", c, n, salt) + " root " + std::to_string(root);
    const auto want = block<T>(root, r, n, salt);
    check_values(out.data(), want.data(), n, eb, c.exact_all || r == root, what);
    check_guard(out, n, what);
    const bool cp = compressed(c, p, n, n * sizeof(T));
    check_stats(st, c, cp, Algorithm::Auto, what);
    if (r == root && cp) {
      CHECK_MSG(st.bytes_compressed == (P - 1) * n * sizeof(T), what);
      CHECK_MSG(st.bytes_sent > 0, what);
    }
    // In place at the root: recv is the root's own slot of send.
    std::vector<T> src2 = src;
    std::vector<T> out2 = with_guard<T>(n);
    T* recv = r == root ? src2.data() + r * n : out2.data();
    coll::scatter(comm, r == root ? src2.data() : nullptr, recv, n, dtype_of<T>(), root, c.cfg);
    check_values(recv, want.data(), n, eb, c.exact_all || r == root, what + " in place");
    if (r != root) check_guard(out2, n, what + " in place");
    // Blocks anywhere in memory (the list overload): each block in its own vector.
    std::vector<std::vector<T>> parts;
    std::vector<const void*> blocks;
    if (r == root) {
      for (int q = p - 1; q >= 0; --q) parts.push_back(block<T>(root, q, n, salt));
      for (int q = 0; q < p; ++q) blocks.push_back(parts[static_cast<size_t>(p - 1 - q)].data());
    }
    auto out3 = with_guard<T>(n);
    Stats st3;
    coll::scatter(comm, blocks, out3.data(), n, dtype_of<T>(), root, c.cfg, &st3);
    check_values(out3.data(), want.data(), n, eb, c.exact_all || r == root, what + " blocks");
    check_guard(out3, n, what + " blocks");
    check_stats(st3, c, cp, Algorithm::Auto, what + " blocks");
  }
}

template <class T>
void test_gather(Comm& comm, const Case& c, size_t n, int salt) {
  const int p = comm.size(), r = comm.rank();
  const size_t P = static_cast<size_t>(p);
  const double eb = c.cfg.error_bound;
  const auto mine = block<T>(r, -4, n, salt);
  for (int root = 0; root < p; ++root) {
    auto out = with_guard<T>(r == root ? P * n : 0);
    Stats st;
    coll::gather(comm, mine.data(), r == root ? out.data() : nullptr, n, dtype_of<T>(), root,
                 c.cfg, &st);
    const std::string what = desc("gather", c, n, salt) + " root " + std::to_string(root);
    if (r == root) {
      for (int q = 0; q < p; ++q) {
        const auto want = block<T>(q, -4, n, salt);
        check_values(out.data() + q * n, want.data(), n, eb, c.exact_all || q == root,
                     what + " block " + std::to_string(q));
      }
      check_guard(out, P * n, what);
    }
    check_stats(st, c, compressed(c, p, n, n * sizeof(T)), Algorithm::Auto, what);
    // In place at the root: send is the root's own slot of recv.
    auto buf = with_guard<T>(P * n);
    std::copy(mine.begin(), mine.end(), buf.begin() + r * n);
    coll::gather(comm, buf.data() + r * n, r == root ? buf.data() : nullptr, n, dtype_of<T>(),
                 root, c.cfg);
    if (r == root) {
      for (int q = 0; q < p; ++q) {
        const auto want = block<T>(q, -4, n, salt);
        check_values(buf.data() + q * n, want.data(), n, eb, c.exact_all || q == root,
                     what + " in place, block " + std::to_string(q));
      }
      check_guard(buf, P * n, what + " in place");
    }
  }
}

// Values rank `src` sends to rank `dst` in the alltoallv test (some blocks empty).
size_t a2a_count(int src, int dst, size_t n) {
  if ((src + 2 * dst) % 5 == 3) return 0;
  return n + static_cast<size_t>((src * 7 + dst * 3) % 4);
}

template <class T>
void test_alltoallv(Comm& comm, const Case& c, size_t n, int salt) {
  const int p = comm.size(), r = comm.rank();
  const double eb = c.cfg.error_bound;
  std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
  size_t so = 0, ro = 0;
  // Blocks in reverse order with a gap of 3 values between them.
  for (int q = p - 1; q >= 0; --q) {
    sc[q] = a2a_count(r, q, n);
    sd[q] = so;
    so += sc[q] + 3;
    rc[q] = a2a_count(q, r, n);
    rd[q] = ro;
    ro += rc[q] + 3;
  }
  std::vector<T> send(so, guard_value<T>());
  for (int q = 0; q < p; ++q) {
    const auto b = block<T>(r, q, sc[q], salt);
    std::copy(b.begin(), b.end(), send.begin() + sd[q]);
  }
  auto out = with_guard<T>(ro);
  Stats st;
  coll::alltoallv(comm, send.data(), sc, sd, out.data(), rc, rd, dtype_of<T>(), c.cfg, &st);
  const std::string what = desc("alltoallv", c, n, salt);
  for (int q = 0; q < p; ++q) {
    const auto want = block<T>(q, r, rc[q], salt);
    check_values(out.data() + rd[q], want.data(), rc[q], eb, c.exact_all || q == r,
                 what + " block from " + std::to_string(q));
    for (size_t g = 0; g < 3; ++g) {
      CHECK_MSG(out[rd[q] + rc[q] + g] == guard_value<T>(), what + ": gap overwritten");
    }
  }
  check_guard(out, ro, what);
  const bool cp = !(c.cfg.algorithm == Algorithm::Mpi || p == 1);
  check_stats(st, c, cp, Algorithm::Auto, what);
}

template <class T>
void run_all(Comm& comm, const Case& c, size_t n, int salt) {
  test_allgather<T>(comm, c, n, salt);
  test_allgatherv<T>(comm, c, n, salt + 1);
  test_broadcast<T>(comm, c, n, salt + 2);
  test_scatter<T>(comm, c, n, salt + 3);
  test_gather<T>(comm, c, n, salt + 4);
  test_alltoallv<T>(comm, c, n, salt + 5);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (double eb : {0.0, 1e-4, 1e-2}) {
    Case c;
    c.cfg.error_bound = eb;
    c.cfg.threads = 1;
    c.exact_all = eb == 0.0;
    c.name = "zccl eb=" + std::to_string(eb);
    out.push_back(c);
  }
  {
    Case c;  // small chunks: several chunks per block even for small counts
    c.cfg.error_bound = 1e-3;
    c.cfg.threads = 2;
    c.cfg.chunk_len = 64;
    c.name = "zccl eb=1e-3 chunk=64";
    out.push_back(c);
  }
  {
    Case c;  // the uncompressed MPI baseline: bit-exact
    c.cfg.error_bound = 1e-2;
    c.cfg.algorithm = Algorithm::Mpi;
    c.exact_all = true;
    c.name = "mpi";
    out.push_back(c);
  }
  {
    Case c;  // every payload under the threshold: uncompressed, bit-exact
    c.cfg.error_bound = 1e-2;
    c.cfg.min_compress_bytes = size_t{1} << 40;
    c.exact_all = true;
    c.name = "below threshold";
    out.push_back(c);
  }
  {
    Case c;  // owners keep their exact values (the others' within the bound)
    c.cfg.error_bound = 1e-2;
    c.cfg.threads = 1;
    c.cfg.owner_exact = true;
    c.name = "zccl eb=1e-2 owner_exact";
    out.push_back(c);
  }
  {
    Case c;  // CprP2P is the same compress-once path for data movement
    c.cfg.error_bound = 1e-4;
    c.cfg.algorithm = Algorithm::CprP2P;
    c.cfg.threads = 1;
    c.name = "cprp2p";
    out.push_back(c);
  }
  return out;
}

void test_matrix(Comm& comm) {
  const int p = comm.size();
  const std::vector<size_t> counts = {0, 1, static_cast<size_t>(p - 1), static_cast<size_t>(p + 1),
                                      257, 5003};
  int salt = 0;
  for (const Case& c : cases()) {
    for (size_t n : counts) {
      if (c.name == "cprp2p" && n != 257) continue;
      if (c.cfg.chunk_len == 64 && n < 257) continue;
      run_all<float>(comm, c, n, salt += 10);
      run_all<double>(comm, c, n, salt += 10);
    }
  }
  // CprP2P reports itself.
  Case c = cases().back();
  if (p > 1) {
    std::vector<float> x(100, 1.0f), y(100 * p);
    Stats st;
    coll::allgather(comm, x.data(), y.data(), 100, DType::Float32, c.cfg, &st);
    CHECK(st.algorithm == Algorithm::CprP2P);
  }
}

void test_large(Comm& comm) {
  const int p = comm.size(), r = comm.rank();
  const size_t n = 1000003;
  Case lossy;
  lossy.cfg.error_bound = 1e-2;
  lossy.cfg.threads = 1;
  lossy.name = "large eb=1e-2";
  Case lossless;
  lossless.cfg.threads = 1;
  lossless.exact_all = true;
  lossless.name = "large lossless";
  Case tight;
  tight.cfg.error_bound = 1e-4;
  tight.cfg.threads = 1;
  tight.name = "large eb=1e-4";
  // allgather (float32, lossy): the stream must be much smaller than the data.
  {
    const auto mine = block<float>(r, -1, n, 1);
    auto out = with_guard<float>(static_cast<size_t>(p) * n);
    Stats st;
    coll::allgather(comm, mine.data(), out.data(), n, DType::Float32, lossy.cfg, &st);
    for (int q = 0; q < p; ++q) {
      const auto want = block<float>(q, -1, n, 1);
      check_values(out.data() + q * n, want.data(), n, 1e-2, false, "large allgather");
    }
    check_guard(out, static_cast<size_t>(p) * n, "large allgather");
    check_identical(comm, out.data(), static_cast<size_t>(p) * n, "large allgather");
    if (p > 1) {
      CHECK_MSG(st.bytes_sent * 2 < static_cast<uint64_t>(p - 1) * n * sizeof(float),
                "compression ratio below 2: " + std::to_string(st.bytes_sent));
    }
  }
  // broadcast (float64 lossless, last root), scatter/gather (float64, 1e-4, root 0).
  {
    const int root = p - 1;
    const auto src = block<double>(root, -3, n, 2);
    auto buf = with_guard<double>(n);
    if (r == root) std::copy(src.begin(), src.end(), buf.begin());
    coll::broadcast(comm, buf.data(), n, DType::Float64, root, lossless.cfg);
    check_values(buf.data(), src.data(), n, 0.0, true, "large broadcast");
    check_guard(buf, n, "large broadcast");
  }
  const size_t m = n / static_cast<size_t>(p) + 1;
  test_scatter<double>(comm, tight, m, 3);
  test_gather<float>(comm, tight, m, 4);
  test_alltoallv<float>(comm, lossy, m, 5);
}

// Broadcast and scatter with forced small segments: many segments even for small counts
// (chain of p ranks for broadcast, p-1 series from the root for scatter), every root.
void test_segmented(Comm& comm) {
  const int p = comm.size();
  const std::vector<size_t> counts = {1, static_cast<size_t>(p + 1), 257, 5003};
  int salt = 50000;
  struct Variant {
    size_t segment_bytes;
    size_t frame_bytes;  // 0: the default (one frame per segment here)
    uint32_t chunk_len;
    int threads;
    double eb;
  };
  // 37 values (float32; 18 float64): neither a multiple of the chunk nor of 32; 1000 bytes in
  // frames of 97 bytes (lossless: ~11 frames per segment); 640 values of float64 = 10 chunks of
  // 64 in frames of 64 bytes; the default chunk with OpenMP codec calls.
  const Variant variants[] = {{4 * 37, 0, 64, 1, 1e-3},
                              {1000, 97, 64, 1, 0.0},
                              {8 * 640, 64, 64, 1, 1e-4},
                              {4096 * 4, 0, fz::kDefaultChunkLen, 2, 1e-2}};
  for (const Variant& v : variants) {
    Case c;
    c.cfg.error_bound = v.eb;
    c.cfg.threads = v.threads;
    c.cfg.chunk_len = v.chunk_len;
    c.cfg.segment_bytes = v.segment_bytes;
    c.cfg.frame_bytes = v.frame_bytes;
    c.exact_all = v.eb == 0.0;
    c.name = "segmented " + std::to_string(v.segment_bytes) + "B frame " +
             std::to_string(v.frame_bytes) + "B chunk " +
             std::to_string(v.chunk_len) + " threads " + std::to_string(v.threads) +
             " eb=" + std::to_string(v.eb);
    for (size_t n : counts) {
      if (v.chunk_len == fz::kDefaultChunkLen && n < 5003) continue;
      test_broadcast<float>(comm, c, n, salt += 10);
      test_broadcast<double>(comm, c, n, salt += 10);
      test_scatter<float>(comm, c, n, salt += 10);
      test_scatter<double>(comm, c, n, salt += 10);
    }
  }
  // Automatic plans: above 4 MiB they always have several segments (chain, ~1 MiB each).
  Case a;
  a.cfg.error_bound = 1e-3;
  a.cfg.threads = 1;
  a.name = "automatic segments";
  test_broadcast<float>(comm, a, (size_t{1} << 20) + 4099, salt += 10);
  comm.barrier();
}

// A fake root (rank 0 of a two-rank subgroup) speaks the pipelined protocol by hand to rank 1,
// which runs a real broadcast or scatter. Protocol (see datamove_common.h, broadcast_pipelined.cpp
// and scatter_pipelined.cpp): the plan (count, values per segment, capacity, frame bytes) on
// tag base+0; segment k on base+2+k%8 (broadcast) or base+1+k%8 (scatter) as frames of the
// plan's frame size, all full but the last (possibly empty). A clean run whose frames divide a
// segment exactly (empty last frame) must decode; every fault must raise on rank 1 (never
// crash), which still drains all segments.
void test_corrupt_segments(Comm& comm) {
  if (comm.size() < 2) return;
  auto sub = comm.subgroup({0, 1});
  if (sub) {
    const size_t n = 1000, seg = 100, faulty = 3;  // 10 segments, segment 3 is bad
    Config cfg;
    cfg.error_bound = 1e-3;
    cfg.threads = 1;
    cfg.chunk_len = 64;
    cfg.segment_bytes = seg * sizeof(float);
    enum Fault { kNone, kFlip, kShort, kCount, kPlan };
    const char* expected[] = {"", "checksum", "corrupt", "size mismatch across ranks",
                              "malformed"};
    const auto x = block<float>(0, 1, n + 1, 9);
    for (bool scatter : {false, true}) {
      for (Fault f : {kNone, kFlip, kShort, kCount, kPlan}) {
        const std::string what = std::string(scatter ? "scatter" : "broadcast") + " fault " +
                                 std::to_string(static_cast<int>(f));
        if (sub->rank() == 0) {
          const int tag = sub->next_tag_base();  // the block the receiver's call takes
          std::vector<std::vector<uint8_t>> streams;
          fz::CompressParams params;
          params.error_bound = cfg.error_bound;
          params.chunk_len = 64;
          for (size_t k = 0; k < n / seg; ++k) {
            const size_t m = seg + (f == kCount && k == faulty ? 1 : 0);
            std::vector<uint8_t> stream(fz::max_compressed_size(DType::Float32, m, 64));
            size_t len = fz::compress(x.data() + k * seg, DType::Float32, m, params,
                                      stream.data(), stream.size());
            if (k == faulty && f == kFlip) stream[len - 5] ^= 0x40;
            if (k == faulty && f == kShort) len -= 7;
            stream.resize(len);
            streams.push_back(std::move(stream));
          }
          // Frames: a quarter of segment 0 rounded so that they divide it exactly (its last
          // frame is empty); the other segments end with a partial frame or an empty one.
          size_t frame = streams[0].size() / 4;
          while (streams[0].size() % frame != 0) --frame;
          uint64_t plan[4] = {n, seg, fz::max_compressed_size(DType::Float32, seg, 64), frame};
          if (f == kPlan) plan[1] = 0;
          sub->send(plan, sizeof(plan), 1, tag);
          for (size_t k = 0; f != kPlan && k < streams.size(); ++k) {
            const int t = tag + (scatter ? 1 : 2) + static_cast<int>(k % 8);
            for (size_t off = 0;;) {
              const size_t len = std::min(frame, streams[k].size() - off);
              sub->send(streams[k].data() + off, len, 1, t);
              off += len;
              if (len < frame) break;
            }
          }
        } else {
          std::vector<float> out(n + kGuard, guard_value<float>());
          std::string msg;
          try {
            if (scatter) {
              coll::scatter(*sub, nullptr, out.data(), n, DType::Float32, 0, cfg);
            } else {
              coll::broadcast(*sub, out.data(), n, DType::Float32, 0, cfg);
            }
          } catch (const std::exception& e) {
            msg = e.what();
            if (msg.empty()) msg = "(empty message)";
          }
          if (f == kNone) {
            CHECK_MSG(msg.empty(), what + ": " + msg);
            check_values(out.data(), x.data(), n, cfg.error_bound, false, what);
            check_guard(out, n, what);
          } else {
            CHECK_MSG(!msg.empty(), what + ": no error");
            CHECK_MSG(msg.find(expected[f]) != std::string::npos, what + ": " + msg);
          }
        }
        sub->barrier();  // the fake root's blocking sends all completed: everything was drained
      }
    }
    // The subgroup still works.
    Case c;
    c.cfg = cfg;
    c.name = "after faults";
    test_broadcast<float>(*sub, c, n, 77);
    test_scatter<float>(*sub, c, n, 78);
  }
  comm.barrier();
}

template <class Fn>
void expect_mismatch(Comm& comm, bool expect_throw, Fn fn, const std::string& what) {
  bool threw = false;
  try {
    fn();
  } catch (const std::runtime_error& e) {
    threw = true;
    CHECK_MSG(expect_throw, what + ": unexpected error: " + e.what());
    CHECK_MSG(std::string(e.what()).find("size mismatch across ranks") != std::string::npos,
              what + ": " + e.what());
  }
  CHECK_MSG(threw == expect_throw, what + ": expected a size mismatch error");
  comm.barrier();
  // The communicator still works afterwards.
  const int p = comm.size();
  std::vector<double> x(33, comm.rank() + 0.5), y(33 * static_cast<size_t>(p));
  Config cfg;
  cfg.error_bound = 1e-3;
  coll::allgather(comm, x.data(), y.data(), 33, DType::Float64, cfg);
  for (int q = 0; q < p; ++q) CHECK(std::fabs(y[q * 33] - (q + 0.5)) <= 1e-3);
}

void test_mismatch(Comm& comm) {
  const int p = comm.size(), r = comm.rank();
  if (p < 2) return;
  Config cfg;
  cfg.error_bound = 1e-3;
  cfg.threads = 1;
  const size_t n = 300;
  const DType f = DType::Float32;
  std::vector<float> a(n + 10, 1.0f), big((n + 10) * static_cast<size_t>(p), 0.0f);
  // allgather: the last rank contributes one value more: every rank reports it.
  expect_mismatch(comm, true, [&] {
    coll::allgather(comm, a.data(), big.data(), r == p - 1 ? n + 1 : n, f, cfg);
  }, "allgather");
  // allgatherv: rank 0 passes a different counts vector: every rank reports it.
  expect_mismatch(comm, true, [&] {
    std::vector<size_t> counts(p, n);
    if (r == 0) counts[p - 1] = n + 2;
    coll::allgatherv(comm, a.data(), n, big.data(), counts, f, cfg);
  }, "allgatherv");
  // broadcast: rank 1 expects one value more than the root sends: only rank 1 reports it.
  expect_mismatch(comm, r == 1, [&] {
    coll::broadcast(comm, a.data(), r == 1 ? n + 1 : n, f, 0, cfg);
  }, "broadcast");
  // scatter: rank 1 expects fewer values than the root scatters.
  expect_mismatch(comm, r == 1, [&] {
    coll::scatter(comm, big.data(), a.data(), r == 1 ? n - 5 : n, f, 0, cfg);
  }, "scatter");
  // The same with many segments: rank 1 follows the root's plan, relays, then reports.
  Config seg = cfg;
  seg.segment_bytes = 64 * sizeof(float);
  expect_mismatch(comm, r == 1, [&] {
    coll::broadcast(comm, a.data(), r == 1 ? n + 1 : n, f, 0, seg);
  }, "broadcast segmented");
  expect_mismatch(comm, r == 0, [&] {  // rank 0 is the chain's first relay here
    coll::broadcast(comm, a.data(), r == 0 ? n - 100 : n, f, p - 1, seg);
  }, "broadcast segmented, last root");
  expect_mismatch(comm, r == 1, [&] {
    coll::scatter(comm, big.data(), a.data(), r == 1 ? n - 5 : n, f, 0, seg);
  }, "scatter segmented");
  // gather: rank 1 sends more values than the root expects: the root reports it.
  expect_mismatch(comm, r == 0, [&] {
    coll::gather(comm, a.data(), big.data(), r == 1 ? n + 3 : n, f, 0, cfg);
  }, "gather");
  // alltoallv: rank 0 sends 10 more values to rank 1 than rank 1 expects (larger than its
  // receive), and rank 1 sends 7 fewer to rank 0 than rank 0 expects.
  for (bool raw : {false, true}) {
    Config c2 = cfg;
    if (raw) c2.min_compress_bytes = size_t{1} << 30;  // raw blocks: byte counts are compared
    expect_mismatch(comm, r <= 1, [&] {
      std::vector<size_t> sc(p, n), sd(p), rc(p, n), rd(p);
      for (int q = 0; q < p; ++q) {
        sd[q] = rd[q] = static_cast<size_t>(q) * (n + 10);
      }
      if (r == 0) sc[1] = n + 10;
      if (r == 1) sc[0] = n - 7;
      std::vector<float> out((n + 10) * static_cast<size_t>(p));
      coll::alltoallv(comm, big.data(), sc, sd, out.data(), rc, rd, f, c2);
    }, raw ? "alltoallv raw" : "alltoallv");
  }
}

void test_invalid(Comm& comm) {
  const int p = comm.size();
  Config cfg;
  cfg.error_bound = 1e-3;
  std::vector<float> a(64 * static_cast<size_t>(p) + 64), b(64 * static_cast<size_t>(p) + 64);
  const DType f = DType::Float32;
  CHECK_THROWS(coll::broadcast(comm, a.data(), 8, f, p, cfg), std::invalid_argument, "root");
  CHECK_THROWS(coll::broadcast(comm, a.data(), 8, f, -1, cfg), std::invalid_argument, "root");
  CHECK_THROWS(coll::scatter(comm, a.data(), b.data(), 8, f, p + 1, cfg), std::invalid_argument,
               "root");
  CHECK_THROWS(coll::gather(comm, a.data(), b.data(), 8, f, -3, cfg), std::invalid_argument,
               "root");
  CHECK_THROWS(coll::allgather(comm, nullptr, b.data(), 8, f, cfg), std::invalid_argument,
               "null");
  CHECK_THROWS(coll::allgatherv(comm, a.data(), 8, b.data(), std::vector<size_t>(p + 1, 8), f,
                                cfg),
               std::invalid_argument, "entries");
  CHECK_THROWS(coll::allgatherv(comm, a.data(), 9, b.data(), std::vector<size_t>(p, 8), f, cfg),
               std::invalid_argument, "differs");
  std::vector<size_t> ones(p, 1), zeros(p, 0), seq(p);
  std::iota(seq.begin(), seq.end(), size_t{0});
  CHECK_THROWS(coll::alltoallv(comm, a.data(), ones, seq, b.data(), ones,
                               std::vector<size_t>(p + 1, 0), f, cfg),
               std::invalid_argument, "entries");
  if (p > 1) {
    CHECK_THROWS(coll::alltoallv(comm, a.data(), ones, seq, b.data(), ones, zeros, f, cfg),
                 std::invalid_argument, "overlap");
  }
  std::vector<size_t> twos(p, 2), even(p);
  for (int q = 0; q < p; ++q) even[q] = 2 * static_cast<size_t>(q);
  CHECK_THROWS(coll::alltoallv(comm, a.data(), ones, seq, b.data(), twos, even, f, cfg),
               std::invalid_argument, "own block");
  std::vector<size_t> huge(p, std::numeric_limits<size_t>::max());
  CHECK_THROWS(coll::alltoallv(comm, a.data(), ones, huge, b.data(), ones, seq, f, cfg),
               std::invalid_argument, "out of range");
  Config bad = cfg;
  bad.error_bound = -1;
  CHECK_THROWS(coll::allgather(comm, a.data(), b.data(), 8, f, bad), std::invalid_argument,
               "zccl: allgather: error bound must be finite and >= 0");
  if (p == 1) {  // only the root checks its list (at p > 1 the others would wait for it)
    CHECK_THROWS(coll::scatter(comm, std::vector<const void*>(2, a.data()), b.data(), 8, f, 0,
                               cfg),
                 std::invalid_argument, "blocks");
  }
  bad = cfg;
  bad.chunk_len = 33;
  CHECK_THROWS(coll::broadcast(comm, a.data(), 8, f, 0, bad), std::invalid_argument,
               "zccl: broadcast: chunk_len must be a multiple of 32");
  bad = cfg;
  bad.error_bound = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS(coll::gather(comm, a.data(), b.data(), 8, f, 0, bad), std::invalid_argument,
               "zccl: gather: error bound must be finite and >= 0");
  // The same checks as the reductions' (toolkit/validate.h).
  bad = cfg;
  bad.threads = -1;
  CHECK_THROWS(coll::scatter(comm, a.data(), b.data(), 8, f, 0, bad), std::invalid_argument,
               "zccl: scatter: threads must be >= 0, got -1");
  bad = cfg;
  bad.algorithm = static_cast<coll::Algorithm>(42);
  CHECK_THROWS(coll::alltoallv(comm, a.data(), ones, seq, b.data(), ones, seq, f, bad),
               std::invalid_argument, "zccl: alltoallv: unknown algorithm code 42");
  comm.barrier();
}

// The collectives on a subgroup with an odd number of ranks, in a permuted order.
void test_subgroup(Comm& comm) {
  const int p = comm.size();
  std::vector<int> ranks;
  for (int q = p - 1; q >= 0; q -= 2) ranks.push_back(q);
  if (ranks.size() % 2 == 0) ranks.pop_back();  // odd size
  auto sub = comm.subgroup(ranks);
  if (sub) {
    Case c;
    c.cfg.error_bound = 1e-4;
    c.cfg.threads = 1;
    c.name = "subgroup";
    run_all<float>(*sub, c, 101, 7000);
    run_all<double>(*sub, c, static_cast<size_t>(sub->size()) + 1, 7100);
  }
  comm.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--large") g_large = true;
  }
  zccl::transport::ensure_initialized();
  {
    auto comm = zccl::transport::MpiComm::duplicate(MPI_COMM_WORLD);
    comm->set_timeout(std::chrono::milliseconds(90000));
    test_invalid(*comm);
    test_matrix(*comm);
    test_mismatch(*comm);
    test_segmented(*comm);
    test_corrupt_segments(*comm);
    test_subgroup(*comm);
    if (g_large) test_large(*comm);
    comm->barrier();
  }
  zccl::transport::finalize_if_owned();
  std::printf("mpi_datamove_test OK\n");
  return 0;
}
