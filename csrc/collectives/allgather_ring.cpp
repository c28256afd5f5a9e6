// Ring allgather / allgatherv of compressed blocks (ZCCL data-movement framework).
//
// Steps (p ranks, rank r, left = r-1, right = r+1 mod p):
//   1. Compress the own block once (cfg.error_bound, cfg.threads, cfg.chunk_len).
//   2. Exchange (stream size, own count, hash of the counts vector) with one exact MPI allgather
//      of 3 uint64 per rank. Every rank sees the same table, so a count that differs from what
//      the others expect makes *every* rank throw "size mismatch across ranks" before any data
//      moves (no rank is left waiting). Receive buffers are then sized exactly.
//   3. p-1 ring steps: in step s send block (r - s) mod p to the right and receive block
//      (r - s - 1) mod p from the left (the block received in the previous step is forwarded, so
//      every link carries one block per step: balanced). Compressed bytes are forwarded as they
//      are: never decompressed and recompressed on the way.
//   4. Decompress each of the p-1 received blocks once, straight into its place in recv; block
//      s is decompressed while the transfer of step s+1 is in flight.
//   The own block: decompressed from its own stream during step 0, so every rank holds the same
//   bits for every block (replicas stay identical); with cfg.owner_exact it is copied exactly
//   instead (memmove; nothing when send already is recv's own slot).
//
// Cost (n values per block, N = n * sizeof(T) bytes, compression ratio rho, C/D = compress/
// decompress time of n values):
//   C(n) + log2(p)*alpha (size exchange) + (p-1)*(alpha + beta*N/rho) + (p-1)*D(n)
//   (decompression overlaps the next step's transfer) versus (p-1)*(alpha + beta*N) uncompressed.
//
// Error bound: every value satisfies |x - x'| <= cfg.error_bound (one compression, strict in
// double); the own block is exact with cfg.owner_exact; cfg.error_bound == 0 is bit-exact.
//
// Uncompressed MPI path (MPI_Iallgather(v), exact): cfg.algorithm == Mpi, p == 1, count == 0
// (allgatherv: all counts 0), or block bytes (allgatherv: the largest block) below
// cfg.min_compress_bytes. Algorithm::CprP2P runs this same ring: a data-movement collective
// already compresses each block exactly once.
#include <algorithm>
#include <cstring>

#include "datamove_common.h"

