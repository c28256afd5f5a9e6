// What the data-movement collectives share (see datamove_common.h).
#include "datamove_common.h"


#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace zccl::coll::detail {

void copy_exact(const void* src, void* dst, size_t bytes) {
  if (src != dst && bytes > 0) std::memmove(dst, src, bytes);
}

// ---- Segmented pipelines ----

namespace {

// Cost model of a segmented pipeline: round numbers for the networks compression pays on
// (~1 Gb/s links) and fZ-light's single-core speed. alpha is the cost of one more segment on
// one hop as the emulated 1 Gb/s cluster shows it (wake-ups of oversubscribed ranks, codec
// calls, messages): with it the model picks what was fastest there at p = 4 -- one stream down
// the tree for 1 MB (0.5 ms vs 1.1 ms for four 256 KiB segments), ~0.5-1 MiB segments for 2 MB
// and more (2 MB: 1.6 ms vs 4.2 ms for one stream; 64 MB: 1 MiB segments 55 ms, 256 KiB .. 512
// KiB and 2 MiB 61-74 ms). The ratio is a conservative guess for lossy bounds (1 when eb == 0:
// lossless streams of float data barely shrink). Only the relative cost of the candidates
// matters.
struct PipeModel {
  double alpha = 300e-6;      // s per segment and hop
  double beta = 1.0 / 1.2e8;  // s per byte on the wire
  double compress = 2.5e9;    // bytes/s, one core
  double decompress = 5e9;    // bytes/s, one core
  double kappa = 10e-6;       // s of fixed cost per codec call (stream header, table, checks)
  double ratio = 8.0;
};

// m segments of s bytes from one source through `hops` store-and-forward hops: the first is
// compressed, crosses every hop and is decompressed; the others follow at the pace of the
// slowest stage (the compressor, a link, or a relay decompressing while it forwards).
double pipeline_seconds(const PipeModel& pm, double s, double m, int hops) {
  const double c = s / pm.compress + pm.kappa;
  const double w = pm.alpha + pm.beta * s / pm.ratio;
  const double d = s / pm.decompress + pm.kappa;
  return c + hops * w + d + (m - 1) * std::max({c, w, d});
}

// Candidate segment sizes: 64 KiB .. 1 MiB of uncompressed data. Below 64 KiB the per-segment
// cost dominates; above 1 MiB the pipeline's fill (one segment compressed, p - 1 hops, one
// decompressed) grows while the per-segment savings are already small, and the buffers in
// flight (kept per thread) grow with it. One unsegmented stream is a candidate up to
// kMaxWholeBytes only: beyond, it would hold too much memory in flight and overlap nothing.
constexpr size_t kMinSegmentBytes = size_t{1} << 16;
constexpr size_t kMaxSegmentBytes = size_t{1} << 20;
constexpr size_t kMaxWholeBytes = size_t{4} << 20;
// Default frame: just under Open MPI's TCP eager limit (btl_tcp_eager_limit = 64 KiB including
// its ~100-byte headers). A larger message takes a rendezvous: the receiver's MPI must poll to
// answer, then the sender's to send the rest -- on a chain of ranks that compress, decompress or
// sleep between polls every link then idles for a round trip per message. Measured on the 1 Gb/s
// emulated cluster (4 ranks, chain, window of 8): 60 KB messages 122 MB/s, 120 KB 85 MB/s,
// 500 KB 41 MB/s.
constexpr size_t kDefaultFrameBytes = 63 * 1024;
// Largest count a plan may announce: keeps every byte computation far from overflow.
constexpr uint64_t kMaxPlanCount = uint64_t{1} << 56;

}  // namespace

