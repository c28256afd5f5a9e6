// Shared helpers of the computation framework: validation, layouts, the checked codec.
#include "compute_common.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

namespace zccl::coll::compute {

bool is_min_max(ReduceOp op) { return op == ReduceOp::Min || op == ReduceOp::Max; }

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Avg: return "AVG";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
  }
  return "unknown";
}


void validate(const char* fn, const void* buf, size_t count, DType dt, ReduceOp op,
              const Config& cfg) {
  const std::string where = std::string("zccl ") + fn + ": ";
  if (dt != DType::Float32 && dt != DType::Float64) {
    throw std::invalid_argument(where + "dtype must be float32 or float64 (code " +
                                std::to_string(static_cast<int>(dt)) + ")");
  }
  if (op != ReduceOp::Sum && op != ReduceOp::Avg && op != ReduceOp::Min && op != ReduceOp::Max) {
    throw std::invalid_argument(where + "unknown reduce op code " +
                                std::to_string(static_cast<int>(op)));
  }
  switch (cfg.algorithm) {
    case Algorithm::Auto:
    case Algorithm::Ring:
    case Algorithm::RecursiveDoubling:
    case Algorithm::Mpi:
    case Algorithm::CprP2P: break;
    default:
      throw std::invalid_argument(where + "unknown algorithm code " +
                                  std::to_string(static_cast<int>(cfg.algorithm)));
  }
  if (!std::isfinite(cfg.error_bound) || cfg.error_bound < 0) {
    throw std::invalid_argument(where + "error bound must be finite and >= 0, got " +
                                std::to_string(cfg.error_bound));
  }
  if (cfg.threads < 0) {
    throw std::invalid_argument(where + "threads must be >= 0, got " + std::to_string(cfg.threads));
  }
  if (cfg.chunk_len < fz::kBlockLen || cfg.chunk_len > fz::kMaxChunkLen ||
      cfg.chunk_len % fz::kBlockLen != 0) {
    throw std::invalid_argument(where + "chunk_len must be a multiple of " +
                                std::to_string(fz::kBlockLen) + " in [" +
                                std::to_string(fz::kBlockLen) + ", " +
                                std::to_string(fz::kMaxChunkLen) + "], got " +
                                std::to_string(cfg.chunk_len));
  }
  if (buf == nullptr && count > 0) {
    throw std::invalid_argument(where + "null buffer with count " + std::to_string(count));
  }
}

MPI_Datatype mpi_type(DType dt) { return dt == DType::Float32 ? MPI_FLOAT : MPI_DOUBLE; }

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
  }
  return MPI_SUM;
}

void add_stats(Stats& a, const Stats& b) {
  a.bytes_sent += b.bytes_sent;
  a.bytes_compressed += b.bytes_compressed;
  a.compress_seconds += b.compress_seconds;
  a.decompress_seconds += b.decompress_seconds;
}

int pow2_floor(int p) {
  int q = 1;
  while (q <= p / 2) q *= 2;
  return q;
}

int log2_exact(int p2) {
  int l = 0;
  while ((1 << l) < p2) ++l;
  return l;
}

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  if (abytes == 0 || bbytes == 0 || a == nullptr || b == nullptr) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}

namespace {
struct WorkBuffer {
  std::unique_ptr<uint8_t[]> data;
  size_t capacity = 0;
};
thread_local WorkBuffer t_workspace[kSlotCount];
}  // namespace

uint8_t* workspace_bytes(Slot slot, size_t bytes) {
  WorkBuffer& b = t_workspace[slot];
  if (b.capacity < bytes || !b.data) {
    constexpr size_t kGrain = size_t{1} << 16;  // round up: sizes vary a little between calls
    const size_t cap = std::max(bytes, b.capacity + b.capacity / 4);
    const size_t rounded = (std::max<size_t>(cap, 1) + kGrain - 1) / kGrain * kGrain;
    b.data.reset();  // release before allocating: never hold both
    b.data.reset(new uint8_t[rounded]);
    b.capacity = rounded;
  }
  return b.data.get();
}

