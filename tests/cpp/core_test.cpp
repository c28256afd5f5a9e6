// Self-contained tests of the torch-free fZ-light core (csrc/compress), meant to run under
// AddressSanitizer / UndefinedBehaviorSanitizer (see tests/test_cpp_core.py).
//
// Usage: core_test [--quick] [--digest]
//   --quick   uses ~2e5 instead of ~1e6 values for the large cases (the rest runs unchanged).
//   --digest  prints a hash of the streams and decoded values of a fixed set of inputs and exits;
//             builds with different kernels/flags must print the same hash.
//
// Covered: round trips (float32/float64, and float16/bfloat16 with the bound checked in double
// against the 2-byte input; sizes 0..~1e6; bounds 0, 1e-310..DBL_MAX; smooth, noise,
// constant, alternating, NaN/Inf, denormals, 1e30, code-overflow, random bits, ...) with the strict
// bound |x - x'| <= eb checked in double and bit-exact non-finite values; stream size <=
// max_compressed_size; byte-identical streams for any thread count and the pipelined path;
// decoding with any thread count; chunk lengths and invalid ones; shapes (1-D, N-D, 0-d, empty,
// kMaxDims); progress callbacks and exceptions thrown from them; random access per chunk;
// argument errors; finite_range; FTZ/DAZ floating-point modes. Format version 2: constant and
// all-zero tensors (one constant chunk + repeats, ratio >= 1000 for every type), runs of constant
// chunks (repeats exactly where due, for any thread count), the lossless codecs (bit-exact: NaN
// payloads, -0.0, subnormals; codec 1 where the build has zstd). --digest covers all of it.
//
// Every buffer handed to the library is a heap allocation of exactly the documented size, so an
// overrun of a single byte is reported by ASan.

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define ZCCL_TEST_HAVE_MXCSR 1
#endif

#include "fzlight.h"
#include "crc32c.h"
#include "fzlight_block.h"
#include "fzlight_format.h"
#include "ratio_sample.h"

namespace fz = zccl::fz;

// ------------------------------------------------------------------------------------------------
// Tiny test harness.

static std::string g_ctx;  // description of the case being run, printed on failure
static uint64_t g_checks = 0;

[[noreturn]] static void fail_at(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n  case: %s\n", file, line, what.c_str(),
               g_ctx.empty() ? "-" : g_ctx.c_str());
  std::fflush(stderr);
  std::exit(1);
}

