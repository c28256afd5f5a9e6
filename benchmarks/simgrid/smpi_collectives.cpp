// SIMULATION driver: times zccl's collectives against uncompressed MPI under SimGrid SMPI.
//
// Built with smpicxx from the unmodified csrc/ sources (see run_smpi.py) and run with smpirun on
// a simulated platform (smpi_platform.py). Every rank is an SMPI actor inside one process; times
// are *simulated* (MPI_Wtime under SMPI). The CPU time of the code between two MPI calls (fZ-light
// compression, decompression, reductions) is measured for real by SMPI and injected into the
// simulation, so with the platform's host speed equal to smpi/host-speed one second of real CPU
// is one simulated second.
//
// Usage: smpi_collectives --bytes B [--iters K] [--warmup W] [--rel R]
//                         [--colls allreduce,broadcast,scatter,allgather,allreduce_mpi_path]
//                         [--mpi-path-budget BYTES] [--timeout-s S] [--label TEXT]
//                         [--impls zccl,mpi] [--skip-ring 0|1] [--wait spin|sleep]
//                         [--allreduce-algos ring,ring_int,recursive_doubling,halving_doubling]
//                         [--threads T] [--link-gbps G] [--link-latency-us L]
//   --colls  "allreduce" times zccl ring (float hop, then integer hop: zccl_ring_int), recursive
//            doubling, halving-doubling and auto, and MPI_Allreduce;
//            "allreduce_mpi_path" times zccl's Algorithm::Mpi path (its own MPI_Iallreduce call);
//            the default is the first four.
//   --allreduce-algos  which of zccl's allreduce algorithms "allreduce" times (default: all four;
//            auto is always recorded). Recursive doubling takes most of the wall time of a
//            16-host run and never wins at 64 MB, so experiments on the ring may leave it out.
//   --impls  which implementations to time: zccl's, the plain MPI collectives, or both (default;
//            an MPI-only run serves to time MPI under another smpi/coll-selector).
//   --skip-ring 1  leaves out zccl's ring allreduce and ring allgather (reported as skipped):
//            each call makes one MPI_Iallgather of 24 bytes per rank, which SMPI (like Open MPI's
//            libnbc by default) runs as p*(p-1) concurrent messages; at p = 256 simulating that
//            one tiny exchange takes ~9 minutes of wall time (8 s at p = 128).
//   --wait   how zccl's waits poll (transport/backoff.h): spin (default: the backend's choice
//            with one rank per host) or sleep (its choice on an oversubscribed host).
//   --link-gbps, --link-latency-us  zccl's Config::link_gbps / link_latency_us, the network
//            algorithm "auto" assumes (defaults 1 and 25, Config's, whatever the platform;
//            link_setting.py passes the platform's).
//   --threads  zccl's Config::threads (default 1). Above 1 the process must run with
//            OMP_THREAD_LIMIT=1 (checked): the algorithms then plan and schedule as for T threads
//            (the integer ring codes windows of T segments) while one thread runs the lanes one
//            after another, and codec_threads.py scales the host speed by T threads' measured
//            speed-up. With threads = 1 the integer ring would code one segment at a time,
//            which is not what a rank with T cores runs.
//   --bytes  message size in bytes (float32): the per-rank buffer of allreduce and broadcast,
//            the root's whole send buffer of scatter, every rank's whole output of allgather
//            (the nccl-tests convention); blocks of scatter/allgather hold bytes / 4 / p values.
//   --mpi-path-budget  zccl's Algorithm::Mpi allreduce runs MPI_Iallreduce, which SMPI implements
//            as a linear exchange holding p*(p-1)*bytes of receive buffers: it is skipped (and
//            reported as skipped) above this many bytes (default 2 GiB).
//
// Per collective and implementation: W warm-up calls, then K timed calls, each preceded by a
// barrier; a call's time is the slowest rank's MPI_Wtime difference; the median over the K calls
// is reported. After the timed calls the last result is checked against an exact reference
// outside the timed region and compared with the documented bound. Rank 0 prints one JSON line
// per measurement (prefixed "SMPI_JSON ") and a final summary line; the exit status is 1 if any
// check failed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../csrc/collectives/collectives.h"
#include "../../csrc/compress/fzlight.h"
#include "../../csrc/transport/mpi_comm.h"

namespace coll = zccl::coll;
namespace fz = zccl::fz;
using coll::Algorithm;
using zccl::transport::Comm;

