// c10d::Backend "zccl": turns torch.distributed calls into ZCCL collectives (float payloads,
// compressed within the error bound) or exact MPI (everything else). One worker thread per group
// runs the queued collectives in order; point-to-point traffic is posted immediately and driven
// by a progress thread so isend/irecv pairs never deadlock behind the queue.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "../transport/link_probe.h"
#include "agreement.h"
#include "call_config.h"
#include "device.h"
#include "staged.h"
#include "work.h"

namespace zccl::backend {

// Counters of the most recent collective on this group (for Python stats); an uncompressed one
// reports algorithm Mpi and no compressed bytes.
struct LastStats {
  coll::Stats stats;
  double error_bound = 0.0;
  std::string op;
  // The compression ratio algorithm="auto" assumed for the call (coll::assumed_ratio); 0 when
  // the call's algorithm was not "auto" or it could not compress.
  double auto_ratio = 0.0;
};

// Running totals of one collective kind on this group since it was created or last reset (for
// per-step and per-run accounting: last_stats holds one call only). Exact calls count their
// payload in bytes_in; their wire bytes are MPI's business and are not counted.
struct OpTotals {
  uint64_t calls = 0;
  uint64_t compressed_calls = 0;  // calls that ran a compressed algorithm (not Mpi)
  uint64_t bytes_in = 0;
  uint64_t bytes_sent = 0;  // by the compressed calls
  uint64_t bytes_compressed = 0;
  double compress_seconds = 0.0;
  double decompress_seconds = 0.0;
  double seconds = 0.0;  // the compressed calls' total_seconds

  void add(const coll::Stats& s);
};
using TotalStats = std::map<std::string, OpTotals>;

class ZcclBackend : public c10d::Backend {
 public:
  ZcclBackend(std::unique_ptr<transport::Comm> coll_comm, std::unique_ptr<transport::Comm> p2p_comm,
              CallConfig defaults, std::chrono::milliseconds timeout);
  ~ZcclBackend() override;

