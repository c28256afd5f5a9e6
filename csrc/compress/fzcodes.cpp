// Integer code segments (see fzcodes.h for the format, the error bound and why).
#include "fzcodes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "crc32c.h"
#include "fzlight_block.h"
#include "fzlight_format.h"

namespace zccl::fz::codes {

namespace {

namespace fmt = format;
constexpr int kLen = block::kLen;
constexpr uint8_t kMagic[4] = {'Z', 'C', 'I', 'Q'};
constexpr uint64_t kProgressBlocks = 128;  // 4096 values between progress calls
constexpr uint8_t kMaxCodeLength = 32;     // a hostile segment's wrapped sums may need 32 planes

template <class T>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float32/float64 only");
  return std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
}

uint64_t blocks_of(uint64_t n) { return (n + kLen - 1) / kLen; }

[[noreturn]] void bad_segment(const std::string& why) {
  throw StreamError("zccl: corrupted integer code segment: " + why);
}

// ---- Quantising 32 values onto the grid: codes, and the mask of lanes kept exactly. ----
// Everything in float64: x * inv_bin, rounded to nearest (ties to even), checked against the
// code limit, and |x - q * bin| <= eb verified with q * bin exact (fzcodes.h). A lane that fails
// gets code 0. The AVX2 and scalar versions do the same operations, so they agree bit for bit.

template <class T>
uint32_t quantize_scalar(const T* x, const Grid& g, int32_t* q) {
  uint32_t bad = 0;
  for (int i = 0; i < kLen; ++i) {
    const double xd = static_cast<double>(x[i]);
    const double scaled = xd * g.inv_bin;
    q[i] = 0;
    if (!(std::fabs(scaled) < g.code_limit)) {
      bad |= 1u << i;
      continue;
    }
    const int32_t c = static_cast<int32_t>(std::nearbyint(scaled));
    const double recon = static_cast<double>(c) * g.bin;  // exact
    if (std::fabs(xd - recon) <= g.eb) {
      q[i] = c;
    } else {
      bad |= 1u << i;
    }
  }
  return bad;
}

#if defined(__AVX2__)
inline __m256d load4(const float* x) { return _mm256_cvtps_pd(_mm_loadu_ps(x)); }
inline __m256d load4(const double* x) { return _mm256_loadu_pd(x); }

template <class T>
uint32_t quantize_block(const T* x, const Grid& g, int32_t* q) {
  const __m256d inv = _mm256_set1_pd(g.inv_bin), bin = _mm256_set1_pd(g.bin);
  const __m256d limit = _mm256_set1_pd(g.code_limit), eb = _mm256_set1_pd(g.eb);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  uint32_t bad = 0;
  for (int k = 0; k < kLen / 4; ++k) {
    const __m256d v = load4(x + 4 * k);
    const __m256d scaled = _mm256_mul_pd(v, inv);
    const __m256d in_range = _mm256_cmp_pd(_mm256_and_pd(scaled, abs_mask), limit, _CMP_LT_OQ);
    const __m256d rounded =
        _mm256_round_pd(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i code = _mm256_cvttpd_epi32(_mm256_and_pd(rounded, in_range));
    const __m256d recon = _mm256_mul_pd(_mm256_cvtepi32_pd(code), bin);  // exact
    const __m256d err = _mm256_and_pd(_mm256_sub_pd(v, recon), abs_mask);
    const __m256d ok = _mm256_and_pd(in_range, _mm256_cmp_pd(err, eb, _CMP_LE_OQ));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 4 * k), code);
    bad |= (~static_cast<uint32_t>(_mm256_movemask_pd(ok)) & 0xFu) << (4 * k);
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
  SegmentInfo info;
  const uint8_t* lengths = nullptr;
  const uint8_t* planes = nullptr;
  const uint8_t* outliers = nullptr;
};

Parts parts_of(const uint8_t* src, size_t len) {
  Parts p;
  p.info = read_segment_info(src, len);
  p.lengths = src + kHeaderBytes;
  p.planes = p.lengths + blocks_of(p.info.count);
  p.outliers = src + p.info.bytes - p.info.outliers * kOutlierBytes;
  return p;
}

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

void call_progress(const Progress* progress, uint64_t b, uint64_t nblocks) {
  if (progress != nullptr && ((b + 1) % kProgressBlocks == 0 || b + 1 == nblocks)) {
    (*progress)(b + 1, nblocks);
  }
}

// Reused across calls: the outliers of the local values of one segment.
thread_local std::vector<Outlier> t_local_outliers;

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
  return g;
}

size_t max_segment_bytes(uint64_t n) {
  // Per block: its length byte and at most 33 words of planes; per value, an outlier record.
  return kHeaderBytes + blocks_of(n) * (1 + 4 * (1 + kMaxCodeLength)) + n * kOutlierBytes;
}

