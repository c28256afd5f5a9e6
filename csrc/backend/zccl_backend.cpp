#include "zccl_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "routing.h"
#include "staged.h"

namespace zccl::backend {
namespace {

using transport::Comm;

void check_cpu_dense(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu()) {
#ifdef ZCCL_WITH_CUDA
    throw std::invalid_argument(std::string("zccl: ") + what + ": tensor is on " +
                                t.device().str() + "; the zccl backend handles CUDA tensors in "
                                "all_reduce, broadcast, all_gather and scatter only (move the "
                                "tensor to the CPU for this op)");
#else
    throw std::invalid_argument(std::string("zccl: ") + what + ": tensor is on " +
                                t.device().str() + "; this build of the zccl backend handles CPU "
                                "tensors only");
#endif
  }
  if (t.layout() != at::kStrided) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": sparse tensors are not supported");
  }
  (void)mpi_datatype(t.scalar_type());  // throws for unsupported dtypes (complex, ...)
}

void check_single(const std::vector<at::Tensor>& tensors, const char* what) {
  if (tensors.size() != 1) {
    throw std::invalid_argument(std::string("zccl: ") + what + " takes exactly one tensor per call, got " +
                                std::to_string(tensors.size()));
  }
  check_cpu_dense(tensors[0], what);
}

void check_root(int64_t root, int size, const char* what) {
  if (root < 0 || root >= size) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": root " + std::to_string(root) +
                                " is not a rank of this group (size " + std::to_string(size) + ")");
  }
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel()) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": tensors must share dtype and size (" +
                                c10::toString(a.scalar_type()) + "[" + std::to_string(a.numel()) + "] vs " +
                                c10::toString(b.scalar_type()) + "[" + std::to_string(b.numel()) + "])");
  }
}

// The absolute bound for data only this rank compresses (broadcast/scatter roots, sends): a REL
// bound needs no agreement then, the sender's own value range (over all its parts) defines it.
double local_bound(const std::vector<at::Tensor>& parts, const CallConfig& cfg) {
  if (cfg.mode != BoundMode::Rel) return cfg.error_bound;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const auto& part : parts) {
    const fz::FiniteRange r =
        fz::finite_range(part.data_ptr(), compressed_dtype(part.scalar_type()),
                         static_cast<uint64_t>(part.numel()), cfg.threads);
    if (!r.any_finite) continue;
    lo = std::min(lo, r.min);
    hi = std::max(hi, r.max);
  }
  return rel_bound(cfg.error_bound, lo, hi);
}

double local_bound(const at::Tensor& contiguous, const CallConfig& cfg) {
  return local_bound(std::vector<at::Tensor>{contiguous}, cfg);
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Construction, worker threads.

ZcclBackend::ZcclBackend(std::unique_ptr<Comm> coll_comm, std::unique_ptr<Comm> p2p_comm,
                         CallConfig defaults, std::chrono::milliseconds timeout)
    : c10d::Backend(coll_comm->rank(), coll_comm->size()),
      comm_(std::move(coll_comm)),
      p2p_comm_(std::move(p2p_comm)),
      defaults_(defaults),
      timeout_(timeout) {
  comm_->set_timeout(timeout);
  p2p_comm_->set_timeout(timeout);
  worker_ = std::thread([this] { worker_loop(); });
  p2p_thread_ = std::thread([this] { p2p_loop(); });
}

ZcclBackend::~ZcclBackend() { shutdown(); }

void ZcclBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    p2p_stopping_ = true;
  }
  p2p_cv_.notify_all();
  if (p2p_thread_.joinable()) p2p_thread_.join();
}

void ZcclBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  comm_->set_timeout(timeout);
  p2p_comm_->set_timeout(timeout);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::enqueue(const char* name, c10d::OpType type,
                                                    std::vector<at::Tensor> outputs, Job job,
                                                    std::optional<c10::Stream> stream) {
  auto work = c10::make_intrusive<ZcclWork>(std::move(outputs), type, name, timeout_, stream);
  const CallConfig config = resolve_for_thread(defaults_);  // captured on the caller's thread
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (stopping_) throw std::runtime_error("zccl: the process group has been shut down");
    queue_.push_back(Queued{work, std::move(job), config});
  }
  queue_cv_.notify_one();
  return work;
}

void ZcclBackend::worker_loop() {
  for (;;) {
    Queued item;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      item.job(item.config);
      item.work->complete();
    } catch (...) {
      item.work->fail(std::current_exception());
    }
  }
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::post_p2p(const char* name, c10d::OpType type,
                                                     std::vector<at::Tensor> outputs,
                                                     transport::Request request,
                                                     std::function<void(size_t)> on_done) {
  auto work = c10::make_intrusive<ZcclWork>(std::move(outputs), type, name, timeout_);
  {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    p2p_.push_back(PendingP2P{work, std::move(request), std::move(on_done)});
  }
  p2p_cv_.notify_one();
  return work;
}

