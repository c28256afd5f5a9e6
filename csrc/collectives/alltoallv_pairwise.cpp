// Pairwise-exchange alltoallv of compressed blocks (ZCCL data-movement framework).
//
// Steps (p ranks, rank r):
//   1. Post the receive of every incoming block at once: from rank (r - k) mod p for k = 1..p-1,
//      sized by recv_counts (a compressed block's worst case, or the exact raw size; raw blocks
//      land straight in recv).
//   2. For k = 1..p-1: compress the block for rank (r + k) mod p once and send it; then wait for
//      the block from rank (r - k) mod p and decompress it once into its place (compression of
//      the next block overlaps the arrival of the following ones).
//   3. Copy the own block exactly; wait for the sends.
//   Blocks of 0 values or below cfg.min_compress_bytes travel raw (uncompressed); sender and
//   receiver decide from their own counts, which must agree. A block whose count differs from
//   what the receiver expects ("size mismatch across ranks", also when it is larger than the
//   receive's capacity) is reported after the whole exchange finished, so no peer is left
//   waiting; nothing outside the receiver's block is ever written.
//
// Cost (per destination: n values, N bytes, ratio rho): (p-1)*(C(n) + alpha + beta*N/rho + D(n))
//   with C of one step overlapping the transfers in flight, versus (p-1)*(alpha + beta*N).
//
// Error bound: blocks from other ranks satisfy |x - x'| <= cfg.error_bound (raw ones are exact);
// the own block is exact.
//
// Uncompressed MPI path (MPI_Ialltoallv, exact): cfg.algorithm == Mpi or p == 1. The size
// threshold applies per block (ranks do not know each other's counts). In-place (overlapping
// send and recv) is not supported. CprP2P runs this same exchange. Stats.algorithm: Mpi, CprP2P
// when requested, otherwise Auto (= this compressed algorithm; see broadcast_pipelined.cpp).
#include <algorithm>
#include <exception>
#include <limits>
#include <utility>

#include "datamove_common.h"

namespace zccl::coll {

namespace {

// Checks counts/displacements (p entries each, no overflow) and returns the number of values
// the buffer must hold (max of displ + count).
size_t check_layout(const std::vector<size_t>& counts, const std::vector<size_t>& displs, int p,
                    DType dt, const char* which) {
  if (counts.size() != static_cast<size_t>(p) || displs.size() != static_cast<size_t>(p)) {
    throw std::invalid_argument(std::string("zccl: alltoallv: ") + which + " counts (" +
                                std::to_string(counts.size()) + ") and displacements (" +
                                std::to_string(displs.size()) + ") need " + std::to_string(p) +
                                " entries each");
  }
  size_t extent = 0;
  for (int q = 0; q < p; ++q) {
    if (counts[q] > std::numeric_limits<size_t>::max() - displs[q]) {
      throw std::invalid_argument(std::string("zccl: alltoallv: ") + which + " block " +
                                  std::to_string(q) + " (displacement " +
                                  std::to_string(displs[q]) + ", count " +
                                  std::to_string(counts[q]) + ") is out of range");
    }
    toolkit::payload_bytes(displs[q] + counts[q], dt, "alltoallv");
    extent = std::max(extent, displs[q] + counts[q]);
  }
  return extent;
}

// Receive blocks must not overlap (each value of recv is written by one block).
void check_disjoint(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t q = 0; q < counts.size(); ++q) {
    if (counts[q] > 0) spans.emplace_back(displs[q], displs[q] + counts[q]);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      throw std::invalid_argument("zccl: alltoallv: receive blocks overlap (values [" +
                                  std::to_string(spans[i].first) + ", " +
                                  std::to_string(std::min(spans[i].second, spans[i - 1].second)) +
                                  ") are written by two blocks)");
    }
  }
}

struct Incoming {
  int src = -1;
  bool raw = false;
  toolkit::Bytes stream;  // compressed blocks only
  transport::Request req;
};

}  // namespace