#define CHECK(cond)                                              \
  do {                                                           \
    ++g_checks;                                                  \
    if (!(cond)) fail_at(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

#define CHECK_MSG(cond, msg)                                                         \
  do {                                                                               \
    ++g_checks;                                                                      \
    if (!(cond)) fail_at(__FILE__, __LINE__, std::string("CHECK(" #cond "): ") + (msg)); \
  } while (0)

// Expression must throw exactly one of the library's exception types (ExcType).
#define CHECK_THROWS(expr, ExcType)                                                          \
  do {                                                                                       \
    ++g_checks;                                                                              \
    bool thrown_ = false;                                                                    \
    try {                                                                                    \
      (void)(expr);                                                                          \
    } catch (const ExcType&) {                                                               \
      thrown_ = true;                                                                        \
    } catch (const std::exception& e_) {                                                     \
      fail_at(__FILE__, __LINE__,                                                            \
              std::string(#expr " threw the wrong type (want " #ExcType "): ") + e_.what()); \
    }                                                                                        \
    if (!thrown_) fail_at(__FILE__, __LINE__, #expr " did not throw " #ExcType);             \
  } while (0)

// Expression must throw StreamError or ArgumentError (either is acceptable).
#define CHECK_THROWS_LIB(expr)                                                                \
  do {                                                                                        \
    ++g_checks;                                                                               \
    bool thrown_ = false;                                                                     \
    try {                                                                                     \
      (void)(expr);                                                                           \
    } catch (const fz::StreamError&) {                                                        \
      thrown_ = true;                                                                         \
    } catch (const fz::ArgumentError&) {                                                      \
      thrown_ = true;                                                                         \
    } catch (const std::exception& e_) {                                                      \
      fail_at(__FILE__, __LINE__,                                                             \
              std::string(#expr " threw a non-library exception: ") + e_.what());            \
    }                                                                                         \
    if (!thrown_) fail_at(__FILE__, __LINE__, #expr " did not throw StreamError/ArgumentError"); \
  } while (0)

// Out-of-range chunk index: ArgumentError or std::out_of_range (pybind11 maps it to IndexError).
#define CHECK_THROWS_INDEX(expr)                                                               \
  do {                                                                                         \
    ++g_checks;                                                                                \
    bool thrown_ = false;                                                                      \
    try {                                                                                      \
      (void)(expr);                                                                            \
    } catch (const fz::ArgumentError&) {                                                       \
      thrown_ = true;                                                                          \
    } catch (const std::out_of_range&) {                                                       \
      thrown_ = true;                                                                          \
    } catch (const std::exception& e_) {                                                       \
      fail_at(__FILE__, __LINE__, std::string(#expr " threw the wrong type: ") + e_.what());   \
    }                                                                                          \
    if (!thrown_) fail_at(__FILE__, __LINE__, #expr " did not throw for a bad chunk index");   \
  } while (0)

static std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// ------------------------------------------------------------------------------------------------
// Deterministic PRNG (splitmix64).

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0,1)
  double sym() { return 2.0 * uniform() - 1.0; }                          // [-1,1)
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

// ------------------------------------------------------------------------------------------------
// Type helpers. The 2-byte stream types are the storage structs F16 / BF16 (bit patterns), with
// conversions written here independently of the library's.

struct F16 {
  uint16_t v;
};
struct BF16 {
  uint16_t v;
};
static_assert(sizeof(F16) == 2 && sizeof(BF16) == 2, "half storage");
template <typename T> inline constexpr bool kIsHalf = std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

template <typename T> constexpr fz::DType dtype_of();
template <> constexpr fz::DType dtype_of<float>() { return fz::DType::Float32; }
template <> constexpr fz::DType dtype_of<double>() { return fz::DType::Float64; }
template <> constexpr fz::DType dtype_of<F16>() { return fz::DType::Float16; }
template <> constexpr fz::DType dtype_of<BF16>() { return fz::DType::BFloat16; }

template <typename T>
using Bits = std::conditional_t<sizeof(T) == 2, uint16_t,
                                std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;

// Exact value of a stored value, in double.
static double to_d(float v) { return v; }
static double to_d(double v) { return v; }
static double to_d(F16 h) {
  const int e = (h.v >> 10) & 0x1F, m = h.v & 0x3FF;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(static_cast<double>(m | 0x400), e - 25);
  }
  return (h.v & 0x8000) ? -v : v;
}
static double to_d(BF16 h) {
  const uint32_t u = static_cast<uint32_t>(h.v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest value of the type (ties to even), for making inputs.
template <typename T> static T from_d(double v);
template <> float from_d<float>(double v) { return static_cast<float>(v); }
template <> double from_d<double>(double v) { return v; }
template <> F16 from_d<F16>(double v) {
  if (std::isnan(v)) return F16{0x7E00};
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a >= 65520.0) return F16{static_cast<uint16_t>(sign | 0x7C00)};
  if (a < std::ldexp(1.0, -14)) {  // subnormal (m == 1024 is the smallest normal: same bits)
    return F16{static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24))))};
  }
  int e;
  const double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): 1.mant * 2^(e-1)
  double mant = std::nearbyint((2.0 * f - 1.0) * 1024.0);
  int ex = e - 1;
  if (mant == 1024.0) {
    mant = 0;
    ++ex;
  }
  if (ex > 15) return F16{static_cast<uint16_t>(sign | 0x7C00)};
  return F16{static_cast<uint16_t>(sign | ((ex + 15) << 10) | static_cast<uint16_t>(mant))};
}
template <> BF16 from_d<BF16>(double v) {
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return BF16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  return BF16{static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}
template <typename T> static bool finite(T v) { return std::isfinite(to_d(v)); }

template <typename T> static Bits<T> bits_of(T v) {
  Bits<T> b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
template <typename T> static T from_bits(Bits<T> b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
template <typename T> static const char* tname() {
  return std::is_same_v<T, F16> ? "f16" : std::is_same_v<T, BF16> ? "bf16" : sizeof(T) == 4 ? "f32" : "f64";
}

// Exact-size byte buffer (heap; size 0 still allocates so the pointer is valid but unusable).
struct Bytes {
  std::vector<uint8_t> v;  // constructed with exactly the needed size: capacity == size
  Bytes() = default;
  explicit Bytes(size_t n) : v(n) {}
  Bytes(const uint8_t* p, size_t n) : v(p, p + n) {}
  const uint8_t* data() const { return v.data(); }
  uint8_t* data() { return v.data(); }
  size_t size() const { return v.size(); }
};

// Compresses into a buffer of exactly max_compressed_size bytes, then copies the stream into an
// exact-size buffer (so readers of the returned stream overrun into ASan's redzone, not slack).
template <typename T>
static Bytes compress_exact(const std::vector<T>& x, const fz::CompressParams& p,
                            const fz::Progress* prog = nullptr) {
  const size_t ndim = p.shape ? p.shape->size() : 1;
  const size_t cap = fz::max_compressed_size(dtype_of<T>(), x.size(), p.chunk_len, ndim);
  std::vector<uint8_t> dst(cap);
  const size_t n = fz::compress(x.data(), dtype_of<T>(), x.size(), p, dst.data(), cap, prog);
  CHECK_MSG(n <= cap, fmt("stream %zu bytes > max_compressed_size %zu", n, cap));
  CHECK(n > 0);
  return Bytes(dst.data(), n);
}

template <typename T>
static std::vector<T> decompress_exact(const Bytes& s, uint64_t count, int threads,
                                       const fz::Progress* prog = nullptr) {
  std::vector<T> out(count);
  fz::decompress(s.data(), s.size(), out.data(), count, threads, prog);
  return out;
}

template <typename T> static bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Checks the contract between input and decoded output: strict bound for finite values,
// bit-exact otherwise (and everywhere when eb == 0).
template <typename T>
static void check_bound(const std::vector<T>& x, const std::vector<T>& y, double eb) {
  CHECK(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const bool exact_needed = eb == 0.0 || !finite(x[i]);
    if (exact_needed) {
      if (bits_of(x[i]) != bits_of(y[i]))
        fail_at(__FILE__, __LINE__,
                fmt("value %zu not bit-exact: x=%.17g (0x%llx) x'=%.17g (0x%llx) eb=%g", i,
                    to_d(x[i]), (unsigned long long)bits_of(x[i]), to_d(y[i]),
                    (unsigned long long)bits_of(y[i]), eb));
    } else {
      const double err = std::fabs(to_d(x[i]) - to_d(y[i]));
      if (!(err <= eb))
        fail_at(__FILE__, __LINE__,
                fmt("bound violated at %zu: x=%.17g x'=%.17g |err|=%.17g > eb=%.17g", i,
                    to_d(x[i]), to_d(y[i]), err, eb));
    }
  }
  g_checks += x.size();
}

// ------------------------------------------------------------------------------------------------
// Data kinds.

enum class Kind {
  Smooth, Noise, NoiseBig, Constant, Zeros, Alternating, Specials, Denormals, Huge,
  CodeOverflow, RandomBits, Steps, Ramp, Extremes, SignedZeros, Count_
};

static const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Smooth: return "smooth";
    case Kind::Noise: return "noise";
    case Kind::NoiseBig: return "noise*1e6";
    case Kind::Constant: return "constant";
    case Kind::Zeros: return "zeros";
    case Kind::Alternating: return "alternating";
    case Kind::Specials: return "nan/inf";
    case Kind::Denormals: return "denormals";
    case Kind::Huge: return "1e30";
    case Kind::CodeOverflow: return "code-overflow";
    case Kind::RandomBits: return "random-bits";
    case Kind::Steps: return "steps";
    case Kind::Ramp: return "ramp";
    case Kind::Extremes: return "extremes";
    case Kind::SignedZeros: return "signed-zeros";
    default: return "?";
  }
}

template <typename T> static std::vector<T> make_full_data(Kind k, size_t n, uint64_t seed) {
  Rng r(seed * 1000003u + (uint64_t)k * 7919u + n);
  std::vector<T> x(n);
  using L = std::numeric_limits<T>;
  for (size_t i = 0; i < n; ++i) {
    const double di = (double)i;
    double v = 0;
    switch (k) {
      case Kind::Smooth: v = 100.0 * std::sin(di * 1e-3) + std::cos(di * 0.037) + 1e-3 * r.sym(); break;
      case Kind::Noise: v = r.sym(); break;
      case Kind::NoiseBig: v = 1e6 * r.sym(); break;
      case Kind::Constant: v = 3.14159265358979; break;
      case Kind::Zeros: v = 0.0; break;
      case Kind::Alternating: v = (i & 1) ? 7.5 : -7.5; break;
      case Kind::Specials: {
        const uint64_t m = r.below(9);
        v = m == 0 ? L::quiet_NaN() : m == 1 ? L::infinity() : m == 2 ? -L::infinity()
            : std::sin(di * 0.01);
        break;
      }
      case Kind::Denormals: {
        const uint64_t m = r.below(4);
        x[i] = m == 0 ? L::denorm_min() * (T)(double)r.below(1000)
             : m == 1 ? -L::denorm_min() * (T)(double)r.below(1u << 20)
             : m == 2 ? L::min() * (T)r.uniform() : (T)0;
        continue;
      }
      case Kind::Huge: v = ((i & 1) ? 1e30 : -1e30) * (1.0 + 0.1 * r.sym()); break;
      case Kind::CodeOverflow: {
        // Quantisation codes that overflow any integer type for small eb, huge Lorenzo jumps.
        const uint64_t m = r.below(6);
        v = m == 0 ? (double)L::max() : m == 1 ? (double)L::lowest() : m == 2 ? 1e30
            : m == 3 ? -3e37 : m == 4 ? 1e-3 * r.sym() : 9.2e18 * r.sym();
        break;
      }
      case Kind::RandomBits:
        x[i] = from_bits<T>((Bits<T>)r.next());
        continue;
      case Kind::Steps: v = (double)((i / 77) % 5) * 1e5 - 2e5 + ((i / 77) % 3 ? 0.25 : 0); break;
      case Kind::Ramp: v = di * 1e3 - 5e5; break;
      case Kind::Extremes: {
        const uint64_t m = r.below(5);
        x[i] = m == 0 ? L::max() : m == 1 ? L::lowest() : m == 2 ? L::min() : m == 3 ? -L::min()
             : (T)(r.sym() * 1e-5);
        continue;
      }
      case Kind::SignedZeros: x[i] = (i % 3 == 0) ? (T)-0.0 : (i % 3 == 1) ? (T)0.0 : (T)1e-30; continue;
      default: break;
    }
    x[i] = (T)v;
  }
  return x;
}

// Half types: the float64 data rounded to the type (1e30 becomes Inf in float16), except the
// kinds about bit patterns, drawn as 16-bit patterns of the type (NaN payloads, subnormals, ...).
template <typename T> static std::vector<T> make_half_data(Kind k, size_t n, uint64_t seed) {
  constexpr bool f16 = std::is_same_v<T, F16>;
  constexpr uint16_t kMax = f16 ? 0x7BFF : 0x7F7F, kMinNormal = f16 ? 0x0400 : 0x0080;
  constexpr uint16_t kMant = f16 ? 0x03FF : 0x007F, kInf = f16 ? 0x7C00 : 0x7F80;
  constexpr uint16_t kQuiet = f16 ? 0x0200 : 0x0040;  // the quiet bit of a NaN
  Rng r(seed * 1000003u + (uint64_t)k * 7919u + n + 17);
  std::vector<T> x(n);
  auto bits = [](uint64_t b) { return T{static_cast<uint16_t>(b)}; };
  for (size_t i = 0; i < n; ++i) {
    switch (k) {
      case Kind::RandomBits: x[i] = bits(r.next()); break;
      case Kind::Denormals: {
        const uint64_t m = r.below(4), sign = r.below(2) << 15;
        x[i] = m == 0 ? bits(sign | (1 + r.below(kMant))) : m == 1 ? bits(sign | 1)
             : m == 2 ? bits(kMinNormal + r.below(3)) : bits(sign);
        break;
      }
      case Kind::Extremes: {
        const uint64_t m = r.below(6);
        x[i] = m == 0 ? bits(kMax) : m == 1 ? bits(0x8000u | kMax) : m == 2 ? bits(kMinNormal)
             : m == 3 ? bits(0x8000u | kMinNormal) : m == 4 ? bits(1) : from_d<T>(r.sym() * 1e-5);
        break;
      }
      case Kind::Specials: {
        const uint64_t m = r.below(9);
        x[i] = m == 0 ? bits(kInf | kQuiet | r.below(kQuiet))          // quiet NaN, any payload
             : m == 1 ? bits(0x8000u | kInf | (1u + r.below(kQuiet - 1)))  // negative signalling
             : m == 2 ? bits(kInf) : m == 3 ? bits(0x8000u | kInf)
             : from_d<T>(std::sin(static_cast<double>(i) * 0.01));
        break;
      }
      default: break;
    }
  }
  if (k == Kind::RandomBits || k == Kind::Denormals || k == Kind::Extremes || k == Kind::Specials) {
    return x;
  }
  const std::vector<double> d = make_full_data<double>(k, n, seed);
  for (size_t i = 0; i < n; ++i) x[i] = from_d<T>(d[i]);
  return x;
}

template <typename T> static std::vector<T> make_data(Kind k, size_t n, uint64_t seed) {
  if constexpr (kIsHalf<T>) {
    return make_half_data<T>(k, n, seed);
  } else {
    return make_full_data<T>(k, n, seed);
  }
}

// The codec a stream made with `codec` at bound eb records (fzlight.h: Auto is zstd when built
// with it; only an exact 0 codes lossless chunks, a bound below the smallest normal stores raw).
static fz::LosslessCodec expected_codec(double eb, fz::LosslessCodec codec) {
  if (eb != 0.0 || codec == fz::LosslessCodec::None) return fz::LosslessCodec::None;
  return fz::lossless_codec_available(fz::LosslessCodec::ShuffleZstd) ? fz::LosslessCodec::ShuffleZstd
                                                                      : fz::LosslessCodec::None;
}

// What a round-trip case covers beyond one compress and decode.
struct CaseOpts {
  bool threads_sweep = true;
  bool pipelined = true;
  bool chunks = true;
};

// A random addend value: +Inf, -Inf or NaN one time in 64 each, else uniform in [-1e3, 1e3].
template <typename T>
static T random_addend(Rng& rng) {
  const uint64_t k = rng.below(64);
  const T inf = std::numeric_limits<T>::infinity();
  return k == 0 ? inf : k == 1 ? -inf : k == 2 ? std::numeric_limits<T>::quiet_NaN()
                                               : static_cast<T>(rng.sym() * 1e3);
}

// decompress_add against decoding and then adding (one rounding per value; NaN where the sum is
// NaN): every thread count, the pipelined path, and in place (dst == addend). The addend holds
// +/-Inf and NaN too.
template <typename T>
static void check_decompress_add(const Bytes& s, const std::vector<T>& y, const CaseOpts& o) {
  const uint64_t n = y.size();
  Rng rng(n * 7919 + 1);
  std::vector<T> addend(n);
  for (uint64_t i = 0; i < n; ++i) addend[i] = random_addend<T>(rng);
  std::vector<T> want(n);
  for (uint64_t i = 0; i < n; ++i) want[i] = addend[i] + y[i];
  auto agrees = [&](const std::vector<T>& got) {
    for (uint64_t i = 0; i < n; ++i) {
      if (std::isnan(want[i]) ? !std::isnan(got[i])
                              : std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
        return false;
      }
    }
    return true;
  };
  std::vector<int> threads = {1};
  if (o.threads_sweep) threads = {1, 2, 3, 0};
  for (int t : threads) {
    std::vector<T> out(n);
    fz::decompress_add(s.data(), s.size(), addend.data(), out.data(), n, t);
    CHECK_MSG(agrees(out), fmt("decompress_add differs from decode + add (threads=%d)", t));
  }
  if (o.pipelined) {
    uint64_t calls = 0;
    const fz::Progress prog = [&](uint64_t, uint64_t) { ++calls; };
    std::vector<T> out(n);
    fz::decompress_add(s.data(), s.size(), addend.data(), out.data(), n, 1, &prog);
    CHECK_MSG(agrees(out), "pipelined decompress_add differs from decode + add");
    CHECK(calls == fz::read_info(s.data(), s.size()).num_chunks);
  }
  std::vector<T> acc = addend;
  fz::decompress_add(s.data(), s.size(), acc.data(), acc.data(), n, 2);
  CHECK_MSG(agrees(acc), "in-place decompress_add differs from decode + add");
}

// recompress_add against compress(decompress_add(...)), byte for byte: every thread count and the
// pipelined path, with `p`'s bound, chunk length and codec. The addend's chunks cycle through
// random values (with +/-Inf and NaN), -y twice (sums of +0: constant chunks and their repeats,
// also across the threads' runs) and zeros (the sum is y).
template <typename T>
static void check_recompress_add(const Bytes& s, const std::vector<T>& y, fz::CompressParams p,
                                 const CaseOpts& o) {
  const uint64_t n = y.size();
  Rng rng(n * 104729 + 3);
  std::vector<T> addend(n);
  for (uint64_t i = 0; i < n; ++i) {
    switch ((i / p.chunk_len) % 4) {
      case 0: addend[i] = random_addend<T>(rng); break;
      case 1:
      case 2: addend[i] = -y[i]; break;
      default: addend[i] = 0;
    }
  }
  std::vector<T> sum(n);
  fz::decompress_add(s.data(), s.size(), addend.data(), sum.data(), n, 1);
  p.threads = 1;
  const Bytes want = compress_exact(sum, p);
  const size_t cap = fz::max_compressed_size(dtype_of<T>(), n, p.chunk_len);
  std::vector<int> threads = {1};
  if (o.threads_sweep) threads = {1, 2, 3, 0};
  for (int t : threads) {
    p.threads = t;
    std::vector<uint8_t> got(cap);
    got.resize(fz::recompress_add(s.data(), s.size(), addend.data(), n, p, got.data(), cap));
    CHECK_MSG(got == want.v,
              fmt("recompress_add differs from compress(decompress_add) (threads=%d)", t));
  }
  if (o.pipelined) {
    uint64_t calls = 0;
    const fz::Progress prog = [&](uint64_t, uint64_t) { ++calls; };
    p.threads = 1;
    std::vector<uint8_t> got(cap);
    got.resize(fz::recompress_add(s.data(), s.size(), addend.data(), n, p, got.data(), cap, &prog));
    CHECK_MSG(got == want.v, "pipelined recompress_add differs from compress(decompress_add)");
    CHECK(calls == fz::read_info(s.data(), s.size()).num_chunks);
  }
}

// recompress_add's argument and stream errors: half streams, another count or chunk length, a
// null addend, a short destination, a truncated stream, a corrupt chunk (on 1 and 3 threads:
// the error leaves the coding threads as StreamError).
static void test_recompress_add_args() {
  fz::CompressParams p;
  p.error_bound = 1e-3;
  p.chunk_len = 64;
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.01 * i));
  const Bytes s = compress_exact(x, p);
  const size_t cap = fz::max_compressed_size(fz::DType::Float32, 1000, 64);
  std::vector<uint8_t> dst(cap);
  std::vector<float> addend(1000, 0.25f);
  auto call = [&](const Bytes& in, uint64_t n, const fz::CompressParams& q, size_t room,
                  const float* a) {
    return fz::recompress_add(in.data(), in.size(), a, n, q, dst.data(), room);
  };
  CHECK(call(s, 1000, p, cap, addend.data()) > 0);
  CHECK_THROWS(call(s, 999, p, cap, addend.data()), fz::ArgumentError);
  fz::CompressParams other = p;
  other.chunk_len = 128;
  CHECK_THROWS(call(s, 1000, other, cap, addend.data()), fz::ArgumentError);
  CHECK_THROWS(call(s, 1000, p, cap, nullptr), fz::ArgumentError);
  CHECK_THROWS(call(s, 1000, p, cap - 1, addend.data()), fz::ArgumentError);
  const std::vector<F16> h(100, F16{0x3C00});
  const Bytes sh = compress_exact(h, p);
  CHECK_THROWS(call(sh, 100, p, cap, addend.data()), fz::ArgumentError);
  Bytes cut = s;
  cut.v.pop_back();
  CHECK_THROWS_LIB(call(cut, 1000, p, cap, addend.data()));
  Bytes bad = s;
  bad.v.back() ^= 0x5A;  // the last chunk's payload: its checksum no longer matches
  for (int t : {1, 3}) {
    fz::CompressParams q = p;
    q.threads = t;
    CHECK_THROWS(call(bad, 1000, q, cap, addend.data()), fz::StreamError);
  }
}

// decompress_add's argument errors: half streams, a short destination, null pointers.
static void test_decompress_add_args() {
  fz::CompressParams p;
  p.error_bound = 1e-3;
  const std::vector<float> x(100, 1.5f);
  const Bytes s = compress_exact(x, p);
  std::vector<float> out(100), addend(100);
  CHECK_THROWS(fz::decompress_add(s.data(), s.size(), addend.data(), out.data(), 99),
               fz::ArgumentError);
  CHECK_THROWS(fz::decompress_add(s.data(), s.size(), nullptr, out.data(), 100),
               fz::ArgumentError);
  CHECK_THROWS(fz::decompress_add(s.data(), s.size(), addend.data(), nullptr, 100),
               fz::ArgumentError);
  const std::vector<F16> h(100, F16{0x3C00});
  const Bytes sh = compress_exact(h, p);
  std::vector<F16> hout(100), hadd(100);
  CHECK_THROWS(fz::decompress_add(sh.data(), sh.size(), hadd.data(), hout.data(), 100),
               fz::ArgumentError);
  CHECK_THROWS_LIB(fz::decompress_add(s.data(), s.size() - 1, addend.data(), out.data(), 100));
}

// ------------------------------------------------------------------------------------------------
// One full round-trip case: compress (threads 1,2,3 and pipelined), validate header, decode
// (threads 1,2,3 and pipelined), random-access decode of every chunk, bound check.

template <typename T>
static void roundtrip_case(const std::vector<T>& x, double eb, uint32_t chunk_len,
                           const CaseOpts& o = CaseOpts(),
                           fz::LosslessCodec codec = fz::LosslessCodec::Auto) {
  fz::CompressParams p;
  p.error_bound = eb;
  p.chunk_len = chunk_len;
  p.threads = 1;
  p.lossless_codec = codec;
  const uint64_t n = x.size();
  const Bytes s1 = compress_exact(x, p);

  // Header.
  const fz::StreamInfo info = fz::read_info(s1.data(), s1.size());
  const uint64_t nchunks = (n + chunk_len - 1) / chunk_len;
  CHECK(info.dtype == dtype_of<T>());
  CHECK(info.version == fz::format::kVersion);
  CHECK_MSG(info.lossless_codec == expected_codec(eb, codec),
            fmt("lossless codec %u", static_cast<unsigned>(info.lossless_codec)));
  CHECK(info.count == n);
  CHECK(info.error_bound == eb);
  CHECK(info.chunk_len == chunk_len);
  CHECK_MSG(info.num_chunks == nchunks, fmt("num_chunks %" PRIu64 " want %" PRIu64, info.num_chunks, nchunks));
  CHECK(info.shape == std::vector<uint64_t>{n});
  CHECK(info.total_bytes == s1.size());
  CHECK(info.header_bytes <= info.total_bytes);

  // Determinism across thread counts (byte-identical streams), and the pipelined path.
  if (o.threads_sweep) {
    for (int t : {2, 3, 0}) {
      p.threads = t;
      const Bytes st = compress_exact(x, p);
      CHECK_MSG(st.v == s1.v, fmt("stream differs between threads=1 and threads=%d", t));
    }
    p.threads = 1;
  }
  uint64_t ncalls = 0;
  if (o.pipelined) {
    const fz::Progress prog = [&](uint64_t, uint64_t) { ++ncalls; };
    const Bytes sp = compress_exact(x, p, &prog);
    CHECK_MSG(sp.v == s1.v, "pipelined (progress) stream differs from threads=1 stream");
    CHECK(ncalls == nchunks);
  }

  // Decode.
  const std::vector<T> y = decompress_exact<T>(s1, n, 1);
  check_bound(x, y, eb);
  if (o.threads_sweep) {
    for (int t : {2, 3, 0}) {
      const std::vector<T> yt = decompress_exact<T>(s1, n, t);
      CHECK_MSG(same_bits(y, yt), fmt("decode differs between threads=1 and threads=%d", t));
    }
  }
  if (o.pipelined) {
    ncalls = 0;
    const fz::Progress prog = [&](uint64_t, uint64_t) { ++ncalls; };
    const std::vector<T> yp = decompress_exact<T>(s1, n, 1, &prog);
    CHECK_MSG(same_bits(y, yp), "pipelined decode differs");
    CHECK(ncalls == nchunks);
  }
  if constexpr (std::is_floating_point_v<T>) {
    check_decompress_add(s1, y, o);
    check_recompress_add(s1, y, p, o);
  }

  // Random access into an exact chunk_len buffer: every chunk, or (each call re-validates the
  // whole header and table) a sample of 64 including the first and the last ones.
  if (o.chunks) {
    std::vector<uint64_t> which;
    if (nchunks <= 64) {
      for (uint64_t c = 0; c < nchunks; ++c) which.push_back(c);
    } else {
      for (uint64_t c = 0; c < 8; ++c) which.push_back(c);
      for (uint64_t k = 1; k < 48; ++k) which.push_back(8 + (nchunks - 16) * k / 48);
      for (uint64_t c = nchunks - 8; c < nchunks; ++c) which.push_back(c);
    }
    for (uint64_t c : which) {
      std::vector<T> buf(chunk_len);
      const uint64_t got = fz::decompress_chunk(s1.data(), s1.size(), c, buf.data(), chunk_len);
      const uint64_t want = std::min<uint64_t>(chunk_len, n - c * chunk_len);
      CHECK_MSG(got == want, fmt("chunk %" PRIu64 ": %" PRIu64 " values, want %" PRIu64, c, got, want));
      CHECK_MSG(std::memcmp(buf.data(), y.data() + c * chunk_len, want * sizeof(T)) == 0,
                fmt("decompress_chunk(%" PRIu64 ") differs from decompress", c));
    }
    {
      std::vector<T> buf(chunk_len);
      CHECK_THROWS_INDEX(fz::decompress_chunk(s1.data(), s1.size(), nchunks, buf.data(), chunk_len));
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Test groups.

// 1e-39 is below FLT_MIN and 1e-310 below DBL_MIN (lossless fallback); 1e300 and DBL_MAX clamp the
// float32 bin.
static const double kBounds[] = {0.0,  1e-310, 1e-39, 1e-12, 1e-9, 1e-6, 1e-3, 0.1,
                                 1.0,  1e3,    1e6,   1e300, std::numeric_limits<double>::max()};

template <typename T> static void test_matrix() {
  const size_t sizes[] = {0, 1, 2, 31, 32, 33, 5119, 5120, 5121, 10007};
  size_t cases = 0;
  for (size_t n : sizes) {
    for (int ki = 0; ki < (int)Kind::Count_; ++ki) {
      const Kind k = (Kind)ki;
      const std::vector<T> x = make_data<T>(k, n, 1);
      for (double eb : kBounds) {
        g_ctx = fmt("matrix %s n=%zu kind=%s eb=%g chunk=%u", tname<T>(), n, kind_name(k), eb,
                    fz::kDefaultChunkLen);
        CaseOpts o;
        // Keep the sanitizer run short: the full thread/pipeline sweep on a subset of bounds.
        o.threads_sweep = (eb == 0.0 || eb == 1e-3 || eb == 1e6 || n <= 33);
        o.chunks = o.threads_sweep || eb == 1e-9;
        o.pipelined = o.threads_sweep;
        roundtrip_case(x, eb, fz::kDefaultChunkLen, o);
        ++cases;
      }
    }
  }
  std::printf("  matrix %s: %zu cases\n", tname<T>(), cases);
}

template <typename T> static void test_large(bool quick) {
  const size_t n = quick ? 200003 : 1000003;  // prime
  for (Kind k : {Kind::Smooth, Kind::Noise, Kind::Specials, Kind::RandomBits}) {
    const std::vector<T> x = make_data<T>(k, n, 2);
    for (double eb : {0.0, 1e-4, 1.0}) {
      g_ctx = fmt("large %s n=%zu kind=%s eb=%g", tname<T>(), n, kind_name(k), eb);
      CaseOpts o;
      o.threads_sweep = (k == Kind::Smooth || k == Kind::Specials);
      o.pipelined = (k == Kind::Smooth && eb == 1e-4);
      o.chunks = (k == Kind::Smooth);
      roundtrip_case(x, eb, fz::kDefaultChunkLen, o);
    }
  }
  // Largest chunk length on a large array.
  {
    const std::vector<T> x = make_data<T>(Kind::Smooth, n, 3);
    g_ctx = fmt("large %s n=%zu chunk=65536", tname<T>(), n);
    roundtrip_case(x, 1e-3, fz::kMaxChunkLen);
  }
}

template <typename T> static void test_chunk_lengths() {
  for (uint32_t cl : {32u, 64u, 96u, 5120u, 65536u}) {
    for (size_t n : {(size_t)0, (size_t)1, (size_t)33, (size_t)65541, (size_t)200003}) {
      const bool big = n > 65541;
      if (big && cl != 32u && cl != 65536u) continue;
      for (Kind k : {Kind::Smooth, Kind::Specials, Kind::CodeOverflow, Kind::RandomBits}) {
        if (big && (k == Kind::Specials || k == Kind::CodeOverflow)) continue;
        const std::vector<T> x = make_data<T>(k, n, 4);
        for (double eb : {0.0, 1e-5, 10.0}) {
          if (big && eb != 1e-5) continue;
          g_ctx = fmt("chunk_len %s cl=%u n=%zu kind=%s eb=%g", tname<T>(), cl, n, kind_name(k), eb);
          CaseOpts o;
          o.threads_sweep = eb != 10.0;
          o.pipelined = eb == 1e-5;
          roundtrip_case(x, eb, cl, o);
        }
      }
    }
  }
  // Invalid chunk lengths: ArgumentError from compress.
  const std::vector<T> x = make_data<T>(Kind::Smooth, 1000, 5);
  for (uint32_t cl : {0u, 1u, 16u, 31u, 33u, 48u, 100u, 5121u, 65537u, 65568u, 131072u, 0xFFFFFFFFu,
                      0xFFFFFFE0u}) {
    g_ctx = fmt("invalid chunk_len %s cl=%u", tname<T>(), cl);
    fz::CompressParams p;
    p.error_bound = 1e-3;
    p.chunk_len = cl;
    const size_t cap = fz::max_compressed_size(dtype_of<T>(), x.size(), 32) * 4 + (1u << 16);
    std::vector<uint8_t> dst(cap);
    CHECK_THROWS(fz::compress(x.data(), dtype_of<T>(), x.size(), p, dst.data(), cap),
                 fz::ArgumentError);
    // Same with the pipelined path.
    const fz::Progress prog = [](uint64_t, uint64_t) {};
    CHECK_THROWS(fz::compress(x.data(), dtype_of<T>(), x.size(), p, dst.data(), cap, &prog),
                 fz::ArgumentError);
  }
}

template <typename T> static void test_bad_args() {
  const std::vector<T> x = make_data<T>(Kind::Smooth, 3000, 6);
  const fz::DType dt = dtype_of<T>();
  const size_t cap = fz::max_compressed_size(dt, x.size());
  // Invalid error bounds.
  for (double eb : {-1.0, -1e-300, std::numeric_limits<double>::quiet_NaN(),
                    std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    g_ctx = fmt("invalid eb %s eb=%g", tname<T>(), eb);
    fz::CompressParams p;
    p.error_bound = eb;
    std::vector<uint8_t> dst(cap);
    CHECK_THROWS(fz::compress(x.data(), dt, x.size(), p, dst.data(), cap), fz::ArgumentError);
  }
  // dst capacity below max_compressed_size.
  {
    g_ctx = fmt("small dst_cap %s", tname<T>());
    fz::CompressParams p;
    p.error_bound = 1e-3;
    for (size_t c : {(size_t)0, (size_t)1, cap / 2, cap - 1}) {
      std::vector<uint8_t> dst(c);
      CHECK_THROWS(fz::compress(x.data(), dt, x.size(), p, dst.data(), c), fz::ArgumentError);
    }
  }
  // Decompress into a too small destination.
  {
    g_ctx = fmt("small dst %s", tname<T>());
    fz::CompressParams p;
    p.error_bound = 1e-3;
    const Bytes s = compress_exact(x, p);
    for (uint64_t c : {(uint64_t)0, (uint64_t)1, (uint64_t)x.size() - 1}) {
      std::vector<T> out(c);
      CHECK_THROWS_LIB(fz::decompress(s.data(), s.size(), out.data(), c, 1));
      CHECK_THROWS_LIB(fz::decompress(s.data(), s.size(), out.data(), c, 2));
    }
    // decompress_chunk into less than the chunk's values (one chunk of 3000 values here).
    for (uint64_t c : {(uint64_t)0, (uint64_t)1, (uint64_t)x.size() - 1}) {
      std::vector<T> out(c);
      CHECK_THROWS_LIB(fz::decompress_chunk(s.data(), s.size(), 0, out.data(), c));
    }
    // The last chunk (3000 - 0 = 3000 values here, single chunk): exact room is enough.
    {
      std::vector<T> out(x.size());
      CHECK(fz::decompress_chunk(s.data(), s.size(), 0, out.data(), x.size()) == x.size());
    }
    // Out-of-range chunk index.
    {
      std::vector<T> out(fz::kDefaultChunkLen);
      CHECK_THROWS_INDEX(fz::decompress_chunk(s.data(), s.size(), 1, out.data(), out.size()));
      CHECK_THROWS_INDEX(fz::decompress_chunk(s.data(), s.size(), ~0ull, out.data(), out.size()));
    }
    // Truncated stream and empty input.
    {
      std::vector<T> out(x.size());
      for (size_t len : {(size_t)0, (size_t)1, (size_t)7, s.size() / 2, s.size() - 1}) {
        const Bytes t(s.data(), len);
        CHECK_THROWS(fz::read_info(t.data(), t.size()), fz::StreamError);
        CHECK_THROWS(fz::decompress(t.data(), t.size(), out.data(), out.size(), 1), fz::StreamError);
        CHECK_THROWS(fz::decompress_chunk(t.data(), t.size(), 0, out.data(), out.size()),
                     fz::StreamError);
      }
      CHECK_THROWS(fz::read_info(nullptr, 0), fz::StreamError);
    }
  }
  // Shape whose product differs from count, too many dimensions, product overflow.
  {
    g_ctx = fmt("bad shape %s", tname<T>());
    fz::CompressParams p;
    p.error_bound = 1e-3;
    const size_t cap2 = fz::max_compressed_size(dt, x.size(), p.chunk_len, fz::kMaxDims);
    std::vector<uint8_t> dst(cap2);
    const std::vector<std::vector<uint64_t>> bad = {
        {2, 3}, {3000, 0}, {}, {1500, 2, 2}, {1ull << 32, 1ull << 32, 3000},  // 2^64 wraps to 0
        {3, 1000, 1ull << 63, 2}};                                          // wraps to 3000
    for (const auto& shp : bad) {
      p.shape = shp;
      CHECK_THROWS(fz::compress(x.data(), dt, x.size(), p, dst.data(), cap2), fz::ArgumentError);
    }
    std::vector<uint64_t> many(fz::kMaxDims + 1, 1);
    many[0] = 3000;
    p.shape = many;
    const size_t cap3 = cap2 + 64 * 8;  // generous: the call must fail on ndim, not on capacity
    std::vector<uint8_t> dst3(cap3);
    CHECK_THROWS(fz::compress(x.data(), dt, x.size(), p, dst3.data(), cap3), fz::ArgumentError);
    CHECK_THROWS(fz::max_compressed_size(dt, 10, fz::kDefaultChunkLen, fz::kMaxDims + 1),
                 fz::ArgumentError);
  }
  // Null pointers.
  {
    g_ctx = fmt("null pointers %s", tname<T>());
    fz::CompressParams p;
    p.error_bound = 1e-3;
    std::vector<uint8_t> dst(cap);
    CHECK_THROWS(fz::compress(nullptr, dt, x.size(), p, dst.data(), cap), fz::ArgumentError);
    CHECK_THROWS(fz::compress(x.data(), dt, x.size(), p, nullptr, cap), fz::ArgumentError);
    const Bytes s = compress_exact(x, p);
    CHECK_THROWS(fz::decompress(s.data(), s.size(), nullptr, x.size(), 1), fz::ArgumentError);
    CHECK_THROWS(fz::decompress_chunk(s.data(), s.size(), 0, nullptr, x.size()), fz::ArgumentError);
    CHECK_THROWS(fz::decompress(nullptr, s.size(), nullptr, x.size(), 1), fz::ArgumentError);
  }
}

// max_compressed_size must not wrap around for counts whose worst case does not fit in size_t.
static void test_max_size_overflow() {
  g_ctx = "max_compressed_size overflow";
  for (fz::DType dt : {fz::DType::Float32, fz::DType::Float64}) {
    for (uint64_t n : {1ull << 61, (1ull << 62) + 12345, ~0ull, ~0ull / 8 + 1}) {
      for (uint32_t cl : {32u, 5120u, 65536u}) {
        bool threw = false;
        size_t m = 0;
        try {
          m = fz::max_compressed_size(dt, n, cl);
        } catch (const fz::ArgumentError&) {
          threw = true;
        }
        // Either refuse, or return a value that really bounds count*sizeof(T) (no wrap-around).
        CHECK_MSG(threw || (m / fz::dtype_size(dt) >= n),
                  fmt("max_compressed_size(%s, %llu, %u) wrapped around to %zu", fz::dtype_name(dt),
                      (unsigned long long)n, cl, m));
      }
    }
  }
}

template <typename T> static void test_shape() {
  const std::vector<std::vector<uint64_t>> shapes = {
      {120}, {4, 5, 6}, {1, 120, 1}, {2, 2, 2, 15}, {120, 1, 1, 1, 1, 1, 1, 1}};
  for (const auto& shp : shapes) {
    const std::vector<T> x = make_data<T>(Kind::Smooth, 120, 7);
    g_ctx = fmt("shape %s ndim=%zu", tname<T>(), shp.size());
    fz::CompressParams p;
    p.error_bound = 1e-4;
    p.shape = shp;
    const Bytes s = compress_exact(x, p);
    const fz::StreamInfo info = fz::read_info(s.data(), s.size());
    CHECK(info.shape == shp);
    CHECK(info.count == 120);
    check_bound(x, decompress_exact<T>(s, 120, 2), 1e-4);
  }
  // kMaxDims dimensions.
  {
    g_ctx = fmt("shape %s ndim=kMaxDims", tname<T>());
    std::vector<uint64_t> shp(fz::kMaxDims, 1);
    shp[fz::kMaxDims / 2] = 777;
    const std::vector<T> x = make_data<T>(Kind::Noise, 777, 8);
    fz::CompressParams p;
    p.error_bound = 0.0;
    p.shape = shp;
    const Bytes s = compress_exact(x, p);
    const fz::StreamInfo info = fz::read_info(s.data(), s.size());
    CHECK(info.shape == shp);
    check_bound(x, decompress_exact<T>(s, 777, 1), 0.0);
  }
  // 0-d tensor: empty shape, one value.
  for (double eb : {0.0, 1e-3}) {
    g_ctx = fmt("shape %s 0-d eb=%g", tname<T>(), eb);
    const std::vector<T> x = {from_d<T>(-2.718281828)};
    fz::CompressParams p;
    p.error_bound = eb;
    p.shape = std::vector<uint64_t>{};
    const Bytes s = compress_exact(x, p);
    const fz::StreamInfo info = fz::read_info(s.data(), s.size());
    CHECK(info.shape.empty());
    CHECK(info.count == 1);
    CHECK(info.num_chunks == 1);
    check_bound(x, decompress_exact<T>(s, 1, 1), eb);
  }
  // Zero-size tensors with a shape.
  for (const std::vector<uint64_t>& shp : {std::vector<uint64_t>{0}, std::vector<uint64_t>{3, 0, 5},
                                          std::vector<uint64_t>{0, 0}}) {
    g_ctx = fmt("shape %s zero-size ndim=%zu", tname<T>(), shp.size());
    const std::vector<T> x;
    fz::CompressParams p;
    p.error_bound = 1e-2;
    p.shape = shp;
    const Bytes s = compress_exact(x, p);
    const fz::StreamInfo info = fz::read_info(s.data(), s.size());
    CHECK(info.shape == shp);
    CHECK(info.count == 0);
    CHECK(info.num_chunks == 0);
    std::vector<T> out;
    fz::decompress(s.data(), s.size(), out.data(), 0, 1);
    std::vector<T> one(1);
    fz::decompress(s.data(), s.size(), one.data(), 1, 2);  // more room than needed is fine
  }
}

struct ProgressAbort {
  uint64_t at;
};

// Progress calls of one compress or decompress: with threads <= 1 exactly one per chunk,
// (1, n) .. (n, n) in order; with threads > 1 only the calling thread reports, between its own
// chunks, with an estimate of the work done: done never decreases and never passes total, and
// a call with chunks to code reports at least once.
static void check_progress_calls(const std::vector<std::pair<uint64_t, uint64_t>>& calls,
                                 uint64_t nchunks, int threads, const char* what) {
  if (threads <= 1) {
    CHECK_MSG(calls.size() == nchunks,
              fmt("%s: %zu progress calls, want %" PRIu64, what, calls.size(), nchunks));
    for (size_t i = 0; i < calls.size(); ++i) {
      CHECK_MSG(calls[i].first == i + 1 && calls[i].second == nchunks,
                fmt("%s call %zu = (%" PRIu64 ", %" PRIu64 ")", what, i, calls[i].first,
                    calls[i].second));
    }
    return;
  }
  CHECK_MSG(nchunks == 0 ? calls.empty() : !calls.empty() && calls.size() <= nchunks,
            fmt("%s (threads %d): %zu progress calls for %" PRIu64 " chunks", what, threads,
                calls.size(), nchunks));
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK_MSG(calls[i].second == nchunks && calls[i].first >= 1 && calls[i].first <= nchunks &&
                  (i == 0 || calls[i].first >= calls[i - 1].first),
              fmt("%s (threads %d) call %zu = (%" PRIu64 ", %" PRIu64 ")", what, threads, i,
                  calls[i].first, calls[i].second));
  }
}

template <typename T> static void test_progress() {
  for (size_t n : {(size_t)0, (size_t)1, (size_t)5120, (size_t)5121, (size_t)51200, (size_t)54321}) {
    for (uint32_t cl : {32u, 5120u}) {
      if (cl == 32 && n > 5121) continue;
      const std::vector<T> x = make_data<T>(Kind::Smooth, n, 9);
      const uint64_t nchunks = (n + cl - 1) / cl;
      Bytes single;  // the stream of the one-thread pipelined call
      for (int threads : {1, 3}) {
        g_ctx = fmt("progress %s n=%zu chunk=%u threads=%d", tname<T>(), n, cl, threads);
        fz::CompressParams p;
        p.error_bound = 1e-3;
        p.chunk_len = cl;
        p.threads = threads;
        std::vector<std::pair<uint64_t, uint64_t>> calls;
        const fz::Progress prog = [&](uint64_t done, uint64_t total) {
          calls.emplace_back(done, total);
        };
        const Bytes s = compress_exact(x, p, &prog);
        check_progress_calls(calls, nchunks, threads, "compress");
        if (threads == 1) {
          single = s;
        } else {
          CHECK_MSG(s.v == single.v, "threaded pipelined stream differs from the one-thread stream");
        }
        calls.clear();
        const std::vector<T> y = decompress_exact<T>(s, n, threads, &prog);
        check_bound(x, y, 1e-3);
        check_progress_calls(calls, nchunks, threads, "decompress");

        // An exception thrown by the callback propagates out of compress/decompress unchanged.
        // Threaded calls report an estimate, so they throw at the first report at or past
        // stop_at (the last report may fall short of nchunks: stop_at 1 is the one sure hit).
        for (uint64_t stop_at : {(uint64_t)1, nchunks / 2 + 1, nchunks}) {
          if (nchunks == 0 || (threads > 1 && stop_at != 1)) break;
          uint64_t thrown_at = 0;
          const fz::Progress thrower = [&](uint64_t done, uint64_t) {
            if (done >= stop_at && thrown_at == 0) {
              thrown_at = done;
              throw ProgressAbort{done};
            }
          };
          bool caught = false;
          try {
            p.threads = threads;
            compress_exact(x, p, &thrower);
          } catch (const ProgressAbort& a) {
            caught = (a.at == thrown_at);
          }
          CHECK_MSG(caught, fmt("compress: exception from progress at %" PRIu64 " not propagated", stop_at));
          caught = false;
          thrown_at = 0;
          try {
            decompress_exact<T>(s, n, threads, &thrower);
          } catch (const ProgressAbort& a) {
            caught = (a.at == thrown_at);
          }
          CHECK_MSG(caught, fmt("decompress: exception from progress at %" PRIu64 " not propagated", stop_at));
          // A std::exception subtype too (must not be translated into a StreamError).
          const fz::Progress thrower2 = [&](uint64_t done, uint64_t) {
            if (done >= stop_at) throw std::logic_error("stop");
          };
          caught = false;
          try {
            decompress_exact<T>(s, n, threads, &thrower2);
          } catch (const std::logic_error& e) {
            caught = std::string(e.what()) == "stop" && !dynamic_cast<const fz::ArgumentError*>(&e);
          }
          CHECK_MSG(caught, "decompress: std::logic_error from progress not propagated unchanged");
        }
      }
    }
  }
}

template <typename T> static void test_max_size() {
  // Worst case: incompressible random bits at eb = 0 and every dimension count.
  for (size_t n : {(size_t)0, (size_t)1, (size_t)31, (size_t)33, (size_t)5121, (size_t)70001}) {
    for (uint32_t cl : {32u, 5120u, 65536u}) {
      for (size_t ndim : {(size_t)1, (size_t)3, (size_t)fz::kMaxDims}) {
        g_ctx = fmt("max_size %s n=%zu cl=%u ndim=%zu", tname<T>(), n, cl, ndim);
        const std::vector<T> x = make_data<T>(Kind::RandomBits, n, 10);
        fz::CompressParams p;
        p.error_bound = 0.0;
        p.chunk_len = cl;
        p.threads = 2;
        std::vector<uint64_t> shp(ndim, 1);
        shp[0] = n;
        p.shape = shp;
        const Bytes s = compress_exact(x, p);
        CHECK(s.size() <= fz::max_compressed_size(dtype_of<T>(), n, cl, ndim));
        check_bound(x, decompress_exact<T>(s, n, 2), 0.0);
        // Also with noise at a tiny bound (outliers everywhere).
        p.error_bound = 1e-300;
        const Bytes s2 = compress_exact(x, p);
        check_bound(x, decompress_exact<T>(s2, n, 2), 1e-300);
      }
    }
  }
  // Monotone in count.
  size_t prev = 0;
  for (uint64_t n = 0; n < 300; ++n) {
    const size_t m = fz::max_compressed_size(dtype_of<T>(), n);
    CHECK(m >= prev);
    prev = m;
  }
}

// Decoding in a process with flush-to-zero / denormals-are-zero (e.g. torch.set_flush_denormal)
// must give the same values: the reconstruction T(q)*bin never leaves the normal range. Encoding
// under FTZ/DAZ must still honour the bound measured with IEEE arithmetic.
template <typename T> static void test_ftz_daz() {
#ifdef ZCCL_TEST_HAVE_MXCSR
  const unsigned saved = _mm_getcsr();
  for (Kind k : {Kind::Smooth, Kind::Denormals, Kind::Extremes, Kind::Noise}) {
    for (double eb : {1e-30, 1e-6, 1e-3, 1.0}) {
      if (eb < (double)std::numeric_limits<T>::min()) continue;
      g_ctx = fmt("ftz/daz %s kind=%s eb=%g", tname<T>(), kind_name(k), eb);
      const std::vector<T> x = make_data<T>(k, 5121, 12);
      fz::CompressParams p;
      p.error_bound = eb;
      p.threads = 1;  // the MXCSR setting is per thread; stay on this one
      const Bytes s = compress_exact(x, p);
      const std::vector<T> y = decompress_exact<T>(s, x.size(), 1);
      _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
      const std::vector<T> y_ftz = decompress_exact<T>(s, x.size(), 1);
      const Bytes s_ftz = compress_exact(x, p);
      _mm_setcsr(saved);
      CHECK_MSG(same_bits(y, y_ftz), "decode under FTZ/DAZ differs");
      check_bound(x, decompress_exact<T>(s_ftz, x.size(), 1), eb);
    }
  }
#endif
}

// ------------------------------------------------------------------------------------------------
// Format version 2: half types, constant chunks and repeats, the lossless codec.

// The chunk table's sizes (fzlight_format.h): 0 is a repeat of the constant chunk before.
static std::vector<uint32_t> table_sizes(const Bytes& s) {
  const size_t ndim = s.data()[7];
  uint64_t count;
  uint32_t cl;
  std::memcpy(&count, s.data() + 8, 8);
  std::memcpy(&cl, s.data() + 32, 4);
  const uint64_t nch = count == 0 ? 0 : (count - 1) / cl + 1;
  std::vector<uint32_t> sizes(nch);
  for (uint64_t c = 0; c < nch; ++c) std::memcpy(&sizes[c], s.data() + 48 + 8 * ndim + 8 * c, 4);
  return sizes;
}

static size_t header_bytes_1d(uint64_t nch) { return 48 + 8 + 8 * nch + 4; }

template <typename T> static T nan_with_payload() {
  if constexpr (std::is_same_v<T, float>) return from_bits<float>(0xFFC01234u);
  else if constexpr (std::is_same_v<T, double>) return from_bits<double>(0x7FF0000000001234ull);  // signalling
  else if constexpr (std::is_same_v<T, F16>) return F16{0x7E05};
  else return BF16{0xFFC5};
}
template <typename T> static T infinity_of() { return from_d<T>(std::numeric_limits<double>::infinity()); }

// A constant (or all-zero) tensor of 64 full chunks and a partial one: one constant chunk and 64
// repeats, whatever the thread count: 8 bytes per chunk, a ratio above 1000 for every type.
template <typename T> static void test_constant() {
  const uint32_t cl = fz::kDefaultChunkLen;
  for (size_t n : {static_cast<size_t>(cl) * 64, static_cast<size_t>(cl) * 64 + 77}) {
    const uint64_t nch = (n + cl - 1) / cl;
    for (T v : {from_d<T>(0.0), from_d<T>(-0.0), from_d<T>(3.14159), nan_with_payload<T>(),
                infinity_of<T>()}) {
      const std::vector<T> x(n, v);
      for (double eb : {0.0, 1e-3, 1.0}) {
        g_ctx = fmt("constant %s n=%zu value=0x%llx eb=%g", tname<T>(), n,
                    (unsigned long long)bits_of(v), eb);
        fz::CompressParams p;
        p.error_bound = eb;
        p.chunk_len = cl;
        p.threads = 1;
        const Bytes s = compress_exact(x, p);
        CHECK_MSG(s.size() == header_bytes_1d(nch) + 1 + sizeof(T),
                  fmt("%zu bytes, want header + one constant chunk = %zu", s.size(),
                      header_bytes_1d(nch) + 1 + sizeof(T)));
        const double ratio = static_cast<double>(n * sizeof(T)) / static_cast<double>(s.size());
        CHECK_MSG(ratio >= 1000.0, fmt("ratio %.1f < 1000", ratio));
        const std::vector<uint32_t> sizes = table_sizes(s);
        CHECK(sizes[0] == 1 + sizeof(T));
        for (uint64_t c = 1; c < nch; ++c) CHECK_MSG(sizes[c] == 0, fmt("chunk %" PRIu64 " not a repeat", c));
        for (int t : {2, 3, 0, 7}) {
          p.threads = t;
          CHECK_MSG(compress_exact(x, p).v == s.v, fmt("threads=%d stream differs", t));
        }
        const fz::Progress prog = [](uint64_t, uint64_t) {};
        CHECK_MSG(compress_exact(x, p, &prog).v == s.v, "pipelined stream differs");
        for (int t : {1, 2}) {
          CHECK_MSG(same_bits(decompress_exact<T>(s, n, t), x), fmt("decode threads=%d", t));
        }
        for (uint64_t c : {(uint64_t)0, (uint64_t)1, nch / 2, nch - 1}) {
          std::vector<T> buf(cl);
          const uint64_t got = fz::decompress_chunk(s.data(), s.size(), c, buf.data(), cl);
          CHECK(got == std::min<uint64_t>(cl, n - c * cl));
          for (uint64_t i = 0; i < got; ++i) CHECK(bits_of(buf[i]) == bits_of(v));
        }
      }
    }
  }
}

// Runs of constant chunks (several values, -0.0 apart from 0.0) broken by varied chunks, in
// chunks of 32: the table has a repeat exactly where a constant chunk follows one of the same
// bits, for every thread count (the parallel encoder codes a run's first chunk in full and turns
// it into a repeat when the runs meet) and the pipelined path.
template <typename T> static std::vector<T> const_runs_data(uint64_t seed, uint32_t cl) {
  Rng r(seed);
  const uint64_t nch = 40 + r.below(40);
  const size_t n = static_cast<size_t>(nch - 1) * cl + 1 + r.below(cl);
  std::vector<T> x(n);
  const T levels[] = {from_d<T>(0.0), from_d<T>(-0.0), from_d<T>(2.5), nan_with_payload<T>()};
  for (uint64_t c = 0; c < nch;) {
    const uint64_t run = 1 + r.below(6), kind = r.below(6);
    for (uint64_t k = 0; k < run && c < nch; ++k, ++c) {
      for (size_t i = c * cl; i < std::min<size_t>(n, (c + 1) * cl); ++i) {
        x[i] = kind < 4 ? levels[kind] : from_d<T>(std::sin(static_cast<double>(i) * 0.1) * 3.0);
      }
    }
  }
  return x;
}

template <typename T> static void test_constant_runs() {
  const uint32_t cl = 32;
  for (uint64_t seed : {1, 2, 3, 4}) {
    const std::vector<T> x = const_runs_data<T>(seed, cl);
    const size_t n = x.size();
    const uint64_t nch = (n + cl - 1) / cl;
    std::vector<bool> constant(nch), repeat(nch, false);
    for (uint64_t c = 0; c < nch; ++c) {
      const size_t b = c * cl, e = std::min<size_t>(n, b + cl);
      constant[c] = true;
      for (size_t i = b + 1; i < e; ++i) constant[c] = constant[c] && bits_of(x[i]) == bits_of(x[b]);
      repeat[c] = c > 0 && constant[c] && constant[c - 1] && bits_of(x[b]) == bits_of(x[b - cl]);
    }
    for (double eb : {0.0, 1e-2}) {
      g_ctx = fmt("constant runs %s seed=%" PRIu64 " n=%zu eb=%g", tname<T>(), seed, n, eb);
      fz::CompressParams p;
      p.error_bound = eb;
      p.chunk_len = cl;
      p.threads = 1;
      const Bytes s = compress_exact(x, p);
      const std::vector<uint32_t> sizes = table_sizes(s);
      for (uint64_t c = 0; c < nch; ++c) {
        CHECK_MSG((sizes[c] == 0) == repeat[c], fmt("chunk %" PRIu64 ": size %u, repeat %d", c,
                                                    sizes[c], (int)repeat[c]));
        if (constant[c] && !repeat[c]) CHECK(sizes[c] == 1 + sizeof(T));
      }
      for (int t : {2, 3, 4, 5, 7, 0}) {
        p.threads = t;
        CHECK_MSG(compress_exact(x, p).v == s.v, fmt("threads=%d stream differs", t));
      }
      const fz::Progress prog = [](uint64_t, uint64_t) {};
      CHECK_MSG(compress_exact(x, p, &prog).v == s.v, "pipelined stream differs");
      const std::vector<T> y = decompress_exact<T>(s, n, 2);
      check_bound(x, y, eb);
      CHECK(same_bits(decompress_exact<T>(s, n, 3), y));
      for (uint64_t c = 0; c < nch; ++c) {
        std::vector<T> buf(cl);
        const uint64_t got = fz::decompress_chunk(s.data(), s.size(), c, buf.data(), cl);
        CHECK(std::memcmp(buf.data(), y.data() + c * cl, got * sizeof(T)) == 0);
        if (constant[c]) {
          for (uint64_t i = 0; i < got; ++i) CHECK(bits_of(buf[i]) == bits_of(x[c * cl]));
        }
      }
    }
  }
}

// Values every lossless path must keep bit for bit: NaN payloads (quiet, signalling, negative),
// -0.0, subnormals, +-Inf, the extremes, among smooth values.
template <typename T> static std::vector<T> lossless_specials(size_t n) {
  std::vector<T> x = make_data<T>(Kind::Smooth, n, 21);
  std::vector<T> sp;
  if constexpr (kIsHalf<T>) {
    constexpr bool f16 = std::is_same_v<T, F16>;
    for (uint16_t b : {f16 ? 0x7E01 : 0x7FC1, f16 ? 0x7C01 : 0x7F81, f16 ? 0xFE00 : 0xFFC0, 0x8000,
                       0x0001, f16 ? 0x03FF : 0x007F, f16 ? 0x7C00 : 0x7F80, f16 ? 0xFBFF : 0xFF7F}) {
      sp.push_back(T{static_cast<uint16_t>(b)});
    }
  } else {
    using L = std::numeric_limits<T>;
    sp = {from_bits<T>(bits_of(L::quiet_NaN()) | 5), from_bits<T>(bits_of(L::infinity()) | 1),
          -L::quiet_NaN(), (T)-0.0, L::denorm_min(), L::min() - L::denorm_min(), L::infinity(),
          -L::infinity(), L::max(), L::lowest()};
  }
  for (size_t i = 0; i < n; i += 7) x[i] = sp[(i / 7) % sp.size()];
  return x;
}

// Lossless (eb = 0) streams with each codec: bit-exact for every value; the codec recorded;
// codec 1 only where this build has zstd; a bound > 0 ignores the codec.
template <typename T> static void test_lossless() {
  const bool have = fz::lossless_codec_available(fz::LosslessCodec::ShuffleZstd);
  CHECK(fz::lossless_codec_available(fz::LosslessCodec::None));
  CHECK(fz::lossless_codec_available(fz::LosslessCodec::Auto));
  std::vector<fz::LosslessCodec> codecs = {fz::LosslessCodec::None, fz::LosslessCodec::Auto};
  if (have) codecs.push_back(fz::LosslessCodec::ShuffleZstd);
  const Kind kinds[] = {Kind::Smooth, Kind::Specials, Kind::Denormals, Kind::SignedZeros,
                        Kind::RandomBits, Kind::Steps, Kind::Extremes, Kind::Count_};
  for (fz::LosslessCodec codec : codecs) {
    for (size_t n : {(size_t)1, (size_t)33, (size_t)5121, (size_t)20011}) {
      for (Kind k : kinds) {
        const std::vector<T> x = k == Kind::Count_ ? lossless_specials<T>(n) : make_data<T>(k, n, 22);
        for (uint32_t cl : {32u, 5120u, 65536u}) {
          if (cl == 32 && n > 5121) continue;
          g_ctx = fmt("lossless %s codec=%u n=%zu kind=%s chunk=%u", tname<T>(), (unsigned)codec, n,
                      k == Kind::Count_ ? "specials+payloads" : kind_name(k), cl);
          CaseOpts o;
          o.threads_sweep = o.pipelined = (cl == 5120);
          roundtrip_case(x, 0.0, cl, o, codec);
        }
      }
    }
  }
  // Codec 1 earns its keep on data with repeating bytes; codec None is raw (or constant) chunks.
  for (Kind k : {Kind::Steps, Kind::Ramp, Kind::RandomBits}) {
    const size_t n = 20011;
    const std::vector<T> x = make_data<T>(k, n, 23);
    g_ctx = fmt("lossless sizes %s kind=%s", tname<T>(), kind_name(k));
    fz::CompressParams p;
    p.error_bound = 0.0;
    p.lossless_codec = fz::LosslessCodec::None;
    const Bytes none = compress_exact(x, p);
    if (k == Kind::RandomBits) {  // no constant chunk: every chunk raw
      const uint64_t nch = (n + p.chunk_len - 1) / p.chunk_len;
      CHECK(none.size() == header_bytes_1d(nch) + nch + n * sizeof(T));
    }
    if (have) {
      p.lossless_codec = fz::LosslessCodec::ShuffleZstd;
      const Bytes z = compress_exact(x, p);
      if (k != Kind::RandomBits) {
        CHECK_MSG(z.size() < none.size(), fmt("zstd %zu bytes, raw %zu", z.size(), none.size()));
      }
      CHECK(z.size() <= none.size());  // a chunk zstd cannot shrink stays raw
    }
  }
  // A bound > 0 ignores the codec; an unknown codec is an argument error; without zstd, asking
  // for codec 1 at eb = 0 is one too (Auto falls back to None).
  {
    g_ctx = fmt("lossless args %s", tname<T>());
    const std::vector<T> x = make_data<T>(Kind::Smooth, 3000, 24);
    CaseOpts o;
    roundtrip_case(x, 1e-3, 1024, o, fz::LosslessCodec::ShuffleZstd);
    fz::CompressParams p;
    p.error_bound = 0.0;
    const size_t cap = fz::max_compressed_size(dtype_of<T>(), x.size());
    std::vector<uint8_t> dst(cap);
    for (uint32_t bad : {2u, 7u, 254u, 0xFFFFFFFFu}) {
      p.lossless_codec = static_cast<fz::LosslessCodec>(bad);
      CHECK_THROWS(fz::compress(x.data(), dtype_of<T>(), x.size(), p, dst.data(), cap), fz::ArgumentError);
    }
    if (!have) {
      p.lossless_codec = fz::LosslessCodec::ShuffleZstd;
      CHECK_THROWS(fz::compress(x.data(), dtype_of<T>(), x.size(), p, dst.data(), cap), fz::ArgumentError);
    }
  }
}

// Half types at bounds around their own precision: the reconstruction is rounded to the half type,
// and still every value meets the bound in double (or is stored exactly).
template <typename T> static void test_half_precision_bounds() {
  const double ulp1 = std::is_same_v<T, F16> ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);  // at 1
  for (double scale : {1.0, 100.0, 3e4}) {
    std::vector<T> x = make_data<T>(Kind::Smooth, 10007, 25);
    for (T& v : x) v = from_d<T>(to_d(v) / 100.0 * scale);
    for (double f : {0.25, 0.5, 1.0, 2.0, 10.0, 1000.0}) {
      const double eb = f * ulp1 * scale;
      g_ctx = fmt("half bounds %s scale=%g eb=%g", tname<T>(), scale, eb);
      CaseOpts o;
      o.threads_sweep = o.pipelined = (f == 1.0);
      roundtrip_case(x, eb, 1024, o);
    }
  }
}

// finite_range on half types against a reference computed from the exact values.
template <typename T> static void test_finite_range_half() {
  for (size_t n : {(size_t)0, (size_t)1, (size_t)33, (size_t)4097, (size_t)70001}) {
    for (Kind k : {Kind::Smooth, Kind::Specials, Kind::RandomBits, Kind::Extremes, Kind::Denormals}) {
      const std::vector<T> x = make_data<T>(k, n, 26);
      double lo = 0, hi = 0;
      bool any = false;
      for (T v : x) {
        if (!finite(v)) continue;
        lo = any ? std::min(lo, to_d(v)) : to_d(v);
        hi = any ? std::max(hi, to_d(v)) : to_d(v);
        any = true;
      }
      for (int t : {1, 2, 3, 0}) {
        g_ctx = fmt("finite_range %s n=%zu kind=%s threads=%d", tname<T>(), n, kind_name(k), t);
        const fz::FiniteRange r = fz::finite_range(x.data(), dtype_of<T>(), n, t);
        CHECK(r.any_finite == any);
        if (any) CHECK_MSG(r.min == lo && r.max == hi, fmt("[%.17g, %.17g] want [%.17g, %.17g]", r.min, r.max, lo, hi));
      }
    }
  }
}

// --digest: a hash of the streams and decoded values of a fixed set of inputs, printed so the
// test driver can check that builds with different kernels (scalar, AVX2) and optimisation levels
// produce byte-identical streams and values.
static uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

template <typename T> static uint64_t digest_cases(uint64_t h) {
  for (size_t n : {(size_t)1, (size_t)33, (size_t)5121, (size_t)20011}) {
    for (int ki = 0; ki < (int)Kind::Count_; ++ki) {
      const std::vector<T> x = make_data<T>((Kind)ki, n, 13);
      for (double eb : kBounds) {
        fz::CompressParams p;
        p.error_bound = eb;
        p.threads = 2;
        const Bytes s = compress_exact(x, p);
        const std::vector<T> y = decompress_exact<T>(s, n, 2);
        h = fnv1a(h, s.data(), s.size());
        h = fnv1a(h, y.data(), y.size() * sizeof(T));
      }
    }
  }
  return h;
}

// Version-2 features: lossless streams with each codec, constant runs (repeats).
template <typename T> static uint64_t digest_v2(uint64_t h) {
  auto add = [&](const std::vector<T>& x, const fz::CompressParams& p) {
    const Bytes s = compress_exact(x, p);
    const std::vector<T> y = decompress_exact<T>(s, x.size(), 2);
    h = fnv1a(h, s.data(), s.size());
    h = fnv1a(h, y.data(), y.size() * sizeof(T));
  };
  for (fz::LosslessCodec codec : {fz::LosslessCodec::None, fz::LosslessCodec::Auto}) {
    for (size_t n : {(size_t)33, (size_t)5121, (size_t)20011}) {
      for (Kind k : {Kind::Smooth, Kind::Specials, Kind::RandomBits, Kind::Steps, Kind::Denormals}) {
        fz::CompressParams p;
        p.error_bound = 0.0;
        p.lossless_codec = codec;
        p.threads = 2;
        add(make_data<T>(k, n, 27), p);
      }
      fz::CompressParams p;
      p.lossless_codec = codec;
      add(lossless_specials<T>(n), p);
    }
  }
  for (uint64_t seed : {1, 2}) {
    for (double eb : {0.0, 1e-2}) {
      fz::CompressParams p;
      p.error_bound = eb;
      p.chunk_len = 32;
      p.threads = 3;
      add(const_runs_data<T>(seed, 32), p);
    }
  }
  return h;
}

// finite_range: min/max over finite values, any thread count, serial reference.
template <typename T> static void test_finite_range() {
  const fz::DType dt = dtype_of<T>();
  for (size_t n : {(size_t)0, (size_t)1, (size_t)2, (size_t)33, (size_t)65535, (size_t)65536,
                   (size_t)65537, (size_t)200003}) {
    for (int ki = 0; ki < (int)Kind::Count_; ++ki) {
      const Kind k = (Kind)ki;
      if (n > 65537 && k != Kind::Specials && k != Kind::RandomBits && k != Kind::Smooth) continue;
      const std::vector<T> x = make_data<T>(k, n, 14);
      double lo = 0, hi = 0;
      uint64_t finite = 0;
      for (T v : x) {
        if (!std::isfinite(v)) continue;
        if (finite == 0 || (double)v < lo) lo = (double)v;
        if (finite == 0 || (double)v > hi) hi = (double)v;
        ++finite;
      }
      for (int t : {1, 2, 3, 0}) {
        g_ctx = fmt("finite_range %s n=%zu kind=%s threads=%d", tname<T>(), n, kind_name(k), t);
        const fz::FiniteRange r = fz::finite_range(x.data(), dt, n, t);
        CHECK_MSG(r.any_finite == (finite > 0), fmt("any_finite %d want %d", (int)r.any_finite,
                                                    (int)(finite > 0)));
        CHECK_MSG(r.min == lo && r.max == hi,
                  fmt("range [%.17g, %.17g] want [%.17g, %.17g]", r.min, r.max, lo, hi));
      }
    }
  }
  // Only non-finite values: an empty range.
  {
    g_ctx = fmt("finite_range %s all non-finite", tname<T>());
    const std::vector<T> x = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                              -std::numeric_limits<T>::infinity()};
    const fz::FiniteRange r = fz::finite_range(x.data(), dt, x.size(), 2);
    CHECK(!r.any_finite && r.min == 0.0 && r.max == 0.0);
  }
  g_ctx = fmt("finite_range %s null", tname<T>());
  CHECK(!fz::finite_range(nullptr, dt, 0).any_finite);
  CHECK_THROWS(fz::finite_range(nullptr, dt, 5), fz::ArgumentError);
}

// Odd thread counts give the same stream; a larger destination is written only up to count.
template <typename T> static void test_misc() {
  const std::vector<T> x = make_data<T>(Kind::Specials, 3 * 5120 + 17, 15);
  fz::CompressParams p;
  p.error_bound = 1e-4;
  p.threads = 1;
  const Bytes ref = compress_exact(x, p);
  for (int t : {-1, 4, 7, 64}) {
    g_ctx = fmt("misc %s threads=%d", tname<T>(), t);
    p.threads = t;
    CHECK(compress_exact(x, p).v == ref.v);
    const std::vector<T> y = decompress_exact<T>(ref, x.size(), t);
    check_bound(x, y, 1e-4);
  }
  g_ctx = fmt("misc %s larger destination", tname<T>());
  const T sentinel = (T)-12345.5;
  std::vector<T> big(x.size() + 100, sentinel);
  fz::decompress(ref.data(), ref.size(), big.data(), big.size(), 2);
  for (size_t i = x.size(); i < big.size(); ++i) CHECK(bits_of(big[i]) == bits_of(sentinel));
  std::vector<T> chunk(2 * fz::kDefaultChunkLen, sentinel);
  const uint64_t got = fz::decompress_chunk(ref.data(), ref.size(), 3, chunk.data(), chunk.size());
  CHECK(got == 17);
  for (size_t i = 17; i < chunk.size(); ++i) CHECK(bits_of(chunk[i]) == bits_of(sentinel));
}

// Values around the half-integers of x / bin (the rounding boundaries of the grid of step bin),
// with codes from 1 to ~2^22 and both signs: where the float32 rounding of x * inv_bin and of the
// reconstruction decide whether a value is within eb, so where the AVX2 kernels' shortcut that
// skips the float64 check (fzlight_block.h, kSureLimit) must agree with the check itself.
template <typename T> static std::vector<T> boundary_values(double bin) {
  std::vector<T> x;
  const T inf = std::numeric_limits<T>::infinity();
  for (int e = 0; e <= 22; ++e) {
    for (int r = 0; r < 6; ++r) {
      const double k = std::floor(std::ldexp(1.0 + r / 6.0, e));
      for (double f : {0.5, 0.5 - 0x1p-12, 0.5 + 0x1p-12, 0.5 - 0x1p-11, 0.5 + 0x1p-11,
                       0.5 + 0x1p-10, 0.49, 0.51, 0.0}) {
        const T v = from_d<T>((k + f) * bin);
        for (T w : {v, std::nextafter(v, inf), std::nextafter(v, -inf)}) {
          x.push_back(w);
          x.push_back(-w);
        }
      }
    }
  }
  return x;
}

// Every value of T within `width` steps of the half-integers (k + 0.5) bin, for `keys` codes k
// spread geometrically over [2^8, 2^top], both signs. For float32 (top 21) the shortcut's slack
// |s| 2^-22 is of the order of the bound's margin there; float64 goes up to the code limit.
template <typename T>
static std::vector<T> dense_boundary_values(double bin, int keys, int width, int top = 21) {
  std::vector<T> x;
  const T inf = std::numeric_limits<T>::infinity();
  for (int i = 0; i < keys; ++i) {
    const double k =
        std::floor(std::ldexp(1.0, 8 + ((top - 8) * i) / keys) * (1.0 + (i % 97) / 97.0));
    T lo = static_cast<T>((k + 0.5) * bin), hi = lo;
    for (int j = 0; j < width; ++j) {
      lo = std::nextafter(lo, -inf);
      hi = std::nextafter(hi, inf);
      for (T v : {lo, hi}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
  }
  return x;
}

inline constexpr double kBoundaryBounds[] = {1e-3, 0.37, 2.5e-6, 1.0, 3.0517578125e-5};

template <typename T> static void test_boundaries() {
  auto round_trip_within = [](const std::vector<T>& x, double eb) {
    fz::CompressParams p;
    p.error_bound = eb;
    p.threads = 1;
    check_bound(x, decompress_exact<T>(compress_exact(x, p), x.size(), 1), eb);
  };
  // Bounds so large that Q * bin overflows for values near the type's maximum: those must be
  // stored exactly, never reconstructed as infinity (the shortcut must not skip that check).
  const double top = static_cast<double>(std::numeric_limits<T>::max());
  // (bin = 2 eb (1 - 2^-10): top / bin is 4.6, 5.5, 6.7, 1.25; 1 / bin stays a normal float
  // but for the last.)
  for (double eb : {top / 9.2, top / 11.0, top / 13.4, top / 2.5}) {
    g_ctx = fmt("boundaries %s huge eb=%g", tname<T>(), eb);
    // Mostly zeros, so the chunk is coded (a chunk that does not shrink is stored raw).
    std::vector<T> x(4096, T(0));
    size_t at = 0;
    for (double f : {1.0, 0.999, 0.9, 0.8, 0.75, 0.7, 0.6, 0.55, 0.5, 0.3}) {
      x[at] = static_cast<T>(top * f);
      x[at + 40] = static_cast<T>(-top * f);
      at += 97;
    }
    round_trip_within(x, eb);
  }
  for (double eb : kBoundaryBounds) {
    double bin = 0.0, inv_bin = 0.0;
    CHECK(fz::quantizer_bins(dtype_of<T>(), eb, bin, inv_bin));
    g_ctx = fmt("boundaries %s eb=%g", tname<T>(), eb);
    round_trip_within(boundary_values<T>(bin), eb);
  }
}

// The AVX2 quantiser (with its shortcut past the float64 check) against the scalar one, which
// checks every lane in float64: the same codes and the same lanes stored exactly, densely around
// the grid's rounding boundaries. (In a scalar build both sides are the scalar kernel.)
template <typename T> static void test_sure_shortcut() {
  namespace blk = zccl::fz::block;
  using K = std::conditional_t<std::is_same_v<T, float>, blk::KindF32, blk::KindF64>;
  for (double eb : kBoundaryBounds) {
    g_ctx = fmt("sure shortcut %s eb=%g", tname<T>(), eb);
    blk::Quantizer<T> qz{};
    double bin = 0.0, inv_bin = 0.0;
    CHECK(fz::quantizer_bins(dtype_of<T>(), eb, bin, inv_bin));
    qz.bin = static_cast<T>(bin);
    qz.inv_bin = static_cast<T>(inv_bin);
    qz.eb = eb;
    if constexpr (std::is_same_v<T, float>) {  // float64 has no shortcut: AVX2 against scalar
      qz.sure_path = blk::sure_path_ok(eb, qz.bin, qz.inv_bin);
      CHECK(qz.sure_path);
    }
    std::vector<T> x = dense_boundary_values<T>(bin, 2000, 48, std::is_same_v<T, float> ? 21 : 29);
    x.resize((x.size() + 31) / 32 * 32, T(0));
    uint64_t exact_lanes = 0;
    for (size_t b = 0; b < x.size(); b += 32) {
      int32_t q_fast[32], q_ref[32];
      const uint32_t bad_fast = blk::quantize<K>(x.data() + b, qz, q_fast);
      const uint32_t bad_ref = blk::quantize_scalar<K>(x.data() + b, qz, q_ref);
      CHECK_MSG(bad_fast == bad_ref, fmt("block at %zu: exact lanes %08x, scalar %08x", b,
                                         bad_fast, bad_ref));
      for (int i = 0; i < 32; ++i) {
        if ((bad_ref >> i) & 1u) continue;
        CHECK_MSG(q_fast[i] == q_ref[i], fmt("value %.17g: code %d, scalar %d",
                                            static_cast<double>(x[b + i]), q_fast[i], q_ref[i]));
      }
      exact_lanes += static_cast<uint64_t>(__builtin_popcount(bad_ref));
    }
    if (std::is_same_v<T, float>) CHECK(exact_lanes > 0);  // the scan reaches rejected values
  }
}

template <typename T> static uint64_t digest_boundaries(uint64_t h) {
  for (double eb : kBoundaryBounds) {
    double bin = 0.0, inv_bin = 0.0;
    CHECK(fz::quantizer_bins(dtype_of<T>(), eb, bin, inv_bin));
    const std::vector<T> x = boundary_values<T>(bin);
    fz::CompressParams p;
    p.error_bound = eb;
    const Bytes s = compress_exact(x, p);
    const std::vector<T> y = decompress_exact<T>(s, x.size(), 1);
    h = fnv1a(h, s.data(), s.size());
    h = fnv1a(h, y.data(), y.size() * sizeof(T));
  }
  return h;
}

// fz::crc32c (hardware three-lane rounds, one chain, or a table, by build) against the bitwise
// definition, for every length up to past a few three-lane rounds, at odd offsets, and chained
// through the seed.
static void test_crc32c() {
  g_ctx = "crc32c";
  auto reference = [](const uint8_t* p, size_t n, uint32_t seed) {
    uint32_t c = ~seed;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  std::vector<uint8_t> data(4096 + 8);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (uint8_t& b : data) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  const char* check_input = "123456789";  // the CRC-32C check value
  CHECK(fz::crc32c(reinterpret_cast<const uint8_t*>(check_input), 9) == 0xE3069283u);
  for (size_t off : {size_t{0}, size_t{3}}) {
    for (size_t n = 0; n <= 1600; ++n) {
      const uint8_t* p = data.data() + off;
      CHECK_MSG(fz::crc32c(p, n) == reference(p, n, 0), fmt("length %zu offset %zu", n, off));
    }
  }
  for (size_t n : {size_t{383}, size_t{384}, size_t{385}, size_t{4096}}) {
    const uint32_t whole = fz::crc32c(data.data(), n, 0x1234u);
    for (size_t cut : {size_t{0}, size_t{1}, n / 3, n / 2, n}) {
      CHECK(fz::crc32c(data.data() + cut, n - cut, fz::crc32c(data.data(), cut, 0x1234u)) == whole);
    }
    CHECK(whole == reference(data.data(), n, 0x1234u));
  }
  // Long ranges (the folding path where the CPU has VPCLMULQDQ: rounds of 256 bytes, then 64,
  // 16 and single bytes), at every offset of an 8-byte word.
  std::vector<uint8_t> long_data(70000 + 16);
  for (uint8_t& b : long_data) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  for (size_t off = 0; off < 8; ++off) {
    for (size_t n : {size_t{2048}, size_t{2048 + 64 + 16 + 7}, size_t{65536 + 255}, size_t{70000}}) {
      const uint8_t* p = long_data.data() + off;
      CHECK_MSG(fz::crc32c(p, n, 0x5A5Au) == reference(p, n, 0x5A5Au),
                fmt("length %zu offset %zu", n, off));
    }
  }
}

// The block kernels of this build (scalar, AVX2 plane loops, AVX-512 plane loops or GFNI
// transposes) against the portable scalar ones, for code lengths 0..31 (each must occur), with
// Lorenzo deltas and direct codes: the same planes, nothing written past them, code_length()
// equal to the packers' length, ends_length() to its two-lane bound, and unpacking gives back
// the codes and the carry.
static void test_block_planes() {
  g_ctx = "block_planes";
  namespace blk = fz::block;
  uint64_t state = 0x2545F4914F6CDD1Dull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 11;
  };
  const int64_t limit = static_cast<int64_t>(blk::kCodeLimit<double>);  // |code| at most this
  auto clamp = [limit](int64_t v) { return static_cast<int32_t>(std::clamp(v, -limit, limit)); };
  constexpr uint32_t kSentinel = 0xA5C3E1F7u;
  bool seen[32] = {}, seen_direct[32] = {};
  for (int len = 0; len <= 31; ++len) {
    // Codes spread over +-2^(len-1) around prev: Lorenzo deltas of about len bits. Pattern 0
    // swings between the extremes, 1 moves in the last lane only, the rest are random.
    const int64_t span = len == 0 ? 0 : int64_t{1} << (len - 1);
    for (int pattern = 0; pattern < 40; ++pattern) {
      const int32_t prev = static_cast<int32_t>(next() % 2001) - 1000;
      int32_t q[32];
      for (int i = 0; i < 32; ++i) {
        const int64_t step = span == 0 ? 0 : static_cast<int64_t>(next() % (2 * span)) - span;
        q[i] = pattern == 0   ? clamp(i % 2 == 0 ? -span : span)
               : pattern == 1 ? clamp(prev + (i == 31 ? span : 0))
                              : clamp(prev + step);
      }
      uint32_t fast[34], scalar[34];
      std::fill(std::begin(fast), std::end(fast), kSentinel);
      std::fill(std::begin(scalar), std::end(scalar), kSentinel);
      const int lf = blk::pack(q, prev, reinterpret_cast<uint8_t*>(fast));
      const int ls = blk::pack_scalar(q, prev, reinterpret_cast<uint8_t*>(scalar));
      const std::string what = fmt("span 2^%d pattern %d length %d", len - 1, pattern, ls);
      CHECK_MSG(lf == ls && ls >= 0 && ls <= 31, what);
      CHECK_MSG(blk::code_length(q, prev) == ls && blk::code_length_scalar(q, prev) == ls, what);
      seen[ls] = true;
      CHECK_MSG(std::equal(std::begin(fast), std::end(fast), std::begin(scalar)), what);
      int32_t out_fast[32], out_scalar[32];
      int32_t carry_fast = prev, carry_scalar = prev;
      const auto* planes = reinterpret_cast<const uint8_t*>(scalar);
      blk::unpack_codes(planes, ls, carry_fast, out_fast);
      blk::unpack_codes_scalar(planes, ls, carry_scalar, out_scalar);
      CHECK_MSG(std::equal(out_fast, out_fast + 32, q), what);
      CHECK_MSG(std::equal(out_scalar, out_scalar + 32, q), what);
      CHECK_MSG(carry_fast == q[31] && carry_scalar == q[31], what);

      // The same codes packed directly (a direct chunk's block: no prediction): the build's
      // packer against the scalar one, code_length<false>() against both, and the codes back from
      // either unpacker, with the carry untouched.
      int32_t d[32];
      for (int i = 0; i < 32; ++i) d[i] = q[i] - prev;  // |d| of about len bits (no overflow)
      std::fill(std::begin(fast), std::end(fast), kSentinel);
      std::fill(std::begin(scalar), std::end(scalar), kSentinel);
      const int df = blk::pack<false>(d, 12345, reinterpret_cast<uint8_t*>(fast));
      const int ds = blk::pack_scalar<false>(d, -777, reinterpret_cast<uint8_t*>(scalar));
      const std::string dwhat = "direct " + what + fmt(" direct length %d", ds);
      CHECK_MSG(df == ds && ds >= 0 && ds <= 31, dwhat);
      CHECK_MSG(blk::code_length<false>(d, 5) == ds && blk::code_length_scalar<false>(d, -5) == ds, dwhat);
      // ends_length: the bit length of |d[0]| | |d[31]|, a lower bound of the direct length.
      const uint64_t ends = static_cast<uint64_t>(std::llabs(d[0])) | static_cast<uint64_t>(std::llabs(d[31]));
      const int ends_bits = ends == 0 ? 0 : 64 - __builtin_clzll(ends);
      CHECK_MSG(blk::ends_length(d) == ends_bits && blk::ends_length_scalar(d) == ends_bits, dwhat);
      CHECK_MSG(ends_bits <= ds, dwhat);
      seen_direct[ds] = true;
      CHECK_MSG(std::equal(std::begin(fast), std::end(fast), std::begin(scalar)), dwhat);
      carry_fast = carry_scalar = 99;
      blk::unpack_codes<false>(planes, ds, carry_fast, out_fast);
      blk::unpack_codes_scalar<false>(planes, ds, carry_scalar, out_scalar);
      CHECK_MSG(std::equal(out_fast, out_fast + 32, d), dwhat);
      CHECK_MSG(std::equal(out_scalar, out_scalar + 32, d), dwhat);
      CHECK_MSG(carry_fast == 99 && carry_scalar == 99, dwhat);
      double vf[32], vs[32];
      blk::unpack<fz::block::KindF64, false>(planes, ds, carry_fast, 0.5, vf);
      blk::unpack_scalar<fz::block::KindF64, false>(planes, ds, carry_scalar, 0.5, vs);
      for (int i = 0; i < 32; ++i) CHECK_MSG(vf[i] == 0.5 * d[i] && vs[i] == vf[i], dwhat);
    }
  }
  for (int len = 0; len <= 31; ++len) CHECK_MSG(seen[len], fmt("no block of length %d", len));
  for (int len = 0; len <= 31; ++len) CHECK_MSG(seen_direct[len], fmt("no direct block of length %d", len));
}

// Encoding the same values as float32 and float64: the streams carry their dtype.
static void test_dtype_mismatch() {
  g_ctx = "dtype";
  const std::vector<float> xf = make_data<float>(Kind::Smooth, 100, 11);
  fz::CompressParams p;
  p.error_bound = 1e-3;
  const Bytes s = compress_exact(xf, p);
  const fz::StreamInfo info = fz::read_info(s.data(), s.size());
  CHECK(info.dtype == fz::DType::Float32);
  CHECK(fz::dtype_size(fz::DType::Float32) == 4);
  CHECK(fz::dtype_size(fz::DType::Float64) == 8);
  CHECK(std::string(fz::dtype_name(fz::DType::Float32)).size() > 0);
  CHECK(std::string(fz::dtype_name(fz::DType::Float64)).size() > 0);
  CHECK(fz::default_threads() >= 1);
  // Invalid dtype enum value.
  std::vector<uint8_t> dst(1 << 16);
  CHECK_THROWS(fz::compress(xf.data(), (fz::DType)7, xf.size(), p, dst.data(), dst.size()),
               fz::ArgumentError);
}

// fz::sample_ratio: windows stay inside the buffer (AddressSanitizer watches the exact-size
// vector), the sample keeps to its size, and a whole buffer gives its stream's chunks exactly.
template <class T>
static void test_ratio_sample() {
  g_ctx = "ratio_sample";
  fz::CompressParams p;
  p.error_bound = 1e-3;
  CHECK(fz::sample_ratio(nullptr, dtype_of<T>(), 0, p, 100).values == 0);
  const std::vector<T> one = make_data<T>(Kind::Noise, 10, 1);
  CHECK_THROWS(fz::sample_ratio(one.data(), dtype_of<T>(), one.size(), p, 0), fz::ArgumentError);
  for (const uint64_t count : std::vector<uint64_t>{1, 31, 33, 1025, 5121, 65537, 100003}) {
    const std::vector<T> x = make_data<T>(Kind::Smooth, count, static_cast<uint32_t>(count));
    for (const uint32_t chunk : {32u, 5120u, 65536u}) {
      p.chunk_len = chunk;
      for (const uint64_t max_values : std::vector<uint64_t>{1, 5, 32, 1024, 1025, 8191, 9999,
                                                              count - 1, count, count + 1}) {
        if (max_values == 0) continue;
        const std::string what = fmt("count %llu chunk %u max %llu", (unsigned long long)count,
                                     chunk, (unsigned long long)max_values);
        const fz::RatioSample s = fz::sample_ratio(x.data(), dtype_of<T>(), count, p, max_values);
        CHECK_MSG(s.raw_bytes == s.values * sizeof(T) && s.ratio() > 0.0, what);
        if (count <= max_values) {
          CHECK_MSG(s.values == count, what);
          const Bytes stream = compress_exact(x, p);
          const fz::StreamInfo info = fz::read_info(stream.data(), stream.size());
          const double chunks = static_cast<double>(stream.size() - info.header_bytes) +
                                8.0 * static_cast<double>(count) / chunk;
          CHECK_MSG(s.compressed_bytes == chunks, what);
        } else {
          CHECK_MSG(s.values <= std::max<uint64_t>(max_values, fz::kBlockLen), what);
          CHECK_MSG(s.values >= std::min<uint64_t>(max_values, fz::kBlockLen) / 2, what);
        }
      }
    }
  }
}

#include "fzcodes_tests.h"

// ------------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
  bool quick = false, digest = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--digest") == 0) {
      digest = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--digest]\n", argv[0]);
      return 2;
    }
  }
  if (digest) {
    uint64_t h = 0xCBF29CE484222325ull;
    h = digest_cases<float>(h);
    h = digest_cases<double>(h);
    h = digest_cases<F16>(h);
    h = digest_cases<BF16>(h);
    h = digest_v2<float>(h);
    h = digest_v2<double>(h);
    h = digest_v2<F16>(h);
    h = digest_v2<BF16>(h);
    h = digest_boundaries<float>(h);
    h = digest_boundaries<double>(h);
    h = codes_test::digest<float>(h);
    h = codes_test::digest<double>(h);
    // Which lossless codec the streams used: builds compared must agree on it too.
    const bool zstd = fz::lossless_codec_available(fz::LosslessCodec::ShuffleZstd);
    std::printf("DIGEST %016llx zstd=%d\n", (unsigned long long)h, zstd ? 1 : 0);
    return 0;
  }
  std::printf("lossless codec 1 (zstd) in this build: %s\n",
              fz::lossless_codec_available(fz::LosslessCodec::ShuffleZstd) ? "yes" : "no");
  const auto t0 = std::chrono::steady_clock::now();
  auto step = [&](const char* name, void (*fn)()) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    std::printf("%-28s ok  %.2fs\n", name, s);
    std::fflush(stdout);
  };
  step("dtype", test_dtype_mismatch);
  step("max_size_overflow", test_max_size_overflow);
  step("bad_args<f32>", test_bad_args<float>);
  step("bad_args<f64>", test_bad_args<double>);
  step("shape<f32>", test_shape<float>);
  step("shape<f64>", test_shape<double>);
  step("codes_grid", codes_test::test_grid);
  step("codes_sums<f32>", codes_test::test_sums<float>);
  step("codes_sums<f64>", codes_test::test_sums<double>);
  step("codes_ratio<f32>", codes_test::test_ratio<float>);
  step("codes_ratio<f64>", codes_test::test_ratio<double>);
  step("codes_either_kernels", codes_test::test_either_kernels);
  step("codes_block_kinds<f32>", codes_test::test_block_kinds<float>);
  step("codes_block_kinds<f64>", codes_test::test_block_kinds<double>);
  step("codes_direct_saves<f32>", codes_test::test_direct_saves<float>);
  step("codes_direct_saves<f64>", codes_test::test_direct_saves<double>);
  step("codes_bad_length_bytes<f32>", codes_test::test_bad_length_bytes<float>);
  step("codes_bad_length_bytes<f64>", codes_test::test_bad_length_bytes<double>);
  step("codes_corruption<f32>", codes_test::test_corruption<float>);
  step("codes_corruption<f64>", codes_test::test_corruption<double>);
  step("progress<f32>", test_progress<float>);
  step("progress<f64>", test_progress<double>);
  step("ftz_daz<f32>", test_ftz_daz<float>);
  step("ftz_daz<f64>", test_ftz_daz<double>);
  step("finite_range<f32>", test_finite_range<float>);
  step("finite_range<f64>", test_finite_range<double>);
  step("decompress_add_args", test_decompress_add_args);
  step("recompress_add_args", test_recompress_add_args);
  step("crc32c", test_crc32c);
  step("block_planes", test_block_planes);
  step("sure_shortcut<f32>", test_sure_shortcut<float>);
  step("sure_shortcut<f64>", test_sure_shortcut<double>);
  step("boundaries<f32>", test_boundaries<float>);
  step("boundaries<f64>", test_boundaries<double>);
  step("codes_boundaries<f32>", codes_test::test_boundaries<float>);
  step("codes_boundaries<f64>", codes_test::test_boundaries<double>);
  step("misc<f32>", test_misc<float>);
  step("misc<f64>", test_misc<double>);
  step("max_size<f32>", test_max_size<float>);
  step("max_size<f64>", test_max_size<double>);
  step("matrix<f32>", test_matrix<float>);
  step("matrix<f64>", test_matrix<double>);
  step("chunk_lengths<f32>", test_chunk_lengths<float>);
  step("chunk_lengths<f64>", test_chunk_lengths<double>);
  step("shape<f16>", test_shape<F16>);
  step("shape<bf16>", test_shape<BF16>);
  step("max_size<f16>", test_max_size<F16>);
  step("max_size<bf16>", test_max_size<BF16>);
  step("finite_range<f16>", test_finite_range_half<F16>);
  step("finite_range<bf16>", test_finite_range_half<BF16>);
  step("matrix<f16>", test_matrix<F16>);
  step("matrix<bf16>", test_matrix<BF16>);
  step("chunk_lengths<f16>", test_chunk_lengths<F16>);
  step("chunk_lengths<bf16>", test_chunk_lengths<BF16>);
  step("half_bounds<f16>", test_half_precision_bounds<F16>);
  step("half_bounds<bf16>", test_half_precision_bounds<BF16>);
  step("constant<f32>", test_constant<float>);
  step("constant<f64>", test_constant<double>);
  step("constant<f16>", test_constant<F16>);
  step("constant<bf16>", test_constant<BF16>);
  step("constant_runs<f32>", test_constant_runs<float>);
  step("constant_runs<f64>", test_constant_runs<double>);
  step("constant_runs<f16>", test_constant_runs<F16>);
  step("constant_runs<bf16>", test_constant_runs<BF16>);
  step("lossless<f32>", test_lossless<float>);
  step("lossless<f64>", test_lossless<double>);
  step("lossless<f16>", test_lossless<F16>);
  step("lossless<bf16>", test_lossless<BF16>);
  step("ratio_sample<f32>", test_ratio_sample<float>);
  step("ratio_sample<f64>", test_ratio_sample<double>);
  step("ratio_sample<f16>", test_ratio_sample<F16>);
  step("ratio_sample<bf16>", test_ratio_sample<BF16>);
  if (quick) {
    step("large<f32> (quick)", [] { test_large<float>(true); });
    step("large<f64> (quick)", [] { test_large<double>(true); });
  } else {
    step("large<f32>", [] { test_large<float>(false); });
    step("large<f64>", [] { test_large<double>(false); });
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("core_test: all passed (%llu checks, %.1fs)\n", (unsigned long long)g_checks, s);
  return 0;
}
