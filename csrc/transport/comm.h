// MPI transport: one communicator per process group, byte messages with per-operation tags,
// every MPI return code checked, every wait bounded by a deadline. Knows nothing of compression.
#pragma once

// Only the C API of MPI is used: keep the deprecated C++ bindings out (they need extra libraries).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace zccl::transport {

// An MPI call failed (the message carries MPI_Error_string and the call's name).
class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  MpiError(const std::string& what, int error_class)
      : std::runtime_error(what), error_class_(error_class) {}
  // MPI_Error_class of the failing code (MPI_ERR_TRUNCATE: a message was larger than the
  // receive's capacity), or MPI_ERR_OTHER when not known.
  int error_class() const { return error_class_; }

 private:
  int error_class_ = MPI_ERR_OTHER;
};

// A wait passed the communicator's deadline (the group's timeout).
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws MpiError naming `what` unless rc == MPI_SUCCESS.
void check(int rc, const char* what);

// Initialises MPI on first use with MPI_THREAD_MULTIPLE requested (never at import time).
// Returns the provided thread level. If MPI was already initialised by someone else (mpi4py,
// the user), it is used as is. Thread-safe.
int ensure_initialized();

// Finalises MPI only if ensure_initialized() initialised it and it is not finalised yet.
void finalize_if_owned();

// True when the MPI library provides MPI_THREAD_MULTIPLE; otherwise every MPI call made through
// this layer is serialised by one process-wide lock.
bool thread_multiple();

// Largest piece a single MPI message carries (default 1 GiB, clamped to [1, INT_MAX]); longer
// byte messages travel as several pieces. Every rank must use the same value. Testing hook.
void set_max_piece_bytes(size_t bytes);
size_t max_piece_bytes();

// Largest element count passed to one MPI collective call (default INT_MAX, clamped to
// [1, INT_MAX]). Elementwise collectives (allreduce, reduce, bcast) are split into calls of at
// most this many elements; the block collectives throw std::length_error above it. Testing hook.
void set_max_collective_count(size_t count);
size_t max_collective_count();

// A pending non-blocking operation (possibly several MPI requests: messages over 1 GiB travel
// in pieces). Move-only; destroying an unfinished request cancels and frees it, so an exception
// in a collective never leaves MPI writing into freed memory.
class Request {
 public:
  Request() = default;
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  bool active() const;
  std::vector<MPI_Request>& parts() { return parts_; }
  size_t received = 0;  // bytes received so far by finished receive parts
  int source = -1;      // the sender of a receive, once its first piece arrived (any-source too)

 private:
  friend class Comm;
  void cancel_and_free() noexcept;
  std::vector<MPI_Request> parts_;
  // What the request is, for error messages, and the state of a receive in pieces (the next
  // piece is posted when the previous one arrived full; see comm.cpp).
  const char* what_ = "";
  MPI_Comm comm_ = MPI_COMM_NULL;
  int peer_ = -1;
  int tag_ = -1;
  size_t bytes_ = 0;          // send size or receive capacity
  unsigned char* rbuf_ = nullptr;
  bool recv_ = false;
  bool collective_ = false;   // MPI forbids cancelling/freeing these: abandoned on timeout
};

// A communicator we own (freed on destruction). All sizes are in bytes or elements of size_t;
// messages over 1 GiB are split transparently (MPI counts are int).
class Comm {
 public:
  // Duplicates `parent` (MPI_COMM_WORLD by default) so our traffic never mixes with the user's.
  static std::unique_ptr<Comm> duplicate(MPI_Comm parent = MPI_COMM_WORLD);
  // The same with a deadline for the duplication itself (MPI_Comm_idup), which also becomes the
  // new communicator's timeout (the default is 30 minutes).
  static std::unique_ptr<Comm> duplicate(MPI_Comm parent, std::chrono::milliseconds timeout);
  // Collective over the listed MPI_COMM_WORLD ranks only (MPI_Comm_create_group): a
  // communicator of exactly those ranks, in that order. Non-members must not call it. `tag`
  // must be the same on all members and distinct for concurrently created groups.
  static std::unique_ptr<Comm> create_group(const std::vector<int>& world_ranks, int tag);
  // Collective over *this: a new communicator of the given ranks of *this (in that order);
  // returns nullptr on ranks not in `ranks`.
  std::unique_ptr<Comm> subgroup(const std::vector<int>& ranks) const;