Blocks Blocks::balanced(size_t total, int p) {
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

Blocks Blocks::padded(size_t total, int p) {
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

RingSegments RingSegments::plan(const Blocks& blocks, DType dt, const Config& cfg) {
  // ~1 MiB of input per segment: its compressed form (tens to hundreds of KB) keeps a 1-10 Gbit/s
  // link busy for 0.1-1 ms, long against MPI's per-message cost, short against a 16 MB block.
  constexpr size_t kDefaultSegmentBytes = size_t{1} << 20;
  // Bounds the number of messages in flight (the allgather stage posts (p-1) * per_block).
  constexpr size_t kMaxSegmentsPerBlock = 1024;
  const size_t es = fz::dtype_size(dt);
  const size_t target = cfg.segment_bytes > 0 ? cfg.segment_bytes : kDefaultSegmentBytes;
  size_t seg = std::max<size_t>(1, target / es);
  if (seg >= cfg.chunk_len) seg -= seg % cfg.chunk_len;  // whole chunks: no short chunk per segment
  const size_t longest = std::max<size_t>(1, blocks.max_count);
  seg = std::max(seg, (longest + kMaxSegmentsPerBlock - 1) / kMaxSegmentsPerBlock);
  seg = std::min(seg, longest);
  RingSegments plan;
  plan.seg_len = seg;
  plan.per_block = static_cast<int>((longest + seg - 1) / seg);
  return plan;
}

void poll_first(const Comm& comm, std::vector<Pending>& pending) {
  for (auto& p : pending) {
    if (!p.done) {
      p.poll(comm);
      return;
    }
  }
}

void finish_all(const Comm& comm, std::vector<Pending>& pending) {
  for (auto& p : pending) p.finish(comm);
}

double split_bound(double eb, int k) {
  if (k <= 1) return eb;
  return eb / k * (1.0 - std::ldexp(1.0, -50));
}

Config with_error_bound(const Config& cfg, double eb) {
  Config c = cfg;
  c.error_bound = eb;
  c.algorithm = Algorithm::Auto;
  c.min_compress_bytes = 0;  // the caller already decided to compress
  return c;
}

namespace {

// MPI_Test is not free: with Open MPI's TCP transport each call polls the sockets, and an
// oversubscribed run (mpi_yield_when_idle) gives the core away whenever nothing moved. Polling
// after every chunk (~20 KB, a few microseconds of compression) made the ring's compression about
// 2.5x slower on the emulated 1 Gbit/s cluster; polling at most every kPollInterval keeps the
// transfers fed (a 1 Gbit/s link drains ~6 KB in 50 us, a 10 Gbit/s one ~60 KB) at a negligible
// cost. The last chunk always polls, so a transfer that can finish is seen finishing.
constexpr double kPollIntervalSeconds = 50e-6;

fz::Progress throttled(const fz::Progress& inner) {
  return [&inner, last = Clock()](uint64_t done, uint64_t total) mutable {
    if (done == total || last.seconds() >= kPollIntervalSeconds) {
      inner(done, total);
      last = Clock();
    }
  };
}

}  // namespace

DType Codec::wire_dtype(DType dt, const Config& cfg) {
  if (cfg.wire_half == DType::Float32) return dt;
  if (dt != DType::Float32 || (cfg.wire_half != DType::Float16 && cfg.wire_half != DType::BFloat16)) {
    throw std::invalid_argument("zccl: wire_half needs float32 data and a float16/bfloat16 wire type");
  }
  return cfg.wire_half;
}

size_t Codec::capacity(size_t n) const { return fz::max_compressed_size(wire_, n, cfg_.chunk_len); }

size_t Codec::compress(const void* src, size_t n, uint8_t* dst, size_t cap,
                       const fz::Progress* progress) {
  const Clock clock;
  fz::CompressParams params;
  params.error_bound = eb_;
  params.chunk_len = cfg_.chunk_len;
  params.threads = cfg_.threads;
  if (wire_ != dt_) {  // float32 partial results travel as half streams
    uint8_t* half = workspace_bytes(kSlotWireOut, n * fz::dtype_size(wire_));
    fz::narrow_to_half(static_cast<const float*>(src), wire_, n, half);
    src = half;
  }
  // The pipelined path calls the hook from this thread only, so the throttle needs no lock.
  const std::optional<fz::Progress> hook =
      progress != nullptr ? std::optional<fz::Progress>(throttled(*progress)) : std::nullopt;
  const size_t bytes = fz::compress(src, wire_, n, params, dst, cap, hook ? &*hook : nullptr);
  stats_.compress_seconds += clock.seconds();
  stats_.bytes_compressed += n * fz::dtype_size(wire_);
  return bytes;
}

void Codec::decompress(const uint8_t* src, size_t len, void* dst, size_t expected, int peer,
                       const fz::Progress* progress) {
  const Clock clock;
  const fz::StreamInfo info = fz::read_info(src, len);
  if (info.count != expected || info.dtype != wire_) {
    throw std::runtime_error(
        "zccl: size mismatch across ranks: expected a " + std::string(fz::dtype_name(wire_)) +
        " stream of " + std::to_string(expected) + " values from rank " + std::to_string(peer) +
        ", received " + std::string(fz::dtype_name(info.dtype)) + " x " +
        std::to_string(info.count) +
        " (do all ranks call the collective with the same count, dtype and op?)");
  }
  const std::optional<fz::Progress> hook =
      progress != nullptr ? std::optional<fz::Progress>(throttled(*progress)) : std::nullopt;
  if (wire_ == dt_) {
    fz::decompress(src, len, dst, expected, cfg_.threads, hook ? &*hook : nullptr);
  } else {
    uint8_t* half = workspace_bytes(kSlotWireIn, expected * fz::dtype_size(wire_));
    fz::decompress(src, len, half, expected, cfg_.threads, hook ? &*hook : nullptr);
    fz::widen_half(half, wire_, expected, static_cast<float*>(dst));
  }
  stats_.decompress_seconds += clock.seconds();
}

}  // namespace zccl::coll::compute
