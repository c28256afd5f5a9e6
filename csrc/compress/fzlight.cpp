// fZ-light stream assembly: header, chunk table, per-chunk encode/decode, OpenMP over chunks.
// Format: fzlight_format.h. Block kernels: fzlight_block.h.
#include "fzlight.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>

#include "crc32c.h"
#include "fzlight_block.h"
#include "fzlight_format.h"

namespace zccl::fz {
namespace {

namespace fmt = format;

// Bins are 2*eb shrunk by 2^-10: exact-arithmetic quantisation error is then at most
// eb*(1-2^-10), leaving room for the float rounding of x/bin and of q*bin, so the verification in
// the encoder almost never has to store a value exactly. Cost: log2(1/(1-2^-10)) = 0.0014
// bits/value. (With plain 2*eb bins about 1 value in 10^4 becomes an outlier at REL 1e-4.)
constexpr double kBinShrink = 1.0 - 1.0 / 1024.0;

template <class T>
using Quantizer = block::Quantizer<T>;

// Outliers found while encoding one chunk; reserved once per thread, so encoding never allocates.
template <class T>
struct OutlierBuffer {
  std::vector<uint16_t> index;
  std::vector<T> value;
  explicit OutlierBuffer(uint32_t chunk_len) {
    index.reserve(chunk_len);
    value.reserve(chunk_len);
  }
};

[[noreturn]] void corrupt(const std::string& what) {
  throw StreamError("zccl: corrupt or truncated compressed stream: " + what);
}

void check_chunk_len(uint32_t chunk_len) {
  if (chunk_len < kBlockLen || chunk_len > kMaxChunkLen || chunk_len % kBlockLen != 0) {
    throw ArgumentError("zccl: chunk length must be a multiple of " + std::to_string(kBlockLen) +
                        " in [" + std::to_string(kBlockLen) + ", " +
                        std::to_string(kMaxChunkLen) + "], got " + std::to_string(chunk_len));
  }
}

// Threads for `units` of work: at most one per unit, so tiny inputs skip the parallel region
// (whose start-up costs more than a few chunks of work).
int resolve_threads(int threads, uint64_t units) {
  const int t = threads > 0 ? threads : default_threads();
  return static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(static_cast<uint64_t>(t), units)));
}

// Parallel units of chunk work: four default-sized chunks (~80 KB of float32) per thread at least.
uint64_t chunk_units(uint64_t chunks) { return (chunks + 3) / 4; }

size_t raw_chunk_bytes(uint32_t m, size_t elem) { return 1 + static_cast<size_t>(m) * elem; }

uint32_t chunk_values(uint64_t count, uint32_t chunk_len, uint64_t c) {
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_len, count - c * chunk_len));
}

// ------------------------------------------------------------------------------------------
// One chunk.