  // Frees the communicator (MPI_Comm_free) unless MPI is finalised or a collective on it timed
  // out (then it is leaked on purpose: the abandoned operation may still be in progress).
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int tag_ub() const { return tag_ub_; }  // largest valid tag (MPI_TAG_UB, at least 32767)
  int size() const { return size_; }
  MPI_Comm raw() const { return comm_; }

  // Deadline applied by every wait: waits longer than `timeout` throw TimeoutError.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // A fresh tag block for one operation, so concurrent operations on one communicator never
  // match each other's messages. Each operation may use tags [base, base + kTagsPerOp).
  static constexpr int kTagsPerOp = 64;
  int next_tag_base();

  // Byte point-to-point. A receive may be posted with a capacity larger than the message; a
  // message larger than the capacity fails with MpiError (error_class() == MPI_ERR_TRUNCATE).
  // Messages over max_piece_bytes() (1 GiB) travel as several MPI messages on one (peer, tag) and
  // a receive posts its next piece once the previous one arrived, so do not keep two receives
  // matching the same (peer, tag) outstanding at once when a message may exceed 1 GiB (their
  // pieces could interleave). Tag 0 is reserved (subgroup creation); use next_tag_base() tags.
  Request isend(const void* buf, size_t bytes, int peer, int tag) const;
  Request irecv(void* buf, size_t capacity, int peer, int tag) const;
  // A receive from whichever rank sends first on `tag` (MPI_ANY_SOURCE); once its first piece
  // arrived, `source` names the sender and later pieces are taken from that rank only.
  Request irecv_any(void* buf, size_t capacity, int tag) const;
  // Polls once; true when done (the request becomes inactive). `received` gets the byte count.
  bool test(Request& req, size_t* received = nullptr) const;
  // Polls until done; throws TimeoutError past the deadline. Returns bytes received.
  size_t wait(Request& req) const;
  void wait_all(std::vector<Request>& reqs) const;
  void send(const void* buf, size_t bytes, int peer, int tag) const;
  size_t recv(void* buf, size_t capacity, int peer, int tag) const;  // returns bytes received
  // Simultaneous send to `dst` and receive from `src` (ring steps); returns bytes received.
  size_t sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rcap, int src,
                  int tag) const;

  // Exact (uncompressed) collectives on typed data, non-blocking MPI underneath + deadline.
  // `count` in elements of `type`.
  void barrier() const;
  void allreduce(const void* send, void* recv, size_t count, MPI_Datatype type, MPI_Op op) const;
  void reduce(const void* send, void* recv, size_t count, MPI_Datatype type, MPI_Op op,
              int root) const;
  void bcast(void* buf, size_t count, MPI_Datatype type, int root) const;
  void allgather(const void* send, void* recv, size_t count, MPI_Datatype type) const;
  // recv is packed in rank order: counts[r] elements from rank r; count must equal counts[rank].
  void allgatherv(const void* send, size_t count, void* recv, const std::vector<size_t>& counts,
                  MPI_Datatype type) const;
  void gather(const void* send, void* recv, size_t count, MPI_Datatype type, int root) const;
  void scatter(const void* send, void* recv, size_t count, MPI_Datatype type, int root) const;
  void reduce_scatter_block(const void* send, void* recv, size_t count, MPI_Datatype type,
                            MPI_Op op) const;
  // Counts and displacements in elements.
  void alltoallv(const void* send, const std::vector<size_t>& send_counts,
                 const std::vector<size_t>& send_displs, void* recv,
                 const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                 MPI_Datatype type) const;
  // Exchange of one uint64 per rank (compressed sizes); out has size() entries.
  std::vector<uint64_t> allgather_u64(uint64_t value) const;

 private:
  explicit Comm(MPI_Comm comm);
  // irecv / irecv_any after their checks (peer may be MPI_ANY_SOURCE).
  Request post_irecv(void* buf, size_t capacity, int peer, int tag) const;
  // Waits for a non-blocking collective's request (deadline; abandoned, not freed, on timeout).
  void wait_collective(MPI_Request* reqs, size_t n, const char* what, size_t count) const;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_{std::chrono::minutes(30)};
  int tag_counter_ = 0;  // only touched by the group's worker thread
  // A collective timed out and its request was abandoned: MPI may still progress it, so the
  // communicator is never freed (Open MPI's libnbc would touch the freed communicator).
  mutable bool abandoned_ = false;
};

}  // namespace zccl::transport