SegmentInfo read_segment_info(const uint8_t* src, size_t len) {
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
  if (crc32c(src + kHeaderBytes, payload) != fmt::load<uint32_t>(src + 40)) {
    bad_segment("payload checksum mismatch");
  }
  const uint64_t nblocks = blocks_of(info.count);
  if (info.count > payload * kLen || nblocks > payload ||
      info.outliers > (payload - nblocks) / kOutlierBytes || info.outliers > info.count) {
    bad_segment("counts do not fit the payload");
  }
  const uint8_t* lengths = src + kHeaderBytes;
  uint64_t planes = 0;
  for (uint64_t b = 0; b < nblocks; ++b) {
    if (lengths[b] > kMaxCodeLength) bad_segment("code length " + std::to_string(lengths[b]));
    planes += lengths[b] == 0 ? 0 : 4u * (1u + lengths[b]);
  }
  if (planes != payload - nblocks - info.outliers * kOutlierBytes) {
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

template <class T>
size_t combine(const uint8_t* in, size_t in_len, const T* x, uint64_t n, const Grid& g,
               uint8_t* dst, size_t cap, const Progress* progress) {
  if (dst == nullptr || cap < max_segment_bytes(n)) {
    throw ArgumentError("zccl: integer code segment: destination smaller than max_segment_bytes");
  }
  if (n > 0 && x == nullptr) throw ArgumentError("zccl: integer code segment: x is null");
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw ArgumentError("zccl: integer code segment: more than 2^32 - 1 values");
  }
  Parts inp;
  if (in != nullptr) inp = expect<T>(in, in_len, n, g);
  const uint8_t* in_plane = inp.planes;
  const uint64_t nblocks = blocks_of(n);
  uint8_t* const lengths = dst + kHeaderBytes;
  uint8_t* out = lengths + nblocks;
  std::vector<Outlier>& local = t_local_outliers;
  local.clear();

  int32_t carry_in = 0, carry_out = 0;
  alignas(32) int32_t incoming[kLen] = {};
  alignas(32) int32_t mine[kLen];
  alignas(32) int32_t sum[kLen];
  alignas(32) T padded[kLen];
  uint32_t words[33];
  for (uint64_t b = 0; b < nblocks; ++b) {
    const uint64_t base = b * kLen;
    const int m = static_cast<int>(std::min<uint64_t>(kLen, n - base));
    if (in != nullptr) {
      const int len = inp.lengths[b];
      block::unpack_codes(in_plane, len, carry_in, incoming);
      in_plane += len == 0 ? 0 : 4u * (1u + len);
    }
    const T* xs = x + base;
    if (m < kLen) {
      std::fill(padded, padded + kLen, T(0));
      std::copy(xs, xs + m, padded);
      xs = padded;
    }
    uint32_t bad = quantize_block(xs, g, mine);
    if (m < kLen) bad &= (1u << m) - 1u;
    for (uint32_t rest = bad; rest != 0; rest &= rest - 1) {
      const int i = __builtin_ctz(rest);
      local.push_back(Outlier{static_cast<uint32_t>(base + i), static_cast<double>(xs[i])});
    }
    for (int i = 0; i < kLen; ++i) {  // wraps like uint32 (honest inputs never reach 2^31)
      sum[i] = static_cast<int32_t>(static_cast<uint32_t>(incoming[i]) +
                                    static_cast<uint32_t>(mine[i]));
    }
    for (int i = m; i < kLen; ++i) sum[i] = sum[m - 1];
    const int len = block::pack(sum, carry_out, words);
    carry_out = sum[kLen - 1];
    lengths[b] = static_cast<uint8_t>(len);
    if (len > 0) {
      std::memcpy(out, words, 4u * (1u + len));
      out += 4u * (1u + len);
    }
    call_progress(progress, b, nblocks);
  }

  // Merge the incoming partials with this rank's, both in index order.
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
    put_outlier(out, o);
    out += kOutlierBytes;
    ++k;
  }

  const uint64_t payload = static_cast<uint64_t>(out - lengths);
  std::memcpy(dst, kMagic, 4);
  dst[4] = static_cast<uint8_t>(dtype_of<T>());
  dst[5] = dst[6] = dst[7] = 0;
  fmt::store<double>(dst + 8, g.bin);
  fmt::store<uint64_t>(dst + 16, n);
  fmt::store<uint64_t>(dst + 24, k);
  fmt::store<uint64_t>(dst + 32, payload);
  fmt::store<uint32_t>(dst + 40, crc32c(lengths, payload));
  fmt::store<uint32_t>(dst + 44, 0);
  return kHeaderBytes + payload;
}

template <class T>
void decode(const uint8_t* src, size_t len, uint64_t n, const Grid& g, T* out,
            const Progress* progress) {
  const Parts p = expect<T>(src, len, n, g);
  if (n > 0 && out == nullptr) throw ArgumentError("zccl: integer code segment: out is null");
  const uint64_t nblocks = blocks_of(n);
  const uint8_t* plane = p.planes;
  const uint8_t* rec = p.outliers;
  const uint8_t* const rec_end = p.outliers + p.info.outliers * kOutlierBytes;
  const double bin = g.bin;
  int32_t carry = 0;
  alignas(32) int32_t q[kLen];
  for (uint64_t b = 0; b < nblocks; ++b) {
    const uint64_t base = b * kLen;
    const int m = static_cast<int>(std::min<uint64_t>(kLen, n - base));
    const int L = p.lengths[b];
    block::unpack_codes(plane, L, carry, q);
    plane += L == 0 ? 0 : 4u * (1u + L);
    T* o = out + base;
    for (int i = 0; i < m; ++i) o[i] = static_cast<T>(static_cast<double>(q[i]) * bin);
    for (; rec < rec_end; rec += kOutlierBytes) {
      const Outlier ol = get_outlier(rec);
      if (ol.index >= base + static_cast<uint64_t>(m)) break;
      out[ol.index] =
          static_cast<T>(static_cast<double>(q[ol.index - base]) * bin + ol.value);
    }
    call_progress(progress, b, nblocks);
  }
}

template size_t combine<float>(const uint8_t*, size_t, const float*, uint64_t, const Grid&,
                               uint8_t*, size_t, const Progress*);
template size_t combine<double>(const uint8_t*, size_t, const double*, uint64_t, const Grid&,
                                uint8_t*, size_t, const Progress*);
template void decode<float>(const uint8_t*, size_t, uint64_t, const Grid&, float*,
                            const Progress*);
template void decode<double>(const uint8_t*, size_t, uint64_t, const Grid&, double*,
                             const Progress*);

}  // namespace zccl::fz::codes
