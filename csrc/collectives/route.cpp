// route(): whether a collective call compresses and which algorithm runs, for every collective
// on the CPU and the GPU, in one place; and the cost model behind Algorithm::Auto for the CPU
// reductions and for whether CPU data movement compresses at all (compression_pays).
//
// Automatic choice: an alpha-beta model with compression terms. The network is the
// configuration's (Config::link_gbps and link_latency_us; by default 1 Gb/s and 25 us, as
// calibrated on the emulated cluster of benchmarks/cluster, the bandwidth-limited networks
// compression is for); the compression ratio R is the data's, sampled by the backend before
// the call where it could change the choice (Config::model_ratio: the ranks' smallest sample),
// else a conservative kAssumedRatio = 5 (the benchmark wavefield gives 12-17 at REL 1e-4); the
// other constants live in CostModel below: fZ-light's measured single-core throughput (~3 GB/s
// compress, ~4 GB/s decompress). With the default network, R = 5 and bandwidth-optimal exact
// collectives (the TCP transport; Open MPI's make Mpi dearer, see cost_mpi): p = 2, 4, 8, 16
// -> Mpi below 4 KiB, RecursiveDoubling up to 64-128 KiB, Ring above (p = 3: Ring from 12
// KiB); p = 32, 64, 128 -> HalvingDoubling from 64-192 KiB, Ring from 48, 96, 192 MiB; p = 48,
// 100 -> HalvingDoubling from 64-128 KiB, Ring from 768 KiB and 1.5 MiB (the fold's extra
// whole-buffer transfers). (The backend's min_compress_bytes, 64 KiB by default, sends smaller
// payloads exact whatever the model says.)
// (benchmarks/model.py holds the ring/RD/MPI model with calibrated parameters;
// benchmarks/allreduce_crossover.py times ring, RD and Mpi next to this model's figures.)
// For n bytes on p ranks (p' = largest power of two <= p, L = log2 p', f = p > p', s = the
// ring's segment, min(1 MiB, n/p), S = segments per block):
//   Mpi   the transport's exact allreduce (Config::exact_schedules; see cost_mpi), on the TCP
//         transport min( ceil(log2 p) (alpha + n beta + n gamma),          -- binomial / RD
//                        2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma ) -- Rabenseifner
//   Ring  max(2 (p-1)/p n beta/R, n/(pC) + n/(pD) + (p-1)/p n (1/C + 2/D + gamma),
//             2(p-1)(alpha + s beta/R) + (p-1) s (1/C + 1/D + gamma))
//         + s/C + s/D + (3p - 2) S kappa
//         (the segmented pipeline overlaps wire and codec; the third term is one segment's
//         chain through every hop, which bounds the time when a block has few segments;
//         kappa: fixed cost of one codec call). Until 2026-12 the chain's wire part was added
//         to the wire term instead, which counted the wire twice for n <= p MiB: at p = 4 on
//         the emulated 1 Gbit/s cluster the model then chose RD for gradient-like data
//         (ratio 3.6) from 256 KiB to 4 MiB, where the ring ran 1.5-2.0x faster
//         (benchmarks/allreduce_crossover.py).
//         Integer hop (Config::integer_ring): the codec term is n/(pC) + (p-1)/p n (1/C + 1/D)
//         + n/D (p-1 hops that unpack and pack, measured to cost about a decode plus an
//         encode; no float add, no separate allgather compression; p decodes).
//   C and D scale with Config::threads (chunks coded in parallel; the integer hop codes that many
//   segments in parallel instead), or with Config::model_threads when set (the backend's agreed
//   smallest count: the choice must not differ between ranks).
//   RD    (L + 2f) alpha + L n (beta/R + 1/C + 2/D + gamma) + f n (beta/R + 1/C + 1/D + gamma)
//         + f n (2 beta/R + 2/D) + (3L + 4f) kappa
//   HD    (halving-doubling, only from p' >= 32: see cost_hd)
//         max(2 (p'-1)/p' n beta/R, (p'-1)/p' n (1/C + 2/D + gamma) + n/(p'C) + n/(p'D))
//         + 2L (alpha + s' (1/C + beta/R + 1/D)) + f (2 alpha + n (2 beta/R + 1/C + 2/D + gamma))
//         + 3 (n / s') kappa, s' = min(1 MiB, n/p')
// The cheapest wins (ties go to Mpi, then the ring), except that Mpi also wins unless a
// compressed schedule is kExactPreference = 1.1x faster: small messages -> Mpi (compression
// cannot pay for its fixed costs), medium -> RecursiveDoubling (log p latency terms), large ->
// Ring (bandwidth-optimal), or HalvingDoubling from 32 ranks (bandwidth-optimal in 2 log p'
// rounds).
// eb == 0 means lossless streams (ratio ~1), where compression never pays: Mpi.
//
// The GPU allreduce's Auto is an untuned first guess (calibrate on a GPU cluster): recursive
// doubling while a rank's block is below 1 MiB (whole-buffer rounds keep the GPU busy, log p
// latency terms), the ring above.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "collectives.h"
#include "toolkit/schedules.h"

