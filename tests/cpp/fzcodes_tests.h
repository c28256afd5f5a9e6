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
