// Integer code segments (see fzcodes.h for the format, the error bound and why).
#include "fzcodes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "crc32c.h"
#include "fzcodes_block.h"
#include "fzlight_block.h"
#include "fzlight_format.h"

namespace zccl::fz::codes {

namespace {

namespace fmt = format;
constexpr int kLen = block::kLen;
constexpr uint8_t kMagic[4] = {'Z', 'C', 'I', 'Q'};
constexpr uint64_t kProgressBlocks = 128;  // 4096 values between progress calls
constexpr uint8_t kMaxCodeLength = 32;     // a hostile segment's wrapped sums may need 32 planes
// A block's length byte: the code length L in the low bits, kDirectBlock set when the planes hold
// the codes themselves rather than Lorenzo deltas (fzcodes.h).
constexpr uint8_t kDirectBlock = 0x80;
constexpr uint8_t kLengthMask = 0x3F;
constexpr uint8_t kReservedBit = 0x40;  // zero in every length byte
// Blocks per kind decision of the encoder: the first block of each group is packed both ways
// (fzcodes_block.h: direct_wins; a tie keeps the previous group's kind), the others take its
// kind. Deciding every block cost the hop ~20 % on noise and smooth data alike (the second code
// length of every block); on noise direct blocks are almost never longer than Lorenzo ones, and
// on smooth data almost never shorter, so a probe per 16 blocks keeps nearly all of the saving
// (benchmarks/RESULTS.md, "Direct blocks in integer code segments").
constexpr uint64_t kKindGroup = 16;

// The length byte of a block of code length len (direct: its kind). A direct block of zero codes
// has a length byte (0x80) but no planes.
uint8_t length_byte_of(int len, bool direct) {
  return static_cast<uint8_t>(len | (direct ? kDirectBlock : 0));
}

// A block packed as a probe (both ways, the shorter kind: fzcodes_block.h) or as a given kind,
// from codes in memory or (AVX2) in registers.
int pack_probe(const int32_t* q, int32_t prev, uint8_t* words, bool& direct) {
  return block::pack_either(q, prev, words, direct);
}
int pack_kind(const int32_t* q, int32_t prev, bool direct, uint8_t* words) {
  return direct ? block::pack<false>(q, 0, words) : block::pack(q, prev, words);
}
#if defined(__AVX2__)
int pack_probe(const __m256i* codes, int32_t prev, uint8_t* words, bool& direct) {
  return block::pack_either_regs(codes, prev, words, direct);
}
int pack_kind(const __m256i* codes, int32_t prev, bool direct, uint8_t* words) {
  return direct ? block::pack_regs<false>(codes, 0, words) : block::pack_regs(codes, prev, words);
}
#endif

// Packs a block as its group's kind (kKindGroup): the group's first block (probe) is packed
// both ways and sets group_direct (a tie keeps the previous group's kind). Returns the block's
// length byte.
// (Forced inline: as a call it made the hop 5 % slower on smooth data.)
template <class Codes>
__attribute__((always_inline)) inline uint8_t pack_grouped(Codes codes, int32_t prev, bool probe,
                                                           bool& group_direct, uint8_t* words) {
  bool direct = group_direct;
  int len;
  if (probe) {
    len = pack_probe(codes, prev, words, direct);
    group_direct = direct;
  } else {
    len = pack_kind(codes, prev, direct, words);
  }
  return length_byte_of(len, direct);
}

// Bytes of the planes a block's length byte announces: none for L = 0 (a Lorenzo block repeating
// the previous code, or a direct block of zeros), else the sign plane and L magnitude planes.
// (Branch-free, so that check_segment's loop over every length byte vectorises.)
size_t planes_bytes(uint8_t length_byte) {
  const unsigned len = length_byte & kLengthMask;
  return 4u * (len + static_cast<unsigned>(len != 0));
}

template <class T>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float32/float64 only");
  return std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
}

constexpr uint8_t kSmallCodes = 1;  // header flag: every |Q| < 2^24 (float32 decodes in float32)

uint64_t blocks_of(uint64_t n) { return (n + kLen - 1) / kLen; }

// The segment's checksum: the header (all but the checksum field) and the payload.
uint32_t segment_crc(const uint8_t* seg, size_t payload) {
  uint32_t c = crc32c(seg, 40);
  c = crc32c(seg + 44, 4, c);
  return crc32c(seg + kHeaderBytes, payload, c);
}

[[noreturn]] void bad_segment(const std::string& why) {
  throw StreamError("zccl: corrupted integer code segment: " + why);
}

// ---- Quantising 32 values onto the grid: codes, and the mask of lanes kept exactly. ----
// The code is x * inv_bin rounded to nearest (ties to even), in float64 -- or in float32 for
// float32 values on a grid with float_path -- checked against the code limit; then
// |x - q * bin| <= eb is verified in float64 with q * bin exact (fzcodes.h). A lane that fails
// gets code 0. The AVX2 and scalar versions do the same operations, so they agree bit for bit.

template <class T>
bool quantize_one(T x, const Grid& g, int32_t& q) {
  int32_t c = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (g.float_path) {
      const float scaled = x * g.inv_bin_f;
      if (!(std::fabs(scaled) < g.code_limit_f)) return false;
      c = static_cast<int32_t>(std::nearbyint(scaled));
    }
  }
  if (!std::is_same_v<T, float> || !g.float_path) {
    const double scaled = static_cast<double>(x) * g.inv_bin;
    if (!(std::fabs(scaled) < g.code_limit)) return false;
    c = static_cast<int32_t>(std::nearbyint(scaled));
  }
  const double recon = static_cast<double>(c) * g.bin;  // exact
  if (!(std::fabs(static_cast<double>(x) - recon) <= g.eb)) return false;
  q = c;
  return true;
}

