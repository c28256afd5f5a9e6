// P2pExactComm (p2p_exact.h): the exact collectives on point-to-point messages.
#include "p2p_exact.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>

#include "reduce_ops.h"

namespace zccl::transport {
namespace {

constexpr size_t kSmallBytes = size_t{16} << 10;      // allreduce: whole vectors to everyone
constexpr size_t kTreeBytes = size_t{64} << 10;       // bcast: binomial tree up to this
constexpr size_t kChainPiece = size_t{512} << 10;     // bcast: chain piece
constexpr size_t kScratchBytes = size_t{32} << 20;    // reduce-scatter: scratch per round

// Element offsets of p balanced blocks of count elements (p+1 entries).
std::vector<size_t> balanced_blocks(size_t count, int p) {
  std::vector<size_t> b(static_cast<size_t>(p) + 1);
  for (int r = 0; r <= p; ++r) b[r] = count / p * r + std::min<size_t>(count % p, r);
  return b;
}

std::vector<size_t> scaled(const std::vector<size_t>& v, size_t by) {
  std::vector<size_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * by;
  return out;
}

void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0 && dst != src) std::memmove(dst, src, n);
}

}  // namespace

void P2pExactComm::recv_from(Pending& p, void* buf, size_t bytes, int peer, int tag) const {
  p.reqs.push_back(post_recv(buf, bytes, peer, tag));
  p.peers.push_back(peer);
}

void P2pExactComm::send_to(Pending& p, const void* buf, size_t bytes, int peer, int tag) const {
  p.reqs.push_back(post_send(buf, bytes, peer, tag));
  p.peers.push_back(peer);
}

void P2pExactComm::finish(Pending& p, size_t only) const {
  auto done = [&] {
    bool all = true;
    for (size_t i = 0; i < p.reqs.size(); ++i) {
      if ((only == kAll || i == only) && !poll(p.reqs[i])) all = false;
    }
    return all;
  };
  wait_for(done, [&] {
    std::set<int> ranks;
    std::string first;
    for (size_t i = 0; i < p.reqs.size(); ++i) {
      if ((only != kAll && i != only) || !p.reqs[i].active()) continue;
      ranks.insert(p.peers[i]);
      if (first.empty()) first = describe(p.reqs[i]);
    }
    std::string who;
    for (int r : ranks) who += (who.empty() ? " " : ", ") + std::to_string(r);
    throw TimeoutError("zccl: Timed out after " + std::to_string(timeout().count()) +
                       " ms in an exact collective waiting for rank(s)" + who + " (the first: " +
                       first + "; a peer failed, is far behind, or called a different operation)");
  });
}

int P2pExactComm::exact_tag() const {
  exact_counter_ = (exact_counter_ + 1) & ((1 << 30) - 1);
  return -1 - exact_counter_;
}

void P2pExactComm::barrier() const {
  const int p = size(), me = rank(), tag = exact_tag();
  for (int k = 1; k < p; k <<= 1) {
    Pending reqs;
    recv_from(reqs, nullptr, 0, (me - k + p) % p, tag);
    send_to(reqs, nullptr, 0, (me + k) % p, tag);
    finish(reqs);
  }
}

void P2pExactComm::allreduce_small(const char* src, char* out, size_t count, ElemType type,
                                   ReduceKind op, int tag) const {
  const int p = size(), me = rank();
  const size_t bytes = count * elem_size(type);
  std::vector<char> all(bytes * static_cast<size_t>(p));
  Pending reqs;
  for (int j = 0; j < p; ++j) {
    if (j != me) recv_from(reqs, all.data() + j * bytes, bytes, j, tag);
  }
  for (int j = 0; j < p; ++j) {
    if (j != me) send_to(reqs, src, bytes, j, tag);
  }
  std::memcpy(all.data() + me * bytes, src, bytes);
  finish(reqs);
  std::memcpy(out, all.data(), bytes);
  for (int j = 1; j < p; ++j) fold(out, all.data() + j * bytes, count, type, op);
}