template <class T>
size_t encode_chunk(const T* x, uint32_t m, const Quantizer<T>* qz, uint8_t* dst,
                    OutlierBuffer<T>& outliers) {
  const size_t raw_bytes = raw_chunk_bytes(m, sizeof(T));
  auto write_raw = [&] {
    dst[0] = fmt::kChunkRaw;
    std::memcpy(dst + 1, x, static_cast<size_t>(m) * sizeof(T));
    return raw_bytes;
  };
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  if (qz == nullptr || fmt::kEncodedChunkFixedBytes + nblocks >= raw_bytes) return write_raw();

  uint8_t* lens = dst + fmt::kEncodedChunkFixedBytes;
  size_t pos = fmt::kEncodedChunkFixedBytes + nblocks;
  outliers.index.clear();
  outliers.value.clear();
  alignas(32) int32_t q[kBlockLen];
  alignas(32) T padded[kBlockLen];
  uint32_t words[kBlockLen + 1];
  int32_t prev = 0;
  for (uint32_t b = 0; b < nblocks; ++b) {
    const uint32_t base = b * kBlockLen;
    const uint32_t n = std::min(kBlockLen, m - base);
    const T* xb = x + base;
    if (n < kBlockLen) {  // partial last block: pad, and later repeat the last code (delta 0)
      std::fill(padded, padded + kBlockLen, T(0));
      std::copy(xb, xb + n, padded);
      xb = padded;
    }
    uint32_t bad = block::quantize(xb, *qz, q);
    if (n < kBlockLen) bad &= (1u << n) - 1u;
    if (b == 0) {
      prev = (bad & 1u) ? 0 : q[0];
      fmt::store<int32_t>(dst + 1, prev);
    }
    // Outliers take the prediction (delta 0) and are patched with their exact value on decode.
    for (uint32_t rest = bad; rest != 0; rest &= rest - 1) {
      const int i = __builtin_ctz(rest);
      q[i] = i == 0 ? prev : q[i - 1];
      outliers.index.push_back(static_cast<uint16_t>(base + static_cast<uint32_t>(i)));
      outliers.value.push_back(xb[i]);
    }
    for (uint32_t i = n; i < kBlockLen; ++i) q[i] = q[n - 1];
    const int len = block::pack(q, prev, words);
    const size_t need = len == 0 ? 0 : 4u * static_cast<size_t>(len + 1);
    if (pos + need > raw_bytes) return write_raw();
    lens[b] = static_cast<uint8_t>(len);
    std::memcpy(dst + pos, words, need);
    pos += need;
    prev = q[kBlockLen - 1];
  }
  const size_t n_out = outliers.index.size();
  if (pos + n_out * (2 + sizeof(T)) > raw_bytes) return write_raw();
  dst[0] = fmt::kChunkEncoded;
  fmt::store<uint32_t>(dst + 5, static_cast<uint32_t>(n_out));
  if (n_out > 0) {  // memcpy from an empty vector's null data() is undefined even for 0 bytes
    std::memcpy(dst + pos, outliers.index.data(), n_out * 2);
    std::memcpy(dst + pos + n_out * 2, outliers.value.data(), n_out * sizeof(T));
  }
  return pos + n_out * (2 + sizeof(T));
}

// Validates the chunk's structure against its recorded size, then decodes m values into out.
template <class T>
void decode_chunk(const uint8_t* src, size_t size, uint32_t m, T bin, uint64_t c, T* out) {
  const std::string where = "chunk " + std::to_string(c);
  if (src[0] == fmt::kChunkRaw) {
    if (size != raw_chunk_bytes(m, sizeof(T))) corrupt(where + ": raw chunk has the wrong size");
    std::memcpy(out, src + 1, static_cast<size_t>(m) * sizeof(T));
    return;
  }
  if (src[0] != fmt::kChunkEncoded) corrupt(where + ": unknown chunk mode");
  if (bin == T(0)) corrupt(where + ": encoded chunk in a lossless stream");
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  if (size < fmt::kEncodedChunkFixedBytes + nblocks) corrupt(where + ": shorter than its header");
  const uint8_t* lens = src + fmt::kEncodedChunkFixedBytes;
  const uint32_t n_out = fmt::load<uint32_t>(src + 5);
  if (n_out > m) corrupt(where + ": more outliers than values");
  size_t payload = 0;
  for (uint32_t b = 0; b < nblocks; ++b) {
    if (lens[b] > 31) corrupt(where + ": code length out of range");
    payload += lens[b] == 0 ? 0 : 4u * (lens[b] + 1u);
  }
  const size_t expected =
      fmt::kEncodedChunkFixedBytes + nblocks + payload + static_cast<size_t>(n_out) * (2 + sizeof(T));
  if (expected != size) corrupt(where + ": sizes inside the chunk do not add up");
  const uint8_t* idx_bytes = src + fmt::kEncodedChunkFixedBytes + nblocks + payload;
  for (uint32_t k = 0; k < n_out; ++k) {
    const uint16_t i = fmt::load<uint16_t>(idx_bytes + 2 * k);
    if (i >= m || (k > 0 && i <= fmt::load<uint16_t>(idx_bytes + 2 * (k - 1)))) {
      corrupt(where + ": outlier index out of order or out of range");
    }
  }

  int32_t carry = fmt::load<int32_t>(src + 1);
  const uint8_t* words = lens + nblocks;
  alignas(32) T tail[kBlockLen];
  for (uint32_t b = 0; b < nblocks; ++b) {
    const uint32_t base = b * kBlockLen;
    const uint32_t n = std::min(kBlockLen, m - base);
    const int len = lens[b];
    if (n == kBlockLen) {
      block::unpack(words, len, carry, bin, out + base);
    } else {
      block::unpack(words, len, carry, bin, tail);
      std::copy(tail, tail + n, out + base);
    }
    words += len == 0 ? 0 : 4u * (len + 1u);
  }
  const uint8_t* values = idx_bytes + 2 * static_cast<size_t>(n_out);
  for (uint32_t k = 0; k < n_out; ++k) {
    out[fmt::load<uint16_t>(idx_bytes + 2 * k)] = fmt::load<T>(values + k * sizeof(T));
  }
}