  const std::string getBackendName() const override { return "zccl"; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // torch sends sparse CUDA tensors here (sparse CPU ones to allreduce): the same op.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Gloo's protocol: every rank reports to rank 0, which waits at most opts.timeout and names
  // the ranks that did not arrive ("Rank 2 failed to pass monitoredBarrier in 1000 ms"); rank 0
  // then tells every rank the outcome, so all of them pass or all raise.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  // The Work's source_rank() names the sender.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // torch's per-group sequence number (object collectives on subgroups, debug tooling): the
  // number of collectives issued on this group since setSequenceNumberForGroup, the same on
  // every rank because every rank issues the same collectives in the same order.
  void setSequenceNumberForGroup() override { seq_.store(0); }
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  const CallConfig& defaults() const { return defaults_; }
  // The network algorithm="auto" assumes, as measured when the group was created
  // (zccl_torch/link.py, ZCCL_MEASURE_LINK). Only before the backend is handed to torch: ops read
  // the defaults on their calling threads without a lock. Throws std::invalid_argument for a value
  // the link_gbps / link_latency_us settings do not allow.
  void set_link_model(double gbps, double latency_us);
  // Queues transport::time_ring_exchanges (kLinkRepeats timings of each size) on this group's
  // collectives communicator, in order with its collectives, after an agreement that every rank
  // runs it with the same probe_bytes; the Work completes once `out` holds the times (the same
  // on every rank).
  static constexpr int kLinkRepeats = 5;
  c10::intrusive_ptr<c10d::Work> time_link(size_t probe_bytes,
                                           std::shared_ptr<transport::LinkTimes> out);
  LastStats last_stats() const;
  // How the collectives' communicator schedules its exact collectives (what algorithm="auto"
  // weighs compression against).
  transport::ExactSchedules exact_schedules() const { return comm_->exact_schedules(); }
  // The totals by collective (keys: last_stats' op names); `reset` zeroes them in the same step.
  TotalStats total_stats(bool reset);

 private:
  // An op body bound to its tensors; runs on the worker thread with the op's device.
  using Job = std::function<void(Device&, const CallConfig&)>;
  struct Queued {
    c10::intrusive_ptr<ZcclWork> work;
    Job job;
    CallConfig config;
    Device* device = nullptr;             // owned by the backend (cpu_ or cuda_)
    std::optional<c10::Stream> stream;    // the device's stream for this op (CUDA)
  };
  // receives the byte count and the sender (receives); may throw
  using P2PDone = std::function<void(size_t, int)>;
  struct PendingP2P {
    c10::intrusive_ptr<ZcclWork> work;
    transport::Request request;
    P2PDone on_done;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout;  // the group's timeout when it was posted
    std::string waiting_for;            // for the timeout message
    size_t bytes = 0;                   // what it moves (a receive: its capacity)
    bool seen = false;                  // by p2p_loop, which then extended its polling stretch
    const char* if_truncated = "";     // a receive's likely cause when the message is larger
  };

  // The device of `t` (caller's thread; the CUDA device is created on first use); throws for a
  // device this build does not serve.
  Device& device_of(const at::Tensor& t, const char* what);
  // device_of(t), after checking that every tensor of `tensors` is a dense tensor of that device.
  Device& device_for(const at::Tensor& t, const std::vector<at::Tensor>& tensors, const char* what);
  // The same for the tensors of a coalesced op, the device of the first (the CPU's when none).
  Device& device_for(const std::vector<at::Tensor>& tensors, const char* what);
  // Queues `job` on `device`: the op is ordered after what the caller enqueued on `touched`
  // (device streams), and its Work completes when the job ran.
  c10::intrusive_ptr<c10d::Work> enqueue(const char* name, c10d::OpType type,
                                         std::vector<at::Tensor> outputs, Device& device,
                                         const std::vector<at::Tensor>& touched, Job job);
  void worker_loop();
  void p2p_loop();
  // Posts a send/receive to the progress thread; `stream`: a CUDA receive's backend stream, on
  // which on_done writes the result and the Work's future records its completion;
  // `if_truncated`: what the error says of the likely cause when a message does not fit (a
  // static text: nothing is built per call for an error that rarely happens).
  c10::intrusive_ptr<c10d::Work> post_p2p(const char* name, c10d::OpType type,
                                          std::vector<at::Tensor> outputs,
                                          transport::Request request, size_t bytes,
                                          P2PDone on_done, std::string waiting_for,
                                          std::optional<c10::Stream> stream = std::nullopt,
                                          const char* if_truncated = "");
  // The receive side of recv / recvAnysource (src < 0: any source).
  c10::intrusive_ptr<c10d::Work> post_recv(std::vector<at::Tensor>& tensors, int src, int tag,
                                           const char* name);

  // Agrees with the other ranks on what the call is (agreement.h) and, for REL bounds, on the
  // value range of `data`; returns the absolute error bound to compress with and what the
  // automatic algorithm choice assumes. `sampled_as`: the reduction `data` is the payload of
  // (all_reduce, reduce, reduce_scatter); a call that may compress (rel_needed) then samples
  // its compression ratio where it matters (ratio_sample). Data movement's choice does not
  // weigh the ratio (coll::compression_pays): it passes none.
  Agreement agree(Device& dev, const char* what, const CallDescription& call,
                  const at::Tensor* data, const CallConfig& cfg, bool rel_needed,
                  std::optional<coll::Collective> sampled_as = std::nullopt) const;
  // This rank's estimate of the compression ratio of `data`, the payload of reduction `c`
  // (fz::sample_ratio), or 0 when none is taken: the ratio is configured (auto_ratio), the
  // agreement is off (nothing would carry it), the data is on a GPU or empty, or the choice does
  // not depend on it (coll::ratio_matters). `range`: the data's value range (REL bounds).
  double ratio_sample(Device& dev, coll::Collective c, const at::Tensor& data,
                      const CallConfig& cfg, const std::optional<fz::FiniteRange>& range) const;
  // A coalesced call's first exchange (backend::agree_batch): `described` are the tensors whose
  // dtype and element count the per-tensor agreements will compare (the inputs; reduce_scatter:
  // the outputs), `op` the reduce op or nullptr.
  void agree_coalesced(const char* what, OpKind kind, const c10d::ReduceOp* op,
                       const std::vector<at::Tensor>& described, const CallConfig& cfg) const;
  struct StagedReduction {
    std::optional<coll::ReduceOp> cop;  // the compressed reduction, nullopt: exact path
    Staged staged;
    double eb;        // the agreed absolute bound
    AutoModel model;  // what the automatic choice assumes (Agreement)
  };
  StagedReduction stage_reduction(Device& dev, OpKind kind, const char* what, at::Tensor& t,
                                  const c10d::ReduceOp& op, int root, const CallConfig& cfg) const;
  // The absolute bound for data only this rank compresses (roots, senders).
  double local_bound(Device& dev, const std::vector<at::Tensor>& parts,
                     const CallConfig& cfg) const;
  // model: Agreement::model (the automatic choices assume it on every rank).
  coll::Config coll_config(const CallConfig& cfg, double eb, const AutoModel& model) const;
  // Data movement (broadcast, scatter, gather, all_gather, all_to_all) with algorithm "auto":
  // whether compressing beats the configured link (coll::compression_pays, route()'s own
  // rule), decided alike on every rank from the agreed model.
  bool codec_pays(const Device& dev, coll::Collective c, const CallConfig& cfg,
                  const AutoModel& model) const;
  // coll_config for the reductions: half tensors travel as half streams (Config::wire_half).
  coll::Config reduction_config(const Device& dev, const CallConfig& cfg, double eb,
                                at::ScalarType t, const AutoModel& model) const;
  bool compressed_path(at::ScalarType dtype, uint64_t numel, const CallConfig& cfg) const;
  // The compressed reduction a reduction takes, or nullopt for the exact path (an op without a
  // compressed form, or compressed_path() says no).
  std::optional<coll::ReduceOp> reduction_path(const c10d::ReduceOp& op, at::ScalarType dtype,
                                               uint64_t numel, const CallConfig& cfg) const;
  // `auto_ratio`: LastStats::auto_ratio (auto_ratio_of).
  void record(const char* op, const coll::Stats& stats, double eb, double auto_ratio = 0.0);
  // An uncompressed (exact transport) collective; `eb`: the bound in force when the algorithm
  // choice, not the configuration, sent it exactly.
  void record_exact(const char* op, uint64_t bytes_in, double eb = 0.0, double auto_ratio = 0.0);

  // The op bodies, run on the worker thread.
  void run_allreduce(Device& dev, at::Tensor& t, const c10d::ReduceOp& op, const CallConfig& cfg);
  void run_broadcast(Device& dev, at::Tensor& t, int root, const CallConfig& cfg);
  void run_reduce(Device& dev, at::Tensor& t, const c10d::ReduceOp& op, int root, const CallConfig& cfg);
  void run_allgather(Device& dev, const at::Tensor& in, at::Tensor& flat_out, const CallConfig& cfg);
  void run_reduce_scatter(Device& dev, const at::Tensor& flat_in, at::Tensor& out, const c10d::ReduceOp& op,
                          const CallConfig& cfg);
  void run_gather(Device& dev, const at::Tensor& in, at::Tensor* flat_out, int root, const CallConfig& cfg);
  // ins: the root's world_size blocks (empty elsewhere).
  void run_scatter(Device& dev, const std::vector<at::Tensor>& ins, at::Tensor& out, int root, const CallConfig& cfg);
  void run_alltoall(Device& dev, const at::Tensor& in, at::Tensor& out, const std::vector<size_t>& send_counts,
                    const std::vector<size_t>& recv_counts, const CallConfig& cfg);
  // Sparse COO SUM, exact (as Gloo does it): every rank's indices and values are all-gathered
  // and summed; `t` is replaced by the coalesced sum.
  void run_sparse_allreduce(at::Tensor& t, const CallConfig& cfg);
  void run_monitored_barrier(std::chrono::milliseconds timeout, bool wait_all_ranks);


  std::unique_ptr<Device> cpu_;
  std::mutex cuda_mutex_;         // cuda_ is created on a caller's thread
  std::unique_ptr<Device> cuda_;  // created by the first CUDA op

  std::unique_ptr<transport::Comm> comm_;
  std::unique_ptr<transport::Comm> p2p_comm_;
  CallConfig defaults_;
  std::chrono::milliseconds timeout_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Queued> queue_;
  bool stopping_ = false;
  std::thread worker_;

  std::mutex p2p_mutex_;
  std::condition_variable p2p_cv_;
  std::deque<PendingP2P> p2p_;
  bool p2p_stopping_ = false;
  std::thread p2p_thread_;

  // Finished queue items and point-to-point operations, dropped by release_finished() on a
  // caller's thread (the next enqueue or post, or shutdown), never on ours: their tensors may be
  // Python's, and dropping such a reference takes the GIL, which no thread can take once the
  // interpreter finalizes. A script that ended without destroy_process_group had our thread
  // ended there inside a destructor: std::terminate, exit code 134 after a correct run (seen in
  // 1 of 8 runs over the TCP transport). They live until then: one op's tensors at most.
  std::mutex finished_mutex_;
  std::vector<Queued> finished_jobs_;
  std::vector<PendingP2P> finished_p2p_;
  void release_finished();

  std::atomic<uint64_t> seq_{0};

  mutable std::mutex stats_mutex_;
  LastStats last_;
  TotalStats totals_;
};

// Creates the backend for a process group (the Python creator calls this). `global_ranks` empty
// or equal to all of MPI_COMM_WORLD means the world group; MPI's rank/size must agree with torch's.
c10::intrusive_ptr<c10d::Backend> create_backend(int rank, int size,
                                                 const std::vector<int64_t>& global_ranks,
                                                 const std::string& group_id,
                                                 std::chrono::milliseconds timeout,
                                                 const CallConfig& defaults);
// The same over any transport (the Gloo one of groups launched without mpirun): the backend
// keeps `coll` for the collectives and a duplicate of it for point-to-point traffic.
c10::intrusive_ptr<c10d::Backend> create_backend_on(std::unique_ptr<transport::Comm> coll,
                                                    std::chrono::milliseconds timeout,
                                                    const CallConfig& defaults);

}  // namespace zccl::backend