namespace {

// ---- Options ------------------------------------------------------------------------------------

struct Options {
  size_t bytes = size_t{1} << 20;
  int iters = 3;
  int warmup = 1;
  double rel = 1e-4;
  int threads = 1;  // zccl's Config::threads (--threads)
  // zccl's Config::link_gbps / link_latency_us (--link-gbps, --link-latency-us): the network
  // algorithm "auto" assumes; the defaults are Config's (1 Gbit/s, 25 us), whatever the platform.
  double link_gbps = 1.0;
  double link_latency_us = 25.0;
  std::vector<std::string> colls = {"allreduce", "broadcast", "scatter", "allgather"};
  double mpi_path_budget = 2.0 * (1u << 30);
  double timeout_s = 6 * 3600.0;  // transport deadlines are wall clock: a simulation is slow
  std::string label;
  bool zccl = true;  // time zccl's implementations
  bool mpi = true;   // time the plain MPI collectives
  bool skip_ring = false;  // leave out zccl's ring allreduce and ring allgather (see --skip-ring)
  // How zccl's waits poll (--wait): Spin is what the backend's wait="auto" picks with one rank
  // per host, the platform modelled here. Sleep is its choice on an oversubscribed host; SMPI
  // simulates its sleeps (smpi_helpers.h maps nanosleep to smpi_nanosleep), unscaled by the
  // CPU speed-up, as the real wake-up delays would be.
  zccl::WaitPolicy wait = zccl::WaitPolicy::Spin;
  std::vector<std::string> allreduce_algos = {"ring", "ring_int", "recursive_doubling",
                                              "halving_doubling"};
  bool times(const std::string& algo) const {
    return std::find(allreduce_algos.begin(), allreduce_algos.end(), algo) !=
           allreduce_algos.end();
  }
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool parse(int argc, char** argv, Options& o, std::string& err) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      err = "missing value after " + a;
      return false;
    }
    const std::string v = argv[++i];
    if (a == "--bytes") {
      o.bytes = static_cast<size_t>(std::stod(v));
    } else if (a == "--iters") {
      o.iters = std::stoi(v);
    } else if (a == "--warmup") {
      o.warmup = std::stoi(v);
    } else if (a == "--rel") {
      o.rel = std::stod(v);
    } else if (a == "--threads") {
      o.threads = std::stoi(v);
    } else if (a == "--link-gbps") {
      o.link_gbps = std::stod(v);
    } else if (a == "--link-latency-us") {
      o.link_latency_us = std::stod(v);
    } else if (a == "--colls") {
      o.colls = split(v, ',');
    } else if (a == "--mpi-path-budget") {
      o.mpi_path_budget = std::stod(v);
    } else if (a == "--timeout-s") {
      o.timeout_s = std::stod(v);
    } else if (a == "--label") {
      o.label = v;
    } else if (a == "--wait") {
      if (v != "spin" && v != "sleep") {
        err = "--wait takes spin or sleep, got " + v;
        return false;
      }
      o.wait = v == "spin" ? zccl::WaitPolicy::Spin : zccl::WaitPolicy::Sleep;
    } else if (a == "--skip-ring") {
      o.skip_ring = std::stoi(v) != 0;
    } else if (a == "--allreduce-algos") {
      o.allreduce_algos = split(v, ',');
      for (const std::string& algo : o.allreduce_algos) {
        if (algo != "ring" && algo != "ring_int" && algo != "recursive_doubling" &&
            algo != "halving_doubling") {
          err = "--allreduce-algos: unknown algorithm " + algo;
          return false;
        }
      }
    } else if (a == "--impls") {
      const std::vector<std::string> impls = split(v, ',');
      o.zccl = std::find(impls.begin(), impls.end(), "zccl") != impls.end();
      o.mpi = std::find(impls.begin(), impls.end(), "mpi") != impls.end();
    } else {
      err = "unknown option " + a;
      return false;
    }
  }
  if (o.bytes < 4 || o.iters < 1 || o.warmup < 0 || !(o.rel > 0) || o.threads < 1) {
    err = "need --bytes >= 4, --iters >= 1, --warmup >= 0, --rel > 0, --threads >= 1";
    return false;
  }
  if (o.threads > 1 && omp_get_thread_limit() != 1) {
    err = "--threads above 1 needs OMP_THREAD_LIMIT=1 (the lanes run one after another)";
    return false;
  }
  return true;
}

// ---- Input data: a smooth, rank-distinct wave field ---------------------------------------------
//
// The n values of a rank form rows of W = 2048 values (the last row may be partial). The field is
// a sum of three Gaussian wave packets travelling across the rows plus a slow trend:
//   f(y, x) = sum_k a_k exp(-((y - y_k)/s_k)^2) sin(kx_k x + ky_k y + phi_k) + 0.3 cos(2pi y/H + c)
// with rank-dependent phases phi_k, centres y_k and trend phase c. sin(A + B) is expanded into
// sin A cos B + cos A sin B, so the field is a sum of products of per-column and per-row tables and
// f(i) is a handful of float multiply-adds: cheap to generate and to regenerate element by element
// for the correctness checks (same expression, same order, -ffp-contract=off: bit-identical).
// The x wavenumbers are whole periods per row, so rows join smoothly. At REL 1e-4 fZ-light
// compresses it by roughly an order of magnitude, like the project's seismic wavefield.
class Field {
 public:
  static constexpr size_t kW = 2048;
  static constexpr int kK = 3;

