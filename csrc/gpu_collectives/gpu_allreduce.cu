// gZ allreduce entry point: coll::route's choice between the ring (gpu_allreduce_ring.cu) and
// recursive doubling (gpu_allreduce_rd.cu), and the dispatch to them.
#include "gpu_common.h"

namespace zccl::gpucoll {

void allreduce(Comm& comm, GpuWorkspace& ws, void* buf, size_t count, DType dt, ReduceOp op,
               const Config& cfg, GpuStream stream, Stats* stats) {
  const char* name = "allreduce";
  coll::toolkit::check_reduction(dt, op, name);
  coll::toolkit::check_config(cfg, name);
  coll::toolkit::check_buffer(buf, count, name, "buf");
  coll::toolkit::CallStats cs(stats);
  const int p = comm.size();
  cs.s.bytes_in = count * detail::dtype_size(dt);
  const coll::Route rt =
      coll::route(coll::Collective::AllReduce, cs.s.bytes_in, p, cfg, coll::Device::Cuda);
  detail::require_compressed(rt, count, name);
  // MIN/MAX always take recursive doubling: its split bound keeps the documented eb, where a
  // compressed ring would recompress partial minima (the CPU uses an exchange for them instead).
  const bool min_max = op == ReduceOp::Min || op == ReduceOp::Max;
  const Algorithm algo = min_max && rt.compressed ? Algorithm::RecursiveDoubling : rt.algorithm;
  if (count > 0 && p > 1) {
    detail::Call call(ws, stream, comm);
    if (algo == Algorithm::Ring) {
      detail::ring_allreduce(comm, call.w, buf, count, dt, op, cfg, call.s, cs.s);
    } else {
      detail::rd_allreduce(comm, call.w, buf, count, dt, op, cfg, call.s, cs.s);
    }
  }
  cs.done(algo);
}

}  // namespace zccl::gpucoll
