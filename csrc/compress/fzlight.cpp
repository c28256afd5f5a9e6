// fZ-light stream assembly: header, chunk table, per-chunk encode/decode, OpenMP over chunks.
// Format: fzlight_format.h. Block kernels: fzlight_block.h.
#include "fzlight.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "crc32c.h"
#include "fzlight_block.h"
#include "fzlight_format.h"

#if defined(ZCCL_WITH_ZSTD)
#include <zstd.h>
#endif

namespace zccl::fz {
namespace {

namespace fmt = format;

// Bins are 2*eb shrunk by 2^-10: exact-arithmetic quantisation error is then at most
// eb*(1-2^-10), leaving room for the float rounding of x/bin and of q*bin, so the verification in
// the encoder almost never has to store a value exactly. Cost: log2(1/(1-2^-10)) = 0.0014
// bits/value. (With plain 2*eb bins about 1 value in 10^4 becomes an outlier at REL 1e-4.)
constexpr double kBinShrink = 1.0 - 1.0 / 1024.0;

size_t raw_chunk_bytes(uint32_t m, size_t elem) { return 1 + static_cast<size_t>(m) * elem; }

// Lossless codec 1 (fzlight_format.h): byte k of every value into plane k, so the exponent and
// high mantissa bytes, which repeat, sit together where zstd finds them. Measured against the
// alternatives in benchmarks/lossless_candidates.py (see README, "Lossless mode").
void byte_planes_split(const uint8_t* src, uint32_t m, size_t elem, uint8_t* planes) {
  for (size_t k = 0; k < elem; ++k) {
    uint8_t* plane = planes + k * m;
    for (uint32_t i = 0; i < m; ++i) plane[i] = src[i * elem + k];
  }
}

void byte_planes_join(const uint8_t* planes, uint32_t m, size_t elem, uint8_t* dst) {
  for (size_t k = 0; k < elem; ++k) {
    const uint8_t* plane = planes + k * m;
    for (uint32_t i = 0; i < m; ++i) dst[i * elem + k] = plane[i];
  }
}

#if defined(ZCCL_WITH_ZSTD)
// zstd level 1: the fastest level that still finds the byte planes' repeats (level 3 gains a few
// percent of ratio at half the speed, measured in benchmarks/lossless_candidates.py).
constexpr int kZstdLevel = 1;

// One thread's zstd contexts, created on first use and freed with the scratch.
class ZstdContexts {
 public:
  // Compresses n bytes into dst (room for `cap`); 0 when the frame would not be smaller than cap.
  size_t compress(const uint8_t* src, size_t n, uint8_t* dst, size_t cap) {
    if (!cctx_) cctx_.reset(ZSTD_createCCtx());
    if (!cctx_) throw std::bad_alloc();
    const size_t r = ZSTD_compressCCtx(cctx_.get(), dst, cap, src, n, kZstdLevel);
    return ZSTD_isError(r) || r >= cap ? 0 : r;
  }
  // True when the frame decodes to exactly n bytes.
  bool decompress(const uint8_t* src, size_t len, uint8_t* dst, size_t n) {
    if (!dctx_) dctx_.reset(ZSTD_createDCtx());
    if (!dctx_) throw std::bad_alloc();
    // Exactly one frame (ZSTD_decompressDCtx would go on through any frames after it) that
    // records its content size, and that size is the chunk's.
    if (ZSTD_findFrameCompressedSize(src, len) != len) return false;
    if (ZSTD_getFrameContentSize(src, len) != n) return false;
    const size_t r = ZSTD_decompressDCtx(dctx_.get(), dst, n, src, len);
    return !ZSTD_isError(r) && r == n;
  }

 private:
  struct FreeC {
    void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  };
  struct FreeD {
    void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
  };
  std::unique_ptr<ZSTD_CCtx, FreeC> cctx_;
  std::unique_ptr<ZSTD_DCtx, FreeD> dctx_;
};
#else
// Built without zstd: codec 1 is unavailable (compress falls back to raw chunks, and parse()
// refuses codec-1 streams with a clear error before any chunk is decoded).
class ZstdContexts {
 public:
  size_t compress(const uint8_t*, size_t, uint8_t*, size_t) { return 0; }
  bool decompress(const uint8_t*, size_t, uint8_t*, size_t) { return false; }
};
#endif

template <class T>
using Quantizer = block::Quantizer<T>;

// Per-thread memory of the lossless codec (empty unless the stream uses it): what a decoder
// needs, and part of what an encoder needs.
struct LosslessScratch {
  std::vector<uint8_t> bytes;  // byte planes of one chunk
  ZstdContexts zstd;
  LosslessScratch(uint32_t chunk_len, size_t elem, bool lossless)
      : bytes(lossless ? static_cast<size_t>(chunk_len) * elem : 0) {}
};

// Per-thread working memory of the chunk encoder, sized once for the stream's chunk length so
// encoding never allocates per chunk.
template <class S>
struct Scratch {
  std::vector<uint16_t> outlier_index;
  std::vector<S> outlier_value;
  std::vector<uint8_t> planes;   // encoded blocks' planes when they cannot go in place
  std::vector<uint8_t> lengths;  // code lengths of the nonzero blocks
  // encode_both: the chunk's codes as an encoded chunk (Lorenzo, effective codes) and as a
  // direct chunk codes them, and each block's code length either way.
  std::vector<int32_t> lorenzo_codes, direct_codes;
  std::vector<uint8_t> lorenzo_lengths, direct_lengths;
  int32_t q_start = 0;
  // Which predictor this thread's last lossy chunk took: the next one is coded first the way
  // that suggests (encode_chunk). Only speed depends on it, never the bytes.
  bool guess_direct = false;
  LosslessScratch lossless;
  uint32_t chunk_len;
  bool zstd;
  explicit Scratch(uint32_t chunk_len_, bool zstd_)
      : planes(raw_chunk_bytes(chunk_len_, sizeof(S))),
        lengths(chunk_len_ / kBlockLen + 1),
        lorenzo_codes(static_cast<size_t>(chunk_len_ / kBlockLen + 1) * kBlockLen),
        direct_codes(lorenzo_codes.size()),
        lorenzo_lengths(chunk_len_ / kBlockLen + 1),
        direct_lengths(chunk_len_ / kBlockLen + 1),
        lossless(chunk_len_, sizeof(S), zstd_), chunk_len(chunk_len_), zstd(zstd_) {
    outlier_index.reserve(chunk_len);
    outlier_value.reserve(chunk_len);
  }
};

// Encoder scratch kept between calls, one per thread of a call: building it per thread per call
// (allocations, planes zeroed) cost the threaded compression of a 1 MiB ring segment ~25%.
// Holds its scratches for one call and gives them back to a pool (locked; at most kKept kept)
// when it goes out of scope.
template <class S>
class PooledScratch {
 public:
  PooledScratch(int n, uint32_t chunk_len, bool zstd) {
    {
      const std::lock_guard<std::mutex> guard(lock());
      auto& free = pool();
      for (auto it = free.begin(); it != free.end() && held_.size() < static_cast<size_t>(n);) {
        if ((*it)->chunk_len == chunk_len && (*it)->zstd == zstd) {
          held_.push_back(std::move(*it));
          it = free.erase(it);
        } else {
          ++it;
        }
      }
    }
    while (held_.size() < static_cast<size_t>(n)) {
      held_.push_back(std::make_unique<Scratch<S>>(chunk_len, zstd));
    }
  }
  ~PooledScratch() {
    const std::lock_guard<std::mutex> guard(lock());
    auto& free = pool();
    for (auto& s : held_) {
      if (free.size() < kKept) free.push_back(std::move(s));
    }
  }
  PooledScratch(const PooledScratch&) = delete;
  PooledScratch& operator=(const PooledScratch&) = delete;
  Scratch<S>& operator[](size_t t) { return *held_[t]; }

