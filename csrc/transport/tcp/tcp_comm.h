// The TCP transport: transport::Comm over one socket per pair of ranks (socket_mesh.h), for
// groups launched without mpirun (torchrun, or any launcher that gives torch a Store). It
// replaced a carrier over Gloo's point-to-point, whose per-message rendezvous and thread
// hand-offs made it 1.7-3.6x slower than Open MPI on the emulated cluster (benchmarks/RESULTS.md).
//
// Messages. Each message is a 16-byte head (communicator id, tag, length) and its bytes, written
// in one piece on the pair's socket, so a (peer, tag)'s messages arrive in the order they were
// sent, as MPI promises. A receive posted before its message arrives gets the bytes straight into
// its buffer; a message that arrives first is kept in memory until its receive is posted (as an
// MPI eager protocol would). Receives match in the order they were posted; one larger than its
// message is fine, a message larger than the receive fails it with TransportError::truncated()
// (its bytes are skipped, the stream stays in step).
//
// Progress. There is no thread of our own: every poll() (tests, waits) writes what the sockets
// take and reads what arrived, for every pending operation of every communicator of the mesh,
// under the mesh's one lock -- as MPI progresses inside its calls. A wait with nothing to do
// blocks in ppoll() on the sockets (idle()) instead of sleeping, so it wakes when bytes arrive. A request abandoned before it
// completed (an exception elsewhere) is cancelled without breaking the stream: an unsent rest is
// copied and still sent, a receive's rest is read and dropped. A peer whose connection fails or
// closes fails every operation that waits for it, naming the rank.
//
// duplicate() multiplexes another communicator on the same sockets (its own id); subgroups are
// made by torch on the subgroup's own Store, as new meshes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../p2p_exact.h"
#include "socket_mesh.h"

namespace zccl::transport::tcp {

class Mesh;

class TcpComm final : public P2pExactComm {
 public:
  // Collective over the `size` ranks: connects the mesh (socket_mesh.h) within `timeout`, which
  // becomes the communicator's timeout.
  static std::unique_ptr<TcpComm> connect(const Listener& listener, int rank, int size,
                                          const std::vector<std::string>& addresses,
                                          uint64_t session, std::chrono::milliseconds timeout);
  TcpComm(std::shared_ptr<Mesh> mesh, uint32_t id);
  ~TcpComm() override;

  int rank() const override;
  int size() const override;
  int tag_ub() const override { return (1 << 30) - 1; }
  std::unique_ptr<Comm> duplicate() const override;
  std::unique_ptr<Comm> subgroup(const std::vector<int>& ranks) const override;
  // Waits on the sockets (not the lock) until bytes arrive or can leave, or `max` passes.
  void idle(std::chrono::microseconds max) const override;

 protected:
  Request post_send(const void* buf, size_t bytes, int peer, int tag) const override;
  Request post_recv(void* buf, size_t capacity, int peer, int tag) const override;
  bool poll(Request& req) const override;
  std::string describe(const Request& req) const override;

 private:
  std::shared_ptr<Mesh> mesh_;
  uint32_t id_ = 0;
};

}  // namespace zccl::transport::tcp
