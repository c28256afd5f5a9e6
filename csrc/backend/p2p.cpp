// Point-to-point ops of the zccl backend (send, recv, recv from any source) and the monitored
// barrier. Sends and receives are posted at once on the group's p2p communicator and driven by
// the progress thread (p2p_loop), so isend/irecv pairs never deadlock behind queued collectives.
//
// Float payloads over the threshold travel as one fZ-light stream (the receiver posts a buffer
// of max_compressed_size for the smallest chunks); both sides decide from (dtype, numel,
// algorithm, min_compress_bytes), so sender and receiver must agree on those. The stream's
// header names its dtype and count, which the receiver checks; a receive that finds a stream
// where it expected raw values (or raw values where it expected a stream) raises
// "configuration mismatch". A stream longer than a raw receive fails as truncated, and its
// "size mismatch" then names that possible cause, since a truncated message cannot be read.
//
// CUDA tensors go through host memory (compressed by the CPU's codec, the same streams): a send
// copies its tensor to the host at the call, in the order of the caller's stream; a receive
// writes its result into the tensor on the device's backend stream, ordered after the caller's
// stream at the call, and its Work's wait() / future order the consumer's stream after that.
#include "zccl_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "../compress/fzlight_format.h"
#include "routing.h"
#include "staged.h"
#include "validate.h"