// ------------------------------------------------------------------------------------------
// Whole streams.

template <class T>
bool make_quantizer(double eb, Quantizer<T>& qz) {
  // Below the smallest normal of T the bound cannot be met by quantisation reliably (denormal
  // flushing modes differ between processes): store exactly.
  if (!(eb >= static_cast<double>(std::numeric_limits<T>::min()))) return false;
  const double bin = std::min(2.0 * eb * kBinShrink, static_cast<double>(std::numeric_limits<T>::max()));
  qz.bin = static_cast<T>(bin);
  qz.inv_bin = static_cast<T>(1.0 / static_cast<double>(qz.bin));
  qz.eb = eb;
  return true;
}

void write_header(uint8_t* dst, DType dt, uint64_t count, double eb, double bin,
                  uint32_t chunk_len, const std::vector<uint64_t>& shape) {
  std::memcpy(dst, fmt::kMagic, 4);
  dst[4] = fmt::kVersion;
  dst[5] = static_cast<uint8_t>(dt);
  dst[6] = static_cast<uint8_t>(kBlockLen);
  dst[7] = static_cast<uint8_t>(shape.size());
  fmt::store<uint64_t>(dst + 8, count);
  fmt::store<double>(dst + 16, eb);
  fmt::store<double>(dst + 24, bin);
  fmt::store<uint32_t>(dst + 32, chunk_len);
  fmt::store<uint32_t>(dst + 36, 0);
  for (size_t d = 0; d < shape.size(); ++d) fmt::store<uint64_t>(dst + 48 + 8 * d, shape[d]);
}

template <class T>
size_t compress_typed(const T* x, uint64_t count, const CompressParams& p,
                      const std::vector<uint64_t>& shape, uint8_t* dst, const Progress* progress) {
  Quantizer<T> qz{};
  const bool lossy = make_quantizer<T>(p.error_bound, qz);
  const Quantizer<T>* qzp = lossy ? &qz : nullptr;
  const uint32_t cl = p.chunk_len;
  const uint64_t chunks = fmt::num_chunks(count, cl);
  write_header(dst, std::is_same_v<T, float> ? DType::Float32 : DType::Float64, count,
               p.error_bound, lossy ? static_cast<double>(qz.bin) : 0.0, cl, shape);
  uint8_t* table = dst + fmt::kFixedHeaderBytes + 8 * shape.size();
  const size_t data_base = fmt::header_bytes(shape.size(), chunks);
  auto finish_chunk = [&](uint64_t c, const uint8_t* at, size_t bytes) {
    fmt::store<uint32_t>(table + 8 * c, static_cast<uint32_t>(bytes));
    fmt::store<uint32_t>(table + 8 * c + 4, crc32c(at, bytes));
  };

  size_t end = data_base;
  if (progress != nullptr) {
    // Pipelined: one chunk at a time on this thread, the caller's progress hook in between.
    OutlierBuffer<T> outliers(cl);
    for (uint64_t c = 0; c < chunks; ++c) {
      const size_t bytes = encode_chunk(x + c * cl, chunk_values(count, cl, c), qzp, dst + end, outliers);
      finish_chunk(c, dst + end, bytes);
      end += bytes;
      (*progress)(c + 1, chunks);
    }
  } else if (chunks > 0) {
    // Each thread encodes a contiguous run of chunks at that run's worst-case offset; the runs
    // are then slid down in order (compressed data is small, so the move is cheap).
    const int nt = resolve_threads(p.threads, chunk_units(chunks));
    const size_t full = raw_chunk_bytes(cl, sizeof(T));
    std::vector<size_t> run_bytes(static_cast<size_t>(nt), 0);
    // Built in place: copying a prototype would drop the reserved capacity.
    std::vector<OutlierBuffer<T>> buffers;
    buffers.reserve(static_cast<size_t>(nt));
    for (int t = 0; t < nt; ++t) buffers.emplace_back(cl);
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num();
      const uint64_t c0 = chunks * static_cast<uint64_t>(t) / static_cast<uint64_t>(nt);
      const uint64_t c1 = chunks * static_cast<uint64_t>(t + 1) / static_cast<uint64_t>(nt);
      size_t at = data_base + c0 * full;
      for (uint64_t c = c0; c < c1; ++c) {
        const size_t bytes = encode_chunk(x + c * cl, chunk_values(count, cl, c), qzp, dst + at,
                                          buffers[static_cast<size_t>(t)]);
        finish_chunk(c, dst + at, bytes);
        at += bytes;
      }
      run_bytes[static_cast<size_t>(t)] = at - (data_base + c0 * full);
    }
    for (int t = 0; t < nt; ++t) {
      const uint64_t c0 = chunks * static_cast<uint64_t>(t) / static_cast<uint64_t>(nt);
      std::memmove(dst + end, dst + data_base + c0 * full, run_bytes[static_cast<size_t>(t)]);
      end += run_bytes[static_cast<size_t>(t)];
    }
  }
  fmt::store<uint64_t>(dst + 40, end);
  fmt::store<uint32_t>(dst + data_base - 4, crc32c(dst, data_base - 4));
  return end;
}

