// Tests of the integer code segments (csrc/compress/fzcodes.h), included by core_test.cpp (they
// use its CHECK macros and data generators): the grid, chains of combine() as a ring's ranks run
// them (ragged counts, outliers, non-finite values, every p of the MPI suites), the documented
// bound checked in exact arithmetic (long double), bit identity, and corrupted segments.
#pragma once

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "../../csrc/compress/fzcodes.h"
#include "../../csrc/compress/fzcodes_block.h"

namespace codes_test {

namespace codes = zccl::fz::codes;

template <typename T>
Bytes chain(const std::vector<std::vector<T>>& ranks, const codes::Grid& g) {
  Bytes seg;
  const size_t n = ranks.empty() ? 0 : ranks[0].size();
  for (size_t k = 0; k < ranks.size(); ++k) {
    Bytes next(codes::max_segment_bytes(n));
    const size_t bytes =
        codes::combine(k == 0 ? nullptr : seg.data(), seg.size(), ranks[k].data(), n, g,
                       next.data(), next.size());
    CHECK(bytes <= next.size());
    seg = Bytes(next.data(), bytes);
  }
  return seg;
}

template <typename T>
std::vector<T> decode_all(const Bytes& seg, size_t n, const codes::Grid& g) {
  std::vector<T> out(n + 1, T(-7));
  codes::decode(seg.data(), seg.size(), n, g, out.data());
  CHECK_MSG(out[n] == T(-7), "decode wrote past n values");
  out.pop_back();
  return out;
}

// The p inputs: rank k's values of kind `kind`, scaled differently per rank, and (with `planted`)
// outliers of every sort at a few indices: NaN, +/-Inf (an Inf + -Inf pair gives NaN), values
// past the code limit, and a value on one rank only.
template <typename T>
std::vector<std::vector<T>> inputs(Kind kind, size_t n, int p, bool planted, uint64_t seed) {
  std::vector<std::vector<T>> r;
  for (int k = 0; k < p; ++k) {
    std::vector<T> x = make_data<T>(kind, n, seed + 31 * k);
    for (T& v : x) {
      if (std::isfinite(static_cast<double>(v))) v = static_cast<T>(v * T(1 + k) / T(2));
    }
    if (planted && n >= 40) {
      const T inf = std::numeric_limits<T>::infinity();
      x[3] = k == 0 ? std::numeric_limits<T>::quiet_NaN() : T(1);
      x[5] = k == p - 1 ? -inf : (k == 0 ? inf : T(0.5));
      x[7] = k % 2 ? T(3e30) : T(-1e30);           // far past the code limit
      x[n - 1] = k == p / 2 ? T(7e25) : T(0.25);   // one rank's outlier, last value
      x[32] = k == 0 ? inf : x[32];                // block start
    }
    r.push_back(std::move(x));
  }
  return r;
}

// |out - sum| within the documented bound, in long double (exact enough for float64 sums of a
// few terms: 64-bit mantissa), outliers (non-finite) exactly as the float64 sum gives them.
template <typename T>
void check_sum(const std::vector<std::vector<T>>& ranks, const std::vector<T>& out, double eb,
               const char* what) {
  const int p = static_cast<int>(ranks.size());
  const long double u = std::is_same_v<T, float> ? std::ldexp(1.0L, -24) : 0.0L;
  for (size_t i = 0; i < out.size(); ++i) {
    long double exact = 0, abs_sum = 0;
    double dsum = 0;
    for (int k = 0; k < p; ++k) {
      const double v = static_cast<double>(ranks[k][i]);
      exact += v;
      abs_sum += std::fabs(static_cast<long double>(v));
      dsum += v;
    }
    const double o = static_cast<double>(out[i]);
    if (std::isnan(dsum)) {
      CHECK_MSG(std::isnan(o), fmt("%s: index %zu expected NaN, got %.17g", what, i, o));
      continue;
    }
    if (std::isinf(dsum)) {
      CHECK_MSG(o == dsum, fmt("%s: index %zu expected %g, got %.17g", what, i, dsum, o));
      continue;
    }
    // p eb, one rounding to T, and at outlier indices the float64 sums of the exact partials
    // (at most p roundings of 2^-53 of a partial, each partial <= sum |x_k|).
    const long double tol = static_cast<long double>(p) * eb +
                            u * std::fabs(static_cast<long double>(o)) +
                            (p + 1) * std::ldexp(1.0L, -53) * abs_sum;
    const long double err = std::fabs(static_cast<long double>(o) - exact);
    CHECK_MSG(err <= tol, fmt("%s: index %zu out %.17g exact %.17Lg err %.3Lg > tol %.3Lg", what,
                              i, o, exact, err, tol));
  }
}

inline void test_grid() {
  g_ctx = "codes grid";
  for (double eb : {1e-300, 1e-12, 1e-4, 0.1, 3.0, 1e100}) {
    for (int p : {1, 2, 3, 64}) {
      const auto g = codes::make_grid(eb, p);
      CHECK(g.has_value());
      // At most 8 significant bits, at most 2 eb.
      int e = 0;
      const double m = std::frexp(g->bin, &e);
      CHECK_MSG(std::ldexp(m, 8) == std::floor(std::ldexp(m, 8)), fmt("bin %.17g", g->bin));
      CHECK(g->bin <= 2 * eb && g->bin > eb);
      CHECK(g->code_limit * p <= (1 << 30) - 64);
      CHECK(codes::make_grid(eb, p)->bin == g->bin);  // deterministic
    }
  }
  for (double eb : {0.0, -1.0, 1e-310, std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::quiet_NaN(), DBL_MAX}) {
    CHECK_MSG(!codes::make_grid(eb, 4).has_value(), fmt("grid for eb %g", eb));
  }
  CHECK(!codes::make_grid(1e-3, 0).has_value());
}

template <typename T>
void test_sums() {
  const size_t sizes[] = {0, 1, 2, 31, 32, 33, 64, 97, 1000, 5121};
  for (int p : {1, 2, 3, 4, 5, 7, 8}) {
    for (size_t n : sizes) {
      for (Kind kind : {Kind::Smooth, Kind::Noise, Kind::Zeros, Kind::Specials, Kind::Huge,
                        Kind::Steps}) {
        for (double eb : {1e-6, 1e-3, 0.5}) {
          for (bool planted : {false, true}) {
            g_ctx = fmt("codes sum %s p=%d n=%zu kind=%s eb=%g planted=%d", tname<T>(), p, n,
                        kind_name(kind), eb, planted);
            const auto ranks = inputs<T>(kind, n, p, planted, 100 + n);
            const auto g = *codes::make_grid(eb, p);
            const Bytes seg = chain(ranks, g);
            const std::vector<T> out = decode_all<T>(seg, n, g);
            check_sum(ranks, out, eb, g_ctx.c_str());
            // Decoding is a pure function of the segment.
            const std::vector<T> again = decode_all<T>(Bytes(seg.data(), seg.size()), n, g);
            CHECK(same_bits(out, again));
            const codes::SegmentInfo info = codes::read_segment_info(seg.data(), seg.size());
            CHECK(info.count == n && info.bytes == seg.size() && info.bin == g.bin);
            // The last hop with `values`, in place over the last rank's input as the ring does
            // it: the same segment, and exactly the values decode() gives.
            Bytes before;
            if (p > 1) {
              before = chain(std::vector<std::vector<T>>(ranks.begin(), ranks.end() - 1), g);
            }
            std::vector<T> in_place = ranks.back();
            Bytes last(codes::max_segment_bytes(n));
            const size_t bytes = codes::combine(p > 1 ? before.data() : nullptr, before.size(),
                                                in_place.data(), n, g, last.data(), last.size(),
                                                nullptr, in_place.data());
            CHECK(bytes == seg.size() && std::memcmp(last.data(), seg.data(), bytes) == 0);
            CHECK_MSG(same_bits(in_place, out), "combine's values differ from decode()");
          }
        }
      }
    }
  }
}

// Smooth data compresses, and partial sums of p ranks stay within a few bits of one rank's codes.
template <typename T>
void test_ratio() {
  g_ctx = fmt("codes ratio %s", tname<T>());
  const size_t n = 1 << 16;
  const auto ranks = inputs<T>(Kind::Smooth, n, 4, false, 5);
  const auto g = *codes::make_grid(1e-3, 4);
  const Bytes one = chain(std::vector<std::vector<T>>{ranks[0]}, g);
  const Bytes four = chain(ranks, g);
  CHECK_MSG(one.size() * 4 < n * sizeof(T), fmt("one rank: %zu bytes", one.size()));
  CHECK_MSG(four.size() < 2 * one.size() + 4096, fmt("4 ranks %zu vs 1 rank %zu", four.size(), one.size()));
}

template <typename T>
void test_corruption() {
  g_ctx = fmt("codes corruption %s", tname<T>());
  const size_t n = 200;
  const auto ranks = inputs<T>(Kind::Noise, n, 3, true, 9);
  const auto g = *codes::make_grid(1e-3, 3);
  const Bytes seg = chain(ranks, g);
  std::vector<T> out(n);
  std::vector<uint8_t> buf(codes::max_segment_bytes(n));
  // Every single-byte change is caught (the checksum covers the header too), never a crash.
  for (size_t at = 0; at < seg.size(); ++at) {
    Bytes bad(seg.data(), seg.size());
    bad.data()[at] ^= 0x5A;
    bool threw = false;
    try {
      codes::decode(bad.data(), bad.size(), n, g, out.data());
    } catch (const zccl::fz::StreamError&) {
      threw = true;
    }
    CHECK_MSG(threw, fmt("byte %zu flipped: decode did not throw", at));
    threw = false;
    try {
      codes::combine(bad.data(), bad.size(), ranks[0].data(), n, g, buf.data(), buf.size());
    } catch (const zccl::fz::StreamError&) {
      threw = true;
    }
    CHECK_MSG(threw, fmt("byte %zu flipped: combine did not throw", at));
  }
  for (size_t len : {(size_t)0, (size_t)10, (size_t)47, (size_t)48, seg.size() - 1}) {
    CHECK_THROWS(codes::decode(seg.data(), len, n, g, out.data()), zccl::fz::StreamError);
  }
  CHECK_THROWS(codes::decode(nullptr, 0, n, g, out.data()), zccl::fz::StreamError);
  // Another count: CountMismatch; another grid: a StreamError naming the error bound.
  CHECK_THROWS(codes::decode(seg.data(), seg.size(), n - 1, g, out.data()), codes::CountMismatch);
  bool named = false;
  try {
    codes::decode(seg.data(), seg.size(), n, *codes::make_grid(2e-3, 3), out.data());
  } catch (const zccl::fz::StreamError& e) {
    named = std::string(e.what()).find("error bound") != std::string::npos;
  }
  CHECK_MSG(named, "a segment of another grid is not reported as an error-bound disagreement");
  // Too small a destination, null values.
  CHECK_THROWS(codes::combine<T>(nullptr, 0, ranks[0].data(), n, g, buf.data(), 100),
               zccl::fz::ArgumentError);
  CHECK_THROWS(codes::combine<T>(nullptr, 0, nullptr, n, g, buf.data(), buf.size()),
               zccl::fz::ArgumentError);
}

// The bit length of an OR of magnitudes: a block's code length.
int code_bits(uint32_t all) { return all == 0 ? 0 : 32 - __builtin_clz(all); }

// The probe that packs a block either way (fzcodes_block.h) against the portable scalar one and
// the rule written out here: for codes of every bit length from 0 to 32 (wrapping sums
// included), smooth runs, noise, ties, zeros and constants, both tie preferences: the same
// length, kind and planes, nothing written past them, and the unpackers of that kind give back
// the codes.
void test_either_kernels() {
  g_ctx = "codes either kernels";
  namespace blk = zccl::fz::block;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 29);
  };
  constexpr uint32_t kSentinel = 0xA5C3E1F7u;
  bool seen[2][33] = {};
  for (int bits = 0; bits <= 32; ++bits) {
    const uint32_t span = bits == 0 ? 0u : bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1u;
    for (int pattern = 0; pattern < 60; ++pattern) {
      const int32_t prev = static_cast<int32_t>((next() & span) - span / 2);  // wraps as uint32
      int32_t q[32];
      for (int i = 0; i < 32; ++i) {
        const uint32_t r = span == 0 ? 0u : next() & span;
        switch (pattern % 6) {
          case 0: q[i] = static_cast<int32_t>(r - span / 2); break;                      // noise
          case 1: q[i] = static_cast<int32_t>(static_cast<uint32_t>(prev) + (r >> 4) * i); break;
          case 2: q[i] = 0; break;                                                       // zeros
          case 3: q[i] = prev; break;                                                    // constant
          case 4: q[i] = static_cast<int32_t>(r); break;  // one sign, often tied
          default: q[i] = i % 2 ? std::numeric_limits<int32_t>::min() : 0; break;  // 32 bits
        }
      }
      for (bool tie_direct : {false, true}) {
        uint32_t fast[34], scalar[34];
        std::fill(std::begin(fast), std::end(fast), kSentinel);
        std::fill(std::begin(scalar), std::end(scalar), kSentinel);
        bool df = tie_direct, ds = tie_direct;
        const int lf = blk::pack_either(q, prev, reinterpret_cast<uint8_t*>(fast), df);
        const int ls = blk::pack_either_scalar(q, prev, reinterpret_cast<uint8_t*>(scalar), ds);
        const std::string what =
            fmt("bits %d pattern %d tie_direct %d: length %d direct %d", bits, pattern,
                tie_direct, ls, ds);
        CHECK_MSG(lf == ls && df == ds, what);
        CHECK_MSG(std::equal(std::begin(fast), std::end(fast), std::begin(scalar)), what);
        // The rule, from the codes.
        uint32_t codes_or = 0, deltas_or = 0;
        for (int i = 0; i < 32; ++i) {
          const uint32_t c = static_cast<uint32_t>(q[i]);
          const uint32_t d = c - static_cast<uint32_t>(i == 0 ? prev : q[i - 1]);
          codes_or |= (c >> 31) ? 0u - c : c;
          deltas_or |= (d >> 31) ? 0u - d : d;
        }
        const int cb = code_bits(codes_or), db = code_bits(deltas_or);
        CHECK_MSG(ds == (db > 0 && (cb < db || (cb == db && tie_direct))), what);
        CHECK_MSG(ls == (ds ? cb : db), what);
        seen[ds][ls] = true;
        // Read back as fzcodes.cpp reads a block of the kind its length byte names.
        int32_t out_fast[32], out_scalar[32];
        int32_t carry_fast = prev, carry_scalar = prev;
        const auto* planes = reinterpret_cast<const uint8_t*>(scalar);
        if (ds) {
          blk::unpack_codes<false>(planes, ls, carry_fast, out_fast);
          blk::unpack_codes_scalar<false>(planes, ls, carry_scalar, out_scalar);
          carry_fast = out_fast[31];
          carry_scalar = out_scalar[31];
        } else {
          blk::unpack_codes(planes, ls, carry_fast, out_fast);
          blk::unpack_codes_scalar(planes, ls, carry_scalar, out_scalar);
        }
        CHECK_MSG(std::equal(out_fast, out_fast + 32, q), what);
        CHECK_MSG(std::equal(out_scalar, out_scalar + 32, q), what);
        CHECK_MSG(carry_fast == q[31] && carry_scalar == q[31], what);
      }
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    for (int len = 0; len <= 32; ++len) {
      CHECK_MSG(seen[kind][len], fmt("no %s block of length %d", kind ? "direct" : "Lorenzo", len));
    }
  }
}