template <class T>
uint32_t quantize_scalar(const T* x, const Grid& g, int32_t* q) {
  uint32_t bad = 0;
  for (int i = 0; i < kLen; ++i) {
    q[i] = 0;
    if (!quantize_one(x[i], g, q[i])) bad |= 1u << i;
  }
  return bad;
}

#if defined(__AVX2__)
inline __m256d load4(const float* x) { return _mm256_cvtps_pd(_mm_loadu_ps(x)); }
inline __m256d load4(const double* x) { return _mm256_loadu_pd(x); }

// Lanes of 4 codes (and their values in float64) verified: the mask of lanes that pass.
inline uint32_t verify4(__m256d v, __m128i code, const Grid& g) {
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  const __m256d recon = _mm256_mul_pd(_mm256_cvtepi32_pd(code), _mm256_set1_pd(g.bin));
  const __m256d err = _mm256_and_pd(_mm256_sub_pd(v, recon), abs_mask);
  return static_cast<uint32_t>(
      _mm256_movemask_pd(_mm256_cmp_pd(err, _mm256_set1_pd(g.eb), _CMP_LE_OQ)));
}

// Codes found in float64, four lanes at a time.
template <class T>
uint32_t quantize_block_f64(const T* x, const Grid& g, int32_t* q) {
  const __m256d inv = _mm256_set1_pd(g.inv_bin), limit = _mm256_set1_pd(g.code_limit);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  uint32_t ok = 0;
  for (int k = 0; k < kLen / 4; ++k) {
    const __m256d v = load4(x + 4 * k);
    const __m256d scaled = _mm256_mul_pd(v, inv);
    const __m256d in_range = _mm256_cmp_pd(_mm256_and_pd(scaled, abs_mask), limit, _CMP_LT_OQ);
    const __m256d rounded =
        _mm256_round_pd(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i code = _mm256_cvttpd_epi32(_mm256_and_pd(rounded, in_range));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 4 * k), code);
    ok |= (verify4(v, code, g) & static_cast<uint32_t>(_mm256_movemask_pd(in_range))) << (4 * k);
  }
  return ~ok;
}

// float32 values on a float_path grid: codes found in float32, eight lanes at a time. When every
// lane passes the shortcut of fzlight_block.h (kSureLimit), the float64 check is skipped: one
// branch per block, so the first pass stays straight-line code.
uint32_t quantize_block_f32(const float* x, const Grid& g, int32_t* q) {
  const __m256 inv = _mm256_set1_ps(g.inv_bin_f), limit = _mm256_set1_ps(g.code_limit_f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  uint32_t range = 0, sure = 0;
  for (int k = 0; k < kLen / 8; ++k) {
    const __m256 v = _mm256_loadu_ps(x + 8 * k);
    const __m256 scaled = _mm256_mul_ps(v, inv);
    const __m256 in_range = _mm256_cmp_ps(_mm256_and_ps(scaled, abs_mask), limit, _CMP_LT_OQ);
    const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i code = _mm256_cvttps_epi32(_mm256_and_ps(rounded, in_range));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * k), code);
    range |= static_cast<uint32_t>(_mm256_movemask_ps(in_range)) << (8 * k);
    sure |= block::sure_lanes8(scaled, rounded) << (8 * k);
  }
  if (g.sure_path && (sure & range) == ~0u) return 0;
  uint32_t ok = 0;
  for (int k = 0; k < kLen / 8; ++k) {
    const __m256 v = _mm256_loadu_ps(x + 8 * k);
    const __m256i code = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * k));
    const uint32_t lo = verify4(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                _mm256_castsi256_si128(code), g);
    const uint32_t hi = verify4(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)),
                                _mm256_extracti128_si256(code, 1), g);
    ok |= (lo | (hi << 4)) << (8 * k);
  }
  return ~(ok & range);
}

