// What only the computation-framework algorithms share (internal to csrc/collectives): the MPI
// types of their exact path, Stats arithmetic for nested calls, the ring's segment plan,
// pending-request polling for the pipelined compressor, error-bound splitting, and the internal
// entry points of each algorithm file (one algorithm per .cpp; the public functions of
// collectives.h dispatch to these from choose.cpp and reduce.cpp). Timing, buffers, the codec,
// the schedules and the argument checks come from the toolkit.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "collectives.h"
#include "wire_types.h"
#include "toolkit/buffers.h"
#include "toolkit/codec.h"
#include "toolkit/schedules.h"
#include "toolkit/timing.h"
#include "toolkit/validate.h"
#include "toolkit/wait.h"

namespace zccl::coll::compute {

// The algorithms are written in terms of the toolkit.
using namespace toolkit;

template <class T>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float32/float64 only");
  return std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
}

bool is_min_max(ReduceOp op);
// a += b for the traffic and codec counters of Stats (not bytes_in: a nested call's input is
// part of ours; not total_seconds or algorithm).
void add_stats(Stats& a, const Stats& b);
// True when [a, a+abytes) and [b, b+bbytes) share a byte.
bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes);

// Segments of the pipelined ring (reduce-scatter and the allreduce's allgather stage). Every block
// has per_block segments of seg_len values (a block's last segments are short or empty); each
// segment is compressed as its own stream and travels as its own message, so a step's transfers
// overlap its compression and step s+1 forwards segment j as soon as step s delivered it
// (cut-through), instead of a whole block per step (store and forward).
// Two layouts of the p blocks in the buffer:
//   contiguous (reduce_scatter): block b is the range at blocks.offset[b] of a Blocks layout,
//     its segment j at j * seg_len inside it (reduce_scatter's output is block r);
//   interleaved (allreduce, reduce: their blocks are their own business): the buffer is cut
//     into segments of seg_len values and segment k is segment k / p of block k % p. A field
//     whose activity sits in one part of the buffer compresses very differently by contiguous
//     quarter (the 64 MB benchmark wavefield at REL 1e-4: 1932, 1371, 60 and 17 KB), and a ring
//     rank's sends leave out one block per stage, so the links differ in load: at 1 Gbit/s the
//     slowest rank took ~35% longer than the fastest. Interleaved, the quarters held 833-858 KB.
// All ranks must plan alike: Config::segment_bytes must be equal on all ranks.
struct RingSegments {
  size_t seg_len = 1;  // values per segment
  int per_block = 1;   // segments per block

  static RingSegments contiguous(const Blocks& blocks, DType dt, const Config& cfg);
  // min_per_block: plan at least that many segments per block (never below 64 KiB each, and
  // only when cfg.segment_bytes leaves the size to the plan): the integer ring codes one
  // segment per thread, so a block of fewer segments than threads would leave threads idle.
  // The plan must not depend on anything ranks may disagree on (so not on `threads`).
  static RingSegments interleaved(size_t total, int p, DType dt, const Config& cfg,
                                  int min_per_block = 1);
  bool is_interleaved() const { return offset_.empty(); }
  // Where segment j of block b starts in the buffer, in values (its block's end, or the
  // buffer's, when it is empty: never past the buffer), and how many values it holds.
  size_t begin(int b, int j) const;
  size_t len(int b, int j) const;
  // begin() relative to the start of block b (contiguous layout only).
  size_t within(int b, int j) const { return begin(b, j) - offset_[static_cast<size_t>(b)]; }

 private:
  std::vector<size_t> offset_, count_;  // contiguous: the blocks; interleaved: empty
  size_t total_ = 0;  // interleaved: the buffer's values
  int p_ = 1;         // interleaved: the blocks
};

// A non-blocking operation polled from the compressor's progress hook.
struct Pending {
  transport::Request req;
  size_t bytes = 0;
  bool done = true;

  void start(transport::Request r) {
    req = std::move(r);
    bytes = 0;
    done = false;
  }
  void poll(const Comm& comm) {
    if (!done && comm.test(req, &bytes)) done = true;
  }
  size_t finish(const Comm& comm) {
    if (!done) {
      bytes = comm.wait(req);
      done = true;
    }
    return bytes;
  }
};

// Polls the first unfinished request of `pending` (one MPI_Test drives the progress of all of
// them); nothing when all are done.
void poll_first(const Comm& comm, std::vector<Pending>& pending);
// Waits for every request of `pending`.
void finish_all(const Comm& comm, std::vector<Pending>& pending);

// The message slots of the pipelined ring reduce-scatter (float and integer hops): two send and
// two receive areas of S slots of `cap` bytes, by step parity (segment j of step s uses slot
// (s % 2) * S + j), in the kSlotSend0 / kSlotRecv workspaces. The receives of steps 0 and 1 are
// posted at construction (from prev, on tag); later ones as slots free up (post_recv).
struct ParitySlots {
  ParitySlots(Comm& comm, int p, int S, size_t cap, int prev, int tag);
  size_t slot(int s, int j) const { return static_cast<size_t>(s % 2) * S + j; }
  uint8_t* send_buf(int s, int j) const { return tx_area + slot(s, j) * cap; }
  const uint8_t* recv_buf(int s, int j) const { return rx_area + slot(s, j) * cap; }
  void post_recv(int s, int j) {
    rx[slot(s, j)].start(comm.irecv(rx_area + slot(s, j) * cap, cap, prev, tag));
  }

