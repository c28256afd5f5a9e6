// gZ broadcast (data-movement framework): the root compresses its buffer once on the device; the
// stream travels down a binomial tree (each rank forwards the bytes as received, before decoding
// them), and every non-root decodes it once into its buffer. The root's buffer is untouched.
//
// First step: one whole-buffer stream per message (the CPU's broadcast_pipelined.cpp cuts large
// buffers into segments and pipelines a chain; a GPU session can add that on top of the same
// Wire calls).
//
// Cost: one compression, one decompression per rank, ceil(log2 p) (alpha + n w beta / R).
// Output error: eb.
#include <chrono>
#include <stdexcept>
#include <vector>

#include "gpu_common.h"

namespace zccl::gpucoll {

void broadcast(Comm& comm, GpuWorkspace& ws, void* buf, size_t count, DType dt, int root,
               const Config& cfg, GpuStream stream, Stats* stats) {
  Stats local;
  Stats& st = stats != nullptr ? *stats : local;
  st = Stats{};
  const int p = comm.size(), r = comm.rank();
  if (root < 0 || root >= p) throw std::invalid_argument("zccl gpu broadcast: root out of range");
  if (count == 0 || p == 1) return;
  const auto start = std::chrono::steady_clock::now();
  detail::DeviceScope scope(ws.device());
  auto& w = ws.impl();
  const cudaStream_t s = detail::raw(stream);
  const size_t es = detail::dtype_size(dt);
  const size_t cap = detail::capacity(dt, count, cfg.chunk_len);
  const int tag = comm.next_tag_base();
  st.bytes_in = r == root ? count * es : 0;
  detail::Wire wire(w, detail::kRecv, cap);

  // Binomial tree on virtual ranks (root = 0): the parent clears vr's lowest set bit; children
  // are vr + m for the powers of two m below that bit.
  const int vr = (r - root + p) % p;
  int low = 1;
  while (low < p && (vr & low) == 0) low <<= 1;
  size_t len = 0;
  if (vr == 0) {
    len = detail::compress_sync(w, buf, dt, count, cfg.error_bound, cfg.chunk_len, wire.dev(), cap, s);
    wire.publish(0, len, s);
    st.bytes_compressed = count * es;
  } else {
    const int parent = ((vr - low) + root) % p;
    wire.before_receive();
    len = comm.recv(wire.wire(), cap, parent, tag);
    wire.land(0, len, s);  // async: overlaps the forwarding below
  }
  std::vector<transport::Request> sends;
  for (int m = low >> 1; m >= 1; m >>= 1) {  // largest subtree first
    if (vr + m < p) {
      sends.push_back(comm.isend(wire.wire(), len, (vr + m + root) % p, tag));
      st.bytes_sent += len;
    }
  }
  if (vr != 0) {
    size_t dws = 0;
    void* codec = w.codec_ws(0, dt, count, cfg.chunk_len, &dws);
    int32_t* err = w.errs(1);
    gpu::decompress(wire.dev(), len, buf, dt, count, codec, dws, stream, err);
    wire.release(s);
    detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (after decompress)");
    detail::check_decoded(*err, "broadcast", (vr - low + root) % p);
  }
  comm.wait_all(sends);
  st.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace zccl::gpucoll