template <class T>
uint32_t quantize_block(const T* x, const Grid& g, int32_t* q) {
  uint32_t bad;
  if constexpr (std::is_same_v<T, float>) {
    bad = g.float_path ? quantize_block_f32(x, g, q) : quantize_block_f64(x, g, q);
  } else {
    bad = quantize_block_f64(x, g, q);
  }
  for (uint32_t b = bad; b != 0; b &= b - 1) q[__builtin_ctz(b)] = 0;
  return bad;
}
#else
template <class T>
uint32_t quantize_block(const T* x, const Grid& g, int32_t* q) {
  return quantize_scalar(x, g, q);
}
#endif

// ---- Codes to values: T(Q * bin). ----

template <class T>
T value_of(int32_t q, const Grid& g) {
  if constexpr (std::is_same_v<T, float>) {
    if (g.float_path && q < (1 << 24) && q > -(1 << 24)) {
      return static_cast<float>(q) * g.bin_f;  // == float(q * bin): see Grid::float_path
    }
  }
  return static_cast<T>(static_cast<double>(q) * g.bin);
}

#if defined(__AVX2__)
// Eight codes to values at out (the scalar value_of, lane for lane).
// small: the segment says every |code| < 2^24 (no need to look).
inline void store_values(__m256i codes, const Grid& g, bool small, float* out) {
  if (g.float_path && small) {
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(g.bin_f)));
    return;
  }
  const __m256i big = _mm256_cmpgt_epi32(_mm256_abs_epi32(codes), _mm256_set1_epi32((1 << 24) - 1));
  if (g.float_path && _mm256_testz_si256(big, big)) {
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(g.bin_f)));
    return;
  }
  alignas(32) int32_t q[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(q), codes);
  for (int i = 0; i < 8; ++i) out[i] = value_of<float>(q[i], g);
}
inline void store_values(__m256i codes, const Grid& g, bool, double* out) {
  const __m256d b = _mm256_set1_pd(g.bin);
  _mm256_storeu_pd(out, _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(codes)), b));
  _mm256_storeu_pd(out + 4,
                   _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(codes, 1)), b));
}
#endif

// The codes of one packed block of either kind into q; carry becomes its last code (the next
// block's deltas start from it, whatever this block's kind). A branch on the kind: the encoder
// decides per group of 16 blocks, so it is well predicted (reading both kinds with masks cost
// smooth data 5 %, and a direct block read this way skips the prefix sum).
void unpack_block(const uint8_t* planes, int len, bool direct, int32_t& carry, int32_t* q) {
  if (!direct) {
    block::unpack_codes(planes, len, carry, q);
    return;
  }
  block::unpack_codes<false>(planes, len, carry, q);
  carry = q[kLen - 1];
}

#if defined(__AVX2__)
// unpack_block, eight codes at a time: sink(k, codes of lanes 8k .. 8k+7).
template <class Sink>
void unpack_block_with(const uint8_t* planes, int len, bool direct, int32_t& carry, Sink&& sink) {
  if (!direct) {
    block::unpack_codes_with(planes, len, carry, sink);
    return;
  }
  __m256i last = _mm256_setzero_si256();
  block::unpack_codes_with<false>(planes, len, carry, [&](int k, __m256i codes) {
    sink(k, codes);
    if (k == kLen / 8 - 1) last = codes;
  });
  carry = _mm256_extract_epi32(last, 7);
}
#endif

// The values of one packed block (m <= 32 of them) into out; q gets the codes when the block
// holds outliers to patch (need_codes), since the patch adds to Q * bin.
template <class T>
void unpack_values(const uint8_t* planes, int len, bool direct, int32_t& carry, const Grid& g,
                   bool small, int m, bool need_codes, int32_t* q, T* out) {
#if defined(__AVX2__)
  if (m == kLen && !need_codes) {
    unpack_block_with(planes, len, direct, carry, [&](int k, __m256i codes) {
      store_values(codes, g, small, out + 8 * k);
    });
    return;
  }
#else
  (void)need_codes;  // the scalar path always has the codes
  (void)small;       // value_of looks at each code
#endif
  unpack_block(planes, len, direct, carry, q);
  for (int i = 0; i < m; ++i) out[i] = value_of<T>(q[i], g);
}

// One outlier partial.
struct Outlier {
  uint32_t index;
  double value;
};