  Field(int rank, size_t n) : n_(n), h_(std::max<size_t>(1, (n + kW - 1) / kW)) {
    const double two_pi = 6.283185307179586;
    const double amp[kK] = {1.0, 0.7, 0.5};
    const double mx[kK] = {2.0, 3.0, 5.0};   // periods per row (x)
    const double my[kK] = {3.0, 5.0, 8.0};   // periods over the whole height (y)
    const double sy[kK] = {0.18, 0.25, 0.12}; // packet widths, fraction of the height
    auto frac = [](double v) { return v - std::floor(v); };
    for (int k = 0; k < kK; ++k) {
      const double phi = two_pi * frac(0.6180339887 * (rank + 1) * (k + 1));
      const double yc = frac(0.37 * rank + 0.29 * k + 0.1) * static_cast<double>(h_);
      const double width = sy[k] * static_cast<double>(h_) + 1.0;
      sx_[k].resize(kW);
      cx_[k].resize(kW);
      for (size_t x = 0; x < kW; ++x) {
        const double a = two_pi * mx[k] * static_cast<double>(x) / kW + phi;
        sx_[k][x] = static_cast<float>(std::sin(a));
        cx_[k][x] = static_cast<float>(std::cos(a));
      }
      cy_[k].resize(h_);
      sy_[k].resize(h_);
      for (size_t y = 0; y < h_; ++y) {
        const double d = (static_cast<double>(y) - yc) / width;
        const double env = amp[k] * std::exp(-d * d);
        const double b = two_pi * my[k] * static_cast<double>(y) / static_cast<double>(h_);
        cy_[k][y] = static_cast<float>(env * std::cos(b));
        sy_[k][y] = static_cast<float>(env * std::sin(b));
      }
    }
    trend_.resize(h_);
    const double c = two_pi * frac(0.4142135623 * (rank + 1));
    for (size_t y = 0; y < h_; ++y) {
      trend_[y] = static_cast<float>(
          0.3 * std::cos(two_pi * static_cast<double>(y) / static_cast<double>(h_) + c));
    }
  }

  float at(size_t i) const {
    const size_t y = i / kW, x = i % kW;
    float v = trend_[y];
    for (int k = 0; k < kK; ++k) {
      v += sx_[k][x] * cy_[k][y];
      v += cx_[k][x] * sy_[k][y];
    }
    return v;
  }

  // Values [begin, end) into out[0 .. end-begin).
  void fill(size_t begin, size_t end, float* out) const {
    for (size_t i = begin; i < end; ++i) out[i - begin] = at(i);
  }

  size_t size() const { return n_; }

 private:
  size_t n_, h_;
  std::vector<float> sx_[kK], cx_[kK], cy_[kK], sy_[kK], trend_;
};

// ---- Helpers ------------------------------------------------------------------------------------

struct Ctx {
  Options opt;
  int rank = 0;
  int p = 1;
  // The MPI implementation of the transport: the MPI baselines need its MPI_Comm (raw()).
  std::unique_ptr<zccl::transport::MpiComm> comm;
  double eb = 0.0;  // absolute bound per compression: rel * global value range
  bool all_pass = true;
};

double max_over_ranks(double v, MPI_Comm comm) {
  double out = 0.0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm);
  return out;
}

double sum_over_ranks(double v, MPI_Comm comm) {
  double out = 0.0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, comm);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// One JSON object built field by field (values are numbers, booleans or plain strings).
class Json {
 public:
  Json& num(const char* k, double v) { return raw(k, json_num(v)); }
  Json& integer(const char* k, long long v) { return raw(k, std::to_string(v)); }
  Json& boolean(const char* k, bool v) { return raw(k, v ? "true" : "false"); }
  Json& str(const char* k, const std::string& v) {
    std::string q = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return raw(k, q + "\"");
  }
  Json& list(const char* k, const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json_num(v[i]);
    return raw(k, s + "]");
  }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  Json& raw(const char* k, const std::string& v) {
    if (!body_.empty()) body_ += ", ";
    body_ += "\"" + std::string(k) + "\": " + v;
    return *this;
  }
  std::string body_;
};

// Real (wall-clock) seconds since the previous emit: what one measurement cost the simulation
// (all ranks run in this process), for planning sweeps.
double wall_since_last_emit() {
  static auto last = std::chrono::steady_clock::now();
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - last).count();
  last = now;
  return s;
}