// A parsed, validated header with the offset of every chunk.
struct Parsed {
  StreamInfo info;
  double bin = 0.0;
  std::vector<uint64_t> offsets;  // num_chunks + 1 entries
  const uint8_t* table = nullptr;
};

Parsed parse(const uint8_t* src, size_t len) {
  if (src == nullptr && len > 0) throw ArgumentError("zccl: null stream pointer");
  if (len < fmt::kFixedHeaderBytes + fmt::kHeaderCrcBytes) {
    corrupt("stream of " + std::to_string(len) + " bytes is shorter than the header");
  }
  if (std::memcmp(src, fmt::kMagic, 4) != 0) corrupt("bad magic (not a zccl fZ-light stream)");
  if (src[4] != fmt::kVersion) corrupt("unsupported format version " + std::to_string(src[4]));
  Parsed p;
  StreamInfo& info = p.info;
  if (src[5] != static_cast<uint8_t>(DType::Float32) && src[5] != static_cast<uint8_t>(DType::Float64)) {
    corrupt("unknown dtype code " + std::to_string(src[5]));
  }
  info.dtype = static_cast<DType>(src[5]);
  if (src[6] != kBlockLen) corrupt("unsupported block length " + std::to_string(src[6]));
  const size_t ndim = src[7];
  if (ndim > kMaxDims) corrupt("ndim " + std::to_string(ndim) + " exceeds " + std::to_string(kMaxDims));
  info.count = fmt::load<uint64_t>(src + 8);
  info.error_bound = fmt::load<double>(src + 16);
  p.bin = fmt::load<double>(src + 24);
  info.chunk_len = fmt::load<uint32_t>(src + 32);
  if (fmt::load<uint32_t>(src + 36) != 0) corrupt("reserved header field is not zero");
  info.total_bytes = fmt::load<uint64_t>(src + 40);
  if (info.chunk_len < kBlockLen || info.chunk_len > kMaxChunkLen || info.chunk_len % kBlockLen) {
    corrupt("invalid chunk length " + std::to_string(info.chunk_len));
  }
  // Bound the chunk count by the buffer before any size arithmetic can overflow.
  info.num_chunks = fmt::num_chunks(info.count, info.chunk_len);
  if (info.num_chunks > len / fmt::kTableEntryBytes) corrupt("chunk table larger than the stream");
  info.header_bytes = fmt::header_bytes(ndim, info.num_chunks);
  if (info.header_bytes > len) corrupt("stream ends inside its header or chunk table");
  if (crc32c(src, info.header_bytes - 4) != fmt::load<uint32_t>(src + info.header_bytes - 4)) {
    corrupt("header checksum mismatch");
  }
  if (info.total_bytes != len) {
    corrupt("stream has " + std::to_string(len) + " bytes but its header records " +
            std::to_string(info.total_bytes));
  }
  if (!std::isfinite(info.error_bound) || info.error_bound < 0) corrupt("invalid error bound");
  if (!std::isfinite(p.bin) || p.bin < 0) corrupt("invalid quantisation bin");
  if (p.bin > 2.0 * info.error_bound) corrupt("quantisation bin wider than twice the error bound");
  if (info.dtype == DType::Float32 && static_cast<double>(static_cast<float>(p.bin)) != p.bin) {
    corrupt("quantisation bin not representable in float32");
  }
  uint64_t product = 1;
  for (size_t d = 0; d < ndim; ++d) {
    const uint64_t dim = fmt::load<uint64_t>(src + 48 + 8 * d);
    info.shape.push_back(dim);
    if (dim != 0 && product > std::numeric_limits<uint64_t>::max() / dim) corrupt("shape overflows");
    product *= dim;
  }
  if (product != info.count) corrupt("shape does not match the element count");
  p.table = src + fmt::kFixedHeaderBytes + 8 * ndim;
  p.offsets.resize(info.num_chunks + 1);
  p.offsets[0] = info.header_bytes;
  const size_t elem = dtype_size(info.dtype);
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    const uint32_t bytes = fmt::load<uint32_t>(p.table + 8 * c);
    if (bytes == 0 || bytes > raw_chunk_bytes(chunk_values(info.count, info.chunk_len, c), elem)) {
      corrupt("chunk " + std::to_string(c) + " has an impossible size");
    }
    p.offsets[c + 1] = p.offsets[c] + bytes;
  }
  if (p.offsets[info.num_chunks] != len) corrupt("chunk sizes do not add up to the stream size");
  return p;
}

