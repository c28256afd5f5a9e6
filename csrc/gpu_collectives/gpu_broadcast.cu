// gZ broadcast (data-movement framework): the root compresses its buffer once on the device; the
// stream travels down a binomial tree (each rank forwards the bytes as received, before decoding
// them), and every rank decodes it once into its buffer: the root too, so that every rank holds
// the same bits (as the CPU's broadcast_pipelined.cpp), unless cfg.owner_exact leaves the root's
// buffer untouched.
//
// First step: one whole-buffer stream per message (the CPU's broadcast_pipelined.cpp cuts large
// buffers into segments and pipelines a chain; a GPU session can add that on top of the same
// Wire calls).
//
// Cost: one compression, one decompression per rank, ceil(log2 p) (alpha + n w beta / R).
// Output error: eb (the root's exact with cfg.owner_exact).
#include <vector>

#include "gpu_common.h"

namespace zccl::gpucoll {

void broadcast(Comm& comm, GpuWorkspace& ws, void* buf, size_t count, DType dt, int root,
               const Config& cfg, GpuStream stream, Stats* stats) {
  const char* name = "broadcast";
  const int p = comm.size(), r = comm.rank();
  coll::toolkit::check_root(root, p, name);
  coll::toolkit::check_config(cfg, name);
  coll::toolkit::check_buffer(buf, count, name, "buf");
  coll::toolkit::CallStats cs(stats);
  const size_t bytes = count * detail::dtype_size(dt);
  const coll::Route rt = coll::route(coll::Collective::Broadcast, bytes, p, cfg, coll::Device::Cuda);
  detail::require_compressed(rt, count, name);
  if (count == 0 || p == 1) {
    cs.done(rt.algorithm);
    return;
  }
  detail::Call call(ws, stream, comm);
  const size_t cap = detail::capacity(dt, count, cfg.chunk_len);
  const int tag = comm.next_tag_base();
  cs.s.bytes_in = r == root ? bytes : 0;
  detail::Wire wire(call.w, detail::kRecv, cap);

  const coll::toolkit::Binomial tree(p, root, r);
  size_t len = 0;
  if (tree.v == 0) {
    len = detail::compress_sync(call.w, buf, dt, count, cfg.error_bound, cfg.chunk_len, wire.dev(), cap,
                                call.s);
    wire.publish(0, len, call.s);
    cs.s.bytes_compressed = bytes;
  } else {
    wire.before_receive();
    len = comm.recv(wire.wire(), cap, tree.rank_of(tree.parent()), tag);
    wire.land(0, len, call.s);  // async: overlaps the forwarding below
  }
  std::vector<transport::Request> sends;
  for (const int child : tree.children()) {  // largest subtree first
    sends.push_back(comm.isend(wire.wire(), len, tree.rank_of(child), tag));
    cs.s.bytes_sent += len;
  }
  if (tree.v != 0 || !cfg.owner_exact) {
    detail::decode(call.w, wire, 0, len, buf, dt, count, cfg.chunk_len, call.s, "broadcast",
                   tree.v != 0 ? tree.rank_of(tree.parent()) : r);
  }
  comm.wait_all(sends);
  cs.done(rt.algorithm);
}

}  // namespace zccl::gpucoll
