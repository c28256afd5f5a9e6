// Binomial-tree scatter of compressed blocks (ZCCL data-movement framework).
//
// Steps (virtual ranks v = (rank - root) mod p; node v owns the subtree [v, end(v)), see
// detail::Binomial):
//   1. The root compresses the block of every other rank once, child subtree by child subtree
//      (largest first), each subtree's streams back to back in virtual-rank order, and sends a
//      subtree (header + bytes) as soon as it is compressed: the first half of the tree is under
//      way while the root compresses the rest.
//   2. Every other node receives from its parent a header (value count, then the stream size of
//      each block of its subtree) and then the subtree's streams in one message.
//   3. Each node forwards to each child (largest subtree first) the header and the byte range of
//      the child's subtree, sent straight from its buffer (no repacking, no recompression).
//   4. Each non-root node decompresses its own block once while the forwards are in flight.
//      A count different from this rank's count is reported after the forwards complete.
//   The root copies its own block exactly.
//
// Cost (n values per block, N = n * sizeof(T), ratio rho): C((p-1) n) at the root +
//   ceil(log2 p) * 2*alpha + beta*(p-1)*N/rho along the root's links (halving per level) + D(n)
//   versus ceil(log2 p)*alpha + beta*(p-1)*N uncompressed.
//
// Error bound: |x - x'| <= cfg.error_bound on non-root ranks; the root's block is exact.
//
// Uncompressed MPI path (MPI_Iscatter, exact): cfg.algorithm == Mpi, p == 1, count == 0, or block
// bytes below cfg.min_compress_bytes. CprP2P runs this same tree. Stats.algorithm: Mpi, CprP2P
// when requested, otherwise Auto (= this compressed algorithm; see broadcast_binomial.cpp).
#include <exception>
#include <numeric>

#include "datamove_common.h"

namespace zccl::coll {

void scatter(Comm& comm, const void* send, void* recv, size_t count, DType dt, int root,
             const Config& cfg, Stats* stats) {
  const char* op = "scatter";
  detail::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size(), r = comm.rank();
  detail::check_root(comm, root, op);
  const size_t bytes = detail::payload_bytes(count, dt, op);
  detail::payload_bytes(count * static_cast<size_t>(p), dt, op);
  if (r == root) detail::check_buffer(send, count, op, "send");
  detail::check_buffer(recv, count, op, "recv");
  detail::check_config(cfg, op);
  const detail::Binomial tree(p, root, r);
  const auto* in = static_cast<const uint8_t*>(send);
  cs.s.bytes_in = r == root ? bytes * static_cast<size_t>(p) : 0;
  if (detail::use_mpi_path(cfg, p, count, bytes)) {
    comm.scatter(send, recv, count, detail::mpi_type(dt), root);
    cs.s.bytes_sent = r == root ? bytes * static_cast<size_t>(p - 1) : 0;
    cs.done(Algorithm::Mpi);
    return;
  }

  const int end = tree.subtree_end(tree.v);
  const size_t nblocks = static_cast<size_t>(end - tree.v);
  const std::vector<int> children = tree.children();
  // Buffers first: they must outlive the requests (destroyed in reverse order on exceptions).
  // Per child: header (count, then the stream bytes of each block of its subtree) and, at the
  // root, the subtree's streams. Non-root nodes: their header and received range.
  std::vector<std::vector<uint64_t>> child_header(children.size());
  std::vector<detail::Bytes> child_data(tree.v == 0 ? children.size() : 0);
  std::vector<uint64_t> header(1 + nblocks, 0);
  detail::Bytes data;
  std::vector<transport::Request> sends;
  auto forward = [&](size_t k, const uint8_t* bytes_ptr, size_t len) {
    const int dst = tree.rank_of(children[k]);
    const auto& h = child_header[k];
    sends.push_back(comm.isend(h.data(), h.size() * sizeof(uint64_t), dst, tag));
    sends.push_back(comm.isend(bytes_ptr, len, dst, tag + 1));
    cs.s.bytes_sent += h.size() * sizeof(uint64_t) + len;
  };

  if (tree.v == 0) {
    // 1./3. The root compresses child by child (largest subtree first) and sends each subtree as
    // soon as it is ready, so the first subtree is under way while the rest is compressed.
    const size_t one = detail::max_stream_bytes(count, dt, cfg);
    for (size_t k = 0; k < children.size(); ++k) {
      const int lo = children[k], hi = tree.subtree_end(children[k]);
      detail::Bytes& buf = child_data[k];
      buf.resize(one * static_cast<size_t>(hi - lo));
      auto& h = child_header[k];
      h.assign(1 + static_cast<size_t>(hi - lo), 0);
      h[0] = count;
      size_t off = 0;
      for (int i = lo; i < hi; ++i) {
        const int q = tree.rank_of(i);
        const size_t n = detail::compress_into(in + static_cast<size_t>(q) * bytes, count, dt,
                                               cfg, buf.data() + off, buf.size() - off, cs.s);
        h[1 + static_cast<size_t>(i - lo)] = n;
        off += n;
      }
      buf.resize(off);
      forward(k, buf.data(), buf.size());
    }
    detail::copy_exact(in + static_cast<size_t>(r) * bytes, recv, bytes);
    comm.wait_all(sends);
    cs.done(cfg.algorithm == Algorithm::CprP2P ? Algorithm::CprP2P : Algorithm::Auto);
    return;
  }

  // 2. Header, then the subtree's streams in one message.
  const int parent = tree.rank_of(tree.parent());
  const size_t got = comm.recv(header.data(), header.size() * sizeof(uint64_t), parent, tag);
  if (got != header.size() * sizeof(uint64_t)) {
    detail::throw_size_mismatch(op, "malformed header from rank " + std::to_string(parent));
  }
  std::vector<size_t> offset(nblocks + 1, 0);
  for (size_t i = 0; i < nblocks; ++i) offset[i + 1] = offset[i] + header[1 + i];
  data.resize(offset[nblocks]);
  const size_t n = comm.recv(data.data(), data.size(), parent, tag + 1);
  if (n != data.size()) {
    detail::throw_size_mismatch(op, "rank " + std::to_string(parent) + " sent " +
                                        std::to_string(n) + " bytes, announced " +
                                        std::to_string(data.size()));
  }

  // 3. Forward each child's subtree: a slice of the received range.
  for (size_t k = 0; k < children.size(); ++k) {
    const size_t lo = static_cast<size_t>(children[k] - tree.v);
    const size_t hi = static_cast<size_t>(tree.subtree_end(children[k]) - tree.v);
    auto& h = child_header[k];
    h.assign(1 + (hi - lo), 0);
    h[0] = header[0];
    std::copy(header.begin() + 1 + lo, header.begin() + 1 + hi, h.begin() + 1);
    forward(k, data.data() + offset[lo], offset[hi] - offset[lo]);
  }

  // 4. Decompress the own block once while the forwards travel.
  std::exception_ptr error;
  try {
    if (header[0] != count) {
      detail::throw_size_mismatch(op, "the root scatters blocks of " + std::to_string(header[0]) +
                                          " values, this rank expects " + std::to_string(count));
    }
    detail::decompress_block(data.data(), header[1], recv, count, dt, cfg, cs.s, op, root);
  } catch (...) {
    error = std::current_exception();
  }
  comm.wait_all(sends);
  if (error) std::rethrow_exception(error);
  cs.done(cfg.algorithm == Algorithm::CprP2P ? Algorithm::CprP2P : Algorithm::Auto);
}

}  // namespace zccl::coll
