// Observes the completion of c10d work without blocking the caller. Gloo's point-to-point work
// completes only inside wait() (it has no test and no future: Work::getFuture is not implemented
// for it), and a wait that times out closes Gloo's connection. So every watched work gets a thread
// blocked in wait() until it completes or is aborted; threads are reused, and each outstanding
// work has its own, so an unobserved completion can never hold up another one.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <torch/csrc/distributed/c10d/Work.hpp>
#pragma GCC diagnostic pop

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zccl::transport {

struct WatchedWork {
  c10::intrusive_ptr<c10d::Work> work;
  std::atomic<bool> done{false};
  std::exception_ptr error;  // written before `done` is set (release), read after (acquire)
  // Run by the watcher thread right after `done` is set (whatever the outcome): what must follow
  // a completion at once, not when the owner next polls. Must not throw.
  std::function<void()> on_done;
};

class WorkWatcher {
 public:
  WorkWatcher() = default;
  WorkWatcher(const WorkWatcher&) = delete;
  WorkWatcher& operator=(const WorkWatcher&) = delete;
  // Aborts every work still watched, then joins the threads.
  ~WorkWatcher();

  std::shared_ptr<WatchedWork> watch(c10::intrusive_ptr<c10d::Work> work,
                                     std::function<void()> on_done = {});

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<WatchedWork>> queue_;
  std::vector<std::shared_ptr<WatchedWork>> in_wait_;  // being waited for (aborted on shutdown)
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace zccl::transport
