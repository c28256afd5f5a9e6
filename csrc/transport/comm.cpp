// MPI transport (see comm.h). Design notes:
//
// * Initialisation: ensure_initialized() calls MPI_Init_thread(MPI_THREAD_MULTIPLE) at most once,
//   lazily (never at import time), and remembers whether *we* initialised MPI; only then does
//   finalize_if_owned() finalise it. An MPI initialised by someone else is used as it is.
// * Thread level: when the library provides less than MPI_THREAD_MULTIPLE, every MPI call made
//   through this layer holds one process-wide mutex (reentrant per thread, so check() may be
//   called under it). Polling waits take the lock per MPI_Test, so concurrent waits on different
//   communicators interleave. MPI calls made by others (the user, mpi4py) are not covered by the
//   lock: with less than MULTIPLE they must not run concurrently with ours.
// * Errors: every communicator we create gets MPI_ERRORS_RETURN and every return code is checked
//   (MpiError with MPI_Error_string, the call and the peer/tag where there is one).
// * Waits: everything is non-blocking underneath; waits poll MPI_Test (spin, then yield, then
//   sleep with a capped backoff, which matters when ranks oversubscribe the cores) until the
//   communicator's deadline, then throw TimeoutError naming the operation, peer and tag.
// * Large messages: byte messages travel in pieces of max_piece_bytes() (1 GiB). A message of n
//   bytes is sent as floor(n / piece) full pieces followed by one final piece of n % piece bytes
//   (possibly empty), so every piece but the last is full and a message under one piece is one
//   MPI message. The receiver posts one piece at a time (the next once the previous arrived full),
//   so a receive may have any capacity >= the message. Same (peer, tag) pieces arrive in order
//   (MPI non-overtaking). Restriction: do not keep two receives matching the same (peer, tag)
//   outstanding at once when a message may exceed one piece (collectives use distinct tags).
// * Cancellation: destroying an unfinished point-to-point Request cancels its parts, gives them
//   up to ~50 ms to complete the cancellation and otherwise MPI_Request_free()s them; it never
//   throws. Non-blocking *collective* requests cannot be cancelled or freed (MPI forbids it): after
//   a TimeoutError in an exact collective the request is abandoned and MPI may still touch the
//   caller's buffers; the group must be treated as broken (abort it), as with NCCL/Gloo. Such a
//   communicator is not freed by ~Comm (Open MPI would progress the operation on a freed one).
// * Counts: MPI counts are int. allreduce/reduce/bcast are split into calls of at most
//   max_collective_count() elements; allgather(v)/gather/scatter/reduce_scatter_block/alltoallv
//   throw std::length_error when a count or displacement exceeds it.
// * Tags: next_tag_base() cycles through blocks of kTagsPerOp tags in [1, MPI_TAG_UB). Tag 0 is
//   reserved for MPI_Comm_create_group in subgroup().
#include "comm.h"

#include "backoff.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace zccl::transport {

namespace {

std::mutex g_init_mutex;          // guards initialisation / finalisation state
std::atomic<int> g_provided{-1};  // provided thread level, -1 until initialised
bool g_owned = false;             // we called MPI_Init_thread
std::atomic<bool> g_finalized_by_us{false};
std::atomic<bool> g_serialize{false};  // provided < MPI_THREAD_MULTIPLE: serialise our calls
std::mutex g_mpi_mutex;
thread_local int t_lock_depth = 0;

std::atomic<size_t> g_piece_bytes{size_t{1} << 30};
std::atomic<size_t> g_max_coll_count{static_cast<size_t>(INT_MAX)};

// Holds the process-wide MPI lock when serialisation is needed; reentrant within a thread.
class MpiGuard {
 public:
  MpiGuard() {
    if (t_lock_depth == 0 && g_serialize.load(std::memory_order_acquire)) {
      g_mpi_mutex.lock();
      locked_ = true;
    }
    ++t_lock_depth;
  }
  ~MpiGuard() {
    --t_lock_depth;
    if (locked_) g_mpi_mutex.unlock();
  }
  MpiGuard(const MpiGuard&) = delete;
  MpiGuard& operator=(const MpiGuard&) = delete;