void put_outlier(uint8_t* at, const Outlier& o) {
  fmt::store<uint32_t>(at, o.index);
  fmt::store<double>(at + 4, o.value);
}
Outlier get_outlier(const uint8_t* at) {
  return Outlier{fmt::load<uint32_t>(at), fmt::load<double>(at + 4)};
}

// a + b, except that of two NaNs the first is kept: which NaN an addition of two returns depends
// on the operand order the compiler picked, and segments must not differ between builds.
double add_partials(double a, double b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a + b;
}

// Where the parts of a validated segment are.
struct Parts {
  const uint8_t* src = nullptr;  // the segment; nullptr when there is none
  SegmentInfo info;
  const uint8_t* bitmap = nullptr;
  const uint8_t* lengths = nullptr;  // one per set bit of the bitmap
  const uint8_t* planes = nullptr;
  const uint8_t* outliers = nullptr;
};

// Bytes of the bitmap, and the number of its set bits (blocks with planes).
uint64_t bitmap_bytes(uint64_t nblocks) { return (nblocks + 7) / 8; }
uint64_t set_bits(const uint8_t* bitmap, uint64_t nbytes) {
  uint64_t k = 0;
  for (uint64_t i = 0; i < nbytes; ++i) k += static_cast<uint64_t>(__builtin_popcount(bitmap[i]));
  return k;
}

SegmentInfo check_segment(const uint8_t* src, size_t len, bool verify_crc);

// The parts of a segment whose structure is valid; its checksum is verified by the BlockWalk
// that reads it (finish()), in step with the reading, so the planes are read from memory once.
Parts parts_of(const uint8_t* src, size_t len) {
  Parts p;
  p.src = src;
  p.info = check_segment(src, len, false);
  const uint64_t nb = bitmap_bytes(blocks_of(p.info.count));
  p.bitmap = src + kHeaderBytes;
  p.planes = p.bitmap + nb;
  p.outliers = src + p.info.bytes - p.info.outliers * kOutlierBytes;
  p.lengths = p.outliers - set_bits(p.bitmap, nb);
  return p;
}

// Walks the blocks of a segment: the code length of each, and where its planes are; verifies
// the checksum as it goes (absorb() every few blocks, finish() at the end).
class BlockWalk {
 public:
  explicit BlockWalk(const Parts& p)
      : parts_(p), bitmap_(p.bitmap), lengths_(p.lengths), planes_(p.planes),
        crc_done_(p.planes) {
    if (p.src != nullptr) {
      crc_ = crc32c(p.src, 40);
      crc_ = crc32c(p.src + 44, 4, crc_);
      crc_ = crc32c(p.bitmap, static_cast<size_t>(p.planes - p.bitmap), crc_);
    }
  }
  // Code length of block b (called for b = 0, 1, ... in order); planes() is then its planes,
  // direct() its kind.
  int next(uint64_t b) {
    planes_ += advance_;
    const uint8_t byte = (bitmap_[b / 8] >> (b % 8)) & 1 ? *lengths_++ : 0;
    direct_ = (byte & kDirectBlock) != 0;
    advance_ = planes_bytes(byte);
    return byte & kLengthMask;
  }
  const uint8_t* planes() const { return planes_; }
  bool direct() const { return direct_; }
  // Adds the planes read so far (still in cache) to the checksum.
  void absorb() {
    if (parts_.src == nullptr) return;
    const uint8_t* end = planes_ + advance_;
    crc_ = crc32c(crc_done_, static_cast<size_t>(end - crc_done_), crc_);
    crc_done_ = end;
  }
  // After the last block: the rest of the payload, and the comparison.
  void finish() {
    if (parts_.src == nullptr) return;
    const uint8_t* end = parts_.src + parts_.info.bytes;
    crc_ = crc32c(crc_done_, static_cast<size_t>(end - crc_done_), crc_);
    if (crc_ != fmt::load<uint32_t>(parts_.src + 40)) bad_segment("checksum mismatch");
  }

 private:
  const Parts& parts_;
  const uint8_t* bitmap_;
  const uint8_t* lengths_;
  const uint8_t* planes_;
  const uint8_t* crc_done_;
  size_t advance_ = 0;
  uint32_t crc_ = 0;
  bool direct_ = false;
};

template <class T>
Parts expect(const uint8_t* src, size_t len, uint64_t n, const Grid& g) {
  Parts p = parts_of(src, len);
  if (p.info.dtype != dtype_of<T>()) {
    bad_segment(std::string("holds ") + dtype_name(p.info.dtype) + " codes, expected " +
                dtype_name(dtype_of<T>()));
  }
  if (p.info.count != n) {
    throw CountMismatch("zccl: integer code segment holds " + std::to_string(p.info.count) +
                      " values, expected " + std::to_string(n));
  }
  if (std::memcmp(&p.info.bin, &g.bin, sizeof(double)) != 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "zccl: integer code segment was quantised with bin %.17g, this rank uses "
                  "%.17g (ranks disagree on the error bound)",
                  p.info.bin, g.bin);
    throw StreamError(buf);
  }
  return p;
}

