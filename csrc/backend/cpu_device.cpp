// The CPU device of the zccl backend (device.h): host tensors, the fZ-light collectives of
// collectives/, no streams. Half tensors travel as native half streams in data movement.
#include <ATen/ATen.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "device.h"
#include "routing.h"
#include "validate.h"

namespace zccl::backend {
namespace {

class CpuDevice final : public Device {
 public:
  // ZCCL_TEST_HOST_STAGING=1 (tests only): every op runs as the CUDA device runs the ops it has
  // no GPU algorithm for, on host copies of the tensors written back afterwards, so that the CPU
  // test suite checks which results each op body writes back (a missed write-back leaves the
  // copy's 0xA5 bytes or the old values, instead of passing unseen as on the tensor itself).
  CpuDevice() {
    const char* env = std::getenv("ZCCL_TEST_HOST_STAGING");
    staging_ = env != nullptr && std::string(env) == "1";
  }

  void check_tensor(const at::Tensor& t, const char* what) const override {
    check_cpu_dense(t, what);
  }
  std::optional<c10::Stream> prepare(const std::vector<at::Tensor>&) override {
    return std::nullopt;
  }
  void run(const std::optional<c10::Stream>&, const std::function<void()>& body) override {
    body();
  }
  bool widens_halves() const override { return false; }
  coll::Device kind() const override { return coll::Device::Cpu; }
  bool compresses(DeviceOp, at::ScalarType) const override { return !staging_; }
  fz::FiniteRange value_range(const at::Tensor& t, int threads) override {
    return fz::finite_range(t.data_ptr(), compressed_dtype(t.scalar_type()),
                            static_cast<uint64_t>(t.numel()), threads);
  }
  at::Tensor host_view(const at::Tensor& t, bool read, bool) override {
    if (!staging_) return t;
    at::Tensor host = at::empty(t.sizes(), t.options());
    if (read) {
      host.copy_(t);
    } else if (host.numel() > 0) {
      host.view({-1}).view(at::kByte).fill_(0xA5);  // what nothing wrote shows up
    }
    return host;
  }
  void from_host(at::Tensor& t, const at::Tensor& host) override {
    if (!host.is_same(t)) t.copy_(host);
  }

  void allreduce(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt, coll::ReduceOp op,
                 const coll::Config& cfg, coll::Stats* stats) override {
    coll::allreduce(comm, buf, n, dt, op, cfg, stats);
  }
  void reduce(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt, coll::ReduceOp op,
              int root, const coll::Config& cfg, coll::Stats* stats) override {
    coll::reduce(comm, buf, n, dt, op, root, cfg, stats);
  }
  void broadcast(transport::Comm& comm, void* buf, uint64_t n, fz::DType dt, int root,
                 const coll::Config& cfg, coll::Stats* stats) override {
    coll::broadcast(comm, buf, n, dt, root, cfg, stats);
  }
  void allgather(transport::Comm& comm, const void* in, void* out, uint64_t n, fz::DType dt,
                 const coll::Config& cfg, coll::Stats* stats) override {
    coll::allgather(comm, in, out, n, dt, cfg, stats);
  }
  void reduce_scatter(transport::Comm& comm, const void* in, void* out, uint64_t n, fz::DType dt,
                      coll::ReduceOp op, const coll::Config& cfg, coll::Stats* stats) override {
    coll::reduce_scatter(comm, in, out, n, dt, op, cfg, stats);
  }
  void gather(transport::Comm& comm, const void* in, void* out, uint64_t n, fz::DType dt,
              int root, const coll::Config& cfg, coll::Stats* stats) override {
    coll::gather(comm, in, out, n, dt, root, cfg, stats);
  }
  void scatter(transport::Comm& comm, const std::vector<const void*>& blocks, void* out,
               uint64_t n, fz::DType dt, int root, const coll::Config& cfg,
               coll::Stats* stats) override {
    coll::scatter(comm, blocks, out, n, dt, root, cfg, stats);
  }
  void alltoallv(transport::Comm& comm, const void* in, const std::vector<size_t>& send_counts,
                 const std::vector<size_t>& send_displs, void* out,
                 const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                 fz::DType dt, const coll::Config& cfg, coll::Stats* stats) override {
    coll::alltoallv(comm, in, send_counts, send_displs, out, recv_counts, recv_displs, dt, cfg,
                    stats);
  }

 private:
  bool staging_ = false;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

// The CUDA build defines these in cuda_device.cu; this is the only place the backend asks which
// build it is.
#ifndef ZCCL_WITH_CUDA
bool cuda_device_built() { return false; }
std::unique_ptr<Device> make_cuda_device() {
  throw std::logic_error("zccl: this build of the zccl backend has no CUDA path");
}
#endif

}  // namespace zccl::backend