 private:
  bool locked_ = false;
};

bool mpi_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);  // callable at any time, thread-safe per the standard
  return flag != 0;
}

MpiError make_error(int rc, const std::string& what) {
  MpiGuard g;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  std::string msg;
  if (MPI_Error_string(rc, text, &len) == MPI_SUCCESS && len > 0) {
    msg.assign(text, static_cast<size_t>(len));
  } else {
    msg = "unknown MPI error";
  }
  int cls = MPI_ERR_OTHER;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) cls = MPI_ERR_OTHER;
  return MpiError("zccl: " + what + " failed: " + msg + " (MPI error code " + std::to_string(rc) +
                      ")",
                  cls);
}

void check_str(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw make_error(rc, what);
}

// Sleep cap of request polling loops (see backoff.h).
constexpr int kPollSleepCapUs = 200;

using Clock = std::chrono::steady_clock;
// Deadline of duplicate() without a timeout (the same as a Comm's default timeout_).
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  if (timeout.count() <= 0) return now;
  const auto max_wait = Clock::time_point::max() - now;
  if (timeout >= max_wait) return Clock::time_point::max();
  return now + timeout;
}

int to_int_count(size_t n, const char* what) {
  if (n > max_collective_count()) {
    throw std::length_error(std::string("zccl: ") + what + ": count/displacement " +
                            std::to_string(n) + " exceeds the largest count of one MPI call (" +
                            std::to_string(max_collective_count()) +
                            "); split the operation into smaller ones");
  }
  return static_cast<int>(n);
}

MPI_Aint type_extent(MPI_Datatype type) {
  MpiGuard g;
  MPI_Aint lb = 0, extent = 0;
  check_str(MPI_Type_get_extent(type, &lb, &extent), "MPI_Type_get_extent");
  return extent;
}

std::string comm_desc(MPI_Comm comm) {
  int rank = -1, size = -1;
  if (comm != MPI_COMM_NULL && !mpi_finalized()) {
    MpiGuard g;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  return "rank " + std::to_string(rank) + " of a communicator of " + std::to_string(size);
}

// The peers a collective on `size` ranks waits for, seen from `rank`: "rank 1", "ranks 0, 2-3".
std::string others_desc(int rank, int size) {
  if (size <= 1) return "no other rank";
  auto range = [](int a, int b) {
    return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
  };
  std::string s = size == 2 ? "rank " : "ranks ";
  if (rank > 0) s += range(0, rank - 1);
  if (rank < size - 1) s += std::string(rank > 0 ? ", " : "") + range(rank + 1, size - 1);
  return size > 2 ? s + " (any of them)" : s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Initialisation and settings

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw make_error(rc, what);
}

int ensure_initialized() {
  const int known = g_provided.load(std::memory_order_acquire);
  if (known >= 0 && !g_finalized_by_us) return known;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_finalized_by_us || mpi_finalized()) {
    throw MpiError("zccl: MPI has already been finalized; it cannot be initialised again",
                   MPI_ERR_OTHER);
  }
  if (g_provided.load() >= 0) return g_provided.load();
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
    g_owned = false;
  } else {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_owned = true;
  }
  g_serialize.store(provided < MPI_THREAD_MULTIPLE, std::memory_order_release);
  g_provided.store(provided, std::memory_order_release);
  return provided;
}

void finalize_if_owned() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (!g_owned || g_finalized_by_us || mpi_finalized()) return;
  MpiGuard g;
  check(MPI_Finalize(), "MPI_Finalize");
  g_finalized_by_us = true;
}

bool thread_multiple() { return ensure_initialized() >= MPI_THREAD_MULTIPLE; }

void set_max_piece_bytes(size_t bytes) {
  g_piece_bytes.store(std::clamp<size_t>(bytes, 1, static_cast<size_t>(INT_MAX)));
}
size_t max_piece_bytes() { return g_piece_bytes.load(); }

