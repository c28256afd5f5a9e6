// Deterministic fuzzer for the fZ-light decoders (read_info, decompress, decompress_chunk).
//
// Usage: fuzz_decoder [--seed N] [--iters N] [--seconds S] [--replay FILE] [--out DIR]
//   --iters    number of fuzz iterations (default 30000); each runs several decodes
//   --seconds  stop earlier once this wall-clock budget is spent (default: none)
//   --replay   decode FILE with every entry point and report the outcome (no fuzzing)
//   --out      directory for failing inputs (default: current directory)
//
// Families of inputs, chosen at random per iteration from a seeded PRNG:
//   random      random byte strings of length 0..4096 (some with a plausible header prefix)
//   mutated     valid streams with bit flips, byte sets, truncation, extension, insertion,
//               deletion, chunk-table edits, header-field edits (count, chunk_len, eb, bin, ndim,
//               total bytes, version, dtype, lossless codec, ...), chunk swaps and splices. The
//               corpus: format version 3 streams from the encoder, of all four dtypes (float32/
//               float64/float16/bfloat16; many sizes/bounds/chunk lengths, outliers, raw,
//               encoded and direct chunks (noise inputs), constant chunks and repeats, lossless
//               codec 0 and 1 (zstd) chunks); every one again as version 2 (direct chunks
//               rewritten as raw chunks of their values, the rest unchanged: a stream without
//               direct chunks is only relabelled) and every float32/float64 one as version 1
//               (encoded chunks rewritten to the v1 layout, constant/repeat/lossless/direct
//               chunks to raw ones); each must decode to exactly the v3 stream's values. The
//               format carries CRC-32C checksums over the header+table and over every chunk, so
//               each of these must be rejected: a mutated stream that decodes to values
//               different from the original is a FAILURE (one that decodes to identical values
//               is counted and reported).
//   resealed    the same edits, plus structural edits inside chunks, after which the checksums
//               (a repeat's: its constant chunk's) and the recorded total are recomputed:
//               every version: mode, q_start, outlier count and indices, chunk resizing;
//               v1: code lengths; v2/v3: bitmap bits and padding, code lengths (also with the
//               planes resized to match), constant chunks (value, size, into a repeat, relabel),
//               repeats (into a constant, size, the repeated chunk relabelled), zstd frames
//               (truncated, extended, bit flips, hand-made frames of right or wrong size);
//               direct chunks: the same bitmap-layout edits, their outlier fields, and encoded
//               <-> direct conversions (q_start dropped or added).
//               These may legitimately decode; they exercise the structural validation behind
//               the checksums. Oracle: the entry points agree (read_info/decompress/
//               decompress_chunk, any thread count, with and without progress), and any
//               exception is a zccl::fz::StreamError or ArgumentError.
//   synthesized streams built from scratch with random but well-sealed headers and chunk bodies:
//               version 1 (random structure), and versions 2 and 3 (every chunk kind and dtype,
//               codec 0/1 with hand-made zstd frames of raw and RLE blocks; v3 also direct
//               chunks). A well-formed v2/v3 stream must decode to exactly the values the format
//               defines (an independent scalar model of the decoder: Lorenzo sums, or for a
//               direct chunk the planes' signed magnitudes as the codes, C(q) * C(bin) rounded
//               to the half type, outliers, byte planes); one with a deliberate defect must be
//               refused. A direct chunk in a version-2 stream is such a defect; and every
//               well-formed v3 stream holding direct chunks is also relabelled version 2 and 1,
//               which must be refused (in v2 exactly the direct chunks: the others still decode
//               to the model's values).
//
// On failure the input is written to DIR/fuzz_fail_seed<S>_iter<I>.bin (also from a sanitizer
// report, through the sanitizer death callback) and the program exits non-zero.
//
// Never crashing and never touching memory out of bounds is checked by AddressSanitizer: every
// input is copied into a heap buffer of exactly its length, and every destination is exactly
// as large as the count passed with it.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fzlight.h"

namespace fz = zccl::fz;

extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

// ------------------------------------------------------------------------------------------------
// Utilities.

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  bool chance(unsigned one_in) { return below(one_in) == 0; }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
};

using Bytes = std::vector<uint8_t>;

// Independent CRC-32C (Castagnoli, reflected, init/xorout ~0), bitwise-table.
uint32_t crc32c(const uint8_t* p, size_t n) {
  static uint32_t table[256];
  static bool init = false;
  if (!init) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      table[i] = c;
    }
    init = true;
  }
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

template <class V> V load(const Bytes& b, size_t off) {
  V v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}
template <class V> void store(Bytes& b, size_t off, V v) { std::memcpy(b.data() + off, &v, sizeof v); }

// Layout of a stream, as documented in csrc/compress/fzlight_format.h (versions 1, 2 and 3):
//   0 magic[4] | 4 version u8 | 5 dtype u8 | 6 block len u8 | 7 ndim u8 | 8 count u64 | 16 eb f64
//   | 24 bin f64 | 32 chunk_len u32 | 36 codec u32 (v1: reserved, 0) | 40 total bytes u64
//   | 48 shape u64*ndim | table (u32 size, u32 crc)*num_chunks | u32 crc of all above | chunks
// Chunk: u8 mode (0 encoded, 1 raw, v2: 2 constant, 3 lossless = zstd frame of byte planes);
// encoded: i32 q_start, u32 n_outliers, then v1: u8 len per block; v2: bitmap of nonzero blocks,
// u8 len per set bit; then planes, outlier indices, outlier values. v2: a table size of 0 repeats
// the constant chunk before it (CRC: that chunk's 1 + elem bytes). v3: mode 4 (direct) is
// u8 4, u32 n_outliers, then the v2 encoded layout (bitmap, lengths, planes, outliers) with the
// planes holding the codes themselves; v1/v2 streams with mode 4 are corrupt.
constexpr size_t kFixed = 48;
constexpr uint8_t kModeEncoded = 0, kModeDirect = 4;
constexpr size_t kEncodedFixed = 9, kDirectFixed = 5;  // mode [+ q_start] + n_outliers
constexpr size_t kOffNdim = 7, kOffCount = 8, kOffEb = 16, kOffBin = 24, kOffChunkLen = 32,
                 kOffCodec = 36, kOffTotal = 40;

// Bytes per stored value of a dtype code (unknown codes: 4, for mutations only).
size_t elem_size(uint8_t dtype_code) { return dtype_code == 2 ? 8 : (dtype_code == 3 || dtype_code == 4) ? 2 : 4; }
size_t dt_elem(fz::DType dt) { return elem_size(static_cast<uint8_t>(dt)); }

struct Layout {
  bool ok = false;
  size_t ndim = 0;
  uint64_t count = 0;
  uint32_t chunk_len = 0;
  uint64_t nchunks = 0;
  size_t table = 0;     // offset of the chunk table
  size_t hdr_crc = 0;   // offset of the header CRC
  size_t data = 0;      // offset of the first chunk
  std::vector<size_t> off, size;  // per chunk (only when the table fits)
};

// Best-effort layout from the header fields as they are (no validation beyond fitting in `b`).
Layout layout_of(const Bytes& b) {
  Layout L;
  if (b.size() < kFixed) return L;
  L.ndim = b[kOffNdim];
  L.count = load<uint64_t>(b, kOffCount);
  L.chunk_len = load<uint32_t>(b, kOffChunkLen);
  if (L.chunk_len == 0) return L;
  L.nchunks = L.count == 0 ? 0 : (L.count - 1) / L.chunk_len + 1;
  if (L.nchunks > b.size() / 8) return L;
  L.table = kFixed + 8 * L.ndim;
  L.hdr_crc = L.table + 8 * L.nchunks;
  L.data = L.hdr_crc + 4;
  if (L.data > b.size()) return L;
  size_t at = L.data;
  for (uint64_t c = 0; c < L.nchunks; ++c) {
    const size_t sz = load<uint32_t>(b, L.table + 8 * c);
    L.off.push_back(at);
    L.size.push_back(sz);
    at += sz;
  }
  L.ok = true;
  return L;
}

// The bytes chunk c's CRC covers: its own, or for a repeat (size 0, version 2) the 1 + elem bytes
// that end where it starts. Returns false when they are not inside `b`.
bool crc_span(const Bytes& b, const Layout& L, uint64_t c, size_t& at, size_t& n) {
  at = L.off[c];
  n = L.size[c];
  if (n == 0 && b[4] != 1) {
    n = 1 + elem_size(b[5]);
    if (at < n) return false;
    at -= n;
  }
  return at + n <= b.size();
}

// Recomputes every checksum that can be recomputed (chunks that fit, then the header).
void reseal(Bytes& b, bool fix_total) {
  Layout L = layout_of(b);
  if (!L.ok) {
    // Still seal the header CRC where the (odd) layout puts it, if it fits.
    return;
  }
  if (fix_total) {
    size_t end = L.data;
    for (size_t s : L.size) end += s;
    store<uint64_t>(b, kOffTotal, end);
  }
  for (uint64_t c = 0; c < L.nchunks; ++c) {
    size_t at, n;
    if (crc_span(b, L, c, at, n)) store<uint32_t>(b, L.table + 8 * c + 4, crc32c(b.data() + at, n));
  }
  store<uint32_t>(b, L.hdr_crc, crc32c(b.data(), L.hdr_crc));
}

// ------------------------------------------------------------------------------------------------
// Half types and zstd frames, written here independently of the library.

// float -> IEEE binary16 / bfloat16, round to nearest even (the decoder's narrowing).
uint16_t f32_to_f16(float x) {
  const double v = x;
  if (std::isnan(v)) return 0x7E00;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00);
  if (a < std::ldexp(1.0, -14)) {
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  }
  int e;
  const double f = std::frexp(a, &e);
  double mant = std::nearbyint((2.0 * f - 1.0) * 1024.0);
  int ex = e - 1;
  if (mant == 1024.0) {
    mant = 0;
    ++ex;
  }
  if (ex > 15) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(sign | ((ex + 15) << 10) | static_cast<uint16_t>(mant));
}
uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// A zstd frame (RFC 8878) of raw and RLE blocks holding `data`, with its content size recorded
// (single segment): runs of >= 8 equal bytes become RLE blocks. `lie` adds to the recorded size.
Bytes zstd_frame(const Bytes& data, int64_t lie = 0) {
  const uint64_t fcs = static_cast<uint64_t>(static_cast<int64_t>(data.size()) + lie);
  Bytes f = {0x28, 0xB5, 0x2F, 0xFD};
  if (fcs < 256) {
    f.push_back(0x20);
    f.push_back(static_cast<uint8_t>(fcs));
  } else if (fcs < 65536 + 256) {
    f.push_back(0x60);
    f.push_back(static_cast<uint8_t>(fcs - 256));
    f.push_back(static_cast<uint8_t>((fcs - 256) >> 8));
  } else {
    f.push_back(0xA0);
    for (int k = 0; k < 4; ++k) f.push_back(static_cast<uint8_t>(fcs >> (8 * k)));
  }
  constexpr size_t kMaxBlock = 128 * 1024;
  struct Block { bool rle; size_t at, n; };
  std::vector<Block> blocks;
  size_t lit = 0, i = 0;  // literal run start, cursor
  auto flush = [&](size_t end) {
    for (size_t a = lit; a < end; a += kMaxBlock) blocks.push_back({false, a, std::min(kMaxBlock, end - a)});
  };
  while (i < data.size()) {
    size_t j = i;
    while (j < data.size() && data[j] == data[i] && j - i < kMaxBlock) ++j;
    if (j - i >= 8) {
      flush(i);
      blocks.push_back({true, i, j - i});
      lit = j;
    }
    i = j;
  }
  flush(data.size());
  if (blocks.empty()) blocks.push_back({false, 0, 0});
  for (size_t k = 0; k < blocks.size(); ++k) {
    const Block& bl = blocks[k];
    const uint32_t h = (k + 1 == blocks.size() ? 1u : 0u) | (bl.rle ? 2u : 0u) | static_cast<uint32_t>(bl.n << 3);
    f.push_back(static_cast<uint8_t>(h));
    f.push_back(static_cast<uint8_t>(h >> 8));
    f.push_back(static_cast<uint8_t>(h >> 16));
    if (bl.rle) {
      f.push_back(data[bl.at]);
    } else {
      f.insert(f.end(), data.begin() + static_cast<std::ptrdiff_t>(bl.at),
               data.begin() + static_cast<std::ptrdiff_t>(bl.at + bl.n));
    }
  }
  return f;
}