void emit(const Ctx& c, Json j) {
  const double wall = wall_since_last_emit();  // every rank resets its own clock
  if (c.rank == 0) {
    j.num("sim_wall_s", wall);
    std::printf("SMPI_JSON %s\n", j.text().c_str());
    std::fflush(stdout);
  }
}

Json base_record(const Ctx& c, const char* collective, const char* impl, size_t bytes,
                 size_t count) {
  Json j;
  j.boolean("simulation", true)
      .str("label", c.opt.label)
      .str("collective", collective)
      .str("impl", impl)
      .integer("p", c.p)
      .integer("bytes", static_cast<long long>(bytes))
      .integer("count", static_cast<long long>(count))
      .str("dtype", "float32")
      .num("rel_eb", c.opt.rel)
      .num("eb_abs", c.eb)
      .integer("warmup", c.opt.warmup)
      .integer("iters", c.opt.iters);
  return j;
}

// A record for an implementation left out by --skip-ring.
Json skipped_record(const Ctx& c, const char* collective, const char* impl, size_t bytes,
                    size_t count) {
  Json j = base_record(c, collective, impl, bytes, count);
  j.boolean("skipped", true)
      .str("reason", "--skip-ring: SMPI's simulation of the p*(p-1)-message MPI_Iallgather of the "
                     "ring's size exchange is too slow at this p");
  return j;
}

struct Timing {
  std::vector<double> times;  // per timed call: the slowest rank's simulated seconds
};

// Runs `prepare` (untimed), barrier, `call` (timed) warmup + iters times.
Timing time_calls(Ctx& c, const std::function<void()>& prepare,
                  const std::function<void()>& call) {
  Timing t;
  MPI_Comm world = MPI_COMM_WORLD;
  for (int it = 0; it < c.opt.warmup + c.opt.iters; ++it) {
    prepare();
    MPI_Barrier(world);
    const double t0 = MPI_Wtime();
    call();
    const double dt = MPI_Wtime() - t0;
    const double slowest = max_over_ranks(dt, world);
    if (it >= c.opt.warmup) t.times.push_back(slowest);
  }
  return t;
}

void add_timing(Json& j, const Timing& t) {
  j.num("time_s", median(t.times))
      .num("time_min_s", *std::min_element(t.times.begin(), t.times.end()))
      .num("time_max_s", *std::max_element(t.times.begin(), t.times.end()))
      .list("times_s", t.times);
}

// Records one check: err (max over ranks) against the documented bound plus an allowance for float
// rounding (0 for data movement); returns whether it passed.
void add_check(Ctx& c, Json& j, double err, double bound, double allowance) {
  const double e = max_over_ranks(err, MPI_COMM_WORLD);
  const bool pass = e <= bound + allowance;
  c.all_pass = c.all_pass && pass;
  j.num("max_err", e)
      .num("bound", bound)
      .num("err_over_bound", bound > 0 ? e / bound : (e == 0 ? 0.0 : INFINITY))
      .num("rounding_allowance", allowance)
      .boolean("pass", pass);
}

// Bytes the last call put on the wire and compressed, summed over the ranks (zccl's Stats).
void add_traffic(Json& j, const coll::Stats& st) {
  const double sent = sum_over_ranks(static_cast<double>(st.bytes_sent), MPI_COMM_WORLD);
  const double comp = sum_over_ranks(static_cast<double>(st.bytes_compressed), MPI_COMM_WORLD);
  j.num("bytes_sent_total", sent).num("bytes_compressed_total", comp);
}

coll::Config zccl_config(const Ctx& c, Algorithm a) {
  coll::Config cfg;
  cfg.error_bound = c.eb;
  // Every simulated rank shares this process: lanes run one after another (OMP_THREAD_LIMIT=1
  // when above 1, see --threads).
  cfg.threads = c.opt.threads;
  cfg.algorithm = a;
  cfg.min_compress_bytes = 0;
  cfg.link_gbps = c.opt.link_gbps;
  cfg.link_latency_us = c.opt.link_latency_us;
  return cfg;
}

// ---- Allreduce ----------------------------------------------------------------------------------

struct AllreduceRef {
  std::vector<float> ref;  // float64 sum rounded to float32
  double abs_sum_max = 0;  // max over elements of sum_j |x_j|

  // Float rounding on top of the documented bound: each of the p-1 additions an algorithm makes
  // rounds by at most u * |partial sum| <= u * (sum|x| + bound), u = 2^-24; plus one more u for
  // the float32 rounding of the reference itself.
  double allowance(int p, double bound) const {
    const double u = std::ldexp(1.0, -24);
    return p * u * (abs_sum_max + bound);
  }
};

