// The transport interface: what the collectives and the backend need to move bytes and run the
// exact (uncompressed) collectives between the ranks of one group. Knows nothing of compression
// and nothing of MPI. Two implementations: MpiComm (mpi_comm.h; opened through mpi_api.h, which
// a build without Open MPI provides too) and TcpComm (tcp/tcp_comm.h).
//
// A transport implements Comm's pure virtual members:
//   * rank(), size(), tag_ub(), duplicate(), subgroup();
//   * post_send / post_recv (non-blocking byte messages of any size, matched by (peer, tag) in
//     order; a receive may be larger than the message, a larger message fails with
//     TransportError::truncated()), poll() (progress one request, non-blocking), describe();
//   * the exact typed collectives (barrier ... alltoallv), each bounded by timeout().
// Everything else (blocking send/recv/sendrecv, wait, wait_all, the one wait-with-deadline, tags)
// is written once here on top of those.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backoff.h"

namespace zccl::transport {

using zccl::WaitPolicy;  // how waits poll: backoff.h

// Element types of the exact collectives (the bytes of float16/bfloat16 move as UInt16; the
// backend moves dtypes without arithmetic here, float8 for one, as unsigned words of their size).
enum class ElemType : uint8_t { UInt8, Int8, Int16, Int32, Int64, UInt16, UInt32, UInt64, Float32, Float64, Bool };
size_t elem_size(ElemType t);

// Reductions of the exact collectives (the logical ones are for Bool).
enum class ReduceKind : uint8_t { Sum, Prod, Min, Max, BAnd, BOr, BXor, LAnd, LOr, LXor };

// `send` argument of the exact collectives meaning "the data is already in recv" (MPI_IN_PLACE).
extern const void* const kInPlace;

// A transport call failed. truncated(): a message was larger than the receive's capacity.
class TransportError : public std::runtime_error {
 public:
  explicit TransportError(const std::string& what, bool truncated = false)
      : std::runtime_error(what), truncated_(truncated) {}
  bool truncated() const { return truncated_; }

 private:
  bool truncated_ = false;
};

// A wait passed the communicator's deadline (the group's timeout).
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a transport keeps for one pending operation; destroying an unfinished one cancels it
// without throwing (so an exception in a collective never leaves a transfer into freed memory).
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual bool active() const = 0;
};

// A pending non-blocking operation. Move-only.
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<RequestState> state) : state_(std::move(state)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept = default;

  bool active() const { return state_ && state_->active(); }
  RequestState* state() const { return state_.get(); }

  size_t received = 0;  // bytes received so far by a receive
  size_t bytes = 0;     // what was posted: a send's bytes, a receive's capacity
  int source = -1;      // the sender of a receive, once known (any-source receives too)

 private:
  std::unique_ptr<RequestState> state_;
};

// Runs `poll` until it returns true; past `timeout` (from now) calls `on_timeout`, which must
// throw. With WaitPolicy::Sleep polling backs off (spin, yield, then sleeps capped at
// `sleep_cap_us`) so oversubscribed ranks leave the cores to the ones computing; with
// WaitPolicy::Spin it polls and yields, never sleeping (backoff.h says why). The one
// wait-with-deadline: the transport's waits and the collectives' own progress loops go through it.
// `idle` (optional) replaces the sleeps: it blocks at most the given time and may return as
// soon as the transport has something to progress (Comm::idle).
// `spin_for`: the first stretch of the wait polls as WaitPolicy::Spin does, whatever `policy`.
using IdleWait = std::function<void(std::chrono::microseconds)>;
void wait_until(std::chrono::milliseconds timeout, const std::function<bool()>& poll,
                const std::function<void()>& on_timeout, int sleep_cap_us = 200,
                const IdleWait& idle = nullptr, WaitPolicy policy = WaitPolicy::Sleep,
                std::chrono::microseconds spin_for = std::chrono::microseconds(0));

// Argument checks every transport's exact collectives share (std::invalid_argument naming them).
void check_root(int root, int size, const char* what);
void check_allgatherv_counts(const std::vector<size_t>& counts, size_t count, int rank, int size);

// One group's communicator.
// How a transport's exact collectives move a large payload: what the automatic algorithm choice
// (collectives/route.cpp) weighs a compressed collective against.
enum class ExactSchedules : uint8_t {
  // Each link carries what a bandwidth-optimal schedule needs: 2 n (p-1)/p bytes per rank for
  // an allreduce, n per link for a pipelined broadcast (P2pExactComm, the TCP transport).
  BandwidthOptimal,
  // Open MPI's non-blocking collectives (libnbc), as this transport calls them: MPI_Iallreduce
  // reduces to one rank and broadcasts back down binomial trees below 4 ranks or 64 KiB, else
  // runs Rabenseifner's reduce-scatter + allgather; MPI_Ibcast sends p-1 copies from the root
  // up to 4 ranks, else down a binomial tree (Open MPI 4.1, coll/libnbc).
  OpenMpiNbc,
};

