// TcpComm (tcp_comm.h): matching, progress and cancellation over the mesh's sockets.
#include "tcp_comm.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <stdexcept>

namespace zccl::transport::tcp {
namespace {

// A message's head on the wire (host byte order: the hello's magic refuses a peer of the other
// byte order).
struct Head {
  uint32_t comm = 0;
  int32_t tag = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(Head) == 16, "the head is 16 bytes on the wire");

// No message is this large: a head that says so is a corrupt stream, not an allocation to try.
constexpr uint64_t kMaxMessage = uint64_t{1} << 40;
constexpr int kMaxIov = 64;

struct Buffered;

// One send or receive.
struct Op {
  bool is_send = false;
  uint32_t comm = 0;
  int peer = -1;  // receives: -1 = any source
  int tag = 0;
  // send
  Head head;
  size_t head_sent = 0;
  const char* payload = nullptr;
  size_t payload_len = 0, payload_sent = 0;
  std::vector<char> owned;  // the unsent rest of a cancelled send
  // receive
  char* buf = nullptr;
  size_t cap = 0, received = 0;
  int source = -1;
  std::shared_ptr<Buffered> claimed;  // an early message still arriving
  // outcome
  std::atomic<bool> done{false};
  std::string error;
  bool truncated = false;
};

// A message that arrived before its receive was posted.
struct Buffered {
  uint32_t comm = 0;
  int tag = 0;
  int peer = 0;
  std::vector<char> data;
  bool complete = false;
  std::shared_ptr<Op> claimer;  // the receive that matched it while it was still arriving
};

// The message being read from one peer.
struct Inbound {
  Head head;
  size_t head_got = 0;
  bool in_body = false;
  size_t body_got = 0;
  char* dest = nullptr;  // nullptr: the bytes are dropped (truncated or cancelled receive)
  std::shared_ptr<Op> recv;
  std::shared_ptr<Buffered> buffered;
};

struct Peer {
  Fd fd;
  std::deque<std::shared_ptr<Op>> sends;
  Inbound in;
  std::string broken;
};

bool matches(const Op& r, uint32_t comm, int tag, int peer) {
  return r.comm == comm && r.tag == tag && (r.peer == peer || r.peer == -1);
}

std::string truncation(size_t bytes, int peer, int tag, size_t cap) {
  return "zccl: truncated receive: a message of " + std::to_string(bytes) + " bytes from rank " +
         std::to_string(peer) + " (tag " + std::to_string(tag) +
         ") is larger than the receive's capacity of " + std::to_string(cap) + " bytes";
}

}  // namespace

// The sockets of one group and everything pending on them; every member is guarded by mu.
class Mesh {
 public:
  Mesh(int rank, int size, std::vector<Fd> fds) : rank(rank), size(size), peers(fds.size()) {
    for (size_t r = 0; r < fds.size(); ++r) peers[r].fd = std::move(fds[r]);
  }

  std::mutex mu;
  const int rank, size;
  uint32_t next_id = 1;

  void progress();
  // Blocks (without the lock) until a socket has bytes to read or room for pending bytes.
  void block(std::chrono::microseconds max);
  void send(const std::shared_ptr<Op>& op);
  void receive(const std::shared_ptr<Op>& op);
  void cancel(Op& op);

 private:
  void flush(int peer);
  void read(int peer);
  void start_body(int peer);
  void finish_body(int peer);
  // Completes receive r with a message of `bytes` from `peer`: copies `data` into its buffer
  // (nullptr: the bytes are already there), or fails it as truncated when they do not fit.
  void complete(Op& r, const char* data, size_t bytes, int peer, int tag);
  // The sockets to poll (POLLIN, and POLLOUT where bytes wait to leave) and their ranks.
  void watch(std::vector<pollfd>& fds, std::vector<int>& ranks) const;
  void fail_peer(int peer, const std::string& why);
  // Matches an arrived head from `peer` to the earliest posted receive, or buffers it.
  void match(Inbound& in, int peer);

