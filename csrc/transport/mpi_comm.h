// The MPI implementation of the transport (transport.h): one duplicated communicator per process
// group, byte messages with per-operation tags, every MPI return code checked, every wait bounded
// by the deadline, MPI initialised lazily and finalised only when we initialised it.
#pragma once

// Only the C API of MPI is used: keep the deprecated C++ bindings out (they need extra libraries).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#ifdef ZCCL_GENERATED_MPI_HEADER
#include "zccl_mpi.h"  // setup.py's builds: names MPI's include folders (setup.py, mpi_compile_args)
#else
#include <mpi.h>  // the test programs', with the wrapper's own flags
#endif

#include <functional>

#include "mpi_api.h"  // finalize_if_owned, abort_if_owned, open_mpi_group
#include "transport.h"

namespace zccl::transport {

// An MPI call failed (the message carries MPI_Error_string and the call's name).
class MpiError : public TransportError {
 public:
  explicit MpiError(const std::string& what, int error_class = MPI_ERR_OTHER)
      : TransportError(what, error_class == MPI_ERR_TRUNCATE), error_class_(error_class) {}
  // MPI_Error_class of the failing code (MPI_ERR_TRUNCATE: a message was larger than the
  // receive's capacity), or MPI_ERR_OTHER when not known.
  int error_class() const { return error_class_; }

 private:
  int error_class_ = MPI_ERR_OTHER;
};

// Throws MpiError naming `what` unless rc == MPI_SUCCESS.
void check(int rc, const char* what);

// Initialises MPI on first use with MPI_THREAD_MULTIPLE requested (never at import time).
// Returns the provided thread level. If MPI was already initialised by someone else (mpi4py,
// the user), it is used as is. Thread-safe.
int ensure_initialized();

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

// A communicator we own (freed on destruction). Messages over max_piece_bytes() travel as several
// MPI messages on one (peer, tag); a receive posts its next piece once the previous one arrived,
// so do not keep two receives matching the same (peer, tag) outstanding at once when a message
// may exceed one piece.
class MpiComm final : public Comm {
 public:
  // Duplicates `parent` so our traffic never mixes with the user's; the duplication itself
  // (MPI_Comm_idup) is bounded by `timeout`, which becomes the new communicator's timeout.
  static std::unique_ptr<MpiComm> duplicate(MPI_Comm parent,
                                            std::chrono::milliseconds timeout = std::chrono::minutes(30));
  // Collective over the listed MPI_COMM_WORLD ranks only (MPI_Comm_create_group): a
  // communicator of exactly those ranks, in that order. Non-members must not call it. `tag`
  // must be the same on all members and distinct for concurrently created groups.
  static std::unique_ptr<MpiComm> create_group(const std::vector<int>& world_ranks, int tag);

  // Frees the communicator (MPI_Comm_free) unless MPI is finalised or a collective on it timed
  // out (then it is leaked on purpose: the abandoned operation may still be in progress).
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int tag_ub() const override { return tag_ub_; }
  // A CUDA-aware MPI reads and writes device memory: ZCCL_CUDA_AWARE=0/1 if set, else what
  // MPIX_Query_cuda_support() reports (false when mpi-ext.h has no such query). Asked once per
  // process.
  bool device_memory() const override;
  // OpenMpiNbc under Open MPI (MPI_Get_library_version names it), whose libnbc schedules the
  // exact collectives; BandwidthOptimal under another MPI, whose schedules we do not model.
  ExactSchedules exact_schedules() const override;
  MPI_Comm raw() const { return comm_; }
  // Open MPI moves a large message only while a rank polls (a sleeping receiver held a 16 MB
  // compressed all_gather to half speed, benchmarks/wait_policy.py): waits poll for
  // transfer_spin_budget of their bytes.
  std::chrono::microseconds polled_transfer_time(size_t bytes) const override {
    return transfer_spin_budget(bytes);
  }
  std::unique_ptr<Comm> duplicate() const override;
  std::unique_ptr<Comm> subgroup(const std::vector<int>& ranks) const override;

  void barrier() const override;
  void allreduce(const void* send, void* recv, size_t count, ElemType type,
                 ReduceKind op) const override;
  void reduce(const void* send, void* recv, size_t count, ElemType type, ReduceKind op,
              int root) const override;
  void bcast(void* buf, size_t count, ElemType type, int root) const override;
  void allgather(const void* send, void* recv, size_t count, ElemType type) const override;
  void allgatherv(const void* send, size_t count, void* recv, const std::vector<size_t>& counts,
                  ElemType type) const override;
  void gather(const void* send, void* recv, size_t count, ElemType type, int root) const override;
  void scatter(const void* send, void* recv, size_t count, ElemType type, int root) const override;
  void reduce_scatter_block(const void* send, void* recv, size_t count, ElemType type,
                            ReduceKind op) const override;
  void alltoallv(const void* send, const std::vector<size_t>& send_counts,
                 const std::vector<size_t>& send_displs, void* recv,
                 const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                 ElemType type) const override;

 protected:
  Request post_send(const void* buf, size_t bytes, int peer, int tag) const override;
  Request post_recv(void* buf, size_t capacity, int peer, int tag) const override;
  bool poll(Request& req) const override;
  std::string describe(const Request& req) const override;

 private:
  explicit MpiComm(MPI_Comm comm);
  // Waits for a non-blocking collective's requests (deadline; abandoned, not freed, on timeout).
  // `count`: elements, for messages; `bytes`: what the collective moves, which sets how long
  // the wait polls before it may sleep (transfer_spin_budget, backoff.h).
  void wait_collective(std::vector<MPI_Request>& reqs, const char* what, size_t count,
                       size_t bytes) const;
  // Starts one non-blocking collective under the serialising lock (start returns its error
  // code), then wait_collective.
  void start_and_wait(const char* what, size_t count, size_t bytes,
                      const std::function<int(MPI_Request*)>& start) const;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;
  int rank_ = 0;
  int size_ = 1;
  // A collective timed out and its request was abandoned: MPI may still progress it, so the
  // communicator is never freed (Open MPI's libnbc would touch the freed communicator).
  mutable bool abandoned_ = false;
};

}  // namespace zccl::transport
