// The flow of tasks and the ring allgather of the pipelined ring allreduce (compute_common.h).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "compute_common.h"

namespace zccl::coll::compute {

void run_flow(const Comm& comm, const FlowControl& flow, int n, int lanes, const char* what,
              int peer, const std::function<void(int, int)>& task) {
  const int nt = std::clamp(lanes, 1, std::max(1, n));
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(nt));
  auto serve_until = [&](const std::function<bool()>& done) {
    wait_until(comm, [&] {
      flow.service();
      return done() || failed.load();
    }, "all_reduce", what, peer);
  };
  auto lane_loop = [&](int lane) {
    try {
      for (int k = next.fetch_add(1); k < n && !failed.load(); k = next.fetch_add(1)) {
        if (lane == 0) {
          serve_until([&] { return flow.ready(k); });
        } else {
          while (!flow.ready(k) && !failed.load()) std::this_thread::yield();
        }
        if (failed.load()) break;
        task(lane, k);
      }
      if (lane == 0) serve_until(flow.settled);
    } catch (...) {
      errors[static_cast<size_t>(lane)] = std::current_exception();
      failed.store(true);
    }
  };
  if (nt == 1) {
    lane_loop(0);  // no OpenMP region: the codec calls inside may open their own
  } else {
    // The team may be smaller than asked (OMP_THREAD_LIMIT, nesting): tasks go to whoever asks.
#pragma omp parallel num_threads(nt)
    lane_loop(omp_get_thread_num());
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

RingAllgather::RingAllgather(Comm& comm, const Ring& ring, int S, size_t cap, int tag, Stats& st)
    : comm_(comm), ring_(ring), S_(S), tag_(tag), cap_(cap),
      received_(static_cast<size_t>(ring.p - 1) * S), st_(st),
      area_(workspace_bytes(kSlotSend1, received_ * cap)), rx_(received_),
      tx_(received_ + S), progress_([this](uint64_t, uint64_t) { service(); }) {
  for (size_t k = 0; k < received_; ++k) {
    rx_[k].start(comm_.irecv(area_ + k * cap_, cap_, ring_.prev, tag_));
  }
}

void RingAllgather::service() {
  size_t arrived = arrived_.load(std::memory_order_relaxed);  // only this thread writes it
  while (arrived < received_) {
    Pending& rx = rx_[arrived];
    rx.poll(comm_);
    if (!rx.done) break;
    arrived_.store(++arrived, std::memory_order_release);
  }
  // One tag, so the order of sends is the receiver's order of slots: the own segments first.
  const size_t last_forwarded = static_cast<size_t>(ring_.p - 2) * S_;  // steps t < p-2
  while (own_sent_ == S_ && forwarded_ < arrived) {
    if (forwarded_ < last_forwarded) {
      const size_t bytes = rx_[forwarded_].bytes;
      tx_[forwarded_].start(comm_.isend(area_ + forwarded_ * cap_, bytes, ring_.next, tag_));
      st_.bytes_sent += bytes;
    }
    ++forwarded_;
  }
  // The sends' progress, once there are forwards (the reduce-scatter polls its own sends).
  if (own_sent_ == S_) poll_first(comm_, tx_);
}

void RingAllgather::send_own(int j, const uint8_t* stream, size_t bytes) {
  tx_[received_ + static_cast<size_t>(j)].start(comm_.isend(stream, bytes, ring_.next, tag_));
  st_.bytes_sent += bytes;
  ++own_sent_;
}

void RingAllgather::decode_all(int lanes, const Decode& decode) {
  FlowControl flow;
  flow.ready = [this](int k) {
    return static_cast<size_t>(k) < arrived_.load(std::memory_order_acquire);
  };
  flow.service = [this] { service(); };
  flow.settled = [this] { return forwarded_ == received_; };
  std::exception_ptr error;
  run_recording(error, [&] {
    run_flow(comm_, flow, static_cast<int>(received_), lanes, "an allgather segment", ring_.prev,
             [&](int lane, int k) {
               const size_t at = static_cast<size_t>(k);
               const int t = k / S_;
               decode(lane, area_ + at * cap_, rx_[at].bytes, ring_.before(t + 1), k % S_);
             });
  });
  // After a failed decode the lanes stopped early: forward the rest (a no-op otherwise).
  wait_until(comm_, [&] {
    service();
    return flow.settled();
  }, "all_reduce", "an allgather segment", ring_.prev);
  finish_all(comm_, tx_);
  if (error) std::rethrow_exception(error);
}

}  // namespace zccl::coll::compute