class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int tag_ub() const = 0;  // largest valid tag (at least 32767)

  // Whether isend/irecv and the exact collectives accept CUDA device pointers. False unless the
  // transport says otherwise (a CUDA-aware MPI; never the TCP transport, whose sockets read
  // host memory only): the GPU paths then stage their bytes through pinned host memory.
  virtual bool device_memory() const { return false; }
  // How this transport's exact collectives schedule their bytes (BandwidthOptimal unless the
  // transport says otherwise).
  virtual ExactSchedules exact_schedules() const { return ExactSchedules::BandwidthOptimal; }

  // A second communicator over the same ranks, in the same order (the backend keeps one for
  // point-to-point); collective over the group.
  virtual std::unique_ptr<Comm> duplicate() const = 0;
  // Collective over *this: a communicator of the given ranks of *this (in that order); nullptr
  // on ranks not in `ranks`.
  virtual std::unique_ptr<Comm> subgroup(const std::vector<int>& ranks) const = 0;

  // Deadline applied by every wait: waits longer than `timeout` throw TimeoutError.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // How every wait on this communicator polls (backoff.h); Sleep unless set. Set only from the
  // thread that issues the communicator's operations (the backend: before each collective).
  void set_wait_policy(WaitPolicy policy) { wait_policy_ = policy; }
  WaitPolicy wait_policy() const { return wait_policy_; }

  // A fresh tag block for one operation, so concurrent operations on one communicator never
  // match each other's messages. Each operation may use tags [base, base + kTagsPerOp).
  static constexpr int kTagsPerOp = 64;
  int next_tag_base();

  // Byte point-to-point. A receive may be posted with a capacity larger than the message; a
  // message larger than the capacity fails with TransportError (truncated()). Tag 0 is reserved;
  // use next_tag_base() tags.
  Request isend(const void* buf, size_t bytes, int peer, int tag) const;
  Request irecv(void* buf, size_t capacity, int peer, int tag) const;
  // A receive from whichever rank sends first on `tag`; once its first bytes arrived, `source`
  // names the sender.
  Request irecv_any(void* buf, size_t capacity, int tag) const;
  // Polls once; true when done (the request becomes inactive). `received` gets the byte count.
  bool test(Request& req, size_t* received = nullptr) const;
  // Polls until done; throws TimeoutError past the deadline. Returns bytes received.
  size_t wait(Request& req) const;
  void wait_all(std::vector<Request>& reqs) const;
  // wait_until (above) with this communicator's idle wait: the loop of a collective that
  // polls several requests (and works in between) waits through it.
  // `transfer_bytes`: what the awaited transfers move; the wait polls for
  // polled_transfer_time(transfer_bytes) before it may sleep.
  static constexpr int kSleepCapUs = 200;
  void wait_for(const std::function<bool()>& poll, const std::function<void()>& on_timeout,
                int sleep_cap_us = kSleepCapUs, size_t transfer_bytes = 0) const;
  // Blocks at most `max` while nothing can progress. The default sleeps; a transport that can
  // wait on its sockets returns as soon as bytes arrive or can leave.
  virtual void idle(std::chrono::microseconds max) const;
  // How long a wait for transfers of `bytes` polls before it may sleep (the wait policy applies
  // after it). None by default: a transport whose idle() wakes when bytes can move needs no
  // polls; one that moves bytes only while polled (Open MPI) says how long they should take.
  virtual std::chrono::microseconds polled_transfer_time(size_t bytes) const;
  void send(const void* buf, size_t bytes, int peer, int tag) const;
  size_t recv(void* buf, size_t capacity, int peer, int tag) const;  // returns bytes received
  // Simultaneous send to `dst` and receive from `src` (ring steps); returns bytes received.
  size_t sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rcap, int src,
                  int tag) const;

  // Exact (uncompressed) collectives on typed data, bounded by the deadline. `count` in elements.
  virtual void barrier() const = 0;
  virtual void allreduce(const void* send, void* recv, size_t count, ElemType type,
                         ReduceKind op) const = 0;
  virtual void reduce(const void* send, void* recv, size_t count, ElemType type, ReduceKind op,
                      int root) const = 0;
  virtual void bcast(void* buf, size_t count, ElemType type, int root) const = 0;
  virtual void allgather(const void* send, void* recv, size_t count, ElemType type) const = 0;
  // recv is packed in rank order: counts[r] elements from rank r; count must equal counts[rank].
  virtual void allgatherv(const void* send, size_t count, void* recv,
                          const std::vector<size_t>& counts, ElemType type) const = 0;
  virtual void gather(const void* send, void* recv, size_t count, ElemType type,
                      int root) const = 0;
  virtual void scatter(const void* send, void* recv, size_t count, ElemType type,
                       int root) const = 0;
  virtual void reduce_scatter_block(const void* send, void* recv, size_t count, ElemType type,
                                    ReduceKind op) const = 0;
  // Counts and displacements in elements.
  virtual void alltoallv(const void* send, const std::vector<size_t>& send_counts,
                         const std::vector<size_t>& send_displs, void* recv,
                         const std::vector<size_t>& recv_counts,
                         const std::vector<size_t>& recv_displs, ElemType type) const = 0;
  // Exchange of one uint64 per rank (compressed sizes); out has size() entries.
  std::vector<uint64_t> allgather_u64(uint64_t value) const;

 protected:
  Comm() = default;
  // Any-source receives pass peer = kAnySource to post_recv.
  static constexpr int kAnySource = -1;
  virtual Request post_send(const void* buf, size_t bytes, int peer, int tag) const = 0;
  virtual Request post_recv(void* buf, size_t capacity, int peer, int tag) const = 0;
  // Progresses `req` without blocking; true when it is done (fills req.received / req.source).
  virtual bool poll(Request& req) const = 0;
  // "isend of 8 bytes to rank 1 (tag 3) on rank 0 of a communicator of 4", for errors.
  virtual std::string describe(const Request& req) const = 0;
  std::chrono::milliseconds timeout_{std::chrono::minutes(30)};
  WaitPolicy wait_policy_ = WaitPolicy::Sleep;
  // A communicator made from `parent` (duplicate, subgroup) waits as `parent` does.
  void take_waits_of(const Comm& parent) {
    timeout_ = parent.timeout_;
    wait_policy_ = parent.wait_policy_;
  }

 private:
  int tag_counter_ = 0;  // only touched by the group's worker thread
};

}  // namespace zccl::transport