void set_max_collective_count(size_t count) {
  g_max_coll_count.store(std::clamp<size_t>(count, 1, static_cast<size_t>(INT_MAX)));
}
size_t max_collective_count() { return g_max_coll_count.load(); }

// ---------------------------------------------------------------------------------------------
// Request

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    cancel_and_free();
    parts_ = std::move(other.parts_);
    other.parts_.clear();
    received = other.received;
    what_ = other.what_;
    comm_ = other.comm_;
    peer_ = other.peer_;
    tag_ = other.tag_;
    bytes_ = other.bytes_;
    rbuf_ = other.rbuf_;
    recv_ = other.recv_;
    collective_ = other.collective_;
  }
  return *this;
}

Request::~Request() { cancel_and_free(); }

bool Request::active() const {
  for (MPI_Request r : parts_) {
    if (r != MPI_REQUEST_NULL) return true;
  }
  return false;
}

void Request::cancel_and_free() noexcept {
  if (!active()) {
    parts_.clear();
    return;
  }
  try {
    if (mpi_finalized()) {  // nothing can be done any more
      parts_.clear();
      return;
    }
    if (collective_) {
      // MPI forbids MPI_Cancel and MPI_Request_free on non-blocking collectives: abandon them.
      parts_.clear();
      return;
    }
    {
      MpiGuard g;
      for (MPI_Request& r : parts_) {
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      }
    }
    // Give the cancellations a moment to complete (an unmatched receive completes at once).
    const auto until = Clock::now() + std::chrono::milliseconds(50);
    bool pending = true;
    while (pending) {
      pending = false;
      {
        MpiGuard g;
        for (MPI_Request& r : parts_) {
          if (r == MPI_REQUEST_NULL) continue;
          int flag = 0;
          if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            // The request failed; MPI has released it or will never complete it.
            if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
            continue;
          }
          if (!flag) pending = true;
        }
      }
      if (!pending || Clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (pending) {
      MpiGuard g;
      for (MPI_Request& r : parts_) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);  // released once it completes
      }
    }
  } catch (...) {
    // never throw from a destructor
  }
  parts_.clear();
}

// ---------------------------------------------------------------------------------------------
// Comm: construction

Comm::Comm(MPI_Comm comm) : comm_(comm) {
  MpiGuard g;
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  int* ub = nullptr;
  int flag = 0;
  check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  tag_ub_ = (flag && ub != nullptr) ? *ub : 32767;  // the standard guarantees at least 32767
}

Comm::~Comm() {
  if (comm_ == MPI_COMM_NULL) return;
  try {
    if (!abandoned_ && !mpi_finalized()) {
      MpiGuard g;
      MPI_Comm_free(&comm_);
    }
  } catch (...) {
  }
  comm_ = MPI_COMM_NULL;
}

std::unique_ptr<Comm> Comm::duplicate(MPI_Comm parent) {
  return duplicate(parent, kDefaultTimeout);
}

std::unique_ptr<Comm> Comm::duplicate(MPI_Comm parent, std::chrono::milliseconds timeout) {
  ensure_initialized();
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Comm_idup(parent, &dup, &req), "MPI_Comm_idup");
  }
  const auto deadline = deadline_after(timeout);
  Backoff backoff(kPollSleepCapUs);
  for (;;) {
    int flag = 0;
    {
      MpiGuard g;
      check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Comm_idup (wait)");
    }
    if (flag) break;
    if (Clock::now() > deadline) {
      throw TimeoutError("zccl: Timed out after " + std::to_string(timeout.count()) +
                         " ms duplicating a communicator (MPI_Comm_idup): not every rank of the "
                         "parent communicator joined");
    }
    backoff.pause();
  }
  std::unique_ptr<Comm> out(new Comm(dup));
  out->timeout_ = timeout;
  return out;
}