 private:
  static constexpr size_t kKept = 128;
  static std::mutex& lock() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::unique_ptr<Scratch<S>>>& pool() {
    static std::vector<std::unique_ptr<Scratch<S>>> p;
    return p;
  }
  std::vector<std::unique_ptr<Scratch<S>>> held_;
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

// The progress hook of a threaded pipelined call: only the calling thread (OpenMP's thread 0,
// which is the thread that entered the region) runs it, between its own chunks, so MPI is polled
// from the thread that owns the communicator while the other threads keep coding. The first
// exception it throws stops every thread at its next chunk and is rethrown after the region.
class ThreadedProgress {
 public:
  ThreadedProgress(const Progress* progress, uint64_t total)
      : progress_(progress), total_(total) {}
  // After a chunk on thread t; false once the call must stop. The hook is told the chunks all
  // threads finished: an estimate from thread 0's own count reached `total` long before the end
  // when thread 0 coded more than its share (or ran alone in a smaller team), and the
  // collectives' hook then polled MPI after every chunk (it always polls on the last).
  bool after_chunk(int t) {
    const uint64_t done = finished_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (stop_.load(std::memory_order_relaxed)) return false;
    if (t != 0 || progress_ == nullptr) return true;
    try {
      (*progress_)(done, total_);  // each chunk counts once: done <= total
    } catch (...) {
      error_ = std::current_exception();
      stop_.store(true, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }
  // Stops every thread at its next chunk (an error outside the hook; the caller keeps it).
  void stop() { stop_.store(true, std::memory_order_relaxed); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  const Progress* progress_;
  uint64_t total_;
  std::atomic<uint64_t> finished_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;  // written by thread 0 only, read after the region
};

// Parallel units of chunk work: four default-sized chunks (~80 KB of float32) per thread at least.
uint64_t chunk_units(uint64_t chunks) { return (chunks + 3) / 4; }

// Runs of chunks per compression thread, taken in turn (compress_typed).
constexpr uint64_t kRunsPerThread = 8;

uint32_t chunk_values(uint64_t count, uint32_t chunk_len, uint64_t c) {
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_len, count - c * chunk_len));
}

// True when all m values have the same bits (a constant chunk). memcmp of the chunk against
// itself shifted by one value stops at the first difference, so varied data costs next to nothing.
template <class S>
bool all_same_bits(const S* x, uint32_t m) {
  return m <= 1 || std::memcmp(x, x + 1, static_cast<size_t>(m - 1) * sizeof(S)) == 0;
}

template <class S>
bool same_bits(const S& a, const S& b) {
  return std::memcmp(&a, &b, sizeof(S)) == 0;
}

// ------------------------------------------------------------------------------------------
// One chunk.

template <class S>
size_t write_raw(const S* x, uint32_t m, uint8_t* dst) {
  dst[0] = fmt::kChunkRaw;
  std::memcpy(dst + 1, x, static_cast<size_t>(m) * sizeof(S));
  return raw_chunk_bytes(m, sizeof(S));
}

template <class S>
size_t write_constant(const S& v, uint8_t* dst) {
  dst[0] = fmt::kChunkConstant;
  std::memcpy(dst + 1, &v, sizeof(S));
  return 1 + sizeof(S);
}

// A chunk's outlier section at `at`: the indices, then the values (fzlight_format.h).
template <class S>
void write_outliers(uint8_t* at, const Scratch<S>& s) {
  const size_t n_out = s.outlier_index.size();
  if (n_out == 0) return;  // memcpy from an empty vector's null data() is undefined even for 0 bytes
  std::memcpy(at, s.outlier_index.data(), n_out * 2);
  std::memcpy(at + n_out * 2, s.outlier_value.data(), n_out * sizeof(S));
}

// An encoded (mode 0) or direct (mode 4) chunk from the codes and code lengths encode_both
// kept: fixed fields, bitmap, lengths, planes, outliers. `total` is its size, already known.
template <class S>
size_t write_from_codes(bool direct, uint32_t nblocks, uint8_t* dst, size_t total,
                        uint32_t nonzero, const Scratch<S>& s) {
  const uint32_t bm_bytes = fmt::bitmap_bytes(nblocks);
  const size_t n_out = s.outlier_index.size();
  const std::vector<int32_t>& codes = direct ? s.direct_codes : s.lorenzo_codes;
  const std::vector<uint8_t>& lens = direct ? s.direct_lengths : s.lorenzo_lengths;
  dst[0] = direct ? fmt::kChunkDirect : fmt::kChunkEncoded;
  uint8_t* bitmap = dst + 1;
  if (!direct) {
    fmt::store<int32_t>(dst + 1, s.q_start);
    bitmap += 4;
  }
  fmt::store<uint32_t>(bitmap, static_cast<uint32_t>(n_out));
  bitmap += 4;
  std::memset(bitmap, 0, bm_bytes);
  uint8_t* lengths = bitmap + bm_bytes;
  uint8_t* at = lengths + nonzero;
  for (uint32_t b = 0; b < nblocks; ++b) {
    const int len = lens[b];
    if (len == 0) continue;
    bitmap[b / 8] = static_cast<uint8_t>(bitmap[b / 8] | (1u << (b % 8)));
    *lengths++ = static_cast<uint8_t>(len);
    // The packers write exactly the block's 4 * (len + 1) bytes, and the chunk's size was
    // computed from these lengths: nothing is written past it.
    const int32_t* q = codes.data() + static_cast<size_t>(b) * kBlockLen;
    if (direct) {
      block::pack<false>(q, 0, at);
    } else {
      block::pack(q, b == 0 ? s.q_start : q[-1], at);
    }
    at += 4u * static_cast<size_t>(len + 1);
  }
  write_outliers(at, s);
  return total;
}

// Quantises block b of a chunk into q (32 codes) and records its outliers; returns the mask of
// the lanes stored exactly (outliers; padding lanes past m are never in it). `xb` points to the
// block's values, or to `padded` for a partial last block.
template <class K>
__attribute__((always_inline)) inline uint32_t quantize_block(const typename K::S* x, uint32_t m, uint32_t b,
                        const Quantizer<typename K::C>& qz, int32_t* q, typename K::S* padded,
                        const typename K::S*& xb, Scratch<typename K::S>& s) {
  using S = typename K::S;
  const uint32_t base = b * kBlockLen;
  const uint32_t n = std::min(kBlockLen, m - base);
  xb = x + base;
  if (n < kBlockLen) {  // partial last block: pad (the padding lanes are set by the callers)
    std::fill(padded, padded + kBlockLen, S(0));
    std::copy(xb, xb + n, padded);
    xb = padded;
  }
  uint32_t bad = block::quantize<K>(xb, qz, q);
  if (n < kBlockLen) bad &= (1u << n) - 1u;
  for (uint32_t rest = bad; rest != 0; rest &= rest - 1) {
    const uint32_t i = static_cast<uint32_t>(__builtin_ctz(rest));
    s.outlier_index.push_back(static_cast<uint16_t>(base + i));
    s.outlier_value.push_back(xb[i]);
  }
  return bad;
}

// Encoded chunks: outliers take the prediction (the previous effective code, `prev` before
// lane 0: delta 0) and are patched with their exact value on decode; padding lanes repeat the
// last code. Returns the block's last effective code.
inline int32_t make_encoded_codes(int32_t* q, uint32_t bad, uint32_t n, int32_t prev) {
  for (uint32_t rest = bad; rest != 0; rest &= rest - 1) {
    const int i = __builtin_ctz(rest);
    q[i] = i == 0 ? prev : q[i - 1];
  }
  for (uint32_t i = n; i < kBlockLen; ++i) q[i] = q[n - 1];
  return q[kBlockLen - 1];
}

// Direct chunks: outliers and padding lanes code 0.
inline void make_direct_codes(int32_t* q, uint32_t bad, uint32_t n) {
  for (uint32_t rest = bad; rest != 0; rest &= rest - 1) q[__builtin_ctz(rest)] = 0;
  for (uint32_t i = n; i < kBlockLen; ++i) q[i] = 0;
}

// Length byte and planes of a block of code length len in an encoded or direct chunk (0 for a
// zero block: its bitmap bit alone). Branch-free: on quiet data zero and nonzero blocks
// alternate unpredictably.
inline size_t block_bytes(int len) {
  return static_cast<size_t>(len != 0) * (5u + 4u * static_cast<size_t>(len));
}

// The format's rule (fzlight_format.h): a chunk is direct when its code-length bytes and planes
// are fewer than the encoded chunk's, i.e. when it is smaller by more than the 4 bytes of
// q_start it does without. Quiet smooth data, whose two forms often have the same planes, then
// stays encoded instead of flipping between the two; that keeps a thread's guess (encode_chunk)
// right, which was worth 10-15 % of compression time on the wavefield, for 0.6 % of ratio.
inline bool direct_wins(size_t direct_bytes, size_t encoded_bytes) {
  return direct_bytes + (fmt::kEncodedChunkFixedBytes - fmt::kDirectChunkFixedBytes) < encoded_bytes;
}

// The chunk quantised once into both kinds of codes (kept in s), sized both ways exactly, and
// written as the kind the format's rule picks (direct_wins), or raw when that is larger than raw.
template <class K>
size_t encode_both(const typename K::S* x, uint32_t m, const Quantizer<typename K::C>& qz,
                   uint8_t* dst, Scratch<typename K::S>& s) {
  using S = typename K::S;
  const size_t raw_bytes = raw_chunk_bytes(m, sizeof(S));
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  s.outlier_index.clear();
  s.outlier_value.clear();
  size_t sizes[2] = {0, 0};  // planes and length bytes: [0] encoded, [1] direct
  uint32_t nonzero[2] = {0, 0};
  alignas(32) S padded[kBlockLen];
  int32_t prev = 0;
  for (uint32_t b = 0; b < nblocks; ++b) {
    const uint32_t base = b * kBlockLen;
    const uint32_t n = std::min(kBlockLen, m - base);
    const S* xb;
    int32_t* q = s.lorenzo_codes.data() + base;
    int32_t* d = s.direct_codes.data() + base;
    const uint32_t bad = quantize_block<K>(x, m, b, qz, q, padded, xb, s);
    std::memcpy(d, q, kBlockLen * sizeof(int32_t));
    make_direct_codes(d, bad, n);
    if (b == 0) s.q_start = prev = (bad & 1u) ? 0 : q[0];
    const int32_t last = make_encoded_codes(q, bad, n, prev);
    const int lens[2] = {block::code_length(q, prev), block::code_length<false>(d, 0)};
    prev = last;
    s.lorenzo_lengths[b] = static_cast<uint8_t>(lens[0]);
    s.direct_lengths[b] = static_cast<uint8_t>(lens[1]);
    for (int k = 0; k < 2; ++k) {
      nonzero[k] += lens[k] != 0;
      sizes[k] += block_bytes(lens[k]);
    }
  }
  const size_t outlier_bytes = s.outlier_index.size() * (2 + sizeof(S));
  const size_t bm_bytes = fmt::bitmap_bytes(nblocks);
  const size_t encoded = fmt::kEncodedChunkFixedBytes + bm_bytes + sizes[0] + outlier_bytes;
  const size_t direct = fmt::kDirectChunkFixedBytes + bm_bytes + sizes[1] + outlier_bytes;
  const bool take_direct = direct_wins(direct, encoded);
  const size_t total = take_direct ? direct : encoded;
  if (total > raw_bytes) return write_raw(x, m, dst);
  s.guess_direct = take_direct;
  return write_from_codes(take_direct, nblocks, dst, total, nonzero[take_direct ? 1 : 0], s);
}

// encode_first's answer when the kind is not settled: encode_both decides.
inline constexpr size_t kUndecided = ~size_t{0};

// One pass that packs the chunk as it is quantised, as an encoded chunk (!kDirect: smooth data's
// usual kind) or a direct one (noise's), and sizes the other kind on the side: the encoded size
// exactly (one code_length per block), the direct size by a lower bound (two lanes per block,
// made exact only where the bound is below the block's encoded length: the exact size of every
// block cost a tenth of the encoder's time on smooth data, where the bound alone settles nearly
// every chunk). Returns the chunk, or raw, when the format's rule is settled and picks this
// kind or raw; else kUndecided (encode_both then decides exactly).
template <class K, bool kDirect>
size_t encode_first(const typename K::S* x, uint32_t m, const Quantizer<typename K::C>& qz,
                    uint8_t* dst, Scratch<typename K::S>& s) {
  using S = typename K::S;
  const size_t raw_bytes = raw_chunk_bytes(m, sizeof(S));
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  const uint32_t bm_bytes = fmt::bitmap_bytes(nblocks);
  const size_t head = kDirect ? fmt::kDirectChunkFixedBytes : fmt::kEncodedChunkFixedBytes;
  const size_t other_head = kDirect ? fmt::kEncodedChunkFixedBytes : fmt::kDirectChunkFixedBytes;
  const size_t fixed = head + bm_bytes;
  // Packed in place while it can still beat raw; once it cannot, only the other kind may.
  bool fits = fixed < raw_bytes;
  const size_t room = fits ? raw_bytes - fixed : 0;  // for lengths, planes, outliers
  uint8_t* bitmap = dst + head;
  if (fits) std::memset(bitmap, 0, bm_bytes);
  s.outlier_index.clear();
  s.outlier_value.clear();
  size_t planes = 0;
  uint32_t nonzero = 0;
  size_t other_sizes = 0;  // planes and length bytes of the other kind (direct: a lower bound)
  // Planes go straight to the destination, after room for every block's length byte (on busy
  // data every block is nonzero, and nothing moves later); if that provisional spot would run
  // past the chunk's raw size, they continue in the scratch buffer instead.
  uint8_t* provisional = dst + fixed + nblocks;
  bool spilled = fixed + nblocks > raw_bytes;
  alignas(32) int32_t q[kBlockLen];
  alignas(32) int32_t d[kBlockLen];
  alignas(32) S padded[kBlockLen];
  uint8_t words[4 * kBlockLen];  // a block's planes where they cannot go straight to dst
  int32_t prev = 0;              // the last effective code of the block before (encoded kind)
  bool in_place = false;
  for (uint32_t b = 0; b < nblocks; ++b) {
    const uint32_t n = std::min(kBlockLen, m - b * kBlockLen);
    const S* xb;
    const uint32_t bad = quantize_block<K>(x, m, b, qz, q, padded, xb, s);
    // `plain`: no outlier and no padding, so q are both kinds' codes as they stand.
    const bool plain = bad == 0 && n == kBlockLen;
    if (b == 0) {
      prev = (bad & 1u) ? 0 : q[0];
      if (!kDirect && fits) fmt::store<int32_t>(dst + 1, prev);
    }
    int other_len;
    int32_t last;
    if constexpr (kDirect) {
      if (plain) {
        other_len = block::code_length(q, prev);
        last = q[kBlockLen - 1];
      } else {
        std::memcpy(d, q, sizeof(q));
        last = make_encoded_codes(d, bad, n, prev);
        other_len = block::code_length(d, prev);
        make_direct_codes(q, bad, n);
      }
    } else {
      if (plain) {
        other_len = block::ends_length(q);
      } else {
        std::memcpy(d, q, sizeof(q));
        make_direct_codes(d, bad, n);
        other_len = block::code_length<false>(d, 0);
      }
      last = make_encoded_codes(q, bad, n, prev);
    }
    int len = block::kLen;  // this kind's length, once packed (more than any other length)
    if (fits) {
      // Straight into the provisional spot while a whole block's planes fit there (a copy per
      // block, of a length known only at run time, is a library call).
      in_place = !spilled && nblocks + planes + sizeof(words) <= room;
      uint8_t* to = in_place ? provisional + planes : words;
      len = kDirect ? block::pack<false>(q, 0, to) : block::pack(q, prev, to);
    }
    if (!kDirect && plain && other_len < len) other_len = block::code_length<false>(q, 0);
    prev = last;
    other_sizes += block_bytes(other_len);
    if (!fits) continue;
    if (len == 0) continue;  // a zero block: one clear bit, nothing else
    const size_t need = 4u * static_cast<size_t>(len + 1);
    if (nonzero + 1 + planes + need > room) {  // larger than raw
      fits = false;
      continue;
    }
    if (!spilled && nblocks + planes + need > room) {
      if (planes > 0) std::memcpy(s.planes.data(), provisional, planes);
      spilled = true;
    }
    bitmap[b / 8] = static_cast<uint8_t>(bitmap[b / 8] | (1u << (b % 8)));
    s.lengths[nonzero++] = static_cast<uint8_t>(len);
    if (!in_place) std::memcpy((spilled ? s.planes.data() : provisional) + planes, words, need);
    planes += need;
  }
  const size_t outlier_bytes = s.outlier_index.size() * (2 + sizeof(S));
  const size_t other_total = other_head + bm_bytes + other_sizes + outlier_bytes;
  const size_t total = fixed + nonzero + planes + outlier_bytes;  // when fits
  if constexpr (kDirect) {  // the encoded size is exact
    // Not packed in full (larger than raw) or not the rule's choice: the encoded chunk, if
    // that is not larger than raw (encode_both writes it), else raw.
    if (!fits || !direct_wins(total, other_total)) {
      return other_total > raw_bytes ? write_raw(x, m, dst) : kUndecided;
    }
  } else if (!fits || direct_wins(other_total, total)) {  // the direct chunk may win
    return other_total > raw_bytes ? write_raw(x, m, dst) : kUndecided;
  }
  if (total > raw_bytes) return write_raw(x, m, dst);
  dst[0] = kDirect ? fmt::kChunkDirect : fmt::kChunkEncoded;
  fmt::store<uint32_t>(dst + head - 4, static_cast<uint32_t>(s.outlier_index.size()));
  uint8_t* at = dst + fixed + nonzero;  // the planes' final place, right after the lengths
  if (planes > 0 && spilled) {
    std::memcpy(at, s.planes.data(), planes);
  } else if (planes > 0 && at != provisional) {
    std::memmove(at, provisional, planes);
  }
  if (nonzero > 0) std::memcpy(dst + fixed, s.lengths.data(), nonzero);
  at += planes;
  write_outliers(at, s);
  return total;
}

// Quantise, then bit planes of Lorenzo deltas (an encoded chunk) or of the codes themselves (a
// direct chunk), by the format's rule (direct_wins); raw when that is larger than raw. Smooth
// data is nearly always encoded, noise (gradients) direct, and a thread's chunks mostly go the
// way its previous one went: each chunk is packed as it is quantised, as the kind the thread's
// last lossy chunk took, with the other kind sized on the side (encode_first). A wrong guess, or
// a bound that does not settle the chunk, costs one more pass over it (encode_both); the bytes
// never depend on the path.
template <class K>
size_t encode_chunk(const typename K::S* x, uint32_t m, const Quantizer<typename K::C>& qz,
                    uint8_t* dst, Scratch<typename K::S>& s) {
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  if (fmt::kDirectChunkFixedBytes + fmt::bitmap_bytes(nblocks) >= raw_chunk_bytes(m, sizeof(typename K::S))) {
    return write_raw(x, m, dst);  // neither can be smaller than raw
  }
  const size_t bytes = s.guess_direct ? encode_first<K, true>(x, m, qz, dst, s)
                                       : encode_first<K, false>(x, m, qz, dst, s);
  return bytes != kUndecided ? bytes : encode_both<K>(x, m, qz, dst, s);
}

// Lossless codec 1: byte planes + zstd; raw when that would not be smaller.
template <class S>
size_t encode_lossless(const S* x, uint32_t m, uint8_t* dst, Scratch<S>& s) {
  const size_t n = static_cast<size_t>(m) * sizeof(S);
  LosslessScratch& ls = s.lossless;
  byte_planes_split(reinterpret_cast<const uint8_t*>(x), m, sizeof(S), ls.bytes.data());
  const size_t coded = ls.zstd.compress(ls.bytes.data(), n, dst + 1, n);  // 0: no gain
  if (coded == 0) return write_raw(x, m, dst);
  dst[0] = fmt::kChunkLossless;
  return 1 + coded;
}

// How a chunk is coded, chosen from its values alone (so the stream does not depend on the
// thread count): see fzlight_format.h.
struct ChunkCoding {
  const void* quantizer = nullptr;  // Quantizer<C>*, or nullptr when lossless
  bool zstd = false;                // lossless chunks through codec 1
};

// Codes the m values at xc (chunk c of a stream) into dst; returns its byte count, 0 for a
// repeat of the previous constant chunk. `prev_constant`: the previous chunk's value when that
// chunk is constant, else nullptr (tracked by the caller's walk, so xc needs no neighbours).
template <class K>
size_t code_chunk(const typename K::S* xc, uint32_t m, const ChunkCoding& how,
                  const typename K::S* prev_constant, bool& constant, uint8_t* dst,
                  Scratch<typename K::S>& s) {
  constant = all_same_bits(xc, m);
  if (constant) {
    if (prev_constant != nullptr && same_bits(xc[0], *prev_constant)) return 0;
    return write_constant(xc[0], dst);
  }
  if (how.quantizer != nullptr) {
    return encode_chunk<K>(xc, m, *static_cast<const Quantizer<typename K::C>*>(how.quantizer),
                           dst, s);
  }
  if (how.zstd) return encode_lossless(xc, m, dst, s);
  return write_raw(xc, m, dst);
}

// Validates the structure of an encoded chunk (version-1 or version-2 layout) or of a direct
// chunk (mode 4: the version-2 layout after a 5-byte fixed part) against its size; returns the
// per-block code lengths through `lens_out` (nblocks entries) and the outlier section's start.
struct EncodedLayout {
  const uint8_t* planes = nullptr;
  const uint8_t* outliers = nullptr;
  uint32_t n_out = 0;
};

EncodedLayout check_encoded(const uint8_t* src, size_t size, uint32_t m, size_t elem,
                            uint8_t version, uint8_t* lens_out, const std::string& where) {
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  const bool direct = src[0] == fmt::kChunkDirect;
  EncodedLayout lay;
  size_t header = direct ? fmt::kDirectChunkFixedBytes : fmt::kEncodedChunkFixedBytes;
  lay.n_out = size >= header ? fmt::load<uint32_t>(src + header - 4) : 0;
  if (version == fmt::kVersion1) {
    header += nblocks;
    if (size < header) corrupt(where + ": shorter than its header");
    std::memcpy(lens_out, src + fmt::kEncodedChunkFixedBytes, nblocks);
    for (uint32_t b = 0; b < nblocks; ++b) {
      if (lens_out[b] > 31) corrupt(where + ": code length out of range");
    }
  } else {
    const uint32_t bm_bytes = fmt::bitmap_bytes(nblocks);
    const uint8_t* bitmap = src + header;
    header += bm_bytes;
    if (size < header) corrupt(where + ": shorter than its header");
    uint32_t nonzero = 0;
    for (uint32_t i = 0; i < bm_bytes; ++i) nonzero += static_cast<uint32_t>(__builtin_popcount(bitmap[i]));
    if (nblocks % 8 != 0 && (bitmap[bm_bytes - 1] >> (nblocks % 8)) != 0) {
      corrupt(where + ": block bitmap has bits past the last block");
    }
    if (size < header + nonzero) corrupt(where + ": shorter than its code lengths");
    const uint8_t* lens = src + header;
    bool bad = false;
    if (nonzero == nblocks) {  // busy data: every block nonzero, the lengths in block order
      std::memcpy(lens_out, lens, nblocks);
      for (uint32_t b = 0; b < nblocks; ++b) bad |= lens[b] == 0 || lens[b] > 31;
    } else {
      uint32_t k = 0;
      for (uint32_t b = 0; b < nblocks; ++b) {
        const bool set = (bitmap[b / 8] >> (b % 8)) & 1u;
        const uint8_t len = set ? lens[k] : 0;
        k += set;
        lens_out[b] = len;
        bad |= set && (len == 0 || len > 31);
      }
    }
    if (bad) corrupt(where + ": code length out of range");
    header += nonzero;
  }
  if (lay.n_out > m) corrupt(where + ": more outliers than values");
  size_t payload = 0;
  for (uint32_t b = 0; b < nblocks; ++b) payload += lens_out[b] == 0 ? 0 : 4u * (lens_out[b] + 1u);
  if (header + payload + static_cast<size_t>(lay.n_out) * (2 + elem) != size) {
    corrupt(where + ": sizes inside the chunk do not add up");
  }
  lay.planes = src + header;
  lay.outliers = lay.planes + payload;
  for (uint32_t k = 0; k < lay.n_out; ++k) {
    const uint16_t i = fmt::load<uint16_t>(lay.outliers + 2 * k);
    if (i >= m || (k > 0 && i <= fmt::load<uint16_t>(lay.outliers + 2 * (k - 1)))) {
      corrupt(where + ": outlier index out of order or out of range");
    }
  }
  return lay;
}

// What a decoder needs to know about the stream besides the chunk itself.
struct StreamTraits {
  uint8_t version = fmt::kVersion;
  LosslessCodec codec = LosslessCodec::None;
  double bin = 0.0;
};

// Validates the chunk's structure against its recorded size, then decodes m values into out.
template <class K>
void decode_chunk(const uint8_t* src, size_t size, uint32_t m, const StreamTraits& st, uint64_t c,
                  typename K::S* out, LosslessScratch& s, const typename K::S* warm = nullptr) {
  using S = typename K::S;
  using C = typename K::C;
  const std::string where = "chunk " + std::to_string(c);
  const uint8_t mode = src[0];
  if (mode == fmt::kChunkRaw) {
    if (size != raw_chunk_bytes(m, sizeof(S))) corrupt(where + ": raw chunk has the wrong size");
    std::memcpy(out, src + 1, static_cast<size_t>(m) * sizeof(S));
    return;
  }
  if (mode == fmt::kChunkConstant && st.version >= 2) {
    if (size != 1 + sizeof(S)) corrupt(where + ": constant chunk has the wrong size");
    const S v = fmt::load<S>(src + 1);
    std::fill(out, out + m, v);
    return;
  }
  if (mode == fmt::kChunkLossless && st.codec == LosslessCodec::ShuffleZstd) {
    const size_t n = static_cast<size_t>(m) * sizeof(S);
    if (!s.zstd.decompress(src + 1, size - 1, s.bytes.data(), n)) {
      corrupt(where + ": lossless (zstd) frame does not decode to the chunk's size");
    }
    byte_planes_join(s.bytes.data(), m, sizeof(S), reinterpret_cast<uint8_t*>(out));
    return;
  }
  const bool direct = mode == fmt::kChunkDirect && st.version >= 3;  // mode 4 is version 3's
  if (mode != fmt::kChunkEncoded && !direct) corrupt(where + ": unknown chunk mode");
  if (st.bin == 0.0) corrupt(where + ": encoded chunk in a lossless stream");
  uint8_t lens[kMaxChunkLen / kBlockLen];
  const EncodedLayout lay = check_encoded(src, size, m, sizeof(S), st.version, lens, where);
  const uint32_t nblocks = (m + kBlockLen - 1) / kBlockLen;
  const C bin = static_cast<C>(st.bin);
  int32_t carry = direct ? 0 : fmt::load<int32_t>(src + 1);
  const uint8_t* words = lay.planes;
  alignas(32) S tail[kBlockLen];
  for (uint32_t b = 0; b < nblocks; ++b) {
    const uint32_t base = b * kBlockLen;
    const uint32_t n = std::min(kBlockLen, m - base);
    const int len = lens[b];
    // decompress_add: fetch the next chunk's addend a block's worth at a time while this one
    // decodes. With the addend in DRAM (a large tensor) the chunk-sized adds otherwise wait on
    // every line, and were ~10 % slower than a separate add pass; a burst of prefetches for a
    // whole chunk stalls on the miss queue instead (both measured, one 1 MiB segment).
    if (warm != nullptr) {
      for (size_t k = 0; k < kBlockLen * sizeof(S); k += 64) {
        __builtin_prefetch(reinterpret_cast<const uint8_t*>(warm + base) + k, 0, 3);
      }
    }
    S* to = n == kBlockLen ? out + base : tail;
    if (direct) {
      block::unpack<K, false>(words, len, carry, bin, to);
    } else {
      block::unpack<K>(words, len, carry, bin, to);
    }
    if (n < kBlockLen) std::copy(tail, tail + n, out + base);
    words += len == 0 ? 0 : 4u * (len + 1u);
  }
  const uint8_t* values = lay.outliers + 2 * static_cast<size_t>(lay.n_out);
  for (uint32_t k = 0; k < lay.n_out; ++k) {
    out[fmt::load<uint16_t>(lay.outliers + 2 * k)] = fmt::load<S>(values + k * sizeof(S));
  }
}

// ------------------------------------------------------------------------------------------
// Whole streams.

template <class K>
bool make_quantizer(double eb, Quantizer<typename K::C>& qz) {
  using C = typename K::C;
  // Below the smallest normal of the compute type the bound cannot be met by quantisation
  // reliably (denormal flushing modes differ between processes): store exactly.
  if (!(eb >= static_cast<double>(std::numeric_limits<C>::min()))) return false;
  const double bin = std::min(2.0 * eb * kBinShrink, static_cast<double>(std::numeric_limits<C>::max()));
  qz.bin = static_cast<C>(bin);
  qz.inv_bin = static_cast<C>(1.0 / static_cast<double>(qz.bin));
  qz.eb = eb;
  if constexpr (std::is_same_v<C, float>) {
    qz.sure_path = block::sure_path_ok(eb, qz.bin, qz.inv_bin);
  }
  return true;
}

void write_header(uint8_t* dst, DType dt, uint64_t count, double eb, double bin,
                  uint32_t chunk_len, LosslessCodec codec, const std::vector<uint64_t>& shape) {
  std::memcpy(dst, fmt::kMagic, 4);
  dst[4] = fmt::kVersion;
  dst[5] = static_cast<uint8_t>(dt);
  dst[6] = static_cast<uint8_t>(kBlockLen);
  dst[7] = static_cast<uint8_t>(shape.size());
  fmt::store<uint64_t>(dst + 8, count);
  fmt::store<double>(dst + 16, eb);
  fmt::store<double>(dst + 24, bin);
  fmt::store<uint32_t>(dst + 32, chunk_len);
  fmt::store<uint32_t>(dst + 36, static_cast<uint32_t>(codec));
  for (size_t d = 0; d < shape.size(); ++d) fmt::store<uint64_t>(dst + 48 + 8 * d, shape[d]);
}

// The values compress() codes: chunk c of a contiguous array, read in place.
template <class S>
struct ArrayChunks {
  const S* x;
  uint32_t chunk_len;
  const S* chunk(uint64_t c, int /*thread*/) const { return x + c * chunk_len; }
};

// Codes the chunks `source.chunk(c, thread)` yields (a pointer to chunk c's values, valid until
// that thread's next call) into a stream of `count` values. compress() reads an array; the
// hop of the ring (recompress_add) sums a decoded chunk and an addend in a per-thread buffer.
template <class K, class Source>
size_t compress_typed(Source& source, uint64_t count, const CompressParams& p,
                      const std::vector<uint64_t>& shape, uint8_t* dst, const Progress* progress) {
  using S = typename K::S;
  Quantizer<typename K::C> qz{};
  const bool lossy = make_quantizer<K>(p.error_bound, qz);
  ChunkCoding how;
  how.quantizer = lossy ? &qz : nullptr;
  const LosslessCodec codec =
      p.lossless_codec == LosslessCodec::Auto
          ? (lossless_codec_available(LosslessCodec::ShuffleZstd) ? LosslessCodec::ShuffleZstd
                                                                  : LosslessCodec::None)
          : p.lossless_codec;
  how.zstd = !lossy && p.error_bound == 0.0 && codec == LosslessCodec::ShuffleZstd;
  const uint32_t cl = p.chunk_len;
  const uint64_t chunks = fmt::num_chunks(count, cl);
  write_header(dst, K::kDType, count, p.error_bound, lossy ? static_cast<double>(qz.bin) : 0.0, cl,
               how.zstd ? LosslessCodec::ShuffleZstd : LosslessCodec::None, shape);
  uint8_t* table = dst + fmt::kFixedHeaderBytes + 8 * shape.size();
  const size_t data_base = fmt::header_bytes(shape.size(), chunks);
  // A repeat's CRC is that of the constant chunk it repeats, which ends where the repeat starts.
  auto finish_chunk = [&](uint64_t c, const uint8_t* at, size_t bytes) {
    const uint8_t* crc_of = bytes == 0 ? at - (1 + sizeof(S)) : at;
    fmt::store<uint32_t>(table + 8 * c, static_cast<uint32_t>(bytes));
    fmt::store<uint32_t>(table + 8 * c + 4, crc32c(crc_of, bytes == 0 ? 1 + sizeof(S) : bytes));
  };
  // A walk over chunks [c0, c1) on one thread; it remembers whether its last chunk was constant,
  // and with which value (a repeat refers to it). Returns the bytes written at `at`.
  struct Walk {
    bool last_constant = false;
    S last_value{};
  };
  auto walk = [&](uint64_t c0, uint64_t c1, int t, uint8_t* at, Scratch<S>& scratch, Walk& w,
                  auto&& after_chunk) -> size_t {
    uint8_t* const begin = at;
    w.last_constant = false;  // a walk's first chunk is written in full
    for (uint64_t c = c0; c < c1; ++c) {
      const S* xc = source.chunk(c, t);
      bool constant = false;
      const size_t bytes = code_chunk<K>(xc, chunk_values(count, cl, c), how,
                                         w.last_constant ? &w.last_value : nullptr, constant,
                                         at, scratch);
      finish_chunk(c, at, bytes);
      at += bytes;
      w.last_constant = constant;
      if (constant) w.last_value = xc[0];
      if (!after_chunk(c)) break;
    }
    return static_cast<size_t>(at - begin);
  };

  size_t end = data_base;
  if (progress != nullptr && p.threads <= 1) {
    // Pipelined: one chunk at a time on this thread, the caller's progress hook in between.
    PooledScratch<S> pooled(1, cl, how.zstd);
    Walk w;
    end += walk(0, chunks, 0, dst + end, pooled[0], w, [&](uint64_t c) {
      (*progress)(c + 1, chunks);
      return true;
    });
  } else if (chunks > 0) {
    // The chunks are cut into contiguous runs, several per thread, which the threads take in
    // turn (a thread that drew cheap runs, e.g. constant ones, takes more: data whose
    // compressibility varies along the buffer no longer waits on the thread with the dense part).
    // Each run is coded at its worst-case offset; the runs are then slid down in order
    // (compressed data is small, so the move is cheap). A run never starts with a repeat (its
    // first chunk is written in full), so the slide keeps every repeat right after the bytes it
    // repeats. The stream is the same for every thread count.
    // With a progress hook (threads > 1): the calling thread runs it between its own chunks.
    const int nt = resolve_threads(p.threads, chunk_units(chunks));
    const uint64_t runs = std::min<uint64_t>(chunks, static_cast<uint64_t>(nt) * kRunsPerThread);
    auto run_start = [&](uint64_t k) { return chunks * k / runs; };
    ThreadedProgress hook(progress, chunks);
    const size_t full = raw_chunk_bytes(cl, sizeof(S));
    std::vector<size_t> run_bytes(runs, 0);
    std::vector<Walk> run_walks(runs);
    PooledScratch<S> scratch(nt, cl, how.zstd);
    // A source's exception (a corrupt stream in recompress_add) may not leave the region: the
    // first is kept, the other threads stop at their next chunk, and it is rethrown after.
    std::mutex failure_lock;
    std::exception_ptr failure;
    // Thread t starts with run t (runs >= nt: the calling thread always codes chunks, so a
    // progress hook runs at least once), then takes the next free run. The team may be smaller
    // than nt (OMP_THREAD_LIMIT, a nested region): the free runs start after the team's, or the
    // runs between team and nt would never be coded (a corrupt stream).
    std::atomic<uint64_t> next_run{static_cast<uint64_t>(nt)};
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num();
#pragma omp single
      next_run.store(static_cast<uint64_t>(omp_get_num_threads()));
      bool go = true;
      for (uint64_t k = static_cast<uint64_t>(t); go && k < runs; k = next_run.fetch_add(1)) {
        const uint64_t c0 = run_start(k);
        try {
          run_bytes[k] = walk(c0, run_start(k + 1), t, dst + data_base + c0 * full,
                              scratch[static_cast<size_t>(t)], run_walks[k],
                              [&](uint64_t) { return go = hook.after_chunk(t); });
        } catch (...) {
          const std::lock_guard<std::mutex> guard(failure_lock);
          if (!failure) failure = std::current_exception();
          hook.stop();
          go = false;
        }
      }
    }
    if (failure) std::rethrow_exception(failure);
    hook.rethrow();
    if (hook.stopped()) throw std::logic_error("zccl: compression stopped without an error");
    // A run's first chunk was written in full even when it repeats the previous run's last
    // constant chunk; turn it into a repeat now that the runs meet.
    for (uint64_t k = 0; k < runs; ++k) {
      const uint64_t c0 = run_start(k);
      uint8_t* run = dst + data_base + c0 * full;
      size_t bytes = run_bytes[k];
      if (k > 0 && run_walks[k - 1].last_constant &&
          fmt::load<uint32_t>(table + 8 * c0) == 1 + sizeof(S) && run[0] == fmt::kChunkConstant &&
          std::memcmp(run + 1, &run_walks[k - 1].last_value, sizeof(S)) == 0) {
        fmt::store<uint32_t>(table + 8 * c0, 0);  // its CRC is already the repeated chunk's
        run += 1 + sizeof(S);
        bytes -= 1 + sizeof(S);
      }
      // The first run (every run, with one thread) is already in place: no move at all.
      if (run != dst + end) std::memmove(dst + end, run, bytes);
      end += bytes;
    }
  }
  fmt::store<uint64_t>(dst + 40, end);
  fmt::store<uint32_t>(dst + data_base - 4, crc32c(dst, data_base - 4));
  return end;
}

// A parsed, validated header with the offset of every chunk.
struct Parsed {
  StreamInfo info;
  StreamTraits traits;
  std::vector<uint64_t> offsets;  // num_chunks + 1 entries
  const uint8_t* table = nullptr;
};

bool known_dtype(uint8_t code, uint8_t version) {
  if (code == static_cast<uint8_t>(DType::Float32) || code == static_cast<uint8_t>(DType::Float64)) {
    return true;
  }
  return version >= 2 &&
         (code == static_cast<uint8_t>(DType::Float16) || code == static_cast<uint8_t>(DType::BFloat16));
}

Parsed parse(const uint8_t* src, size_t len) {
  if (src == nullptr && len > 0) throw ArgumentError("zccl: null stream pointer");
  if (len < fmt::kFixedHeaderBytes + fmt::kHeaderCrcBytes) {
    corrupt("stream of " + std::to_string(len) + " bytes is shorter than the header");
  }
  if (std::memcmp(src, fmt::kMagic, 4) != 0) corrupt("bad magic (not a zccl fZ-light stream)");
  if (src[4] != fmt::kVersion1 && src[4] != fmt::kVersion2 && src[4] != fmt::kVersion) {
    corrupt("unsupported format version " + std::to_string(src[4]));
  }
  Parsed p;
  StreamInfo& info = p.info;
  info.version = src[4];
  p.traits.version = src[4];
  if (!known_dtype(src[5], info.version)) corrupt("unknown dtype code " + std::to_string(src[5]));
  info.dtype = static_cast<DType>(src[5]);
  if (src[6] != kBlockLen) corrupt("unsupported block length " + std::to_string(src[6]));
  const size_t ndim = src[7];
  if (ndim > kMaxDims) corrupt("ndim " + std::to_string(ndim) + " exceeds " + std::to_string(kMaxDims));
  info.count = fmt::load<uint64_t>(src + 8);
  info.error_bound = fmt::load<double>(src + 16);
  p.traits.bin = fmt::load<double>(src + 24);
  info.chunk_len = fmt::load<uint32_t>(src + 32);
  const uint32_t codec = fmt::load<uint32_t>(src + 36);
  if (info.version == fmt::kVersion1 ? codec != 0 : codec > fmt::kCodecShuffleZstd) {
    corrupt(info.version == fmt::kVersion1 ? "reserved header field is not zero"
                                           : "unknown lossless codec " + std::to_string(codec));
  }
  info.lossless_codec = static_cast<LosslessCodec>(codec);
  p.traits.codec = info.lossless_codec;
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
  const double bin = p.traits.bin;
  if (!std::isfinite(info.error_bound) || info.error_bound < 0) corrupt("invalid error bound");
  if (!std::isfinite(bin) || bin < 0) corrupt("invalid quantisation bin");
  if (bin > 2.0 * info.error_bound) corrupt("quantisation bin wider than twice the error bound");
  if (info.dtype != DType::Float64 && static_cast<double>(static_cast<float>(bin)) != bin) {
    corrupt("quantisation bin not representable in float32");
  }
  if (codec != 0 && bin != 0.0) corrupt("lossless codec in a lossy stream");
  if (codec != 0 && !lossless_codec_available(info.lossless_codec)) {
    throw StreamError("zccl: the stream's chunks use the zstd lossless codec, and this build of "
                      "zccl has no zstd (rebuild with libzstd-dev installed)");
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
  uint32_t prev_bytes = 0;
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    const uint32_t bytes = fmt::load<uint32_t>(p.table + 8 * c);
    // A repeat (v2) follows a constant chunk or another repeat.
    const bool repeat_ok = info.version >= 2 && c > 0 && (prev_bytes == 0 || prev_bytes == 1 + elem);
    if ((bytes == 0 && !repeat_ok) ||
        bytes > raw_chunk_bytes(chunk_values(info.count, info.chunk_len, c), elem)) {
      corrupt("chunk " + std::to_string(c) + " has an impossible size");
    }
    p.offsets[c + 1] = p.offsets[c] + bytes;
    prev_bytes = bytes;
  }
  if (p.offsets[info.num_chunks] != len) corrupt("chunk sizes do not add up to the stream size");
  return p;
}

template <class K>
void decode_one(const uint8_t* src, const Parsed& p, uint64_t c, typename K::S* out,
                LosslessScratch& s, const typename K::S* warm = nullptr) {
  const uint8_t* at = src + p.offsets[c];
  size_t bytes = p.offsets[c + 1] - p.offsets[c];
  if (bytes == 0) {  // a repeat: the constant chunk that ends here (parse checked it exists)
    bytes = 1 + sizeof(typename K::S);
    at -= bytes;
    if (at[0] != fmt::kChunkConstant) corrupt("chunk " + std::to_string(c) + " repeats a chunk that is not constant");
  }
  if (crc32c(at, bytes) != fmt::load<uint32_t>(p.table + 8 * c + 4)) {
    corrupt("chunk " + std::to_string(c) + " checksum mismatch");
  }
  decode_chunk<K>(at, bytes, chunk_values(p.info.count, p.info.chunk_len, c), p.traits, c, out, s,
                  warm);
}

// out[i] = a[i] + b[i]: the one sum of decompress_add and recompress_add. Out of line so both
// run the same machine code: where a and b are both NaN, which payload and sign survive depends
// on the operand order the compiler picks for each copy of the loop, and recompress_add promises
// the bytes compress(decompress_add(...)) gives. out may be a or b.
template <class S>
__attribute__((noinline)) void add_values(const S* a, const S* b, S* out, uint64_t m) {
  for (uint64_t i = 0; i < m; ++i) out[i] = a[i] + b[i];
}

// Decodes chunk c into out; with `addend` (decompress_add), into `chunk` (chunk_len values,
// stays in L1) and then out = addend + chunk, so out may be addend.
template <class K>
void decode_into(const uint8_t* src, const Parsed& p, uint64_t c, typename K::S* out,
                 const typename K::S* addend, typename K::S* chunk, LosslessScratch& s) {
  if (addend == nullptr) {
    decode_one<K>(src, p, c, out, s);
    return;
  }
  if constexpr (!block::kIsHalf<K>) {  // half streams: rejected by decompress_add
    const uint64_t m = chunk_values(p.info.count, p.info.chunk_len, c);
    const bool full_next = c + 2 < p.info.num_chunks;  // (a short last chunk is not prefetched)
    decode_one<K>(src, p, c, chunk, s, full_next ? addend + p.info.chunk_len : nullptr);
    add_values(addend, chunk, out, m);
  }
}

// Decodes every chunk into out; with `addend`, adds it chunk by chunk (decompress_add).
template <class K>
void decompress_typed(const uint8_t* src, const Parsed& p, typename K::S* out, int threads,
                      const Progress* progress, const typename K::S* addend = nullptr) {
  using S = typename K::S;
  constexpr size_t kElem = sizeof(S);
  const uint64_t chunks = p.info.num_chunks;
  const uint32_t cl = p.info.chunk_len;
  const bool lossless = p.traits.codec != LosslessCodec::None;
  if (progress != nullptr && threads <= 1) {
    LosslessScratch scratch(cl, kElem, lossless);
    // Not zeroed (every value is decoded before it is read): a zeroed buffer per call cost the
    // ring's one-thread model ~3 % (16 threads' worth of chunks written on every decode).
    const std::unique_ptr<S[]> chunk(addend != nullptr ? new S[cl] : nullptr);
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t at = c * cl;
      decode_into<K>(src, p, c, out + at, addend ? addend + at : nullptr, chunk.get(), scratch);
      (*progress)(c + 1, chunks);
    }
    return;
  }
  if (chunks == 0) return;
  // Exceptions may not leave an OpenMP region: keep the first failure and rethrow after it.
  std::mutex failure_lock;
  std::string failure;
  const int nt = resolve_threads(threads, chunk_units(chunks));
  ThreadedProgress hook(progress, chunks);  // with a progress hook (threads > 1)
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    std::optional<LosslessScratch> scratch;
    std::unique_ptr<S[]> chunk;  // decompress_add: this thread's decoded chunk, not zeroed
    try {
      if (addend != nullptr) chunk.reset(new S[cl]);
      scratch.emplace(cl, kElem, lossless);
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> guard(failure_lock);
      if (failure.empty()) failure = e.what();
    }
#pragma omp for schedule(static)
    for (int64_t c = 0; c < static_cast<int64_t>(chunks); ++c) {
      if (!scratch || hook.stopped()) continue;
      try {
        const uint64_t at = static_cast<uint64_t>(c) * cl;
        decode_into<K>(src, p, static_cast<uint64_t>(c), out + at,
                       addend ? addend + at : nullptr, chunk.get(), *scratch);
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> guard(failure_lock);
        if (failure.empty()) failure = e.what();
      }
      hook.after_chunk(t);
    }
  }
  if (!failure.empty()) throw StreamError(failure);
  hook.rethrow();
}

// recompress_add's chunks: chunk c of a float32/float64 stream decoded into the calling thread's
// buffer (L1-sized, allocated on the thread's first chunk) and the addend's chunk c added in
// place, with decompress_add's arithmetic; the next chunk's addend is prefetched while it decodes.
template <class K>
class SumChunks {
 public:
  using S = typename K::S;
  SumChunks(const uint8_t* src, const Parsed& p, const S* addend, int threads)
      : src_(src), p_(p), addend_(addend), per_thread_(static_cast<size_t>(threads)) {}
  const S* chunk(uint64_t c, int t) {
    PerThread& mine = per_thread_[static_cast<size_t>(t)];
    const uint32_t cl = p_.info.chunk_len;
    if (!mine.values) {
      mine.values.reset(new S[cl]);  // not zeroed: every value is decoded before it is read
      mine.scratch.emplace(cl, sizeof(S), p_.traits.codec != LosslessCodec::None);
    }
    S* const v = mine.values.get();
    const S* const a = addend_ + c * cl;
    const bool full_next = c + 2 < p_.info.num_chunks;  // (a short last chunk is not prefetched)
    decode_one<K>(src_, p_, c, v, *mine.scratch, full_next ? a + cl : nullptr);
    const uint32_t m = chunk_values(p_.info.count, cl, c);
    add_values(a, v, v, m);
    return v;
  }

