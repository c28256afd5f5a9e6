// transport::Comm over a c10d backend (Gloo); the protocol and its reasons are in c10d_comm.h.
#include "c10d_comm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace zccl::transport {

// A message's head: its length (int64), then its first bytes, up to kInlineBytes (our frames
// and small messages travel in one Gloo message); the rest, if any, follows as a second one.
constexpr size_t kLengthBytes = sizeof(int64_t);
constexpr size_t kInlineBytes = size_t{64} << 10;

struct C10dRecvState {
  int peer = -1;
  int tag = 0;
  // Posted at the largest head: Gloo accepts a smaller message than the receive.
  at::Tensor length = at::empty({static_cast<int64_t>(kLengthBytes + kInlineBytes)}, at::kByte);
  at::Tensor body;
  std::shared_ptr<WatchedWork> length_work, body_work;
  bool body_posted = false;
  std::string body_error;  // posting the body's receive failed
};

namespace {

at::Tensor bytes_at(const void* p, size_t n) {
  return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(n)}, at::kByte);
}

at::Tensor owned_bytes(size_t n) { return at::empty({static_cast<int64_t>(n)}, at::kByte); }

// One side of a byte message: its head (length and first bytes), then the rest if any. A receive's part
// lives in a C10dRecvState shared with the comm's ordering queue.
class C10dRequest final : public transport::RequestState {
 public:
  bool send = false;
  bool any_source = false;
  int peer = -1;
  int tag = 0;
  size_t bytes = 0;     // send: message length; receive: the receive's capacity
  void* out = nullptr;  // receive: where the bytes go
  at::Tensor length, body;                             // send
  std::shared_ptr<WatchedWork> length_work, body_work;  // send
  std::shared_ptr<C10dRecvState> recv;
  std::mutex* order_mutex = nullptr;  // the comm's: guards recv->body_work while queued
  bool finished = false;

  bool active() const override { return !finished; }
  ~C10dRequest() override {
    // Abandoned (an error elsewhere): wake the watchers; the works keep the buffers alive.
    if (finished) return;
    if (recv) {
      std::lock_guard<std::mutex> lock(*order_mutex);
      abort(recv->length_work);
      abort(recv->body_work);
    } else {
      abort(length_work);
      abort(body_work);
    }
  }

 private:
  static void abort(const std::shared_ptr<WatchedWork>& w) {
    if (!w || w->done.load(std::memory_order_acquire)) return;
    try {
      w->work->abort();
    } catch (...) {
      // already completing: the watcher releases it
    }
  }
};

// A work that finished; rethrows its failure as a TransportError naming `what`.
bool completed(const std::shared_ptr<WatchedWork>& w, const std::string& what) {
  if (!w->done.load(std::memory_order_acquire)) return false;
  if (w->error) {
    try {
      std::rethrow_exception(w->error);
    } catch (const std::exception& e) {
      throw TransportError("zccl: " + what + " failed in the Gloo transport: " + e.what());
    }
  }
  return true;
}

at::ScalarType scalar_type(ElemType t) {
  switch (t) {
    case ElemType::UInt8: return at::kByte;
    case ElemType::Int8: return at::kChar;
    case ElemType::Int16: return at::kShort;
    case ElemType::Int32: return at::kInt;
    case ElemType::Int64: return at::kLong;
    case ElemType::UInt16: return at::kUInt16;
    case ElemType::UInt64: return at::kLong;  // same bits; MIN/MAX flip the sign bit
    case ElemType::Float32: return at::kFloat;
    case ElemType::Float64: return at::kDouble;
    case ElemType::Bool: return at::kByte;  // 0/1 bytes: AND/OR/XOR are MIN/MAX/BXOR
  }
  throw std::invalid_argument("zccl: unknown transport element type");
}

