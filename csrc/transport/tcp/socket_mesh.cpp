// socket_mesh.h: listening, dialling, the hello/acknowledgement exchange.
#include "socket_mesh.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

namespace zccl::transport::tcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x5443435a;  // "ZCCT" read as little-endian bytes
constexpr uint32_t kVersion = 1;

struct Hello {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  int32_t rank = 0;
  int32_t size = 0;
  uint64_t session = 0;
};

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfo = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfo resolve(const std::string& host, const std::string& port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw std::runtime_error("zccl tcp: cannot resolve " + host + ": " + gai_strerror(rc));
  }
  return AddrInfo(res);
}

// "host:port" or "[v6]:port".
std::pair<std::string, std::string> split_address(const std::string& a) {
  if (!a.empty() && a[0] == '[') {
    const size_t close = a.find("]:");
    if (close != std::string::npos) return {a.substr(1, close - 1), a.substr(close + 2)};
  } else {
    const size_t colon = a.rfind(':');
    if (colon != std::string::npos && colon > 0) return {a.substr(0, colon), a.substr(colon + 1)};
  }
  throw std::invalid_argument("zccl tcp: bad peer address '" + a + "' (want host:port)");
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw std::runtime_error(errno_text("zccl tcp: fcntl(O_NONBLOCK)", errno));
  }
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1000)));
}

// Waits until fd is ready for `events` or the deadline passes (false).
bool ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw std::runtime_error(errno_text("zccl tcp: poll", errno));
    if (Clock::now() >= deadline) return false;
  }
}

// Moves exactly n bytes through io(done) (one ::send or ::recv of the rest, on a non-blocking
// fd), waiting for `events` in between, before the deadline; false on timeout or a closed peer.
template <class Io>
bool move_all(int fd, size_t n, short events, Clock::time_point deadline, Io&& io) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = io(done);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!ready(fd, events, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool send_all(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(buf);
  return move_all(fd, n, POLLOUT, deadline,
                  [&](size_t done) { return ::send(fd, p + done, n - done, MSG_NOSIGNAL); });
}

bool recv_all(int fd, void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  return move_all(fd, n, POLLIN, deadline,
                  [&](size_t done) { return ::recv(fd, p + done, n - done, 0); });
}

void tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // latency: small heads go now
}

// One non-blocking connect attempt to any of host's addresses; empty Fd when refused.
Fd try_dial(const std::string& host, const std::string& port, Clock::time_point deadline,
            int* last_error) {
  AddrInfo ai = resolve(host, port, false);
  for (addrinfo* a = ai.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      *last_error = errno;
      continue;
    }
    set_nonblocking(fd.get());
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
      *last_error = errno;
      continue;
    }
    if (!ready(fd.get(), POLLOUT, deadline)) {
      *last_error = ETIMEDOUT;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return fd;
    *last_error = err;
  }
  return Fd();
}

bool valid_hello(const Hello& h, int size, uint64_t session) {
  return h.magic == kMagic && h.version == kVersion && h.size == size && h.session == session &&
         h.rank >= 0 && h.rank < size;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Listener::Listener(const std::string& host) : host_(host) {
  AddrInfo ai = resolve(host, "0", true);
  int err = 0;
  for (addrinfo* a = ai.get(); a != nullptr && !fd_; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      err = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      err = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    v6_ = bound.ss_family == AF_INET6;
    port_ = ntohs(v6_ ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    set_nonblocking(fd.get());
    fd_ = std::move(fd);
  }
  if (!fd_) throw std::runtime_error(errno_text("zccl tcp: cannot listen on " + host, err));
}

std::string Listener::address() const {
  return (v6_ ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

std::vector<Fd> connect_mesh(const Listener& listener, int rank, int size,
                             const std::vector<std::string>& addresses, uint64_t session,
                             std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size || addresses.size() != static_cast<size_t>(size)) {
    throw std::invalid_argument("zccl tcp: rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + " with " +
                                std::to_string(addresses.size()) + " addresses");
  }
  const auto deadline = Clock::now() + timeout;
  std::vector<Fd> peers(static_cast<size_t>(size));
  Hello mine;
  mine.rank = rank;
  mine.size = size;
  mine.session = session;

  // Dial every lower rank: their listeners exist (they were opened before the addresses were
  // published), and the kernel completes a connection before the peer calls accept().
  for (int r = 0; r < rank; ++r) {
    const auto [host, port] = split_address(addresses[r]);
    int err = ECONNREFUSED;
    while (!peers[r]) {
      Fd fd = try_dial(host, port, deadline, &err);
      Hello ack;
      if (fd && send_all(fd.get(), &mine, sizeof(mine), deadline) &&
          recv_all(fd.get(), &ack, sizeof(ack), deadline) && valid_hello(ack, size, session) &&
          ack.rank == r) {
        peers[r] = std::move(fd);
      } else if (Clock::now() >= deadline) {
        throw std::runtime_error(errno_text("zccl tcp: Timed out after " +
                                                std::to_string(timeout.count()) +
                                                " ms connecting rank " + std::to_string(rank) +
                                                " to rank " + std::to_string(r) + " at " +
                                                addresses[r],
                                            err));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  // Accept every higher rank; anything else that connects is refused (closed).
  int missing = size - 1 - rank;
  while (missing > 0) {
    if (!ready(listener.fd(), POLLIN, deadline)) {
      std::string who;
      for (int r = rank + 1; r < size; ++r) {
        if (!peers[r]) who += (who.empty() ? "" : ", ") + std::to_string(r);
      }
      throw std::runtime_error("zccl tcp: Timed out after " + std::to_string(timeout.count()) +
                               " ms: rank " + std::to_string(rank) +
                               " was never reached by rank(s) " + who);
    }
    Fd fd(::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) continue;
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    Hello h;
    if (!recv_all(fd.get(), &h, sizeof(h), hello_deadline) || !valid_hello(h, size, session) ||
        h.rank <= rank || peers[h.rank]) {
      continue;  // not one of ours: drop it
    }
    if (!send_all(fd.get(), &mine, sizeof(mine), hello_deadline)) continue;
    peers[h.rank] = std::move(fd);
    --missing;
  }
  for (int r = 0; r < size; ++r) {
    if (r != rank) tune(peers[r].get());
  }
  return peers;
}

}  // namespace zccl::transport::tcp
