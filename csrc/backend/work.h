// The Work handle returned by every zccl op: completes when the worker thread has run the op,
// carries its error, and exposes a Future of the output tensors (DDP relies on get_future()).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <torch/csrc/distributed/c10d/Work.hpp>
#pragma GCC diagnostic pop

#include <chrono>
#include <string>
#include <vector>

namespace zccl::backend {

class ZcclWork : public c10d::Work {
 public:
  ZcclWork(std::vector<at::Tensor> outputs, c10d::OpType type, const char* name,
           std::chrono::milliseconds timeout);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // kNoTimeout waits for the group's timeout, not forever; a timeout names the op.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;

  void complete();
  void fail(const std::exception_ptr& error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::string name_;
  std::chrono::milliseconds timeout_;
};

}  // namespace zccl::backend