// The values whose codec-1 byte planes (byte k of every value, k = 0..) are `planes`.
Bytes values_of(const Bytes& planes, size_t m, size_t elem) {
  Bytes v(m * elem);
  for (size_t k = 0; k < elem; ++k)
    for (size_t i = 0; i < m; ++i) v[i * elem + k] = planes[k * m + i];
  return v;
}

std::string g_out_dir = ".";
uint64_t g_seed = 1, g_iter = 0;
std::string g_desc;   // description of the current input
Bytes g_current;      // the current input, dumped on failure

// ------------------------------------------------------------------------------------------------
// Corpus of valid streams.

struct Entry {
  std::string name;
  uint8_t version = 3;  // the encoder's; 2 and 1 for the rewritten copies
  fz::DType dt;
  uint64_t count;
  uint32_t chunk_len;
  Bytes stream;
  Bytes decoded;  // reference decode, count * sizeof(T) bytes
};

template <class T> std::vector<T> gen(const std::string& kind, size_t n, Rng& r) {
  std::vector<T> x(n);
  using Lim = std::numeric_limits<T>;
  for (size_t i = 0; i < n; ++i) {
    const double di = static_cast<double>(i);
    double v;
    if (kind == "smooth") {
      v = 10.0 * std::sin(di * 0.01) + 0.001 * r.uniform();
    } else if (kind == "noise") {
      v = 2.0 * r.uniform() - 1.0;
    } else if (kind == "noisyoutliers") {  // noise (direct chunks) with outliers among it
      const uint64_t m = r.below(24);
      v = m == 0 ? Lim::quiet_NaN() : m == 1 ? -Lim::infinity() : m == 2 ? 1e30 : 4.0 * r.uniform() - 2.0;
    } else if (kind == "halfnoise") {  // 64-value segments, smooth and noise by turns
      v = (i / 64) % 2 ? 2.0 * r.uniform() - 1.0 : std::sin(di * 0.02);
    } else if (kind == "outliers") {
      const uint64_t m = r.below(16);
      v = m == 0 ? Lim::quiet_NaN() : m == 1 ? Lim::infinity() : m == 2 ? -Lim::infinity()
          : m == 3 ? 1e30 : m == 4 ? -3e37 : std::cos(di * 0.05);
    } else if (kind == "steps") {
      v = static_cast<double>((i / 37) % 7) * 1e4 - 3e4;
    } else if (kind == "bits") {
      if (sizeof(T) == 4) {
        const uint32_t u = static_cast<uint32_t>(r.next());
        float f;
        std::memcpy(&f, &u, 4);
        v = f;
      } else {
        const uint64_t u = r.next();
        std::memcpy(&v, &u, 8);
      }
      x[i] = static_cast<T>(v);
      continue;
    } else if (kind == "const") {
      v = 1.25;
    } else if (kind == "construns") {  // 64-value segments: runs of 3 equal levels, some varied
      const uint64_t level = (i / 64 / 3) % 5;
      v = level == 0 ? 0.0 : level == 1 ? -0.0 : level == 2 ? 1.25 : level == 3 ? Lim::quiet_NaN()
          : std::sin(di * 0.1);
    } else {
      v = 0;
    }
    x[i] = static_cast<T>(v);
  }
  return x;
}

// The values of a corpus input as stored bytes; half types: the float data rounded to the type
// ("bits": random 16-bit patterns).
Bytes gen_bytes(fz::DType dt, const std::string& kind, size_t n, Rng& r) {
  Bytes out(n * dt_elem(dt));
  if (dt == fz::DType::Float64) {
    const std::vector<double> x = gen<double>(kind, n, r);
    if (n) std::memcpy(out.data(), x.data(), out.size());
  } else if (dt == fz::DType::Float32) {
    const std::vector<float> x = gen<float>(kind, n, r);
    if (n) std::memcpy(out.data(), x.data(), out.size());
  } else {
    const std::vector<float> x = gen<float>(kind, n, r);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = kind == "bits" ? static_cast<uint16_t>(r.next())
                         : dt == fz::DType::Float16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

const char* dt_name(fz::DType dt) {
  return dt == fz::DType::Float32 ? "f32" : dt == fz::DType::Float64 ? "f64" : dt == fz::DType::Float16 ? "f16" : "bf16";
}

Entry make_entry(fz::DType dt, const std::string& kind, size_t n, double eb, uint32_t cl, Rng& r,
                 const std::vector<uint64_t>* shape = nullptr,
                 fz::LosslessCodec codec = fz::LosslessCodec::Auto) {
  const Bytes x = gen_bytes(dt, kind, n, r);
  fz::CompressParams p;
  p.error_bound = eb;
  p.chunk_len = cl;
  p.threads = 1;
  p.lossless_codec = codec;
  if (shape) p.shape = *shape;
  const size_t ndim = shape ? shape->size() : 1;
  g_desc = "building the corpus: compressing " + kind + " n=" + std::to_string(n) + " (not a fuzz input)";
  const size_t cap = fz::max_compressed_size(dt, n, cl, ndim);
  Bytes dst(cap);
  const size_t len = fz::compress(x.data(), dt, n, p, dst.data(), cap);
  dst.resize(len);
  Entry e;
  char name[160];
  std::snprintf(name, sizeof name, "%s n=%zu eb=%g cl=%u kind=%s ndim=%zu codec=%u", dt_name(dt), n, eb, cl,
                kind.c_str(), ndim, static_cast<unsigned>(codec));
  e.name = name;
  e.version = dst[4];
  e.dt = dt;
  e.count = n;
  e.chunk_len = cl;
  e.stream = dst;
  e.decoded.resize(n * dt_elem(dt));
  fz::decompress(dst.data(), len, e.decoded.data(), n, 1);
  return e;
}

template <class T>
Entry make_entry(const std::string& kind, size_t n, double eb, uint32_t cl, Rng& r,
                 const std::vector<uint64_t>* shape = nullptr) {
  return make_entry(sizeof(T) == 4 ? fz::DType::Float32 : fz::DType::Float64, kind, n, eb, cl, r, shape);
}

// Chunk c of a stream whose chunks are in the bitmap layout: is it a direct chunk?
bool is_direct(const Entry& e, const Layout& L, uint64_t c) {
  return L.size[c] > 0 && e.stream[L.off[c]] == kModeDirect;
}

size_t direct_chunks(const Entry& e) {
  const Layout L = layout_of(e.stream);
  size_t n = 0;
  for (uint64_t c = 0; c < L.nchunks; ++c) n += is_direct(e, L, c);
  return n;
}

// The same values as a version-2 stream: direct chunks become raw chunks of the decoded values,
// every other chunk (and repeat entry) stays as it is. Without direct chunks only the version
// byte changes. It must decode to exactly the version-3 stream's values.
Entry downgrade_to_v2(const Entry& e) {
  const Layout L = layout_of(e.stream);
  const size_t elem = dt_elem(e.dt);
  Bytes b(e.stream.begin(), e.stream.begin() + static_cast<std::ptrdiff_t>(L.data));
  b[4] = 2;
  for (uint64_t c = 0; c < L.nchunks; ++c) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(L.chunk_len, L.count - c * L.chunk_len));
    Bytes ch;
    if (is_direct(e, L, c)) {
      ch.push_back(1);
      const uint8_t* v = e.decoded.data() + c * L.chunk_len * elem;
      ch.insert(ch.end(), v, v + static_cast<size_t>(m) * elem);
    } else {
      ch.assign(e.stream.begin() + static_cast<std::ptrdiff_t>(L.off[c]),
                e.stream.begin() + static_cast<std::ptrdiff_t>(L.off[c] + L.size[c]));
    }
    store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(ch.size()));
    b.insert(b.end(), ch.begin(), ch.end());
  }
  reseal(b, true);
  Entry v2 = e;
  v2.name = "v2<-" + e.name;
  v2.version = 2;
  v2.stream = b;
  return v2;
}

// The same values as a version-1 stream: encoded chunks rewritten from the bitmap layout to one
// length byte per block; constant, repeat, lossless and direct chunks become raw chunks of the
// decoded values; codec field 0. It must decode to exactly the version-3 stream's values.
Entry downgrade_to_v1(const Entry& e) {
  const Layout L = layout_of(e.stream);
  const size_t elem = dt_elem(e.dt);
  Bytes b(e.stream.begin(), e.stream.begin() + static_cast<std::ptrdiff_t>(L.data));
  b[4] = 1;
  store<uint32_t>(b, kOffCodec, 0);
  for (uint64_t c = 0; c < L.nchunks; ++c) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(L.chunk_len, L.count - c * L.chunk_len));
    const uint32_t nblocks = (m + 31) / 32;
    const uint8_t* src = e.stream.data() + L.off[c];
    const size_t sz = L.size[c];
    Bytes ch;
    if (sz > 0 && src[0] == 0) {  // encoded: bitmap + lengths -> a length per block
      const uint32_t bm = (nblocks + 7) / 8;
      ch.assign(src, src + 9);
      size_t k = 9 + bm;
      for (uint32_t blk = 0; blk < nblocks; ++blk) {
        ch.push_back(((src[9 + blk / 8] >> (blk % 8)) & 1u) ? src[k++] : 0);
      }
      ch.insert(ch.end(), src + k, src + sz);
    } else if (sz > 0 && src[0] == 1) {
      ch.assign(src, src + sz);
    } else {  // constant, repeat, lossless, direct: raw
      ch.push_back(1);
      const uint8_t* v = e.decoded.data() + c * L.chunk_len * elem;
      ch.insert(ch.end(), v, v + static_cast<size_t>(m) * elem);
    }
    store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(ch.size()));
    b.insert(b.end(), ch.begin(), ch.end());
  }
  reseal(b, true);
  Entry v1 = e;
  v1.name = "v1<-" + e.name;
  v1.version = 1;
  v1.stream = b;
  return v1;
}

// Version-2 features: constant runs and repeats, lossless codecs, half types.
void add_v2_entries(std::vector<Entry>& corpus, fz::DType dt, Rng& r) {
  using C = fz::LosslessCodec;
  corpus.push_back(make_entry(dt, "construns", 64 * 30 + 17, 1e-2, 64, r));
  corpus.push_back(make_entry(dt, "construns", 64 * 30 + 17, 0.0, 64, r));
  corpus.push_back(make_entry(dt, "smooth", 3000, 0.0, 1024, r));                     // codec 1
  corpus.push_back(make_entry(dt, "smooth", 700, 0.0, 256, r, nullptr, C::None));     // raw chunks
  corpus.push_back(make_entry(dt, "zero", 5120 * 6 + 3, 1e-3, 5120, r));              // repeats
  corpus.push_back(make_entry(dt, "const", 2048, 1e-1, 256, r));
  if (dt == fz::DType::Float16 || dt == fz::DType::BFloat16) {
    corpus.push_back(make_entry(dt, "outliers", 700, 1e-2, 64, r));
    corpus.push_back(make_entry(dt, "smooth", 3000, 1e-3, 1024, r));
    corpus.push_back(make_entry(dt, "steps", 2100, 1.0, 512, r));
    corpus.push_back(make_entry(dt, "bits", 400, 0.0, 96, r));
    corpus.push_back(make_entry(dt, "bits", 300, 1e-3, 128, r));
    corpus.push_back(make_entry(dt, "noise", 300, 1e-4, 32, r));
    const std::vector<uint64_t> shp = {7, 111};
    corpus.push_back(make_entry(dt, "outliers", 777, 1e-1, 160, r, &shp));
  }
}

// Inputs the encoder codes as direct chunks (no correlation between neighbours), some mixed
// with encoded chunks, with outliers, partial blocks, a 2-D shape.
void add_direct_entries(std::vector<Entry>& corpus, fz::DType dt, Rng& r) {
  const bool half = dt == fz::DType::Float16 || dt == fz::DType::BFloat16;
  corpus.push_back(make_entry(dt, "noise", 1000, half ? 1e-2 : 1e-3, 256, r));
  corpus.push_back(make_entry(dt, "noisyoutliers", 777, half ? 1e-2 : 1e-4, 128, r));
  corpus.push_back(make_entry(dt, "halfnoise", 64 * 9 + 5, 1e-3, 64, r));
  corpus.push_back(make_entry(dt, "noise", 4100, half ? 1e-1 : 1e-2, 1024, r));
  const std::vector<uint64_t> shp = {13, 21};
  corpus.push_back(make_entry(dt, "noisyoutliers", 13 * 21, 1e-2, 96, r, &shp));
}