  std::vector<Peer> peers;
  std::list<std::shared_ptr<Op>> posted_;     // unmatched receives, in posting order
  std::list<std::shared_ptr<Buffered>> early_;  // unmatched arrivals, in arrival order
  std::vector<pollfd> pfds_;
  std::vector<int> pfd_peer_;
  std::vector<char> drop_ = std::vector<char>(size_t{64} << 10);
};

void Mesh::fail_peer(int peer, const std::string& why) {
  Peer& p = peers[peer];
  if (!p.broken.empty()) return;
  p.broken = "zccl: the connection to rank " + std::to_string(peer) + " failed (" + why + ")";
  for (auto& s : p.sends) {
    s->error = p.broken;
    s->done = true;
  }
  p.sends.clear();
  if (p.in.recv) {
    p.in.recv->error = p.broken;
    p.in.recv->done = true;
  }
  if (p.in.buffered && p.in.buffered->claimer) {
    p.in.buffered->claimer->error = p.broken;
    p.in.buffered->claimer->done = true;
  }
  p.in = Inbound();
  for (auto it = posted_.begin(); it != posted_.end();) {
    if ((*it)->peer == peer) {
      (*it)->error = p.broken;
      (*it)->done = true;
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
}

void Mesh::complete(Op& r, const char* data, size_t bytes, int peer, int tag) {
  r.source = peer;
  if (bytes > r.cap) {
    r.error = truncation(bytes, peer, tag, r.cap);
    r.truncated = true;
  } else {
    if (data != nullptr && bytes > 0) std::memcpy(r.buf, data, bytes);
    r.received = bytes;
  }
  r.claimed.reset();
  r.done = true;
}

void Mesh::match(Inbound& in, int peer) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!matches(**it, in.head.comm, in.head.tag, peer)) continue;
    in.recv = *it;
    posted_.erase(it);
    in.recv->source = peer;
    in.dest = in.head.bytes <= in.recv->cap ? in.recv->buf : nullptr;
    return;
  }
  auto b = std::make_shared<Buffered>();
  b->comm = in.head.comm;
  b->tag = in.head.tag;
  b->peer = peer;
  b->data.resize(in.head.bytes);
  in.buffered = b;
  in.dest = b->data.data();
  early_.push_back(std::move(b));
}

void Mesh::start_body(int peer) {
  Inbound& in = peers[peer].in;
  if (in.head.bytes > kMaxMessage) {
    return fail_peer(peer, "corrupt stream: a head announced " + std::to_string(in.head.bytes) + " bytes");
  }
  in.in_body = true;
  in.body_got = 0;
  match(in, peer);
  if (in.head.bytes == 0) finish_body(peer);
}

void Mesh::finish_body(int peer) {
  Inbound& in = peers[peer].in;
  if (in.recv) {
    complete(*in.recv, nullptr, in.head.bytes, peer, in.head.tag);
  } else if (in.buffered) {
    Buffered& b = *in.buffered;
    b.complete = true;
    if (b.claimer) complete(*b.claimer, b.data.data(), b.data.size(), b.peer, b.tag);
  }
  in = Inbound();
}

void Mesh::read(int peer) {
  Peer& p = peers[peer];
  while (p.broken.empty()) {
    Inbound& in = p.in;
    char* at;
    size_t want;
    if (!in.in_body) {
      at = reinterpret_cast<char*>(&in.head) + in.head_got;
      want = sizeof(Head) - in.head_got;
    } else if (in.dest != nullptr) {
      at = in.dest + in.body_got;
      want = in.head.bytes - in.body_got;
    } else {
      at = drop_.data();
      want = std::min<uint64_t>(drop_.size(), in.head.bytes - in.body_got);
    }
    const ssize_t k = ::recv(p.fd.get(), at, want, MSG_DONTWAIT);
    if (k == 0) return fail_peer(peer, "rank " + std::to_string(peer) + " closed it");
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return fail_peer(peer, std::strerror(errno));
    }
    if (!in.in_body) {
      in.head_got += static_cast<size_t>(k);
      if (in.head_got == sizeof(Head)) start_body(peer);
    } else {
      in.body_got += static_cast<size_t>(k);
      if (in.body_got == in.head.bytes) finish_body(peer);
    }
  }
}

