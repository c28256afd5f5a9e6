// Pipelined broadcast of compressed segments (ZCCL data-movement framework).
//
// Steps (virtual ranks v = (rank - root) mod p):
//   1. Plan. The root splits its n values into m segments (detail::plan_segments: balanced,
//      chunk-aligned segments of at most 64 KiB .. 1 MiB, picked by the cost model below, or
//      m = 1 when the message is too small to pipeline) and sends the plan (count, values per
//      segment, receive capacity, frame size: 32 bytes) down the binomial tree
//      (toolkit::Binomial) before it compresses anything, so the plan reaches every rank while
//      the root compresses segment 0. Each rank forwards the plan to its binomial children and
//      then follows it: segmentation is never agreed in advance, only the root's count and
//      Config decide it.
//   2. m >= 2: a chain v = 0 -> 1 -> ... -> p-1 (every rank's link carries the compressed data
//      exactly once: bandwidth-optimal when every rank has its own full-duplex link).
//      Root (detail::send_segments): compresses segment k, once, as an independent fZ-light
//      stream into one of W = 8 buffers and posts its non-blocking sends to v = 1 at once, then
//      compresses k+1 while k travels; a buffer is reused when its sends completed.
//      Others (detail::receive_segments): keep receives for the next W segments posted, forward
//      every frame (below) to v+1 the moment it lands (non-blocking, straight from the receive
//      buffer: cut-through, so a hop delays the data by one frame, not one segment), and
//      decompress segment k into its place in buf once it is complete, while k+1, k+2, ...
//      arrive; the buffer takes segment k+W once k is decompressed and its forwards completed.
//      Frames: a segment travels as messages of at most 63 KiB (all full but the last, which
//      may be empty, so no size message is needed). Larger messages would take Open MPI's TCP
//      rendezvous, which needs both ends to poll MPI and stalls a chain whose ranks compute or
//      sleep between polls (see datamove_common.cpp for the measurements).
//      MPI is polled between codec calls, not inside them (see detail::send_segments).
//   2'. m == 1: the root compresses the whole buffer once and the stream goes down the binomial
//      tree (largest subtree first), in frames forwarded to the children as they arrive.
//   3. A rank whose count differs from the root's, or that received a corrupt segment, still
//      relays every segment (decompressing nothing more) and reports the error only after its
//      forwards completed ("size mismatch across ranks" / fz::StreamError), so no rank is left
//      waiting. A short or truncated segment fails fZ-light's validation (sizes and CRC-32C of
//      every chunk); a segment longer than the announced capacity fails its receive.
//   4. Unless cfg.owner_exact, the root decodes its own streams into its buffer (each segment
//      right after it is sent), so every rank holds bit-identical values (DDP's parameter
//      broadcast relies on that); with cfg.owner_exact the root's buffer is left untouched.
//
// Cost (n values, N = n * sizeof(T) bytes, ratio rho; m segments of S = N/m bytes; c, d:
// compress / decompress time of one segment; w = alpha + beta*S/rho; the root's own decoding
// adds d per segment at the root, overlapped with the segments in flight):
//   chain (m >= 2):  c + (p-1)*w + d + (m-1)*max(c, w, d)    (cut-through frames make the
//                    (p-1)*w fill term smaller in practice)
//   tree  (m == 1):  C(n) + ceil(log2 p)*(alpha + beta*N/rho) + D(n)
//   versus ceil(log2 p)*(alpha + beta*N) for an uncompressed binomial tree. On bandwidth-bound
//   links the chain approaches beta*N/rho plus one segment: compression, every hop and
//   decompression overlap. plan_segments picks m by this model (constants in
//   datamove_common.cpp). Memory: W segment buffers of S plus headers per rank, kept per thread
//   between calls.
//
// Error bound: non-root values satisfy |x - x'| <= cfg.error_bound: each value belongs to
// exactly one segment, compressed once at the root with the bound (strict in double) and only
// copied on the way; the root's decoded values are the same bits. With cfg.owner_exact the root
// is exact. cfg.error_bound == 0 is bit-exact everywhere; NaN and
// +/-Inf travel exactly (fZ-light stores them verbatim). Segmentation changes which chunks
// values share, never the per-value bound, and the bytes do not depend on cfg.threads.
//
// Uncompressed MPI path (MPI_Ibcast, exact): cfg.algorithm == Mpi, p == 1, count == 0, or payload
// bytes below cfg.min_compress_bytes. Algorithm::CprP2P runs this same algorithm (the data is
// compressed once at the root anyway). Stats.algorithm: Mpi for the MPI path, otherwise CprP2P
// when requested and Auto for "the ZCCL compressed algorithm of this collective" (the Algorithm
// enum has no name for trees or chains).
#include <exception>
#include <vector>