// Reference: float64 MPI_Allreduce of (x, |x|) in chunks of 2^19 values (its own rounding, about
// p * 2^-53 relative, is negligible next to the float32 allowance below).
AllreduceRef allreduce_reference(const std::vector<float>& x) {
  AllreduceRef r;
  r.ref.resize(x.size());
  const size_t chunk = size_t{1} << 19;
  std::vector<double> buf(2 * chunk);
  double local_max = 0.0;
  for (size_t off = 0; off < x.size(); off += chunk) {
    const size_t m = std::min(chunk, x.size() - off);
    for (size_t i = 0; i < m; ++i) {
      buf[i] = x[off + i];
      buf[m + i] = std::fabs(static_cast<double>(x[off + i]));
    }
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(2 * m), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    for (size_t i = 0; i < m; ++i) {
      r.ref[off + i] = static_cast<float>(buf[i]);
      local_max = std::max(local_max, buf[m + i]);
    }
  }
  r.abs_sum_max = max_over_ranks(local_max, MPI_COMM_WORLD);
  return r;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

// zccl's allreduce with algorithm `alg` (Algorithm::Mpi: its uncompressed path, MPI_Iallreduce).
void zccl_allreduce(Ctx& c, const char* impl, Algorithm alg, const std::vector<float>& x,
                    std::vector<float>& buf, const AllreduceRef& ref,
                    bool integer_ring = false) {
  const size_t n = x.size(), bytes = n * 4;
  Json j = base_record(c, "allreduce", impl, bytes, n);
  if (alg == Algorithm::Mpi) {
    const double need = static_cast<double>(c.p) * (c.p - 1) * static_cast<double>(bytes);
    if (need > c.opt.mpi_path_budget) {
      j.boolean("skipped", true)
          .str("reason", "SMPI's MPI_Iallreduce is a linear exchange needing p*(p-1)*bytes = " +
                             json_num(need) + " B of receive buffers (budget " +
                             json_num(c.opt.mpi_path_budget) + ")");
      emit(c, j);
      return;
    }
  }
  coll::Config cfg = zccl_config(c, alg);
  cfg.integer_ring = integer_ring;
  coll::Stats st;
  const Timing t = time_calls(c, [&] { std::memcpy(buf.data(), x.data(), bytes); }, [&] {
    coll::allreduce(*c.comm, buf.data(), n, fz::DType::Float32, coll::ReduceOp::Sum, cfg, &st);
  });
  const double bound =
      coll::output_error_bound(st.algorithm, coll::ReduceOp::Sum, c.p, c.eb, true);
  j.str("algorithm", coll::algorithm_name(st.algorithm));
  add_timing(j, t);
  add_traffic(j, st);
  const bool pass_before = c.all_pass;
  add_check(c, j, max_abs_diff(buf.data(), ref.ref.data(), n), bound, ref.allowance(c.p, bound));
  if (alg == Algorithm::Mpi && !c.all_pass) {
    // Not zccl's arithmetic: SMPI 3.32's MPI_Iallreduce(MPI_IN_PLACE) sends from a temporary copy
    // that it frees when the call returns, while the simulated sends read it later.
    j.boolean("check_excluded", true)
        .str("note", "SMPI 3.32 MPI_Iallreduce(MPI_IN_PLACE) sends a freed temporary copy");
    c.all_pass = pass_before;
  }
  emit(c, j);
}

// "allreduce": zccl ring, recursive doubling and auto, then MPI_Allreduce.
// "allreduce_mpi_path": zccl's Algorithm::Mpi path alone (run it in its own simulation: see the
// note in zccl_allreduce; the freed buffer it reads can crash the process).
void run_allreduce(Ctx& c, bool mpi_path) {
  const size_t n = c.opt.bytes / 4, bytes = n * 4;
  const Field field(c.rank, n);
  std::vector<float> x(n), buf(n);
  field.fill(0, n, x.data());
  const AllreduceRef ref = allreduce_reference(x);
  if (mpi_path) {
    zccl_allreduce(c, "zccl_mpi_path", Algorithm::Mpi, x, buf, ref);
    return;
  }
  if (c.opt.zccl) {
    if (c.opt.skip_ring) {
      emit(c, skipped_record(c, "allreduce", "zccl_ring", bytes, n));
    } else {
      if (c.opt.times("ring")) zccl_allreduce(c, "zccl_ring", Algorithm::Ring, x, buf, ref);
      if (c.opt.times("ring_int")) {
        zccl_allreduce(c, "zccl_ring_int", Algorithm::Ring, x, buf, ref, true);  // integer hop
      }
    }
    if (c.opt.times("recursive_doubling")) {
      zccl_allreduce(c, "zccl_recursive_doubling", Algorithm::RecursiveDoubling, x, buf, ref);
    }
    if (c.opt.times("halving_doubling")) {
      zccl_allreduce(c, "zccl_halving_doubling", Algorithm::HalvingDoubling, x, buf, ref);
    }
    // Auto runs exactly the algorithm choose_allreduce() names: when that is one timed above,
    // record the choice instead of simulating the same code again (ring and RD are the costly
    // simulations).
    const Algorithm chosen = coll::choose_allreduce(bytes, c.p, zccl_config(c, Algorithm::Auto));
    if (chosen == Algorithm::Ring && c.opt.skip_ring) {
      Json j = skipped_record(c, "allreduce", "zccl_auto", bytes, n);
      j.str("algorithm", coll::algorithm_name(chosen));
      emit(c, j);
    } else if ((chosen == Algorithm::Ring || chosen == Algorithm::RecursiveDoubling ||
                chosen == Algorithm::HalvingDoubling) &&
               c.opt.times(coll::algorithm_name(chosen))) {
      Json j = base_record(c, "allreduce", "zccl_auto", bytes, n);
      j.str("algorithm", coll::algorithm_name(chosen))
          .str("same_as", std::string("zccl_") + coll::algorithm_name(chosen));
      emit(c, j);
    } else {
      zccl_allreduce(c, "zccl_auto", Algorithm::Auto, x, buf, ref);
    }
  }
  if (!c.opt.mpi) return;
  Json j = base_record(c, "allreduce", "mpi", bytes, n);
  const Timing t = time_calls(c, [&] { std::memcpy(buf.data(), x.data(), bytes); }, [&] {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  c.comm->raw());
  });
  j.str("algorithm", "MPI_Allreduce");
  add_timing(j, t);
  add_check(c, j, max_abs_diff(buf.data(), ref.ref.data(), n), 0.0, ref.allowance(c.p, 0.0));
  emit(c, j);
}