  Comm& comm;
  int S, prev, tag;
  size_t cap;
  uint8_t* tx_area;
  uint8_t* rx_area;
  std::vector<Pending> tx, rx;
};

// The allgather stage of the float ring allreduce (allreduce_ring.cpp): at step t = 0 .. p-2,
// segment j of block r-t-1 arrives from prev in rx[t*S + j] (landing at area + (t*S + j) *
// cap); while t < p-2 it is forwarded to next as received (tx[t*S + j], on `tag`), then handed
// to decode(stream, bytes, block, j). Waits for every send of tx (the owner's ones included).
template <class Decode>
void relay_allgather(Comm& comm, const Ring& ring, int S, std::vector<Pending>& rx,
                     std::vector<Pending>& tx, uint8_t* area, size_t cap, int tag, Stats& st,
                     Decode&& decode) {
  for (int t = 0; t <= ring.p - 2; ++t) {
    const int b = ring.before(t + 1);
    for (int j = 0; j < S; ++j) {
      const size_t k = static_cast<size_t>(t) * S + j;
      const size_t got = rx[k].finish(comm);
      uint8_t* const stream = area + k * cap;
      if (t < ring.p - 2) {
        tx[k].start(comm.isend(stream, got, ring.next, tag));
        st.bytes_sent += got;
      }
      decode(stream, got, b, j);
    }
  }
  finish_all(comm, tx);
}

// A flow of tasks k = 0 .. n-1 (run_flow): task k may start once ready(k) holds, which only
// service() -- the transport polled, finished work sent on, new input marked ready -- can make
// true, and only lane 0 (the calling thread) may call it.
struct FlowControl {
  std::function<bool(int)> ready;  // any lane, thread-safe
  std::function<void()> service;   // lane 0 only
  std::function<bool()> settled;   // lane 0 only: the other lanes need no more service()
};

// Runs task(lane, k) for k = 0 .. n-1 on up to `lanes` threads, taken in order: a lane takes
// the next k and starts it once flow.ready(k) holds. Lane 0 is the calling thread (OpenMP's
// master): it calls flow.service() while it waits, and once out of tasks until flow.settled(),
// under the communicator's deadline ("waiting for <what> (rank <peer>)"); the other lanes
// yield. A task on lane 0 may hand flow.service to its codec's progress hook. A task that
// throws stops the flow (no lane takes another task; running ones finish) and the first
// exception by lane is rethrown. Which lane runs a task must not change its result, so a flow
// gives the same bits for every lane count (lanes = 1, or a team of one, runs tasks in order).
void run_flow(const Comm& comm, const FlowControl& flow, int n, int lanes, const char* what,
              int peer, const std::function<void(int, int)>& task);

// The allgather stage of the integer ring allreduce as a flow. Segment j of block r-t-1
// arrives from prev at step t = 0 .. p-2 into its own slot k = t*S + j of the kSlotSend1
// workspace (every receive posted at construction, on `tag`, so the stage overlaps the
// reduce-scatter). service() forwards arrived segments to next in order (t < p-2), once the
// own block's S segments (send_own) went out (one tag: the order of sends is the receiver's
// order of slots), and makes each ready for decoding as soon as it arrived; decode_all()
// decodes them on up to `lanes` lanes in arrival order while lane 0 keeps forwarding. (Windows
// of W decodes held each hop's forwards back by a whole window.) The float ring keeps
// relay_allgather: there forwarding in the middle of a decode measured slower under SimGrid
// (benchmarks/RESULTS.md, "The integer hop's allgather as a flow").
class RingAllgather {
 public:
  RingAllgather(Comm& comm, const Ring& ring, int S, size_t cap, int tag, Stats& st);
  RingAllgather(const RingAllgather&) = delete;
  RingAllgather& operator=(const RingAllgather&) = delete;

  // Calling thread only: forwards what arrived, in order.
  void service();
  // The calling thread's codec hook: service() between chunks.
  const fz::Progress* progress() const { return &progress_; }
  // The own block's final segment j (a stream that stays valid until decode_all returns).
  void send_own(int j, const uint8_t* stream, size_t bytes);
  // Runs decode(lane, stream, bytes, block, j) for every received segment (lane 0: the calling
  // thread, whose decodes may pass progress()), then waits for every send. A decode that fails
  // does not stop the forwarding (peers must not be left waiting): its error is rethrown once
  // every segment went on; transport errors propagate at once.
  using Decode = std::function<void(int, const uint8_t*, size_t, int, int)>;
  void decode_all(int lanes, const Decode& decode);

