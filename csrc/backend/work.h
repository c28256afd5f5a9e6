// The Work handle returned by every zccl op: completes when the worker thread has run the op,
// carries its error, and exposes a Future of the output tensors (DDP relies on get_future()).
// Works on CUDA tensors carry the backend stream they ran on: their future is device-aware
// (created with that device; markCompleted records an event on the stream), so wait() and the
// future's consumers make their current stream wait for the collective instead of racing it.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <c10/core/Stream.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace zccl::backend {

class ZcclWork : public c10d::Work {
 public:
  // `waiting_for`: what completing this work waits on, for the timeout message (e.g. "a
  // message from rank 2 (tag 7)"); empty: the collective's own ranks.
  ZcclWork(std::vector<at::Tensor> outputs, c10d::OpType type, const char* name,
           std::chrono::milliseconds timeout, std::optional<c10::Stream> stream = std::nullopt,
           std::string waiting_for = {});

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // kNoTimeout waits for the group's timeout, not forever; a timeout names the op.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;

  // recv / recv from any source: the rank the message came from (torch's Work.source_rank()).
  int sourceRank() const override;
  void set_source_rank(int rank) { source_rank_ = rank; }

  void complete();
  void fail(const std::exception_ptr& error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  std::optional<c10::Stream> stream_;  // the backend stream of a CUDA work (nullopt: CPU)
  std::string waiting_for_;
  std::atomic<int> source_rank_{-1};
};

}  // namespace zccl::backend