// After block b: every kProgressBlocks blocks (and after the last), the checksum takes the
// planes just read and the caller's progress hook runs.
void checkpoint(BlockWalk& walk, const Progress* progress, uint64_t b, uint64_t nblocks) {
  if ((b + 1) % kProgressBlocks == 0 || b + 1 == nblocks) {
    walk.absorb();
    if (progress != nullptr) (*progress)(b + 1, nblocks);
  }
}

// Reused across calls: the outliers of the local values of one segment, and its code lengths.
thread_local std::vector<Outlier> t_local_outliers;
thread_local std::vector<uint8_t> t_lengths;
thread_local std::vector<std::pair<uint32_t, int32_t>> t_outlier_codes;

}  // namespace

std::optional<Grid> make_grid(double eb, int ranks) {
  if (ranks < 1 || !std::isfinite(eb) || !(eb >= std::numeric_limits<double>::min())) {
    return std::nullopt;
  }
  // The bin fZ-light uses (2 eb, shrunk so rounding never reaches the bound), cut to 8
  // significant bits so that code * bin is exact in float64 for every |code| < 2^30.
  const double wide = 2.0 * eb * (1.0 - 1.0 / 1024.0);
  if (!std::isfinite(wide)) return std::nullopt;
  int e = 0;
  const double m = std::frexp(wide, &e);  // wide = m * 2^e, m in [0.5, 1)
  const double bin = std::ldexp(std::floor(m * 256.0) / 256.0, e);
  if (!(bin >= std::numeric_limits<double>::min()) || !std::isfinite(bin)) return std::nullopt;
  Grid g;
  g.eb = eb;
  g.bin = bin;
  g.inv_bin = 1.0 / bin;
  g.code_limit = std::floor((static_cast<double>(1 << 30) - 64.0) / ranks);
  const float bin_f = static_cast<float>(bin);
  g.float_path = static_cast<double>(bin_f) == bin && bin_f >= std::numeric_limits<float>::min() &&
                 std::isfinite(1.0f / bin_f);
  if (g.float_path) {
    g.bin_f = bin_f;
    g.inv_bin_f = 1.0f / bin_f;
    g.code_limit_f = std::nextafter(static_cast<float>(g.code_limit), 0.0f);
    g.sure_path = block::sure_path_ok(eb, g.bin_f, g.inv_bin_f);
  }
  return g;
}

size_t max_segment_bytes(uint64_t n) {
  // The bitmap; per block its length byte and at most 33 words of planes; per value, an
  // outlier record.
  const uint64_t nblocks = blocks_of(n);
  return kHeaderBytes + bitmap_bytes(nblocks) + nblocks * (1 + 4 * (1 + kMaxCodeLength)) +
         n * kOutlierBytes;
}

SegmentInfo read_segment_info(const uint8_t* src, size_t len) {
  return check_segment(src, len, true);
}