 private:
  Comm& comm_;
  Ring ring_;
  int S_, tag_;
  size_t cap_, received_;
  Stats& st_;
  uint8_t* area_;
  std::vector<Pending> rx_, tx_;  // tx_: the forwards, then the S own segments
  // Segments seen arrived, in order (written by the calling thread only, read by the lanes);
  // the calling thread's: segments forwarded, own segments sent.
  std::atomic<size_t> arrived_{0};
  size_t forwarded_ = 0;
  int own_sent_ = 0;
  fz::Progress progress_;
};

// A bound for each of k compressions whose errors add up: k * result <= eb holds exactly (eb/k
// shrunk by 2^-50 so the rounding of the division can never push the sum past eb).
double split_bound(double eb, int k);

// Config for a nested data-movement call with a different per-compression bound.
Config with_error_bound(const Config& cfg, double eb);

// ---- Internal entry points (T = float or double; explicitly instantiated in their files) ----

// Where a ring reduce-scatter reads each rank-local block and accumulates partial results.
// Whole blocks (cprp2p.cpp): local(b) = local + blocks.offset[b]; acc(b) = single ? single :
// acc_base + blocks.offset[b]. Segments (the pipelined ring): the same at seg.begin(b, j), with
// single + seg.within(b, j). In-place allreduce: local == acc_base, single == nullptr.
// Out-of-place reduce_scatter: single = the output (the partial being forwarded lives there
// between steps; contiguous layout only).
template <class T>
struct RingBuffers {
  const T* local = nullptr;
  T* acc_base = nullptr;
  T* single = nullptr;
  T* acc(const Blocks& b, int block) const { return single ? single : acc_base + b.offset[block]; }
  const T* loc(const Blocks& b, int block) const { return local + b.offset[block]; }
  T* acc(const RingSegments& s, int b, int j) const {
    return single ? single + s.within(b, j) : acc_base + s.begin(b, j);
  }
  const T* loc(const RingSegments& s, int b, int j) const { return local + s.begin(b, j); }
};

// reduce_scatter_ring.cpp: pipelined ring reduce-scatter (SUM/AVG; AVG is not divided here).
// On return acc(rank) holds this rank's reduced block.
// `segment_done(j)`, when given, runs as soon as segment j of the rank's own block is fully
// reduced (the allreduce starts its allgather stage there, segment by segment).
using SegmentDone = std::function<void(int)>;
template <class T>
void ring_reduce_scatter(Comm& comm, const RingBuffers<T>& io, const RingSegments& seg,
                         ReduceOp op, double eb, const Config& cfg, Stats& st,
                         const SegmentDone* segment_done = nullptr);

// reduce_scatter_minmax.cpp: MIN/MAX reduce-scatter by one exchange of compressed blocks.
// local holds p blocks (layout `blocks`); out (blocks.count[rank] values, may equal
// local + offset[rank]) gets this rank's reduced block, within eb of the exact MIN/MAX.
template <class T>
void exchange_reduce_scatter(Comm& comm, const T* local, T* out, const Blocks& blocks,
                             ReduceOp op, double eb, const Config& cfg, Stats& st);

// The allreduce algorithms below run in place on buf (count >= 1, p >= 1), divide by p at the end
// for AVG, and leave every rank with bit-identical values (CprP2P: see cprp2p.cpp).
// allreduce_ring.cpp: reduce-scatter + compressed allgather.
template <class T>
void ring_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb, const Config& cfg,
                    Stats& st);
// The allgather stage: block `rank` of buf (layout `blocks`) goes to everyone, compressed once
// with eb; on return every rank (the owner included) holds the same decompressed values.
template <class T>
void allgather_decompressed(Comm& comm, T* buf, const Blocks& blocks, double eb,
                            const Config& cfg, Stats& st);

// allreduce_ring_integer.cpp: the ring for SUM/AVG (AVG not divided here) on integer codes, in
// place on buf with the layout `seg`, cfg.threads segments at a time (0: the OpenMP default);
// false (nothing done) when eb has no integer grid (eb == 0 or subnormal). Its callers plan
// `seg` with kLaneSegments segments per block, so up to that many threads each code one.
constexpr int kLaneSegments = 16;
template <class T>
bool integer_ring_allreduce(Comm& comm, T* buf, const RingSegments& seg, double eb,
                            const Config& cfg, Stats& st);

// allreduce_recursive_doubling.cpp
template <class T>
void recursive_doubling_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb,
                                  const Config& cfg, Stats& st);

// allreduce_halving_doubling.cpp (AVG divided there too)
template <class T>
void halving_doubling_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb,
                                const Config& cfg, Stats& st);

// cprp2p.cpp: the naive baseline (compress before every send, decompress after every receive).
template <class T>
void cprp2p_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, double eb,
                      const Config& cfg, Stats& st);
template <class T>
void cprp2p_reduce_scatter(Comm& comm, const RingBuffers<T>& io, const Blocks& blocks,
                           ReduceOp op, double eb, const Config& cfg, Stats& st);

}  // namespace zccl::coll::compute