template <class T> void add_entries(std::vector<Entry>& corpus, Rng& r) {
  corpus.push_back(make_entry<T>("smooth", 0, 1e-3, 5120, r));
  corpus.push_back(make_entry<T>("smooth", 1, 0.0, 5120, r));
  {
    const std::vector<uint64_t> zero_d;
    corpus.push_back(make_entry<T>("smooth", 1, 1e-2, 5120, r, &zero_d));
  }
  corpus.push_back(make_entry<T>("smooth", 33, 1e-3, 32, r));
  corpus.push_back(make_entry<T>("outliers", 100, 1e-4, 5120, r));
  corpus.push_back(make_entry<T>("outliers", 700, 1e-2, 64, r));
  corpus.push_back(make_entry<T>("noise", 1000, 1e-2, 64, r));
  corpus.push_back(make_entry<T>("noise", 300, 1e-7, 32, r));  // long codes
  corpus.push_back(make_entry<T>("bits", 400, 0.0, 96, r));    // raw chunks
  corpus.push_back(make_entry<T>("bits", 300, 1e-3, 128, r));  // mostly outliers -> raw fallback
  corpus.push_back(make_entry<T>("smooth", 5121, 1e-3, 5120, r));
  corpus.push_back(make_entry<T>("steps", 4100, 1e-5, 1024, r));
  corpus.push_back(make_entry<T>("const", 2048, 1e-1, 256, r));  // zero blocks
  corpus.push_back(make_entry<T>("smooth", 64, 1e300, 32, r));
  corpus.push_back(make_entry<T>("smooth", 3000, 1e-3, 65536, r));
  {
    const std::vector<uint64_t> shp = {7, 111};
    corpus.push_back(make_entry<T>("outliers", 777, 1e-1, 160, r, &shp));
  }
  {
    std::vector<uint64_t> shp(fz::kMaxDims, 1);
    shp[3] = 50;
    corpus.push_back(make_entry<T>("noise", 50, 1e-3, 32, r, &shp));
  }
}

// ------------------------------------------------------------------------------------------------
// Running the decoders on one input.

struct Stats {
  uint64_t iters = 0, decodes = 0, lib_errors = 0, successes = 0;
  uint64_t plain = 0, plain_threw = 0, plain_identical = 0, mutated_decodes = 0;
  uint64_t resealed = 0, resealed_decoded = 0, random = 0, synthesized = 0, synth_decoded = 0;
  uint64_t synth_v2 = 0, synth_v2_valid = 0, synth_v2_checked = 0, synth_v2_invalid = 0;
  uint64_t synth_v3 = 0, synth_v3_valid = 0, synth_v3_checked = 0, synth_v3_invalid = 0;
  uint64_t synth_direct_chunks = 0;  // direct chunks in well-formed v3 streams, values checked
  uint64_t synth_v2_with_direct = 0;  // synthesized v2 streams given a direct chunk (refused)
  uint64_t synth_relabelled = 0;      // well-formed v3 streams with direct chunks, as v2 and v1
  uint64_t corpus_v1 = 0, corpus_v2 = 0, corpus_v3 = 0, corpus_direct = 0, corpus_relabelled = 0;
};

Stats g_stats;

void dump_current(const char* why) {
  static bool dumped = false;  // a sanitizer report may come both as a callback and as SIGABRT
  if (dumped) return;
  dumped = true;
  char path[512];
  std::snprintf(path, sizeof path, "%s/fuzz_fail_seed%" PRIu64 "_iter%" PRIu64 ".bin", g_out_dir.c_str(),
                g_seed, g_iter);
  if (FILE* f = std::fopen(path, "wb")) {
    if (!g_current.empty()) std::fwrite(g_current.data(), 1, g_current.size(), f);
    std::fclose(f);
  }
  std::fprintf(stderr, "fuzz_decoder: %s\n  seed=%" PRIu64 " iter=%" PRIu64 " input=%s (%zu bytes)\n  input saved to %s\n",
               why, g_seed, g_iter, g_desc.c_str(), g_current.size(), path);
  std::fflush(stderr);
}

void on_sanitizer_death() { dump_current("sanitizer report (see above)"); }

// UBSan with abort_on_error=1 (and anything else that aborts) ends here.
extern "C" void on_fatal_signal(int sig) {
  dump_current(sig == SIGABRT ? "abort (sanitizer report or assertion above)" : "fatal signal");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

[[noreturn]] void fail(const std::string& what) {
  dump_current(("FAILURE: " + what).c_str());
  std::exit(1);
}

enum class Outcome { Ok, LibError };

// Runs fn; returns Ok or LibError; anything else (a foreign exception type) is a failure.
// `allow_index_error`: std::out_of_range accepted (decompress_chunk with an index past the end).
Outcome guarded(const char* what, const std::function<void()>& fn, bool allow_index_error = false) {
  ++g_stats.decodes;
  try {
    fn();
    ++g_stats.successes;
    return Outcome::Ok;
  } catch (const fz::StreamError&) {
  } catch (const fz::ArgumentError&) {
  } catch (const std::out_of_range& e) {
    if (!allow_index_error) fail(std::string(what) + " threw std::out_of_range: " + e.what());
  } catch (const std::exception& e) {
    fail(std::string(what) + " threw a foreign exception type: " + e.what());
  } catch (...) {
    fail(std::string(what) + " threw a non-std exception");
  }
  ++g_stats.lib_errors;
  return Outcome::LibError;
}

struct DecodeResult {
  bool info_ok = false;
  fz::StreamInfo info;
  bool full_ok = false;
  Bytes full;  // decoded bytes when full_ok
  uint64_t dst_count = 0;
  size_t elem = 4;
  uint64_t chunks_tried = 0, chunks_failed = 0;
  bool chunks_match = true;
};

constexpr uint64_t kMaxDecodeValues = 1u << 21;

// Decodes `in` (copied into an exact-size heap buffer) through every entry point.
// `expect_count`/`expect_dt` size the destinations when the header cannot be trusted.
// `ref`: for plain mutations of a valid stream, the original decode; every successful output
// must then equal it (the whole stream, or the chunk's slice).
DecodeResult decode_all(const Bytes& in, uint64_t expect_count, fz::DType expect_dt, Rng& r,
                        bool full_checks, const Entry* ref = nullptr) {
  g_current = in;
  DecodeResult res;
  const size_t len = in.size();
  std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);  // exact size, even for len == 0
  if (len) std::memcpy(buf.get(), in.data(), len);
  const uint8_t* src = buf.get();

  guarded("read_info", [&] {
    res.info = fz::read_info(src, len);
    res.info_ok = true;
  });
  fz::DType dt = expect_dt;
  uint64_t count = expect_count;
  if (res.info_ok) {
    dt = res.info.dtype;
    count = res.info.count;
    // Consistency of what read_info reports.
    if (res.info.total_bytes != len) fail("read_info accepted a stream whose total_bytes != length");
    if (res.info.header_bytes > len) fail("read_info: header_bytes beyond the stream");
    if (res.info.chunk_len < fz::kBlockLen || res.info.chunk_len > fz::kMaxChunkLen ||
        res.info.chunk_len % fz::kBlockLen)
      fail("read_info accepted an invalid chunk length");
    const uint64_t nch = res.info.count == 0 ? 0 : (res.info.count - 1) / res.info.chunk_len + 1;
    if (res.info.num_chunks != nch) fail("read_info: num_chunks inconsistent with count/chunk_len");
    if (!(res.info.error_bound >= 0) || !std::isfinite(res.info.error_bound))
      fail("read_info accepted an invalid error bound");
    if (res.info.shape.size() > fz::kMaxDims) fail("read_info: ndim > kMaxDims");
    if (count > kMaxDecodeValues) count = expect_count;  // keep allocations modest
  }
  res.elem = dt_elem(dt);
  res.dst_count = count;

  // Whole-stream decode into exactly dst_count values.
  {
    std::unique_ptr<uint8_t[]> dst(new uint8_t[count * res.elem]);
    const int threads = full_checks ? 1 : 1 + static_cast<int>(r.below(3));
    const Outcome o = guarded("decompress", [&] { fz::decompress(src, len, dst.get(), count, threads); });
    if (o == Outcome::Ok) {
      res.full_ok = true;
      res.full.assign(dst.get(), dst.get() + count * res.elem);
      if (!res.info_ok) fail("decompress succeeded where read_info failed");
      if (count < res.info.count) fail("decompress wrote into a destination smaller than count");
      if (ref && (res.info.count != ref->count || res.info.dtype != ref->dt ||
                  std::memcmp(res.full.data(), ref->decoded.data(), ref->decoded.size()) != 0))
        fail("mutated stream decoded without error to different values");
    }
  }
  if (full_checks && res.info_ok && res.dst_count >= res.info.count) {
    // Other thread counts and the pipelined path must agree with threads = 1.
    for (int threads : {2, 3}) {
      std::unique_ptr<uint8_t[]> dst(new uint8_t[count * res.elem]);
      const Outcome o = guarded("decompress(threads)", [&] { fz::decompress(src, len, dst.get(), count, threads); });
      if ((o == Outcome::Ok) != res.full_ok) fail("decompress outcome depends on the thread count");
      if (o == Outcome::Ok && count && std::memcmp(dst.get(), res.full.data(), count * res.elem) != 0)
        fail("decompress output depends on the thread count");
    }
    {
      std::unique_ptr<uint8_t[]> dst(new uint8_t[count * res.elem]);
      uint64_t calls = 0;
      const fz::Progress prog = [&](uint64_t done, uint64_t total) {
        ++calls;
        if (done != calls || total != res.info.num_chunks) fail("progress arguments out of sequence");
      };
      const Outcome o = guarded("decompress(progress)", [&] { fz::decompress(src, len, dst.get(), count, 1, &prog); });
      if ((o == Outcome::Ok) != res.full_ok) fail("pipelined decompress outcome differs");
      if (o == Outcome::Ok && count && std::memcmp(dst.get(), res.full.data(), count * res.elem) != 0)
        fail("pipelined decompress output differs");
    }
  }
  // A destination one value short must be refused when the stream is otherwise good.
  if (res.full_ok && res.info.count > 0 && r.chance(4)) {
    const uint64_t c = res.info.count - 1;
    std::unique_ptr<uint8_t[]> dst(new uint8_t[c * res.elem]);
    if (guarded("decompress(short dst)", [&] { fz::decompress(src, len, dst.get(), c, 1); }) == Outcome::Ok)
      fail("decompress accepted a destination one value too small");
  }

  // Random access.
  const uint32_t cl = res.info_ok ? res.info.chunk_len : fz::kDefaultChunkLen;
  const uint64_t nch = res.info_ok ? res.info.num_chunks : 1 + r.below(4);
  std::vector<uint64_t> idx;
  if (full_checks) {
    for (uint64_t c = 0; c < std::min<uint64_t>(nch, 64); ++c) idx.push_back(c);
    if (nch > 64) idx.push_back(nch - 1);
  } else {
    idx.push_back(r.below(nch + 1));
    if (nch) idx.push_back(nch - 1);
  }
  for (uint64_t c : idx) {
    const bool past_end = res.info_ok && c >= res.info.num_chunks;
    std::unique_ptr<uint8_t[]> dst(new uint8_t[static_cast<size_t>(cl) * res.elem]);
    uint64_t got = 0;
    const Outcome o = guarded(
        "decompress_chunk", [&] { got = fz::decompress_chunk(src, len, c, dst.get(), cl); }, past_end);
    if (o == Outcome::Ok) {
      if (!res.info_ok) fail("decompress_chunk succeeded where read_info failed");
      if (past_end) fail("decompress_chunk accepted an index past the last chunk");
      const uint64_t want = std::min<uint64_t>(cl, res.info.count - c * cl);
      if (got != want) fail("decompress_chunk returned a wrong value count");
      if (res.full_ok && std::memcmp(dst.get(), res.full.data() + c * cl * res.elem, got * res.elem) != 0)
        fail("decompress_chunk differs from the slice of decompress");
      if (ref && (res.info.dtype != ref->dt || res.info.chunk_len != ref->chunk_len ||
                  (c * cl + got) * res.elem > ref->decoded.size() ||
                  std::memcmp(dst.get(), ref->decoded.data() + c * cl * res.elem, got * res.elem) != 0))
        fail("decompress_chunk of a mutated stream returned values different from the original");
    }
    if (!past_end) {
      ++res.chunks_tried;
      if (o != Outcome::Ok) res.chunks_failed++;
    }
  }
  if (res.full_ok && res.chunks_failed) fail("decompress succeeded but decompress_chunk failed on a chunk");
  if (full_checks && res.info_ok && !res.full_ok && res.dst_count >= res.info.count && nch <= 64 &&
      res.chunks_failed == 0)
    fail("decompress failed but every decompress_chunk succeeded");
  return res;
}