SegmentPlan plan_segments(size_t count, DType dt, const Config& cfg, int streams, int seg_hops,
                          int whole_hops) {
  const size_t es = fz::dtype_size(dt);
  auto plan_of = [&](size_t seg) {
    SegmentPlan plan;
    plan.count = count;
    plan.seg_values = std::max<size_t>(1, std::min(seg, count));
    plan.seg_capacity = fz::max_compressed_size(dt, plan.seg_values, cfg.chunk_len);
    plan.frame_bytes = cfg.frame_bytes > 0 ? cfg.frame_bytes : kDefaultFrameBytes;
    return plan;
  };
  if (cfg.segment_bytes > 0) return plan_of(cfg.segment_bytes / es);
  PipeModel pm;
  if (cfg.error_bound == 0) pm.ratio = 1.0;
  const double n = static_cast<double>(count) * static_cast<double>(es);
  size_t best = count;
  double best_s = count * es <= kMaxWholeBytes ? pipeline_seconds(pm, n, streams, whole_hops)
                                               : std::numeric_limits<double>::infinity();
  for (size_t bytes = kMinSegmentBytes; bytes <= kMaxSegmentBytes; bytes *= 2) {
    // Balanced segments of at most ~`bytes` (a short last segment would cost a message for
    // little data), in whole chunks: a partial chunk inside the data would cost ratio.
    const size_t target = std::max<size_t>(1, bytes / es);
    const size_t want = (count + target - 1) / target;
    const size_t cl = cfg.chunk_len;
    const size_t seg = ((count + want - 1) / want + cl - 1) / cl * cl;
    if (seg >= count) continue;
    const double m = static_cast<double>((count + seg - 1) / seg);
    const double t = pipeline_seconds(pm, static_cast<double>(seg * es), streams * m, seg_hops);
    if (t < best_s) {
      best_s = t;
      best = seg;
    }
  }
  return plan_of(best);
}

void check_plan(const SegmentPlan& plan, const char* op, int from) {
  bool ok = plan.count >= 1 && plan.count <= kMaxPlanCount && plan.seg_values >= 1 &&
            plan.seg_values <= plan.count && plan.frame_bytes >= 1 &&
            plan.frame_bytes <= kMaxPlanCount;
  if (ok) {
    // Between the smallest and the largest worst case over dtypes and chunk lengths.
    const size_t lo = fz::max_compressed_size(DType::Float16, plan.seg_values, fz::kMaxChunkLen);
    const size_t hi = fz::max_compressed_size(DType::Float64, plan.seg_values, fz::kBlockLen);
    ok = plan.seg_capacity >= lo && plan.seg_capacity <= hi;
  }
  if (!ok) {
    toolkit::throw_size_mismatch(op, "malformed segment header from rank " + std::to_string(from) +
                                " (count " + std::to_string(plan.count) + ", segment " +
                                std::to_string(plan.seg_values) + " values, capacity " +
                                std::to_string(plan.seg_capacity) + " bytes, frames of " +
                                std::to_string(plan.frame_bytes) + " bytes)");
  }
}

SegmentBuffers::SegmentBuffers(size_t slots, size_t capacity) {
  // Slots start on 64-byte boundaries (cache lines; the codec reads headers with unaligned
  // loads anyway).
  constexpr size_t kAlign = 64;
  if (capacity > std::numeric_limits<size_t>::max() / 2 || slots == 0 ||
      (capacity + kAlign) > std::numeric_limits<size_t>::max() / slots) {
    throw std::length_error("zccl: segment buffers of " + std::to_string(slots) + " x " +
                            std::to_string(capacity) + " bytes overflow the address space");
  }
  capacity_ = (capacity + kAlign - 1) / kAlign * kAlign;
  base_ = toolkit::workspace_bytes(toolkit::kSlotSegments, slots * capacity_);
}

size_t send_frames(const Comm& comm, const uint8_t* data, size_t len, int peer, int tag,
                   size_t frame, std::vector<transport::Request>& out) {
  for (size_t off = 0;;) {
    const size_t n = std::min(frame, len - off);
    out.push_back(comm.isend(data + off, n, peer, tag));
    off += n;
    if (n < frame) return len;
  }
}

bool all_done(const Comm& comm, std::vector<transport::Request>& reqs) {
  for (transport::Request& r : reqs) {
    if (!comm.test(r)) return false;
  }
  reqs.clear();
  return true;
}

size_t active_bytes(const std::vector<transport::Request>& reqs) {
  size_t bytes = 0;
  for (const transport::Request& r : reqs) bytes += r.active() ? r.bytes : 0;
  return bytes;
}

void FrameReceiver::start(const Comm& comm, uint8_t* buf, size_t capacity, int peer, int tag,
                          size_t frame) {
  buf_ = buf;
  capacity_ = capacity;
  frame_ = frame;
  peer_ = peer;
  tag_ = tag;
  got_ = 0;
  done_ = false;
  req_ = comm.irecv(buf_, std::min(frame_, capacity_), peer_, tag_);
}

