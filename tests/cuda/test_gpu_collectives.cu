// MPI + GPU test of the gZ collectives (csrc/gpu_collectives), torch-free. Run under mpirun with
// one GPU per rank or several ranks sharing one (rank uses device local_rank % device_count):
//
//   mpirun -np 3 test_gpu_collectives            all checks
//   test_gpu_collectives --host-only             nothing on the device: checks the program runs
//
// Checks, against float64 references computed on the host from per-rank seeds:
//   allreduce ring and recursive doubling, SUM/AVG/MIN/MAX, float32/float64, counts 1, p-1, p+1
//   and primes: within the documented bound (restated below, independently of choose.cpp) plus
//   the reductions' rounding, and bit-identical on every rank (hash of the bytes, allgathered);
//   allgather and broadcast from every root (every rank within eb with the same bits, the owner
//   or root included; with owner_exact its own data exact), scatter from every root (the root's
//   block exact, the others within eb), NaN/Inf kept.
// Prints "N checks, F failures" and exits 1 if any failed on this rank.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../../csrc/gpu_collectives/gpu_collectives.h"
#include "../../csrc/transport/mpi_comm.h"

namespace {

using namespace zccl;
using fz::DType;
using gpucoll::Algorithm;
using gpucoll::ReduceOp;

int g_checks = 0, g_failures = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok && ++g_failures <= 40) std::printf("FAIL: %s\n", what.c_str());
}

void cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(rc));
    std::exit(2);
  }
}

// The documented output bounds (collectives.h).
double bound(Algorithm a, ReduceOp op, int p, double eb) {
  if (p == 1) return 0.0;
  if (op == ReduceOp::Min || op == ReduceOp::Max) return eb;
  int pp = 1;
  while (pp * 2 <= p) pp *= 2;
  const double sum = a == Algorithm::Ring ? p * eb : (p + pp - 2) * eb;
  return op == ReduceOp::Avg ? sum / p : sum;
}

std::vector<double> values(int r, size_t n, int salt) {
  std::mt19937_64 gen(1000u * static_cast<unsigned>(r) + 17u * static_cast<unsigned>(salt) + n);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  double acc = 0;
  for (auto& x : v) x = (acc += normal(gen) / std::sqrt(static_cast<double>(n))) + r;
  return v;
}

template <class T>
struct DeviceArray {  // RAII device copy of a host vector
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(const std::vector<T>& host) : n(host.size()) {
    cuda(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    if (n) cuda(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "H2D");
    // A pageable H2D cudaMemcpy may return before the DMA lands; the collectives run on a
    // non-blocking stream that does not order after the legacy default stream.
    cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after H2D)");
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> get() const {
    std::vector<T> host(n);
    if (n) cuda(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
    return host;
  }
};

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
uint64_t hash(const std::vector<T>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

bool same_everywhere(transport::Comm& comm, uint64_t h) {
  for (const uint64_t other : comm.allgather_u64(h)) {
    if (other != h) return false;
  }
  return true;
}

template <class T>
void check_allreduce(transport::Comm& comm, gpucoll::GpuWorkspace& ws, cudaStream_t stream) {
  const int p = comm.size(), r = comm.rank();
  const double eb = 1e-3;
  const DType dt = sizeof(T) == 8 ? DType::Float64 : DType::Float32;
  const double eps = std::numeric_limits<T>::epsilon();
  for (const Algorithm alg : {Algorithm::Ring, Algorithm::RecursiveDoubling}) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}) {
      for (const size_t n : {size_t{1}, static_cast<size_t>(std::max(p - 1, 1)), static_cast<size_t>(p + 1),
                             size_t{16411}, size_t{262147}}) {
        std::vector<std::vector<T>> all;
        for (int q = 0; q < p; ++q) all.push_back(cast<T>(values(q, n, 0)));
        DeviceArray<T> buf(all[static_cast<size_t>(r)]);
        gpucoll::Config cfg;
        cfg.error_bound = eb;
        cfg.algorithm = alg;
        gpucoll::allreduce(comm, ws, buf.ptr, n, dt, op, cfg, reinterpret_cast<gpu::GpuStream>(stream));
        const std::vector<T> got = buf.get();
        const double b = bound(alg, op, p, eb);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          double ref = all[0][i], mag = std::fabs(all[0][i]);
          for (int q = 1; q < p; ++q) {
            const double x = all[static_cast<size_t>(q)][i];
            mag += std::fabs(x);
            if (op == ReduceOp::Sum || op == ReduceOp::Avg) ref += x;
            if (op == ReduceOp::Min) ref = std::min(ref, x);
            if (op == ReduceOp::Max) ref = std::max(ref, x);
          }
          double slack = 0;
          if (op == ReduceOp::Avg) {
            ref /= p;
            mag /= p;
          }
          if (op == ReduceOp::Sum || op == ReduceOp::Avg) slack = (p + 2) * eps * (mag + b);
          if (!(std::fabs(got[i] - ref) <= b + slack)) ++bad;
        }
        const std::string what = std::string(alg == Algorithm::Ring ? "ring" : "rd") + " op " +
                                 std::to_string(static_cast<int>(op)) + " " + (sizeof(T) == 8 ? "f64" : "f32") +
                                 " n=" + std::to_string(n);
        expect(bad == 0, what + ": " + std::to_string(bad) + " values outside the bound");
        expect(same_everywhere(comm, hash(got)), what + ": replicas differ");
      }
    }
  }
}