std::unique_ptr<Comm> Comm::subgroup(const std::vector<int>& ranks) const {
  if (ranks.empty()) throw std::invalid_argument("zccl: subgroup needs at least one rank");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= size_) {
      throw std::invalid_argument("zccl: subgroup rank " + std::to_string(sorted[i]) +
                                  " is out of range [0, " + std::to_string(size_) + ")");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw std::invalid_argument("zccl: subgroup rank " + std::to_string(sorted[i]) +
                                  " is listed twice");
    }
  }
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
  // MPI_Comm_create_group is collective over the members only (non-members need not call).
  // It is blocking: there is no non-blocking variant in MPI 3.1.
  MpiGuard g;
  MPI_Group parent_group = MPI_GROUP_NULL, sub_group = MPI_GROUP_NULL;
  check(MPI_Comm_group(comm_, &parent_group), "MPI_Comm_group");
  int rc = MPI_Group_incl(parent_group, static_cast<int>(ranks.size()), ranks.data(), &sub_group);
  MPI_Group_free(&parent_group);
  check(rc, "MPI_Group_incl");
  MPI_Comm sub = MPI_COMM_NULL;
  rc = MPI_Comm_create_group(comm_, sub_group, /*tag=*/0, &sub);
  MPI_Group_free(&sub_group);
  check(rc, "MPI_Comm_create_group");
  if (sub == MPI_COMM_NULL) return nullptr;
  std::unique_ptr<Comm> out;
  try {
    out.reset(new Comm(sub));
  } catch (...) {
    MPI_Comm_free(&sub);
    throw;
  }
  out->timeout_ = timeout_;
  return out;
}

int Comm::next_tag_base() {
  const int blocks = std::max(1, (tag_ub_ - 1) / kTagsPerOp);
  const int base = 1 + (tag_counter_ % blocks) * kTagsPerOp;
  tag_counter_ = (tag_counter_ + 1) % blocks;
  return base;
}

// ---------------------------------------------------------------------------------------------
// Point-to-point

namespace {

void check_peer_tag(const char* op, int peer, int tag, int size, int tag_ub) {
  if (peer < 0 || peer >= size) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": peer " + std::to_string(peer) +
                                " is out of range [0, " + std::to_string(size) + ")");
  }
  if (tag < 0 || tag > tag_ub) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": tag " + std::to_string(tag) +
                                " is out of range [0, " + std::to_string(tag_ub) + "]");
  }
}

std::string request_desc(const char* what, int peer, int tag, size_t bytes, bool recv) {
  std::string s = what;
  if (peer == MPI_ANY_SOURCE) {
    s += " of up to " + std::to_string(bytes) + " bytes from any rank (tag " +
         std::to_string(tag) + ")";
  } else if (peer >= 0) {
    s += recv ? " of up to " : " of ";
    s += std::to_string(bytes) + " bytes " + (recv ? "from" : "to") + " rank " +
         std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  }
  return s;
}

}  // namespace

Request Comm::isend(const void* buf, size_t bytes, int peer, int tag) const {
  check_peer_tag("isend", peer, tag, size_, tag_ub_);
  if (buf == nullptr && bytes > 0) throw std::invalid_argument("zccl: isend: null buffer");
  Request req;
  req.what_ = "isend";
  req.comm_ = comm_;
  req.peer_ = peer;
  req.tag_ = tag;
  req.bytes_ = bytes;
  const size_t piece = max_piece_bytes();
  const size_t full = bytes / piece;  // full pieces, then one final (maybe empty) piece
  req.parts_.reserve(full + 1);
  const auto* p = static_cast<const unsigned char*>(buf);
  MpiGuard g;
  for (size_t i = 0; i <= full; ++i) {
    const size_t n = i < full ? piece : bytes - full * piece;
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = MPI_Isend(p + i * piece, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &r);
    if (rc != MPI_SUCCESS) {
      throw make_error(rc, "MPI_Isend " + request_desc("isend", peer, tag, bytes, false));
    }
    req.parts_.push_back(r);
  }
  return req;
}

Request Comm::irecv(void* buf, size_t capacity, int peer, int tag) const {
  check_peer_tag("irecv", peer, tag, size_, tag_ub_);
  return post_irecv(buf, capacity, peer, tag);
}