void Mesh::flush(int peer) {
  Peer& p = peers[peer];
  while (!p.sends.empty() && p.broken.empty()) {
    // Heads and payloads of as many queued messages as fit one sendmsg.
    iovec iov[kMaxIov];
    int n = 0;
    size_t offered = 0;
    for (auto it = p.sends.begin(); it != p.sends.end() && n + 2 <= kMaxIov; ++it) {
      Op& s = **it;
      if (s.head_sent < sizeof(Head)) {
        iov[n++] = {reinterpret_cast<char*>(&s.head) + s.head_sent, sizeof(Head) - s.head_sent};
        offered += iov[n - 1].iov_len;
      }
      if (s.payload_sent < s.payload_len) {
        iov[n++] = {const_cast<char*>(s.payload) + s.payload_sent, s.payload_len - s.payload_sent};
        offered += iov[n - 1].iov_len;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t k = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return fail_peer(peer, std::strerror(errno));
    }
    size_t left = static_cast<size_t>(k);
    while (!p.sends.empty()) {
      Op& s = *p.sends.front();
      const size_t h = std::min(left, sizeof(Head) - s.head_sent);
      s.head_sent += h;
      left -= h;
      const size_t b = std::min(left, s.payload_len - s.payload_sent);
      s.payload_sent += b;
      left -= b;
      if (s.head_sent < sizeof(Head) || s.payload_sent < s.payload_len) break;
      s.done = true;
      p.sends.pop_front();
    }
    if (static_cast<size_t>(k) < offered) return;  // the socket is full: more on the next poll
  }
}

void Mesh::watch(std::vector<pollfd>& fds, std::vector<int>& ranks) const {
  fds.clear();
  ranks.clear();
  for (int r = 0; r < size; ++r) {
    if (r == rank || !peers[r].broken.empty()) continue;
    const short events = static_cast<short>(POLLIN | (peers[r].sends.empty() ? 0 : POLLOUT));
    fds.push_back({peers[r].fd.get(), events, 0});
    ranks.push_back(r);
  }
}

void Mesh::progress() {
  watch(pfds_, pfd_peer_);
  if (pfds_.empty()) return;
  const int rc = ::poll(pfds_.data(), pfds_.size(), 0);
  if (rc <= 0) return;
  for (size_t i = 0; i < pfds_.size(); ++i) {
    const short ev = pfds_[i].revents;
    if (ev == 0) continue;
    if (ev & POLLOUT) flush(pfd_peer_[i]);
    if (ev & (POLLIN | POLLHUP | POLLERR)) read(pfd_peer_[i]);
  }
}

void Mesh::block(std::chrono::microseconds max) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  {
    std::lock_guard<std::mutex> lock(mu);
    watch(fds, ranks);
  }
  // The fds stay open while the mesh exists (a broken peer's too), so polling them unlocked is
  // safe; another thread may take the bytes first, which only makes this a spurious wake-up.
  const timespec ts{static_cast<time_t>(max.count() / 1000000),
                    static_cast<long>(max.count() % 1000000) * 1000};
  ::ppoll(fds.data(), fds.size(), &ts, nullptr);
}

void Mesh::send(const std::shared_ptr<Op>& op) {
  if (op->peer == rank) {
    // To itself: the message "arrives" at once.
    Inbound in;
    in.head = op->head;
    match(in, rank);
    if (in.recv) {
      complete(*in.recv, op->payload, op->payload_len, rank, op->tag);
    } else {
      if (op->payload_len > 0) std::memcpy(in.buffered->data.data(), op->payload, op->payload_len);
      in.buffered->complete = true;
    }
    op->done = true;
    return;
  }
  Peer& p = peers[op->peer];
  if (!p.broken.empty()) {
    op->error = p.broken;
    op->done = true;
    return;
  }
  p.sends.push_back(op);
  if (p.sends.size() == 1) flush(op->peer);  // eager: most messages leave right here
}

void Mesh::receive(const std::shared_ptr<Op>& op) {
  for (auto it = early_.begin(); it != early_.end(); ++it) {
    Buffered& b = **it;
    if (!matches(*op, b.comm, b.tag, b.peer)) continue;
    std::shared_ptr<Buffered> mine = *it;
    early_.erase(it);
    op->source = mine->peer;
    if (mine->complete) {
      complete(*op, mine->data.data(), mine->data.size(), mine->peer, mine->tag);
    } else {
      mine->claimer = op;
      op->claimed = mine;
    }
    return;
  }
  if (op->peer >= 0 && !peers[op->peer].broken.empty()) {
    op->error = peers[op->peer].broken;
    op->done = true;
    return;
  }
  posted_.push_back(op);
}

void Mesh::cancel(Op& op) {
  if (op.done) return;
  if (op.is_send) {
    auto& q = peers[op.peer].sends;
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->get() != &op) continue;
      if (op.head_sent == 0) {
        q.erase(it);
      } else {
        // Partly on the wire: the rest must follow (from our own copy) to keep the stream whole.
        op.owned.assign(op.payload + op.payload_sent, op.payload + op.payload_len);
        op.payload = op.owned.data();
        op.payload_len = op.owned.size();
        op.payload_sent = 0;
      }
      return;
    }
    return;
  }
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (it->get() == &op) {
      posted_.erase(it);
      return;
    }
  }
  if (op.claimed) {
    op.claimed->claimer.reset();  // the early message is consumed and dropped
    op.claimed.reset();
    return;
  }
  for (Peer& p : peers) {
    if (p.in.recv.get() == &op) {
      p.in.recv.reset();
      p.in.dest = nullptr;  // the rest of its bytes are read and dropped
    }
  }
}