void ZcclBackend::p2p_loop() {
  // Polls posted sends/receives; completes their Work (and decompresses receives) when done.
  for (;;) {
    std::deque<PendingP2P> batch;
    {
      std::unique_lock<std::mutex> lock(p2p_mutex_);
      p2p_cv_.wait(lock, [this] { return p2p_stopping_ || !p2p_.empty(); });
      if (p2p_.empty()) return;
      batch.swap(p2p_);
    }
    std::deque<PendingP2P> still;
    for (auto& item : batch) {
      try {
        size_t bytes = 0;
        if (p2p_comm_->test(item.request, &bytes)) {
          if (item.on_done) item.on_done(bytes);
          item.work->complete();
        } else {
          still.push_back(std::move(item));
        }
      } catch (...) {
        item.work->fail(std::current_exception());
      }
    }
    if (!still.empty()) {
      std::lock_guard<std::mutex> lock(p2p_mutex_);
      for (auto& item : still) p2p_.push_back(std::move(item));
    }
    if (!still.empty()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

LastStats ZcclBackend::last_stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return last_;
}

void ZcclBackend::record(const char* op, const coll::Stats& stats, double eb) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  last_.stats = stats;
  last_.error_bound = eb;
  last_.op = op;
}

// ------------------------------------------------------------------------------------------
// Shared steps of the op bodies.

bool ZcclBackend::compressed_path(at::ScalarType dtype, uint64_t numel, const CallConfig& cfg) const {
  if (!is_compressible_dtype(dtype) || numel == 0) return false;
  if (cfg.algorithm == coll::Algorithm::Mpi) return false;
  const size_t bytes = numel * c10::elementSize(dtype);
  return bytes >= cfg.min_compress_bytes;
}

coll::Config ZcclBackend::coll_config(const CallConfig& cfg, double eb) const {
  coll::Config c;
  c.error_bound = eb;
  c.threads = cfg.threads;
  c.chunk_len = cfg.chunk_len;
  c.algorithm = cfg.algorithm;
  c.min_compress_bytes = 0;  // the backend already decided to compress
  return c;
}

double ZcclBackend::agree(const char* what, uint64_t count, const at::Tensor* data,
                          const CallConfig& cfg, bool rel_needed) const {
  const bool rel = rel_needed && cfg.mode == BoundMode::Rel;
  if (!rel && !cfg.check_sizes) return cfg.error_bound;
  // One tiny MAX-allreduce carries both checks: [-min, max, count, -count].
  double v[4] = {-std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                 static_cast<double>(count), -static_cast<double>(count)};
  if (rel && data != nullptr && data->numel() > 0) {
    const at::Tensor c = data->contiguous();
#ifdef ZCCL_WITH_CUDA
    const fz::FiniteRange r =
        c.is_cuda() ? cuda_range(c)
                    : fz::finite_range(c.data_ptr(), compressed_dtype(c.scalar_type()),
                                       static_cast<uint64_t>(c.numel()), cfg.threads);
#else
    const fz::FiniteRange r = fz::finite_range(c.data_ptr(), compressed_dtype(c.scalar_type()),
                                               static_cast<uint64_t>(c.numel()), cfg.threads);
#endif
    if (r.any_finite) {
      v[0] = -r.min;
      v[1] = r.max;
    }
  }
  double out[4];
  comm_->allreduce(v, out, 4, MPI_DOUBLE, MPI_MAX);
  if (cfg.check_sizes && out[2] != -out[3]) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": size mismatch across ranks: "
                                "element counts range from " + std::to_string(static_cast<uint64_t>(-out[3])) +
                                " to " + std::to_string(static_cast<uint64_t>(out[2])));
  }
  if (!rel) return cfg.error_bound;
  return rel_bound(cfg.error_bound, -out[0], out[1]);  // no finite value anywhere: 0, exact
}

// ------------------------------------------------------------------------------------------
// Op bodies (worker thread).