 private:
  struct PerThread {
    std::unique_ptr<S[]> values;
    std::optional<LosslessScratch> scratch;
  };
  const uint8_t* src_;
  const Parsed& p_;
  const S* addend_;
  std::vector<PerThread> per_thread_;  // one per thread id of the coding region
};

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

// float32 <-> half conversions of whole arrays (narrow_to_half, widen_half, finite_range_half).
template <class K>
void narrow_typed(const float* src, uint64_t n, uint16_t* dst) {
  uint64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), block::narrow8<K>(_mm256_loadu_ps(src + i)));
  }
#endif
  for (; i < n; ++i) dst[i] = K::narrow(src[i]);
}
template <class K>
void widen_typed(const uint16_t* src, uint64_t n, float* dst) {
  uint64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, block::load8_widen<K>(src + i));
#endif
  for (; i < n; ++i) dst[i] = K::widen(src[i]);
}

// Min and max over the finite values of `count` values, split over threads: minmax_slice(begin,
// end, lo, hi) handles one contiguous slice in the compute type C. `per_thread`: values below
// which one more thread costs more than it saves.
template <class C, class SliceMinMax>
FiniteRange parallel_finite_range(uint64_t count, int threads, uint64_t per_thread,
                                  SliceMinMax minmax_slice) {
  const int nt = resolve_threads(threads, count / per_thread + 1);
  std::vector<C> lo(static_cast<size_t>(nt)), hi(static_cast<size_t>(nt));
  // nt slices shared out by `omp for`: every slice is scanned even when the team is smaller
  // than nt (OMP_THREAD_LIMIT, a nested region); a slice left out would leave its lo/hi at 0
  // and silently widen a REL bound's value range.
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int s = 0; s < nt; ++s) {
    const uint64_t t = static_cast<uint64_t>(s);
    const uint64_t begin = count * t / static_cast<uint64_t>(nt);
    const uint64_t end = count * (t + 1) / static_cast<uint64_t>(nt);
    minmax_slice(begin, end, lo[t], hi[t]);
  }
  const C l = *std::min_element(lo.begin(), lo.end());
  const C h = *std::max_element(hi.begin(), hi.end());
  if (!(l <= h)) return {};  // no finite value at all
  return {static_cast<double>(l), static_cast<double>(h), true};
}

