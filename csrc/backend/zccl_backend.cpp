#include "zccl_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "../transport/mpi_api.h"  // the Open MPI transport, if built
#include "routing.h"
#include "staged.h"
#include "validate.h"

namespace zccl::backend {
using transport::Comm;

namespace {

// A receive whose message did not fit (only a receive can be truncated): the sent tensor has
// more elements, or wider ones, than the receiving tensor. Reported as the size mismatch it is
// (ValueError in Python, as when the message is smaller), with the transport's own words.
std::exception_ptr larger_than_receive(const std::string& waiting_for, const char* if_truncated,
                                       const transport::TransportError& e) {
  return std::make_exception_ptr(std::invalid_argument(
      "zccl: recv: size mismatch: the sender's message is larger than the receiving tensor "
      "(waiting for " + waiting_for + "; " + e.what() + ")" + std::string(if_truncated)));
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Construction, worker threads.

ZcclBackend::ZcclBackend(std::unique_ptr<Comm> coll_comm, std::unique_ptr<Comm> p2p_comm,
                         CallConfig defaults, std::chrono::milliseconds timeout)
    : c10d::Backend(coll_comm->rank(), coll_comm->size()),
      cpu_(make_cpu_device()),
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

void ZcclBackend::set_link_model(double gbps, double latency_us) {
  // Through the settings' own checks, so a measurement obeys the same limits as a user's value.
  CallConfig next = defaults_;
  const std::pair<const char*, double> measured[] = {{"link_gbps", gbps},
                                                     {"link_latency_us", latency_us}};
  for (const auto& [name, value] : measured) {
    const Setting* s = find_setting(name);
    s->write(*s, next, s->checked(value));
  }
  defaults_ = next;
}

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
  release_finished();
}

void ZcclBackend::release_finished() {
  std::vector<Queued> jobs;
  std::vector<PendingP2P> p2p;
  std::lock_guard<std::mutex> lock(finished_mutex_);
  jobs.swap(finished_jobs_);
  p2p.swap(finished_p2p_);
}  // the lock is released before jobs and p2p are destroyed (declared before it)

void ZcclBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  comm_->set_timeout(timeout);
  p2p_comm_->set_timeout(timeout);
}

Device& ZcclBackend::device_of(const at::Tensor& t, const char* what) {
  if (t.device().is_cpu()) return *cpu_;
  // Names the device this build cannot serve.
  if (!t.is_cuda() || !cuda_device_built()) check_cpu_dense(t, what);
  std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (!cuda_) cuda_ = make_cuda_device();
  return *cuda_;
}

Device& ZcclBackend::device_for(const at::Tensor& t, const std::vector<at::Tensor>& tensors,
                               const char* what) {
  Device& dev = device_of(t, what);
  for (const auto& x : tensors) dev.check_tensor(x, what);
  return dev;
}

Device& ZcclBackend::device_for(const std::vector<at::Tensor>& tensors, const char* what) {
  return tensors.empty() ? *cpu_ : device_for(tensors[0], tensors, what);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::enqueue(const char* name, c10d::OpType type,
                                                    std::vector<at::Tensor> outputs, Device& device,
                                                    const std::vector<at::Tensor>& touched, Job job) {
  const std::optional<c10::Stream> stream = device.prepare(touched);
  auto work = c10::make_intrusive<ZcclWork>(std::move(outputs), type, name, timeout_, stream);
  const CallConfig config = resolve_for_call(defaults_);  // captured on the caller's thread
  release_finished();
  seq_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (stopping_) throw std::runtime_error("zccl: the process group has been shut down");
    queue_.push_back(Queued{work, std::move(job), config, &device, stream});
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
      Device& device = *item.device;
      comm_->set_wait_policy(wait_policy(item.config));  // comm_ is this thread's alone
      device.run(item.stream, [&] { item.job(device, item.config); });
      item.work->complete();
    } catch (...) {
      item.work->fail(std::current_exception());
    }
    std::lock_guard<std::mutex> lock(finished_mutex_);
    finished_jobs_.push_back(std::move(item));
  }
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::post_p2p(const char* name, c10d::OpType type,
                                                     std::vector<at::Tensor> outputs,
                                                     transport::Request request, size_t bytes,
                                                     P2PDone on_done, std::string waiting_for,
                                                     std::optional<c10::Stream> stream,
                                                     const char* if_truncated) {
  auto work = c10::make_intrusive<ZcclWork>(std::move(outputs), type, name, timeout_, stream,
                                            waiting_for);
  release_finished();
  {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    p2p_.push_back(PendingP2P{work, std::move(request), std::move(on_done),
                              std::chrono::steady_clock::now() + timeout_, timeout_,
                              std::move(waiting_for), bytes, false, if_truncated});
  }
  p2p_cv_.notify_one();
  return work;
}

void ZcclBackend::p2p_loop() {
  // Polls posted sends/receives; completes their Work (and decompresses receives) when done.
  // Between polls it yields while a posted transfer should still be moving (each new one
  // extends the stretch by transfer_spin_budget of its bytes), else it sleeps 20 us: Open MPI
  // moves a large message only while it is polled, and sleeping between polls made a 16 MB
  // send/recv ping-pong on shared memory take 36 ms (benchmarks/p2p_wait.py).
  auto spin_until = std::chrono::steady_clock::time_point{};
  for (;;) {
    std::deque<PendingP2P> batch;
    {
      std::unique_lock<std::mutex> lock(p2p_mutex_);
      p2p_cv_.wait(lock, [this] { return p2p_stopping_ || !p2p_.empty(); });
      if (p2p_.empty()) return;
      batch.swap(p2p_);
    }
    std::deque<PendingP2P> still;
    const auto now = std::chrono::steady_clock::now();
    for (auto& item : batch) {
      if (!item.seen) {
        item.seen = true;
        spin_until = std::max(spin_until, now + transfer_spin_budget(item.bytes));
      }
      try {
        size_t bytes = 0;
        if (p2p_comm_->test(item.request, &bytes)) {
          if (item.request.source >= 0) item.work->set_source_rank(item.request.source);
          if (item.on_done) item.on_done(bytes, item.request.source);
          item.work->complete();
        } else if (std::chrono::steady_clock::now() > item.deadline) {
          // Past the group's timeout: fail the work (its request is cancelled when dropped).
          throw transport::TimeoutError("zccl: Timed out after " + std::to_string(item.timeout.count()) +
                                        " ms waiting for " + item.waiting_for +
                                        " (the peer may have failed, be far behind, or never "
                                        "post the matching operation)");
        } else {
          still.push_back(std::move(item));
          continue;
        }
      } catch (const transport::TransportError& e) {
        item.work->fail(e.truncated() ? larger_than_receive(item.waiting_for, item.if_truncated, e)
                                      : std::current_exception());
      } catch (...) {
        item.work->fail(std::current_exception());
      }
      item.request = transport::Request();  // cancelled (if still active) on this thread
      std::lock_guard<std::mutex> lock(finished_mutex_);
      finished_p2p_.push_back(std::move(item));
    }
    if (!still.empty()) {
      std::lock_guard<std::mutex> lock(p2p_mutex_);
      for (auto& item : still) p2p_.push_back(std::move(item));
    }
    if (still.empty()) continue;
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

LastStats ZcclBackend::last_stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return last_;
}

TotalStats ZcclBackend::total_stats(bool reset) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  TotalStats out = totals_;
  if (reset) totals_.clear();
  return out;
}

// ------------------------------------------------------------------------------------------
// torch entry points: validate on the caller's thread (clear errors at the call site), then queue.

c10::intrusive_ptr<c10d::Work> ZcclBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  return allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].is_sparse()) {
    check_sparse(tensors[0], opts.reduceOp, "all_reduce");
    at::Tensor t = tensors[0];
    return enqueue("all_reduce (sparse)", c10d::OpType::ALLREDUCE, tensors,
                   device_of(t, "all_reduce"), tensors,
                   [this, t](Device&, const CallConfig& cfg) mutable {
                     // CUDA: on a host copy (few values: typically embedding rows), ordered on
                     // the backend stream like every CUDA op.
                     at::Tensor host = t.is_cuda() ? t.to(at::kCPU) : t;
                     run_sparse_allreduce(host, cfg);
                     if (!host.is_same(t)) t.copy_(host);
                   });
  }
  check_single(tensors, "all_reduce");
  Device& dev = device_for(tensors[0], tensors, "all_reduce");
  validate_reduce(opts.reduceOp, tensors[0].scalar_type(), "all_reduce");
  at::Tensor t = tensors[0];
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("all_reduce", c10d::OpType::ALLREDUCE, tensors, dev, tensors,
                 [this, t, op](Device& d, const CallConfig& cfg) mutable {
                   run_allreduce(d, t, op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Device& dev = device_for(tensors, "all_reduce_coalesced");
  for (const auto& t : tensors) validate_reduce(opts.reduceOp, t.scalar_type(), "all_reduce_coalesced");
  std::vector<at::Tensor> ts = tensors;
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, dev, tensors,
                 [this, ts, op](Device& d, const CallConfig& cfg) mutable {
                   agree_coalesced("all_reduce_coalesced", OpKind::AllReduce, &op, ts, cfg);
                   for (auto& t : ts) run_allreduce(d, t, op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  Device& dev = device_for(tensors[0], tensors, "broadcast");
  check_root(opts.rootRank, getSize(), "broadcast");
  at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  return enqueue("broadcast", c10d::OpType::BROADCAST, tensors, dev, tensors,
                 [this, t, root](Device& d, const CallConfig& cfg) mutable {
                   run_broadcast(d, t, root, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  Device& dev = device_for(tensors[0], tensors, "reduce");
  check_root(opts.rootRank, getSize(), "reduce");
  validate_reduce(opts.reduceOp, tensors[0].scalar_type(), "reduce");
  at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("reduce", c10d::OpType::REDUCE, tensors, dev, tensors,
                 [this, t, op, root](Device& d, const CallConfig& cfg) mutable {
                   run_reduce(d, t, op, root, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions&) {
  const char* name = "all_gather_into_tensor";
  Device& dev = device_for(input, {input, output}, name);
  check_all_gather_into(output, input, getSize(), name);
  at::Tensor in = input, out = output;
  return enqueue(name, c10d::OpType::_ALLGATHER_BASE, {output}, dev, {input, output},
                 [this, in, out](Device& d, const CallConfig& cfg) mutable {
                   run_allgather(d, in, out, cfg);
                 });
}

namespace {

// Copies block r of `flat` (blocks of outs[r].numel() values, back to back) into outs[r].
void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& outs) {
  int64_t at = 0;
  for (auto& o : outs) {
    o.copy_(flat.narrow(0, at, o.numel()).view(o.sizes()));
    at += o.numel();
  }
}

// The root's list of world_size tensors like `like` (gather's outputs, scatter's inputs), checked;
// an empty list on the other ranks, which must pass none.
std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists,
                                  const at::Tensor& like, bool at_root, int p, const char* what,
                                  const char* role) {
  const std::string prefix = std::string("zccl: ") + what + ": ";
  if (!at_root) {
    if (!lists.empty() && !lists[0].empty()) {
      throw std::invalid_argument(prefix + "only the root passes " + role + " tensors");
    }
    return {};
  }
  if (lists.size() != 1 || static_cast<int>(lists[0].size()) != p) {
    throw std::invalid_argument(prefix + "the root needs one " + role + " list of world_size tensors");
  }
  for (const auto& t : lists[0]) check_same(t, like, what);
  return lists[0];
}

// `list` and `more`: the tensors an op touches, for the checks and the stream bookkeeping.
std::vector<at::Tensor> joined(std::vector<at::Tensor> list, const std::vector<at::Tensor>& more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}
std::vector<at::Tensor> joined(std::vector<at::Tensor> list, const at::Tensor& t) {
  return joined(std::move(list), std::vector<at::Tensor>{t});
}

// The tensors of `parts`, flattened and concatenated.
at::Tensor flatten(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  for (const auto& t : parts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ZcclBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions&) {
  check_single(inputs, "all_gather");
  Device& dev = device_for(inputs[0], inputs, "all_gather");
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != getSize()) {
    throw std::invalid_argument("zccl: all_gather needs one output list of world_size tensors");
  }
  for (const auto& o : outputs[0]) check_same(o, inputs[0], "all_gather");
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  return enqueue("all_gather", c10d::OpType::ALLGATHER, outs, dev, joined(outs, in),
                 [this, in, outs](Device& d, const CallConfig& cfg) mutable {
                   at::Tensor flat = at::empty({in.numel() * static_cast<int64_t>(outs.size())}, in.options());
                   run_allgather(d, in, flat, cfg);
                   unflatten(flat, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  // torch's layout (torch.distributed.all_gather_coalesced): outputs[rank][i] receives input i
  // of `rank`, so there is one output list per rank, each with one tensor per input.
  const int p = getSize();
  if (static_cast<int>(outputs.size()) != p) {
    throw std::invalid_argument("zccl: all_gather_coalesced: output_tensor_lists must hold one list per rank "
                                "(world_size = " + std::to_string(p) + "), got " +
                                std::to_string(outputs.size()));
  }
  std::vector<at::Tensor> flat_outputs;
  for (const auto& l : outputs) flat_outputs.insert(flat_outputs.end(), l.begin(), l.end());
  Device& dev = device_for(joined(inputs, flat_outputs), "all_gather_coalesced");
  for (int r = 0; r < p; ++r) {
    if (outputs[r].size() != inputs.size()) {
      throw std::invalid_argument("zccl: all_gather_coalesced: output list " + std::to_string(r) + " holds " +
                                  std::to_string(outputs[r].size()) + " tensors for " +
                                  std::to_string(inputs.size()) + " inputs");
    }
    for (size_t i = 0; i < inputs.size(); ++i) check_same(outputs[r][i], inputs[i], "all_gather_coalesced");
  }
  auto ins = inputs;
  auto outs = outputs;
  return enqueue("all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, flat_outputs, dev,
                 joined(flat_outputs, ins),
                 [this, ins, outs](Device& d, const CallConfig& cfg) mutable {
                   agree_coalesced("all_gather_coalesced", OpKind::AllGather, nullptr, ins, cfg);
                   for (size_t i = 0; i < ins.size(); ++i) {
                     at::Tensor flat = at::empty({ins[i].numel() * getSize()}, ins[i].options());
                     run_allgather(d, ins[i], flat, cfg);
                     std::vector<at::Tensor> column;
                     for (int r = 0; r < getSize(); ++r) column.push_back(outs[r][i]);
                     unflatten(flat, column);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  const char* name = "all_gather_into_tensor_coalesced";
  if (outputs.size() != inputs.size()) {
    throw std::invalid_argument("zccl: all_gather_into_tensor_coalesced: one output per input");
  }
  Device& dev = device_for(joined(inputs, outputs), name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_all_gather_into(outputs[i], inputs[i], getSize(), name);
  }
  auto ins = inputs;
  auto outs = outputs;
  return enqueue(name, c10d::OpType::COALESCED, outputs, dev, joined(outputs, ins),
                 [this, ins, outs, name](Device& d, const CallConfig& cfg) mutable {
                   agree_coalesced(name, OpKind::AllGather, nullptr, ins, cfg);
                   for (size_t i = 0; i < ins.size(); ++i) run_allgather(d, ins[i], outs[i], cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions& opts) {
  check_single(inputs, "gather");
  Device& dev = device_for(inputs[0], inputs, "gather");
  check_root(opts.rootRank, getSize(), "gather");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = root_list(outputs, in, getRank() == root, getSize(), "gather", "output");
  return enqueue("gather", c10d::OpType::GATHER, outs, dev, joined(outs, in),
                 [this, in, outs, root](Device& d, const CallConfig& cfg) mutable {
                   if (outs.empty()) {
                     run_gather(d, in, nullptr, root, cfg);
                     return;
                   }
                   at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
                   run_gather(d, in, &flat, root, cfg);
                   unflatten(flat, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  check_single(outputs, "scatter");
  Device& dev = device_for(outputs[0], outputs, "scatter");
  check_root(opts.rootRank, getSize(), "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = root_list(inputs, out, getRank() == root, getSize(), "scatter", "input");
  return enqueue("scatter", c10d::OpType::SCATTER, outputs, dev, joined(ins, out),
                 [this, out, ins, root](Device& d, const CallConfig& cfg) mutable {
                   run_scatter(d, ins, out, root, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor";
  Device& dev = device_for(input, {input, output}, name);
  check_reduce_scatter_into(output, input, opts.reduceOp, getSize(), name);
  at::Tensor in = input, out = output;
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue(name, c10d::OpType::_REDUCE_SCATTER_BASE, {output}, dev, {input, output},
                 [this, in, out, op](Device& d, const CallConfig& cfg) mutable {
                   run_reduce_scatter(d, in, out, op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  Device& dev = device_for(outputs[0], outputs, "reduce_scatter");
  validate_reduce(opts.reduceOp, outputs[0].scalar_type(), "reduce_scatter");
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != getSize()) {
    throw std::invalid_argument("zccl: reduce_scatter needs one input list of world_size tensors");
  }
  for (const auto& i : inputs[0]) check_same(i, outputs[0], "reduce_scatter");
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue("reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, dev, joined(ins, out),
                 [this, out, ins, op](Device& d, const CallConfig& cfg) mutable {
                   at::Tensor flat = flatten(ins);
                   run_reduce_scatter(d, flat, out, op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  if (outputs.size() != inputs.size()) {
    throw std::invalid_argument("zccl: reduce_scatter_tensor_coalesced: one output per input");
  }
  Device& dev = device_for(joined(inputs, outputs), name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_reduce_scatter_into(outputs[i], inputs[i], opts.reduceOp, getSize(), name);
  }
  auto ins = inputs;
  auto outs = outputs;
  const c10d::ReduceOp op = opts.reduceOp;
  return enqueue(name, c10d::OpType::COALESCED, outputs, dev, joined(outputs, ins),
                 [this, ins, outs, op, name](Device& d, const CallConfig& cfg) mutable {
                   agree_coalesced(name, OpKind::ReduceScatter, &op, outs, cfg);
                   for (size_t i = 0; i < ins.size(); ++i) run_reduce_scatter(d, ins[i], outs[i], op, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions&) {
  Device& dev = device_for(input, {input, output}, "all_to_all_single");
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
  return enqueue("all_to_all_single", c10d::OpType::ALLTOALL_BASE, {output}, dev, {input, output},
                 [this, in, out, sc, rc](Device& d, const CallConfig& cfg) mutable {
                   run_alltoall(d, in, out, sc, rc, cfg);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions&) {
  const int p = getSize();
  if (static_cast<int>(inputs.size()) != p || static_cast<int>(outputs.size()) != p) {
    throw std::invalid_argument("zccl: all_to_all needs world_size input and output tensors");
  }
  const std::vector<at::Tensor> touched = joined(inputs, outputs);
  Device& dev = device_for(inputs[0], touched, "all_to_all");
  std::vector<size_t> sc(p), rc(p);
  for (int r = 0; r < p; ++r) {
    if (inputs[r].scalar_type() != inputs[0].scalar_type() || outputs[r].scalar_type() != inputs[0].scalar_type()) {
      throw std::invalid_argument("zccl: all_to_all: all tensors must share one dtype");
    }
    sc[r] = static_cast<size_t>(inputs[r].numel());
    rc[r] = static_cast<size_t>(outputs[r].numel());
  }
  auto ins = inputs;
  auto outs = outputs;
  return enqueue("all_to_all", c10d::OpType::ALLTOALL, outputs, dev, touched,
                 [this, ins, outs, sc, rc](Device& d, const CallConfig& cfg) mutable {
                   at::Tensor flat_in = flatten(ins);
                   const size_t total = std::accumulate(rc.begin(), rc.end(), size_t{0});
                   at::Tensor flat_out = at::empty({static_cast<int64_t>(total)}, flat_in.options());
                   run_alltoall(d, flat_in, flat_out, sc, rc, cfg);
                   unflatten(flat_out, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::barrier(const c10d::BarrierOptions&) {
  // With agreement checks on, the agreement exchange itself is the barrier (an allreduce returns
  // on no rank before every rank joined), and a rank that called another collective is named.
  return enqueue("barrier", c10d::OpType::BARRIER, {}, *cpu_, {}, [this](Device&, const CallConfig& cfg) {
    if (cfg.check_agreement) {
      backend::agree(*comm_, "barrier", CallDescription{}, cfg, std::nullopt, false);
    } else {
      comm_->barrier();
    }
  });
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::time_link(size_t probe_bytes,
                                                      std::shared_ptr<transport::LinkTimes> out) {
  // One-byte exchanges per latency timing (their mean: one alone is below the clock's useful
  // resolution on shared memory).
  constexpr int kSmallExchanges = 8;
  return enqueue("measure_link", c10d::OpType::UNKNOWN, {}, *cpu_, {},
                 [this, probe_bytes, out](Device&, const CallConfig& cfg) {
                   // Ranks in another collective, or probing another size, raise here instead
                   // of mixing their messages with the probe's.
                   const CallDescription call = describe_call(OpKind::MeasureLink, -1, probe_bytes);
                   backend::agree(*comm_, "measure_link", call, cfg, std::nullopt, false);
                   *out = transport::time_ring_exchanges(*comm_, probe_bytes, kLinkRepeats,
                                                         kSmallExchanges);
                 });
}

// ------------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Backend> create_backend(int rank, int size, const std::vector<int64_t>& global_ranks,
                                                 const std::string& group_id, std::chrono::milliseconds timeout,
                                                 const CallConfig& defaults) {
  return create_backend_on(transport::open_mpi_group(rank, size, global_ranks, group_id), timeout, defaults);
}

c10::intrusive_ptr<c10d::Backend> create_backend_on(std::unique_ptr<Comm> coll, std::chrono::milliseconds timeout,
                                                    const CallConfig& defaults) {
  std::unique_ptr<Comm> p2p = coll->duplicate();
  return c10::make_intrusive<ZcclBackend>(std::move(coll), std::move(p2p), defaults, timeout);
}

}  // namespace zccl::backend
