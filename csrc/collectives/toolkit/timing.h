// The one clock of the collectives (CPU and GPU) and the two ways they time things: AddSeconds
// adds the seconds of a scope to a Stats field (compress_seconds, decompress_seconds), CallStats
// times a whole call and publishes its Stats once the algorithm finished (a call that throws
// publishes nothing).
#pragma once

#include <chrono>

#include "../collectives.h"

namespace zccl::coll::toolkit {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Adds the seconds between construction and destruction to `field`.
class AddSeconds {
 public:
  explicit AddSeconds(double& field) : field_(field) {}
  ~AddSeconds() { field_ += seconds_since(t0_); }
  AddSeconds(const AddSeconds&) = delete;
  AddSeconds& operator=(const AddSeconds&) = delete;

 private:
  double& field_;
  Clock::time_point t0_ = Clock::now();
};

// The Stats of one call: `s` collects the counters; done() stamps the algorithm and the call's
// total time and copies them to the caller's Stats (if any).
class CallStats {
 public:
  explicit CallStats(Stats* out) : out_(out) {}
  Stats s;
  void done(Algorithm algorithm) {
    s.algorithm = algorithm;
    s.total_seconds = seconds_since(t0_);
    if (out_ != nullptr) *out_ = s;
  }

 private:
  Stats* out_;
  Clock::time_point t0_ = Clock::now();
};

}  // namespace zccl::coll::toolkit
