// MpiComm's point-to-point half (mpi_comm.h): byte messages in pieces, polling, cancellation.
//
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
//   communicator is not freed by ~MpiComm (Open MPI would progress the operation on a freed one).
// * Tags: next_tag_base() cycles through blocks of kTagsPerOp tags in [1, MPI_TAG_UB). Tag 0 is
//   reserved for MPI_Comm_create_group in subgroup().
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "mpi_internal.h"

namespace zccl::transport {

using mpi::finalized;
using mpi::Guard;

namespace mpi {

bool RequestState::active() const {
  for (MPI_Request r : parts) {
    if (r != MPI_REQUEST_NULL) return true;
  }
  return false;
}

RequestState::~RequestState() {
  if (!active()) return;
  try {
    // Nothing can be done once MPI is finalised; MPI forbids MPI_Cancel and MPI_Request_free on
    // non-blocking collectives: abandon them.
    if (finalized() || collective) return;
    {
      Guard g;
      for (MPI_Request& r : parts) {
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      }
    }
    // Give the cancellations a moment to complete (an unmatched receive completes at once).
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    bool pending = true;
    while (pending) {
      pending = false;
      {
        Guard g;
        for (MPI_Request& r : parts) {
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
      if (!pending || std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (pending) {
      Guard g;
      for (MPI_Request& r : parts) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);  // released once it completes
      }
    }
  } catch (...) {
    // never throw from a destructor
  }
}

}  // namespace mpi

namespace {

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

MpiComm::MpiComm(MPI_Comm comm) : comm_(comm) {
  Guard g;
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  int* ub = nullptr;
  int flag = 0;
  check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  tag_ub_ = (flag && ub != nullptr) ? *ub : 32767;  // the standard guarantees at least 32767
}

MpiComm::~MpiComm() {
  if (comm_ == MPI_COMM_NULL) return;
  try {
    if (!abandoned_ && !finalized()) {
      Guard g;
      MPI_Comm_free(&comm_);
    }
  } catch (...) {
  }
  comm_ = MPI_COMM_NULL;
}

namespace {
std::unique_ptr<mpi::RequestState> new_request_state(const char* what, MPI_Comm comm, int peer,
                                                     int tag, size_t bytes) {
  auto state = std::make_unique<mpi::RequestState>();
  state->what = what;
  state->comm = comm;
  state->peer = peer;
  state->tag = tag;
  state->bytes = bytes;
  return state;
}
}  // namespace

Request MpiComm::post_send(const void* buf, size_t bytes, int peer, int tag) const {
  auto state = new_request_state("isend", comm_, peer, tag, bytes);
  mpi::RequestState& req = *state;
  const size_t piece = max_piece_bytes();
  const size_t full = bytes / piece;  // full pieces, then one final (maybe empty) piece
  req.parts.reserve(full + 1);
  const auto* p = static_cast<const unsigned char*>(buf);
  Guard g;
  for (size_t i = 0; i <= full; ++i) {
    const size_t n = i < full ? piece : bytes - full * piece;
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = MPI_Isend(p + i * piece, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &r);
    if (rc != MPI_SUCCESS) {
      throw mpi::make_error(rc, "MPI_Isend " + request_desc("isend", peer, tag, bytes, false));
    }
    req.parts.push_back(r);
  }
  return Request(std::move(state));
}

Request MpiComm::post_recv(void* buf, size_t capacity, int peer, int tag) const {
  if (peer == kAnySource) peer = MPI_ANY_SOURCE;
  auto state = new_request_state("irecv", comm_, peer, tag, capacity);
  mpi::RequestState& req = *state;
  req.rbuf = static_cast<unsigned char*>(buf);
  req.recv = true;
  const size_t n = std::min(capacity, max_piece_bytes());
  MPI_Request r = MPI_REQUEST_NULL;
  Guard g;
  const int rc = MPI_Irecv(buf, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &r);
  if (rc != MPI_SUCCESS) {
    throw mpi::make_error(rc, "MPI_Irecv " + request_desc("irecv", peer, tag, capacity, true));
  }
  req.parts.push_back(r);
  return Request(std::move(state));
}

bool MpiComm::poll(Request& request) const {
  auto* state = static_cast<mpi::RequestState*>(request.state());
  if (state == nullptr) return true;
  mpi::RequestState& req = *state;
  Guard g;
  bool done = true;
  for (size_t i = 0; i < req.parts.size(); ++i) {
    MPI_Request& r = req.parts[i];
    while (r != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Status st;
      std::memset(&st, 0, sizeof(st));
      const int rc = MPI_Test(&r, &flag, &st);
      if (rc != MPI_SUCCESS) {
        const int code = (rc == MPI_ERR_IN_STATUS) ? st.MPI_ERROR : rc;
        throw mpi::make_error(code, std::string("MPI_Test of ") +
                                   request_desc(req.what, req.peer, req.tag, req.bytes,
                                                req.recv) +
                                   " on " + mpi::comm_desc(req.comm));
      }
      if (!flag) {
        done = false;
        break;
      }
      if (!req.recv || req.collective) break;
      // The sender of an any-source receive is known now; further pieces come from it only.
      request.source = st.MPI_SOURCE;
      if (req.peer == MPI_ANY_SOURCE) req.peer = st.MPI_SOURCE;
      int n = 0;
      mpi::check_str(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
      request.received += static_cast<size_t>(n);
      const size_t piece = max_piece_bytes();
      if (static_cast<size_t>(n) < piece) break;  // the final piece
      // A full piece: more follow (possibly one empty piece). Post the next one in place.
      const size_t left = req.bytes - request.received;
      const size_t next = std::min(left, piece);
      const int rc2 = MPI_Irecv(req.rbuf + request.received, static_cast<int>(next), MPI_BYTE,
                                req.peer, req.tag, req.comm, &r);
      if (rc2 != MPI_SUCCESS) {
        throw mpi::make_error(rc2, "MPI_Irecv (next piece) " +
                                  request_desc("irecv", req.peer, req.tag, req.bytes, true));
      }
    }
  }
  return done;
}

std::string MpiComm::describe(const Request& request) const {
  const auto* req = static_cast<const mpi::RequestState*>(request.state());
  if (req == nullptr) return "a finished operation";
  return request_desc(req->what, req->peer, req->tag, req->bytes, req->recv) + " on " +
         mpi::comm_desc(req->comm);
}

}  // namespace zccl::transport