// ------------------------------------------------------------------------------------------------
// Mutations.

void flip_bits(Bytes& b, Rng& r, size_t lo, size_t hi) {
  if (hi <= lo) return;
  const int n = 1 + static_cast<int>(r.below(8));
  for (int k = 0; k < n; ++k) {
    const size_t i = lo + r.below(hi - lo);
    b[i] ^= static_cast<uint8_t>(1u << r.below(8));
  }
}

void set_bytes(Bytes& b, Rng& r, size_t lo, size_t hi) {
  if (hi <= lo) return;
  const int n = 1 + static_cast<int>(r.below(4));
  for (int k = 0; k < n; ++k) {
    const size_t i = lo + r.below(hi - lo);
    static const uint8_t interesting[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, 0x1F, 0x20, 0x21};
    b[i] = r.chance(2) ? interesting[r.below(sizeof interesting)] : static_cast<uint8_t>(r.next());
  }
}

uint64_t interesting_u64(Rng& r, uint64_t orig) {
  switch (r.below(12)) {
    case 0: return 0;
    case 1: return orig + 1;
    case 2: return orig - 1;
    case 3: return orig * 2;
    case 4: return orig / 2;
    case 5: return ~0ull;
    case 6: return 1ull << 63;
    case 7: return (1ull << 32) + orig;
    case 8: return orig + 32;
    case 9: return orig ^ (1ull << r.below(64));
    case 10: return r.below(100000);
    default: return r.next();
  }
}

double interesting_f64(Rng& r, double orig) {
  switch (r.below(10)) {
    case 0: return 0.0;
    case 1: return -orig;
    case 2: return std::numeric_limits<double>::quiet_NaN();
    case 3: return std::numeric_limits<double>::infinity();
    case 4: return orig * 2;
    case 5: return orig / 2;
    case 6: return std::nextafter(orig, 1e308);
    case 7: return 1e-320;
    case 8: return std::numeric_limits<double>::max();
    default: {
      const uint64_t u = r.next();
      double d;
      std::memcpy(&d, &u, 8);
      return d;
    }
  }
}

// Edits one header field; returns its name.
const char* edit_header_field(Bytes& b, Rng& r) {
  if (b.size() < kFixed) return "none";
  switch (r.below(11)) {
    case 0: store<uint64_t>(b, kOffCount, interesting_u64(r, load<uint64_t>(b, kOffCount))); return "count";
    case 1: {
      static const uint32_t v[] = {0, 1, 31, 32, 33, 64, 4096, 65504, 65536, 65537, 65568, 0xFFFFFFFFu, 0x80000000u};
      const uint32_t o = load<uint32_t>(b, kOffChunkLen);
      const uint32_t n = r.chance(2) ? v[r.below(sizeof v / sizeof v[0])]
                                     : static_cast<uint32_t>(o + 32 * (static_cast<int64_t>(r.below(5)) - 2));
      store<uint32_t>(b, kOffChunkLen, n);
      return "chunk_len";
    }
    case 2: store<double>(b, kOffEb, interesting_f64(r, load<double>(b, kOffEb))); return "eb";
    case 3: store<double>(b, kOffBin, interesting_f64(r, load<double>(b, kOffBin))); return "bin";
    case 4: {
      static const uint8_t v[] = {0, 1, 2, 63, 64, 65, 128, 255};
      b[kOffNdim] = r.chance(2) ? v[r.below(sizeof v)] : static_cast<uint8_t>(b[kOffNdim] + r.below(3) - 1);
      return "ndim";
    }
    case 5: store<uint64_t>(b, kOffTotal, interesting_u64(r, load<uint64_t>(b, kOffTotal))); return "total";
    case 6: {
      const uint64_t k = r.below(3);
      b[5] = static_cast<uint8_t>(k == 0 ? (b[5] ^ 3) : k == 1 ? 1 + r.below(4) : r.next());
      return "dtype";
    }
    case 7: b[4] = static_cast<uint8_t>(r.chance(2) ? 1 + r.below(3) : r.next()); return "version";
    case 8: b[6] = static_cast<uint8_t>(r.chance(2) ? 64 : r.next()); return "block_len";
    case 9: {  // the lossless codec (version >= 2; reserved, 0, in version 1)
      static const uint32_t v[] = {0, 1, 2, 255, 0x80000000u};
      store<uint32_t>(b, kOffCodec, r.chance(2) ? v[r.below(5)] : static_cast<uint32_t>(r.next()));
      return "codec";
    }
    default: b[r.below(4)] ^= static_cast<uint8_t>(1 + r.below(255)); return "magic";
  }
}

// Edits one chunk-table entry (size or CRC); returns false when there is no table.
bool edit_table(Bytes& b, Rng& r) {
  const Layout L = layout_of(b);
  if (!L.ok || L.nchunks == 0) return false;
  const uint64_t c = r.below(L.nchunks);
  const size_t at = L.table + 8 * c + (r.chance(2) ? 0 : 4);
  const uint32_t o = load<uint32_t>(b, at);
  static const uint32_t v[] = {0, 1, 2, 9, 0xFFFFFFFFu, 0x80000000u};
  uint32_t n = r.chance(3) ? v[r.below(6)] : static_cast<uint32_t>(o + static_cast<int64_t>(r.below(9)) - 4);
  if (n == o) n ^= 1;
  store<uint32_t>(b, at, n);
  return true;
}

// Structural edits inside one chunk (meaningful once resealed), version-1 layout (and the edits
// that do not depend on the version).
bool edit_chunk_structure_v1(Bytes& b, Rng& r, std::string& what) {
  const Layout L = layout_of(b);
  if (!L.ok || L.nchunks == 0) return false;
  const uint64_t c = r.below(L.nchunks);
  const size_t off = L.off[c], sz = L.size[c];
  if (sz == 0 || off + sz > b.size()) return false;
  const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(L.chunk_len, L.count - c * L.chunk_len));
  const uint32_t nblocks = (m + 31) / 32;
  const bool encoded = b[off] == 0 && sz >= 9 + nblocks;
  switch (r.below(encoded ? 9 : 3)) {
    case 0:
      b[off] = static_cast<uint8_t>(r.chance(2) ? (b[off] ^ 1) : r.next());
      what = "chunk mode";
      return true;
    case 1: {  // grow or shrink the chunk, keeping the table consistent (resize + table size)
      const int64_t delta = static_cast<int64_t>(r.below(17)) - 8;
      if (delta == 0) return false;
      const size_t pos = off + r.below(sz + 1);
      if (delta > 0) {
        Bytes ins(static_cast<size_t>(delta));
        for (auto& x : ins) x = static_cast<uint8_t>(r.chance(2) ? 0 : r.next());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(std::min(pos, off + sz)), ins.begin(), ins.end());
      } else {
        const size_t del = std::min<size_t>(static_cast<size_t>(-delta), sz - 1);
        const size_t p0 = off + r.below(sz - del + 1);
        if (del == 0 || p0 + del > off + sz) return false;
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(p0), b.begin() + static_cast<std::ptrdiff_t>(p0 + del));
        store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(sz - del));
        what = "chunk shrink";
        return true;
      }
      store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(sz + static_cast<size_t>(delta)));
      what = "chunk grow";
      return true;
    }
    case 2: {  // move the boundary between this chunk and the next
      if (c + 1 >= L.nchunks) return false;
      const int64_t delta = static_cast<int64_t>(r.below(9)) - 4;
      const int64_t a = static_cast<int64_t>(sz) + delta, n = static_cast<int64_t>(L.size[c + 1]) - delta;
      if (delta == 0 || a <= 0 || n <= 0) return false;
      store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(a));
      store<uint32_t>(b, L.table + 8 * (c + 1), static_cast<uint32_t>(n));
      what = "chunk boundary";
      return true;
    }
    case 3: {  // q_start
      static const int32_t v[] = {0, 1, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                                  1 << 30, -(1 << 30)};
      store<int32_t>(b, off + 1, r.chance(2) ? v[r.below(7)] : static_cast<int32_t>(r.next()));
      what = "q_start";
      return true;
    }
    case 4: {  // outlier count
      const uint32_t o = load<uint32_t>(b, off + 5);
      static const uint32_t v[] = {0, 1, 0xFFFFFFFFu, 0x80000000u, 65535, 65536, 65537};
      uint32_t n = r.chance(2) ? v[r.below(7)] : static_cast<uint32_t>(o + static_cast<int64_t>(r.below(5)) - 2);
      if (r.chance(4)) n = m + static_cast<uint32_t>(r.below(3));
      store<uint32_t>(b, off + 5, n);
      what = "n_outliers";
      return true;
    }
    case 5: {  // code lengths
      const size_t i = off + 9 + r.below(nblocks);
      static const uint8_t v[] = {0, 1, 30, 31, 32, 33, 64, 255};
      b[i] = r.chance(2) ? v[r.below(8)] : static_cast<uint8_t>(b[i] + r.below(5) - 2);
      what = "code length";
      return true;
    }
    case 6: {  // code length change compensated by resizing so the sizes add up
      const size_t i = off + 9 + r.below(nblocks);
      const int old_len = b[i];
      const int new_len = static_cast<int>(r.chance(4) ? 32 + r.below(224) : r.below(32));
      const int64_t old_bytes = old_len ? 4 * (old_len + 1) : 0, new_bytes = new_len ? 4 * (new_len + 1) : 0;
      b[i] = static_cast<uint8_t>(new_len);
      const int64_t delta = new_bytes - old_bytes;
      const size_t pos = off + 9 + nblocks;  // somewhere in the planes
      if (delta > 0) {
        Bytes ins(static_cast<size_t>(delta));
        for (auto& x : ins) x = static_cast<uint8_t>(r.next());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), ins.begin(), ins.end());
      } else if (delta < 0) {
        const size_t del = static_cast<size_t>(-delta);
        if (pos + del > off + sz) return false;
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos), b.begin() + static_cast<std::ptrdiff_t>(pos + del));
      }
      store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(static_cast<int64_t>(sz) + delta));
      what = "code length (size-compensated)";
      return true;
    }
    case 7: {  // outlier indices: duplicate, reverse, out of range
      const uint32_t n_out = load<uint32_t>(b, off + 5);
      const size_t elem = elem_size(b[5]);
      if (n_out == 0 || n_out > m || sz < 9 + nblocks + n_out * (2 + elem)) return false;
      const size_t idx0 = off + sz - n_out * (2 + elem);
      const uint32_t k = static_cast<uint32_t>(r.below(n_out));
      static const uint16_t v[] = {0, 1, 31, 32, 5119, 5120, 65535};
      uint16_t nv = r.chance(2) ? v[r.below(7)] : static_cast<uint16_t>(m - 1 + r.below(3));
      if (k > 0 && r.chance(3)) nv = load<uint16_t>(b, idx0 + 2 * (k - 1));  // duplicate
      store<uint16_t>(b, idx0 + 2 * k, nv);
      what = "outlier index";
      return true;
    }
    default: {  // random bytes in the planes / values
      flip_bits(b, r, off + 9 + nblocks, off + sz);
      what = "chunk payload";
      return true;
    }
  }
}