namespace {

SegmentInfo check_segment(const uint8_t* src, size_t len, bool verify_crc) {
  if (src == nullptr || len < kHeaderBytes) {
    bad_segment("truncated header (" + std::to_string(len) + " bytes)");
  }
  if (std::memcmp(src, kMagic, 4) != 0) bad_segment("bad magic");
  SegmentInfo info;
  const uint8_t dt = src[4];
  if (dt != static_cast<uint8_t>(DType::Float32) && dt != static_cast<uint8_t>(DType::Float64)) {
    bad_segment("unknown dtype code " + std::to_string(dt));
  }
  info.dtype = static_cast<DType>(dt);
  info.bin = fmt::load<double>(src + 8);
  info.count = fmt::load<uint64_t>(src + 16);
  info.outliers = fmt::load<uint64_t>(src + 24);
  const uint64_t payload = fmt::load<uint64_t>(src + 32);
  if (!(info.bin > 0.0) || !std::isfinite(info.bin)) bad_segment("bad bin");
  if (payload != len - kHeaderBytes) {
    bad_segment("payload of " + std::to_string(payload) + " bytes in a message of " +
                std::to_string(len));
  }
  info.bytes = len;
  if (verify_crc && segment_crc(src, payload) != fmt::load<uint32_t>(src + 40)) {
    bad_segment("checksum mismatch");
  }
  if ((src[5] & ~kSmallCodes) != 0 || src[6] != 0 || src[7] != 0 ||
      fmt::load<uint32_t>(src + 44) != 0) {
    bad_segment("unknown flags");
  }
  info.small_codes = (src[5] & kSmallCodes) != 0;
  const uint64_t nblocks = blocks_of(info.count);
  const uint64_t nb = bitmap_bytes(nblocks);
  if (info.count > payload * 8 * kLen || nb > payload) bad_segment("count does not fit the payload");
  const uint8_t* bitmap = src + kHeaderBytes;
  if (nblocks % 8 != 0 && (bitmap[nb - 1] >> (nblocks % 8)) != 0) bad_segment("bitmap padding");
  const uint64_t coded = set_bits(bitmap, nb);
  if (coded > payload - nb || info.outliers > (payload - nb - coded) / kOutlierBytes ||
      info.outliers > info.count) {
    bad_segment("counts do not fit the payload");
  }
  const uint8_t* lengths = src + len - info.outliers * kOutlierBytes - coded;
  // Branch-free over the length bytes (this loop reads one per block of the segment), the bad
  // one looked for only once some is.
  uint64_t planes = 0;
  uint32_t bad = 0;
  for (uint64_t i = 0; i < coded; ++i) {
    const uint32_t byte = lengths[i], len = byte & kLengthMask, direct = byte >> 7;
    bad |= (byte & kReservedBit) | static_cast<uint32_t>(len > kMaxCodeLength) |
           static_cast<uint32_t>(len == 0 && direct == 0);
    info.direct_blocks += direct;
    planes += planes_bytes(static_cast<uint8_t>(byte));
  }
  if (bad != 0) {
    for (uint64_t i = 0; i < coded; ++i) {
      const uint8_t len = lengths[i] & kLengthMask;
      if ((lengths[i] & kReservedBit) != 0 || len > kMaxCodeLength ||
          (len == 0 && (lengths[i] & kDirectBlock) == 0)) {
        bad_segment("code length byte " + std::to_string(lengths[i]));
      }
    }
  }
  if (planes != payload - nb - coded - info.outliers * kOutlierBytes) {
    bad_segment("planes do not fill the payload");
  }
  const uint8_t* rec = src + len - info.outliers * kOutlierBytes;
  int64_t last = -1;
  for (uint64_t k = 0; k < info.outliers; ++k, rec += kOutlierBytes) {
    const uint32_t i = fmt::load<uint32_t>(rec);
    if (static_cast<int64_t>(i) <= last || i >= info.count) {
      bad_segment("outlier index " + std::to_string(i) + " out of order or range");
    }
    last = i;
  }
  return info;
}

}  // namespace

template <class T>
size_t combine(const uint8_t* in, size_t in_len, const T* x, uint64_t n, const Grid& g,
               uint8_t* dst, size_t cap, const Progress* progress, T* values) {
  if (dst == nullptr || cap < max_segment_bytes(n)) {
    throw ArgumentError("zccl: integer code segment: destination smaller than max_segment_bytes");
  }
  if (n > 0 && x == nullptr) throw ArgumentError("zccl: integer code segment: x is null");
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw ArgumentError("zccl: integer code segment: more than 2^32 - 1 values");
  }
  Parts inp;
  if (in != nullptr) inp = expect<T>(in, in_len, n, g);
  BlockWalk walk(inp);
  const uint64_t nblocks = blocks_of(n);
  const uint64_t nb = bitmap_bytes(nblocks);
  uint8_t* const bitmap = dst + kHeaderBytes;
  uint8_t* out = bitmap + nb;  // the planes, then the lengths (gathered aside until then)
  std::vector<uint8_t>& lengths = t_lengths;
  lengths.resize(nblocks);
  uint64_t coded = 0;
  std::memset(bitmap, 0, nb);
  std::vector<Outlier>& local = t_local_outliers;
  local.clear();
  // With `values`: the sum codes of every outlier index, to patch the values after the merge.
  std::vector<std::pair<uint32_t, int32_t>>& outlier_codes = t_outlier_codes;
  outlier_codes.clear();
  const uint8_t* in_rec = inp.outliers;
  const uint8_t* const in_rec_end = in != nullptr ? in_rec + inp.info.outliers * kOutlierBytes
                                                  : in_rec;

  int32_t carry_in = 0, carry_out = 0;
  bool group_direct = false;  // the kind of the current group's blocks (its probe's)
  uint32_t big_codes = 0;  // OR of every |sum|: below 2^24 -> the small-codes flag
  alignas(32) int32_t incoming[kLen] = {};
  alignas(32) int32_t mine[kLen];
  alignas(32) int32_t sum[kLen];
  alignas(32) T padded[kLen];