// ---- Data movement: broadcast, scatter, allgather -----------------------------------------------

void run_broadcast(Ctx& c) {
  const size_t n = c.opt.bytes / 4, bytes = n * 4;
  const int root = 0;
  const Field root_field(root, n);
  std::vector<float> x(n), buf(n);
  root_field.fill(0, n, x.data());  // every rank knows the root's values: the check's reference
  auto prepare = [&] {
    if (c.rank == root) {
      std::memcpy(buf.data(), x.data(), bytes);
    } else {
      std::fill(buf.begin(), buf.end(), 0.0f);
    }
  };
  if (c.opt.zccl) {
    Json j = base_record(c, "broadcast", "zccl", bytes, n);
    const coll::Config cfg = zccl_config(c, Algorithm::Auto);
    coll::Stats st;
    const Timing t = time_calls(c, prepare, [&] {
      coll::broadcast(*c.comm, buf.data(), n, fz::DType::Float32, root, cfg, &st);
    });
    j.str("algorithm", "pipelined chain of compressed segments (one stream down a binomial tree "
                       "when too small to segment)");
    add_timing(j, t);
    add_traffic(j, st);
    add_check(c, j, max_abs_diff(buf.data(), x.data(), n), c.eb, 0.0);
    emit(c, j);
  }
  if (c.opt.mpi) {
    Json j = base_record(c, "broadcast", "mpi", bytes, n);
    const Timing t = time_calls(c, prepare, [&] {
      MPI_Bcast(buf.data(), static_cast<int>(n), MPI_FLOAT, root, c.comm->raw());
    });
    j.str("algorithm", "MPI_Bcast");
    add_timing(j, t);
    add_check(c, j, max_abs_diff(buf.data(), x.data(), n), 0.0, 0.0);
    emit(c, j);
  }
}

void run_scatter(Ctx& c) {
  const size_t block = c.opt.bytes / 4 / static_cast<size_t>(c.p);
  const size_t total = block * static_cast<size_t>(c.p), bytes = total * 4;
  if (block == 0) return;
  const int root = 0;
  const Field root_field(root, total);
  std::vector<float> send(c.rank == root ? total : 0), out(block), expect(block);
  if (c.rank == root) root_field.fill(0, total, send.data());
  root_field.fill(block * static_cast<size_t>(c.rank), block * (c.rank + 1), expect.data());
  auto prepare = [&] { std::fill(out.begin(), out.end(), 0.0f); };
  if (c.opt.zccl) {
    Json j = base_record(c, "scatter", "zccl", bytes, block);
    const coll::Config cfg = zccl_config(c, Algorithm::Auto);
    coll::Stats st;
    const Timing t = time_calls(c, prepare, [&] {
      coll::scatter(*c.comm, send.data(), out.data(), block, fz::DType::Float32, root, cfg, &st);
    });
    j.str("algorithm", "root sends each destination's compressed segments directly, pipelined");
    add_timing(j, t);
    add_traffic(j, st);
    add_check(c, j, max_abs_diff(out.data(), expect.data(), block), c.eb, 0.0);
    emit(c, j);
  }
  if (c.opt.mpi) {
    Json j = base_record(c, "scatter", "mpi", bytes, block);
    const Timing t = time_calls(c, prepare, [&] {
      MPI_Scatter(send.data(), static_cast<int>(block), MPI_FLOAT, out.data(),
                  static_cast<int>(block), MPI_FLOAT, root, c.comm->raw());
    });
    j.str("algorithm", "MPI_Scatter");
    add_timing(j, t);
    add_check(c, j, max_abs_diff(out.data(), expect.data(), block), 0.0, 0.0);
    emit(c, j);
  }
}