// Structural edits of version-2/3 chunks (meaningful once resealed): repeats, constant chunks,
// lossless (zstd) frames, the bitmap + lengths of encoded and direct chunks, the outlier fields
// of direct chunks and encoded <-> direct conversions. Other chunks, and a third of the time any
// chunk, get the version-independent edits.
bool edit_chunk_structure(Bytes& b, Rng& r, std::string& what) {
  if (b.size() < kFixed || b[4] == 1 || r.chance(3)) return edit_chunk_structure_v1(b, r, what);
  const Layout L = layout_of(b);
  if (!L.ok || L.nchunks == 0) return false;
  const uint64_t c = r.below(L.nchunks);
  const size_t off = L.off[c], sz = L.size[c];
  if (off + sz > b.size()) return false;
  const size_t elem = elem_size(b[5]);
  const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(L.chunk_len, L.count - c * L.chunk_len));
  const uint32_t nblocks = (m + 31) / 32;
  auto set_size = [&](size_t n) { store<uint32_t>(b, L.table + 8 * c, static_cast<uint32_t>(n)); };
  auto insert = [&](size_t pos, const Bytes& ins) {
    b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), ins.begin(), ins.end());
  };
  auto erase = [&](size_t pos, size_t n) {
    b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos), b.begin() + static_cast<std::ptrdiff_t>(pos + n));
  };
  auto random_bytes = [&](size_t n) {
    Bytes x(n);
    for (auto& v : x) v = static_cast<uint8_t>(r.next());
    return x;
  };
  static const uint8_t kOtherModes[] = {0, 1, 2, 3, 4, 0xFF};
  if (sz == 0) {  // a repeat
    switch (r.below(4)) {
      case 0: {  // a constant chunk of its own: the bytes it repeats, or another value
        Bytes ch = random_bytes(1 + elem);
        ch[0] = 2;
        if (off >= L.data + 1 + elem && r.chance(2)) ch.assign(b.begin() + static_cast<std::ptrdiff_t>(off - 1 - elem), b.begin() + static_cast<std::ptrdiff_t>(off));
        insert(off, ch);
        set_size(1 + elem);
        what = "repeat -> constant";
        return true;
      }
      case 1:
        set_size(1 + r.below(2 + elem));
        what = "repeat size";
        return true;
      case 2:  // the chunk it repeats relabelled
        if (off < L.data + 1 + elem) return false;
        b[off - 1 - elem] = kOtherModes[r.below(6)];
        what = "repeated chunk relabelled";
        return true;
      default:  // the repeated value (both chunks change: decodes to another constant)
        if (off < L.data + 1 + elem) return false;
        b[off - elem + r.below(elem)] ^= static_cast<uint8_t>(1u << r.below(8));
        what = "repeated value";
        return true;
    }
  }
  const uint8_t mode = b[off];
  if (mode == 2) {  // constant
    switch (r.below(4)) {
      case 0:
        if (sz < 2) return false;
        b[off + 1 + r.below(sz - 1)] ^= static_cast<uint8_t>(1u << r.below(8));
        what = "constant value";
        return true;
      case 1:
        erase(off, sz);
        set_size(0);
        what = "constant -> repeat";
        return true;
      case 2:  // one byte more or less
        if (r.chance(2) || sz < 2) {
          insert(off + sz, random_bytes(1));
          set_size(sz + 1);
        } else {
          erase(off + sz - 1, 1);
          set_size(sz - 1);
        }
        what = "constant size";
        return true;
      default:
        b[off] = kOtherModes[r.below(6)];
        what = "constant relabelled";
        return true;
    }
  }
  if (mode == 3) {  // lossless: a zstd frame
    switch (r.below(5)) {
      case 0: {
        if (sz < 2) return false;
        const size_t k = 1 + r.below(std::min<size_t>(8, sz - 1));
        erase(off + sz - k, k);
        set_size(sz - k);
        what = "zstd frame truncated";
        return true;
      }
      case 1: {
        static const uint8_t kEmpty[] = {0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x00, 0x01, 0x00, 0x00};
        Bytes tail = r.chance(2) ? random_bytes(1 + r.below(8)) : Bytes(kEmpty, kEmpty + sizeof kEmpty);
        insert(off + sz, tail);
        set_size(sz + tail.size());
        what = "zstd frame + bytes";
        return true;
      }
      case 2:
        flip_bits(b, r, off + 1, off + sz);
        what = "zstd frame bits";
        return true;
      case 3: {  // a hand-made frame of random RLE-friendly planes, its size told right or wrong
        Bytes planes(static_cast<size_t>(m) * elem);
        for (size_t k = 0; k < planes.size(); k += 16) {
          const uint8_t v = static_cast<uint8_t>(r.next());
          for (size_t i = k; i < std::min(planes.size(), k + 16); ++i) planes[i] = v;
        }
        const int64_t lie = r.chance(2) ? 0 : static_cast<int64_t>(r.below(5)) - 2;
        Bytes ch = zstd_frame(planes, lie);
        ch.insert(ch.begin(), 3);
        erase(off, sz);
        insert(off, ch);
        set_size(ch.size());
        what = "zstd frame by hand";
        return true;
      }
      default:
        b[off] = kOtherModes[r.below(6)];
        what = "lossless chunk relabelled";
        return true;
    }
  }
  if (mode != kModeEncoded && mode != kModeDirect) return edit_chunk_structure_v1(b, r, what);
  // Encoded or direct: the bitmap layout after the fixed part.
  const size_t fx = mode == kModeDirect ? kDirectFixed : kEncodedFixed;
  const uint32_t bm = (nblocks + 7) / 8;
  if (sz < fx + bm) return false;
  std::vector<uint32_t> set;  // nonzero blocks
  for (uint32_t blk = 0; blk < nblocks; ++blk) {
    if ((b[off + fx + blk / 8] >> (blk % 8)) & 1u) set.push_back(blk);
  }
  const size_t len_at = off + fx + bm;
  if (sz < fx + bm + set.size()) return false;
  const size_t planes_at = len_at + set.size();
  auto plane_offset = [&](size_t k) {  // where the planes of the k-th nonzero block start
    size_t at = planes_at;
    for (size_t j = 0; j < k; ++j) at += 4u * (b[len_at + j] + 1u);
    return at;
  };
  switch (r.below(mode == kModeDirect ? 8 : 7)) {
    case 0: {
      const uint32_t blk = static_cast<uint32_t>(r.below(nblocks));
      b[off + fx + blk / 8] ^= static_cast<uint8_t>(1u << (blk % 8));
      what = "bitmap bit";
      return true;
    }
    case 1: {  // a padding bit past the last block (no padding: any bit of the last byte)
      const uint32_t used = nblocks % 8;
      const uint32_t bit = used ? used + static_cast<uint32_t>(r.below(8 - used)) : static_cast<uint32_t>(r.below(8));
      b[off + fx + bm - 1] |= static_cast<uint8_t>(1u << bit);
      what = "bitmap padding";
      return true;
    }
    case 2: {
      if (set.empty()) return false;
      const size_t i = len_at + r.below(set.size());
      static const uint8_t v[] = {0, 1, 30, 31, 32, 33, 64, 255};
      b[i] = r.chance(2) ? v[r.below(8)] : static_cast<uint8_t>(b[i] + r.below(5) - 2);
      what = "code length (v2)";
      return true;
    }
    case 3: {  // a code length change compensated in the planes: the sizes still add up
      if (set.empty()) return false;
      const size_t k = r.below(set.size());
      const int old_len = b[len_at + k];
      const int new_len = r.chance(8) ? static_cast<int>(r.chance(2) ? 0 : 32 + r.below(224))
                                      : static_cast<int>(1 + r.below(31));
      const int64_t delta = 4 * (static_cast<int64_t>(new_len) + (new_len ? 1 : 0)) - 4 * (old_len + (old_len ? 1 : 0));
      const size_t at = plane_offset(k);
      if (at > off + sz) return false;  // lengths that overrun the chunk (an earlier edit)
      if (delta > 0) {
        insert(at, random_bytes(static_cast<size_t>(delta)));
      } else if (delta < 0) {
        if (at + static_cast<size_t>(-delta) > off + sz) return false;
        erase(at, static_cast<size_t>(-delta));
      }
      b[len_at + k] = static_cast<uint8_t>(new_len);
      set_size(static_cast<size_t>(static_cast<int64_t>(sz) + delta));
      what = "code length (v2, size-compensated)";
      return true;
    }
    case 4: {  // a block's bit flipped with its length byte and planes added or removed
      const uint32_t blk = static_cast<uint32_t>(r.below(nblocks));
      const size_t k = static_cast<size_t>(std::lower_bound(set.begin(), set.end(), blk) - set.begin());
      const bool was_set = k < set.size() && set[k] == blk;
      if (was_set) {
        const size_t at = plane_offset(k), n = 4u * (b[len_at + k] + 1u);
        if (at + n > off + sz) return false;
        erase(at, n);
        erase(len_at + k, 1);
        set_size(sz - n - 1);
      } else {
        const uint8_t len = static_cast<uint8_t>(1 + r.below(r.chance(4) ? 31 : 6));
        const size_t at = plane_offset(k);
        if (at > off + sz) return false;
        insert(at, random_bytes(4u * (len + 1u)));
        insert(len_at + k, Bytes{len});
        set_size(sz + 4u * (len + 1u) + 1);
      }
      b[off + fx + blk / 8] ^= static_cast<uint8_t>(1u << (blk % 8));
      what = "bitmap bit (size-compensated)";
      return true;
    }
    case 5:  // encoded <-> direct: q_start dropped (any value) or added; the rest as it is
      if (mode == kModeEncoded) {
        erase(off + 1, 4);
        b[off] = kModeDirect;
        set_size(sz - 4);
        what = "encoded -> direct";
      } else {
        insert(off + 1, random_bytes(4));
        b[off] = kModeEncoded;
        set_size(sz + 4);
        what = "direct -> encoded";
      }
      return true;
    case 6:
      if (mode == kModeDirect) {  // the direct chunk's outlier fields (the v1 edits assume q_start)
        const uint32_t n_out = load<uint32_t>(b, off + 1);
        if (r.chance(2) || n_out == 0 || n_out > m || sz < fx + bm + n_out * (2 + elem)) {
          static const uint32_t v[] = {0, 1, 0xFFFFFFFFu, 0x80000000u, 65535, 65536};
          const uint32_t n = r.chance(2) ? v[r.below(6)] : static_cast<uint32_t>(n_out + r.below(5) - 2);
          store<uint32_t>(b, off + 1, r.chance(4) ? m + static_cast<uint32_t>(r.below(3)) : n);
          what = "n_outliers (direct)";
          return true;
        }
        const size_t idx0 = off + sz - n_out * (2 + elem);
        const uint32_t k = static_cast<uint32_t>(r.below(n_out));
        uint16_t nv = static_cast<uint16_t>(r.chance(2) ? m - 1 + r.below(3) : r.next());
        if (k > 0 && r.chance(3)) nv = load<uint16_t>(b, idx0 + 2 * (k - 1));  // duplicate
        store<uint16_t>(b, idx0 + 2 * k, nv);
        what = "outlier index (direct)";
        return true;
      }
      [[fallthrough]];
    default:
      if (mode == kModeDirect) {
        flip_bits(b, r, len_at, off + sz);
        what = "direct chunk payload";
        return true;
      }
      return edit_chunk_structure_v1(b, r, what);  // q_start, outliers, payload, ...
  }
}