#if defined(__AVX2__)
  __m256i big_acc = _mm256_setzero_si256();
#endif
  for (uint64_t b = 0; b < nblocks; ++b) {
    const uint64_t base = b * kLen;
    const int m = static_cast<int>(std::min<uint64_t>(kLen, n - base));
    const int in_len = in != nullptr ? walk.next(b) : 0;
    [[maybe_unused]] const bool in_outliers =
        in_rec < in_rec_end && fmt::load<uint32_t>(in_rec) < base + m;
    const T* xs = x + base;
    uint8_t length_byte = 0;
    uint32_t bad = 0;
    bool sums_in_array = false;
#if defined(__AVX2__)
    if (m == kLen) {  // the common case, in registers: unpack, add, pack
      __m256i sums[4];
      if (in != nullptr) {
        unpack_block_with(walk.planes(), in_len, walk.direct(), carry_in,
                          [&sums](int k, __m256i codes) { sums[k] = codes; });
      } else {
        for (__m256i& v : sums) v = _mm256_setzero_si256();
      }
      bad = quantize_block(xs, g, mine);
      for (int k = 0; k < 4; ++k) {  // wraps like uint32 (honest inputs never reach 2^31)
        sums[k] = _mm256_add_epi32(
            sums[k], _mm256_load_si256(reinterpret_cast<const __m256i*>(mine + 8 * k)));
        big_acc = _mm256_or_si256(big_acc, _mm256_abs_epi32(sums[k]));
      }
      length_byte = pack_grouped(sums, carry_out, b % kKindGroup == 0, group_direct, out);
      carry_out = _mm256_extract_epi32(sums[3], 7);
      if (values != nullptr) {
        if (bad == 0 && !in_outliers) {
          for (int k = 0; k < 4; ++k) store_values(sums[k], g, false, values + base + 8 * k);
        } else {
          for (int k = 0; k < 4; ++k) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(sum + 8 * k), sums[k]);
          }
          sums_in_array = true;
        }
      }
    } else
#endif
    {
      if (in != nullptr) {
        unpack_block(walk.planes(), in_len, walk.direct(), carry_in, incoming);
      }
      if (m < kLen) {
        std::fill(padded, padded + kLen, T(0));
        std::copy(xs, xs + m, padded);
        xs = padded;
      }
      bad = quantize_block(xs, g, mine) & (m < kLen ? (1u << m) - 1u : ~0u);
      for (int i = 0; i < kLen; ++i) {  // wraps like uint32 (honest inputs never reach 2^31)
        sum[i] = static_cast<int32_t>(static_cast<uint32_t>(incoming[i]) +
                                      static_cast<uint32_t>(mine[i]));
      }
      for (int i = m; i < kLen; ++i) sum[i] = sum[m - 1];
      for (int i = 0; i < kLen; ++i) {
        const uint32_t u = static_cast<uint32_t>(sum[i]);
        big_codes |= sum[i] < 0 ? 0u - u : u;
      }
      length_byte = pack_grouped(sum, carry_out, b % kKindGroup == 0, group_direct, out);
      carry_out = sum[kLen - 1];
      sums_in_array = values != nullptr;
    }
    // Before any value is written: `values` may be x.
    for (uint32_t rest = bad; rest != 0; rest &= rest - 1) {
      const int i = __builtin_ctz(rest);
      local.push_back(Outlier{static_cast<uint32_t>(base + i), static_cast<double>(xs[i])});
    }
    if (sums_in_array) {  // values of a block with outliers, or of the scalar path
      for (int i = 0; i < m; ++i) values[base + i] = value_of<T>(sum[i], g);
      // The sum codes of its outlier lanes (incoming and local), in index order.
      uint32_t lanes = bad;
      for (const uint8_t* r = in_rec; r < in_rec_end; r += kOutlierBytes) {
        const uint32_t i = fmt::load<uint32_t>(r);
        if (i >= base + static_cast<uint64_t>(m)) break;
        lanes |= 1u << (i - base);
      }
      for (uint32_t rest = lanes; rest != 0; rest &= rest - 1) {
        const int i = __builtin_ctz(rest);
        outlier_codes.emplace_back(static_cast<uint32_t>(base + i), sum[i]);
      }
    }
    while (in_rec < in_rec_end && fmt::load<uint32_t>(in_rec) < base + m) in_rec += kOutlierBytes;
    if (length_byte != 0) {
      bitmap[b / 8] = static_cast<uint8_t>(bitmap[b / 8] | (1u << (b % 8)));
      lengths[coded++] = length_byte;
      // pack() wrote the planes in place (dst holds 4 * 33 bytes per block, max_segment_bytes):
      // copying them from a buffer cost ~30% of the hop.
      out += planes_bytes(length_byte);
    }
    checkpoint(walk, progress, b, nblocks);
  }
  walk.finish();