void run_allgather(Ctx& c) {
  const size_t block = c.opt.bytes / 4 / static_cast<size_t>(c.p);
  const size_t total = block * static_cast<size_t>(c.p), bytes = total * 4;
  if (block == 0) return;
  const Field mine(c.rank, block);
  std::vector<float> send(block), out(total);
  mine.fill(0, block, send.data());
  auto prepare = [&] { std::fill(out.begin(), out.end(), 0.0f); };
  // Block q must hold rank q's field: regenerate it block by block (no p-fold reference copy).
  auto error = [&] {
    double m = 0.0;
    std::vector<float> expect(block);
    for (int q = 0; q < c.p; ++q) {
      Field(q, block).fill(0, block, expect.data());
      m = std::max(m, max_abs_diff(out.data() + block * static_cast<size_t>(q), expect.data(),
                                   block));
    }
    return m;
  };
  if (c.opt.zccl && c.opt.skip_ring) {
    emit(c, skipped_record(c, "allgather", "zccl", bytes, block));
  } else if (c.opt.zccl) {
    Json j = base_record(c, "allgather", "zccl", bytes, block);
    const coll::Config cfg = zccl_config(c, Algorithm::Auto);
    coll::Stats st;
    const Timing t = time_calls(c, prepare, [&] {
      coll::allgather(*c.comm, send.data(), out.data(), block, fz::DType::Float32, cfg, &st);
    });
    j.str("algorithm", "ring of compressed blocks");
    add_timing(j, t);
    add_traffic(j, st);
    add_check(c, j, error(), c.eb, 0.0);
    emit(c, j);
  }
  if (c.opt.mpi) {
    Json j = base_record(c, "allgather", "mpi", bytes, block);
    const Timing t = time_calls(c, prepare, [&] {
      MPI_Allgather(send.data(), static_cast<int>(block), MPI_FLOAT, out.data(),
                    static_cast<int>(block), MPI_FLOAT, c.comm->raw());
    });
    j.str("algorithm", "MPI_Allgather");
    add_timing(j, t);
    add_check(c, j, error(), 0.0, 0.0);
    emit(c, j);
  }
}

// What SMPI's CPU-time probe adds (means over the ranks, simulated seconds): SMPI reads the
// thread CPU clock at the end and start of every MPI call and injects the difference, which
// includes the clock reads themselves (~1.4 us per read on this VM). `per_test`: one MPI_Test on
// a pending receive with nothing in between (real Open MPI: ~20 ns); `compress_*`: fZ-light on
// this rank's field without and with an MPI_Test after every 5120-value chunk, so
// poll_inflation = polled / unpolled is what the probe would add to a codec polling that often.
// (zccl's pipelined codec polls at most every 50 us of wall time, i.e. far less often; the probe
// cost still applies to every MPI call it makes: frames, waits, size exchanges.)
struct Probe {
  double per_test = 0, compress_plain = 0, compress_polled = 0;
};

Probe calibrate_probe(const Ctx& c, const std::vector<float>& x, const fz::CompressParams& params,
                      std::vector<uint8_t>& stream) {
  Probe pr;
  const int next = (c.rank + 1) % c.p, prev = (c.rank + c.p - 1) % c.p;
  const int tag = 4242;
  char in = 0, out = 1;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Irecv(&in, 1, MPI_CHAR, next, tag, MPI_COMM_WORLD, &req);
  int flag = 0;
  const int n_tests = 2000;
  double t0 = MPI_Wtime();
  for (int i = 0; i < n_tests && !flag; ++i) MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
  pr.per_test = (MPI_Wtime() - t0) / n_tests;
  fz::Progress poll = [&](uint64_t, uint64_t) {
    if (!flag) MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
  };
  t0 = MPI_Wtime();
  fz::compress(x.data(), fz::DType::Float32, x.size(), params, stream.data(), stream.size());
  pr.compress_plain = MPI_Wtime() - t0;
  t0 = MPI_Wtime();
  fz::compress(x.data(), fz::DType::Float32, x.size(), params, stream.data(), stream.size(),
               &poll);
  pr.compress_polled = MPI_Wtime() - t0;
  MPI_Send(&out, 1, MPI_CHAR, prev, tag, MPI_COMM_WORLD);
  if (!flag) MPI_Wait(&req, MPI_STATUS_IGNORE);
  pr.per_test = sum_over_ranks(pr.per_test, MPI_COMM_WORLD) / c.p;
  pr.compress_plain = sum_over_ranks(pr.compress_plain, MPI_COMM_WORLD) / c.p;
  pr.compress_polled = sum_over_ranks(pr.compress_polled, MPI_COMM_WORLD) / c.p;
  return pr;
}