namespace zccl::backend {
namespace {

void check_tag(int tag, const char* what) {
  if (tag < 0 || tag > 32767) {
    throw std::invalid_argument(std::string("zccl: ") + what + ": tag " + std::to_string(tag) +
                                " is out of range [0, 32767]");
  }
}

// Sender and receiver each decide from (dtype, size, algorithm, min_compress_bytes) whether a
// message travels compressed; with different settings they can disagree, and a stream then
// arrives where raw values are expected (or the reverse). Both must raise, never decode garbage.
constexpr const char* kSameDecision =
    ": sender and receiver decide alike from the dtype, the size and their configuration "
    "(algorithm, min_compress_bytes) whether a message is compressed, and theirs differ";

// The stream info when `data` holds one whole fZ-light stream, else nothing (the magic is
// checked first: an ordinary message costs a 4-byte compare).
std::optional<fz::StreamInfo> whole_stream(const uint8_t* data, size_t len) {
  if (len < sizeof(fz::format::kMagic) ||
      std::memcmp(data, fz::format::kMagic, sizeof(fz::format::kMagic)) != 0) {
    return std::nullopt;
  }
  try {
    fz::StreamInfo info = fz::read_info(data, len);
    if (info.total_bytes == len) return info;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The likely cause of a float receive's truncated message when both sides hold the same size:
// a compressing sender whose data did not compress (its stream is longer than the values). A
// truncated message cannot be looked into, so the error can only name it. Built once.
const char* longer_stream_hint() {
  static const std::string text =
      std::string(". If the sending tensor holds as many values as this one, the sender ") +
      "compressed the message (a stream of data that does not compress is longer than the " +
      "values) and this receive expected it uncompressed: a configuration mismatch" +
      kSameDecision;
  return text.c_str();
}

std::string stream_desc(const fz::StreamInfo& info) {
  return "a zccl stream of " + std::to_string(info.count) + " " + fz::dtype_name(info.dtype) +
         " values, " + std::to_string(info.total_bytes) + " bytes";
}

std::string peer_desc(const char* what, size_t bytes, int peer, int tag) {
  return std::string(what) + " of " + std::to_string(bytes) + " bytes " +
         (peer < 0 ? std::string("from any rank") : "from rank " + std::to_string(peer)) + " (tag " +
         std::to_string(tag) + ")";
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ZcclBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_single(tensors, "send");
  Device& dev = device_for(tensors[0], tensors, "send");
  check_root(dst, getSize(), "send");
  check_tag(tag, "send");
  // A CUDA tensor: a synchronous copy on the caller's current stream (the values as of the call).
  const at::Tensor t = dev.host_view(tensors[0].contiguous(), /*read=*/true, /*device_ok=*/false);
  const CallConfig cfg = resolve_for_call(defaults_);
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const std::string to = "the receive of rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
  if (compressed_path(t.scalar_type(), n, cfg)) {
    // Every floating type travels as its own stream (half types as half streams).
    const fz::DType dt = compressed_dtype(t.scalar_type());
    fz::CompressParams params;
    params.error_bound = local_bound(*cpu_, {t}, cfg);
    params.chunk_len = cfg.chunk_len;
    params.threads = cfg.threads;
    auto stream = std::make_shared<std::vector<uint8_t>>(fz::max_compressed_size(dt, n, cfg.chunk_len));
    stream->resize(fz::compress(t.data_ptr(), dt, n, params, stream->data(), stream->size()));
    transport::Request req = p2p_comm_->isend(stream->data(), stream->size(), dst, tag);
    return post_p2p("send", c10d::OpType::SEND, tensors, std::move(req), stream->size(),
                    [stream](size_t, int) {}, to);
  }
  const size_t bytes = n * t.element_size();
  transport::Request req = p2p_comm_->isend(t.data_ptr(), bytes, dst, tag);
  return post_p2p("send", c10d::OpType::SEND, tensors, std::move(req), bytes, [t](size_t, int) {},
                  to);
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_single(tensors, "recv");
  check_root(src, getSize(), "recv");
  check_tag(tag, "recv");
  return post_recv(tensors, src, tag, "recv");
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_single(tensors, "recv (any source)");
  check_tag(tag, "recv (any source)");
  return post_recv(tensors, -1, tag, "recv (any source)");
}

c10::intrusive_ptr<c10d::Work> ZcclBackend::post_recv(std::vector<at::Tensor>& tensors, int src, int tag,
                                                      const char* name) {
  Device* dev = &device_for(tensors[0], tensors, name);
  at::Tensor out = tensors[0];
  // The stream the result is written on (CUDA: ordered after the caller's stream now).
  const std::optional<c10::Stream> on = dev->prepare(tensors);
  const CallConfig cfg = resolve_for_call(defaults_);
  const uint64_t n = static_cast<uint64_t>(out.numel());
  auto post = [&](void* buf, size_t capacity) {
    return src < 0 ? p2p_comm_->irecv_any(buf, capacity, tag) : p2p_comm_->irecv(buf, capacity, src, tag);
  };
  // The progress thread sets the Work's source rank from the receive's status (any source).
  c10::intrusive_ptr<c10d::Work> work;
  if (compressed_path(out.scalar_type(), n, cfg)) {
    const fz::DType dt = compressed_dtype(out.scalar_type());
    // Room for the sender's stream whatever its chunk_size (the smallest chunks need the most:
    // 9 bytes per 32 values), so senders and receivers may differ in it; sized by the
    // receiver's own chunk_size, a stream of incompressible data from a sender with smaller
    // chunks did not fit and raised a misleading "size mismatch".
    auto stream = std::make_shared<std::vector<uint8_t>>(fz::max_compressed_size(dt, n, fz::kBlockLen));
    transport::Request req = post(stream->data(), stream->size());
    work = post_p2p(name, c10d::OpType::RECV, tensors, std::move(req), stream->size(),
                    [stream, out, dt, n, dev, on](size_t bytes, int source) mutable {
                      if (bytes == n * out.element_size() && !whole_stream(stream->data(), bytes)) {
                        throw std::invalid_argument(
                            "zccl: recv: configuration mismatch: rank " + std::to_string(source) +
                            " sent " + std::to_string(bytes) + " bytes, the size of this tensor " +
                            "uncompressed, where this receive expected a compressed stream" +
                            kSameDecision);
                      }
                      const fz::StreamInfo info = fz::read_info(stream->data(), bytes);
                      if (info.count != n || info.dtype != dt) {
                        throw std::invalid_argument(
                            "zccl: recv: size mismatch: rank " + std::to_string(source) + " sent " +
                            std::to_string(info.count) + " " + fz::dtype_name(info.dtype) +
                            " values, the receiving tensor holds " + std::to_string(n) + " " +
                            fz::dtype_name(dt) + " values");
                      }
                      at::Tensor buf = at::empty({static_cast<int64_t>(n)},
                                                 out.options().device(at::kCPU));
                      fz::decompress(stream->data(), bytes, buf.data_ptr(), n, 0);
                      dev->run(on, [&] { out.copy_(buf.view(out.sizes())); });
                    },
                    peer_desc("a compressed message", stream->size(), src, tag), on);
  } else {
    at::Tensor dense = out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
    at::Tensor buf = dev->host_view(dense, /*read=*/false, /*device_ok=*/false);
    const size_t bytes = n * out.element_size();
    transport::Request req = post(buf.data_ptr(), bytes);
    work = post_p2p(name, c10d::OpType::RECV, tensors, std::move(req), bytes,
                    [buf, dense, out, bytes, n, dev, on](size_t got, int source) mutable {
                      // A whole stream where raw values were expected: a compressing sender
                      // (a stream of another size, or of this tensor's own dtype and count,
                      // which only that sender makes). Float tensors only: integers never
                      // compress, and a stream's bytes may be an integer tensor's payload.
                      const auto* data = static_cast<const uint8_t*>(buf.data_ptr());
                      const bool floating = is_compressible_dtype(out.scalar_type());
                      const std::optional<fz::StreamInfo> info =
                          floating ? whole_stream(data, got) : std::nullopt;
                      if (info && (got != bytes || (info->count == n &&
                                                    info->dtype == compressed_dtype(out.scalar_type())))) {
                        throw std::invalid_argument(
                            "zccl: recv: configuration mismatch: rank " + std::to_string(source) +
                            " sent a compressed message (" + stream_desc(*info) + ") where this " +
                            "receive expected " + std::to_string(bytes) + " uncompressed bytes" +
                            kSameDecision);
                      }
                      if (got != bytes) {
                        throw std::invalid_argument("zccl: recv: size mismatch: rank " + std::to_string(source) +
                                                    " sent " + std::to_string(got) +
                                                    " bytes, the receiving tensor holds " +
                                                    std::to_string(bytes));
                      }
                      dev->run(on, [&] {
                        dev->from_host(dense, buf);
                        if (!dense.is_same(out)) out.copy_(dense);
                      });
                    },
                    peer_desc("a message", bytes, src, tag), on,
                    is_compressible_dtype(out.scalar_type()) ? longer_stream_hint() : "");
  }
  return work;
}

// ------------------------------------------------------------------------------------------
// Monitored barrier (the protocol of Gloo's, written for our transport): ranks != 0 send their
// arrival to rank 0 and wait for its verdict; rank 0 waits at most `timeout` for every arrival,
// then sends each arrived rank the verdict (the failed ranks, or none) and raises if any failed.
// Runs on the worker thread, in order with the collectives, on one tag block of the collective
// communicator (every rank takes the same block).

void ZcclBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  auto work = enqueue("monitored_barrier", c10d::OpType::BARRIER, {}, *cpu_, {},
                      [this, timeout, waitAllRanks](Device&, const CallConfig&) {
                        run_monitored_barrier(timeout, waitAllRanks);
                      });
  // The job bounds itself (rank 0 by `timeout`, the others by the group's timeout): wait for it.
  work->wait(std::max(timeout, timeout_) + std::chrono::seconds(5));
}

void ZcclBackend::run_monitored_barrier(std::chrono::milliseconds timeout, bool wait_all_ranks) {
  // Fixed tags above the users' [0, 32767] on the p2p communicator: a rank that skipped an earlier
  // (failed) monitored barrier must still meet the others at the next one, so the tags cannot come
  // from a per-call counter. (A rank that arrives after rank 0 gave up leaves its arrival behind;
  // the next monitored barrier takes it for that rank's arrival, as the protocol has no epoch.)
  constexpr int kArriveTag = 32768 + 1, kVerdictTag = 32768 + 2;
  const bool fixed = p2p_comm_->tag_ub() >= kVerdictTag;
  transport::Comm& comm = fixed ? *p2p_comm_ : *comm_;
  const int p = comm.size(), r = comm.rank();
  const int base = fixed ? 0 : comm_->next_tag_base();
  const int tag_arrive = fixed ? kArriveTag : base, tag_verdict = fixed ? kVerdictTag : base + 1;
  // Verdict: [count of failed ranks, the failed ranks...] (int64, at most p values).
  std::vector<int64_t> verdict(static_cast<size_t>(p) + 1, 0);
  if (r != 0) {
    const int64_t me = r;
    comm.send(&me, sizeof(me), 0, tag_arrive);
    const size_t got = comm.recv(verdict.data(), verdict.size() * sizeof(int64_t), 0, tag_verdict);
    if (got < sizeof(int64_t) || verdict[0] == 0) return;
    std::string failed;
    for (int64_t i = 1; i <= verdict[0] && i < static_cast<int64_t>(verdict.size()); ++i) {
      failed += (failed.empty() ? "" : ", ") + std::to_string(verdict[static_cast<size_t>(i)]);
    }
    // Gloo's wording first (torch's tests and users' log filters look for it), then the cause.
    throw std::runtime_error("zccl: Rank " + std::to_string(r) +
                             " successfully reached monitoredBarrier, but received errors while waiting "
                             "for send/recv from rank 0: rank 0 reported that rank(s) " + failed +
                             " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms");
  }
  // The receives of ranks that never arrive are cancelled when `recvs` is destroyed.
  std::vector<int64_t> arrivals(static_cast<size_t>(p), -1);
  std::vector<transport::Request> recvs(static_cast<size_t>(p));
  for (int q = 1; q < p; ++q) recvs[q] = comm.irecv(&arrivals[q], sizeof(int64_t), q, tag_arrive);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> arrived(static_cast<size_t>(p), false);
  arrived[0] = true;
  for (;;) {
    bool all = true;
    for (int q = 1; q < p; ++q) {
      if (!arrived[q] && comm.test(recvs[q])) arrived[q] = true;
      all = all && arrived[q];
    }
    if (all || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Without wait_all_ranks Gloo reports the first rank (in rank order) that did not answer.
  std::vector<int> failed;
  for (int q = 1; q < p; ++q) {
    if (!arrived[q] && (wait_all_ranks || failed.empty())) failed.push_back(q);
  }
  verdict[0] = static_cast<int64_t>(failed.size());
  for (size_t i = 0; i < failed.size(); ++i) verdict[i + 1] = failed[i];
  std::vector<transport::Request> sends;
  for (int q = 1; q < p; ++q) {
    if (arrived[q]) sends.push_back(comm.isend(verdict.data(), verdict.size() * sizeof(int64_t), q, tag_verdict));
  }
  comm.wait_all(sends);
  if (failed.empty()) return;
  std::string list;
  for (int q : failed) list += (list.empty() ? "" : ", ") + std::to_string(q);
  std::string msg = "zccl: [Rank 0]: ";
  // As with Gloo: a zero timeout leaves no time to wait for anyone ("timed out"); otherwise the
  // ranks whose arrival never came "failed to pass".
  if (timeout.count() <= 0 && !wait_all_ranks) {
    msg += "Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) + " ms; ";
  }
  msg += std::string(failed.size() == 1 ? "Rank " : "Ranks ") + list + " failed to pass monitoredBarrier in " +
         std::to_string(timeout.count()) + " ms";
  throw std::runtime_error(msg);
}

}  // namespace zccl::backend