c10d::ReduceOp c10d_op(ReduceKind k, ElemType t) {
  const bool boolean = t == ElemType::Bool;
  switch (k) {
    case ReduceKind::Sum: return c10d::ReduceOp::SUM;
    case ReduceKind::Prod: return c10d::ReduceOp::PRODUCT;
    case ReduceKind::Min: return c10d::ReduceOp::MIN;
    case ReduceKind::Max: return c10d::ReduceOp::MAX;
    case ReduceKind::BAnd: return c10d::ReduceOp::BAND;
    case ReduceKind::BOr: return c10d::ReduceOp::BOR;
    case ReduceKind::BXor: return c10d::ReduceOp::BXOR;
    case ReduceKind::LAnd:
      if (boolean) return c10d::ReduceOp::MIN;
      break;
    case ReduceKind::LOr:
      if (boolean) return c10d::ReduceOp::MAX;
      break;
    case ReduceKind::LXor:
      if (boolean) return c10d::ReduceOp::BXOR;
      break;
  }
  throw TransportError("zccl: the Gloo transport reduces logical operations on bool data only");
}

// The tensor Gloo reduces for `count` values of `type` at `p`: the values themselves where Gloo
// reduces that type, else a widened copy (16-bit integers as int32: sums and products wrap to the
// same 16 bits). uint64 travels as int64 (same bits for SUM/PROD/bitwise); for MIN/MAX its sign
// bit is flipped, which maps unsigned order onto signed order. to_caller() undoes both.
struct Reducible {
  at::Tensor view;  // the caller's values, typed
  at::Tensor work;  // what Gloo reduces
  bool flip = false;

  Reducible(void* p, size_t count, ElemType type, ReduceKind op) {
    view = at::from_blob(p, {static_cast<int64_t>(count)}, scalar_type(type));
    const bool narrow = type == ElemType::Int16 || type == ElemType::UInt16;
    work = narrow ? view.to(at::kInt) : view;
    flip = type == ElemType::UInt64 && (op == ReduceKind::Min || op == ReduceKind::Max);
    if (flip) work.bitwise_xor_(std::numeric_limits<int64_t>::min());
  }
  void to_caller() {
    if (flip) work.bitwise_xor_(std::numeric_limits<int64_t>::min());
    if (!work.is_same(view)) view.copy_(work);
  }
};

}  // namespace

C10dComm::C10dComm(C10dFactory factory)
    : factory_(std::move(factory)), pg_(factory_()), watcher_(std::make_unique<WorkWatcher>()) {
  rank_ = pg_->getRank();
  size_ = pg_->getSize();
}

C10dComm::~C10dComm() { watcher_.reset(); }

std::unique_ptr<transport::Comm> C10dComm::duplicate() const {
  auto dup = std::make_unique<C10dComm>(factory_);
  dup->set_timeout(timeout());
  return dup;
}

std::unique_ptr<transport::Comm> C10dComm::subgroup(const std::vector<int>&) const {
  throw TransportError("zccl: the Gloo transport makes no subgroups itself (torch's new_group "
                       "creates a zccl group on the subgroup's store)");
}

void C10dComm::finish(const c10::intrusive_ptr<c10d::Work>& work, const char* what) const {
  try {
    work->wait(timeout());
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (msg.find("imed out") != std::string::npos || msg.find("timeout") != std::string::npos) {
      throw transport::TimeoutError("zccl: Timed out after " + std::to_string(timeout().count()) +
                                    " ms in the Gloo transport's " + what + ": " + msg);
    }
    throw TransportError(std::string("zccl: ") + what + " failed in the Gloo transport: " + msg);
  }
}

// ---- byte messages ----

transport::Request C10dComm::post_send(const void* buf, size_t bytes, int peer, int tag) const {
  auto r = std::make_unique<C10dRequest>();
  r->send = true;
  r->peer = peer;
  r->tag = tag;
  r->bytes = bytes;
  const size_t inline_bytes = std::min(bytes, kInlineBytes);
  r->length = owned_bytes(kLengthBytes + inline_bytes);
  const int64_t n = static_cast<int64_t>(bytes);
  std::memcpy(r->length.data_ptr(), &n, kLengthBytes);
  if (inline_bytes > 0) std::memcpy(r->length.data_ptr<uint8_t>() + kLengthBytes, buf, inline_bytes);
  std::vector<at::Tensor> length{r->length};
  r->length_work = watcher_->watch(pg_->send(length, peer, 2 * tag));
  if (bytes > inline_bytes) {
    r->body = owned_bytes(bytes - inline_bytes);
    std::memcpy(r->body.data_ptr(), static_cast<const uint8_t*>(buf) + inline_bytes,
                bytes - inline_bytes);
    std::vector<at::Tensor> body{r->body};
    r->body_work = watcher_->watch(pg_->send(body, peer, 2 * tag + 1));
  }
  return transport::Request(std::move(r));
}