template <class T>
void decode_one(const uint8_t* src, const Parsed& p, uint64_t c, T* out) {
  const uint8_t* at = src + p.offsets[c];
  const size_t bytes = p.offsets[c + 1] - p.offsets[c];
  if (crc32c(at, bytes) != fmt::load<uint32_t>(p.table + 8 * c + 4)) {
    corrupt("chunk " + std::to_string(c) + " checksum mismatch");
  }
  decode_chunk<T>(at, bytes, chunk_values(p.info.count, p.info.chunk_len, c), static_cast<T>(p.bin),
                  c, out);
}

template <class T>
void decompress_typed(const uint8_t* src, const Parsed& p, T* out, int threads,
                      const Progress* progress) {
  const uint64_t chunks = p.info.num_chunks;
  const uint32_t cl = p.info.chunk_len;
  if (progress != nullptr) {
    for (uint64_t c = 0; c < chunks; ++c) {
      decode_one<T>(src, p, c, out + c * cl);
      (*progress)(c + 1, chunks);
    }
    return;
  }
  if (chunks == 0) return;
  // Exceptions may not leave an OpenMP region: keep the first failure and rethrow after it.
  std::mutex failure_lock;
  std::string failure;
  const int nt = resolve_threads(threads, chunk_units(chunks));
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t c = 0; c < static_cast<int64_t>(chunks); ++c) {
    try {
      decode_one<T>(src, p, static_cast<uint64_t>(c), out + static_cast<uint64_t>(c) * cl);
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> guard(failure_lock);
      if (failure.empty()) failure = e.what();
    }
  }
  if (!failure.empty()) throw StreamError(failure);
}

// Min/max of x[0..n) over finite values; a non-finite value contributes +inf to the min and -inf
// to the max, so the loop is branch-free.
template <class T>
void finite_minmax_scalar(const T* x, uint64_t n, T& lo, T& hi) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  for (uint64_t i = 0; i < n; ++i) {
    const bool ok = std::fabs(x[i]) <= std::numeric_limits<T>::max();
    lo = std::min(lo, ok ? x[i] : kInf);
    hi = std::max(hi, ok ? x[i] : -kInf);
  }
}

