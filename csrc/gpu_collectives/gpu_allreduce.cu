// gZ allreduce entry point: the automatic choice between the ring (gpu_allreduce_ring.cu) and
// recursive doubling (gpu_allreduce_rd.cu), and the dispatch to them.
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "gpu_common.h"

namespace zccl::gpucoll {

Algorithm choose_allreduce(size_t bytes, int p, const Config& cfg) {
  switch (cfg.algorithm) {
    case Algorithm::Ring:
    case Algorithm::CprP2P:
      return Algorithm::Ring;
    case Algorithm::RecursiveDoubling:
    case Algorithm::Mpi:
      return cfg.algorithm;
    case Algorithm::Auto:
      break;
  }
  if (cfg.error_bound == 0.0) return Algorithm::Mpi;
  constexpr size_t kRingBlockBytes = size_t{1} << 20;  // per-rank block where the ring starts
  return bytes / static_cast<size_t>(std::max(p, 1)) < kRingBlockBytes ? Algorithm::RecursiveDoubling
                                                                        : Algorithm::Ring;
}

void allreduce(Comm& comm, GpuWorkspace& ws, void* buf, size_t count, DType dt, ReduceOp op,
               const Config& cfg, GpuStream stream, Stats* stats) {
  Stats local;
  Stats& st = stats != nullptr ? *stats : local;
  st = Stats{};
  const auto start = std::chrono::steady_clock::now();
  const int p = comm.size();
  st.bytes_in = count * detail::dtype_size(dt);
  Algorithm algo = gpucoll::choose_allreduce(st.bytes_in, p, cfg);
  if (algo == Algorithm::Mpi) {
    throw std::invalid_argument("zccl gpu allreduce: the Mpi algorithm moves uncompressed data; the "
                                "caller handles it (choose_allreduce returned Mpi)");
  }
  // MIN/MAX always take recursive doubling: its split bound keeps the documented eb, where a
  // compressed ring would recompress partial minima (the CPU uses an exchange for them instead).
  if (op == ReduceOp::Min || op == ReduceOp::Max) algo = Algorithm::RecursiveDoubling;
  st.algorithm = algo;
  if (count == 0 || p == 1) return;
  detail::DeviceScope scope(ws.device());
  if (algo == Algorithm::Ring) {
    detail::ring_allreduce(comm, ws.impl(), buf, count, dt, op, cfg, detail::raw(stream), st);
  } else {
    detail::rd_allreduce(comm, ws.impl(), buf, count, dt, op, cfg, detail::raw(stream), st);
  }
  st.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace zccl::gpucoll
