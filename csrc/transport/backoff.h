// Polling pause for loops that test MPI requests: spin a little (latency), then yield, then sleep
// with a doubling backoff up to a cap, so waiting ranks leave the cores to the ones computing
// (tests oversubscribe 2 cores with 7 ranks). One object per wait loop; not shared across threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace zccl {

class Backoff {
 public:
  explicit Backoff(int cap_us) : cap_us_(cap_us) {}

  // `idle`, when given, replaces the sleep: it may return as soon as there is something to do
  // (a transport blocking on its sockets), never later than the given time.
  template <class Idle>
  void pause(const Idle& idle) {
    ++n_;
    if (n_ < kSpins) return;
    if (n_ < kYields) {
      std::this_thread::yield();
      return;
    }
    idle(std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(sleep_us_ * 2, cap_us_);
  }
  void pause() {
    pause([](std::chrono::microseconds us) { std::this_thread::sleep_for(us); });
  }

 private:
  static constexpr int kSpins = 64;
  static constexpr int kYields = 256;
  int cap_us_;
  int n_ = 0;
  int sleep_us_ = 2;
};

}  // namespace zccl
