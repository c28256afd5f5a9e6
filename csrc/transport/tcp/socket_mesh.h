// The TCP transport's connections: one socket between every pair of ranks, set up through
// addresses the ranks exchanged beforehand (the Python side publishes them in torch's Store).
// POSIX sockets only: no torch, no MPI.
//
// Set-up: every rank first opens a Listener (so its port exists before anyone dials it), the
// ranks exchange "host:port" strings and a session number, then connect_mesh() dials every
// lower rank and accepts every higher one. Each connection starts with a hello (magic, rank,
// size, session) answered by an acknowledgement, so a stray or stale connection (another
// group's, another job's) is refused instead of being taken for a peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace zccl::transport::tcp {

// An owned file descriptor (closed on destruction). Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A listening TCP socket bound to `host` (an address of this host; port chosen by the kernel).
class Listener {
 public:
  explicit Listener(const std::string& host);
  int port() const { return port_; }
  // "host:port" as peers dial it ("[v6]:port" for IPv6).
  std::string address() const;
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
  std::string host_;
  int port_ = 0;
  bool v6_ = false;
};

// Connected, non-blocking sockets to every other rank: result[r] for r != rank (result[rank] is
// empty). `addresses[r]` is rank r's Listener::address(). Throws std::runtime_error naming the
// rank and address that could not be reached within `timeout`.
std::vector<Fd> connect_mesh(const Listener& listener, int rank, int size,
                             const std::vector<std::string>& addresses, uint64_t session,
                             std::chrono::milliseconds timeout);

}  // namespace zccl::transport::tcp