// An independent reading of a segment, from fzcodes.h's layout alone: each block's kind, code
// length and codes (from its bit planes, prefix-summed for Lorenzo blocks), the padding lanes
// included.
struct ReadBlock {
  bool direct = false;
  int len = 0;
  int32_t codes[32] = {};
};

std::vector<ReadBlock> read_blocks(const Bytes& seg) {
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, seg.data() + at, 8);
    return v;
  };
  const uint64_t n = u64(16), outliers = u64(24);
  const uint64_t nblocks = (n + 31) / 32, nb = (nblocks + 7) / 8;
  const uint8_t* bitmap = seg.data() + 48;
  uint64_t coded = 0;
  for (uint64_t b = 0; b < nblocks; ++b) coded += (bitmap[b / 8] >> (b % 8)) & 1;
  const uint8_t* lengths = seg.data() + seg.size() - outliers * 12 - coded;
  const uint8_t* planes = bitmap + nb;
  std::vector<ReadBlock> blocks(nblocks);
  int32_t prev = 0;
  for (uint64_t b = 0; b < nblocks; ++b) {
    ReadBlock& r = blocks[b];
    const uint8_t byte = (bitmap[b / 8] >> (b % 8)) & 1 ? *lengths++ : 0;
    r.direct = (byte & 0x80) != 0;
    r.len = byte & 0x3F;
    uint32_t words[33] = {};
    if (r.len > 0) std::memcpy(words, planes, 4u * (1u + r.len));
    planes += r.len > 0 ? 4u * (1u + r.len) : 0u;
    for (int i = 0; i < 32; ++i) {
      uint32_t mag = 0;
      for (int j = 0; j < r.len; ++j) mag |= ((words[1 + j] >> i) & 1u) << j;
      const int32_t v = (words[0] >> i) & 1u ? -static_cast<int32_t>(mag) : static_cast<int32_t>(mag);
      prev = r.direct ? v : prev + v;
      r.codes[i] = prev;
    }
  }
  CHECK_MSG(planes == lengths - coded, "the planes do not end where the lengths start");
  return blocks;
}