#if defined(__AVX2__)
// The same with AVX2 lanes and two accumulators per extreme.
struct MinMaxF32 {
  using V = __m256;
  static V splat(float v) { return _mm256_set1_ps(v); }
  static void step(V& l, V& h, const float* p) {
    const V v = _mm256_loadu_ps(p);
    const V ok = _mm256_cmp_ps(_mm256_andnot_ps(splat(-0.0f), v),
                               splat(std::numeric_limits<float>::max()), _CMP_LE_OQ);
    l = _mm256_min_ps(l, _mm256_blendv_ps(splat(std::numeric_limits<float>::infinity()), v, ok));
    h = _mm256_max_ps(h, _mm256_blendv_ps(splat(-std::numeric_limits<float>::infinity()), v, ok));
  }
};
struct MinMaxF64 {
  using V = __m256d;
  static V splat(double v) { return _mm256_set1_pd(v); }
  static void step(V& l, V& h, const double* p) {
    const V v = _mm256_loadu_pd(p);
    const V ok = _mm256_cmp_pd(_mm256_andnot_pd(splat(-0.0), v),
                               splat(std::numeric_limits<double>::max()), _CMP_LE_OQ);
    l = _mm256_min_pd(l, _mm256_blendv_pd(splat(std::numeric_limits<double>::infinity()), v, ok));
    h = _mm256_max_pd(h, _mm256_blendv_pd(splat(-std::numeric_limits<double>::infinity()), v, ok));
  }
};

template <class T, class K = std::conditional_t<std::is_same_v<T, float>, MinMaxF32, MinMaxF64>>
void finite_minmax(const T* x, uint64_t n, T& lo, T& hi) {
  using V = typename K::V;
  constexpr uint64_t kLanes = sizeof(V) / sizeof(T);
  V l0 = K::splat(std::numeric_limits<T>::infinity()), l1 = l0;
  V h0 = K::splat(-std::numeric_limits<T>::infinity()), h1 = h0;
  uint64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    K::step(l0, h0, x + i);
    K::step(l1, h1, x + i + kLanes);
  }
  alignas(32) T lbuf[2 * kLanes], hbuf[2 * kLanes];
  std::memcpy(lbuf, &l0, sizeof(V));
  std::memcpy(lbuf + kLanes, &l1, sizeof(V));
  std::memcpy(hbuf, &h0, sizeof(V));
  std::memcpy(hbuf + kLanes, &h1, sizeof(V));
  lo = *std::min_element(lbuf, lbuf + 2 * kLanes);
  hi = *std::max_element(hbuf, hbuf + 2 * kLanes);
  finite_minmax_scalar(x + i, n - i, lo, hi);
}
#else
template <class T>
void finite_minmax(const T* x, uint64_t n, T& lo, T& hi) {
  lo = std::numeric_limits<T>::infinity();
  hi = -std::numeric_limits<T>::infinity();
  finite_minmax_scalar(x, n, lo, hi);
}
#endif

template <class T>
FiniteRange finite_range_typed(const T* x, uint64_t count, int threads) {
  // At least ~256 KiB per thread: below that a parallel region costs more than it saves.
  const int nt = resolve_threads(threads, count / (1u << 16) + 1);
  std::vector<T> lo(static_cast<size_t>(nt)), hi(static_cast<size_t>(nt));
#pragma omp parallel num_threads(nt)
  {
    const uint64_t t = static_cast<uint64_t>(omp_get_thread_num());
    const uint64_t begin = count * t / static_cast<uint64_t>(nt);
    const uint64_t end = count * (t + 1) / static_cast<uint64_t>(nt);
    finite_minmax(x + begin, end - begin, lo[t], hi[t]);
  }
  const T l = *std::min_element(lo.begin(), lo.end());
  const T h = *std::max_element(hi.begin(), hi.end());
  if (!(l <= h)) return {};  // no finite value at all
  return {static_cast<double>(l), static_cast<double>(h), true};
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Public API.

FiniteRange finite_range(const void* src, DType dt, uint64_t count, int threads) {
  if (src == nullptr && count > 0) throw ArgumentError("zccl: null source pointer");
  if (dt == DType::Float32) return finite_range_typed(static_cast<const float*>(src), count, threads);
  return finite_range_typed(static_cast<const double*>(src), count, threads);
}

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::Float32: return sizeof(float);
    case DType::Float64: return sizeof(double);
  }
  throw ArgumentError("zccl: unknown dtype");
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "unknown";
}