template <class T>
FiniteRange finite_range_typed(const T* x, uint64_t count, int threads) {
  // At least ~256 KiB per thread: below that a parallel region costs more than it saves.
  return parallel_finite_range<T>(count, threads, 1u << 16, [x](uint64_t b, uint64_t e, T& lo, T& hi) {
    finite_minmax(x + b, e - b, lo, hi);
  });
}

// Half types: widened to float32 (exact) 4096 at a time, then the float32 kernel.
template <class K>
FiniteRange finite_range_half(const uint16_t* x, uint64_t count, int threads) {
  return parallel_finite_range<float>(
      count, threads, 1u << 17, [x](uint64_t begin, uint64_t end, float& lo, float& hi) {
        lo = std::numeric_limits<float>::infinity();
        hi = -lo;
        float wide[4096];
        for (uint64_t i = begin; i < end; i += 4096) {
          const uint64_t n = std::min<uint64_t>(4096, end - i);
          widen_typed<K>(x + i, n, wide);
          float bl, bh;
          finite_minmax(wide, n, bl, bh);
          lo = std::min(lo, bl);
          hi = std::max(hi, bh);
        }
      });
}

// Quantise-and-reconstruct of [begin, end) (a whole number of blocks from a block boundary, the
// last one possibly partial): the encoder's own per-block kernel, then the decoder's arithmetic.
// `residual` (may be null): x - x' in the storage type, computed as the caller would.
template <class K>
void quantize_range(const typename K::S* x, uint64_t begin, uint64_t end,
                    const Quantizer<typename K::C>& qz, typename K::S* out,
                    typename K::S* residual) {
  using S = typename K::S;
  using C = typename K::C;
  alignas(32) int32_t q[kBlockLen];
  alignas(32) S padded[kBlockLen];
  for (uint64_t base = begin; base < end; base += kBlockLen) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kBlockLen, end - base));
    const S* xb = x + base;
    if (n < kBlockLen) {
      std::fill(padded, padded + kBlockLen, S(0));
      std::copy(xb, xb + n, padded);
      xb = padded;
    }
    const uint32_t bad = block::quantize<K>(xb, qz, q);
    // Branch-free over the block (vectorises), then the rare exactly-kept lanes patched.
    alignas(32) S v[kBlockLen];
    alignas(32) S r[kBlockLen];
    for (uint32_t i = 0; i < kBlockLen; ++i) v[i] = K::narrow(static_cast<C>(q[i]) * qz.bin);
    if (residual != nullptr) {
      for (uint32_t i = 0; i < kBlockLen; ++i) r[i] = K::narrow(K::widen(xb[i]) - K::widen(v[i]));
    }
    for (uint32_t rest = bad; rest != 0; rest &= rest - 1) {
      const int i = __builtin_ctz(rest);
      v[i] = xb[i];
      r[i] = K::narrow(C(0));  // a value kept exactly leaves no error (Inf - Inf would be NaN)
    }
    // Copied out last: `out` may alias x.
    std::copy(v, v + n, out + base);
    if (residual != nullptr) std::copy(r, r + n, residual + base);
  }
}