void send_segments(const Comm& comm, const SegmentPlan& plan, int series,
                   const std::function<const uint8_t*(int)>& src_of,
                   const std::function<int(int)>& dest_of, int tag_base, DType dt,
                   const Config& cfg, Stats& st, const char* op, const SegmentSink& sent) {
  const size_t m = plan.segments(), es = fz::dtype_size(dt);
  const size_t total = m * static_cast<size_t>(series);
  const size_t w = std::min(kSegmentWindow, total);
  const SegmentBuffers slots(w, static_cast<size_t>(plan.seg_capacity));
  std::vector<std::vector<transport::Request>> sends(w);  // after slots: destroyed first
  toolkit::Codec codec = toolkit::Codec::for_data(dt, cfg, st, op);
  size_t posted = 0;
  for (int i = 0; i < series; ++i) {
    const uint8_t* src = src_of(i);
    const int dest = dest_of(i);
    for (size_t k = 0; k < m; ++k) {
      // The buffer's previous segment must be out (after W segments in flight).
      std::vector<transport::Request>& slot_sends = sends[posted % w];
      uint8_t* buf = slots.slot(posted % w);
      wait_until(comm, [&] { return all_done(comm, slot_sends); }, op, "a segment send", dest,
                 active_bytes(slot_sends));
      const size_t len =
          codec.compress(src + plan.offset(k) * es, plan.values(k), buf, slots.capacity());
      st.bytes_sent += send_frames(comm, buf, len, dest, segment_tag(tag_base, k),
                                   static_cast<size_t>(plan.frame_bytes), slot_sends);
      if (sent) sent(i, k, buf, len);
      ++posted;
    }
  }
  for (auto& slot_sends : sends) {
    wait_until(comm, [&] { return all_done(comm, slot_sends); }, op, "a segment send",
               dest_of(series - 1), active_bytes(slot_sends));
  }
}

void receive_segments(const Comm& comm, const SegmentPlan& plan, int from, int to, int tag_base,
                      Stats& st, const char* op,
                      const std::function<void(size_t, const uint8_t*, size_t)>& decode) {
  const size_t m = plan.segments(), w = std::min(kSegmentWindow, m);
  const SegmentBuffers slots(w, static_cast<size_t>(plan.seg_capacity));
  // After slots: destroyed (cancelled) first.
  std::vector<FrameReceiver> recvs(w);
  std::vector<std::vector<transport::Request>> forwards(w);
  size_t posted = 0;     // receives started for segments [0, posted)
  size_t arrived = 0;    // segments [0, arrived) complete (and their frames forwarded)
  size_t processed = 0;  // segments [0, processed) decoded (or skipped after an error)
  // Polls the receives in segment order, forwarding each frame as soon as it is seen.
  auto receive = [&] {
    while (arrived < posted) {
      const size_t s = arrived % w, k = arrived;
      const bool complete = recvs[s].poll(comm, [&](const uint8_t* data, size_t n) {
        if (to < 0) return;
        forwards[s].push_back(comm.isend(data, n, to, segment_tag(tag_base, k)));
        st.bytes_sent += n;
      });
      if (!complete) return;
      ++arrived;
    }
  };
  // Segment j takes buffer j % w once segment j - w is decoded and its forwards completed.
  auto post = [&] {
    while (posted < m && posted < processed + w && all_done(comm, forwards[posted % w])) {
      const size_t s = posted % w;
      recvs[s].start(comm, slots.slot(s), slots.capacity(), from,
                     segment_tag(tag_base, posted), static_cast<size_t>(plan.frame_bytes));
      ++posted;
    }
  };
  std::exception_ptr error;
  post();
  for (size_t k = 0; k < m; ++k) {
    wait_until(
        comm,
        [&] {
          receive();
          post();
          return arrived > k;
        },
        op, "a segment", from, static_cast<size_t>(plan.seg_capacity));
    const size_t s = k % w;
    run_recording(error, [&] { decode(k, slots.slot(s), recvs[s].bytes()); });
    processed = k + 1;
    post();
  }
  for (auto& f : forwards) {
    wait_until(comm, [&] { return all_done(comm, f); }, op, "a segment forward", to,
               active_bytes(f));
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace zccl::coll::detail
