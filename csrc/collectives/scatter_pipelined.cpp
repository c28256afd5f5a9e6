// Pipelined scatter of compressed segments, straight from the root (ZCCL data-movement framework).
//
// Steps (virtual ranks v = (rank - root) mod p):
//   1. Plan. The root splits a block of n values into m segments (detail::plan_segments for
//      p - 1 series of segments over one hop each: balanced, chunk-aligned segments of at most
//      64 KiB .. 1 MiB, or m = 1 for small blocks) and posts the plan (count, values per
//      segment, receive capacity, frame size: 32 bytes) to every other rank before compressing
//      anything. Destinations follow the root's plan: segmentation is never agreed in advance.
//   2. Root (detail::send_segments): for each destination in virtual-rank order v = 1 .. p-1,
//      for each segment k of its block: compress the segment once, as an independent fZ-light
//      stream, into one of W = 8 buffers and post its non-blocking sends (frames of at most
//      63 KiB, see broadcast_pipelined.cpp) straight to the destination; then compress the next
//      segment while this one travels. A buffer is reused when its sends completed.
//      Sending directly costs no bandwidth: the root's link carries every other rank's block
//      once in any tree, and relays would only add hops, forwarding work and latency. One
//      destination after the other (not round-robin) keeps a single destination decompressing
//      next to the compressing root (the ranks may share cores), and the first destinations
//      finish early. The root copies its own block exactly at the end, while the last segments
//      travel.
//   3. Destinations (detail::receive_segments): receive the plan, keep receives for the next W
//      segments posted, and decompress each segment into its place as soon as it is complete
//      (while the next ones arrive).
//   4. A destination whose count differs from the root's, or that received a corrupt segment,
//      still drains every segment (so the root's sends complete) and reports the error at the
//      end ("size mismatch across ranks" / fz::StreamError). A short or truncated segment fails
//      fZ-light's validation; one longer than the announced capacity fails its receive.
//
// Cost (n values per block, N = n * sizeof(T), ratio rho; m segments of S = N/m bytes; c, d:
// compress / decompress time of one segment; w = alpha + beta*S/rho):
//   c + w + d + ((p-1)*m - 1) * max(c, w, d)
//   i.e. the larger of the root's compression of the (p-1) blocks and its link's transfer of
//   them, plus one segment, versus ceil(log2 p)*alpha + beta*(p-1)*N uncompressed. Memory: W
//   segment buffers per rank, kept per thread between calls.
//
// Error bound: |x - x'| <= cfg.error_bound on non-root ranks (each value is in exactly one
// segment, compressed once with the bound, strict in double); the root's block is exact; NaN and
// +/-Inf travel exactly; cfg.error_bound == 0 is bit-exact.
//
// Uncompressed MPI path (MPI_Iscatter, exact): cfg.algorithm == Mpi, p == 1, count == 0, or block
// bytes below cfg.min_compress_bytes. CprP2P runs this same algorithm. Stats.algorithm: Mpi,
// CprP2P when requested, otherwise Auto (= this compressed algorithm; see
// broadcast_pipelined.cpp).
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "datamove_common.h"