// Calls f(Kind{}) for the stream value type dt.
template <class F>
decltype(auto) with_kind(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32: return f(block::KindF32{});
    case DType::Float64: return f(block::KindF64{});
    case DType::Float16: return f(block::KindF16{});
    case DType::BFloat16: return f(block::KindBF16{});
  }
  throw ArgumentError("zccl: unknown dtype code " + std::to_string(static_cast<int>(dt)));
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Public API.

FiniteRange finite_range(const void* src, DType dt, uint64_t count, int threads) {
  if (src == nullptr && count > 0) throw ArgumentError("zccl: null source pointer");
  return with_kind(dt, [&](auto kind) -> FiniteRange {
    using K = decltype(kind);
    using S = typename K::S;
    if constexpr (block::kIsHalf<K>) {
      return finite_range_half<K>(static_cast<const S*>(src), count, threads);
    } else {
      return finite_range_typed(static_cast<const S*>(src), count, threads);
    }
  });
}

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::Float32: return sizeof(float);
    case DType::Float64: return sizeof(double);
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
  }
  throw ArgumentError("zccl: unknown dtype");
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "unknown";
}

bool lossless_codec_available(LosslessCodec codec) {
  switch (codec) {
    case LosslessCodec::None: return true;
    case LosslessCodec::Auto: return true;
#if defined(ZCCL_WITH_ZSTD)
    case LosslessCodec::ShuffleZstd: return true;
#else
    case LosslessCodec::ShuffleZstd: return false;
#endif
  }
  return false;
}


