// Shared helpers of the computation framework (see compute_common.h).
#include "compute_common.h"

#include <algorithm>
#include <cmath>

namespace zccl::coll::compute {

bool is_min_max(ReduceOp op) { return op == ReduceOp::Min || op == ReduceOp::Max; }

void add_stats(Stats& a, const Stats& b) {
  a.bytes_sent += b.bytes_sent;
  a.bytes_compressed += b.bytes_compressed;
  a.compress_seconds += b.compress_seconds;
  a.decompress_seconds += b.decompress_seconds;
}

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  if (abytes == 0 || bbytes == 0 || a == nullptr || b == nullptr) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}

namespace {

// Values per ring segment when the longest block holds `longest` values: ~1 MiB of input (or
// cfg.segment_bytes), whole chunks, at most kMaxSegmentsPerBlock per block, at most a block.
size_t segment_values(size_t longest, DType dt, const Config& cfg) {
  // ~1 MiB of input per segment: its compressed form (tens to hundreds of KB) keeps a 1-10 Gbit/s
  // link busy for 0.1-1 ms, long against MPI's per-message cost, short against a 16 MB block.
  constexpr size_t kDefaultSegmentBytes = size_t{1} << 20;
  // Bounds the number of messages in flight (the allgather stage posts (p-1) * per_block).
  constexpr size_t kMaxSegmentsPerBlock = 1024;
  const size_t es = fz::dtype_size(dt);
  const size_t target = cfg.segment_bytes > 0 ? cfg.segment_bytes : kDefaultSegmentBytes;
  size_t seg = std::max<size_t>(1, target / es);
  if (seg >= cfg.chunk_len) seg -= seg % cfg.chunk_len;  // whole chunks: no short chunk per segment
  longest = std::max<size_t>(1, longest);
  seg = std::max(seg, (longest + kMaxSegmentsPerBlock - 1) / kMaxSegmentsPerBlock);
  return std::min(seg, longest);
}

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

}  // namespace

RingSegments RingSegments::contiguous(const Blocks& blocks, DType dt, const Config& cfg) {
  RingSegments plan;
  plan.offset_ = blocks.offset;
  plan.count_ = blocks.count;
  plan.seg_len = segment_values(blocks.max_count, dt, cfg);
  plan.per_block = static_cast<int>(ceil_div(std::max<size_t>(1, blocks.max_count), plan.seg_len));
  return plan;
}

RingSegments RingSegments::interleaved(size_t total, int p, DType dt, const Config& cfg,
                                       int min_per_block) {
  RingSegments plan;
  plan.total_ = total;
  plan.p_ = p;
  const size_t np = static_cast<size_t>(p);
  const size_t longest = ceil_div(total, np);
  plan.seg_len = segment_values(longest, dt, cfg);
  if (cfg.segment_bytes == 0 && min_per_block > 1 && ceil_div(longest, plan.seg_len) <
                                                         static_cast<size_t>(min_per_block)) {
    // Smaller segments, whole 32-value code blocks, none below kMinLaneSegmentBytes.
    constexpr size_t kMinLaneSegmentBytes = size_t{64} << 10;
    constexpr size_t kCodeBlock = 32;
    const size_t floor_len = kMinLaneSegmentBytes / fz::dtype_size(dt);
    size_t len = ceil_div(longest, static_cast<size_t>(min_per_block));
    len = ceil_div(len, kCodeBlock) * kCodeBlock;
    plan.seg_len = std::min(plan.seg_len, std::max(len, floor_len));
  }
  const size_t segments = ceil_div(total, plan.seg_len);
  plan.per_block = static_cast<int>(std::max<size_t>(1, ceil_div(segments, np)));
  return plan;
}

size_t RingSegments::begin(int b, int j) const {
  const size_t jj = static_cast<size_t>(j);
  if (is_interleaved()) {
    return std::min(total_, (jj * static_cast<size_t>(p_) + static_cast<size_t>(b)) * seg_len);
  }
  const size_t bb = static_cast<size_t>(b);
  return offset_[bb] + std::min(count_[bb], jj * seg_len);
}

size_t RingSegments::len(int b, int j) const {
  const size_t start = begin(b, j);
  const size_t end = is_interleaved() ? total_ : offset_[static_cast<size_t>(b)] +
                                                     count_[static_cast<size_t>(b)];
  return std::min(seg_len, end - start);
}

ParitySlots::ParitySlots(Comm& comm_, int p, int S_, size_t cap_, int prev_, int tag_)
    : comm(comm_), S(S_), prev(prev_), tag(tag_), cap(cap_),
      tx_area(workspace_bytes(kSlotSend0, 2 * static_cast<size_t>(S_) * cap_)),
      rx_area(workspace_bytes(kSlotRecv, 2 * static_cast<size_t>(S_) * cap_)),
      tx(2 * static_cast<size_t>(S_)), rx(2 * static_cast<size_t>(S_)) {
  for (int s = 0; s < std::min(2, p - 1); ++s) {
    for (int j = 0; j < S; ++j) post_recv(s, j);
  }
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

}  // namespace zccl::coll::compute