// Global value range of all ranks' fields -> absolute bound; and the fields' compression ratio.
void setup_bound(Ctx& c) {
  const size_t n = c.opt.bytes / 4;
  const Field field(c.rank, n);
  std::vector<float> x(n);
  field.fill(0, n, x.data());
  const fz::FiniteRange fr = fz::finite_range(x.data(), fz::DType::Float32, n, 1);
  double lo = fr.min, hi = fr.max, glo = 0, ghi = 0;
  MPI_Allreduce(&lo, &glo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hi, &ghi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  c.eb = c.opt.rel * (ghi - glo);
  // Compression ratio of this rank's whole field at eb (one stream, for the record).
  fz::CompressParams params;
  params.error_bound = c.eb;
  params.threads = 1;
  std::vector<uint8_t> stream(fz::max_compressed_size(fz::DType::Float32, n));
  const size_t sz = fz::compress(x.data(), fz::DType::Float32, n, params, stream.data(),
                                 stream.size());
  const double ratio_sum = sum_over_ranks(static_cast<double>(n * 4) / sz, MPI_COMM_WORLD);
  const Probe probe = calibrate_probe(c, x, params, stream);
  Json j;
  j.boolean("simulation", true)
      .str("label", c.opt.label)
      .str("record", "setup")
      .str("wait", c.opt.wait == zccl::WaitPolicy::Spin ? "spin" : "sleep")
      .integer("p", c.p)
      .integer("bytes", static_cast<long long>(n * 4))
      .num("rel_eb", c.opt.rel)
      .num("eb_abs", c.eb)
      .num("value_min", glo)
      .num("value_max", ghi)
      .num("field_compression_ratio_mean", ratio_sum / c.p)
      .num("probe_sim_s_per_empty_mpi_test", probe.per_test)
      .num("compress_sim_s_unpolled", probe.compress_plain)
      .num("compress_sim_s_polled", probe.compress_polled)
      .num("poll_inflation", probe.compress_polled / probe.compress_plain);
  emit(c, j);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  Ctx c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.p);
  std::string err;
  if (!parse(argc, argv, c.opt, err)) {
    if (c.rank == 0) std::fprintf(stderr, "smpi_collectives: %s\n", err.c_str());
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  try {
    const auto timeout = std::chrono::milliseconds(static_cast<long long>(c.opt.timeout_s * 1e3));
    // MpiComm::duplicate() needs MPI_Comm_idup, which SMPI 3.32 does not implement (it aborts with
    // "Not yet implemented: PMPI_Comm_idup"); a group of every world rank made with
    // MPI_Comm_create_group is the same communicator for the collectives.
    std::vector<int> everyone(static_cast<size_t>(c.p));
    for (int q = 0; q < c.p; ++q) everyone[static_cast<size_t>(q)] = q;
    c.comm = zccl::transport::MpiComm::create_group(everyone, /*tag=*/1);
    c.comm->set_timeout(timeout);
    c.comm->set_wait_policy(c.opt.wait);
    setup_bound(c);
    for (const std::string& name : c.opt.colls) {
      if (name == "allreduce" || name == "allreduce_mpi_path") {
        run_allreduce(c, name == "allreduce_mpi_path");
      } else if (name == "broadcast") {
        run_broadcast(c);
      } else if (name == "scatter") {
        run_scatter(c);
      } else if (name == "allgather") {
        run_allgather(c);
      } else if (c.rank == 0) {
        std::fprintf(stderr, "smpi_collectives: unknown collective %s (skipped)\n", name.c_str());
      }
    }
    Json j;
    j.boolean("simulation", true)
        .str("label", c.opt.label)
        .str("record", "summary")
        .integer("p", c.p)
        .integer("mpi_thread_provided", provided)
        .boolean("all_pass", c.all_pass);
    emit(c, j);
    rc = c.all_pass ? 0 : 1;
    c.comm.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] smpi_collectives: %s\n", c.rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return rc;
}
