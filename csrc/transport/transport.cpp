// The transport-independent half of Comm (transport.h): argument checks, the blocking calls on
// top of the non-blocking ones, and the one wait-with-deadline every wait goes through.
#include "transport.h"

#include "backoff.h"

#include <algorithm>
#include <string>
#include <thread>

namespace zccl::transport {
namespace {

using Clock = std::chrono::steady_clock;
const char g_in_place_marker = 0;

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  if (timeout.count() <= 0) return now;
  const auto max_wait = Clock::time_point::max() - now;
  if (timeout >= max_wait) return Clock::time_point::max();
  return now + timeout;
}

void check_peer_tag(const char* op, int peer, int tag, int size, int tag_ub) {
  if (peer < 0 || peer >= size) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": peer " + std::to_string(peer) +
                                " is out of range [0, " + std::to_string(size) + ")");
  }
  if (tag < 0 || tag > tag_ub) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": tag " + std::to_string(tag) +
                                " is out of range [0, " + std::to_string(tag_ub) + "]");
  }
}

constexpr const char* kPeerHint = " (a peer failed, is far behind, or called a different operation)";

}  // namespace

const void* const kInPlace = &g_in_place_marker;

void check_root(int root, int size, const char* what) {
  if (root < 0 || root >= size) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": root " + std::to_string(root) +
                                " is out of range [0, " + std::to_string(size) + ")");
  }
}

void check_allgatherv_counts(const std::vector<size_t>& counts, size_t count, int rank, int size) {
  if (counts.size() != static_cast<size_t>(size)) {
    throw std::invalid_argument("zccl: allgatherv: counts has " + std::to_string(counts.size()) +
                                " entries for " + std::to_string(size) + " ranks");
  }
  if (counts[rank] != count) {
    throw std::invalid_argument("zccl: allgatherv: count " + std::to_string(count) +
                                " differs from counts[" + std::to_string(rank) +
                                "] = " + std::to_string(counts[rank]));
  }
}

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::UInt8:
    case ElemType::Int8:
    case ElemType::Bool: return 1;
    case ElemType::Int16:
    case ElemType::UInt16: return 2;
    case ElemType::Int32:
    case ElemType::UInt32:
    case ElemType::Float32: return 4;
    case ElemType::Int64:
    case ElemType::UInt64:
    case ElemType::Float64: return 8;
  }
  throw std::invalid_argument("zccl: unknown element type");
}

void wait_until(std::chrono::milliseconds timeout, const std::function<bool()>& poll,
                const std::function<void()>& on_timeout, int sleep_cap_us, const IdleWait& idle,
                WaitPolicy policy, std::chrono::microseconds spin_for) {
  const auto deadline = deadline_after(timeout);
  Backoff backoff(sleep_cap_us, policy, Clock::now() + spin_for);
  while (!poll()) {
    if (Clock::now() > deadline) {
      on_timeout();
      throw TimeoutError("zccl: Timed out after " + std::to_string(timeout.count()) + " ms");
    }
    if (idle) {
      backoff.pause(idle);
    } else {
      backoff.pause();
    }
  }
}

void Comm::idle(std::chrono::microseconds max) const { std::this_thread::sleep_for(max); }

std::chrono::microseconds Comm::polled_transfer_time(size_t /*bytes*/) const {
  return std::chrono::microseconds(0);
}

void Comm::wait_for(const std::function<bool()>& poll, const std::function<void()>& on_timeout,
                    int sleep_cap_us, size_t transfer_bytes) const {
  wait_until(timeout_, poll, on_timeout, sleep_cap_us,
             [this](std::chrono::microseconds us) { idle(us); }, wait_policy_,
             polled_transfer_time(transfer_bytes));
}

int Comm::next_tag_base() {
  const int blocks = std::max(1, (tag_ub() - 1) / kTagsPerOp);
  const int base = 1 + (tag_counter_ % blocks) * kTagsPerOp;
  tag_counter_ = (tag_counter_ + 1) % blocks;
  return base;
}

Request Comm::isend(const void* buf, size_t bytes, int peer, int tag) const {
  check_peer_tag("isend", peer, tag, size(), tag_ub());
  if (buf == nullptr && bytes > 0) throw std::invalid_argument("zccl: isend: null buffer");
  Request r = post_send(buf, bytes, peer, tag);
  r.bytes = bytes;
  return r;
}

Request Comm::irecv(void* buf, size_t capacity, int peer, int tag) const {
  check_peer_tag("irecv", peer, tag, size(), tag_ub());
  if (buf == nullptr && capacity > 0) throw std::invalid_argument("zccl: irecv: null buffer");
  Request r = post_recv(buf, capacity, peer, tag);
  r.bytes = capacity;
  return r;
}

Request Comm::irecv_any(void* buf, size_t capacity, int tag) const {
  check_peer_tag("irecv_any", 0, tag, size(), tag_ub());  // (rank 0 always exists)
  if (buf == nullptr && capacity > 0) throw std::invalid_argument("zccl: irecv: null buffer");
  Request r = post_recv(buf, capacity, kAnySource, tag);
  r.bytes = capacity;
  return r;
}

bool Comm::test(Request& req, size_t* received) const {
  const bool done = poll(req);
  if (received != nullptr) *received = req.received;
  return done;
}

size_t Comm::wait(Request& req) const {
  wait_for([&] { return poll(req); }, [&] {
    throw TimeoutError("zccl: Timed out after " + std::to_string(timeout_.count()) +
                       " ms waiting for " + describe(req) + kPeerHint);
  }, kSleepCapUs, req.bytes);
  return req.received;
}

void Comm::wait_all(std::vector<Request>& reqs) const {
  // The requests move at once (a ring step's send and receive): the largest sets the stretch.
  size_t largest = 0;
  for (const Request& r : reqs) largest = std::max(largest, r.bytes);
  const Request* first_pending = nullptr;
  auto all_done = [&] {
    bool all = true;
    first_pending = nullptr;
    for (Request& r : reqs) {
      if (!poll(r)) {
        all = false;
        if (first_pending == nullptr) first_pending = &r;
      }
    }
    return all;
  };
  wait_for(all_done, [&] {
    size_t pending = 0;
    for (Request& r : reqs) pending += r.active() ? 1 : 0;
    throw TimeoutError("zccl: Timed out after " + std::to_string(timeout_.count()) +
                       " ms waiting for " + std::to_string(pending) +
                       " operation(s), the first: " + describe(*first_pending) + kPeerHint);
  }, kSleepCapUs, largest);
}

void Comm::send(const void* buf, size_t bytes, int peer, int tag) const {
  Request r = isend(buf, bytes, peer, tag);
  wait(r);
}

size_t Comm::recv(void* buf, size_t capacity, int peer, int tag) const {
  Request r = irecv(buf, capacity, peer, tag);
  return wait(r);
}

size_t Comm::sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rcap, int src,
                      int tag) const {
  std::vector<Request> reqs;
  reqs.reserve(2);
  reqs.push_back(irecv(rbuf, rcap, src, tag));
  reqs.push_back(isend(sbuf, sbytes, dst, tag));
  wait_all(reqs);
  return reqs[0].received;
}

std::vector<uint64_t> Comm::allgather_u64(uint64_t value) const {
  std::vector<uint64_t> out(static_cast<size_t>(size()));
  allgather(&value, out.data(), 1, ElemType::UInt64);
  return out;
}

}  // namespace zccl::transport