transport::Request C10dComm::post_recv(void* buf, size_t capacity, int peer, int tag) const {
  auto r = std::make_unique<C10dRequest>();
  r->any_source = peer == kAnySource;
  r->peer = peer;
  r->tag = tag;
  r->bytes = capacity;
  r->out = buf;
  r->order_mutex = &order_mutex_;
  r->recv = std::make_shared<C10dRecvState>();
  r->recv->peer = peer;
  r->recv->tag = tag;
  std::vector<at::Tensor> length{r->recv->length};
  // The body's receive is posted by the watcher thread as soon as the length arrived (the
  // sender's bytes wait for it), not when the owner next polls: on a chain of relays that poll
  // latency came once per message and hop.
  std::weak_ptr<C10dRecvState> state = r->recv;
  std::function<void()> on_length = [this, state, any = r->any_source, peer, tag] {
    std::lock_guard<std::mutex> lock(order_mutex_);
    if (any) {
      const auto s = state.lock();
      if (s && !s->body_posted && !s->length_work->error) {
        s->peer = s->length_work->work->sourceRank();
        post_body_noexcept(*s);
      }
    } else {
      post_bodies_in_order(peer, tag);
    }
  };
  std::lock_guard<std::mutex> lock(order_mutex_);
  if (!r->any_source) awaiting_body_[{peer, tag}].push_back(r->recv);
  r->recv->length_work = watcher_->watch(r->any_source ? pg_->recvAnysource(length, 2 * tag)
                                                       : pg_->recv(length, peer, 2 * tag),
                                         std::move(on_length));
  return transport::Request(std::move(r));
}

void C10dComm::post_body(C10dRecvState& s) const {
  s.body_posted = true;
  int64_t n = 0;
  std::memcpy(&n, s.length.data_ptr(), kLengthBytes);
  if (n <= static_cast<int64_t>(kInlineBytes)) return;  // all in the head, or malformed
  // Exactly sized (Gloo aborts on a larger message); a message over the capacity is received
  // all the same, then fails the receive.
  s.body = owned_bytes(static_cast<size_t>(n) - kInlineBytes);
  std::vector<at::Tensor> body{s.body};
  s.body_work = watcher_->watch(pg_->recv(body, s.peer, 2 * s.tag + 1));
}

void C10dComm::post_body_noexcept(C10dRecvState& s) const {
  try {
    post_body(s);
  } catch (const std::exception& e) {
    s.body_error = std::string("posting the receive of the message's bytes failed: ") + e.what();
  }
}

void C10dComm::post_bodies_in_order(int peer, int tag) const {
  const auto it = awaiting_body_.find({peer, tag});
  if (it == awaiting_body_.end()) return;
  auto& queue = it->second;
  while (!queue.empty()) {
    C10dRecvState& s = *queue.front();
    // Not yet watched (the watch is being set up under this lock), or its length not arrived.
    if (!s.length_work || !s.length_work->done.load(std::memory_order_acquire)) break;
    if (s.length_work->error) {
      s.body_posted = true;  // no length, no body (the receive reports the failure)
    } else {
      post_body_noexcept(s);
    }
    queue.pop_front();
  }
  if (queue.empty()) awaiting_body_.erase(it);
}