Request Comm::irecv_any(void* buf, size_t capacity, int tag) const {
  check_peer_tag("irecv_any", 0, tag, size_, tag_ub_);  // (rank 0 always exists)
  return post_irecv(buf, capacity, MPI_ANY_SOURCE, tag);
}

Request Comm::post_irecv(void* buf, size_t capacity, int peer, int tag) const {
  if (buf == nullptr && capacity > 0) throw std::invalid_argument("zccl: irecv: null buffer");
  Request req;
  req.what_ = "irecv";
  req.comm_ = comm_;
  req.peer_ = peer;
  req.tag_ = tag;
  req.bytes_ = capacity;
  req.rbuf_ = static_cast<unsigned char*>(buf);
  req.recv_ = true;
  const size_t n = std::min(capacity, max_piece_bytes());
  MPI_Request r = MPI_REQUEST_NULL;
  MpiGuard g;
  const int rc = MPI_Irecv(buf, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &r);
  if (rc != MPI_SUCCESS) {
    throw make_error(rc, "MPI_Irecv " + request_desc("irecv", peer, tag, capacity, true));
  }
  req.parts_.push_back(r);
  return req;
}

bool Comm::test(Request& req, size_t* received) const {
  MpiGuard g;
  bool done = true;
  for (size_t i = 0; i < req.parts_.size(); ++i) {
    MPI_Request& r = req.parts_[i];
    while (r != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Status st;
      std::memset(&st, 0, sizeof(st));
      const int rc = MPI_Test(&r, &flag, &st);
      if (rc != MPI_SUCCESS) {
        const int code = (rc == MPI_ERR_IN_STATUS) ? st.MPI_ERROR : rc;
        throw make_error(code, std::string("MPI_Test of ") +
                                   request_desc(req.what_, req.peer_, req.tag_, req.bytes_,
                                                req.recv_) +
                                   " on " + comm_desc(req.comm_));
      }
      if (!flag) {
        done = false;
        break;
      }
      if (!req.recv_ || req.collective_) break;
      // The sender of an any-source receive is known now; further pieces come from it only.
      req.source = st.MPI_SOURCE;
      if (req.peer_ == MPI_ANY_SOURCE) req.peer_ = st.MPI_SOURCE;
      int n = 0;
      check_str(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
      req.received += static_cast<size_t>(n);
      const size_t piece = max_piece_bytes();
      if (static_cast<size_t>(n) < piece) break;  // the final piece
      // A full piece: more follow (possibly one empty piece). Post the next one in place.
      const size_t left = req.bytes_ - req.received;
      const size_t next = std::min(left, piece);
      const int rc2 = MPI_Irecv(req.rbuf_ + req.received, static_cast<int>(next), MPI_BYTE,
                                req.peer_, req.tag_, req.comm_, &r);
      if (rc2 != MPI_SUCCESS) {
        throw make_error(rc2, "MPI_Irecv (next piece) " +
                                  request_desc("irecv", req.peer_, req.tag_, req.bytes_, true));
      }
    }
  }
  if (received != nullptr) *received = req.received;
  return done;
}

size_t Comm::wait(Request& req) const {
  const auto deadline = deadline_after(timeout_);
  Backoff backoff(kPollSleepCapUs);
  while (!test(req)) {
    if (Clock::now() > deadline) {
      throw TimeoutError("zccl: Timed out after " + std::to_string(timeout_.count()) +
                         " ms waiting for " +
                         request_desc(req.what_, req.peer_, req.tag_, req.bytes_, req.recv_) +
                         " on " + comm_desc(comm_) +
                         " (a peer failed, is far behind, or called a different operation)");
    }
    backoff.pause();
  }
  return req.received;
}

void Comm::wait_all(std::vector<Request>& reqs) const {
  const auto deadline = deadline_after(timeout_);
  Backoff backoff(kPollSleepCapUs);
  for (;;) {
    bool all = true;
    const Request* first_pending = nullptr;
    for (Request& r : reqs) {
      if (!test(r)) {
        all = false;
        if (first_pending == nullptr) first_pending = &r;
      }
    }
    if (all) return;
    if (Clock::now() > deadline) {
      size_t pending = 0;
      for (Request& r : reqs) pending += r.active() ? 1 : 0;
      const Request& f = *first_pending;
      throw TimeoutError("zccl: Timed out after " + std::to_string(timeout_.count()) +
                         " ms waiting for " + std::to_string(pending) +
                         " operation(s), the first: " +
                         request_desc(f.what_, f.peer_, f.tag_, f.bytes_, f.recv_) + " on " +
                         comm_desc(comm_) +
                         " (a peer failed, is far behind, or called a different operation)");
    }
    backoff.pause();
  }
}

void Comm::send(const void* buf, size_t bytes, int peer, int tag) const {
  Request r = isend(buf, bytes, peer, tag);
  wait(r);
}

size_t Comm::recv(void* buf, size_t capacity, int peer, int tag) const {
  Request r = irecv(buf, capacity, peer, tag);
  return wait(r);
}

size_t Comm::sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rcap, int src,
                      int tag) const {
  std::vector<Request> reqs;
  reqs.reserve(2);
  reqs.push_back(irecv(rbuf, rcap, src, tag));
  reqs.push_back(isend(sbuf, sbytes, dst, tag));
  wait_all(reqs);
  return reqs[0].received;
}