#if defined(__AVX2__)
  {
    __m128i r = _mm_or_si128(_mm256_castsi256_si128(big_acc), _mm256_extracti128_si256(big_acc, 1));
    r = _mm_or_si128(r, _mm_shuffle_epi32(r, 0x4E));
    r = _mm_or_si128(r, _mm_shuffle_epi32(r, 0xB1));
    big_codes |= static_cast<uint32_t>(_mm_cvtsi128_si32(r));
  }
#endif
  if (coded > 0) std::memcpy(out, lengths.data(), coded);
  out += coded;

  // Merge the incoming partials with this rank's, both in index order (and, with `values`,
  // patch each outlier index: T(Q * bin + F), as decode() computes it).
  uint64_t k = 0;
  const uint8_t* rec = inp.outliers;
  const uint64_t nin = in != nullptr ? inp.info.outliers : 0;
  size_t j = 0;
  for (uint64_t i = 0; i < nin || j < local.size();) {
    Outlier o;
    if (i < nin && (j == local.size() || get_outlier(rec).index <= local[j].index)) {
      o = get_outlier(rec);
      rec += kOutlierBytes;
      ++i;
      if (j < local.size() && local[j].index == o.index) {
        o.value = add_partials(o.value, local[j++].value);
      }
    } else {
      o = local[j++];
    }
    if (values != nullptr) {
      const auto& [index, code] = outlier_codes[static_cast<size_t>(k)];
      if (index != o.index) throw std::logic_error("zccl: integer code segment: outlier bookkeeping");
      values[index] = static_cast<T>(static_cast<double>(code) * g.bin + o.value);
    }
    put_outlier(out, o);
    out += kOutlierBytes;
    ++k;
  }

  const uint64_t payload = static_cast<uint64_t>(out - bitmap);
  std::memcpy(dst, kMagic, 4);
  dst[4] = static_cast<uint8_t>(dtype_of<T>());
  dst[5] = big_codes < (1u << 24) ? kSmallCodes : 0;
  dst[6] = dst[7] = 0;
  fmt::store<double>(dst + 8, g.bin);
  fmt::store<uint64_t>(dst + 16, n);
  fmt::store<uint64_t>(dst + 24, k);
  fmt::store<uint64_t>(dst + 32, payload);
  fmt::store<uint32_t>(dst + 44, 0);
  fmt::store<uint32_t>(dst + 40, segment_crc(dst, payload));
  return kHeaderBytes + payload;
}

template <class T>
void decode(const uint8_t* src, size_t len, uint64_t n, const Grid& g, T* out,
            const Progress* progress) {
  const Parts p = expect<T>(src, len, n, g);
  if (n > 0 && out == nullptr) throw ArgumentError("zccl: integer code segment: out is null");
  const uint64_t nblocks = blocks_of(n);
  BlockWalk walk(p);
  const uint8_t* rec = p.outliers;
  const uint8_t* const rec_end = p.outliers + p.info.outliers * kOutlierBytes;
  int32_t carry = 0;
  alignas(32) int32_t q[kLen];
  for (uint64_t b = 0; b < nblocks; ++b) {
    const uint64_t base = b * kLen;
    const int m = static_cast<int>(std::min<uint64_t>(kLen, n - base));
    const int L = walk.next(b);
    const bool patch = rec < rec_end && fmt::load<uint32_t>(rec) < base + m;
    unpack_values(walk.planes(), L, walk.direct(), carry, g, p.info.small_codes, m, patch, q,
                  out + base);
    for (; patch && rec < rec_end; rec += kOutlierBytes) {
      const Outlier ol = get_outlier(rec);
      if (ol.index >= base + static_cast<uint64_t>(m)) break;
      out[ol.index] = static_cast<T>(static_cast<double>(q[ol.index - base]) * g.bin + ol.value);
    }
    checkpoint(walk, progress, b, nblocks);
  }
  walk.finish();
}

template size_t combine<float>(const uint8_t*, size_t, const float*, uint64_t, const Grid&,
                               uint8_t*, size_t, const Progress*, float*);
template size_t combine<double>(const uint8_t*, size_t, const double*, uint64_t, const Grid&,
                                uint8_t*, size_t, const Progress*, double*);
template void decode<float>(const uint8_t*, size_t, uint64_t, const Grid&, float*,
                            const Progress*);
template void decode<double>(const uint8_t*, size_t, uint64_t, const Grid&, double*,
                             const Progress*);

}  // namespace zccl::fz::codes
