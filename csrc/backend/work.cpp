#include "work.h"

#include <ATen/core/ivalue.h>

namespace zccl::backend {

ZcclWork::ZcclWork(std::vector<at::Tensor> outputs, c10d::OpType type, const char* name,
                   std::chrono::milliseconds timeout)
    : c10d::Work(-1, type, name),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      name_(name),
      timeout_(timeout) {}

bool ZcclWork::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout == kNoTimeout ? timeout_ : timeout;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [this] { return completed_; })) {
      TORCH_CHECK(false, "zccl: ", name_, " did not complete within ", limit.count(),
                  " ms (the process group's timeout); a peer may have failed or called a "
                  "different collective");
    }
    if (exception_) std::rethrow_exception(exception_);
  }
  return true;
}

void ZcclWork::complete() {
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void ZcclWork::fail(const std::exception_ptr& error) {
  future_->setError(error);
  finish(error);
}

}  // namespace zccl::backend