void ZcclBackend::run_allreduce(at::Tensor& t, const c10d::ReduceOp& op, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const auto cop = compressed_op(op);
  const bool compress = cop.has_value() && compressed_path(t.scalar_type(), n, cfg);
  Staged s(t, compress || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
  const double eb = agree("all_reduce", n, &s.buffer, cfg, compress);
  if (n == 0) return;
  if (compress) {
    coll::Stats stats;
    coll::allreduce(*comm_, s.buffer.data_ptr(), n, compressed_dtype(s.buffer.scalar_type()), *cop,
                    coll_config(cfg, eb), &stats);
    record("all_reduce", stats, eb);
  } else {
    comm_->allreduce(MPI_IN_PLACE, s.buffer.data_ptr(), n, mpi_datatype(s.buffer.scalar_type()),
                     mpi_op(op, s.buffer.scalar_type()));
    if (op.op_ == c10d::ReduceOp::AVG) s.buffer.div_(comm_->size());
  }
  s.write_back();
}

void ZcclBackend::run_broadcast(at::Tensor& t, int root, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const bool compress = compressed_path(t.scalar_type(), n, cfg);
  Staged s(t, compress);
  // Only the root compresses, so a REL bound needs no agreement: use the root's own range.
  double eb = agree("broadcast", n, nullptr, cfg, false);
  if (n == 0) return;
  if (compress) {
    if (comm_->rank() == root) eb = local_bound(s.buffer, cfg);
    coll::Stats stats;
    coll::broadcast(*comm_, s.buffer.data_ptr(), n, compressed_dtype(s.buffer.scalar_type()), root,
                    coll_config(cfg, eb), &stats);
    record("broadcast", stats, eb);
  } else {
    comm_->bcast(s.buffer.data_ptr(), n, mpi_datatype(s.buffer.scalar_type()), root);
  }
  s.write_back();
}

void ZcclBackend::run_reduce(at::Tensor& t, const c10d::ReduceOp& op, int root, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const auto cop = compressed_op(op);
  const bool compress = cop.has_value() && compressed_path(t.scalar_type(), n, cfg);
  Staged s(t, compress || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
  const double eb = agree("reduce", n, &s.buffer, cfg, compress);
  if (n == 0) return;
  if (compress) {
    coll::Stats stats;
    coll::reduce(*comm_, s.buffer.data_ptr(), n, compressed_dtype(s.buffer.scalar_type()), *cop, root,
                 coll_config(cfg, eb), &stats);
    record("reduce", stats, eb);
  } else {
    const bool at_root = comm_->rank() == root;
    comm_->reduce(at_root ? MPI_IN_PLACE : s.buffer.data_ptr(), s.buffer.data_ptr(), n,
                  mpi_datatype(s.buffer.scalar_type()), mpi_op(op, s.buffer.scalar_type()), root);
    if (at_root && op.op_ == c10d::ReduceOp::AVG) s.buffer.div_(comm_->size());
  }
  if (comm_->rank() == root) s.write_back();
}

void ZcclBackend::run_allgather(const at::Tensor& in, at::Tensor& flat_out, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(in.numel());
  const bool compress = compressed_path(in.scalar_type(), n, cfg);
  Staged src(in, compress);
  Staged dst(flat_out, compress);
  const double eb = agree("all_gather", n, &src.buffer, cfg, compress);
  if (n == 0) return;
  if (compress) {
    coll::Stats stats;
    coll::allgather(*comm_, src.buffer.data_ptr(), dst.buffer.data_ptr(), n,
                    compressed_dtype(src.buffer.scalar_type()), coll_config(cfg, eb), &stats);
    record("all_gather", stats, eb);
  } else {
    comm_->allgather(src.buffer.data_ptr(), dst.buffer.data_ptr(), n, mpi_datatype(in.scalar_type()));
  }
  dst.write_back();
}

void ZcclBackend::run_reduce_scatter(const at::Tensor& flat_in, at::Tensor& out,
                                     const c10d::ReduceOp& op, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(out.numel());
  const auto cop = compressed_op(op);
  const bool half = out.scalar_type() == at::kHalf || out.scalar_type() == at::kBFloat16;
  const bool compress = cop.has_value() && compressed_path(out.scalar_type(), n, cfg);
  Staged src(flat_in, compress || half);
  Staged dst(out, compress || half);
  const double eb = agree("reduce_scatter", n, &src.buffer, cfg, compress);
  if (n == 0) return;
  if (compress) {
    coll::Stats stats;
    coll::reduce_scatter(*comm_, src.buffer.data_ptr(), dst.buffer.data_ptr(), n,
                         compressed_dtype(src.buffer.scalar_type()), *cop, coll_config(cfg, eb), &stats);
    record("reduce_scatter", stats, eb);
  } else {
    comm_->reduce_scatter_block(src.buffer.data_ptr(), dst.buffer.data_ptr(), n,
                                mpi_datatype(src.buffer.scalar_type()), mpi_op(op, src.buffer.scalar_type()));
    if (op.op_ == c10d::ReduceOp::AVG) dst.buffer.div_(comm_->size());
  }
  dst.write_back();
}

void ZcclBackend::run_gather(const at::Tensor& in, at::Tensor* flat_out, int root, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(in.numel());
  const bool compress = compressed_path(in.scalar_type(), n, cfg);
  Staged src(in, compress);
  std::optional<Staged> dst;
  if (flat_out != nullptr) dst.emplace(*flat_out, compress);
  const double eb = agree("gather", n, &src.buffer, cfg, compress);
  if (n == 0) return;
  void* out = dst ? dst->buffer.data_ptr() : nullptr;
  if (compress) {
    coll::Stats stats;
    coll::gather(*comm_, src.buffer.data_ptr(), out, n, compressed_dtype(src.buffer.scalar_type()), root,
                 coll_config(cfg, eb), &stats);
    record("gather", stats, eb);
  } else {
    comm_->gather(src.buffer.data_ptr(), out, n, mpi_datatype(in.scalar_type()), root);
  }
  if (dst) dst->write_back();
}

void ZcclBackend::run_scatter(const std::vector<at::Tensor>& ins, at::Tensor& out, int root,
                              const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(out.numel());
  const bool compress = compressed_path(out.scalar_type(), n, cfg);
  Staged dst(out, compress);
  double eb = agree("scatter", n, nullptr, cfg, false);
  if (n == 0) return;
  if (!compress) {
    // MPI_Scatter wants the blocks back to back; the uncompressed path pays that one copy.
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : ins) flat_parts.push_back(t.reshape({-1}));
    const at::Tensor flat = ins.empty() ? at::Tensor() : at::cat(flat_parts);
    comm_->scatter(ins.empty() ? nullptr : flat.data_ptr(), dst.buffer.data_ptr(), n,
                   mpi_datatype(out.scalar_type()), root);
    dst.write_back();
    return;
  }
  // The compressed path reads each block where it lies (a contiguous float32/64 block is not
  // copied at all): packing a list of 64 MB blocks into one buffer took longer than compressing it.
  std::vector<at::Tensor> staged;
  std::vector<const void*> blocks;
  for (const auto& t : ins) {
    staged.push_back(Staged(t, true).buffer);
    blocks.push_back(staged.back().data_ptr());
  }
  if (!staged.empty()) eb = local_bound(staged, cfg);
  coll::Stats stats;
  coll::scatter(*comm_, blocks, dst.buffer.data_ptr(), n, compressed_dtype(dst.buffer.scalar_type()),
                root, coll_config(cfg, eb), &stats);
  record("scatter", stats, eb);
  dst.write_back();
}

void ZcclBackend::run_alltoall(const at::Tensor& in, at::Tensor& out,
                               const std::vector<size_t>& send_counts,
                               const std::vector<size_t>& recv_counts, const CallConfig& cfg) {
  const int p = comm_->size();
  std::vector<size_t> sd(p, 0), rd(p, 0);
  for (int r = 1; r < p; ++r) {
    sd[r] = sd[r - 1] + send_counts[r - 1];
    rd[r] = rd[r - 1] + recv_counts[r - 1];
  }
  // Every rank sees the same total traffic only in aggregate; compress when this rank's payload
  // is large enough AND everyone agrees (the decision must be collective): use the max total.
  const uint64_t mine = static_cast<uint64_t>(in.numel());
  uint64_t largest = 0;
  comm_->allreduce(&mine, &largest, 1, MPI_UINT64_T, MPI_MAX);
  const bool compress = compressed_path(in.scalar_type(), largest, cfg);
  Staged src(in, compress);
  Staged dst(out, compress);
  double eb = cfg.error_bound;
  if (compress && cfg.mode == BoundMode::Rel) {
    CallConfig no_check = cfg;
    no_check.check_sizes = false;  // counts legitimately differ per rank
    eb = agree("all_to_all", mine, &src.buffer, no_check, true);
  }
  if (compress) {
    coll::Stats stats;
    coll::alltoallv(*comm_, src.buffer.data_ptr(), send_counts, sd, dst.buffer.data_ptr(), recv_counts, rd,
                    compressed_dtype(src.buffer.scalar_type()), coll_config(cfg, eb), &stats);
    record("all_to_all", stats, eb);
  } else {
    comm_->alltoallv(src.buffer.data_ptr(), send_counts, sd, dst.buffer.data_ptr(), recv_counts, rd,
                     mpi_datatype(in.scalar_type()));
  }
  dst.write_back();
}

// ------------------------------------------------------------------------------------------
// torch entry points: validate on the caller's thread (clear errors at the call site), then queue.

c10::intrusive_ptr<c10d::Work> ZcclBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
#ifdef ZCCL_WITH_CUDA
  if (!tensors.empty() && tensors[0].is_cuda()) {
    return cuda_allreduce(tensors, opts.reduceOp, "all_reduce", c10d::OpType::ALLREDUCE);
  }
#endif
  check_single(tensors, "all_reduce");
  validate_reduce(opts.reduceOp, tensors[0].scalar_type(), "all_reduce");
  at::Tensor t = tensors[0];
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("all_reduce", c10d::OpType::ALLREDUCE, tensors,
                 [this, t, op](const CallConfig& cfg) mutable { run_allreduce(t, op, cfg); });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
#ifdef ZCCL_WITH_CUDA
  if (!tensors.empty() && tensors[0].is_cuda()) {
    return cuda_allreduce(tensors, opts.reduceOp, "all_reduce_coalesced",
                          c10d::OpType::ALLREDUCE_COALESCED);
  }
#endif
  for (const auto& t : tensors) {
    check_cpu_dense(t, "all_reduce_coalesced");
    validate_reduce(opts.reduceOp, t.scalar_type(), "all_reduce_coalesced");
  }
  std::vector<at::Tensor> ts = tensors;
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors,
                 [this, ts, op](const CallConfig& cfg) mutable {
                   for (auto& t : ts) run_allreduce(t, op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
#ifdef ZCCL_WITH_CUDA
  if (tensors.size() == 1 && tensors[0].is_cuda()) {
    check_root(opts.rootRank, getSize(), "broadcast");
    return cuda_broadcast(tensors, static_cast<int>(opts.rootRank));
  }
#endif
  check_single(tensors, "broadcast");
  check_root(opts.rootRank, getSize(), "broadcast");
  at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  return enqueue("broadcast", c10d::OpType::BROADCAST, tensors,
                 [this, t, root](const CallConfig& cfg) mutable { run_broadcast(t, root, cfg); });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  check_root(opts.rootRank, getSize(), "reduce");
  validate_reduce(opts.reduceOp, tensors[0].scalar_type(), "reduce");
  at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("reduce", c10d::OpType::REDUCE, tensors,
                 [this, t, op, root](const CallConfig& cfg) mutable { run_reduce(t, op, root, cfg); });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions&) {
#ifdef ZCCL_WITH_CUDA
  if (input.is_cuda()) {
    if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * getSize()) {
      throw std::invalid_argument("zccl: all_gather_into_tensor: output must hold world_size * input.numel() "
                                  "elements of the input's dtype");
    }
    return cuda_allgather({output}, input, true);
  }
#endif
  check_cpu_dense(input, "all_gather_into_tensor");
  check_cpu_dense(output, "all_gather_into_tensor");
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * getSize()) {
    throw std::invalid_argument("zccl: all_gather_into_tensor: output must hold world_size * input.numel() "
                                "elements of the input's dtype");
  }
  at::Tensor in = input, out = output;
  return enqueue("all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, {output},
                 [this, in, out](const CallConfig& cfg) mutable { run_allgather(in, out, cfg); });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions&) {
#ifdef ZCCL_WITH_CUDA
  if (inputs.size() == 1 && inputs[0].is_cuda()) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize()) {
      throw std::invalid_argument("zccl: all_gather needs one output list of world_size tensors");
    }
    for (const auto& o : outputs[0]) check_same(o, inputs[0], "all_gather");
    return cuda_allgather(outputs[0], inputs[0], false);
  }
