// Shared by the MPI transport's files only (mpi_runtime.cpp, mpi_comm.cpp, mpi_exact.cpp,
// mpi_groups.cpp): the call lock, error construction, type mapping and the request state.
#pragma once

#include <string>
#include <vector>

#include "mpi_comm.h"

namespace zccl::transport::mpi {

// Holds the process-wide MPI lock when the library lacks MPI_THREAD_MULTIPLE (every MPI call made
// through this layer is then serialised); reentrant within a thread.
class Guard {
 public:
  Guard();
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool locked_ = false;
};

bool finalized();
// MpiError for return code `rc` of the call described by `what`.
MpiError make_error(int rc, const std::string& what);
void check_str(int rc, const std::string& what);
// `n` as an MPI count; std::length_error above max_collective_count().
int to_int_count(size_t n, const char* what);
MPI_Datatype datatype(ElemType t);
// The operator of reduction k on elements of type t (MPI's own, except where it is wrong).
MPI_Op op(ReduceKind k, ElemType t);
// "rank 1 of a communicator of 4".
std::string comm_desc(MPI_Comm comm);
// The peers a collective on `size` ranks waits for, seen from `rank`: "rank 1", "ranks 0, 2-3".
std::string others_desc(int rank, int size);

// An MPI request, possibly in several parts (messages over one piece travel in pieces), and what
// it is, for error messages and for posting the next piece of a receive.
struct RequestState final : transport::RequestState {
  ~RequestState() override;  // cancels and frees unfinished parts; never throws
  bool active() const override;

  std::vector<MPI_Request> parts;
  const char* what = "";
  MPI_Comm comm = MPI_COMM_NULL;
  int peer = -1;
  int tag = -1;
  size_t bytes = 0;  // send size or receive capacity
  unsigned char* rbuf = nullptr;
  bool recv = false;
  bool collective = false;  // MPI forbids cancelling/freeing these: abandoned on timeout
};

}  // namespace zccl::transport::mpi