void alltoallv(Comm& comm, const void* send, const std::vector<size_t>& send_counts,
               const std::vector<size_t>& send_displs, void* recv,
               const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
               DType dt, const Config& cfg, Stats* stats) {
  const char* op = "alltoallv";
  toolkit::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size(), r = comm.rank();
  const size_t send_extent = check_layout(send_counts, send_displs, p, dt, "send");
  const size_t recv_extent = check_layout(recv_counts, recv_displs, p, dt, "recv");
  check_disjoint(recv_counts, recv_displs);
  if (send_counts[r] != recv_counts[r]) {
    throw std::invalid_argument("zccl: alltoallv: the own block has send_counts[" +
                                std::to_string(r) + "] = " + std::to_string(send_counts[r]) +
                                " but recv_counts[" + std::to_string(r) +
                                "] = " + std::to_string(recv_counts[r]));
  }
  toolkit::check_buffer(send, send_extent, op, "send");
  toolkit::check_buffer(recv, recv_extent, op, "recv");
  toolkit::check_config(cfg, op);
  const size_t es = fz::dtype_size(dt);
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  for (int q = 0; q < p; ++q) cs.s.bytes_in += send_counts[q] * es;

  // The ranks do not know each other's counts: the size rules apply per block (travels_raw).
  const Route rt = route(Collective::AllToAll, kUnknownBytes, p, cfg);
  if (!rt.compressed) {
    comm.alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs,
                   elem_type(dt));
    cs.s.bytes_sent = cs.s.bytes_in - send_counts[r] * es;
    cs.done(rt.algorithm);
    return;
  }
  toolkit::Codec codec = toolkit::Codec::for_data(dt, cfg, cs.s, op);
  auto travels_raw = [&](size_t count) {
    return count == 0 || count * es < cfg.min_compress_bytes;
  };

  // 1. All receives up front.
  std::vector<Incoming> incoming(static_cast<size_t>(p));
  for (int k = 1; k < p; ++k) {
    Incoming& b = incoming[k];
    b.src = (r - k + p) % p;
    const size_t count = recv_counts[b.src];
    b.raw = travels_raw(count);
    if (b.raw) {
      b.req = comm.irecv(out + recv_displs[b.src] * es, count * es, b.src, tag);
    } else {
      b.stream.resize(codec.capacity(count));
      b.req = comm.irecv(b.stream.data(), b.stream.size(), b.src, tag);
    }
  }

  // 2. Pairwise steps: compress + send to r+k, receive + decompress from r-k.
  std::vector<toolkit::Bytes> outgoing(static_cast<size_t>(p));
  std::vector<transport::Request> sends;
  sends.reserve(static_cast<size_t>(p));
  std::exception_ptr error;  // the first size mismatch / corrupt block, reported at the end
  for (int k = 1; k < p; ++k) {
    const int dst = (r + k) % p;
    const size_t count = send_counts[dst];
    const uint8_t* block = in + send_displs[dst] * es;
    if (travels_raw(count)) {
      sends.push_back(comm.isend(block, count * es, dst, tag));
      cs.s.bytes_sent += count * es;
    } else {
      codec.compress(block, count, outgoing[dst]);
      sends.push_back(comm.isend(outgoing[dst].data(), outgoing[dst].size(), dst, tag));
      cs.s.bytes_sent += outgoing[dst].size();
    }

    Incoming& b = incoming[k];
    const size_t expect = recv_counts[b.src];
    try {
      try {
        comm.wait(b.req);
      } catch (const transport::TransportError& e) {
        if (!e.truncated()) throw;
        toolkit::throw_size_mismatch(op, "rank " + std::to_string(b.src) +
                                             " sent a block larger than the " +
                                             std::to_string(expect) +
                                             " values this rank expects from it");
      }
      if (b.raw) {
        if (b.req.received != expect * es) {
          toolkit::throw_size_mismatch(
              op, "rank " + std::to_string(b.src) + " sent " + std::to_string(b.req.received) +
                      " bytes, this rank expects " + std::to_string(expect) + " raw values (" +
                      std::to_string(expect * es) + " bytes)");
        }
      } else {
        codec.decompress(b.stream.data(), b.req.received, out + recv_displs[b.src] * es, expect,
                         b.src);
        toolkit::Bytes().swap(b.stream);
      }
    } catch (const transport::TimeoutError&) {
      throw;  // a peer is gone: waiting for more would only multiply the delay
    } catch (const transport::TransportError&) {
      throw;
    } catch (const std::exception&) {
      if (!error) error = std::current_exception();  // size mismatch / corrupt stream
    }
  }

  // 3. Own block, then the sends.
  detail::copy_exact(in + send_displs[r] * es, out + recv_displs[r] * es, send_counts[r] * es);
  comm.wait_all(sends);
  if (error) std::rethrow_exception(error);
  cs.done(rt.algorithm);
}

}  // namespace zccl::coll