namespace {

class TcpRequest final : public RequestState {
 public:
  TcpRequest(std::shared_ptr<Mesh> mesh, std::shared_ptr<Op> op)
      : mesh(std::move(mesh)), op(std::move(op)) {}
  ~TcpRequest() override {
    if (op->done) return;
    std::lock_guard<std::mutex> lock(mesh->mu);
    mesh->cancel(*op);
  }
  bool active() const override { return !op->done; }

  std::shared_ptr<Mesh> mesh;
  std::shared_ptr<Op> op;
};

}  // namespace

std::unique_ptr<TcpComm> TcpComm::connect(const Listener& listener, int rank, int size,
                                          const std::vector<std::string>& addresses,
                                          uint64_t session, std::chrono::milliseconds timeout) {
  auto mesh = std::make_shared<Mesh>(rank, size,
                                     connect_mesh(listener, rank, size, addresses, session, timeout));
  auto comm = std::make_unique<TcpComm>(std::move(mesh), 0);
  comm->set_timeout(timeout);
  return comm;
}

TcpComm::TcpComm(std::shared_ptr<Mesh> mesh, uint32_t id) : mesh_(std::move(mesh)), id_(id) {}
TcpComm::~TcpComm() = default;

int TcpComm::rank() const { return mesh_->rank; }
int TcpComm::size() const { return mesh_->size; }

std::unique_ptr<Comm> TcpComm::duplicate() const {
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(mesh_->mu);
    id = mesh_->next_id++;  // every rank duplicates in the same order: the ids agree
  }
  auto dup = std::make_unique<TcpComm>(mesh_, id);
  dup->take_waits_of(*this);
  return dup;
}

void TcpComm::idle(std::chrono::microseconds max) const { mesh_->block(max); }

std::unique_ptr<Comm> TcpComm::subgroup(const std::vector<int>&) const {
  throw TransportError("zccl: the TCP transport makes no subgroups itself (torch's new_group "
                       "creates a zccl group, and its own connections, on the subgroup's store)");
}

Request TcpComm::post_send(const void* buf, size_t bytes, int peer, int tag) const {
  auto op = std::make_shared<Op>();
  op->is_send = true;
  op->comm = id_;
  op->peer = peer;
  op->tag = tag;
  op->head.comm = id_;
  op->head.tag = tag;
  op->head.bytes = bytes;
  op->payload = static_cast<const char*>(buf);
  op->payload_len = bytes;
  {
    std::lock_guard<std::mutex> lock(mesh_->mu);
    mesh_->send(op);
  }
  return Request(std::make_unique<TcpRequest>(mesh_, std::move(op)));
}

Request TcpComm::post_recv(void* buf, size_t capacity, int peer, int tag) const {
  auto op = std::make_shared<Op>();
  op->comm = id_;
  op->peer = peer;  // kAnySource == -1
  op->tag = tag;
  op->buf = static_cast<char*>(buf);
  op->cap = capacity;
  {
    std::lock_guard<std::mutex> lock(mesh_->mu);
    mesh_->receive(op);
  }
  return Request(std::make_unique<TcpRequest>(mesh_, std::move(op)));
}

bool TcpComm::poll(Request& req) const {
  auto* st = static_cast<TcpRequest*>(req.state());
  if (st == nullptr) return true;
  Op& op = *st->op;
  std::lock_guard<std::mutex> lock(mesh_->mu);
  if (!op.done) mesh_->progress();
  if (op.source >= 0) req.source = op.source;
  if (!op.done) return false;
  if (!op.error.empty()) throw TransportError(op.error, op.truncated);
  req.received = op.received;
  return true;
}

std::string TcpComm::describe(const Request& req) const {
  const auto* st = static_cast<const TcpRequest*>(req.state());
  const std::string where = " on rank " + std::to_string(rank()) + " of a communicator of " +
                            std::to_string(size()) + " (TCP transport)";
  if (st == nullptr) return "a finished request" + where;
  const Op& op = *st->op;
  const std::string tag = " (tag " + std::to_string(op.tag) + ")";
  if (op.is_send) {
    return "isend of " + std::to_string(op.payload_len) + " bytes to rank " +
           std::to_string(op.peer) + tag + where;
  }
  const std::string from = op.peer < 0 ? "any rank" : "rank " + std::to_string(op.peer);
  return "irecv of up to " + std::to_string(op.cap) + " bytes from " + from + tag + where;
}

}  // namespace zccl::transport::tcp