#include "datamove_common.h"

namespace zccl::coll {

namespace {

// Tags of one call: the plan, the single stream (m == 1), then the segments (see
// detail::segment_tag).
constexpr int kTagPlan = 0;
constexpr int kTagStream = 1;
constexpr int kTagSegments = 2;
static_assert(kTagSegments + static_cast<int>(detail::kSegmentWindow) <= Comm::kTagsPerOp,
              "tag block too small");

constexpr const char* kOp = "broadcast";

// m == 1: one stream down the binomial tree; every frame is forwarded to the children as it
// arrives. `decode`: this rank's count matches the plan.
void tree_stream(Comm& comm, uint8_t* buf, const Config& cfg,
                 const toolkit::Binomial& tree, int tag, const detail::SegmentPlan& plan,
                 bool decode, toolkit::Codec& codec, Stats& st, std::exception_ptr& error) {
  const detail::SegmentBuffers slots(1, static_cast<size_t>(plan.seg_capacity));
  uint8_t* stream = slots.slot(0);
  const size_t n = static_cast<size_t>(plan.count), frame = static_cast<size_t>(plan.frame_bytes);
  std::vector<int> children;
  for (int child : tree.children()) children.push_back(tree.rank_of(child));
  std::vector<transport::Request> sends;  // after slots: destroyed (cancelled) first
  size_t len = 0;
  if (tree.v == 0) {
    len = codec.compress(buf, n, stream, slots.capacity());
    for (int child : children) {
      st.bytes_sent += detail::send_frames(comm, stream, len, child, tag + kTagStream, frame,
                                           sends);
    }
    // The root takes the values the others get (while the sends travel; they read the stream).
    if (!cfg.owner_exact) codec.decompress(stream, len, buf, n, tree.root);
  } else {
    const int parent = tree.rank_of(tree.parent());
    detail::FrameReceiver rx;
    rx.start(comm, stream, slots.capacity(), parent, tag + kTagStream, frame);
    auto forward = [&](const uint8_t* data, size_t bytes) {
      for (int child : children) {
        sends.push_back(comm.isend(data, bytes, child, tag + kTagStream));
        st.bytes_sent += bytes;
      }
    };
    detail::wait_until(comm, [&] { return rx.poll(comm, forward); }, kOp, "the stream", parent,
                       slots.capacity());
    len = rx.bytes();
    if (decode) {
      detail::run_recording(error, [&] { codec.decompress(stream, len, buf, n, tree.root); });
    }
  }
  detail::wait_until(comm, [&] { return detail::all_done(comm, sends); }, kOp,
                     "the stream's forwards", children.empty() ? -1 : children.back(),
                     detail::active_bytes(sends));
}

}  // namespace

void broadcast(Comm& comm, void* buf, size_t count, DType dt, int root, const Config& cfg,
               Stats* stats) {
  toolkit::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size(), r = comm.rank();
  toolkit::check_root(root, p, kOp);
  const size_t bytes = toolkit::payload_bytes(count, dt, kOp);
  toolkit::check_buffer(buf, count, kOp, "buf");
  toolkit::check_config(cfg, kOp);
  const toolkit::Binomial tree(p, root, r);
  cs.s.bytes_in = r == root ? bytes : 0;
  const Route rt = route(Collective::Broadcast, bytes, p, cfg);
  if (!rt.compressed) {
    comm.bcast(buf, count, elem_type(dt), root);
    cs.s.bytes_sent = bytes * tree.children().size();  // as by a binomial tree
    cs.done(rt.algorithm);
    return;
  }
  toolkit::Codec codec = toolkit::Codec::for_data(dt, cfg, cs.s, kOp);

  // 1. The root's plan goes down the binomial tree before any data.
  detail::SegmentPlan plan;
  if (tree.v == 0) {
    plan = detail::plan_segments(count, dt, cfg, 1, p - 1, toolkit::ceil_log2(p));
  } else {
    const int parent = tree.rank_of(tree.parent());
    const size_t got = comm.recv(&plan, sizeof(plan), parent, tag + kTagPlan);
    if (got != sizeof(plan)) {
      toolkit::throw_size_mismatch(kOp, "malformed segment header from rank " +
                                            std::to_string(parent));
    }
  }
  std::vector<transport::Request> plan_sends;  // after `plan`: destroyed first
  for (int child : tree.children()) {
    plan_sends.push_back(comm.isend(&plan, sizeof(plan), tree.rank_of(child), tag + kTagPlan));
    cs.s.bytes_sent += sizeof(plan);
  }
  if (tree.v != 0) {
    try {
      detail::check_plan(plan, kOp, tree.rank_of(tree.parent()));
    } catch (...) {
      comm.wait_all(plan_sends);  // the children fail the same way instead of waiting
      throw;
    }
  }

  // 2. Segments down the chain, or one stream down the tree; 3. errors after the relaying.
  std::exception_ptr error;
  const bool decode = tree.v != 0 && plan.count == count;
  if (tree.v != 0 && !decode) {
    error = toolkit::size_mismatch(kOp, "the root broadcasts " + std::to_string(plan.count) +
                                            " values, this rank expects " +
                                            std::to_string(count));
  }
  auto* data = static_cast<uint8_t*>(buf);
  const size_t es = fz::dtype_size(dt);
  if (plan.segments() == 1) {
    tree_stream(comm, data, cfg, tree, tag, plan, decode, codec, cs.s, error);
  } else if (tree.v == 0) {
    // Unless cfg.owner_exact, the root decodes each segment it sent into place (the segment's
    // values were compressed already and no later segment reads them).
    detail::SegmentSink own_decode;
    if (!cfg.owner_exact) {
      own_decode = [&](int, size_t k, const uint8_t* stream, size_t len) {
        codec.decompress(stream, len, data + plan.offset(k) * es, plan.values(k), root);
      };
    }
    detail::send_segments(
        comm, plan, 1, [&](int) { return data; }, [&](int) { return tree.rank_of(1); },
        tag + kTagSegments, dt, cfg, cs.s, kOp, own_decode);
  } else {
    const int next = tree.v + 1 < p ? tree.rank_of(tree.v + 1) : -1;
    try {
      detail::receive_segments(
          comm, plan, tree.rank_of(tree.v - 1), next, tag + kTagSegments, cs.s, kOp,
          [&](size_t k, const uint8_t* stream, size_t len) {
            if (!decode) return;
            codec.decompress(stream, len, data + plan.offset(k) * es, plan.values(k), root);
          });
    } catch (const transport::TransportError&) {
      throw;
    } catch (const transport::TimeoutError&) {
      throw;
    } catch (...) {
      if (!error) error = std::current_exception();  // a codec error, after all the relaying
    }
  }
  comm.wait_all(plan_sends);
  if (error) std::rethrow_exception(error);
  cs.done(rt.algorithm);
}

}  // namespace zccl::coll
