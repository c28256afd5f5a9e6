// Public entry points of the computation framework for allreduce and reduce_scatter (dispatch to
// one algorithm file each), the automatic algorithm choice, and the documented output bounds.
//
// Automatic choice: an alpha-beta model with compression terms. All constants live in
// CostModel below; they are deliberately round numbers for the bandwidth-limited networks
// compression is for (1 Gb/s; 25 us latency, as calibrated on the emulated cluster of
// benchmarks/cluster), fZ-light's measured single-core throughput (~3 GB/s compress, ~4 GB/s
// decompress) and a conservative compression ratio of 5 at a lossy bound (the benchmark
// wavefield gives 12-17 at REL 1e-4). With these constants: p = 4 -> Mpi below 4 KiB,
// RecursiveDoubling up to 512 KiB, Ring above; p = 2 -> Ring from 4 MiB; p = 8..64 -> Ring from
// 256-512 KiB. (benchmarks/model.py holds the same model with calibrated parameters.)
// For n bytes on p ranks (p' = largest power of two <= p, L = log2 p', f = p > p', s = the
// ring's segment, min(1 MiB, n/p), S = segments per block):
//   Mpi   min( ceil(log2 p) (alpha + n beta + n gamma),                    -- binomial / RD
//              2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma )       -- Rabenseifner
//   Ring  max(2 (p-1)/p n beta/R, n/(pC) + n/(pD) + (p-1)/p n (1/C + 2/D + gamma))
//         + 2(p-1)(alpha + s beta/R) + s/C + s/D + (3p - 2) S kappa
//         (the segmented pipeline overlaps wire and codec; kappa: fixed cost of one codec call)
//   RD    (L + 2f) alpha + L n (beta/R + 1/C + 2/D + gamma) + f n (beta/R + 1/C + 1/D + gamma)
//         + f n (2 beta/R + 2/D) + (3L + 4f) kappa
// The cheapest wins (ties go to Mpi): small messages -> Mpi (compression cannot pay for its fixed
// costs), medium -> RecursiveDoubling (log p latency terms), large -> Ring (bandwidth-optimal).
// eb == 0 means lossless streams (ratio ~1), where compression never pays: Mpi.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll {

namespace {

using namespace compute;

struct CostModel {
  double alpha = 25e-6;          // s per message (latency)
  double beta = 1.0 / 1.25e8;    // s per byte on the wire (1 Gb/s)
  double gamma = 1.0 / 5e9;      // s per byte of elementwise reduction
  double compress = 3e9;         // bytes/s, one core, pipelined (measured on fZ-light)
  double decompress = 4e9;       // bytes/s, one core
  double ratio = 5.0;            // assumed compression ratio at a lossy bound (1 when eb == 0)
  double kappa = 5e-6;           // s of fixed cost per compress/decompress call
};

constexpr CostModel kModel{};

double cost_mpi(double n, int p, const CostModel& m) {
  const double lp = std::log2(static_cast<double>(p));
  const double tree = std::ceil(lp) * (m.alpha + n * m.beta + n * m.gamma);
  const double frac = (p - 1.0) / p;
  const double raben = 2 * lp * m.alpha + 2 * frac * n * m.beta + frac * n * m.gamma;
  return std::min(tree, raben);
}

double cost_ring(double n, int p, double ratio, const CostModel& m) {
  const double frac = (p - 1.0) / p;
  constexpr double kSegment = 1 << 20;  // RingSegments' default segment, in bytes
  const double seg = std::min(kSegment, n / p);
  const double segments = std::max(1.0, std::ceil(n / p / kSegment));
  const double wire = 2 * frac * n * m.beta / ratio;
  const double codec = n / p / m.compress + n / p / m.decompress +
                       frac * n * (1 / m.compress + 2 / m.decompress + m.gamma);
  return std::max(wire, codec) + 2 * (p - 1) * (m.alpha + seg * m.beta / ratio) +
         seg / m.compress + seg / m.decompress + (3.0 * p - 2) * segments * m.kappa;
}

double cost_rd(double n, int p, double ratio, const CostModel& m) {
  const int pp = pow2_floor(p);
  const double L = log2_exact(pp), f = p > pp ? 1.0 : 0.0;
  const double per_round = n * (m.beta / ratio + 1 / m.compress + 2 / m.decompress + m.gamma);
  const double fold_in = n * (m.beta / ratio + 1 / m.compress + 1 / m.decompress + m.gamma);
  const double fold_out = n * (2 * m.beta / ratio + 2 / m.decompress);
  return (L + 2 * f) * m.alpha + L * per_round + f * (fold_in + fold_out) +
         (3 * L + 4 * f) * m.kappa;
}

// True when the payload goes through plain MPI regardless of the algorithm asked for.
bool uncompressed(size_t bytes, int p, const Config& cfg) {
  return p == 1 || bytes == 0 || bytes < cfg.min_compress_bytes;
}

template <class T>
void mpi_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, const Config& cfg) {
  comm.allreduce(MPI_IN_PLACE, buf, count, mpi_type(dtype_of<T>()), mpi_op(op));
  if (op == ReduceOp::Avg) kernels::divide(buf, count, comm.size(), cfg.threads);
}

