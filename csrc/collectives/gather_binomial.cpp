// Binomial-tree gather of compressed blocks (ZCCL data-movement framework).
//
// Steps (virtual ranks v = (rank - root) mod p; node v owns the subtree [v, end(v)), see
// toolkit::Binomial):
//   1. Every node posts the receives of its children's headers (the stream size of each block of
//      the child's subtree), then compresses its own block once (the root does not: its block is
//      copied exactly) while the children do the same.
//   2. Once the headers are in, the node allocates one buffer for its subtree (own stream first,
//      then the children's ranges in virtual-rank order) and receives the children's streams
//      straight into their places.
//   3. A non-root node sends its header (sizes of its subtree's blocks) and the whole range to
//      its parent in two messages; compressed bytes travel up unchanged.
//   4. The root decompresses each of the p-1 blocks once into its place in recv (each stream's
//      count is checked: a rank with another count gives "size mismatch across ranks").
//
// Cost (n values per block, N = n * sizeof(T), ratio rho): C(n) + ceil(log2 p)*2*alpha +
//   beta*(p-1)*N/rho into the root + (p-1)*D(n) at the root, versus ceil(log2 p)*alpha +
//   beta*(p-1)*N uncompressed.
//
// Error bound: the root's copy of another rank's block satisfies |x - x'| <= cfg.error_bound;
// the root's own block is exact.
//
// Uncompressed MPI path (MPI_Igather, exact): cfg.algorithm == Mpi, p == 1, count == 0, or block
// bytes below cfg.min_compress_bytes. CprP2P runs this same tree. Stats.algorithm: Mpi, CprP2P
// when requested, otherwise Auto (= this compressed algorithm; see broadcast_pipelined.cpp).
#include <cstring>

#include "datamove_common.h"

namespace zccl::coll {

void gather(Comm& comm, const void* send, void* recv, size_t count, DType dt, int root,
            const Config& cfg, Stats* stats) {
  const char* op = "gather";
  toolkit::CallStats cs(stats);
  const int tag = comm.next_tag_base();
  const int p = comm.size(), r = comm.rank();
  const size_t bytes = toolkit::check_rooted_blocks(root, p, count, dt, op);
  toolkit::check_buffer(send, count, op, "send");
  if (r == root) toolkit::check_buffer(recv, count, op, "recv");
  toolkit::check_config(cfg, op);
  const toolkit::Binomial tree(p, root, r);
  cs.s.bytes_in = bytes;
  const Route rt = route(Collective::Gather, bytes, p, cfg);
  if (!rt.compressed) {
    comm.gather(send, recv, count, elem_type(dt), root);
    cs.s.bytes_sent = r == root ? 0 : bytes;
    cs.done(rt.algorithm);
    return;
  }
  toolkit::Codec codec = toolkit::Codec::for_data(dt, cfg, cs.s, op);

  // 1. Children's headers, then the own block.
  const std::vector<int> children = tree.children();
  std::vector<std::vector<uint64_t>> child_sizes(children.size());
  std::vector<transport::Request> header_reqs;
  for (size_t k = 0; k < children.size(); ++k) {
    child_sizes[k].resize(static_cast<size_t>(tree.subtree_end(children[k]) - children[k]));
    header_reqs.push_back(comm.irecv(child_sizes[k].data(),
                                     child_sizes[k].size() * sizeof(uint64_t),
                                     tree.rank_of(children[k]), tag));
  }
  toolkit::Bytes own;
  if (tree.v != 0) codec.compress(send, count, own);
  comm.wait_all(header_reqs);
  for (size_t k = 0; k < children.size(); ++k) {
    if (header_reqs[k].received != child_sizes[k].size() * sizeof(uint64_t)) {
      toolkit::throw_size_mismatch(op, "malformed header from rank " +
                                           std::to_string(tree.rank_of(children[k])));
    }
  }

  // 2. Subtree buffer: own stream, then the children's ranges in vrank order (children() lists
  //    the largest subtree first, i.e. the highest vranks first).
  const size_t nblocks = static_cast<size_t>(tree.subtree_end(tree.v) - tree.v);
  std::vector<uint64_t> sizes(nblocks, 0);
  sizes[0] = own.size();
  for (size_t k = 0; k < children.size(); ++k) {
    const size_t lo = static_cast<size_t>(children[k] - tree.v);
    std::copy(child_sizes[k].begin(), child_sizes[k].end(), sizes.begin() + lo);
  }
  std::vector<size_t> offset(nblocks + 1, 0);
  for (size_t i = 0; i < nblocks; ++i) offset[i + 1] = offset[i] + sizes[i];
  toolkit::Bytes data(offset[nblocks]);
  if (!own.empty()) std::memcpy(data.data(), own.data(), own.size());
  toolkit::Bytes().swap(own);
  std::vector<transport::Request> data_reqs;
  for (size_t k = 0; k < children.size(); ++k) {
    const size_t lo = static_cast<size_t>(children[k] - tree.v);
    const size_t hi = static_cast<size_t>(tree.subtree_end(children[k]) - tree.v);
    data_reqs.push_back(comm.irecv(data.data() + offset[lo], offset[hi] - offset[lo],
                                   tree.rank_of(children[k]), tag + 1));
  }
  comm.wait_all(data_reqs);
  for (size_t k = 0; k < children.size(); ++k) {
    const size_t lo = static_cast<size_t>(children[k] - tree.v);
    const size_t hi = static_cast<size_t>(tree.subtree_end(children[k]) - tree.v);
    if (data_reqs[k].received != offset[hi] - offset[lo]) {
      toolkit::throw_size_mismatch(op, "rank " + std::to_string(tree.rank_of(children[k])) +
                                           " sent " + std::to_string(data_reqs[k].received) +
                                           " bytes, announced " +
                                           std::to_string(offset[hi] - offset[lo]));
    }
  }

  if (tree.v != 0) {
    // 3. Up to the parent, unchanged.
    const int parent = tree.rank_of(tree.parent());
    std::vector<transport::Request> sends;
    sends.push_back(comm.isend(sizes.data(), sizes.size() * sizeof(uint64_t), parent, tag));
    sends.push_back(comm.isend(data.data(), data.size(), parent, tag + 1));
    cs.s.bytes_sent += sizes.size() * sizeof(uint64_t) + data.size();
    comm.wait_all(sends);
  } else {
    // 4. The root decompresses every other block once and copies its own exactly.
    auto* out = static_cast<uint8_t*>(recv);
    for (size_t i = 1; i < nblocks; ++i) {
      const int q = tree.rank_of(static_cast<int>(i));
      codec.decompress(data.data() + offset[i], sizes[i], out + static_cast<size_t>(q) * bytes,
                       count, q);
    }
    detail::copy_exact(send, out + static_cast<size_t>(r) * bytes, bytes);
  }
  cs.done(rt.algorithm);
}

}  // namespace zccl::coll
