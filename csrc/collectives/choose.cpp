// Public entry points of the computation framework for allreduce and reduce_scatter (dispatch to
// one algorithm file each, as route() decides), and the documented output bounds.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "compute_common.h"
#include "reduce_kernels.h"

namespace zccl::coll {

namespace {

using namespace compute;

template <class T>
void mpi_allreduce(Comm& comm, T* buf, size_t count, ReduceOp op, const Config& cfg) {
  comm.allreduce(transport::kInPlace, buf, count, elem_type(dtype_of<T>()), reduce_kind(op));
  if (op == ReduceOp::Avg) kernels::divide(buf, count, comm.size(), cfg.threads);
}

template <class T>
void allreduce_typed(Comm& comm, T* buf, size_t count, ReduceOp op, const Config& cfg,
                     Algorithm alg, Stats& st) {
  const int p = comm.size();
  const size_t bytes = count * sizeof(T);
  const double eb = cfg.error_bound;
  switch (alg) {
    case Algorithm::Mpi:
      mpi_allreduce(comm, buf, count, op, cfg);
      // What a bandwidth-optimal exact allreduce sends (MPI's own choice is not observable).
      st.bytes_sent += p > 1 ? 2 * (p - 1) * bytes / p : 0;
      return;
    case Algorithm::Ring: ring_allreduce(comm, buf, count, op, eb, cfg, st); return;
    case Algorithm::RecursiveDoubling:
      recursive_doubling_allreduce(comm, buf, count, op, eb, cfg, st);
      return;
    case Algorithm::CprP2P: cprp2p_allreduce(comm, buf, count, op, eb, cfg, st); return;
    case Algorithm::HalvingDoubling:
      halving_doubling_allreduce(comm, buf, count, op, eb, cfg, st);
      return;
    case Algorithm::Auto: break;
  }
  throw std::logic_error("zccl allreduce: no algorithm resolved");
}

template <class T>
void reduce_scatter_typed(Comm& comm, const T* send, T* recv, size_t count, ReduceOp op,
                          const Config& cfg, Algorithm alg, Stats& st) {
  const int p = comm.size();
  const size_t total = count * static_cast<size_t>(p);
  const size_t bytes = total * sizeof(T);

  // Our algorithms keep a partial in the output between steps and read the input until the
  // last step: an output overlapping the input goes through a temporary.
  const bool alias = overlaps(send, bytes, recv, count * sizeof(T));
  Buffer<T> tmp(alias ? count : 0);
  T* out = alias ? tmp.data() : recv;

  if (alg == Algorithm::Mpi) {
    if (p == 1) {
      std::copy(send, send + count, out);
    } else {
      comm.reduce_scatter_block(send, out, count, elem_type(dtype_of<T>()), reduce_kind(op));
      st.bytes_sent += (p - 1) * count * sizeof(T);
    }
  } else {
    const Blocks blocks = Blocks::balanced(total, p);  // p blocks of `count`
    const double eb = cfg.error_bound;
    if (is_min_max(op) && alg == Algorithm::Ring) {
      exchange_reduce_scatter(comm, send, out, blocks, op, eb, cfg, st);
    } else if (alg == Algorithm::Ring) {
      ring_reduce_scatter(comm, RingBuffers<T>{send, nullptr, out},
                          RingSegments::contiguous(blocks, dtype_of<T>(), cfg), op, eb, cfg, st);
    } else {  // CprP2P; MIN/MAX: p-1 compressions on a chain share eb
      const double eb_hop = is_min_max(op) ? split_bound(eb, p - 1) : eb;
      cprp2p_reduce_scatter(comm, RingBuffers<T>{send, nullptr, out}, blocks, op, eb_hop, cfg, st);
    }
  }
  if (op == ReduceOp::Avg) kernels::divide(out, count, p, cfg.threads);
  if (alias) std::copy(out, out + count, recv);
}

}  // namespace

// ------------------------------------------------------------------------------------------------

void allreduce(Comm& comm, void* buf, size_t count, DType dt, ReduceOp op, const Config& cfg,
               Stats* stats) {
  const char* name = "allreduce";
  check_reduction(dt, op, name);
  check_config(cfg, name);
  check_buffer(buf, count, name, "buf");
  CallStats cs(stats);
  cs.s.bytes_in = count * fz::dtype_size(dt);
  const Route rt = route(Collective::AllReduce, cs.s.bytes_in, comm.size(), cfg);
  if (dt == DType::Float32) {
    allreduce_typed(comm, static_cast<float*>(buf), count, op, cfg, rt.algorithm, cs.s);
  } else {
    allreduce_typed(comm, static_cast<double*>(buf), count, op, cfg, rt.algorithm, cs.s);
  }
  cs.done(rt.algorithm);
}

void reduce_scatter(Comm& comm, const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                    const Config& cfg, Stats* stats) {
  const char* name = "reduce_scatter";
  const int p = comm.size();
  check_reduction(dt, op, name);
  check_config(cfg, name);
  const size_t bytes = payload_bytes(count, dt, name, static_cast<size_t>(p));
  check_buffer(send, count, name, "send");
  check_buffer(recv, count, name, "recv");
  CallStats cs(stats);
  cs.s.bytes_in = bytes;
  const Route rt = route(Collective::ReduceScatter, bytes, p, cfg);
  if (dt == DType::Float32) {
    reduce_scatter_typed(comm, static_cast<const float*>(send), static_cast<float*>(recv), count,
                         op, cfg, rt.algorithm, cs.s);
  } else {
    reduce_scatter_typed(comm, static_cast<const double*>(send), static_cast<double*>(recv), count,
                         op, cfg, rt.algorithm, cs.s);
  }
  cs.done(rt.algorithm);
}

// Worst-case |output - exact| in exact arithmetic (floating-point rounding of the reductions
// comes on top). `allreduce` = false: reduce_scatter. reduce() never exceeds the allreduce bound
// of the same algorithm (see reduce.cpp), so the allreduce value also bounds reduce.
double output_error_bound(Algorithm algorithm, ReduceOp op, int p, double eb, bool allreduce) {
  if (p < 1) throw std::invalid_argument("zccl output_error_bound: p must be >= 1");
  if (!(eb >= 0) || !std::isfinite(eb)) {
    throw std::invalid_argument("zccl output_error_bound: eb must be finite and >= 0");
  }
  if (p == 1 || algorithm == Algorithm::Mpi) return 0.0;
  if (is_min_max(op)) return eb;  // every compressed algorithm splits eb over its stages
  const int pp = pow2_floor(p);
  const double ring_rs = (p - 1) * eb;
  const double ring_ar = p * eb;             // (p-1) eb + eb for the allgather stage
  const double rd_ar = (p + pp - 2) * eb;    // 2(p'-1) eb + eb per folded rank
  const double cpr_ar = 2.0 * (p - 1) * eb;  // recompression at every allgather hop
  double sum = 0.0;
  switch (algorithm) {
    case Algorithm::Ring: sum = allreduce ? ring_ar : ring_rs; break;
    case Algorithm::RecursiveDoubling: sum = allreduce ? rd_ar : ring_rs; break;  // RS: ring
    case Algorithm::CprP2P: sum = allreduce ? cpr_ar : ring_rs; break;
    case Algorithm::HalvingDoubling: sum = allreduce ? ring_ar : ring_rs; break;  // RS: ring
    case Algorithm::Auto: sum = allreduce ? std::max(ring_ar, rd_ar) : ring_rs; break;
    case Algorithm::Mpi: return 0.0;
    default: throw std::invalid_argument("zccl output_error_bound: unknown algorithm");
  }
  if (op == ReduceOp::Avg) return sum / p;
  if (op != ReduceOp::Sum) throw std::invalid_argument("zccl output_error_bound: unknown op");
  return sum;
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Auto: return "auto";
    case Algorithm::Ring: return "ring";
    case Algorithm::RecursiveDoubling: return "recursive_doubling";
    case Algorithm::Mpi: return "mpi";
    case Algorithm::CprP2P: return "cprp2p";
    case Algorithm::HalvingDoubling: return "halving_doubling";
  }
  return "unknown";
}

Algorithm algorithm_from_name(const std::string& name) {
  for (Algorithm a : {Algorithm::Auto, Algorithm::Ring, Algorithm::RecursiveDoubling,
                      Algorithm::Mpi, Algorithm::CprP2P, Algorithm::HalvingDoubling}) {
    if (name == algorithm_name(a)) return a;
  }
  throw std::invalid_argument("zccl: unknown algorithm '" + name + "'");
}

}  // namespace zccl::coll