// ---------------------------------------------------------------------------------------------
// Exact collectives

void Comm::wait_collective(MPI_Request* reqs, size_t n, const char* what, size_t count) const {
  std::vector<Request> pending;
  pending.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Request r;
    r.what_ = what;
    r.comm_ = comm_;
    r.collective_ = true;
    r.bytes_ = count;
    r.parts_.push_back(reqs[i]);
    pending.push_back(std::move(r));
  }
  const auto deadline = deadline_after(timeout_);
  Backoff backoff(kPollSleepCapUs);
  for (;;) {
    bool all = true;
    for (Request& r : pending) {
      if (!test(r)) all = false;
    }
    if (all) return;
    if (Clock::now() > deadline) {
      abandoned_ = true;
      throw TimeoutError("zccl: Timed out after " + std::to_string(timeout_.count()) +
                         " ms in " + what + " of " + std::to_string(count) + " elements on " +
                         comm_desc(comm_) + ", waiting for " + others_desc(rank_, size_) +
                         " (a rank failed, is far behind, or called a different collective); "
                         "the communicator is no longer usable");
    }
    backoff.pause();
  }
}

namespace {

// Runs `post(offset, n, &request)` over [0, count) in pieces of at most max_collective_count().
template <class Post>
std::vector<MPI_Request> post_split(size_t count, Post post) {
  const size_t step = max_collective_count();
  std::vector<MPI_Request> reqs;
  size_t off = 0;
  do {
    const size_t n = std::min(step, count - off);
    MPI_Request r = MPI_REQUEST_NULL;
    post(off, static_cast<int>(n), &r);
    reqs.push_back(r);
    off += n;
  } while (off < count);
  return reqs;
}

// Address of element index*count of a buffer of elements with extent `ext`.
const char* element_at(const void* base, size_t index, size_t count, MPI_Aint ext) {
  return static_cast<const char*>(base) + static_cast<MPI_Aint>(index * count) * ext;
}

void check_root(int root, int size, const char* what) {
  if (root < 0 || root >= size) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": root " + std::to_string(root) +
                                " is out of range [0, " + std::to_string(size) + ")");
  }
}

}  // namespace

void Comm::barrier() const {
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
  }
  wait_collective(&r, 1, "MPI_Ibarrier", 0);
}