void check_data_movement(transport::Comm& comm, gpucoll::GpuWorkspace& ws, cudaStream_t stream,
                         bool owner_exact) {
  const int p = comm.size(), r = comm.rank();
  const double eb = 1e-3;
  const auto gs = reinterpret_cast<gpu::GpuStream>(stream);
  gpucoll::Config cfg;
  cfg.error_bound = eb;
  cfg.owner_exact = owner_exact;
  const std::string mode = owner_exact ? " owner_exact" : "";
  for (const size_t n : {size_t{1}, static_cast<size_t>(p + 1), size_t{16411}, size_t{262147}}) {
    // allgather: every block within eb and the same bits on every rank (the owner decodes its
    // own stream too); with owner_exact the own block exact, the others still replicas.
    {
      std::vector<float> mine = cast<float>(values(r, n, 1));
      mine[0] = r == 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
      DeviceArray<float> in(mine);
      DeviceArray<float> out{std::vector<float>(n * static_cast<size_t>(p))};
      gpucoll::allgather(comm, ws, in.ptr, out.ptr, n, DType::Float32, cfg, gs);
      const std::vector<float> got = out.get();
      size_t bad = 0;
      for (int q = 0; q < p; ++q) {
        std::vector<float> want = cast<float>(values(q, n, 1));
        want[0] = q == 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        for (size_t i = 0; i < n; ++i) {
          const float g = got[static_cast<size_t>(q) * n + i];
          if (std::isnan(want[i])) {
            bad += !std::isnan(g);
          } else if ((owner_exact && q == r) || std::isinf(want[i])) {
            bad += g != want[i];
          } else {
            bad += !(std::fabs(static_cast<double>(g) - want[i]) <= eb);
          }
        }
      }
      expect(bad == 0, "allgather" + mode + " n=" + std::to_string(n) + ": " + std::to_string(bad) + " bad values");
      // Replicas: block q's bits on every rank; with owner_exact the owner's copy is exact
      // instead, so each block is compared among its non-owners.
      for (int q = 0; q < p; ++q) {
        const std::vector<float> block(got.begin() + static_cast<ptrdiff_t>(q * n),
                                       got.begin() + static_cast<ptrdiff_t>((q + 1) * n));
        const uint64_t h = owner_exact && q == r ? 0 : hash(block);
        bool same = true;
        for (const uint64_t other : comm.allgather_u64(h)) same = same && (other == 0 || h == 0 || other == h);
        expect(same, "allgather" + mode + " n=" + std::to_string(n) + ": block " + std::to_string(q) +
                         " differs across ranks");
      }
    }
    for (int root = 0; root < p; ++root) {
      // broadcast: every rank, the root too, within eb with the same bits; with owner_exact the
      // root untouched and the others replicas.
      const std::vector<double> want = values(root, n, 2);
      DeviceArray<double> buf(r == root ? want : std::vector<double>(n, 0.0));
      gpucoll::broadcast(comm, ws, buf.ptr, n, DType::Float64, root, cfg, gs);
      const std::vector<double> got = buf.get();
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        bad += owner_exact && r == root ? got[i] != want[i] : !(std::fabs(got[i] - want[i]) <= eb);
      }
      expect(bad == 0, "broadcast" + mode + " root " + std::to_string(root) + " n=" + std::to_string(n));
      {
        const uint64_t h = owner_exact && r == root ? 0 : hash(got);  // an exact root is no replica
        bool same = true;
        for (const uint64_t other : comm.allgather_u64(h)) same = same && (other == 0 || h == 0 || other == h);
        expect(same, "broadcast" + mode + " root " + std::to_string(root) + " n=" + std::to_string(n) +
                         ": replicas differ");
      }
      // scatter: the root's own block exact, the others within eb.
      std::vector<std::unique_ptr<DeviceArray<float>>> blocks;
      std::vector<const void*> ptrs;
      if (r == root) {
        for (int q = 0; q < p; ++q) {
          blocks.push_back(std::make_unique<DeviceArray<float>>(cast<float>(values(q, n, 3))));
          ptrs.push_back(blocks.back()->ptr);
        }
      }
      DeviceArray<float> out{std::vector<float>(n)};
      gpucoll::scatter(comm, ws, ptrs, out.ptr, n, DType::Float32, root, cfg, gs);
      const std::vector<float> mine = out.get();
      const std::vector<float> expect_block = cast<float>(values(r, n, 3));
      bad = 0;
      for (size_t i = 0; i < n; ++i) {
        bad += r == root ? mine[i] != expect_block[i]
                         : !(std::fabs(static_cast<double>(mine[i]) - expect_block[i]) <= eb);
      }
      expect(bad == 0, "scatter" + mode + " root " + std::to_string(root) + " n=" + std::to_string(n));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--host-only") == 0) {
    std::printf("0 checks, 0 failures\n");  // linked and started: the harness works
    return 0;
  }
  transport::ensure_initialized();
  {
    auto comm = transport::MpiComm::duplicate(MPI_COMM_WORLD);
    comm->set_timeout(std::chrono::minutes(2));  // a failing rank must not hang the others
    int devices = 0;
    cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    cuda(cudaSetDevice((local ? std::atoi(local) : 0) % devices), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    {
      gpucoll::GpuWorkspace ws;
      if (comm->rank() == 0) std::printf("CUDA-aware MPI: %s\n", comm->device_memory() ? "yes" : "no");
      try {
        check_allreduce<float>(*comm, ws, stream);
        check_allreduce<double>(*comm, ws, stream);
        check_data_movement(*comm, ws, stream, /*owner_exact=*/false);
        check_data_movement(*comm, ws, stream, /*owner_exact=*/true);
      } catch (const std::exception& e) {
        expect(false, std::string("exception: ") + e.what());
      }
    }
    cudaStreamDestroy(stream);
  }
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  transport::finalize_if_owned();
  return g_failures == 0 ? 0 : 1;
}
