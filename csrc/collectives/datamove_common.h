// What only the data-movement collectives share (allgather_ring.cpp, broadcast_pipelined.cpp,
// scatter_pipelined.cpp, gather_binomial.cpp, alltoallv_pairwise.cpp): the MPI types of their
// exact path, relaying that survives codec errors, exact copies of own blocks, and the segmented
// pipelines' plan, buffers and polling. Timing, buffers, the codec, the binomial tree and the
// argument checks come from the toolkit. Torch-free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectives.h"
#include "wire_types.h"
#include "toolkit/buffers.h"
#include "toolkit/codec.h"
#include "toolkit/schedules.h"
#include "toolkit/timing.h"
#include "toolkit/validate.h"
#include "toolkit/wait.h"

namespace zccl::coll::detail {


// Codec calls whose errors wait until the relaying is done (toolkit/codec.h).
using toolkit::run_recording;

// memmove of `bytes` unless src == dst (in-place calls): own blocks are copied exactly.
void copy_exact(const void* src, void* dst, size_t bytes);

// ---- Segmented pipelines (broadcast_pipelined.cpp, scatter_pipelined.cpp) ----

// The first message of a pipelined call, sent by the data's source (the root) before any data.
// Receivers size their buffers and follow the source's segmentation from it, so ranks never have
// to agree on segmentation in advance (only the root's count and Config decide it), and a rank
// whose own count differs still relays and drains every segment before it reports the mismatch:
// nobody is left waiting. Segment k holds values [k * seg_values, min(count, (k+1) * seg_values))
// and is one independent fZ-light stream, sent as frames (see send_frames).
struct SegmentPlan {
  uint64_t count = 0;         // values the source sends (>= 1)
  uint64_t seg_values = 0;    // values per segment, in [1, count]; the last may hold fewer
  uint64_t seg_capacity = 0;  // worst-case stream bytes of one segment: the receive capacity
  uint64_t frame_bytes = 0;   // every frame of a segment but its last holds exactly this many

  size_t segments() const { return static_cast<size_t>((count + seg_values - 1) / seg_values); }
  size_t offset(size_t k) const { return static_cast<size_t>(k * seg_values); }
  size_t values(size_t k) const {
    const uint64_t lo = k * seg_values;
    return static_cast<size_t>(count - lo < seg_values ? count - lo : seg_values);
  }
};
static_assert(sizeof(SegmentPlan) == 4 * sizeof(uint64_t), "sent as four uint64 values");

// The segmentation of `count` values (count >= 1) whose source feeds `streams` series of
// segments (broadcast: 1; scatter: p - 1 destinations) over `seg_hops` store-and-forward hops
// each, or -- as one segment per series -- over `whole_hops` hops (broadcast: the binomial
// tree's depth). cfg.segment_bytes > 0 forces segment_bytes / dtype size values; otherwise an
// alpha-beta model with compression terms picks the fastest of one segment (up to 4 MiB) and
// balanced, chunk-aligned segments of at most 64 KiB .. 1 MiB each (see datamove_common.cpp).
// Frames: cfg.frame_bytes or the default.
SegmentPlan plan_segments(size_t count, DType dt, const Config& cfg, int streams, int seg_hops,
                          int whole_hops);

// Throws "size mismatch across ranks: ... malformed segment header" unless `plan` (received
// from rank `from`) is one plan_segments could have made for some dtype and chunk length. Keeps
// a corrupted header from sizing buffers or loops.
void check_plan(const SegmentPlan& plan, const char* op, int from);

// `slots` buffers of `capacity` bytes each for segments in flight, in the per-thread workspace
// slot kSlotSegments (kept between calls: fresh memory costs a page fault per 4 KiB on first
// touch). A thread must not use two SegmentBuffers at once (the pipelined collectives never
// nest).
class SegmentBuffers {
 public:
  SegmentBuffers(size_t slots, size_t capacity);
  uint8_t* slot(size_t i) const { return base_ + i * capacity_; }
  size_t capacity() const { return capacity_; }