bool C10dComm::poll(transport::Request& req) const {
  auto* r = static_cast<C10dRequest*>(req.state());
  if (r == nullptr || r->finished) return true;
  if (r->send) {
    if (!completed(r->length_work, describe(req))) return false;
    if (r->body_work && !completed(r->body_work, describe(req))) return false;
    r->finished = true;
    return true;
  }
  C10dRecvState& s = *r->recv;
  if (!completed(s.length_work, describe(req))) return false;
  {
    std::lock_guard<std::mutex> lock(order_mutex_);
    if (!s.body_posted) {
      if (r->any_source) {
        s.peer = s.length_work->work->sourceRank();
        post_body_noexcept(s);
      } else {
        post_bodies_in_order(s.peer, s.tag);
        if (!s.body_posted) return false;  // an earlier receive's length has not arrived
      }
    }
  }
  if (!s.body_error.empty()) {
    r->finished = true;
    throw TransportError("zccl: " + describe(req) + ": " + s.body_error);
  }
  r->peer = s.peer;
  int64_t length = 0;
  std::memcpy(&length, s.length.data_ptr(), kLengthBytes);
  if (length < 0) {
    r->finished = true;
    throw TransportError("zccl: malformed message length from rank " + std::to_string(s.peer));
  }
  if (s.body_work && !completed(s.body_work, describe(req))) return false;
  r->finished = true;
  req.source = s.peer;
  const size_t n = static_cast<size_t>(length);
  if (n > r->bytes) {
    throw TransportError("zccl: message truncated: rank " + std::to_string(s.peer) + " sent " +
                             std::to_string(n) + " bytes to a receive of " +
                             std::to_string(r->bytes) + " (tag " + std::to_string(r->tag) + ")",
                         /*truncated=*/true);
  }
  const size_t inline_bytes = std::min(n, kInlineBytes);
  if (inline_bytes > 0) {
    std::memcpy(r->out, s.length.data_ptr<uint8_t>() + kLengthBytes, inline_bytes);
  }
  if (n > inline_bytes) {
    std::memcpy(static_cast<uint8_t*>(r->out) + inline_bytes, s.body.data_ptr(), n - inline_bytes);
  }
  req.received = n;
  return true;
}

std::string C10dComm::describe(const transport::Request& req) const {
  const auto* r = static_cast<const C10dRequest*>(req.state());
  const std::string group = " on rank " + std::to_string(rank_) + " of a group of " +
                            std::to_string(size_) + " (Gloo transport)";
  if (r == nullptr) return "a finished request" + group;
  const std::string peer = r->peer < 0 ? "any rank" : "rank " + std::to_string(r->peer);
  return (r->send ? "isend of " + std::to_string(r->bytes) + " bytes to "
                  : "irecv of up to " + std::to_string(r->bytes) + " bytes from ") +
         peer + " (tag " + std::to_string(r->tag) + ")" + group;
}

// ---- exact collectives ----

void C10dComm::barrier() const { finish(pg_->barrier(), "barrier"); }

void C10dComm::allreduce(const void* send, void* recv, size_t count, ElemType type,
                         ReduceKind op) const {
  if (send != transport::kInPlace && send != recv) {
    std::memcpy(recv, send, count * transport::elem_size(type));
  }
  Reducible r(recv, count, type, op);
  std::vector<at::Tensor> t{r.work};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d_op(op, type);
  finish(pg_->allreduce(t, opts), "allreduce");
  r.to_caller();
}

void C10dComm::reduce(const void* send, void* recv, size_t count, ElemType type, ReduceKind op,
                      int root) const {
  const size_t bytes = count * transport::elem_size(type);
  // Gloo reduces in place on every rank: off the root, into a copy of the input.
  at::Tensor scratch;
  void* data = recv;
  if (rank_ != root) {
    scratch = owned_bytes(bytes);
    data = scratch.data_ptr();
    std::memcpy(data, send, bytes);
  } else if (send != transport::kInPlace && send != recv) {
    std::memcpy(recv, send, bytes);
  }
  Reducible r(data, count, type, op);
  std::vector<at::Tensor> t{r.work};
  c10d::ReduceOptions opts;
  opts.reduceOp = c10d_op(op, type);
  opts.rootRank = root;
  finish(pg_->reduce(t, opts), "reduce");
  if (rank_ == root) r.to_caller();
}

void C10dComm::bcast(void* buf, size_t count, ElemType type, int root) const {
  std::vector<at::Tensor> t{bytes_at(buf, count * transport::elem_size(type))};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  finish(pg_->broadcast(t, opts), "bcast");
}

void C10dComm::allgather(const void* send, void* recv, size_t count, ElemType type) const {
  const size_t bytes = count * transport::elem_size(type);
  at::Tensor in = bytes_at(send, bytes);
  at::Tensor out = bytes_at(recv, bytes * static_cast<size_t>(size_));
  finish(pg_->_allgather_base(out, in), "allgather");
}