// Each block took the kind the encoder's policy names (fzcodes.cpp, kKindGroup): the first
// block of each group of 16 is direct iff its codes need fewer bits than its deltas, or as many
// and the previous group was direct, and never when its deltas are all zero; the other blocks
// of the group take that kind; and each block's length is its kind's bit length. decode()
// returns T(code * bin) where no outlier partial applies. Inputs: groups of smooth values
// (Lorenzo), noise (direct), zeros after non-zero codes (a direct probe, then direct blocks of
// zeros: a length byte and no planes) and constants.
template <typename T>
void test_block_kinds() {
  constexpr size_t kGroup = 16;
  for (int p : {1, 3}) {
    for (size_t n : {(size_t)777, (size_t)20000}) {
      g_ctx = fmt("codes block kinds %s p=%d n=%zu", tname<T>(), p, n);
      std::vector<std::vector<T>> ranks;
      for (int k = 0; k < p; ++k) {
        const std::vector<T> smooth = make_data<T>(Kind::Smooth, n, 11 + k);
        const std::vector<T> noise = make_data<T>(Kind::Noise, n, 23 + k);
        std::vector<T> x(n);
        for (size_t i = 0; i < n; ++i) {
          switch ((i / (32 * kGroup)) % 4) {
            case 0: x[i] = smooth[i]; break;
            case 1: x[i] = noise[i]; break;
            case 2: x[i] = T(0); break;
            default: x[i] = T(0.75); break;
          }
        }
        if (n < 32 * kGroup) x = noise;  // one group: a direct probe at least
        ranks.push_back(std::move(x));
      }
      const auto g = *codes::make_grid(1e-3, p);
      const Bytes seg = chain(ranks, g);
      const std::vector<T> out = decode_all<T>(seg, n, g);
      const std::vector<ReadBlock> blocks = read_blocks(seg);
      size_t direct = 0, direct_zero = 0, lorenzo = 0;
      int32_t prev = 0;
      bool group_direct = false;
      for (size_t b = 0; b < blocks.size(); ++b) {
        const ReadBlock& r = blocks[b];
        uint32_t codes_or = 0, deltas_or = 0;
        for (int i = 0; i < 32; ++i) {
          const int32_t d = r.codes[i] - (i == 0 ? prev : r.codes[i - 1]);
          codes_or |= static_cast<uint32_t>(std::abs(r.codes[i]));
          deltas_or |= static_cast<uint32_t>(std::abs(d));
        }
        if (b % kGroup == 0) {
          const int cb = code_bits(codes_or), db = code_bits(deltas_or);
          group_direct = db > 0 && (cb < db || (cb == db && group_direct));
        }
        CHECK_MSG(r.direct == group_direct, fmt("block %zu: direct=%d, the policy says %d", b,
                                                r.direct, group_direct));
        CHECK_MSG(r.len == (r.direct ? code_bits(codes_or) : code_bits(deltas_or)),
                  fmt("block %zu: code length %d", b, r.len));
        direct += r.direct;
        direct_zero += r.direct && r.len == 0;
        lorenzo += !r.direct;
        prev = r.codes[31];
        for (size_t i = 32 * b; i < std::min(n, 32 * b + 32); ++i) {
          const T want = static_cast<T>(static_cast<double>(r.codes[i - 32 * b]) * g.bin);
          CHECK_MSG(same_bits(std::vector<T>{out[i]}, std::vector<T>{want}),
                    fmt("value %zu: decoded %.9g, the codes give %.9g", i,
                        static_cast<double>(out[i]), static_cast<double>(want)));
        }
      }
      CHECK_MSG(direct > 0, fmt("%zu direct blocks", direct));
      if (n >= 4 * 32 * kGroup) {
        CHECK_MSG(lorenzo > 0 && direct_zero > 0,
                  fmt("blocks: %zu direct (%zu of zeros), %zu Lorenzo", direct, direct_zero,
                      lorenzo));
      }
      CHECK(codes::read_segment_info(seg.data(), seg.size()).direct_blocks == direct);
      check_sum(ranks, out, 1e-3, g_ctx.c_str());
    }
  }
}

