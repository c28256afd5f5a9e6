// The checked, accounted codec of the CPU collectives (see codec.h).
#include "codec.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include "timing.h"

namespace zccl::coll::toolkit {

void throw_size_mismatch(const char* op, const std::string& detail) {
  throw std::runtime_error(std::string("zccl: size mismatch across ranks: ") + op + ": " + detail);
}

std::exception_ptr size_mismatch(const char* op, const std::string& detail) {
  try {
    throw_size_mismatch(op, detail);
  } catch (...) {
    return std::current_exception();
  }
}

namespace {

// MPI_Test is not free: with Open MPI's TCP transport each call polls the sockets, and an
// oversubscribed run (mpi_yield_when_idle) gives the core away whenever nothing moved. Polling
// after every chunk (~20 KB, a few microseconds of compression) made the ring's compression about
// 2.5x slower on the emulated 1 Gbit/s cluster; polling at most every kPollInterval keeps the
// transfers fed (a 1 Gbit/s link drains ~6 KB in 50 us, a 10 Gbit/s one ~60 KB) at a negligible
// cost. The last chunk always polls, so a transfer that can finish is seen finishing.
constexpr double kPollIntervalSeconds = 50e-6;

// The pipelined path calls the hook from this thread only, so the throttle needs no lock.
std::optional<fz::Progress> throttled(const fz::Progress* inner) {
  if (inner == nullptr) return std::nullopt;
  return fz::Progress([inner, last = Clock::now()](uint64_t done, uint64_t total) mutable {
    if (done == total || seconds_since(last) >= kPollIntervalSeconds) {
      (*inner)(done, total);
      last = Clock::now();
    }
  });
}

}  // namespace

DType Codec::reduction_wire(DType dt, const Config& cfg) {
  if (cfg.wire_half == DType::Float32) return dt;
  if (dt != DType::Float32 || (cfg.wire_half != DType::Float16 && cfg.wire_half != DType::BFloat16)) {
    throw std::invalid_argument("zccl: wire_half needs float32 data and a float16/bfloat16 wire type");
  }
  return cfg.wire_half;
}

size_t Codec::capacity(size_t n) const { return fz::max_compressed_size(wire_, n, cfg_.chunk_len); }

fz::CompressParams Codec::params() const {
  fz::CompressParams params;
  params.error_bound = eb_;
  params.chunk_len = cfg_.chunk_len;
  params.threads = cfg_.threads;
  return params;
}

size_t Codec::compress(const void* src, size_t n, uint8_t* dst, size_t cap,
                       const fz::Progress* progress) {
  const AddSeconds timed(stats_.compress_seconds);
  if (wire_ != dt_) {  // float32 partial results travel as half streams
    uint8_t* half = workspace_bytes(kSlotWireOut, n * fz::dtype_size(wire_));
    fz::narrow_to_half(static_cast<const float*>(src), wire_, n, half);
    src = half;
  }
  const std::optional<fz::Progress> hook = throttled(progress);
  const size_t bytes = fz::compress(src, wire_, n, params(), dst, cap, hook ? &*hook : nullptr);
  stats_.bytes_compressed += n * fz::dtype_size(wire_);
  return bytes;
}

void Codec::compress(const void* src, size_t n, Bytes& out) {
  out.resize(capacity(n));
  out.resize(compress(src, n, out.data(), out.size()));
}

void Codec::check_stream(const fz::StreamInfo& info, size_t expected, int peer) const {
  if (info.count == expected && info.dtype == wire_) return;
  if (op_ != nullptr) {
    throw_size_mismatch(op_, "the block from rank " + std::to_string(peer) + " holds " +
                                 std::to_string(info.count) + " " + fz::dtype_name(info.dtype) +
                                 " values, this rank expects " + std::to_string(expected) + " " +
                                 fz::dtype_name(wire_) + " values");
  }
  throw std::runtime_error(
      "zccl: size mismatch across ranks: expected a " + std::string(fz::dtype_name(wire_)) +
      " stream of " + std::to_string(expected) + " values from rank " + std::to_string(peer) +
      ", received " + std::string(fz::dtype_name(info.dtype)) + " x " +
      std::to_string(info.count) +
      " (do all ranks call the collective with the same count, dtype and op?)");
}

template <class Decode>
void Codec::decode_checked(const uint8_t* src, size_t len, size_t expected, int peer,
                           const fz::Progress* progress, Decode&& decode) {
  const AddSeconds timed(stats_.decompress_seconds);
  const fz::StreamInfo info = fz::read_info(src, len);
  check_stream(info, expected, peer);
  stats_.received_error_bound = info.error_bound;
  const std::optional<fz::Progress> hook = throttled(progress);
  decode(hook ? &*hook : nullptr);
}

uint8_t* Codec::decode_half(const uint8_t* src, size_t len, size_t expected,
                            const fz::Progress* hook) {
  uint8_t* const half = workspace_bytes(kSlotWireIn, expected * fz::dtype_size(wire_));
  fz::decompress(src, len, half, expected, cfg_.threads, hook);
  return half;
}

void Codec::decompress(const uint8_t* src, size_t len, void* dst, size_t expected, int peer,
                       const fz::Progress* progress) {
  decode_checked(src, len, expected, peer, progress, [&](const fz::Progress* hook) {
    if (wire_ == dt_) {
      fz::decompress(src, len, dst, expected, cfg_.threads, hook);
    } else {
      fz::widen_half(decode_half(src, len, expected, hook), wire_, expected,
                     static_cast<float*>(dst));
    }
  });
}

template <class T>
void Codec::decompress_add(const uint8_t* src, size_t len, const T* addend, T* dst,
                           size_t expected, int peer, const fz::Progress* progress) {
  decode_checked(src, len, expected, peer, progress, [&](const fz::Progress* hook) {
    if (wire_ == dt_) {
      fz::decompress_add(src, len, addend, dst, expected, cfg_.threads, hook);
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      // Half streams: widened and added a piece at a time through a small buffer, so that dst
      // may be addend.
      const uint8_t* const half = decode_half(src, len, expected, hook);
      constexpr size_t kPiece = 4096;
      float widened[kPiece];
      for (size_t i = 0; i < expected; i += kPiece) {
        const size_t m = std::min(kPiece, expected - i);
        fz::widen_half(half + i * fz::dtype_size(wire_), wire_, m, widened);
        for (size_t k = 0; k < m; ++k) dst[i + k] = addend[i + k] + widened[k];
      }
    } else {
      throw std::logic_error("zccl: half streams carry float32 values only");
    }
  });
}

template void Codec::decompress_add<float>(const uint8_t*, size_t, const float*, float*, size_t,
                                           int, const fz::Progress*);
template void Codec::decompress_add<double>(const uint8_t*, size_t, const double*, double*,
                                            size_t, int, const fz::Progress*);

template <class T>
size_t Codec::recompress_add(const uint8_t* src, size_t len, const T* addend, size_t n, int peer,
                             T* scratch, uint8_t* dst, size_t cap,
                             const fz::Progress* progress) {
  const fz::StreamInfo info = fz::read_info(src, len);
  if (wire_ != dt_ || info.chunk_len != cfg_.chunk_len) {
    decompress_add(src, len, addend, scratch, n, peer, progress);
    return compress(scratch, n, dst, cap, progress);
  }
  const AddSeconds timed(stats_.compress_seconds);
  check_stream(info, n, peer);
  stats_.received_error_bound = info.error_bound;
  const std::optional<fz::Progress> hook = throttled(progress);
  const size_t bytes =
      fz::recompress_add(src, len, addend, n, params(), dst, cap, hook ? &*hook : nullptr);
  stats_.bytes_compressed += n * sizeof(T);
  return bytes;
}

template size_t Codec::recompress_add<float>(const uint8_t*, size_t, const float*, size_t, int,
                                             float*, uint8_t*, size_t, const fz::Progress*);
template size_t Codec::recompress_add<double>(const uint8_t*, size_t, const double*, size_t, int,
                                              double*, uint8_t*, size_t, const fz::Progress*);

std::optional<CodeCodec> CodeCodec::for_reduction(double eb, int ranks, Stats& stats) {
  const std::optional<fz::codes::Grid> grid = fz::codes::make_grid(eb, ranks);
  if (!grid) return std::nullopt;
  return CodeCodec(*grid, stats);
}

namespace {

[[noreturn]] void segment_count_mismatch(const fz::codes::CountMismatch& e, int peer) {
  throw std::runtime_error(std::string("zccl: size mismatch across ranks: from rank ") +
                           std::to_string(peer) + ": " + e.what() +
                           " (do all ranks call the collective with the same count, dtype and op?)");
}

}  // namespace

template <class T>
size_t CodeCodec::combine(const uint8_t* in, size_t in_len, const T* x, size_t n, uint8_t* dst,
                          size_t cap, int peer, const fz::Progress* progress, T* values) {
  const AddSeconds timed(stats_.compress_seconds);
  const std::optional<fz::Progress> hook = throttled(progress);
  try {
    const size_t bytes =
        fz::codes::combine(in, in_len, x, n, grid_, dst, cap, hook ? &*hook : nullptr, values);
    stats_.bytes_compressed += n * sizeof(T);
    return bytes;
  } catch (const fz::codes::CountMismatch& e) {
    segment_count_mismatch(e, peer);
  }
}

template <class T>
void CodeCodec::decode(const uint8_t* src, size_t len, T* out, size_t n, int peer,
                       const fz::Progress* progress) {
  const AddSeconds timed(stats_.decompress_seconds);
  const std::optional<fz::Progress> hook = throttled(progress);
  try {
    fz::codes::decode(src, len, n, grid_, out, hook ? &*hook : nullptr);
  } catch (const fz::codes::CountMismatch& e) {
    segment_count_mismatch(e, peer);
  }
}

template size_t CodeCodec::combine<float>(const uint8_t*, size_t, const float*, size_t, uint8_t*,
                                          size_t, int, const fz::Progress*, float*);
template size_t CodeCodec::combine<double>(const uint8_t*, size_t, const double*, size_t,
                                           uint8_t*, size_t, int, const fz::Progress*, double*);
template void CodeCodec::decode<float>(const uint8_t*, size_t, float*, size_t, int,
                                       const fz::Progress*);
template void CodeCodec::decode<double>(const uint8_t*, size_t, double*, size_t, int,
                                        const fz::Progress*);

}  // namespace zccl::coll::toolkit