int default_threads() { return std::max(1, omp_get_max_threads()); }

size_t max_compressed_size(DType dt, uint64_t count, uint32_t chunk_len, size_t ndim) {
  check_chunk_len(chunk_len);
  if (ndim > kMaxDims) throw ArgumentError("zccl: at most 64 dimensions");
  const uint64_t chunks = fmt::num_chunks(count, chunk_len);
  const uint64_t elem = dtype_size(dt);
  const uint64_t limit = std::numeric_limits<size_t>::max();
  if (count > (limit - fmt::header_bytes(ndim, 0)) / (elem + 1 + fmt::kTableEntryBytes)) {
    throw ArgumentError("zccl: " + std::to_string(count) + " values exceed the addressable size");
  }
  return fmt::header_bytes(ndim, chunks) + chunks + count * elem;
}

size_t compress(const void* src, DType dt, uint64_t count, const CompressParams& params,
                uint8_t* dst, size_t dst_cap, const Progress* progress) {
  check_chunk_len(params.chunk_len);
  if (!std::isfinite(params.error_bound) || params.error_bound < 0) {
    throw ArgumentError("zccl: error bound must be finite and >= 0, got " +
                        std::to_string(params.error_bound));
  }
  std::vector<uint64_t> shape = params.shape ? *params.shape : std::vector<uint64_t>{count};
  if (shape.size() > kMaxDims) throw ArgumentError("zccl: at most 64 dimensions");
  uint64_t product = 1;
  for (uint64_t d : shape) {
    if (d != 0 && product > std::numeric_limits<uint64_t>::max() / d) {
      throw ArgumentError("zccl: shape overflows 64 bits");
    }
    product *= d;
  }
  if (product != count) throw ArgumentError("zccl: shape does not match the element count");
  const size_t need = max_compressed_size(dt, count, params.chunk_len, shape.size());
  if (dst == nullptr || dst_cap < need) {
    throw ArgumentError("zccl: destination holds " + std::to_string(dst_cap) +
                        " bytes, compression may need " + std::to_string(need));
  }
  if (src == nullptr && count > 0) throw ArgumentError("zccl: null source pointer");
  switch (dt) {
    case DType::Float32:
      return compress_typed(static_cast<const float*>(src), count, params, shape, dst, progress);
    case DType::Float64:
      return compress_typed(static_cast<const double*>(src), count, params, shape, dst, progress);
  }
  throw ArgumentError("zccl: unknown dtype");
}

StreamInfo read_info(const uint8_t* src, size_t len) { return parse(src, len).info; }

void decompress(const uint8_t* src, size_t len, void* dst, uint64_t dst_count, int threads,
                const Progress* progress) {
  const Parsed p = parse(src, len);
  if (dst_count < p.info.count) {
    throw ArgumentError("zccl: destination holds " + std::to_string(dst_count) +
                        " values, the stream has " + std::to_string(p.info.count));
  }
  if (dst == nullptr && p.info.count > 0) throw ArgumentError("zccl: null destination pointer");
  if (p.info.dtype == DType::Float32) {
    decompress_typed(src, p, static_cast<float*>(dst), threads, progress);
  } else {
    decompress_typed(src, p, static_cast<double*>(dst), threads, progress);
  }
}

uint64_t decompress_chunk(const uint8_t* src, size_t len, uint64_t index, void* dst,
                          uint64_t dst_count) {
  const Parsed p = parse(src, len);
  if (index >= p.info.num_chunks) {
    throw std::out_of_range("zccl: chunk index " + std::to_string(index) + " out of range (stream has " +
                            std::to_string(p.info.num_chunks) + " chunks)");
  }
  const uint32_t m = chunk_values(p.info.count, p.info.chunk_len, index);
  if (dst_count < m) throw ArgumentError("zccl: destination too small for the chunk");
  if (dst == nullptr) throw ArgumentError("zccl: null destination pointer");
  if (p.info.dtype == DType::Float32) {
    decode_one(src, p, index, static_cast<float*>(dst));
  } else {
    decode_one(src, p, index, static_cast<double*>(dst));
  }
  return m;
}

}  // namespace zccl::fz