namespace zccl::coll {

namespace {

using toolkit::Bytes;

uint64_t hash_counts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit counts
  for (size_t c : counts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(c) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// The ring over blocks of counts[q] values, packed at displs[q] (in values) in recv.
void ring(Comm& comm, int tag, const void* send, void* recv, const std::vector<size_t>& counts,
          const std::vector<size_t>& displs, DType dt, const Config& cfg, toolkit::CallStats& cs,
          const char* op) {
  const int p = comm.size(), r = comm.rank();
  const size_t es = fz::dtype_size(dt);
  auto* out = static_cast<uint8_t*>(recv);
  toolkit::Codec codec = toolkit::Codec::for_data(dt, cfg, cs.s, op);

  // 1. Compress the own block once.
  std::vector<Bytes> blocks(p);
  codec.compress(send, counts[r], blocks[r]);

  // 2. Exchange stream sizes and counts; all ranks check the same table.
  const uint64_t mine[3] = {blocks[r].size(), counts[r], hash_counts(counts)};
  std::vector<uint64_t> table(3 * static_cast<size_t>(p));
  comm.allgather(mine, table.data(), 3, transport::ElemType::UInt64);
  cs.s.bytes_sent += sizeof(mine);
  for (int q = 0; q < p; ++q) {
    if (table[3 * q + 2] != table[2]) {
      toolkit::throw_size_mismatch(op, "ranks 0 and " + std::to_string(q) +
                                           " pass different counts vectors");
    }
  }
  for (int q = 0; q < p; ++q) {
    if (table[3 * q + 1] != counts[q]) {
      toolkit::throw_size_mismatch(op, "rank " + std::to_string(q) + " contributes " +
                                           std::to_string(table[3 * q + 1]) +
                                           " values, the others expect " +
                                           std::to_string(counts[q]));
    }
  }

  // 3./4. Ring steps; the block received in step s-1 is forwarded in step s and decompressed
  // while it travels (both only read it), then released.
  const toolkit::Ring links(p, r);
  const int right = links.next, left = links.prev;
  auto decode = [&](int q) {
    codec.decompress(blocks[q].data(), blocks[q].size(), out + displs[q] * es, counts[q], q);
  };
  // Unless cfg.owner_exact, the own block is decoded from its stream during step 0 (the stream
  // was made from `send` in step 1, so `send` being recv's own slot does not matter).
  const bool decode_own = !cfg.owner_exact;
  int pending = decode_own ? r : -1;  // block to decode during the next transfer
  for (int s = 0; s < p - 1; ++s) {
    const int send_q = links.before(s);  // == pending for s >= 1
    const int recv_q = links.before(s + 1);
    blocks[recv_q].resize(table[3 * recv_q]);
    std::vector<transport::Request> reqs;
    reqs.reserve(2);
    reqs.push_back(comm.irecv(blocks[recv_q].data(), blocks[recv_q].size(), left, tag));
    reqs.push_back(comm.isend(blocks[send_q].data(), blocks[send_q].size(), right, tag));
    cs.s.bytes_sent += blocks[send_q].size();
    if (pending >= 0) decode(pending);
    comm.wait_all(reqs);
    Bytes().swap(blocks[send_q]);  // sent (and decoded): no longer needed
    if (reqs[0].received != blocks[recv_q].size()) {
      toolkit::throw_size_mismatch(op, "rank " + std::to_string(left) + " forwarded " +
                                           std::to_string(reqs[0].received) + " bytes of block " +
                                           std::to_string(recv_q) + ", announced " +
                                           std::to_string(blocks[recv_q].size()));
    }
    pending = recv_q;
  }
  if (pending >= 0) decode(pending);
  if (!decode_own) detail::copy_exact(send, out + displs[r] * es, counts[r] * es);
}

}  // namespace

void allgather(Comm& comm, const void* send, void* recv, size_t count, DType dt,
               const Config& cfg, Stats* stats) {
  const char* op = "allgather";
  toolkit::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size();
  const size_t bytes = toolkit::payload_bytes(count, dt, op);
  toolkit::payload_bytes(count, dt, op, static_cast<size_t>(p));  // recv's
  toolkit::check_buffer(send, count, op, "send");
  toolkit::check_buffer(recv, count, op, "recv");
  toolkit::check_config(cfg, op);
  cs.s.bytes_in = bytes;
  const Route rt = route(Collective::AllGather, bytes, p, cfg);
  if (!rt.compressed) {
    comm.allgather(send, recv, count, elem_type(dt));
    cs.s.bytes_sent = bytes * static_cast<size_t>(p - 1);  // as by a ring
    cs.done(rt.algorithm);
    return;
  }
  std::vector<size_t> counts(p, count), displs(p);
  for (int q = 0; q < p; ++q) displs[q] = count * static_cast<size_t>(q);
  ring(comm, tag, send, recv, counts, displs, dt, cfg, cs, op);
  cs.done(rt.algorithm);
}

void allgatherv(Comm& comm, const void* send, size_t count, void* recv,
                const std::vector<size_t>& counts, DType dt, const Config& cfg, Stats* stats) {
  const char* op = "allgatherv";
  toolkit::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size();
  const size_t total = toolkit::check_counts(counts, count, p, comm.rank(), op);
  toolkit::payload_bytes(total, dt, op);
  toolkit::check_buffer(send, count, op, "send");
  toolkit::check_buffer(recv, total, op, "recv");
  toolkit::check_config(cfg, op);
  std::vector<size_t> displs(p);
  for (int q = 1; q < p; ++q) displs[q] = displs[q - 1] + counts[q - 1];
  const size_t es = fz::dtype_size(dt);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  cs.s.bytes_in = count * es;
  const Route rt = route(Collective::AllGather, largest * es, p, cfg);
  if (!rt.compressed) {
    comm.allgatherv(send, count, recv, counts, elem_type(dt));
    cs.s.bytes_sent = (total - count) * es;  // as by a ring
    cs.done(rt.algorithm);
    return;
  }
  ring(comm, tag, send, recv, counts, displs, dt, cfg, cs, op);
  cs.done(rt.algorithm);
}

}  // namespace zccl::coll