 private:
  uint8_t* base_;
  size_t capacity_;
};

// Posts the non-blocking sends of one segment's `len` bytes to `peer` on `tag` as frames of
// `frame` bytes: floor(len / frame) full frames and a last one of len % frame bytes (possibly
// empty), so the receiver knows the end without a size message. Appends the requests to `out`
// and returns the bytes sent.
size_t send_frames(const Comm& comm, const uint8_t* data, size_t len, int peer, int tag,
                   size_t frame, std::vector<transport::Request>& out);

// True when every request in `reqs` completed (test() of each; then `reqs` is cleared).
bool all_done(const Comm& comm, std::vector<transport::Request>& reqs);
// The bytes of the requests still active (what waiting for all of them waits for).
size_t active_bytes(const std::vector<transport::Request>& reqs);

// Receives one segment sent by send_frames into [buf, buf + capacity), one frame at a time (a
// frame that arrives before its receive is posted waits in MPI's unexpected queue: frames are
// small). A segment larger than `capacity` fails the receive (MPI_ERR_TRUNCATE).
class FrameReceiver {
 public:
  void start(const Comm& comm, uint8_t* buf, size_t capacity, int peer, int tag, size_t frame);
  // Polls; runs on_frame(data, bytes) for every frame that arrived (a relay forwards it at
  // once), and returns true once the segment is complete (bytes() is then its length).
  template <class OnFrame>
  bool poll(const Comm& comm, OnFrame&& on_frame) {
    size_t n = 0;
    while (!done_ && comm.test(req_, &n)) {
      on_frame(buf_ + got_, n);
      got_ += n;
      if (n < frame_) {
        done_ = true;
      } else {
        req_ = comm.irecv(buf_ + got_, std::min(frame_, capacity_ - got_), peer_, tag_);
      }
    }
    return done_;
  }
  size_t bytes() const { return got_; }
  bool done() const { return done_; }

 private:
  transport::Request req_;
  uint8_t* buf_ = nullptr;
  size_t capacity_ = 0, frame_ = 1, got_ = 0;
  int peer_ = -1, tag_ = -1;
  bool done_ = true;
};

// Segment buffers (and receives) in flight per rank, and tags per call: segment k of a series
// travels on tag_base + k % kSegmentWindow, so a rank never has two receives for one (peer, tag)
// outstanding.
inline constexpr size_t kSegmentWindow = 8;
inline int segment_tag(int tag_base, size_t k) {
  return tag_base + static_cast<int>(k % kSegmentWindow);
}

// The sending end of a pipelined call: for each series i in [0, series), compresses the segments
// of the plan.count values at src_of(i) (dtype dt, cfg) one after the other and sends each to
// dest_of(i) as frames as soon as it is compressed, while earlier segments travel: at most
// kSegmentWindow segments in flight. MPI is polled between segments, not inside codec calls:
// eager frames sit in the socket buffers and move without MPI's help, while a poll that finds
// nothing to do may yield the core (Open MPI's mpi_yield_when_idle, set when ranks oversubscribe
// the cores) in the middle of the compression everyone waits for. On the 2-core test VM polling
// every 8 codec chunks made the root's compression ~2x slower in wall time and the collective
// no faster. Returns when every send completed. Adds to st (compression, bytes_sent).
// `sent`, when set, sees each segment's stream (series i, segment k) right after its sends were
// posted, while the stream is still valid (the broadcast root decodes its own values from it).
using SegmentSink = std::function<void(int, size_t, const uint8_t*, size_t)>;
void send_segments(const Comm& comm, const SegmentPlan& plan, int series,
                   const std::function<const uint8_t*(int)>& src_of,
                   const std::function<int(int)>& dest_of, int tag_base, DType dt,
                   const Config& cfg, Stats& st, const char* op, const SegmentSink& sent = {});

// The receiving end: receives plan.segments() segments from `from` (tags as above), forwards
// every frame to `to` as soon as it is seen (to >= 0: a relay), and runs decode(k, stream,
// bytes) for each complete segment k in order while the next segments arrive. Returns when every
// forward completed. A decode that throws a codec or size error does not stop the relaying and
// draining: the first such error is rethrown at the end (transport errors propagate at once).
void receive_segments(const Comm& comm, const SegmentPlan& plan, int from, int to, int tag_base,
                      Stats& st, const char* op,
                      const std::function<void(size_t, const uint8_t*, size_t)>& decode);

// The labelled wait-with-deadline of the toolkit (toolkit/wait.h).
using toolkit::wait_until;

}  // namespace zccl::coll::detail