template <class T>
void allreduce_typed(Comm& comm, T* buf, size_t count, ReduceOp op, const Config& cfg,
                     Stats& st) {
  const int p = comm.size();
  const size_t bytes = count * sizeof(T);
  Algorithm alg = cfg.algorithm;
  if (alg == Algorithm::Auto) alg = choose_allreduce(bytes, p, cfg);
  if (uncompressed(bytes, p, cfg)) alg = Algorithm::Mpi;
  st.algorithm = alg;
  const double eb = cfg.error_bound;
  switch (alg) {
    case Algorithm::Mpi:
      mpi_allreduce(comm, buf, count, op, cfg);
      // What a bandwidth-optimal exact allreduce sends (MPI's own choice is not observable).
      st.bytes_sent += p > 1 ? 2 * (p - 1) * bytes / p : 0;
      return;
    case Algorithm::Ring: ring_allreduce(comm, buf, count, op, eb, cfg, st); return;
    case Algorithm::RecursiveDoubling:
      recursive_doubling_allreduce(comm, buf, count, op, eb, cfg, st);
      return;
    case Algorithm::CprP2P: cprp2p_allreduce(comm, buf, count, op, eb, cfg, st); return;
    case Algorithm::Auto: break;
  }
  throw std::logic_error("zccl allreduce: no algorithm resolved");
}

template <class T>
void reduce_scatter_typed(Comm& comm, const T* send, T* recv, size_t count, ReduceOp op,
                          const Config& cfg, Stats& st) {
  const int p = comm.size();
  const size_t total = count * static_cast<size_t>(p);
  const size_t bytes = total * sizeof(T);
  Algorithm alg = cfg.algorithm;
  if (alg == Algorithm::Auto) {
    alg = choose_allreduce(bytes, p, cfg) == Algorithm::Mpi ? Algorithm::Mpi : Algorithm::Ring;
  }
  if (alg == Algorithm::RecursiveDoubling) alg = Algorithm::Ring;  // no RD reduce-scatter
  if (uncompressed(bytes, p, cfg)) alg = Algorithm::Mpi;
  st.algorithm = alg;

  // Our algorithms keep a partial in the output between steps and read the input until the
  // last step: an output overlapping the input goes through a temporary.
  const bool alias = overlaps(send, bytes, recv, count * sizeof(T));
  Array<T> tmp(alias ? count : 0);
  T* out = alias ? tmp.get() : recv;

  if (alg == Algorithm::Mpi) {
    if (p == 1) {
      std::copy(send, send + count, out);
    } else {
      comm.reduce_scatter_block(send, out, count, mpi_type(dtype_of<T>()), mpi_op(op));
      st.bytes_sent += (p - 1) * count * sizeof(T);
    }
  } else {
    const Blocks blocks = Blocks::balanced(total, p);  // p blocks of `count`
    const double eb = cfg.error_bound;
    if (is_min_max(op) && alg == Algorithm::Ring) {
      exchange_reduce_scatter(comm, send, out, blocks, op, eb, cfg, st);
    } else if (alg == Algorithm::Ring) {
      ring_reduce_scatter(comm, RingBuffers<T>{send, nullptr, out}, blocks, op, eb, cfg, st);
    } else {  // CprP2P; MIN/MAX: p-1 compressions on a chain share eb
      const double eb_hop = is_min_max(op) ? split_bound(eb, p - 1) : eb;
      cprp2p_reduce_scatter(comm, RingBuffers<T>{send, nullptr, out}, blocks, op, eb_hop, cfg, st);
    }
  }
  if (op == ReduceOp::Avg) kernels::divide(out, count, p, cfg.threads);
  if (alias) std::copy(out, out + count, recv);
}

}  // namespace

// ------------------------------------------------------------------------------------------------

void allreduce(Comm& comm, void* buf, size_t count, DType dt, ReduceOp op, const Config& cfg,
               Stats* stats) {
  validate("allreduce", buf, count, dt, op, cfg);
  const Clock clock;
  Stats st;
  st.bytes_in = count * fz::dtype_size(dt);
  if (dt == DType::Float32) {
    allreduce_typed(comm, static_cast<float*>(buf), count, op, cfg, st);
  } else {
    allreduce_typed(comm, static_cast<double*>(buf), count, op, cfg, st);
  }
  st.total_seconds = clock.seconds();
  if (stats != nullptr) *stats = st;
}