#endif
  check_single(inputs, "all_gather");
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize()) {
    throw std::invalid_argument("zccl: all_gather needs one output list of world_size tensors");
  }
  for (const auto& o : outputs[0]) check_same(o, inputs[0], "all_gather");
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  return enqueue("all_gather", c10d::OpType::ALLGATHER, outs, [this, in, outs](const CallConfig& cfg) mutable {
    at::Tensor flat = at::empty({in.numel() * static_cast<int64_t>(outs.size())}, in.options());
    run_allgather(in, flat, cfg);
    for (size_t r = 0; r < outs.size(); ++r) {
      outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view(outs[r].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  if (outputs.size() != inputs.size()) {
    throw std::invalid_argument("zccl: all_gather_coalesced: one output list per input");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu_dense(inputs[i], "all_gather_coalesced");
    if (static_cast<int>(outputs[i].size()) != getSize()) {
      throw std::invalid_argument("zccl: all_gather_coalesced: each output list needs world_size tensors");
    }
    for (const auto& o : outputs[i]) check_same(o, inputs[i], "all_gather_coalesced");
  }
  auto ins = inputs;
  auto outs = outputs;
  std::vector<at::Tensor> flat_outputs;
  for (const auto& l : outputs) flat_outputs.insert(flat_outputs.end(), l.begin(), l.end());
  return enqueue("all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, flat_outputs,
                 [this, ins, outs](const CallConfig& cfg) mutable {
                   for (size_t i = 0; i < ins.size(); ++i) {
                     at::Tensor flat = at::empty({ins[i].numel() * getSize()}, ins[i].options());
                     run_allgather(ins[i], flat, cfg);
                     for (int r = 0; r < getSize(); ++r) {
                       outs[i][r].copy_(flat.narrow(0, r * ins[i].numel(), ins[i].numel()).view(outs[i][r].sizes()));
                     }
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  if (outputs.size() != inputs.size()) {
    throw std::invalid_argument("zccl: all_gather_into_tensor_coalesced: one output per input");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu_dense(inputs[i], "all_gather_into_tensor_coalesced");
    if (outputs[i].numel() != inputs[i].numel() * getSize()) {
      throw std::invalid_argument("zccl: all_gather_into_tensor_coalesced: output size must be world_size * input size");
    }
  }
  auto ins = inputs;
  auto outs = outputs;
  return enqueue("all_gather_into_tensor_coalesced", c10d::OpType::COALESCED, outputs,
                 [this, ins, outs](const CallConfig& cfg) mutable {
                   for (size_t i = 0; i < ins.size(); ++i) run_allgather(ins[i], outs[i], cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions& opts) {
  check_single(inputs, "gather");
  check_root(opts.rootRank, getSize(), "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = getRank() == root;
  if (at_root) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize()) {
      throw std::invalid_argument("zccl: gather: the root needs one output list of world_size tensors");
    }
    for (const auto& o : outputs[0]) check_same(o, inputs[0], "gather");
  } else if (!outputs.empty() && !outputs[0].empty()) {
    throw std::invalid_argument("zccl: gather: only the root passes output tensors");
  }
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = at_root ? outputs[0] : std::vector<at::Tensor>{};
  return enqueue("gather", c10d::OpType::GATHER, outs, [this, in, outs, root](const CallConfig& cfg) mutable {
    if (outs.empty()) {
      run_gather(in, nullptr, root, cfg);
      return;
    }
    at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
    run_gather(in, &flat, root, cfg);
    for (int r = 0; r < getSize(); ++r) outs[r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view(outs[r].sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
#ifdef ZCCL_WITH_CUDA
  const bool on_cuda = outputs.size() == 1 && outputs[0].is_cuda();
  if (!on_cuda) check_single(outputs, "scatter");
#else
  check_single(outputs, "scatter");
#endif
  check_root(opts.rootRank, getSize(), "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = getRank() == root;
  if (at_root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize()) {
      throw std::invalid_argument("zccl: scatter: the root needs one input list of world_size tensors");
    }
    for (const auto& i : inputs[0]) check_same(i, outputs[0], "scatter");
  } else if (!inputs.empty() && !inputs[0].empty()) {
    throw std::invalid_argument("zccl: scatter: only the root passes input tensors");
  }
#ifdef ZCCL_WITH_CUDA
  if (on_cuda) return cuda_scatter(outputs[0], at_root ? inputs[0] : std::vector<at::Tensor>{}, root);
#endif
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = at_root ? inputs[0] : std::vector<at::Tensor>{};
  return enqueue("scatter", c10d::OpType::SCATTER, outputs, [this, out, ins, root](const CallConfig& cfg) mutable {
    run_scatter(ins, out, root, cfg);
  });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::ReduceScatterOptions& opts) {
  check_cpu_dense(input, "reduce_scatter_tensor");
  check_cpu_dense(output, "reduce_scatter_tensor");
  validate_reduce(opts.reduceOp, input.scalar_type(), "reduce_scatter_tensor");
  if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * getSize()) {
    throw std::invalid_argument("zccl: reduce_scatter_tensor: input must hold world_size * output.numel() "
                                "elements of the output's dtype");
  }
  at::Tensor in = input, out = output;
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, {output},
                 [this, in, out, op](const CallConfig& cfg) mutable { run_reduce_scatter(in, out, op, cfg); });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  validate_reduce(opts.reduceOp, outputs[0].scalar_type(), "reduce_scatter");
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize()) {
    throw std::invalid_argument("zccl: reduce_scatter needs one input list of world_size tensors");
  }
  for (const auto& i : inputs[0]) check_same(i, outputs[0], "reduce_scatter");
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs,
                 [this, out, ins, op](const CallConfig& cfg) mutable {
                   std::vector<at::Tensor> parts;
                   for (const auto& t : ins) parts.push_back(t.reshape({-1}));
                   at::Tensor flat = at::cat(parts);
                   run_reduce_scatter(flat, out, op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() != inputs.size()) {
    throw std::invalid_argument("zccl: reduce_scatter_tensor_coalesced: one output per input");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu_dense(inputs[i], "reduce_scatter_tensor_coalesced");
    validate_reduce(opts.reduceOp, inputs[i].scalar_type(), "reduce_scatter_tensor_coalesced");
    if (inputs[i].numel() != outputs[i].numel() * getSize()) {
      throw std::invalid_argument("zccl: reduce_scatter_tensor_coalesced: input size must be world_size * output size");
    }
  }
  auto ins = inputs;
  auto outs = outputs;
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, outputs,
                 [this, ins, outs, op](const CallConfig& cfg) mutable {
                   for (size_t i = 0; i < ins.size(); ++i) run_reduce_scatter(ins[i], outs[i], op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions&) {
  check_cpu_dense(input, "all_to_all_single");
  check_cpu_dense(output, "all_to_all_single");
  if (input.scalar_type() != output.scalar_type()) {
    throw std::invalid_argument("zccl: all_to_all_single: input and output dtypes differ");
  }
  const int p = getSize();
  auto counts = [p](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    std::vector<size_t> c(p);
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    if (splits.empty()) {
      if (rows % p != 0) {
        throw std::invalid_argument(std::string("zccl: all_to_all_single: ") + which +
                                    " dim 0 must divide evenly by world_size when no splits are given");
      }
      for (int r = 0; r < p; ++r) c[r] = static_cast<size_t>(rows / p * row);
      return c;
    }
    if (static_cast<int>(splits.size()) != p) {
      throw std::invalid_argument(std::string("zccl: all_to_all_single: ") + which + " splits need world_size entries");
    }
    int64_t total = 0;
    for (int r = 0; r < p; ++r) {
      if (splits[r] < 0) throw std::invalid_argument("zccl: all_to_all_single: negative split");
      total += splits[r];
      c[r] = static_cast<size_t>(splits[r] * row);
    }
    if (total != rows) {
      throw std::invalid_argument(std::string("zccl: all_to_all_single: ") + which +
                                  " splits do not sum to the tensor's dim 0");
    }
    return c;
  };
  const std::vector<size_t> sc = counts(input, input_splits, "input");
  const std::vector<size_t> rc = counts(output, output_splits, "output");
  at::Tensor in = input, out = output;
  return enqueue("all_to_all_single", c10d::OpType::ALLTOALL_BASE, {output},
                 [this, in, out, sc, rc](const CallConfig& cfg) mutable { run_alltoall(in, out, sc, rc, cfg); });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions&) {
  const int p = getSize();
  if (static_cast<int>(inputs.size()) != p || static_cast<int>(outputs.size()) != p) {
    throw std::invalid_argument("zccl: all_to_all needs world_size input and output tensors");
  }
  std::vector<size_t> sc(p), rc(p);
  for (int r = 0; r < p; ++r) {
    check_cpu_dense(inputs[r], "all_to_all");
    check_cpu_dense(outputs[r], "all_to_all");
    if (inputs[r].scalar_type() != inputs[0].scalar_type() || outputs[r].scalar_type() != inputs[0].scalar_type()) {
      throw std::invalid_argument("zccl: all_to_all: all tensors must share one dtype");
    }
    sc[r] = static_cast<size_t>(inputs[r].numel());
    rc[r] = static_cast<size_t>(outputs[r].numel());
  }
  auto ins = inputs;
  auto outs = outputs;
  return enqueue("all_to_all", c10d::OpType::ALLTOALL, outputs,
                 [this, ins, outs, sc, rc](const CallConfig& cfg) mutable {
                   std::vector<at::Tensor> parts;
                   for (const auto& t : ins) parts.push_back(t.reshape({-1}));
                   at::Tensor flat_in = at::cat(parts);
                   const size_t total = std::accumulate(rc.begin(), rc.end(), size_t{0});
                   at::Tensor flat_out = at::empty({static_cast<int64_t>(total)}, flat_in.options());
                   run_alltoall(flat_in, flat_out, sc, rc, cfg);
                   int64_t at = 0;
                   for (size_t r = 0; r < outs.size(); ++r) {
                     const int64_t n = static_cast<int64_t>(rc[r]);
                     outs[r].copy_(flat_out.narrow(0, at, n).view(outs[r].sizes()));
                     at += n;
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::barrier(const c10d::BarrierOptions&) {
  return enqueue("barrier", c10d::OpType::BARRIER, {}, [this](const CallConfig&) { comm_->barrier(); });
}

// Point-to-point: float payloads over the threshold travel as a fZ-light stream (the receiver
// posts a buffer of max_compressed_size); both sides decide identically from (dtype, numel,
// config), so sender and receiver must use the same configuration.
c10::intrusive_ptr<c10d::Work> ZcclBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_single(tensors, "send");
  check_root(dst, getSize(), "send");
  if (tag < 0 || tag > 32767) throw std::invalid_argument("zccl: send: tag must be in [0, 32767]");
  const at::Tensor t = tensors[0].contiguous();
  const CallConfig cfg = resolve_for_thread(defaults_);
  const uint64_t n = static_cast<uint64_t>(t.numel());
  if (compressed_path(t.scalar_type(), n, cfg)) {
    const at::Tensor wide = t.scalar_type() == at::kDouble ? t : t.to(at::kFloat);
    const fz::DType dt = compressed_dtype(wide.scalar_type());
    const double eb = local_bound(wide, cfg);
    fz::CompressParams params;
    params.error_bound = eb;
    params.chunk_len = cfg.chunk_len;
    params.threads = cfg.threads;
    auto stream = std::make_shared<std::vector<uint8_t>>(fz::max_compressed_size(dt, n, cfg.chunk_len));
    stream->resize(fz::compress(wide.data_ptr(), dt, n, params, stream->data(), stream->size()));
    transport::Request req = p2p_comm_->isend(stream->data(), stream->size(), dst, tag);
    return post_p2p("send", c10d::OpType::SEND, tensors, std::move(req), [stream](size_t) {});
  }
  const size_t bytes = n * t.element_size();
  transport::Request req = p2p_comm_->isend(t.data_ptr(), bytes, dst, tag);
  return post_p2p("send", c10d::OpType::SEND, tensors, std::move(req), [t](size_t) {});
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_single(tensors, "recv");
  check_root(src, getSize(), "recv");
  if (tag < 0 || tag > 32767) throw std::invalid_argument("zccl: recv: tag must be in [0, 32767]");
  at::Tensor out = tensors[0];
  const CallConfig cfg = resolve_for_thread(defaults_);
  const uint64_t n = static_cast<uint64_t>(out.numel());
  if (compressed_path(out.scalar_type(), n, cfg)) {
    const fz::DType dt = compressed_dtype(out.scalar_type());
    auto stream = std::make_shared<std::vector<uint8_t>>(fz::max_compressed_size(dt, n, cfg.chunk_len));
    transport::Request req = p2p_comm_->irecv(stream->data(), stream->size(), src, tag);
    return post_p2p("recv", c10d::OpType::RECV, tensors, std::move(req), [stream, out, dt, n](size_t bytes) mutable {
      const fz::StreamInfo info = fz::read_info(stream->data(), bytes);
      if (info.count != n || info.dtype != dt) {
        throw std::invalid_argument("zccl: recv: size mismatch: the sender sent " + std::to_string(info.count) +
                                    " values, the receiving tensor holds " + std::to_string(n));
      }
      at::Tensor buf = at::empty({static_cast<int64_t>(n)}, out.options().dtype(dt == fz::DType::Float64 ? at::kDouble : at::kFloat));
      fz::decompress(stream->data(), bytes, buf.data_ptr(), n, 0);
      out.copy_(buf.view(out.sizes()));
    });
  }
  {
    at::Tensor buf = out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
    const size_t bytes = n * out.element_size();
    transport::Request req = p2p_comm_->irecv(buf.data_ptr(), bytes, src, tag);
    return post_p2p("recv", c10d::OpType::RECV, tensors, std::move(req), [buf, out, bytes](size_t got) mutable {
      if (got != bytes) {
        throw std::invalid_argument("zccl: recv: size mismatch: received " + std::to_string(got) +
                                    " bytes, the receiving tensor holds " + std::to_string(bytes));
      }
      if (!buf.is_same(out)) out.copy_(buf);
    });
  }
}

// ------------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Backend> create_backend(int rank, int size, const std::vector<int64_t>& global_ranks,
                                                 const std::string& group_id, std::chrono::milliseconds timeout,
                                                 const CallConfig& defaults) {
  transport::ensure_initialized();
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const bool whole_world =
      global_ranks.empty() || (static_cast<int>(global_ranks.size()) == world_size &&
                               [&] {
                                 for (int r = 0; r < world_size; ++r)
                                   if (global_ranks[r] != r) return false;
                                 return true;
                               }());
  std::unique_ptr<Comm> coll, p2p;
  if (whole_world) {
    if (rank != world_rank || size != world_size) {
      throw std::invalid_argument("zccl: torch.distributed rank/world_size (" + std::to_string(rank) + "/" +
                                  std::to_string(size) + ") disagree with MPI's (" + std::to_string(world_rank) +
                                  "/" + std::to_string(world_size) + "); launch with mpirun and let zccl_torch "
                                  "set RANK/WORLD_SIZE, or pass MPI's values");
    }
    coll = Comm::duplicate(MPI_COMM_WORLD);
    p2p = Comm::duplicate(MPI_COMM_WORLD);
  } else {
    std::vector<int> ranks(global_ranks.begin(), global_ranks.end());
    if (static_cast<int>(ranks.size()) != size || rank < 0 || rank >= size || ranks[rank] != world_rank) {
      throw std::invalid_argument("zccl: subgroup ranks do not match MPI_COMM_WORLD ranks");
    }
    const int tag = static_cast<int>(std::hash<std::string>{}(group_id) % 30000u) + 1;
    coll = Comm::create_group(ranks, tag);
    p2p = Comm::duplicate(coll->raw());
  }
  return c10::make_intrusive<ZcclBackend>(std::move(coll), std::move(p2p), defaults, timeout);
}

}  // namespace zccl::backend
