#include "work_watcher.h"

#include <algorithm>
#include <stdexcept>

namespace zccl::transport {

WorkWatcher::~WorkWatcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& w : in_wait_) {
      try {
        w->work->abort();  // wakes the thread blocked in wait()
      } catch (...) {
        // a work that cannot abort has completed or will time out; nothing else to do
      }
    }
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::shared_ptr<WatchedWork> WorkWatcher::watch(c10::intrusive_ptr<c10d::Work> work,
                                                std::function<void()> on_done) {
  auto w = std::make_shared<WatchedWork>();
  w->work = std::move(work);
  w->on_done = std::move(on_done);
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(w);
  if (idle_ >= queue_.size()) {
    cv_.notify_one();
  } else {
    threads_.emplace_back([this] { loop(); });
  }
  return w;
}

void WorkWatcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping
    std::shared_ptr<WatchedWork> w = std::move(queue_.front());
    queue_.pop_front();
    if (stopping_) {
      w->error = std::make_exception_ptr(std::runtime_error("zccl: transport shut down"));
      w->done.store(true, std::memory_order_release);
      continue;
    }
    in_wait_.push_back(w);
    lock.unlock();
    try {
      w->work->wait();
    } catch (...) {
      w->error = std::current_exception();
    }
    w->done.store(true, std::memory_order_release);
    if (w->on_done) w->on_done();
    lock.lock();
    in_wait_.erase(std::find(in_wait_.begin(), in_wait_.end(), w));
  }
}

}  // namespace zccl::transport