// Applies one "plain" mutation (no checksum repair). Returns a description.
std::string mutate_plain(Bytes& b, const Entry& e, const std::vector<Entry>& corpus, Rng& r) {
  const Layout L = layout_of(b);
  switch (r.below(11)) {
    case 0: flip_bits(b, r, 0, b.size()); return "bit flips";
    case 1: set_bytes(b, r, 0, b.size()); return "byte sets";
    case 2: b.resize(r.chance(8) ? 0 : r.below(b.size())); return "truncation";
    case 3: {
      const size_t n = 1 + r.below(64);
      for (size_t i = 0; i < n; ++i) b.push_back(r.chance(2) ? 0 : static_cast<uint8_t>(r.next()));
      return "extension";
    }
    case 4: return edit_table(b, r) ? "table edit" : (flip_bits(b, r, 0, b.size()), "bit flips");
    case 5: return std::string("header field ") + edit_header_field(b, r);
    case 6: {  // insert bytes in the middle
      const size_t pos = r.below(b.size() + 1), n = 1 + r.below(16);
      Bytes ins(n);
      for (auto& x : ins) x = static_cast<uint8_t>(r.next());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), ins.begin(), ins.end());
      return "insertion";
    }
    case 7: {  // delete bytes in the middle
      if (b.empty()) return "none";
      const size_t pos = r.below(b.size()), n = 1 + r.below(std::min<size_t>(16, b.size() - pos));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos), b.begin() + static_cast<std::ptrdiff_t>(pos + n));
      return "deletion";
    }
    case 8: {  // swap two chunks' bytes (same sizes only) or two table entries
      if (L.ok && L.nchunks >= 2) {
        const uint64_t a = r.below(L.nchunks), c = r.below(L.nchunks);
        if (a != c) {
          for (int k = 0; k < 8; ++k) std::swap(b[L.table + 8 * a + k], b[L.table + 8 * c + k]);
          return "table entries swapped";
        }
      }
      flip_bits(b, r, 0, b.size());
      return "bit flips";
    }
    case 9: {  // splice: this header, another stream's body
      const Entry& o = corpus[r.below(corpus.size())];
      const size_t cut = r.below(std::min(b.size(), o.stream.size()) + 1);
      b.resize(cut);
      b.insert(b.end(), o.stream.begin() + static_cast<std::ptrdiff_t>(std::min(cut, o.stream.size())), o.stream.end());
      return "splice with " + o.name;
    }
    default: {  // mutate only inside chunk data (checksummed per chunk)
      if (L.ok && L.data < b.size()) {
        flip_bits(b, r, L.data, b.size());
        return "chunk bit flips";
      }
      set_bytes(b, r, 0, b.size());
      (void)e;
      return "byte sets";
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Iteration kinds.

void run_random(Rng& r, const std::vector<Entry>& corpus) {
  ++g_stats.random;
  const size_t len = r.below(4097);
  Bytes b(len);
  for (auto& x : b) x = static_cast<uint8_t>(r.next());
  const uint64_t mode = r.below(3);
  if (mode >= 1 && len >= 8) {  // plausible magic/version/dtype/block/ndim prefix
    const Entry& e = corpus[r.below(corpus.size())];
    std::memcpy(b.data(), e.stream.data(), std::min<size_t>(mode == 1 ? 8 : kFixed, std::min(len, e.stream.size())));
    if (mode == 2 && r.chance(2)) reseal(b, r.chance(2));
  }
  g_desc = "random bytes (mode " + std::to_string(mode) + ")";
  decode_all(b, r.below(5000), r.chance(2) ? fz::DType::Float32 : fz::DType::Float64, r, false);
}

void run_plain(Rng& r, const std::vector<Entry>& corpus) {
  const Entry& e = corpus[r.below(corpus.size())];
  Bytes b = e.stream;
  std::string desc = mutate_plain(b, e, corpus, r);
  if (r.chance(6)) desc += " + " + mutate_plain(b, e, corpus, r);
  for (const Entry& o : corpus) {
    if (b == o.stream) return;  // no actual change (or spliced back into a whole valid stream)
  }
  // The reference is the stream whose header and table the mutant carries (a splice can keep
  // another stream's whole header: its untouched chunks then legitimately decode to its values).
  const Entry* ref = &e;
  for (const Entry& o : corpus) {
    const Layout L = layout_of(o.stream);
    if (b.size() >= L.data && std::memcmp(b.data(), o.stream.data(), L.data) == 0) ref = &o;
  }
  ++g_stats.plain;
  g_desc = "plain mutation [" + desc + "] of " + e.name;
  const uint64_t before = g_stats.decodes;
  const DecodeResult d = decode_all(b, ref->count, ref->dt, r, r.chance(8), ref);
  g_stats.mutated_decodes += g_stats.decodes - before;
  if (d.full_ok) {
    ++g_stats.plain_identical;  // decode_all has checked the values are the original ones
  } else {
    ++g_stats.plain_threw;
  }
}

void run_resealed(Rng& r, const std::vector<Entry>& corpus) {
  const Entry& e = corpus[r.below(corpus.size())];
  Bytes b = e.stream;
  std::string desc;
  const int n = 1 + static_cast<int>(r.chance(4));
  for (int k = 0; k < n; ++k) {
    std::string what;
    switch (r.below(5)) {
      case 0:
      case 1:
        if (edit_chunk_structure(b, r, what)) break;
        [[fallthrough]];
      case 2: what = std::string("header ") + edit_header_field(b, r); break;
      case 3: what = edit_table(b, r) ? "table" : "none"; break;
      default: {
        const Layout L = layout_of(b);
        if (L.ok && L.data < b.size()) {
          set_bytes(b, r, L.data, b.size());
          what = "chunk bytes";
        } else {
          what = "none";
        }
      }
    }
    desc += (desc.empty() ? "" : " + ") + what;
  }
  reseal(b, !r.chance(8));
  if (b == e.stream) return;
  ++g_stats.resealed;
  g_desc = "resealed mutation [" + desc + "] of " + e.name;
  const uint64_t before = g_stats.decodes;
  const DecodeResult d = decode_all(b, e.count, e.dt, r, true);
  g_stats.mutated_decodes += g_stats.decodes - before;
  if (d.full_ok) ++g_stats.resealed_decoded;
}

// A version-1 stream from scratch: random header in valid ranges, random chunk bodies, valid
// checksums.
void run_synthesized(Rng& r) {
  ++g_stats.synthesized;
  const uint8_t dtype = r.chance(2) ? 1 : 2;
  const size_t elem = elem_size(dtype);
  const uint32_t cl = 32u * static_cast<uint32_t>(1 + r.below(r.chance(4) ? 2048 : 8));
  const uint64_t count = r.below(r.chance(4) ? 3 * cl + 1 : 200);
  const uint64_t nch = count == 0 ? 0 : (count - 1) / cl + 1;
  size_t ndim = r.below(3);
  std::vector<uint64_t> shape;
  if (ndim == 0 && count != 1 && !r.chance(8)) ndim = 1;
  if (ndim == 1) shape = {count};
  if (ndim == 2) shape = {1, count};
  if (r.chance(16)) {  // a wrong shape
    shape.assign(ndim, r.below(4));
  }
  const double eb = r.chance(8) ? 0.0 : std::ldexp(1.0, -static_cast<int>(r.below(40)));
  double bin = eb == 0.0 ? 0.0 : 2.0 * eb * (1.0 - 1.0 / 1024.0);
  if (dtype == 1) bin = static_cast<double>(static_cast<float>(bin));
  if (r.chance(16)) bin = -bin;
  Bytes b(kFixed + 8 * ndim + 8 * nch + 4);
  b[0] = 'Z'; b[1] = 'C'; b[2] = 'F'; b[3] = 'Z';
  b[4] = 1;
  b[5] = dtype;
  b[6] = 32;
  b[7] = static_cast<uint8_t>(ndim);
  store<uint64_t>(b, kOffCount, count);
  store<double>(b, kOffEb, eb);
  store<double>(b, kOffBin, bin);
  store<uint32_t>(b, kOffChunkLen, cl);
  for (size_t d = 0; d < ndim; ++d) store<uint64_t>(b, kFixed + 8 * d, shape[d]);
  const size_t table = kFixed + 8 * ndim;
  for (uint64_t c = 0; c < nch; ++c) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(cl, count - c * cl));
    const uint32_t nblocks = (m + 31) / 32;
    Bytes ch;
    if (r.chance(4)) {  // raw
      ch.resize(1 + static_cast<size_t>(m) * elem);
      ch[0] = 1;
      for (size_t i = 1; i < ch.size(); ++i) ch[i] = static_cast<uint8_t>(r.next());
      if (r.chance(8)) ch.resize(ch.size() - 1 - r.below(ch.size() - 1));
    } else {  // encoded with random structure, sizes usually consistent
      ch.resize(9 + nblocks);
      ch[0] = r.chance(32) ? static_cast<uint8_t>(r.next()) : 0;
      const int32_t q0 = static_cast<int32_t>(r.chance(2) ? r.below(2000) - 1000 : r.next());
      std::memcpy(ch.data() + 1, &q0, 4);
      uint32_t n_out = static_cast<uint32_t>(r.chance(2) ? 0 : r.below(std::min<uint32_t>(m, 40) + 1));
      if (r.chance(16)) n_out = m + 1;
      std::memcpy(ch.data() + 5, &n_out, 4);
      for (uint32_t k = 0; k < nblocks; ++k) {
        const uint8_t len = r.chance(3) ? 0 : static_cast<uint8_t>(r.chance(32) ? 32 + r.below(224) : r.below(32));
        ch[9 + k] = len;
        if (len) {  // the planes a decoder would expect, even for invalid lengths (> 31)
          for (size_t i = 0; i < 4u * (len + 1u); ++i) ch.push_back(static_cast<uint8_t>(r.next()));
        }
      }
      // Outlier indices: usually increasing and in range.
      std::vector<uint16_t> idx;
      uint32_t at = 0;
      for (uint32_t k = 0; k < n_out; ++k) {
        at += 1 + static_cast<uint32_t>(r.below(3));
        idx.push_back(static_cast<uint16_t>(r.chance(32) ? r.next() : at - 1));
      }
      for (uint16_t i : idx) {
        ch.push_back(static_cast<uint8_t>(i));
        ch.push_back(static_cast<uint8_t>(i >> 8));
      }
      for (size_t i = 0; i < n_out * elem; ++i) ch.push_back(static_cast<uint8_t>(r.next()));
      if (r.chance(16)) ch.resize(ch.size() - r.below(ch.size()));
      if (r.chance(16)) ch.push_back(static_cast<uint8_t>(r.next()));
    }
    if (ch.empty()) ch.push_back(0);
    store<uint32_t>(b, table + 8 * c, static_cast<uint32_t>(ch.size()));
    b.insert(b.end(), ch.begin(), ch.end());
  }
  reseal(b, true);
  g_desc = "synthesized stream";
  const DecodeResult d = decode_all(b, count, dtype == 1 ? fz::DType::Float32 : fz::DType::Float64, r, true);
  if (d.full_ok) ++g_stats.synth_decoded;
}

// The value a version-2/3 decoder writes for code q: S(C(q) * C(bin)) (fzlight_format.h).
void model_value(uint8_t dtype, double bin, int32_t q, uint8_t* dst) {
  if (dtype == 2) {
    const double v = static_cast<double>(q) * bin;
    std::memcpy(dst, &v, 8);
    return;
  }
  const float f = static_cast<float>(q) * static_cast<float>(bin);
  if (dtype == 1) {
    std::memcpy(dst, &f, 4);
  } else {
    const uint16_t h = dtype == 3 ? f32_to_f16(f) : f32_to_bf16(f);
    std::memcpy(dst, &h, 2);
  }
}

// Decodes a well-formed encoded (mode 0, bitmap layout) or direct (mode 4) chunk of m values
// the way the format says (scalar, written from fzlight_format.h): sign/magnitude planes read as
// Lorenzo deltas summed from q_start, or as the codes themselves; then outliers.
void model_bitmap_chunk(const Bytes& ch, uint32_t m, uint8_t dtype, double bin, uint8_t* out) {
  const size_t elem = elem_size(dtype);
  const bool direct = ch[0] == kModeDirect;
  const size_t fx = direct ? kDirectFixed : kEncodedFixed;
  const uint32_t nblocks = (m + 31) / 32, bm = (nblocks + 7) / 8;
  int32_t q0 = 0;
  uint32_t n_out;
  if (!direct) std::memcpy(&q0, ch.data() + 1, 4);
  std::memcpy(&n_out, ch.data() + fx - 4, 4);
  uint32_t acc = static_cast<uint32_t>(q0);  // wraps, as the decoder's sums do
  size_t nz = 0;
  for (uint32_t i = 0; i < bm; ++i) nz += static_cast<size_t>(__builtin_popcount(ch[fx + i]));
  size_t len_at = fx + bm, at = fx + bm + nz;
  uint8_t tmp[32 * 8];
  for (uint32_t blk = 0; blk < nblocks; ++blk) {
    const bool nonzero = (ch[fx + blk / 8] >> (blk % 8)) & 1u;
    const int len = nonzero ? ch[len_at++] : 0;
    uint32_t w[33] = {};
    if (len) std::memcpy(w, ch.data() + at, 4u * (len + 1u));
    at += len ? 4u * (len + 1u) : 0u;
    for (int i = 0; i < 32; ++i) {
      // a direct zero block: every code 0; an encoded one: every code the previous one
      uint32_t mag = 0;
      for (int j = 0; j < len; ++j) mag |= ((w[1 + j] >> i) & 1u) << j;
      const uint32_t d = ((w[0] >> i) & 1u) ? 0u - mag : mag;
      acc = direct ? d : acc + d;
      model_value(dtype, bin, static_cast<int32_t>(acc), tmp + i * elem);
    }
    const uint32_t n = std::min<uint32_t>(32, m - 32 * blk);
    std::memcpy(out + static_cast<size_t>(32) * blk * elem, tmp, n * elem);
  }
  for (uint32_t k = 0; k < n_out; ++k) {
    uint16_t idx;
    std::memcpy(&idx, ch.data() + at + 2 * k, 2);
    std::memcpy(out + static_cast<size_t>(idx) * elem, ch.data() + at + 2 * n_out + k * elem, elem);
  }
}