// Noise (and the ranks' sums of it) takes many direct blocks, and is smaller than the same codes
// all in Lorenzo blocks.
template <typename T>
void test_direct_saves() {
  g_ctx = fmt("codes direct saves %s", tname<T>());
  const size_t n = 1 << 15;
  const auto ranks = inputs<T>(Kind::Noise, n, 4, false, 3);
  const auto g = *codes::make_grid(1e-2, 4);
  const Bytes seg = chain(ranks, g);
  const std::vector<ReadBlock> blocks = read_blocks(seg);
  size_t planes = 0, lorenzo_planes = 0, direct = 0;
  int32_t prev = 0;
  for (const ReadBlock& r : blocks) {
    uint32_t deltas_or = 0;
    for (int i = 0; i < 32; ++i) {
      deltas_or |= static_cast<uint32_t>(std::abs(r.codes[i] - (i == 0 ? prev : r.codes[i - 1])));
    }
    prev = r.codes[31];
    direct += r.direct;
    planes += r.len == 0 ? 0 : 4 * (1 + r.len);
    lorenzo_planes += deltas_or == 0 ? 0 : 4 * (1 + code_bits(deltas_or));
  }
  // Uniform noise summed over 4 ranks: the codes' maximum over 32 lanes often reaches the same
  // power of two as the deltas' (ties), so direct saves less than on Gaussian noise.
  CHECK_MSG(direct * 4 > blocks.size(), fmt("%zu of %zu blocks direct", direct, blocks.size()));
  CHECK_MSG(planes * 100 < lorenzo_planes * 97,
            fmt("planes: %zu bytes, %zu all Lorenzo", planes, lorenzo_planes));
}

