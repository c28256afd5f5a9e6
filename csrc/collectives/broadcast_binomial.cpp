// Binomial-tree broadcast of one compressed stream (ZCCL data-movement framework).
//
// Steps (virtual ranks v = (rank - root) mod p; see detail::Binomial):
//   1. The root compresses its buffer once.
//   2. Every other node receives from its parent a 16-byte header (stream size, value count) and
//      then the stream itself (sized exactly from the header).
//   3. Each node forwards the header and the *compressed* stream to its children, largest
//      subtree first (never decompressed and recompressed on the way).
//   4. Non-root nodes decompress once into their buffer while the forwards are in flight. A root
//      count different from this rank's count is reported ("size mismatch across ranks") after
//      the forwards, so the subtree below is never left waiting.
//   The root's buffer is left untouched (its values stay exact).
//
// Cost (n values, N = n * sizeof(T) bytes, compression ratio rho, C/D = compress/decompress time):
//   C(n) + ceil(log2 p) * (2*alpha + beta*N/rho) + D(n)   (the header and the stream are sent
//   back to back, so the second alpha mostly overlaps) versus ceil(log2 p) * (alpha + beta*N).
//
// Error bound: non-root values satisfy |x - x'| <= cfg.error_bound (one compression, strict in
// double); the root is exact; cfg.error_bound == 0 is bit-exact everywhere.
//
// Uncompressed MPI path (MPI_Ibcast, exact): cfg.algorithm == Mpi, p == 1, count == 0, or payload
// bytes below cfg.min_compress_bytes. Algorithm::CprP2P runs this same tree (the stream is
// compressed once at the root anyway). Stats.algorithm: Mpi for the MPI path, otherwise CprP2P
// when requested and Auto for "the ZCCL compressed algorithm of this collective" (the Algorithm
// enum has no name for binomial trees).
#include <exception>

#include "datamove_common.h"

namespace zccl::coll {

void broadcast(Comm& comm, void* buf, size_t count, DType dt, int root, const Config& cfg,
               Stats* stats) {
  const char* op = "broadcast";
  detail::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size(), r = comm.rank();
  detail::check_root(comm, root, op);
  const size_t bytes = detail::payload_bytes(count, dt, op);
  detail::check_buffer(buf, count, op, "buf");
  detail::check_config(cfg, op);
  const detail::Binomial tree(p, root, r);
  cs.s.bytes_in = r == root ? bytes : 0;
  if (detail::use_mpi_path(cfg, p, count, bytes)) {
    comm.bcast(buf, count, detail::mpi_type(dt), root);
    cs.s.bytes_sent = bytes * tree.children().size();  // as by a binomial tree
    cs.done(Algorithm::Mpi);
    return;
  }

  // 1./2. The root compresses; the others receive header and stream from their parent.
  detail::Bytes stream;
  uint64_t header[2] = {0, 0};  // stream bytes, value count
  if (tree.v == 0) {
    detail::compress_block(buf, count, dt, cfg, stream, cs.s);
    header[0] = stream.size();
    header[1] = count;
  } else {
    const int parent = tree.rank_of(tree.parent());
    const size_t got = comm.recv(header, sizeof(header), parent, tag);
    if (got != sizeof(header)) {
      detail::throw_size_mismatch(op, "malformed header from rank " + std::to_string(parent));
    }
    stream.resize(header[0]);
    const size_t n = comm.recv(stream.data(), stream.size(), parent, tag + 1);
    if (n != stream.size()) {
      detail::throw_size_mismatch(op, "rank " + std::to_string(parent) + " sent " +
                                          std::to_string(n) + " stream bytes, announced " +
                                          std::to_string(stream.size()));
    }
  }

  // 3. Forward header and compressed stream to the children.
  std::vector<transport::Request> sends;
  for (int child : tree.children()) {
    const int dst = tree.rank_of(child);
    sends.push_back(comm.isend(header, sizeof(header), dst, tag));
    sends.push_back(comm.isend(stream.data(), stream.size(), dst, tag + 1));
    cs.s.bytes_sent += sizeof(header) + stream.size();
  }

  // 4. Decompress once (non-root) while the forwards travel; report errors after them.
  std::exception_ptr error;
  if (tree.v != 0) {
    try {
      if (header[1] != count) {
        detail::throw_size_mismatch(op, "the root broadcasts " + std::to_string(header[1]) +
                                            " values, this rank expects " +
                                            std::to_string(count));
      }
      detail::decompress_block(stream.data(), stream.size(), buf, count, dt, cfg, cs.s, op,
                               root);
    } catch (...) {
      error = std::current_exception();
    }
  }
  comm.wait_all(sends);
  if (error) std::rethrow_exception(error);
  cs.done(cfg.algorithm == Algorithm::CprP2P ? Algorithm::CprP2P : Algorithm::Auto);
}

}  // namespace zccl::coll
