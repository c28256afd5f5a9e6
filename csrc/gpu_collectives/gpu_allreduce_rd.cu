// gZ recursive-doubling allreduce (whole buffer per round; the fold for non-power-of-two p), the
// scheme of the CPU's allreduce_recursive_doubling.cpp on the device. Every rank ends with
// bit-identical values.
//
// p' = largest power of two <= p, rem = p - p', L = log2 p'.
//   fold in  (rem > 0): among ranks 0 .. 2 rem - 1 each odd rank sends C(x) to rank-1, which
//            decompress-reduces it into its exact buffer; the p' remaining ranks renumber
//            (even r < 2 rem -> r/2, r >= 2 rem -> r - rem).
//   rounds   mask = 1 .. p'/2, partner = newrank ^ mask: compress the own buffer, exchange the
//            streams, then decode BOTH: v = op(D(lower newrank's stream), D(higher's)) -- a plain
//            decompress of the lower into the buffer, then a fused decompress-reduce of the
//            higher. Both partners run the same kernels on the same bytes: identical v.
//   fold out (rem > 0): each folded even rank forwards the two streams of its last round (lower
//            first) to its odd partner, which decodes them the same way: identical result, no
//            extra error.
// Whole-buffer rounds keep the GPU busy with one large kernel per step: the choice for small
// and medium messages.
//
// Output error (exact arithmetic, as the CPU file proves): SUM (p + p' - 2) eb, AVG that / p
// (one divide at the end); MIN/MAX: each of the L + f stages runs with eb / (L + f), total eb.
#include "gpu_common.h"

namespace zccl::gpucoll::detail {

void rd_allreduce(Comm& comm, GpuWorkspace::Impl& ws, void* buf, size_t count, DType dt,
                  ReduceOp op, const Config& cfg, cudaStream_t stream, Stats& st) {
  const int p = comm.size(), r = comm.rank();
  const coll::toolkit::Doubling rd(p, r);
  const bool min_max = op == ReduceOp::Min || op == ReduceOp::Max;
  const double eb = min_max ? cfg.error_bound / rd.stages() : cfg.error_bound;
  const gpu::ReduceOp gop = gpu_op(op == ReduceOp::Avg ? ReduceOp::Sum : op);
  const size_t es = dtype_size(dt);
  const size_t cap = capacity(dt, count, cfg.chunk_len);
  const int tag = comm.next_tag_base();

  Wire own(ws, kSend, cap);   // this rank's stream of the current round
  Wire peer(ws, kRecv, cap);  // the partner's
  size_t own_len = 0, peer_len = 0;
  bool own_is_lower = true;

  auto decode_into = [&](Wire& w, size_t len, bool reduce, const char* what, int from) {
    decode(ws, w, 0, len, buf, dt, count, cfg.chunk_len, stream, what, from,
           reduce ? std::optional<gpu::ReduceOp>(gop) : std::nullopt);
  };
  auto compress_own = [&]() {
    own_len = compress_sync(ws, buf, dt, count, eb, cfg.chunk_len, own.dev(), cap, stream);
    own.publish(0, own_len, stream);
    st.bytes_compressed += count * es;
  };

  // Fold in.
  const int newrank = rd.newrank;
  if (rd.fold_sender()) {
    compress_own();
    comm.send(own.wire(), own_len, r - 1, tag);
    st.bytes_sent += own_len;
  } else if (rd.in_fold()) {
    peer.before_receive();
    peer_len = comm.recv(peer.wire(), cap, r + 1, tag);
    peer.land(0, peer_len, stream);
    decode_into(peer, peer_len, true, "all_reduce (recursive doubling, fold in)", r + 1);
  }

  // Rounds.
  if (newrank >= 0) {
    for (int mask = 1; mask < rd.pp; mask <<= 1) {
      const int partner = rd.real_rank(newrank ^ mask);
      peer.before_receive();
      transport::Request rreq = comm.irecv(peer.wire(), cap, partner, tag + 1);
      compress_own();
      transport::Request sreq = comm.isend(own.wire(), own_len, partner, tag + 1);
      st.bytes_sent += own_len;
      peer_len = comm.wait(rreq);
      comm.wait(sreq);
      peer.land(0, peer_len, stream);
      own_is_lower = newrank < (newrank ^ mask);
      Wire& lower = own_is_lower ? own : peer;
      Wire& higher = own_is_lower ? peer : own;
      const size_t lo_len = own_is_lower ? own_len : peer_len;
      const size_t hi_len = own_is_lower ? peer_len : own_len;
      decode_into(lower, lo_len, false, "all_reduce (recursive doubling)", partner);
      decode_into(higher, hi_len, true, "all_reduce (recursive doubling)", partner);
    }
  }

  // Fold out: forward the last round's two streams, lower first.
  if (rd.in_fold()) {
    if (!rd.fold_sender()) {
      Wire& lower = own_is_lower ? own : peer;
      Wire& higher = own_is_lower ? peer : own;
      // Staged, the wires' host sides still hold both streams (own: published; peer: received).
      comm.send(lower.wire(), own_is_lower ? own_len : peer_len, r + 1, tag + 2);
      comm.send(higher.wire(), own_is_lower ? peer_len : own_len, r + 1, tag + 3);
      st.bytes_sent += own_len + peer_len;
    } else {
      own.before_receive();
      peer.before_receive();
      const size_t lo_len = comm.recv(own.wire(), cap, r - 1, tag + 2);
      const size_t hi_len = comm.recv(peer.wire(), cap, r - 1, tag + 3);
      own.land(0, lo_len, stream);
      peer.land(0, hi_len, stream);
      decode_into(own, lo_len, false, "all_reduce (recursive doubling, fold out)", r - 1);
      decode_into(peer, hi_len, true, "all_reduce (recursive doubling, fold out)", r - 1);
    }
  }

  if (op == ReduceOp::Avg) {
    gpu::divide(buf, dt, count, p, reinterpret_cast<GpuStream>(stream));
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after divide)");
  }
}

}  // namespace zccl::gpucoll::detail