void P2pExactComm::reduce_scatter_blocks(const char* src, char* out,
                                         const std::vector<size_t>& blocks, ElemType type,
                                         ReduceKind op, int tag) const {
  const int p = size(), me = rank();
  const size_t es = elem_size(type);
  size_t largest = 0;
  for (int j = 0; j < p; ++j) largest = std::max(largest, blocks[j + 1] - blocks[j]);
  // Every rank derives the same rounds from the same blocks; empty pieces are never sent.
  const size_t step = std::max<size_t>(1, kScratchBytes / std::max(1, p - 1) / es);
  const size_t mine = blocks[me + 1] - blocks[me];
  std::vector<char> scratch(std::min(step, mine) * es * static_cast<size_t>(p));
  for (size_t first = 0; first < largest; first += step) {
    const size_t n_me = first < mine ? std::min(step, mine - first) : 0;
    Pending reqs;
    for (int j = 0; j < p; ++j) {
      if (j != me && n_me > 0) recv_from(reqs, scratch.data() + j * n_me * es, n_me * es, j, tag);
    }
    for (int j = 0; j < p; ++j) {
      const size_t nj = blocks[j + 1] - blocks[j];
      if (j == me || first >= nj) continue;
      send_to(reqs, src + (blocks[j] + first) * es, std::min(step, nj - first) * es, j, tag);
    }
    if (n_me > 0) {
      std::memcpy(scratch.data() + me * n_me * es, src + (blocks[me] + first) * es, n_me * es);
    }
    finish(reqs);
    if (n_me == 0) continue;
    char* acc = out + first * es;
    std::memcpy(acc, scratch.data(), n_me * es);
    for (int j = 1; j < p; ++j) fold(acc, scratch.data() + j * n_me * es, n_me, type, op);
  }
}

void P2pExactComm::allgather_blocks(char* buf, const std::vector<size_t>& offsets, int tag) const {
  const int p = size(), me = rank();
  Pending reqs;
  for (int j = 0; j < p; ++j) {
    const size_t n = offsets[j + 1] - offsets[j];
    if (j != me && n > 0) recv_from(reqs, buf + offsets[j], n, j, tag);
  }
  const size_t mine = offsets[me + 1] - offsets[me];
  for (int j = 0; j < p && mine > 0; ++j) {
    if (j != me) send_to(reqs, buf + offsets[me], mine, j, tag);
  }
  finish(reqs);
}

void P2pExactComm::allreduce(const void* send, void* recv, size_t count, ElemType type,
                             ReduceKind op) const {
  fold(nullptr, nullptr, 0, type, op);  // an op the type has not throws here, on every rank
  if (count == 0) return;
  const size_t es = elem_size(type), bytes = count * es;
  const int p = size(), tag = exact_tag();
  auto* out = static_cast<char*>(recv);
  // In place: reduce from a copy (the result overwrites blocks other ranks still need).
  std::vector<char> copy;
  const char* src = static_cast<const char*>(send);
  if (send == kInPlace || send == recv) {
    copy.assign(out, out + bytes);
    src = copy.data();
  }
  if (p == 1) return copy_bytes(out, src, bytes);
  if (count < static_cast<size_t>(p) || bytes <= kSmallBytes) {
    return allreduce_small(src, out, count, type, op, tag);
  }
  const std::vector<size_t> blocks = balanced_blocks(count, p);
  reduce_scatter_blocks(src, out + blocks[rank()] * es, blocks, type, op, tag);
  allgather_blocks(out, scaled(blocks, es), tag);
}