namespace zccl::coll {

namespace {

// Tags of one call: the plan, then the segments of each block (see detail::segment_tag).
constexpr int kTagPlan = 0;
constexpr int kTagSegments = 1;
static_assert(kTagSegments + static_cast<int>(detail::kSegmentWindow) <= Comm::kTagsPerOp,
              "tag block too small");

constexpr const char* kOp = "scatter";

}  // namespace

void scatter(Comm& comm, const std::vector<const void*>& blocks, void* recv, size_t count,
             DType dt, int root, const Config& cfg, Stats* stats) {
  toolkit::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size(), r = comm.rank();
  const size_t bytes = toolkit::check_rooted_blocks(root, p, count, dt, kOp);
  if (r == root) {
    toolkit::check_block_list(blocks.size(), p, kOp);
    for (const void* b : blocks) toolkit::check_buffer(b, count, kOp, "a block");
  }
  toolkit::check_buffer(recv, count, kOp, "recv");
  toolkit::check_config(cfg, kOp);
  cs.s.bytes_in = r == root ? bytes * static_cast<size_t>(p) : 0;
  const Route rt = route(Collective::Scatter, bytes, p, cfg);
  if (!rt.compressed) {
    // MPI_Scatter wants the blocks packed in rank order; pack them unless they already are.
    const void* packed = nullptr;
    toolkit::Bytes staging;
    if (r == root) {
      const auto* base = static_cast<const uint8_t*>(blocks[0]);
      bool contiguous = true;
      for (int q = 0; q < p; ++q) {
        contiguous = contiguous && blocks[q] == base + static_cast<size_t>(q) * bytes;
      }
      if (contiguous) {
        packed = base;
      } else {
        staging.resize(bytes * static_cast<size_t>(p));
        for (int q = 0; q < p; ++q) {
          detail::copy_exact(blocks[q], staging.data() + static_cast<size_t>(q) * bytes, bytes);
        }
        packed = staging.data();
      }
    }
    comm.scatter(packed, recv, count, elem_type(dt), root);
    cs.s.bytes_sent = r == root ? bytes * static_cast<size_t>(p - 1) : 0;
    cs.done(rt.algorithm);
    return;
  }
  auto rank_of = [&](int v) { return (v + root) % p; };  // virtual rank v = (rank - root) mod p

  if (r == root) {
    // 1. The plan to every destination, before any data.
    const detail::SegmentPlan plan = detail::plan_segments(count, dt, cfg, p - 1, 1, 1);
    std::vector<transport::Request> plan_sends;  // after `plan`: destroyed first
    for (int v = 1; v < p; ++v) {
      plan_sends.push_back(comm.isend(&plan, sizeof(plan), rank_of(v), tag + kTagPlan));
      cs.s.bytes_sent += sizeof(plan);
    }
    // 2. Each destination's block, segment by segment, straight to it; then the own block.
    detail::send_segments(
        comm, plan, p - 1,
        [&](int i) { return static_cast<const uint8_t*>(blocks[rank_of(i + 1)]); },
        [&](int i) { return rank_of(i + 1); }, tag + kTagSegments, dt, cfg, cs.s, kOp);
    detail::copy_exact(blocks[root], recv, bytes);
    comm.wait_all(plan_sends);
    cs.done(rt.algorithm);
    return;
  }

  // 3. Destination: the plan, then segments decompressed as they arrive; 4. errors at the end.
  detail::SegmentPlan plan;
  const size_t got = comm.recv(&plan, sizeof(plan), root, tag + kTagPlan);
  if (got != sizeof(plan)) {
    toolkit::throw_size_mismatch(kOp, "malformed segment header from rank " +
                                          std::to_string(root));
  }
  detail::check_plan(plan, kOp, root);
  const bool decode = plan.count == count;
  toolkit::Codec codec = toolkit::Codec::for_data(dt, cfg, cs.s, kOp);
  auto* out = static_cast<uint8_t*>(recv);
  const size_t es = fz::dtype_size(dt);
  detail::receive_segments(
      comm, plan, root, -1, tag + kTagSegments, cs.s, kOp,
      [&](size_t k, const uint8_t* stream, size_t len) {
        if (!decode) return;  // drain only: the root's sends must complete
        codec.decompress(stream, len, out + plan.offset(k) * es, plan.values(k), root);
      });
  if (!decode) {
    toolkit::throw_size_mismatch(kOp, "the root scatters blocks of " +
                                          std::to_string(plan.count) + " values, this rank expects " +
                                          std::to_string(count));
  }
  cs.done(rt.algorithm);
}

void scatter(Comm& comm, const void* send, void* recv, size_t count, DType dt, int root,
             const Config& cfg, Stats* stats) {
  std::vector<const void*> blocks;
  if (comm.rank() == root) {
    const size_t bytes = toolkit::check_rooted_blocks(root, comm.size(), count, dt, kOp);
    toolkit::check_buffer(send, count, kOp, "send");
    for (int q = 0; q < comm.size(); ++q) {
      blocks.push_back(static_cast<const uint8_t*>(send) + static_cast<size_t>(q) * bytes);
    }
  }
  scatter(comm, blocks, recv, count, dt, root, cfg, stats);
}

}  // namespace zccl::coll