// Length bytes the format does not allow, in segments whose checksum is right: a clear error.
template <typename T>
void test_bad_length_bytes() {
  g_ctx = fmt("codes bad length bytes %s", tname<T>());
  const size_t n = 256;
  const auto ranks = inputs<T>(Kind::Noise, n, 2, false, 4);
  const auto g = *codes::make_grid(1e-3, 2);
  const Bytes seg = chain(ranks, g);
  const std::vector<ReadBlock> blocks = read_blocks(seg);
  uint64_t outliers, coded = 0;
  std::memcpy(&outliers, seg.data() + 24, 8);
  for (uint64_t b = 0; b < blocks.size(); ++b) coded += (seg.data()[48 + b / 8] >> (b % 8)) & 1;
  CHECK(coded > 0);
  const size_t first_length = seg.size() - outliers * 12 - coded;
  std::vector<T> out(n);
  for (uint8_t bad : {uint8_t{0x40}, uint8_t{0x00}, uint8_t{0x21}, uint8_t{0xA1}, uint8_t{0xC3}}) {
    Bytes b(seg.data(), seg.size());
    b.data()[first_length] = bad;
    const uint64_t payload = b.size() - codes::kHeaderBytes;
    uint32_t c = zccl::fz::crc32c(b.data(), 40);
    c = zccl::fz::crc32c(b.data() + 44, 4, c);
    c = zccl::fz::crc32c(b.data() + codes::kHeaderBytes, payload, c);
    std::memcpy(b.data() + 40, &c, 4);
    bool named = false;
    try {
      codes::decode(b.data(), b.size(), n, g, out.data());
    } catch (const zccl::fz::StreamError& e) {
      named = std::string(e.what()).find("code length byte") != std::string::npos;
    }
    CHECK_MSG(named, fmt("length byte 0x%02x not refused by name", bad));
  }
}

