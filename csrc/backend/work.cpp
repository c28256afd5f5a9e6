#include "work.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>

namespace zccl::backend {

ZcclWork::ZcclWork(std::vector<at::Tensor> outputs, c10d::OpType type, const char* name,
                   std::chrono::milliseconds timeout, std::optional<c10::Stream> stream,
                   std::string waiting_for)
    : c10d::Work(-1, type, name),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()),
          stream ? std::vector<c10::Device>{stream->device()} : std::vector<c10::Device>{})),
      name_(name),
      timeout_(timeout),
      stream_(stream),
      waiting_for_(std::move(waiting_for)) {}

int ZcclWork::sourceRank() const {
  const int rank = source_rank_.load();
  TORCH_CHECK(rank >= 0, "zccl: source_rank() is known only for a completed recv (",
              name_, " has none or has not completed)");
  return rank;
}

bool ZcclWork::wait(std::chrono::milliseconds timeout) {
  // Without an explicit timeout, wait a little past the group's: the op itself times out at the
  // group's timeout with a message naming the peer it waited for, which is the better report.
  const auto limit = timeout == kNoTimeout ? timeout_ + timeout_ / 10 + std::chrono::seconds(1) : timeout;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [this] { return completed_; })) {
      TORCH_CHECK(false, "zccl: Timed out after ", limit.count(), " ms waiting for ", name_,
                  " to complete, waiting for ",
                  waiting_for_.empty() ? std::string("the other ranks of the group") : waiting_for_,
                  " (a peer may have failed, be far behind, or have called a different "
                  "operation)");
    }
    if (exception_) std::rethrow_exception(exception_);
  }
  // CUDA: the host knows the op ran; make the caller's current stream wait for the event the
  // future recorded on the backend stream (Future::wait synchronises with current streams).
  if (stream_) future_->wait();
  return true;
}

void ZcclWork::complete() {
  // markCompleted records its completion event on the current stream of each device the outputs
  // live on: for CUDA works that must be the backend stream the op ran on.
  c10::OptionalStreamGuard guard(stream_);
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void ZcclWork::fail(const std::exception_ptr& error) {
  future_->setError(error);
  finish(error);
}

}  // namespace zccl::backend