// Planes for one block of a synthesized chunk: sign plane + len magnitude planes of random bits,
// except that lanes in `zero` (a direct chunk's outliers and padding lanes) hold code 0 in every
// plane, sign included, as the format has them.
Bytes block_planes(Rng& r, uint8_t len, uint32_t zero) {
  Bytes w(4u * (len + 1u));
  for (size_t k = 0; k < w.size(); k += 4) store<uint32_t>(w, k, static_cast<uint32_t>(r.next()) & ~zero);
  return w;
}

// A version-2 or version-3 stream from scratch: random header, chunks of every kind (raw,
// constant, repeat, lossless with hand-made zstd frames, encoded in the bitmap layout, v3:
// direct), valid checksums. Most are well-formed by construction, and must then decode to
// exactly the model's values (model_bitmap_chunk for encoded and direct chunks); the others
// carry one deliberate defect (a v2 one may be a direct chunk), and must be refused. A
// well-formed v3 stream with direct chunks is then relabelled v2 and v1: both refused, and in v2
// exactly the direct chunks (decompress_chunk still gives the model's values for the others).
void run_synthesized_bitmap(Rng& r, uint8_t version) {
  ++(version == 2 ? g_stats.synth_v2 : g_stats.synth_v3);
  std::string defect;  // empty: well-formed
  auto spoil = [&](const char* why) {
    if (defect.empty()) defect = why;
  };
  const bool zstd = fz::lossless_codec_available(fz::LosslessCodec::ShuffleZstd);
  const uint8_t dtype = static_cast<uint8_t>(1 + r.below(4));
  const size_t elem = elem_size(dtype);
  const uint32_t cl = 32u * static_cast<uint32_t>(1 + r.below(r.chance(4) ? 512 : 8));
  const uint64_t count = r.below(r.chance(4) ? 3 * cl + 1 : 300);
  const uint64_t nch = count == 0 ? 0 : (count - 1) / cl + 1;
  size_t ndim = r.below(3);
  if (ndim == 0 && count != 1 && !r.chance(8)) ndim = 1;
  std::vector<uint64_t> shape;
  if (ndim == 1) shape = {count};
  if (ndim == 2) shape = {1, count};
  if (r.chance(16)) shape.assign(ndim, r.below(4));  // a wrong shape (or by chance the right one)
  uint64_t product = 1;
  for (uint64_t d : shape) product *= d;
  if (product != count) spoil("shape");
  const double eb = r.chance(4) ? 0.0 : std::ldexp(1.0, -static_cast<int>(r.below(30)));
  double bin = eb == 0.0 ? 0.0 : 2.0 * eb * (1.0 - 1.0 / 1024.0);
  if (dtype != 2) bin = static_cast<double>(static_cast<float>(bin));
  if (bin != 0.0 && r.chance(24)) {
    bin = r.chance(2) ? -bin : 3.0 * eb;
    spoil("bin");
  }
  uint32_t codec = eb == 0.0 && r.chance(2) ? 1 : 0;
  if (r.chance(24)) {
    codec = r.chance(2) ? 1 : 2 + static_cast<uint32_t>(r.below(300));
    if (codec > 1 || bin != 0.0) spoil("codec");
  }
  if (codec == 1 && !zstd) spoil("codec 1 without zstd");
  // Some version-2 streams get a direct chunk (where a v3 stream could have one): refused.
  const bool direct_in_v2 = version == 2 && bin > 0.0 && codec == 0 && nch > 0 && r.chance(6);
  const uint64_t direct_at = direct_in_v2 ? r.below(nch) : nch;
  Bytes b(kFixed + 8 * ndim + 8 * nch + 4);
  b[0] = 'Z'; b[1] = 'C'; b[2] = 'F'; b[3] = 'Z';
  b[4] = version;
  b[5] = dtype;
  b[6] = 32;
  b[7] = static_cast<uint8_t>(ndim);
  store<uint64_t>(b, kOffCount, count);
  store<double>(b, kOffEb, eb);
  store<double>(b, kOffBin, bin);
  store<uint32_t>(b, kOffChunkLen, cl);
  store<uint32_t>(b, kOffCodec, codec);
  for (size_t d = 0; d < ndim; ++d) store<uint64_t>(b, kFixed + 8 * d, shape[d]);
  const size_t table = kFixed + 8 * ndim;
  Bytes expect(count * elem);
  enum Kind { Raw, Constant, Repeat, Lossless, Encoded, Direct, kKinds };
  Kind prev = Raw;
  Bytes prev_value(elem);
  std::vector<bool> direct_chunk(nch, false);
  auto random_bytes = [&](size_t n) {
    Bytes x(n);
    for (auto& v : x) v = static_cast<uint8_t>(r.next());
    return x;
  };
  for (uint64_t c = 0; c < nch; ++c) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(cl, count - c * cl));
    const uint32_t nblocks = (m + 31) / 32, bm = (nblocks + 7) / 8;
    const size_t raw_size = 1 + static_cast<size_t>(m) * elem;
    uint8_t* want = expect.data() + c * cl * elem;
    std::vector<Kind> ok = {Raw, Constant};
    if (c > 0 && (prev == Constant || prev == Repeat)) ok.insert(ok.end(), 2, Repeat);
    if (codec == 1 && bin == 0.0) ok.insert(ok.end(), 2, Lossless);
    if (bin > 0.0 && codec == 0) ok.insert(ok.end(), 3, Encoded);
    if (bin > 0.0 && codec == 0 && version >= 3) ok.insert(ok.end(), 3, Direct);
    Kind kind = ok[r.below(ok.size())];
    if (r.chance(32)) kind = static_cast<Kind>(r.below(kKinds));  // any kind, allowed here or not
    if (c == direct_at) kind = Direct;
    Bytes ch;
    switch (kind) {
      case Raw:
        ch = random_bytes(raw_size);
        ch[0] = 1;
        std::memcpy(want, ch.data() + 1, raw_size - 1);
        break;
      case Constant: {
        ch = random_bytes(1 + elem);
        ch[0] = 2;
        if (r.chance(3)) std::fill(ch.begin() + 1, ch.end(), 0);
        for (uint32_t i = 0; i < m; ++i) std::memcpy(want + i * elem, ch.data() + 1, elem);
        prev_value.assign(ch.begin() + 1, ch.end());
        if (r.chance(32)) {  // one byte more or less
          if (r.chance(2)) ch.push_back(0); else ch.pop_back();
          spoil("constant chunk size");
        }
        break;
      }
      case Repeat:
        for (uint32_t i = 0; i < m; ++i) std::memcpy(want + i * elem, prev_value.data(), elem);
        break;
      case Lossless: {
        // Byte planes with runs (so RLE blocks make the frame smaller than the raw chunk).
        Bytes planes(static_cast<size_t>(m) * elem);
        const size_t run = 8 + r.below(64);
        for (size_t k = 0; k < planes.size(); k += run) {
          const uint8_t v = static_cast<uint8_t>(r.next());
          const bool noisy = r.chance(6);
          for (size_t i = k; i < std::min(planes.size(), k + run); ++i) planes[i] = noisy ? static_cast<uint8_t>(r.next()) : v;
        }
        Bytes frame = zstd_frame(planes);
        if (1 + frame.size() > raw_size) {  // too noisy: one value per plane
          for (size_t k = 0; k < elem; ++k) std::fill(planes.begin() + k * m, planes.begin() + (k + 1) * m, static_cast<uint8_t>(r.next()));
          frame = zstd_frame(planes);
        }
        if (1 + frame.size() > raw_size) {  // a chunk too small for a frame: raw instead
          kind = Raw;
          ch = random_bytes(raw_size);
          ch[0] = 1;
          std::memcpy(want, ch.data() + 1, raw_size - 1);
          break;
        }
        ch.push_back(3);
        ch.insert(ch.end(), frame.begin(), frame.end());
        const Bytes v = values_of(planes, m, elem);
        std::memcpy(want, v.data(), v.size());
        if (r.chance(24)) {
          switch (r.below(3)) {
            case 0: ch.pop_back(); spoil("zstd frame truncated"); break;
            case 1: ch.push_back(static_cast<uint8_t>(r.next() | 1)); spoil("zstd frame + a byte"); break;
            default: {
              const int64_t lie = r.chance(2) ? -1 : 1;
              ch.resize(1);
              const Bytes f = zstd_frame(planes, lie);
              ch.insert(ch.end(), f.begin(), f.end());
              spoil("zstd content size");
            }
          }
        }
        if (ch.size() > raw_size) spoil("lossless chunk larger than raw");
        break;
      }
      case Encoded:
      case Direct: {
        // Both in the bitmap layout: mode [, i32 q_start], u32 n_outliers, bitmap, lengths,
        // planes, outliers; a direct chunk's outlier and padding lanes hold code 0.
        const bool direct = kind == Direct;
        const size_t fx = direct ? kDirectFixed : kEncodedFixed;
        ch.assign(fx + bm, 0);
        ch[0] = direct ? kModeDirect : kModeEncoded;
        if (!direct) {
          const int32_t q0 = static_cast<int32_t>(r.chance(2) ? static_cast<int64_t>(r.below(2000)) - 1000 : static_cast<int64_t>(static_cast<int32_t>(r.next())));
          std::memcpy(ch.data() + 1, &q0, 4);
        }
        std::vector<uint16_t> idx;
        const uint32_t n_out = static_cast<uint32_t>(r.chance(2) ? 0 : r.below(std::min<uint32_t>(m, 24) + 1));
        for (uint32_t i = 0; i < m && idx.size() < n_out; ++i) {
          if (r.below(m - i) < n_out - idx.size()) idx.push_back(static_cast<uint16_t>(i));
        }
        const uint32_t n_stored = static_cast<uint32_t>(idx.size());
        std::memcpy(ch.data() + fx - 4, &n_stored, 4);
        Bytes lens, planes;
        const int max_len = r.chance(4) ? 31 : 1 + static_cast<int>(r.below(6));
        for (uint32_t blk = 0; blk < nblocks; ++blk) {
          if (r.chance(3)) continue;  // a zero block
          ch[fx + blk / 8] |= static_cast<uint8_t>(1u << (blk % 8));
          const uint8_t len = static_cast<uint8_t>(1 + r.below(max_len));
          lens.push_back(len);
          uint32_t zero = 0;
          if (direct) {
            const uint32_t n = std::min<uint32_t>(32, m - 32 * blk);
            if (n < 32) zero = ~0u << n;  // padding lanes
            for (uint16_t i : idx) {
              if (i / 32 == blk) zero |= 1u << (i % 32);
            }
          }
          const Bytes w = block_planes(r, len, zero);
          planes.insert(planes.end(), w.begin(), w.end());
        }
        ch.insert(ch.end(), lens.begin(), lens.end());
        ch.insert(ch.end(), planes.begin(), planes.end());
        for (uint16_t i : idx) {
          ch.push_back(static_cast<uint8_t>(i));
          ch.push_back(static_cast<uint8_t>(i >> 8));
        }
        const Bytes vals = random_bytes(n_stored * elem);
        ch.insert(ch.end(), vals.begin(), vals.end());
        if (ch.size() <= raw_size && bin > 0.0) model_bitmap_chunk(ch, m, dtype, bin, want);
        if (ch.size() > raw_size) spoil(direct ? "direct chunk larger than raw" : "encoded chunk larger than raw");
        if (r.chance(24)) {  // one structural defect
          switch (r.below(5)) {
            case 0:
              if (lens.empty()) break;
              ch[fx + bm + r.below(lens.size())] = r.chance(2) ? 0 : static_cast<uint8_t>(32 + r.below(224));
              spoil("code length");
              break;
            case 1:
              if (nblocks % 8 == 0) break;
              ch[fx + bm - 1] |= static_cast<uint8_t>(1u << (nblocks % 8 + r.below(8 - nblocks % 8)));
              spoil("bitmap padding");
              break;
            case 2:
              if (n_stored < 2) break;
              std::swap(ch[ch.size() - n_stored * elem - 2 * n_stored], ch[ch.size() - n_stored * elem - 2 * n_stored + 2]);
              std::swap(ch[ch.size() - n_stored * elem - 2 * n_stored + 1], ch[ch.size() - n_stored * elem - 2 * n_stored + 3]);
              spoil("outlier order");
              break;
            case 3:
              ch.push_back(0);
              spoil(direct ? "direct chunk one byte long" : "encoded chunk one byte long");
              break;
            default: {
              const uint32_t bad = m + 1 + static_cast<uint32_t>(r.below(3));
              std::memcpy(ch.data() + fx - 4, &bad, 4);
              spoil("n_outliers");
            }
          }
        }
        direct_chunk[c] = direct;
        break;
      }
      default:
        break;
    }
    // (checked on the kind written: a lossless chunk too small for a frame is written raw)
    if (std::find(ok.begin(), ok.end(), kind) == ok.end()) {
      spoil(kind == Direct && version == 2 ? "direct chunk in a version-2 stream" : "chunk kind not allowed here");
    }
    store<uint32_t>(b, table + 8 * c, static_cast<uint32_t>(ch.size()));
    b.insert(b.end(), ch.begin(), ch.end());
    prev = kind;
  }
  reseal(b, true);
  const std::string v = "v" + std::to_string(version);
  g_desc = "synthesized " + v + " stream" + (defect.empty() ? std::string(" (well-formed)") : " (defect: " + defect + ")");
  const fz::DType dt = static_cast<fz::DType>(dtype);
  const DecodeResult d = decode_all(b, count, dt, r, true);
  if (d.full_ok) ++g_stats.synth_decoded;
  if (direct_in_v2) ++g_stats.synth_v2_with_direct;
  if (!defect.empty()) {
    ++(version == 2 ? g_stats.synth_v2_invalid : g_stats.synth_v3_invalid);
    if (d.full_ok) fail("a synthesized " + v + " stream with a defect (" + defect + ") was accepted");
    return;
  }
  ++(version == 2 ? g_stats.synth_v2_valid : g_stats.synth_v3_valid);
  if (!d.full_ok) fail("a well-formed synthesized " + v + " stream was refused");
  if (d.full != expect) {
    size_t i = 0;
    while (i < expect.size() && d.full[i] == expect[i]) ++i;
    fail("a well-formed synthesized " + v + " stream decoded to other values than the format's "
         "(first differing byte " + std::to_string(i) + ", value " + std::to_string(i / elem) + ")");
  }
  ++(version == 2 ? g_stats.synth_v2_checked : g_stats.synth_v3_checked);
  const size_t n_direct = static_cast<size_t>(std::count(direct_chunk.begin(), direct_chunk.end(), true));
  g_stats.synth_direct_chunks += n_direct;
  if (n_direct == 0) return;
  // The same bytes labelled version 2: exactly the direct chunks are refused.
  Bytes old = b;
  old[4] = 2;
  reseal(old, false);
  g_desc = "synthesized v3 stream with " + std::to_string(n_direct) + " direct chunk(s), relabelled version 2";
  if (decode_all(old, count, dt, r, true).full_ok) fail("a version-2 stream with direct chunks was accepted");
  {
    const size_t len = old.size();
    std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);  // exact size, as decode_all does
    std::memcpy(buf.get(), old.data(), len);
    std::unique_ptr<uint8_t[]> dst(new uint8_t[static_cast<size_t>(cl) * elem]);
    for (uint64_t c = 0; c < nch; ++c) {
      uint64_t got = 0;
      const Outcome o = guarded("decompress_chunk(v2 relabelled)", [&] { got = fz::decompress_chunk(buf.get(), len, c, dst.get(), cl); });
      if ((o == Outcome::Ok) == direct_chunk[c]) {
        fail(std::string("decompress_chunk of a v3 stream relabelled v2 ") +
             (direct_chunk[c] ? "accepted a direct chunk" : "refused a chunk that is not direct"));
      }
      if (o == Outcome::Ok && std::memcmp(dst.get(), expect.data() + c * cl * elem, got * elem) != 0)
        fail("decompress_chunk of a v3 stream relabelled v2 gave other values than the format's");
    }
  }
  // and as version 1 (codec field 0, as version 1 has it)
  old = b;
  old[4] = 1;
  store<uint32_t>(old, kOffCodec, 0);
  reseal(old, false);
  g_desc = "synthesized v3 stream with " + std::to_string(n_direct) + " direct chunk(s), relabelled version 1";
  if (decode_all(old, count, dt, r, true).full_ok) fail("a version-1 stream with direct chunks was accepted");
  ++g_stats.synth_relabelled;
}