void quantize(const void* src, DType dt, uint64_t count, double error_bound, void* dst,
              void* residual, int threads) {
  if (!std::isfinite(error_bound) || error_bound < 0) {
    throw ArgumentError("zccl: error bound must be finite and >= 0, got " +
                        std::to_string(error_bound));
  }
  if ((src == nullptr || dst == nullptr) && count > 0) throw ArgumentError("zccl: null pointer");
  with_kind(dt, [&](auto kind) {
    using K = decltype(kind);
    using S = typename K::S;
    const S* x = static_cast<const S*>(src);
    S* out = static_cast<S*>(dst);
    S* res = static_cast<S*>(residual);
    Quantizer<typename K::C> qz{};
    if (!make_quantizer<K>(error_bound, qz)) {  // lossless, or below the quantiser's floor
      if (count > 0 && out != x) std::memmove(out, x, count * sizeof(S));
      if (res != nullptr && count > 0) std::fill(res, res + count, K::narrow(0.0f));
      return;
    }
    // Pieces of whole blocks, ~256 KiB of float32 each, spread over the threads.
    constexpr uint64_t kPiece = uint64_t{1} << 16;
    const uint64_t pieces = (count + kPiece - 1) / kPiece;
    const int nt = resolve_threads(threads, pieces);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(pieces); ++i) {
      const uint64_t b = static_cast<uint64_t>(i) * kPiece;
      quantize_range<K>(x, b, std::min(count, b + kPiece), qz, out, res);
    }
  });
}

