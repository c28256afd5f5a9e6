// Polling pause for loops that test transfers. Two policies (WaitPolicy):
// * Sleep: spin a little (latency), then yield, then sleep with a doubling backoff up to a cap,
//   so waiting ranks leave the cores to the ones computing when a host runs more ranks than it
//   has cores (the tests oversubscribe 2 cores with 7 ranks).
// * Spin: poll without ever sleeping, yielding the core between polls. A sleep wakes late: the
//   doubling sleeps (and Linux's ~50 us timer slack) add up to the cap to every wait that outlasts
//   the spins, once per ring step. At 100 Gbit/s a compressed 1 MiB segment is on the wire for
//   ~5 us, so sleeping waits, not the link, set the pace: in the SimGrid model (16 hosts, 16 MB
//   all_reduce, codec time ~0) the ring took 4.97 ms with Sleep and 0.83 ms with Spin.
// One object per wait loop; not shared across threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace zccl {

enum class WaitPolicy : uint8_t { Sleep, Spin };

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Backoff(int cap_us, WaitPolicy policy = WaitPolicy::Sleep)
      : cap_us_(cap_us), policy_(policy) {}
  // Polls as WaitPolicy::Spin does until `spin_until`, then as `policy` says.
  Backoff(int cap_us, WaitPolicy policy, Clock::time_point spin_until)
      : cap_us_(cap_us), policy_(policy), spin_until_(spin_until) {}

  // `idle`, when given, replaces the sleep: it may return as soon as there is something to do
  // (a transport blocking on its sockets), never later than the given time.
  template <class Idle>
  void pause(const Idle& idle) {
    if (n_ < kYields) ++n_;
    if (n_ < kSpins) return;
    if (n_ < kYields || policy_ == WaitPolicy::Spin || Clock::now() < spin_until_) {
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
  WaitPolicy policy_;
  Clock::time_point spin_until_{};  // the epoch: no spinning stretch
  int n_ = 0;
  int sleep_us_ = 2;
};

// How long a wait for a transfer of `bytes` polls without sleeping, whatever the wait policy:
// for as long as the bytes take at 0.5 GB/s. Open MPI advances a large message, and its
// non-blocking collectives, only while a rank polls, so a rank that sleeps between polls holds
// the transfer up for both sides (measured: csrc/transport/mpi_exact.cpp, backend/p2p.cpp); a
// wait that outlasts the stretch is one for a late peer, and may sleep from then on.
inline std::chrono::microseconds transfer_spin_budget(size_t bytes) {
  constexpr double kBytesPerMicrosecond = 500.0;  // 0.5 GB/s
  return std::chrono::microseconds(
      static_cast<int64_t>(static_cast<double>(bytes) / kBytesPerMicrosecond));
}

}  // namespace zccl
