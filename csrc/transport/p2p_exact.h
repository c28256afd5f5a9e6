// The exact (uncompressed) collectives written on a transport's own point-to-point messages,
// for transports without a collective library underneath (the TCP transport). A transport
// derives from P2pExactComm and implements only Comm's point-to-point members; its post_send /
// post_recv must accept the negative tags these collectives use (user and algorithm tags are
// never negative, so the two never match each other's messages).
//
// Reductions fold the ranks' vectors in rank order, ((x0 op x1) op x2) ..., so a float SUM is
// defined bit for bit and is the same on every rank. Schedules (p ranks, n bytes, one switch):
//   * allreduce / reduce_scatter_block / reduce: direct reduce-scatter (each rank receives its
//     block from every other rank and folds it, in rounds that bound the scratch memory), then
//     a direct allgather (or a gather to the root): 2n(p-1)/p bytes per rank, two latencies.
//     Small vectors (< p elements or <= 16 KiB): every rank sends its whole vector to every
//     other and folds all of them (one latency).
//   * bcast: binomial tree up to 64 KiB, else a chain pipelined in 512 KiB pieces
//     (n bytes per link plus (p-2) pieces).
//   * allgather(v), gather, scatter, alltoallv: direct messages between every pair.
//   * barrier: dissemination (ceil(log2 p) rounds of empty messages).
// Every wait is bounded by the communicator's timeout and names the peer it waited for.
#pragma once

#include <vector>

#include "transport.h"

namespace zccl::transport {

class P2pExactComm : public Comm {
 public:
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
  P2pExactComm() = default;

 private:
  // Requests of one step and the rank each one waits for (a timeout names the ranks).
  struct Pending {
    std::vector<Request> reqs;
    std::vector<int> peers;
  };
  static constexpr size_t kAll = static_cast<size_t>(-1);
  // gather (to_root) or scatter: the root exchanges one block of count elements with each rank.
  void rooted_blocks(const char* what, bool to_root, const void* send, void* recv, size_t count,
                     ElemType type, int root) const;
  void recv_from(Pending& p, void* buf, size_t bytes, int peer, int tag) const;
  void send_to(Pending& p, const void* buf, size_t bytes, int peer, int tag) const;
  // Waits for every request of p (or only p[only]) within the timeout.
  void finish(Pending& p, size_t only = kAll) const;
  // A fresh negative tag per collective (the group's worker thread is the only caller).
  int exact_tag() const;
  // Folds, in rank order, every rank's [first, first + n) elements of block `mine` of `src`
  // (blocks: element offsets, size()+1 entries) into out (n elements of this rank's block).
  void reduce_scatter_blocks(const char* src, char* out, const std::vector<size_t>& blocks,
                             ElemType type, ReduceKind op, int tag) const;
  // Every rank's block of `buf` (byte offsets, size()+1 entries) to every other rank.
  void allgather_blocks(char* buf, const std::vector<size_t>& offsets, int tag) const;
  // Every rank's whole vector to every rank, folded in rank order into out.
  void allreduce_small(const char* src, char* out, size_t count, ElemType type, ReduceKind op,
                       int tag) const;
  void bcast_chain(char* buf, size_t bytes, int root, int tag) const;
  void bcast_tree(char* buf, size_t bytes, int root, int tag) const;

  mutable int exact_counter_ = 0;
};

}  // namespace zccl::transport