void P2pExactComm::reduce(const void* send, void* recv, size_t count, ElemType type,
                          ReduceKind op, int root) const {
  check_root(root, size(), "reduce");
  fold(nullptr, nullptr, 0, type, op);
  if (count == 0) return;
  const int p = size(), me = rank(), tag = exact_tag();
  const size_t es = elem_size(type), bytes = count * es;
  const bool is_root = me == root;
  std::vector<char> copy;
  const char* src = static_cast<const char*>(send == kInPlace ? recv : send);
  if (is_root && src == recv) {
    copy.assign(static_cast<char*>(recv), static_cast<char*>(recv) + bytes);
    src = copy.data();
  }
  if (p == 1) return copy_bytes(recv, src, bytes);
  const std::vector<size_t> blocks = balanced_blocks(count, p);
  const size_t mine = blocks[me + 1] - blocks[me];
  std::vector<char> block(is_root ? 0 : mine * es);
  char* out = is_root ? static_cast<char*>(recv) + blocks[me] * es : block.data();
  reduce_scatter_blocks(src, out, blocks, type, op, tag);
  if (is_root) {
    Pending reqs;
    for (int j = 0; j < p; ++j) {
      const size_t nj = blocks[j + 1] - blocks[j];
      if (j != me && nj > 0) {
        recv_from(reqs, static_cast<char*>(recv) + blocks[j] * es, nj * es, j, tag);
      }
    }
    finish(reqs);
  } else if (mine > 0) {
    Pending one;
    send_to(one, out, mine * es, root, tag);
    finish(one);
  }
}

void P2pExactComm::bcast_tree(char* buf, size_t bytes, int root, int tag) const {
  const int p = size(), vr = (rank() - root + p) % p;
  int mask = 1;
  for (; mask < p; mask <<= 1) {
    if (vr & mask) {
      Pending one;
      recv_from(one, buf, bytes, (vr - mask + root) % p, tag);
      finish(one);
      break;
    }
  }
  Pending reqs;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < p) send_to(reqs, buf, bytes, (vr + mask + root) % p, tag);
  }
  finish(reqs);
}

void P2pExactComm::bcast_chain(char* buf, size_t bytes, int root, int tag) const {
  const int p = size(), vr = (rank() - root + p) % p;
  const int prev = (rank() - 1 + p) % p, next = (rank() + 1) % p;
  const size_t pieces = (bytes + kChainPiece - 1) / kChainPiece;
  auto piece = [&](size_t i) { return std::min(kChainPiece, bytes - i * kChainPiece); };
  Pending in, out;
  if (vr > 0) {
    for (size_t i = 0; i < pieces; ++i) recv_from(in, buf + i * kChainPiece, piece(i), prev, tag);
  }
  for (size_t i = 0; i < pieces; ++i) {
    if (vr > 0) finish(in, i);
    if (vr < p - 1) send_to(out, buf + i * kChainPiece, piece(i), next, tag);
  }
  finish(out);
}

void P2pExactComm::bcast(void* buf, size_t count, ElemType type, int root) const {
  check_root(root, size(), "bcast");
  const int tag = exact_tag();
  const size_t bytes = count * elem_size(type);
  if (count == 0 || size() == 1) return;
  if (bytes <= kTreeBytes) return bcast_tree(static_cast<char*>(buf), bytes, root, tag);
  bcast_chain(static_cast<char*>(buf), bytes, root, tag);
}

void P2pExactComm::allgather(const void* send, void* recv, size_t count, ElemType type) const {
  allgatherv(send, count, recv, std::vector<size_t>(static_cast<size_t>(size()), count), type);
}

void P2pExactComm::allgatherv(const void* send, size_t count, void* recv,
                              const std::vector<size_t>& counts, ElemType type) const {
  const int p = size(), me = rank();
  check_allgatherv_counts(counts, count, me, p);
  const int tag = exact_tag();
  const size_t es = elem_size(type);
  std::vector<size_t> offsets(static_cast<size_t>(p) + 1, 0);
  for (int j = 0; j < p; ++j) offsets[j + 1] = offsets[j] + counts[j] * es;
  auto* out = static_cast<char*>(recv);
  if (send != kInPlace) copy_bytes(out + offsets[me], send, count * es);
  allgather_blocks(out, offsets, tag);
}