void Comm::allreduce(const void* send, void* recv, size_t count, MPI_Datatype type,
                     MPI_Op op) const {
  if (count == 0) return;
  const bool in_place = send == MPI_IN_PLACE || send == recv;
  const MPI_Aint ext = type_extent(type);
  const auto* s = static_cast<const char*>(send);
  auto* d = static_cast<char*>(recv);
  std::vector<MPI_Request> reqs;
  {
    MpiGuard g;
    reqs = post_split(count, [&](size_t off, int n, MPI_Request* r) {
      check(MPI_Iallreduce(in_place ? MPI_IN_PLACE : s + off * ext, d + off * ext, n, type, op,
                           comm_, r),
            "MPI_Iallreduce");
    });
  }
  wait_collective(reqs.data(), reqs.size(), "MPI_Iallreduce", count);
}

void Comm::reduce(const void* send, void* recv, size_t count, MPI_Datatype type, MPI_Op op,
                  int root) const {
  check_root(root, size_, "reduce");
  if (count == 0) return;
  const bool is_root = rank_ == root;
  const bool in_place = is_root && (send == MPI_IN_PLACE || send == recv);
  // A non-root passing MPI_IN_PLACE / send == recv means "reduce my recv buffer".
  const void* src = (!is_root && send == MPI_IN_PLACE) ? recv : send;
  const MPI_Aint ext = type_extent(type);
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(recv);
  std::vector<MPI_Request> reqs;
  {
    MpiGuard g;
    reqs = post_split(count, [&](size_t off, int n, MPI_Request* r) {
      check(MPI_Ireduce(in_place ? MPI_IN_PLACE : s + off * ext,
                        is_root ? d + off * ext : nullptr, n, type, op, root, comm_, r),
            "MPI_Ireduce");
    });
  }
  wait_collective(reqs.data(), reqs.size(), "MPI_Ireduce", count);
}

void Comm::bcast(void* buf, size_t count, MPI_Datatype type, int root) const {
  check_root(root, size_, "bcast");
  if (count == 0) return;
  const MPI_Aint ext = type_extent(type);
  auto* d = static_cast<char*>(buf);
  std::vector<MPI_Request> reqs;
  {
    MpiGuard g;
    reqs = post_split(count, [&](size_t off, int n, MPI_Request* r) {
      check(MPI_Ibcast(d + off * ext, n, type, root, comm_, r), "MPI_Ibcast");
    });
  }
  wait_collective(reqs.data(), reqs.size(), "MPI_Ibcast", count);
}

void Comm::allgather(const void* send, void* recv, size_t count, MPI_Datatype type) const {
  const int n = to_int_count(count, "allgather");
  const MPI_Aint ext = type_extent(type);
  const bool in_place =
      send == MPI_IN_PLACE || send == element_at(recv, rank_, count, ext);
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, type, recv, n, type, comm_, &r),
          "MPI_Iallgather");
  }
  wait_collective(&r, 1, "MPI_Iallgather", count);
}

void Comm::allgatherv(const void* send, size_t count, void* recv,
                      const std::vector<size_t>& counts, MPI_Datatype type) const {
  if (counts.size() != static_cast<size_t>(size_)) {
    throw std::invalid_argument("zccl: allgatherv: counts has " + std::to_string(counts.size()) +
                                " entries for " + std::to_string(size_) + " ranks");
  }
  if (counts[rank_] != count) {
    throw std::invalid_argument("zccl: allgatherv: count " + std::to_string(count) +
                                " differs from counts[" + std::to_string(rank_) +
                                "] = " + std::to_string(counts[rank_]));
  }
  std::vector<int> c(size_), displ(size_);
  size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    c[r] = to_int_count(counts[r], "allgatherv");
    displ[r] = to_int_count(total, "allgatherv");
    total += counts[r];
  }
  const MPI_Aint ext = type_extent(type);
  const bool in_place =
      send == MPI_IN_PLACE || send == element_at(recv, 1, displ[rank_], ext);
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, c[rank_], type, recv, c.data(),
                          displ.data(), type, comm_, &r),
          "MPI_Iallgatherv");
  }
  wait_collective(&r, 1, "MPI_Iallgatherv", total);
}