namespace zccl::coll {

namespace {

using toolkit::log2_exact;
using toolkit::pow2_floor;

struct CostModel {
  double alpha = 25e-6;          // s per message (latency; Config::link_latency_us)
  double beta = 1.0 / 1.25e8;    // s per byte on the wire (1 Gb/s; Config::link_gbps)
  double gamma = 1.0 / 5e9;      // s per byte of elementwise reduction
  double compress = 3e9;         // bytes/s, one core, pipelined (measured on fZ-light)
  double decompress = 4e9;       // bytes/s, one core
  double ratio = kAssumedRatio;  // compression ratio (Config::model_ratio replaces it)
  double kappa = 5e-6;           // s of fixed cost per compress/decompress call
};

constexpr CostModel kModel{};

// The exact allreduce of the transport (ExactSchedules). BandwidthOptimal: the better of a
// binomial reduce + broadcast and Rabenseifner's reduce-scatter + allgather. OpenMpiNbc: what
// libnbc's MPI_Iallreduce runs: the binomial reduce + broadcast (2 ceil(log2 p) rounds of the
// whole vector) below 4 ranks or 64 KiB, else Rabenseifner's, whose ranks beyond the largest
// power of two p' first hand their whole vector to a partner and get the result back (2 more
// whole-vector transfers). At p = 3 and 1 Gbit/s the binomial form is why zccl's ring of
// incompressible data (raw chunks) beat it 2.1-2.8x at 1-16 MiB (benchmarks/auto_ratio.py).
double cost_mpi(double n, int p, const CostModel& m, transport::ExactSchedules exact) {
  const double lp = std::log2(static_cast<double>(p));
  const double rounds = std::ceil(lp);
  if (exact == transport::ExactSchedules::OpenMpiNbc) {
    constexpr double kBinomialBelowBytes = 65536;
    if (p < 4 || n < kBinomialBelowBytes) {
      return 2 * rounds * (m.alpha + n * m.beta) + rounds * n * m.gamma;
    }
    const int pp = pow2_floor(p);
    const double frac = (pp - 1.0) / pp;
    const double fold = p > pp ? 2 * (m.alpha + n * m.beta) + n * m.gamma : 0.0;
    return 2 * log2_exact(pp) * m.alpha + 2 * frac * n * m.beta + frac * n * m.gamma + fold;
  }
  const double tree = rounds * (m.alpha + n * m.beta + n * m.gamma);
  const double frac = (p - 1.0) / p;
  const double raben = 2 * lp * m.alpha + 2 * frac * n * m.beta + frac * n * m.gamma;
  return std::min(tree, raben);
}

// Bytes the busiest link of the transport's exact broadcast carries, per byte of the payload:
// 1 for a pipelined chain (BandwidthOptimal); libnbc's MPI_Ibcast sends p - 1 copies from the
// root up to 4 ranks and ceil(log2 p) down its binomial tree beyond (OpenMpiNbc).
double exact_bcast_factor(int p, transport::ExactSchedules exact) {
  if (exact != transport::ExactSchedules::OpenMpiNbc) return 1.0;
  return p <= 4 ? p - 1.0 : std::ceil(std::log2(static_cast<double>(p)));
}

// The model with the codec's throughput scaled by the compression threads of a call.
CostModel with_threads(const CostModel& m, int threads) {
  CostModel t = m;
  t.compress *= std::max(1, threads);
  t.decompress *= std::max(1, threads);
  return t;
}

double cost_ring(double n, int p, double ratio, const CostModel& m, bool integer_hop) {
  const double frac = (p - 1.0) / p;
  constexpr double kSegment = 1 << 20;  // RingSegments' default segment, in bytes
  const double seg = std::min(kSegment, n / p);
  const double segments = std::max(1.0, std::ceil(n / p / kSegment));
  const double wire = 2 * frac * n * m.beta / ratio;
  const double codec =
      integer_hop ? n / p / m.compress + frac * n * (1 / m.compress + 1 / m.decompress) +
                        n / m.decompress
                  : n / p / m.compress + n / p / m.decompress +
                        frac * n * (1 / m.compress + 2 / m.decompress + m.gamma);
  // The dependency chain: a segment crosses 2(p-1) hops, each a message, and each of the
  // reduce-scatter's p-1 codes it (decode, add, encode) before it moves on. With one segment
  // per block (n <= p MiB) every link waits for that chain between its steps; with several, a
  // link sends its other segments meanwhile and the wire or the codec bounds the time.
  const double hop = seg * (integer_hop ? 1 / m.compress + 1 / m.decompress
                                        : 1 / m.compress + 1 / m.decompress + m.gamma);
  const double chain = 2 * (p - 1) * (m.alpha + seg * m.beta / ratio) + (p - 1) * hop;
  return std::max({wire, codec, chain}) + seg / m.compress + seg / m.decompress +
         (3.0 * p - 2) * segments * m.kappa;
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

// Halving-doubling (allreduce_halving_doubling.cpp): the ring's wire and codec work in 2 log2 p'
// rounds, each adding about one segment's compress + transfer + decode of pipeline fill (only
// two consecutive halving rounds overlap), plus the fold's whole-buffer transfer in and out
// when p is not a power of two.
double cost_hd(double n, int p, double ratio, const CostModel& m) {
  const int pp = pow2_floor(p);
  const double L = log2_exact(pp), f = p > pp ? 1.0 : 0.0;
  const double frac = (pp - 1.0) / pp;
  constexpr double kSegment = 1 << 20;
  const double seg = std::min(kSegment, n / pp);
  const double wire = 2 * frac * n * m.beta / ratio;
  const double codec = frac * n * (1 / m.compress + 2 / m.decompress + m.gamma) +
                       n / pp / m.compress + n / pp / m.decompress;
  const double fold = f * (2 * m.alpha + n * (2 * m.beta / ratio + 1 / m.compress +
                                              2 / m.decompress + m.gamma));
  const double fill =
      2 * L * (m.alpha + seg * (1 / m.compress + m.beta / ratio + 1 / m.decompress));
  return std::max(wire, codec) + fill + fold + 3 * std::max(1.0, n / seg) * m.kappa;
}

// A lossy reduction is chosen only when the model finds it this much faster than the exact one:
// within that margin the exact result is worth more than the model's precision. It is what
// keeps data that does not compress exact (at a ratio of 1 the ring overlaps the sum's
// arithmetic with the wire and models a few per cent faster than a bandwidth-optimal exact
// allreduce; on the emulated 1 Gbit/s cluster, incompressible data at p = 4, the ring took
// 0.97-1.03x the exact path's time at 1-16 MiB, benchmarks/auto_ratio.py), while Open MPI's
// binomial schedule at 3 ranks, which the ring of raw chunks beat 2.1-2.8x there, still loses.
constexpr double kExactPreference = 1.1;

// Halving-doubling competes in Auto only from this many ranks (the power-of-two part): in the
// SimGrid runs at 100 Gbit/s (benchmarks/simgrid/codec_threads.py) it beat the ring at 64 hosts,
// where the ring's 126 steps are latency-bound, but not at 16, where the codec bounds both and
// the ring overlaps its two stages better.
constexpr int kHalvingDoublingMinRanks = 32;

// The model of a call: the configuration's network, the codec scaled by the model's threads.
CostModel model_for(const Config& cfg) {
  CostModel m = kModel;
  m.alpha = cfg.link_latency_us * 1e-6;
  m.beta = 1.0 / (cfg.link_gbps * 1.25e8);
  m.ratio = assumed_ratio(cfg);
  return with_threads(m, cfg.model_threads > 0 ? cfg.model_threads : cfg.threads);
}

// Nothing to send, or too little to pay for the codec.
bool too_small(size_t bytes, const Config& cfg) {
  return bytes == 0 || bytes < cfg.min_compress_bytes;
}

// The GPU allreduce's Auto (see the top of this file).
Algorithm choose_gpu_allreduce(size_t bytes, int p, const Config& cfg) {
  if (cfg.error_bound == 0.0) return Algorithm::Mpi;
  constexpr size_t kRingBlockBytes = size_t{1} << 20;  // per-rank block where the ring starts
  return bytes / static_cast<size_t>(std::max(p, 1)) < kRingBlockBytes
             ? Algorithm::RecursiveDoubling
             : Algorithm::Ring;
}

Algorithm reduction_algorithm(Collective c, size_t bytes, int p, const Config& cfg,
                              Device device) {
  const Algorithm asked = cfg.algorithm;
  if (device == Device::Cuda && c == Collective::AllReduce) {
    if (asked == Algorithm::Auto) return choose_gpu_allreduce(bytes, p, cfg);
    // No GPU halving-doubling or CprP2P allreduce: the ring.
    return asked == Algorithm::CprP2P || asked == Algorithm::HalvingDoubling ? Algorithm::Ring
                                                                             : asked;
  }
  if (c == Collective::ReduceScatter) {  // no recursive-doubling reduce-scatter: the ring
    if (asked == Algorithm::Auto) {
      return choose_allreduce(bytes, p, cfg) == Algorithm::Mpi ? Algorithm::Mpi : Algorithm::Ring;
    }
    const bool no_rs = asked == Algorithm::RecursiveDoubling || asked == Algorithm::HalvingDoubling;
    return no_rs ? Algorithm::Ring : asked;
  }
  const Algorithm chosen = asked == Algorithm::Auto ? choose_allreduce(bytes, p, cfg) : asked;
  // Reduce has no halving-doubling form of its own: the ring (reduce-scatter + gather).
  return c == Collective::Reduce && chosen == Algorithm::HalvingDoubling ? Algorithm::Ring : chosen;
}

}  // namespace

bool may_compress(size_t bytes, const Config& cfg) {
  return cfg.algorithm != Algorithm::Mpi && !too_small(bytes, cfg);
}

Route route(Collective c, size_t bytes, int p, const Config& cfg, Device device) {
  // One rank moves nothing: the CPU collectives hand that to MPI, the GPU ones do it themselves.
  const bool alone = p == 1 && device == Device::Cpu;
  if (alone || !may_compress(bytes, cfg)) {
    return {false, Algorithm::Mpi};
  }
  Algorithm algorithm = Algorithm::Auto;
  switch (c) {
    case Collective::AllReduce:
    case Collective::ReduceScatter:
    case Collective::Reduce:
      algorithm = reduction_algorithm(c, bytes, p, cfg, device);
      break;
    case Collective::AllGather:
      algorithm = cfg.algorithm == Algorithm::CprP2P && device == Device::Cpu ? Algorithm::CprP2P
                                                                             : Algorithm::Ring;
      break;
    case Collective::Broadcast:
    case Collective::Gather:
    case Collective::Scatter:
    case Collective::AllToAll:
      algorithm = cfg.algorithm == Algorithm::CprP2P && device == Device::Cpu ? Algorithm::CprP2P
                                                                             : Algorithm::Auto;
      break;
    default:
      throw std::invalid_argument("zccl: route: unknown collective code " +
                                  std::to_string(static_cast<int>(c)));
  }
  if (!compression_pays(c, p, cfg, device)) algorithm = Algorithm::Mpi;
  return {algorithm != Algorithm::Mpi, algorithm};
}

// Per byte on the busiest rank's link (d = 1/decompress, e = 1/compress, p ranks): broadcast's
// pipelined chain runs at its slowest stage, max(e, d) (the root encodes, the others decode);
// scatter's root encodes the p-1 blocks it sends, e; gather's root decodes the p-1 it takes, d;
// all_gather's ring encodes one block and decodes p-1 for the p-1 it passes on,
// e/(p-1) + d; all_to_all's pairwise exchange encodes and decodes what it sends and takes,
// e + d. The codec term is compared with the exact collective's time per byte: beta, or beta
// times the copies an exact broadcast's busiest link carries (exact_bcast_factor: 2 at p = 3
// under Open MPI). The compression ratio is not weighed: the compressed bytes' wire time,
// beta / ratio, overlaps the codec's, and at a ratio of 1 (every chunk stored raw) zccl's
// schedules send what the exact ones send. Measured on the emulated 1 Gbit/s cluster with
// incompressible data at 3 ranks (benchmarks/auto_ratio.py), zccl's ring all_gather of raw
// chunks took 0.79-1.01x the time of Open MPI's exact one (p - 1 flows per link at once), its
// scatter 0.88-0.95x: going exact there would not pay.
bool compression_pays(Collective c, int p, const Config& cfg, Device device) {
  if (cfg.algorithm != Algorithm::Auto || device != Device::Cpu || p < 2) return true;
  const CostModel m = model_for(cfg);
  const double e = 1 / m.compress, d = 1 / m.decompress;
  double codec = 0.0;
  double exact = m.beta;  // the exact collective's time per byte
  switch (c) {
    case Collective::Broadcast:
      codec = std::max(e, d);
      exact *= exact_bcast_factor(p, cfg.exact_schedules);
      break;
    case Collective::Scatter: codec = e; break;
    case Collective::Gather: codec = d; break;
    case Collective::AllGather: codec = e / (p - 1) + d; break;
    case Collective::AllToAll: codec = e + d; break;
    default: return true;
  }
  return codec < exact;
}

uint64_t ratio_sample_values(uint64_t count) {
  constexpr uint64_t kFloor = 2048;
  constexpr uint64_t kCeiling = 65536;
  return std::min(count, std::clamp(count / 16, kFloor, kCeiling));
}

double assumed_ratio(const Config& cfg) {
  return cfg.model_ratio > 0.0 ? cfg.model_ratio : kAssumedRatio;
}

bool ratio_matters(Collective c, size_t bytes, int p, const Config& cfg, Device device) {
  if (cfg.algorithm != Algorithm::Auto || device != Device::Cpu || p < 2 ||
      !may_compress(bytes, cfg)) {
    return false;
  }
  Config low = cfg, high = cfg;
  low.model_ratio = 1.0;
  high.model_ratio = kRatioCeiling;
  const Route a = route(c, bytes, p, low, device), b = route(c, bytes, p, high, device);
  return a.compressed != b.compressed || a.algorithm != b.algorithm;
}

Algorithm choose_allreduce(size_t bytes, int p, const Config& cfg) {
  if (p == 1 || too_small(bytes, cfg) || cfg.error_bound == 0.0) return Algorithm::Mpi;
  const double n = static_cast<double>(bytes);
  const CostModel m = model_for(cfg);
  const double mpi = cost_mpi(n, p, m, cfg.exact_schedules);
  const double ring = cost_ring(n, p, m.ratio, m, cfg.integer_ring);
  const double rd = cost_rd(n, p, m.ratio, m);
  const bool hd_competes = pow2_floor(p) >= kHalvingDoublingMinRanks;
  const double hd = hd_competes ? cost_hd(n, p, m.ratio, m) : ring;
  if (mpi <= kExactPreference * std::min({ring, rd, hd})) return Algorithm::Mpi;
  if (hd < ring && hd < rd) return Algorithm::HalvingDoubling;
  return rd < ring ? Algorithm::RecursiveDoubling : Algorithm::Ring;
}

double allreduce_cost(Algorithm a, size_t bytes, int p, const Config& cfg) {
  const double n = static_cast<double>(bytes);
  const CostModel m = model_for(cfg);
  switch (a) {
    case Algorithm::Mpi: return cost_mpi(n, p, m, cfg.exact_schedules);
    case Algorithm::Ring: return cost_ring(n, p, m.ratio, m, cfg.integer_ring);
    case Algorithm::RecursiveDoubling: return cost_rd(n, p, m.ratio, m);
    case Algorithm::HalvingDoubling: return cost_hd(n, p, m.ratio, m);
    default:
      // (algorithm_name lives in choose.cpp, which the GPU programs do not link)
      throw std::invalid_argument("zccl: allreduce_cost: no model of algorithm code " +
                                  std::to_string(static_cast<int>(a)) +
                                  " (only mpi, ring, recursive_doubling and halving_doubling)");
  }
}

}  // namespace zccl::coll