void reduce_scatter(Comm& comm, const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                    const Config& cfg, Stats* stats) {
  validate("reduce_scatter", send, count, dt, op, cfg);
  if (recv == nullptr && count > 0) {
    throw std::invalid_argument("zccl reduce_scatter: null output buffer with count " +
                                std::to_string(count));
  }
  const size_t p = static_cast<size_t>(comm.size());
  if (count > 0 && count > SIZE_MAX / p / fz::dtype_size(dt)) {
    throw std::invalid_argument("zccl reduce_scatter: size() * count overflows");
  }
  const Clock clock;
  Stats st;
  st.bytes_in = p * count * fz::dtype_size(dt);
  if (dt == DType::Float32) {
    reduce_scatter_typed(comm, static_cast<const float*>(send), static_cast<float*>(recv), count,
                         op, cfg, st);
  } else {
    reduce_scatter_typed(comm, static_cast<const double*>(send), static_cast<double*>(recv), count,
                         op, cfg, st);
  }
  st.total_seconds = clock.seconds();
  if (stats != nullptr) *stats = st;
}

Algorithm choose_allreduce(size_t bytes, int p, const Config& cfg) {
  if (uncompressed(bytes, p, cfg) || cfg.error_bound == 0.0) return Algorithm::Mpi;
  const double n = static_cast<double>(bytes);
  const double mpi = cost_mpi(n, p, kModel);
  const double ring = cost_ring(n, p, kModel.ratio, kModel);
  const double rd = cost_rd(n, p, kModel.ratio, kModel);
  if (mpi <= ring && mpi <= rd) return Algorithm::Mpi;
  return rd < ring ? Algorithm::RecursiveDoubling : Algorithm::Ring;
}

// Worst-case |output - exact| in exact arithmetic (floating-point rounding of the reductions
// comes on top). `allreduce` = false: reduce_scatter. reduce() never exceeds the allreduce bound
// of the same algorithm (see reduce.cpp), so the allreduce value also bounds reduce.
double output_error_bound(Algorithm algorithm, ReduceOp op, int p, double eb, bool allreduce) {
  if (p < 1) throw std::invalid_argument("zccl output_error_bound: p must be >= 1");
  if (!(eb >= 0) || !std::isfinite(eb)) {
    throw std::invalid_argument("zccl output_error_bound: eb must be finite and >= 0");
  }
  if (p == 1 || algorithm == Algorithm::Mpi) return 0.0;
  if (is_min_max(op)) return eb;  // every compressed algorithm splits eb over its stages
  const int pp = pow2_floor(p);
  const double ring_rs = (p - 1) * eb;
  const double ring_ar = p * eb;             // (p-1) eb + eb for the allgather stage
  const double rd_ar = (p + pp - 2) * eb;    // 2(p'-1) eb + eb per folded rank
  const double cpr_ar = 2.0 * (p - 1) * eb;  // recompression at every allgather hop
  double sum = 0.0;
  switch (algorithm) {
    case Algorithm::Ring: sum = allreduce ? ring_ar : ring_rs; break;
    case Algorithm::RecursiveDoubling: sum = allreduce ? rd_ar : ring_rs; break;  // RS: ring
    case Algorithm::CprP2P: sum = allreduce ? cpr_ar : ring_rs; break;
    case Algorithm::Auto: sum = allreduce ? std::max(ring_ar, rd_ar) : ring_rs; break;
    case Algorithm::Mpi: return 0.0;
    default: throw std::invalid_argument("zccl output_error_bound: unknown algorithm");
  }
  if (op == ReduceOp::Avg) return sum / p;
  if (op != ReduceOp::Sum) throw std::invalid_argument("zccl output_error_bound: unknown op");
  return sum;
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Auto: return "auto";
    case Algorithm::Ring: return "ring";
    case Algorithm::RecursiveDoubling: return "recursive_doubling";
    case Algorithm::Mpi: return "mpi";
    case Algorithm::CprP2P: return "cprp2p";
  }
  return "unknown";
}

Algorithm algorithm_from_name(const std::string& name) {
  for (Algorithm a : {Algorithm::Auto, Algorithm::Ring, Algorithm::RecursiveDoubling,
                      Algorithm::Mpi, Algorithm::CprP2P}) {
    if (name == algorithm_name(a)) return a;
  }
  throw std::invalid_argument("zccl: unknown algorithm '" + name + "'");
}

}  // namespace zccl::coll