// Self-check of the layout assumptions against the library on the valid corpus.
void check_corpus(const std::vector<Entry>& corpus, Rng& r) {
  for (const Entry& e : corpus) {
    g_desc = "corpus " + e.name;
    const Layout L = layout_of(e.stream);
    const fz::StreamInfo info = fz::read_info(e.stream.data(), e.stream.size());
    if (!L.ok || L.nchunks != info.num_chunks || L.data != info.header_bytes ||
        load<uint32_t>(e.stream, L.hdr_crc) != crc32c(e.stream.data(), L.hdr_crc)) {
      fail("stream layout differs from the one this fuzzer assumes (fzlight_format.h changed?): " + e.name);
    }
    if (info.version != e.version) fail("corpus stream of an unexpected version: " + e.name);
    for (uint64_t c = 0; c < L.nchunks; ++c) {
      size_t at, n;
      if (!crc_span(e.stream, L, c, at, n) ||
          load<uint32_t>(e.stream, L.table + 8 * c + 4) != crc32c(e.stream.data() + at, n))
        fail("chunk CRC differs from this fuzzer's CRC-32C: " + e.name);
    }
    Bytes resealed = e.stream;
    reseal(resealed, true);
    if (resealed != e.stream) fail("resealing a valid stream changed it: " + e.name);
    const DecodeResult d = decode_all(e.stream, e.count, e.dt, r, true);
    // (a version-1 or 2 entry's reference is its version-3 source's decode: they must agree)
    if (!d.full_ok || d.full != e.decoded) fail("valid corpus stream did not decode: " + e.name);
    ++(e.version == 1 ? g_stats.corpus_v1 : e.version == 2 ? g_stats.corpus_v2 : g_stats.corpus_v3);
    if (e.version != 3 && direct_chunks(e) > 0) fail("a version-1/2 corpus stream holds direct chunks: " + e.name);
    if (e.version != 3 || direct_chunks(e) == 0) continue;
    // The encoder's direct chunks in a stream labelled version 2 or 1 (header resealed): refused.
    ++g_stats.corpus_direct;
    for (uint8_t old : {uint8_t{2}, uint8_t{1}}) {
      Bytes b = e.stream;
      b[4] = old;
      if (old == 1) store<uint32_t>(b, kOffCodec, 0);  // (v1 has no codec field)
      reseal(b, false);
      g_desc = "corpus " + e.name + " relabelled version " + std::to_string(old);
      if (decode_all(b, e.count, e.dt, r, true).full_ok) fail("direct chunks accepted in a version-" + std::to_string(old) + " stream: " + e.name);
    }
    ++g_stats.corpus_relabelled;
  }
  if (g_stats.corpus_direct == 0) fail("the encoder wrote no direct chunk for the noise inputs of the corpus");
}

int replay(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path);
    return 2;
  }
  Bytes b;
  uint8_t tmp[4096];
  size_t n;
  while ((n = std::fread(tmp, 1, sizeof tmp, f)) > 0) b.insert(b.end(), tmp, tmp + n);
  std::fclose(f);
  Rng r(1);
  g_desc = std::string("replay ") + path;
  const DecodeResult d = decode_all(b, 4096, fz::DType::Float32, r, true);
  std::printf("replay %s: %zu bytes, read_info %s, decompress %s, chunks %" PRIu64 "/%" PRIu64 " failed\n", path,
              b.size(), d.info_ok ? "ok" : "error", d.full_ok ? "ok" : "error", d.chunks_failed, d.chunks_tried);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iters = 30000;
  double seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") {
      g_seed = std::strtoull(val(), nullptr, 0);
    } else if (a == "--iters") {
      iters = std::strtoull(val(), nullptr, 0);
    } else if (a == "--seconds") {
      seconds = std::strtod(val(), nullptr);
    } else if (a == "--out") {
      g_out_dir = val();
    } else if (a == "--replay") {
      return replay(val());
    } else {
      std::fprintf(stderr, "usage: %s [--seed N] [--iters N] [--seconds S] [--out DIR] [--replay FILE]\n", argv[0]);
      return 2;
    }
  }
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_sanitizer_death);
  std::signal(SIGABRT, on_fatal_signal);

  const auto t0 = std::chrono::steady_clock::now();
  Rng r(g_seed);
  std::vector<Entry> corpus;
  add_entries<float>(corpus, r);
  add_entries<double>(corpus, r);
  for (fz::DType dt : {fz::DType::Float32, fz::DType::Float64, fz::DType::Float16, fz::DType::BFloat16}) {
    add_v2_entries(corpus, dt, r);
    add_direct_entries(corpus, dt, r);
  }
  // Every stream again as version 2, and every float32/float64 one as version 1 (the decoder
  // reads all three).
  const size_t n_v3 = corpus.size();
  for (size_t i = 0; i < n_v3; ++i) corpus.push_back(downgrade_to_v2(corpus[i]));
  for (size_t i = 0; i < n_v3; ++i) {
    if (corpus[i].dt == fz::DType::Float32 || corpus[i].dt == fz::DType::Float64) {
      corpus.push_back(downgrade_to_v1(corpus[i]));
    }
  }
  check_corpus(corpus, r);

  uint64_t it = 0;
  for (; it < iters; ++it) {
    g_iter = it;
    if (seconds > 0 && (it & 63) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
      break;
    Rng ri(g_seed * 0x9E3779B97F4A7C15ull + it);  // each iteration reproducible on its own
    const uint64_t k = ri.below(22);
    if (k < 3) {
      run_random(ri, corpus);
    } else if (k < 11) {
      run_plain(ri, corpus);
    } else if (k < 17) {
      run_resealed(ri, corpus);
    } else if (k < 18) {
      run_synthesized(ri);  // version 1
    } else {
      run_synthesized_bitmap(ri, k < 20 ? 2 : 3);
    }
  }
  g_stats.iters = it;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "fuzz_decoder: seed=%" PRIu64 " iterations=%" PRIu64 " decodes=%" PRIu64 " (library errors %" PRIu64
      ", successes %" PRIu64 ") in %.1fs\n"
      "  decoder calls on mutated streams: %" PRIu64 "\n"
      "  random inputs: %" PRIu64 "\n"
      "  plain mutations: %" PRIu64 ", rejected: %" PRIu64 ", decoded to identical values: %" PRIu64
      ", decoded to different values: 0\n"
      "  resealed mutations: %" PRIu64 " (decoded: %" PRIu64 ")\n"
      "  synthesized streams: %" PRIu64 " version 1, %" PRIu64 " version 2, %" PRIu64
      " version 3 (decoded: %" PRIu64 ")\n"
      "  synthesized version-2 streams: well-formed %" PRIu64 " (decoded to the model's values: %" PRIu64
      "), with a defect %" PRIu64 " (all refused)\n"
      "  synthesized version-3 streams: well-formed %" PRIu64 " (decoded to the model's values: %" PRIu64
      "; direct chunks: %" PRIu64 "), with a defect %" PRIu64 " (all refused)\n"
      "  direct chunks in version-1/2 streams (all refused): %" PRIu64 " synthesized v2 streams; v3 streams "
      "relabelled v2 and v1: %" PRIu64 " synthesized, %" PRIu64 " from the corpus\n"
      "  corpus: %" PRIu64 " version-3 (%" PRIu64 " with direct chunks), %" PRIu64 " version-2 and %" PRIu64
      " version-1 streams\n",
      g_seed, g_stats.iters, g_stats.decodes, g_stats.lib_errors, g_stats.successes, s,
      g_stats.mutated_decodes, g_stats.random,
      g_stats.plain, g_stats.plain_threw, g_stats.plain_identical, g_stats.resealed, g_stats.resealed_decoded,
      g_stats.synthesized, g_stats.synth_v2, g_stats.synth_v3, g_stats.synth_decoded, g_stats.synth_v2_valid,
      g_stats.synth_v2_checked, g_stats.synth_v2_invalid, g_stats.synth_v3_valid, g_stats.synth_v3_checked,
      g_stats.synth_direct_chunks, g_stats.synth_v3_invalid, g_stats.synth_v2_with_direct,
      g_stats.synth_relabelled, g_stats.corpus_relabelled, g_stats.corpus_v3, g_stats.corpus_direct,
      g_stats.corpus_v2, g_stats.corpus_v1);
  if (g_stats.plain_identical > 0) {
    std::printf("  note: %" PRIu64 " mutated streams were accepted (with identical values)\n", g_stats.plain_identical);
  }
  return 0;
}