void Comm::gather(const void* send, void* recv, size_t count, MPI_Datatype type, int root) const {
  check_root(root, size_, "gather");
  const int n = to_int_count(count, "gather");
  const bool is_root = rank_ == root;
  const MPI_Aint ext = type_extent(type);
  const bool in_place = is_root && (send == MPI_IN_PLACE ||
                                    send == element_at(recv, rank_, count, ext));
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Igather(in_place ? MPI_IN_PLACE : send, n, type, is_root ? recv : nullptr, n, type,
                      root, comm_, &r),
          "MPI_Igather");
  }
  wait_collective(&r, 1, "MPI_Igather", count);
}

void Comm::scatter(const void* send, void* recv, size_t count, MPI_Datatype type,
                   int root) const {
  check_root(root, size_, "scatter");
  const int n = to_int_count(count, "scatter");
  const bool is_root = rank_ == root;
  const MPI_Aint ext = type_extent(type);
  const bool in_place = is_root && (recv == MPI_IN_PLACE ||
                                    recv == element_at(send, rank_, count, ext));
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Iscatter(is_root ? send : nullptr, n, type, in_place ? MPI_IN_PLACE : recv, n, type,
                       root, comm_, &r),
          "MPI_Iscatter");
  }
  wait_collective(&r, 1, "MPI_Iscatter", count);
}

void Comm::reduce_scatter_block(const void* send, void* recv, size_t count, MPI_Datatype type,
                                MPI_Op op) const {
  const int n = to_int_count(count, "reduce_scatter_block");
  const bool in_place = send == MPI_IN_PLACE || send == recv;
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, n, type, op, comm_, &r),
          "MPI_Ireduce_scatter_block");
  }
  wait_collective(&r, 1, "MPI_Ireduce_scatter_block", count);
}

void Comm::alltoallv(const void* send, const std::vector<size_t>& send_counts,
                     const std::vector<size_t>& send_displs, void* recv,
                     const std::vector<size_t>& recv_counts,
                     const std::vector<size_t>& recv_displs, MPI_Datatype type) const {
  const size_t p = static_cast<size_t>(size_);
  if (send_counts.size() != p || send_displs.size() != p || recv_counts.size() != p ||
      recv_displs.size() != p) {
    throw std::invalid_argument("zccl: alltoallv: counts and displacements need " +
                                std::to_string(p) + " entries each");
  }
  std::vector<int> sc(p), sd(p), rc(p), rd(p);
  size_t total = 0;
  for (size_t i = 0; i < p; ++i) {
    sc[i] = to_int_count(send_counts[i], "alltoallv");
    sd[i] = to_int_count(send_displs[i], "alltoallv");
    rc[i] = to_int_count(recv_counts[i], "alltoallv");
    rd[i] = to_int_count(recv_displs[i], "alltoallv");
    total += recv_counts[i];
  }
  MPI_Request r = MPI_REQUEST_NULL;
  {
    MpiGuard g;
    check(MPI_Ialltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type,
                         comm_, &r),
          "MPI_Ialltoallv");
  }
  wait_collective(&r, 1, "MPI_Ialltoallv", total);
}

std::vector<uint64_t> Comm::allgather_u64(uint64_t value) const {
  std::vector<uint64_t> out(static_cast<size_t>(size_));
  allgather(&value, out.data(), 1, MPI_UINT64_T);
  return out;
}

std::unique_ptr<Comm> Comm::create_group(const std::vector<int>& world_ranks, int tag) {
  ensure_initialized();
  if (world_ranks.empty()) throw std::invalid_argument("zccl: a group needs at least one rank");
  MpiGuard g;
  MPI_Group world_group = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
  int rc = MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(),
                          &members);
  MPI_Group_free(&world_group);
  check(rc, "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  // Collective over the members only: the other ranks of the world never call it.
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &comm);
  MPI_Group_free(&members);
  check(rc, "MPI_Comm_create_group");
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("zccl: this rank is not in the group");
  try {
    return std::unique_ptr<Comm>(new Comm(comm));
  } catch (...) {
    MPI_Comm_free(&comm);
    throw;
  }
}

}  // namespace zccl::transport