// Values at the grid's rounding boundaries (core_test.cpp's boundary_values), one rank and four.
template <typename T>
void test_boundaries() {
  for (double eb : kBoundaryBounds) {
    for (int p : {1, 4}) {
      const auto g = *codes::make_grid(eb, p);
      g_ctx = fmt("codes boundaries %s eb=%g p=%d", tname<T>(), eb, p);
      const std::vector<T> x = boundary_values<T>(g.bin);
      const std::vector<std::vector<T>> ranks(static_cast<size_t>(p), x);
      check_sum(ranks, decode_all<T>(chain(ranks, g), x.size(), g), eb, g_ctx.c_str());
    }
  }
}

// For --digest: segments and decoded values of fixed inputs (scalar and AVX2 builds agree).
template <typename T>
uint64_t digest(uint64_t h) {
  for (size_t n : {(size_t)33, (size_t)5121}) {
    for (Kind kind : {Kind::Smooth, Kind::Noise, Kind::Specials, Kind::Huge}) {
      const auto ranks = inputs<T>(kind, n, 3, true, 77);
      const auto g = *codes::make_grid(1e-4, 3);
      const Bytes seg = chain(ranks, g);
      const std::vector<T> out = decode_all<T>(seg, n, g);
      h = fnv1a(h, seg.data(), seg.size());
      h = fnv1a(h, out.data(), out.size() * sizeof(T));
    }
  }
  for (double eb : kBoundaryBounds) {
    const auto g = *codes::make_grid(eb, 1);
    std::vector<T> x = boundary_values<T>(g.bin);
    for (T v : dense_boundary_values<T>(g.bin, 200, 24)) x.push_back(v);
    const std::vector<std::vector<T>> ranks{x};
    const Bytes seg = chain(ranks, g);
    const std::vector<T> out = decode_all<T>(seg, ranks[0].size(), g);
    h = fnv1a(h, seg.data(), seg.size());
    h = fnv1a(h, out.data(), out.size() * sizeof(T));
  }
  return h;
}

}  // namespace codes_test