void C10dComm::allgatherv(const void* send, size_t count, void* recv,
                          const std::vector<size_t>& counts, ElemType type) const {
  // Gloo gathers equal blocks: pad every block to the largest, then pack.
  const size_t es = transport::elem_size(type);
  const size_t most = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  at::Tensor in = owned_bytes(most * es);
  if (count > 0) std::memcpy(in.data_ptr(), send, count * es);
  at::Tensor out = owned_bytes(most * es * static_cast<size_t>(size_));
  finish(pg_->_allgather_base(out, in), "allgatherv");
  auto* dst = static_cast<uint8_t*>(recv);
  const auto* src = out.data_ptr<uint8_t>();
  for (int q = 0; q < size_; ++q) {
    std::memcpy(dst, src + static_cast<size_t>(q) * most * es, counts[q] * es);
    dst += counts[q] * es;
  }
}

namespace {

// The root's side of gather and scatter: its `size` blocks of `bytes` at `p`, as one list of
// byte tensors (none elsewhere).
std::vector<std::vector<at::Tensor>> root_blocks(const void* p, size_t bytes, int size,
                                                 bool at_root) {
  std::vector<std::vector<at::Tensor>> lists;
  if (!at_root) return lists;
  at::Tensor all = bytes_at(p, bytes * static_cast<size_t>(size));
  // chunk() of an empty tensor gives one chunk, not `size`
  lists.emplace_back(bytes == 0 ? std::vector<at::Tensor>(static_cast<size_t>(size), all)
                                : all.chunk(size));
  return lists;
}

}  // namespace

void C10dComm::gather(const void* send, void* recv, size_t count, ElemType type,
                      int root) const {
  const size_t bytes = count * transport::elem_size(type);
  std::vector<at::Tensor> in{bytes_at(send, bytes)};
  auto outs = root_blocks(recv, bytes, size_, rank_ == root);
  c10d::GatherOptions opts;
  opts.rootRank = root;
  finish(pg_->gather(outs, in, opts), "gather");
}

void C10dComm::scatter(const void* send, void* recv, size_t count, ElemType type,
                       int root) const {
  const size_t bytes = count * transport::elem_size(type);
  std::vector<at::Tensor> out{bytes_at(recv, bytes)};
  auto ins = root_blocks(send, bytes, size_, rank_ == root);
  c10d::ScatterOptions opts;
  opts.rootRank = root;
  finish(pg_->scatter(out, ins, opts), "scatter");
}

void C10dComm::reduce_scatter_block(const void* send, void* recv, size_t count, ElemType type,
                                    ReduceKind op) const {
  const size_t es = transport::elem_size(type);
  // A copy of the input: Reducible may flip bits in place, and the input is the caller's.
  at::Tensor input = owned_bytes(count * es * static_cast<size_t>(size_));
  std::memcpy(input.data_ptr(), send, input.numel());
  Reducible in(input.data_ptr(), count * static_cast<size_t>(size_), type, op);
  Reducible out(recv, count, type, op);
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d_op(op, type);
  finish(pg_->_reduce_scatter_base(out.work, in.work, opts), "reduce_scatter_block");
  out.to_caller();
}

void C10dComm::alltoallv(const void* send, const std::vector<size_t>& send_counts,
                         const std::vector<size_t>& send_displs, void* recv,
                         const std::vector<size_t>& recv_counts,
                         const std::vector<size_t>& recv_displs, ElemType type) const {
  // Gloo takes blocks packed in rank order, sized in bytes.
  const size_t es = transport::elem_size(type);
  const size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
  const size_t got = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
  at::Tensor in = owned_bytes(sent * es), out = owned_bytes(got * es);
  std::vector<int64_t> in_splits, out_splits;
  size_t at_in = 0;
  for (int q = 0; q < size_; ++q) {
    std::memcpy(in.data_ptr<uint8_t>() + at_in,
                static_cast<const uint8_t*>(send) + send_displs[q] * es, send_counts[q] * es);
    at_in += send_counts[q] * es;
    in_splits.push_back(static_cast<int64_t>(send_counts[q] * es));
    out_splits.push_back(static_cast<int64_t>(recv_counts[q] * es));
  }
  c10d::AllToAllOptions opts;
  finish(pg_->alltoall_base(out, in, out_splits, in_splits, opts), "alltoallv");
  size_t at_out = 0;
  for (int q = 0; q < size_; ++q) {
    std::memcpy(static_cast<uint8_t*>(recv) + recv_displs[q] * es,
                out.data_ptr<uint8_t>() + at_out, recv_counts[q] * es);
    at_out += recv_counts[q] * es;
  }
}

}  // namespace zccl::transport