bool quantizer_bins(DType dt, double error_bound, double& bin, double& inv_bin) {
  return with_kind(dt, [&](auto kind) {
    using K = decltype(kind);
    Quantizer<typename K::C> qz{};
    if (!make_quantizer<K>(error_bound, qz)) return false;  // also a negative or NaN bound
    bin = static_cast<double>(qz.bin);
    inv_bin = static_cast<double>(qz.inv_bin);
    return true;
  });
}

void narrow_to_half(const float* src, DType half, uint64_t n, void* dst) {
  if (half == DType::Float16) return narrow_typed<block::KindF16>(src, n, static_cast<uint16_t*>(dst));
  if (half == DType::BFloat16) return narrow_typed<block::KindBF16>(src, n, static_cast<uint16_t*>(dst));
  throw ArgumentError("zccl: narrow_to_half needs float16 or bfloat16");
}

void widen_half(const void* src, DType half, uint64_t n, float* dst) {
  if (half == DType::Float16) return widen_typed<block::KindF16>(static_cast<const uint16_t*>(src), n, dst);
  if (half == DType::BFloat16) return widen_typed<block::KindBF16>(static_cast<const uint16_t*>(src), n, dst);
  throw ArgumentError("zccl: widen_half needs float16 or bfloat16");
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

namespace {

// compress()'s checks of its arguments (but the source); returns the header's shape.
std::vector<uint64_t> checked_shape(DType dt, uint64_t count, const CompressParams& params,
                                    const uint8_t* dst, size_t dst_cap) {
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
  if (params.lossless_codec != LosslessCodec::None && params.lossless_codec != LosslessCodec::Auto &&
      params.lossless_codec != LosslessCodec::ShuffleZstd) {
    throw ArgumentError("zccl: unknown lossless codec " +
                        std::to_string(static_cast<uint32_t>(params.lossless_codec)));
  }
  if (params.error_bound == 0.0 && !lossless_codec_available(params.lossless_codec)) {
    throw ArgumentError("zccl: this build of zccl has no zstd, so the lossless codec is "
                        "unavailable (rebuild with libzstd-dev installed, or use codec none)");
  }
  return shape;
}

}  // namespace

size_t compress(const void* src, DType dt, uint64_t count, const CompressParams& params,
                uint8_t* dst, size_t dst_cap, const Progress* progress) {
  const std::vector<uint64_t> shape = checked_shape(dt, count, params, dst, dst_cap);
  if (src == nullptr && count > 0) throw ArgumentError("zccl: null source pointer");
  return with_kind(dt, [&](auto kind) {
    using K = decltype(kind);
    ArrayChunks<typename K::S> source{static_cast<const typename K::S*>(src), params.chunk_len};
    return compress_typed<K>(source, count, params, shape, dst, progress);
  });
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
  with_kind(p.info.dtype, [&](auto kind) {
    using K = decltype(kind);
    decompress_typed<K>(src, p, static_cast<typename K::S*>(dst), threads, progress);
  });
}

void decompress_add(const uint8_t* src, size_t len, const void* addend, void* dst,
                    uint64_t dst_count, int threads, const Progress* progress) {
  const Parsed p = parse(src, len);
  if (p.info.dtype != DType::Float32 && p.info.dtype != DType::Float64) {
    throw ArgumentError(std::string("zccl: decompress_add takes float32 and float64 streams, ") +
                        "not " + dtype_name(p.info.dtype));
  }
  if (dst_count < p.info.count) {
    throw ArgumentError("zccl: destination holds " + std::to_string(dst_count) +
                        " values, the stream has " + std::to_string(p.info.count));
  }
  if ((dst == nullptr || addend == nullptr) && p.info.count > 0) {
    throw ArgumentError("zccl: null destination or addend pointer");
  }
  with_kind(p.info.dtype, [&](auto kind) {
    using K = decltype(kind);
    using S = typename K::S;
    decompress_typed<K>(src, p, static_cast<S*>(dst), threads, progress,
                        static_cast<const S*>(addend));
  });
}

size_t recompress_add(const uint8_t* src, size_t len, const void* addend, uint64_t count,
                      const CompressParams& params, uint8_t* dst, size_t dst_cap,
                      const Progress* progress) {
  const Parsed p = parse(src, len);
  const DType dt = p.info.dtype;
  if (dt != DType::Float32 && dt != DType::Float64) {
    throw ArgumentError(std::string("zccl: recompress_add takes float32 and float64 streams, ") +
                        "not " + dtype_name(dt));
  }
  if (p.info.count != count) {
    throw ArgumentError("zccl: recompress_add: the stream holds " + std::to_string(p.info.count) +
                        " values, the addend " + std::to_string(count));
  }
  if (p.info.chunk_len != params.chunk_len) {
    throw ArgumentError("zccl: recompress_add: the stream's chunk length is " +
                        std::to_string(p.info.chunk_len) + ", the output's " +
                        std::to_string(params.chunk_len) + " (they must be equal)");
  }
  const std::vector<uint64_t> shape = checked_shape(dt, count, params, dst, dst_cap);
  if (addend == nullptr && count > 0) throw ArgumentError("zccl: null addend pointer");
  return with_kind(dt, [&](auto kind) -> size_t {
    using K = decltype(kind);
    if constexpr (block::kIsHalf<K>) {
      throw std::logic_error("zccl: recompress_add reached a half stream");
    } else {
      // As many buffers as compress_typed may run threads (one on the pipelined path).
      const int nt = resolve_threads(params.threads, chunk_units(p.info.num_chunks));
      SumChunks<K> source(src, p, static_cast<const typename K::S*>(addend), nt);
      return compress_typed<K>(source, count, params, shape, dst, progress);
    }
  });
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
  with_kind(p.info.dtype, [&](auto kind) {
    using K = decltype(kind);
    LosslessScratch scratch(p.info.chunk_len, sizeof(typename K::S),
                            p.traits.codec != LosslessCodec::None);
    decode_one<K>(src, p, index, static_cast<typename K::S*>(dst), scratch);
  });
  return m;
}

}  // namespace zccl::fz