void P2pExactComm::gather(const void* send, void* recv, size_t count, ElemType type,
                          int root) const {
  rooted_blocks("gather", true, send, recv, count, type, root);
}

void P2pExactComm::scatter(const void* send, void* recv, size_t count, ElemType type,
                           int root) const {
  rooted_blocks("scatter", false, send, recv, count, type, root);
}

void P2pExactComm::rooted_blocks(const char* what, bool to_root, const void* send, void* recv,
                                 size_t count, ElemType type, int root) const {
  check_root(root, size(), what);
  const int p = size(), me = rank(), tag = exact_tag();
  const size_t bytes = count * elem_size(type);
  if (bytes == 0) return;
  Pending reqs;
  if (me != root) {
    if (to_root) {
      send_to(reqs, send == kInPlace ? recv : send, bytes, root, tag);
    } else {
      recv_from(reqs, recv, bytes, root, tag);
    }
    finish(reqs);
    return;
  }
  // The root exchanges block j of its p blocks (gather's recv, scatter's send) with rank j and
  // copies its own block unless in place.
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    if (to_root) {
      recv_from(reqs, static_cast<char*>(recv) + j * bytes, bytes, j, tag);
    } else {
      send_to(reqs, static_cast<const char*>(send) + j * bytes, bytes, j, tag);
    }
  }
  if (to_root && send != kInPlace) copy_bytes(static_cast<char*>(recv) + me * bytes, send, bytes);
  if (!to_root && recv != kInPlace) {
    copy_bytes(recv, static_cast<const char*>(send) + me * bytes, bytes);
  }
  finish(reqs);
}

void P2pExactComm::reduce_scatter_block(const void* send, void* recv, size_t count, ElemType type,
                                        ReduceKind op) const {
  fold(nullptr, nullptr, 0, type, op);
  const int p = size(), tag = exact_tag();
  const size_t es = elem_size(type);
  if (count == 0) return;
  std::vector<char> copy;
  const char* src = static_cast<const char*>(send);
  if (send == kInPlace || send == recv) {
    const auto* r = static_cast<const char*>(recv);
    copy.assign(r, r + count * es * static_cast<size_t>(p));
    src = copy.data();
  }
  std::vector<size_t> blocks(static_cast<size_t>(p) + 1);
  for (int j = 0; j <= p; ++j) blocks[j] = count * static_cast<size_t>(j);
  reduce_scatter_blocks(src, static_cast<char*>(recv), blocks, type, op, tag);
}

void P2pExactComm::alltoallv(const void* send, const std::vector<size_t>& send_counts,
                             const std::vector<size_t>& send_displs, void* recv,
                             const std::vector<size_t>& recv_counts,
                             const std::vector<size_t>& recv_displs, ElemType type) const {
  const int p = size(), me = rank();
  const size_t np = static_cast<size_t>(p);
  if (send_counts.size() != np || send_displs.size() != np || recv_counts.size() != np ||
      recv_displs.size() != np) {
    throw std::invalid_argument("zccl: alltoallv: counts and displacements need " +
                                std::to_string(p) + " entries each");
  }
  if (send_counts[me] != recv_counts[me]) {
    throw std::invalid_argument("zccl: alltoallv: this rank sends itself " +
                                std::to_string(send_counts[me]) + " elements but expects " +
                                std::to_string(recv_counts[me]));
  }
  const int tag = exact_tag();
  const size_t es = elem_size(type);
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  Pending reqs;
  for (int j = 0; j < p; ++j) {
    if (j != me && recv_counts[j] > 0) {
      recv_from(reqs, out + recv_displs[j] * es, recv_counts[j] * es, j, tag);
    }
  }
  for (int j = 0; j < p; ++j) {
    if (j != me && send_counts[j] > 0) {
      send_to(reqs, in + send_displs[j] * es, send_counts[j] * es, j, tag);
    }
  }
  copy_bytes(out + recv_displs[me] * es, in + send_displs[me] * es, send_counts[me] * es);
  finish(reqs);
}

}  // namespace zccl::transport
