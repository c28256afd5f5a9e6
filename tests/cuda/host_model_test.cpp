// CPU checks of the GPU codec's __host__ __device__ pieces (no CUDA needed; built with g++):
//
//   1. crc32c_combine.h: tables, slicing-by-4 update, x^(8n), combine, against crc32c.cpp;
//      and an emulation of the thread-block CRC (slice plan + the warp/cross-warp fold tree of
//      cuszp_kernels.cuh's cta_crc32c) over many lengths and alignments.
//   2. cuszp_lane.h: the warp bit transpose (emulated lane by lane), the quantiser of every
//      storage kind against fzlight_block.h's scalar quantisers (quantize_one, quantize_one_half),
//      and the device's integer bfloat16 rounding against float_to_bf16_rne.
//   3. Host models of encode_kernel's decomposition (constant/repeat detection by tiles; tiles
//      of kWarps warps, one 32-value block per warp, warp summaries carried across tiles,
//      effective codes, bit planes from the transpose, outliers ranked by popcount; every block
//      sized both ways, encoded (Lorenzo deltas) and direct (the codes, 0 for outliers and
//      padding); one scan of both kinds' bitmap bytes, one byte per thread, ranking length
//      bytes; ChunkPlan::settle's choice, direct only when its length bytes and planes are
//      fewer) and of encode_staged_kernel's passes A, S1, C, S2 and D, that must reproduce
//      fz::compress's chunks byte for byte (format version 3; float32, float64, float16,
//      bfloat16; smooth, random, constant, zero-run, step, special, and noise fields, which give
//      direct chunks; the run asserts that the models wrote encoded and direct chunks, so the
//      comparison cannot pass vacuously), and whose chunk CRCs (by the emulated block CRC; a
//      repeat's is its constant chunk's) must match the stream's table.
//   4. A host model of parse_kernel + decode_kernel (every check in the kernels' order with their
//      error codes, versions 1, 2 and 3: the v1 and v2 code-length layouts, constant chunks,
//      repeats, direct chunks (mode 4, version 3 only: fixed part 5 bytes, codes without prefix
//      sums), per-tile block totals, planes -> magnitudes by the transpose, outlier bitmap ranks)
//      that must decode every stream as fz::decompress, version-2 and version-1 copies
//      (stream_tools.h's to_v2 / to_v1, direct chunks re-encoded) included, and the real streams
//      of tests/data/format_v1 and format_v2 as their old decoders did; and, on thousands of
//      mutated v3/v2/v1 streams of every dtype (mutations of direct chunks counted), reject
//      exactly when fz::decompress throws and otherwise decode the same bits. Codec-1 streams:
//      LosslessCodecOnHost. A version-2 or version-1 stream holding mode 4: BadChunkMode.
//
// Not modelled: the kernels' kR blocks per warp (the models take one), the decoder's staged copy
// of a chunk, the look-back, and anything about timing or memory ordering on the device.
//
// Exit status 0 when everything holds; prints the first failures otherwise.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "crc32c.h"
#include "crc32c_combine.h"
#include "cuszp.h"  // the Error codes (declarations only: nothing of cuszp.cu is linked)
#include "cuszp_lane.h"
#include "fzlight.h"
#include "fzlight_block.h"
#include "fzlight_format.h"
#include "stream_tools.h"

namespace crc = zccl::fz::crc;
namespace lane = zccl::gpu::lane;
namespace fmt = zccl::fz::format;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    if (++failures <= 20) std::printf("FAIL: %s\n", what.c_str());
  }
}

crc::Tables make_tables() {
  crc::Tables t{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t.t[k][i] = crc::table_entry(k, i);
  }
  return t;
}

const crc::Tables kTab = make_tables();

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

uint32_t crc_std(const uint8_t* p, size_t n) { return ~crc::update(~0u, p, 0, n, kTab); }

// Emulation of kern::cta_crc32c for `threads` threads (warps of 32, kWarps = threads / 32).
uint32_t emulated_block_crc(const uint8_t* p, uint64_t n, unsigned threads, int min_log2) {
  if (n == 0) return 0;
  const crc::SlicePlan plan = crc::plan_slices(n, threads, min_log2);
  std::vector<uint32_t> v(threads);
  for (unsigned t = 0; t < threads; ++t) {
    const crc::Slice s = crc::slice_of(plan, t);
    v[t] = s.end > s.begin ? crc::update(s.first ? ~0u : 0u, p, s.begin, s.end, kTab) : 0u;
  }
  const unsigned warps = threads / 32;
  std::vector<uint32_t> warp_result(warps);
  for (unsigned w = 0; w < warps; ++w) {
    uint32_t* l = v.data() + 32 * w;
    for (int k = 0; k < 5; ++k) {
      const unsigned o = 1u << k;
      std::vector<uint32_t> right(32);
      for (unsigned x = 0; x < 32; ++x) right[x] = x + o < 32 ? l[x + o] : l[x];  // shfl_down
      for (unsigned x = 0; x < 32; ++x) {
        if ((x & ((2u << k) - 1u)) == 0) l[x] = crc::fold(l[x], right[x], plan, k, crc::kXPow2Host);
      }
    }
    warp_result[w] = l[0];
  }
  std::vector<uint32_t> l(32, 0);
  for (unsigned w = 0; w < warps; ++w) l[w] = warp_result[w];
  for (int k = 0; (1u << k) < warps; ++k) {
    const unsigned o = 1u << k;
    std::vector<uint32_t> right(32);
    for (unsigned x = 0; x < 32; ++x) right[x] = x + o < 32 ? l[x + o] : l[x];
    for (unsigned x = 0; x < 32; ++x) {
      if ((x & ((2u << k) - 1u)) == 0) l[x] = crc::fold(l[x], right[x], plan, 5 + k, crc::kXPow2Host);
    }
  }
  return ~l[0];
}

void test_crc(std::mt19937_64& rng) {
  // Byte table = the classic one; update (slicing-by-4, any alignment) = crc32c.cpp.
  const std::vector<uint8_t> buf = random_bytes(rng, 70000);
  for (size_t off = 0; off < 4; ++off) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{7}, size_t{64},
                     size_t{1000}, size_t{65537}}) {
      expect(crc_std(buf.data() + off, n) == zccl::fz::crc32c(buf.data() + off, n),
             "slicing-by-4 crc off=" + std::to_string(off) + " n=" + std::to_string(n));
    }
  }
  // x^(8n) by the table = n zero bytes bit by bit.
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 7ull, 100ull, 4095ull, 65536ull}) {
    const uint32_t v = static_cast<uint32_t>(rng());
    expect(crc::shift_bytes(v, n, crc::kXPow2Host) == crc::shift_bits(v, static_cast<int>(8 * n)),
           "shift_bytes n=" + std::to_string(n));
  }
  expect(crc::xpow2_table_ok(), "x^(2^j) table");
  // Combine operator.
  for (int it = 0; it < 300; ++it) {
    const size_t n = rng() % 5000, cut = n == 0 ? 0 : rng() % (n + 1);
    const std::vector<uint8_t> d = random_bytes(rng, n);
    const uint32_t whole = zccl::fz::crc32c(d.data(), n);
    const uint32_t a = zccl::fz::crc32c(d.data(), cut), b = zccl::fz::crc32c(d.data() + cut, n - cut);
    expect(crc::combine(a, b, n - cut, crc::kXPow2Host) == whole, "combine n=" + std::to_string(n));
  }
  // Huge shifts use the period-31 indexing.
  expect(crc::shift_bytes(0x12345678u, uint64_t{1} << 40, crc::kXPow2Host) ==
             crc::mulmod(0x12345678u, crc::xpow2_slow(43 % 31)),
         "shift by 2^40 bytes");
  // Block CRC emulation: lengths around every slice/thread boundary, all alignments.
  std::vector<uint64_t> lengths = {1, 2, 3, 4, 5, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1000,
                                   8191, 8192, 8193, 16384, 20481, 40961, 65535, 65536, 65537};
  for (int it = 0; it < 40; ++it) lengths.push_back(1 + rng() % 69000);
  for (uint64_t n : lengths) {
    for (size_t off = 0; off < 4; ++off) {
      for (unsigned threads : {256u, 64u, 1024u}) {
        expect(emulated_block_crc(buf.data() + off, n, threads, 5) ==
                   zccl::fz::crc32c(buf.data() + off, n),
               "block crc n=" + std::to_string(n) + " off=" + std::to_string(off) +
                   " threads=" + std::to_string(threads));
      }
    }
  }
  // Large enough to need slices of 2^k > 32 bytes with 256 threads, and more than 31 levels of j.
  const std::vector<uint8_t> big = random_bytes(rng, (1u << 22) + 123);
  expect(emulated_block_crc(big.data(), big.size(), 256, 5) == zccl::fz::crc32c(big.data(), big.size()),
         "block crc 4 MiB");
}

// ------------------------------------------------------------------------------------------

std::vector<uint32_t> emulated_transpose(std::vector<uint32_t> x) {
  for (int s = 16; s > 0; s >>= 1) {
    std::vector<uint32_t> y(32);
    for (unsigned l = 0; l < 32; ++l) {
      y[l] = lane::transpose_stage(x[l], x[l ^ s], lane::transpose_keep(l, s), lane::transpose_rot(l, s));
    }
    x = y;
  }
  return x;
}

void test_transpose(std::mt19937_64& rng) {
  for (int it = 0; it < 200; ++it) {
    std::vector<uint32_t> x(32);
    for (auto& v : x) v = static_cast<uint32_t>(rng()) >> (rng() % 32);
    const std::vector<uint32_t> t = emulated_transpose(x);
    bool ok = true;
    for (unsigned r = 0; r < 32; ++r) {
      for (unsigned c = 0; c < 32; ++c) ok = ok && (((x[r] >> c) & 1u) == ((t[c] >> r) & 1u));
    }
    expect(ok, "transpose");
    expect(emulated_transpose(t) == x, "transpose is an involution");
  }
}

template <class T>
void test_quantize(std::mt19937_64& rng) {
  using zccl::fz::block::Quantizer;
  for (double eb : {1e-30, 1e-6, 1e-3, 0.37, 1.0, 1e5, 1e30}) {
    const double b = std::min(2.0 * eb * (1.0 - 1.0 / 1024.0), static_cast<double>(std::numeric_limits<T>::max()));
    Quantizer<T> qz{static_cast<T>(b), 0, eb};
    qz.inv_bin = static_cast<T>(1.0 / static_cast<double>(qz.bin));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int it = 0; it < 20000; ++it) {
      T x;
      switch (it % 5) {
        case 0: x = static_cast<T>(u(rng) * eb * 1e3); break;
        case 1: x = static_cast<T>(u(rng) * eb * 2.2e9); break;  // near the code limit
        case 2: x = static_cast<T>(std::ldexp(u(rng), static_cast<int>(rng() % 200) - 100)); break;
        case 3: {
          const uint64_t bits = rng();
          std::memcpy(&x, &bits, sizeof(T));  // anything, NaN and Inf included
          break;
        }
        default: x = static_cast<T>(std::nearbyint(u(rng) * 1e4) * qz.bin + qz.bin / 2); break;  // ties
      }
      int32_t q_cpu = 0, q_gpu = 0;
      const bool ok_cpu = zccl::fz::block::quantize_one(x, qz, q_cpu);
      const bool ok_gpu = lane::quantize<T>(x, qz.inv_bin, qz.bin, eb, q_gpu);
      expect(ok_cpu == ok_gpu && (!ok_cpu || q_cpu == q_gpu), "quantize eb=" + std::to_string(eb));
    }
  }
}

// The half kinds' quantiser against fzlight_block.h's quantize_one_half, and the device's
// bfloat16 rounding (integer) against the CPU's.
template <class K, class CpuKind>
void test_quantize_half(std::mt19937_64& rng) {
  using zccl::fz::block::Quantizer;
  for (double eb : {1.2e-38, 1e-6, 1e-3, 0.37, 1.0, 1e3, 1e30}) {
    const double b = std::min(2.0 * eb * (1.0 - 1.0 / 1024.0), static_cast<double>(std::numeric_limits<float>::max()));
    Quantizer<float> qz{static_cast<float>(b), 0, eb};
    qz.inv_bin = static_cast<float>(1.0 / static_cast<double>(qz.bin));
    for (int it = 0; it < 20000; ++it) {
      uint16_t x = static_cast<uint16_t>(rng());
      if (it % 3 == 0) x = CpuKind::narrow(static_cast<float>(std::ldexp(static_cast<double>(rng() % 2001) - 1000.0, -7)));
      int32_t q_cpu = 0, q_gpu = 0;
      const bool ok_cpu = zccl::fz::block::quantize_one_half<CpuKind>(x, qz, q_cpu);
      const bool ok_gpu = lane::quantize_bits<K>(x, qz.inv_bin, qz.bin, eb, q_gpu);
      expect(ok_cpu == ok_gpu && (!ok_cpu || q_cpu == q_gpu), "half quantize eb=" + std::to_string(eb));
      if (ok_gpu) {
        expect(lane::reconstruct_bits<K>(q_gpu, qz.bin) == CpuKind::narrow(static_cast<float>(q_cpu) * qz.bin),
               "half reconstruction");
      }
    }
  }
  for (int it = 0; it < 200000; ++it) {
    uint32_t f = static_cast<uint32_t>(rng());
    if (it % 4 == 0) f &= 0x807FFFFFu;  // subnormals
    if ((f & 0x7FFFFFFFu) > 0x7F800000u) continue;  // NaN: never narrowed by the codec
    float v;
    std::memcpy(&v, &f, 4);
    expect(lane::bf16_round_bits(f) == zccl::fz::block::float_to_bf16_rne(v), "bf16 rounding");
  }
}

// ------------------------------------------------------------------------------------------
// Host model of encode_kernel (see cuszp_kernels.cuh): the same decomposition, lane by lane and
// thread by thread, for every storage kind K (float, double, lane::Half, lane::BFloat16).

constexpr int kWarps = 8;
constexpr unsigned kThreads = 32 * kWarps;
using Err = zccl::gpu::Error;

template <class K>
using S_of = typename lane::Kind<K>::S;
template <class K>
using C_of = typename lane::Kind<K>::C;

template <class C>
struct ModelQuantizer {
  C bin = 0, inv_bin = 0;
  double eb = 0;
  bool lossy = false;
};

template <class C>
ModelQuantizer<C> model_quantizer(double eb) {
  ModelQuantizer<C> m;
  m.eb = eb;
  if (!(eb >= static_cast<double>(std::numeric_limits<C>::min()))) return m;
  const double b = std::min(2.0 * eb * (1.0 - 1.0 / 1024.0), static_cast<double>(std::numeric_limits<C>::max()));
  m.bin = static_cast<C>(b);
  m.inv_bin = static_cast<C>(1.0 / static_cast<double>(m.bin));
  m.lossy = true;
  return m;
}

struct Summary {
  bool has_good = false;
  int32_t last = 0;
  uint32_t outliers = 0;
};

// Code length of 32 magnitudes (the warp OR's bit length).
uint8_t length_of(const uint32_t* mag) {
  uint32_t any = 0;
  for (unsigned l = 0; l < 32; ++l) any |= mag[l];
  return static_cast<uint8_t>(any == 0 ? 0 : 32 - __builtin_clz(any));
}

uint32_t magnitude(int32_t d) { return d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d); }

// One pass of encode_pass; returns the outlier count. Sizing (!kWrite): code lengths into lens
// (encoded chunk: Lorenzo deltas of effective codes) and dlens (direct chunk: the codes, 0 for
// outliers and padding), q_start. kWrite: the planes of the chunk kind `direct` names at
// out + planes_at and the outliers after them (sizes from that kind's lengths / totals).
template <class K, bool kWrite>
uint32_t model_pass(const S_of<K>* x, uint32_t m, const ModelQuantizer<C_of<K>>& qz, std::vector<uint8_t>& lens,
                    std::vector<uint8_t>& dlens, int32_t& q_start, uint8_t* out, size_t planes_at,
                    uint32_t payload_total, uint32_t n_out_total, bool direct) {
  using S = S_of<K>;
  const uint32_t nb = (m + 31) / 32;
  const std::vector<uint8_t>& wlens = direct ? dlens : lens;  // the written kind's
  int32_t carry_code = 0;
  uint32_t carry_out = 0, carry_payload = 0;
  const size_t idx_at = planes_at + payload_total, val_at = idx_at + 2 * size_t{n_out_total};
  for (uint32_t t = 0; t < (nb + kWarps - 1) / kWarps; ++t) {
    int32_t q[kWarps][32] = {};
    bool good[kWarps][32] = {}, bad[kWarps][32] = {};
    uint32_t gmask[kWarps] = {}, omask[kWarps] = {};
    Summary sum[kWarps];
    for (int w = 0; w < kWarps; ++w) {
      const uint32_t b = t * kWarps + w;
      for (unsigned l = 0; l < 32; ++l) {
        const uint32_t i = b * 32 + l;
        const bool valid = b < nb && i < m;
        good[w][l] = valid && lane::quantize_bits<K>(x[i], qz.inv_bin, qz.bin, qz.eb, q[w][l]);
        bad[w][l] = valid && !good[w][l];
        gmask[w] |= uint32_t{good[w][l]} << l;
        omask[w] |= uint32_t{bad[w][l]} << l;
        expect(good[w][l] || q[w][l] == 0, "quantize_bits leaves code 0 for a value it refuses");
      }
      sum[w] = {gmask[w] != 0, gmask[w] != 0 ? q[w][31 - __builtin_clz(gmask[w])] : q[w][0],
                static_cast<uint32_t>(__builtin_popcount(omask[w]))};
    }
    // "__syncthreads": every warp reads all summaries.
    const int32_t tile_carry_code = carry_code;
    const uint32_t tile_carry_out = carry_out, tile_carry_payload = carry_payload;
    for (int w = 0; w < kWarps; ++w) {
      const uint32_t b = t * kWarps + w;
      if (b >= nb) continue;
      int32_t prev = tile_carry_code;
      uint32_t out_before = tile_carry_out, pay_before = tile_carry_payload;
      for (int k = 0; k < w; ++k) {
        if (sum[k].has_good) prev = sum[k].last;
        out_before += sum[k].outliers;
        if (kWrite) pay_before += lane::block_bytes(wlens[t * kWarps + k]);
      }
      int32_t e[32];
      for (unsigned l = 0; l < 32; ++l) {
        const uint32_t upto = gmask[w] & ((2u << l) - 1u);
        e[l] = upto != 0 ? q[w][31 - __builtin_clz(upto)] : prev;
      }
      uint32_t mag[32], dmag[32], sign = 0, dsign = 0;
      for (unsigned l = 0; l < 32; ++l) {
        const int32_t pred = l == 0 ? (b == 0 ? e[0] : prev) : e[l - 1];
        const int32_t d = e[l] - pred;
        mag[l] = magnitude(d);
        sign |= uint32_t{d < 0} << l;
        dmag[l] = magnitude(q[w][l]);  // the kernel's direct code: q, 0 unless it quantised
        dsign |= uint32_t{q[w][l] < 0} << l;
      }
      if (!kWrite) {
        lens[b] = length_of(mag);
        dlens[b] = length_of(dmag);
        if (b == 0) q_start = e[0];
      } else {
        const uint32_t len = length_of(direct ? dmag : mag);
        expect(len == wlens[b], "write pass recomputes the sized code length");
        const std::vector<uint32_t> planes =
            emulated_transpose(direct ? std::vector<uint32_t>(dmag, dmag + 32) : std::vector<uint32_t>(mag, mag + 32));
        if (len != 0) {
          uint8_t* wp = out + planes_at + pay_before;
          fmt::store<uint32_t>(wp, direct ? dsign : sign);
          for (uint32_t l = 0; l < len; ++l) fmt::store<uint32_t>(wp + 4 + 4 * l, planes[l]);
        }
        for (unsigned l = 0; l < 32; ++l) {
          if (!bad[w][l]) continue;
          const uint32_t k = out_before + __builtin_popcount(omask[w] & ((1u << l) - 1u));
          fmt::store<uint16_t>(out + idx_at + 2 * size_t{k}, static_cast<uint16_t>(b * 32 + l));
          std::memcpy(out + val_at + size_t{k} * sizeof(S), &x[b * 32 + l], sizeof(S));
        }
      }
    }
    for (int k = 0; k < kWarps; ++k) {
      if (sum[k].has_good) carry_code = sum[k].last;
      carry_out += sum[k].outliers;
      if (kWrite && t * kWarps + k < nb) carry_payload += lane::block_bytes(wlens[t * kWarps + k]);
    }
  }
  return carry_out;
}

// cta_all_equal: tiles of kThreads values, stop at the first tile with a difference.
template <class S>
bool model_all_equal(const S* x, uint32_t n, S v) {
  for (uint32_t base = 0; base < n; base += kThreads) {
    bool any = false;
    for (unsigned t = 0; t < kThreads; ++t) any = any || (base + t < n && std::memcmp(&x[base + t], &v, sizeof(S)) != 0);
    if (any) return false;
  }
  return true;
}

// Exclusive scan over kThreads thread values (cta_exclusive_scan, one word of
// cta_exclusive_scan2); *total gets the sum.
std::vector<uint64_t> model_exclusive_scan(const std::vector<uint64_t>& v, uint64_t* total) {
  std::vector<uint64_t> out(v.size());
  uint64_t run = 0;
  for (size_t t = 0; t < v.size(); ++t) {
    out[t] = run;
    run += v[t];
  }
  *total = run;
  return out;
}

// ChunkPlan::settle's choice (fzlight.cpp's direct_wins): direct when its code-length bytes and
// planes are fewer than the encoded chunk's; encoded on a tie.
bool model_direct_wins(uint64_t encoded_varying, uint64_t direct_varying) { return direct_varying < encoded_varying; }

// What the encoders decide for a chunk: its kind, the chosen kind's bitmap bytes and length-byte
// ranks per thread, its nonzero blocks and payload, the outliers.
struct ModelSizing {
  bool direct = false;
  uint32_t n_out = 0, payload = 0, nonzero = 0;
  std::vector<uint32_t> my_byte = std::vector<uint32_t>(kThreads, 0), my_rank = std::vector<uint32_t>(kThreads, 0);
  uint64_t enc_varying = 0, dir_varying = 0;  // code-length bytes + planes of either kind
};

// Host model of encode_staged_kernel's encoded/direct path (cuszp_encode_staged.cuh): passes A,
// S1, C, S2 and D as the kernel runs them, warp by warp and thread by thread. Fills lens, dlens,
// q_start and the sizing; when out is given, the chunk's bytes from the bitmap on (the caller
// writes the fixed fields).
constexpr int32_t kNoCode = std::numeric_limits<int32_t>::min();

// staged_lorenzo for the 32 lanes of block b: effective codes e and Lorenzo deltas d.
void model_staged_lorenzo(const int32_t* code, int32_t enter, uint32_t b, int32_t* e, int32_t* d) {
  uint32_t gmask = 0;
  for (unsigned l = 0; l < 32; ++l) gmask |= uint32_t{code[l] != kNoCode} << l;
  for (unsigned l = 0; l < 32; ++l) {
    const uint32_t upto = gmask & ((2u << l) - 1u);
    e[l] = upto != 0 ? code[31 - __builtin_clz(upto)] : enter;
  }
  for (unsigned l = 0; l < 32; ++l) d[l] = e[l] - (l == 0 ? (b == 0 ? e[0] : enter) : e[l - 1]);
}

template <class K>
void model_staged(const S_of<K>* x, uint32_t m, const ModelQuantizer<C_of<K>>& qz, std::vector<uint8_t>& lens,
                  std::vector<uint8_t>& dlens, int32_t& q_start, ModelSizing& z, uint8_t* out) {
  using S = S_of<K>;
  const uint32_t nb = (m + 31) / 32;
  const uint32_t bm = lane::bitmap_bytes(nb);
  std::vector<int32_t> codes(size_t{nb} * 32), carry(nb);
  std::vector<uint32_t> omask(nb), pay_off(nb), out_off(nb);
  // A: codes (kNoCode for an outlier or padding), each block's last quantised code.
  for (uint32_t b = 0; b < nb; ++b) {
    uint32_t gmask = 0;
    int32_t q[32] = {};
    for (unsigned l = 0; l < 32; ++l) {
      const uint32_t i = b * 32 + l;
      const bool good = i < m && lane::quantize_bits<K>(x[i], qz.inv_bin, qz.bin, qz.eb, q[l]);
      codes[i] = good ? q[l] : kNoCode;
      gmask |= uint32_t{good} << l;
    }
    carry[b] = gmask != 0 ? q[31 - __builtin_clz(gmask)] : kNoCode;
  }
  // S1: threads take runs of ceil(nb / kThreads) blocks; "latest wins" scan over the threads.
  {
    const uint32_t per = (nb + kThreads - 1) / kThreads;
    std::vector<int32_t> mine(kThreads, kNoCode);
    for (unsigned t = 0; t < kThreads; ++t) {
      const uint32_t lo = std::min(nb, t * per), hi = std::min(nb, lo + per);
      for (uint32_t b = lo; b < hi; ++b) {
        if (carry[b] != kNoCode) mine[t] = carry[b];
      }
    }
    int32_t before = kNoCode;
    for (unsigned t = 0; t < kThreads; ++t) {
      const uint32_t lo = std::min(nb, t * per), hi = std::min(nb, lo + per);
      int32_t run = before == kNoCode ? 0 : before;
      for (uint32_t b = lo; b < hi; ++b) {
        const int32_t last = carry[b];
        carry[b] = run;
        if (last != kNoCode) run = last;
      }
      if (mine[t] != kNoCode) before = mine[t];
    }
  }
  // C: both code lengths, outlier masks, q_start; the codes stay.
  for (uint32_t b = 0; b < nb; ++b) {
    int32_t e[32], d[32];
    model_staged_lorenzo(&codes[b * 32], carry[b], b, e, d);
    uint32_t mag[32], dmag[32], gmask = 0;
    for (unsigned l = 0; l < 32; ++l) {
      const int32_t code = codes[b * 32 + l];
      mag[l] = magnitude(d[l]);
      dmag[l] = magnitude(code == kNoCode ? 0 : code);
      gmask |= uint32_t{code != kNoCode} << l;
    }
    lens[b] = length_of(mag);
    dlens[b] = length_of(dmag);
    const uint32_t left = m - 32 * b;
    omask[b] = ~gmask & (left >= 32 ? ~0u : (1u << left) - 1u);
    if (b == 0) q_start = e[0];
  }
  // S2: thread j owns bitmap byte j; one scan of the encoded word (payload | outliers << 24 |
  // nonzero << 48) and the direct word (payload | nonzero << 32); the choice; the chosen kind's
  // per-block offsets.
  std::vector<uint64_t> enc(kThreads, 0), dir(kThreads, 0);
  std::vector<uint32_t> enc_byte(kThreads, 0), dir_byte(kThreads, 0);
  for (unsigned j = 0; j < kThreads && j < bm; ++j) {
    for (uint32_t k = 0; k < 8 && 8 * j + k < nb; ++k) {
      const uint32_t b = 8 * j + k;
      if (lens[b] != 0) enc_byte[j] |= 1u << k;
      if (dlens[b] != 0) dir_byte[j] |= 1u << k;
      enc[j] += lane::block_bytes(lens[b]) | static_cast<uint64_t>(__builtin_popcount(omask[b])) << 24;
      dir[j] += lane::block_bytes(dlens[b]);
    }
    enc[j] |= static_cast<uint64_t>(__builtin_popcount(enc_byte[j])) << 48;
    dir[j] |= static_cast<uint64_t>(__builtin_popcount(dir_byte[j])) << 32;
  }
  uint64_t enc_total = 0, dir_total = 0;
  const std::vector<uint64_t> enc_before = model_exclusive_scan(enc, &enc_total);
  const std::vector<uint64_t> dir_before = model_exclusive_scan(dir, &dir_total);
  z.n_out = static_cast<uint32_t>((enc_total >> 24) & 0xFFFFFFu);
  z.enc_varying = (enc_total >> 48) + (enc_total & 0xFFFFFFu);
  z.dir_varying = (dir_total >> 32) + static_cast<uint32_t>(dir_total);
  z.direct = model_direct_wins(z.enc_varying, z.dir_varying);
  z.nonzero = static_cast<uint32_t>(z.direct ? dir_total >> 32 : enc_total >> 48);
  z.payload = static_cast<uint32_t>(z.direct ? static_cast<uint32_t>(dir_total) : enc_total & 0xFFFFFFu);
  const std::vector<uint8_t>& wlens = z.direct ? dlens : lens;
  for (unsigned j = 0; j < kThreads && j < bm; ++j) {
    z.my_byte[j] = z.direct ? dir_byte[j] : enc_byte[j];
    z.my_rank[j] = static_cast<uint32_t>(z.direct ? dir_before[j] >> 32 : enc_before[j] >> 48);
    uint32_t pay = static_cast<uint32_t>(z.direct ? static_cast<uint32_t>(dir_before[j]) : enc_before[j] & 0xFFFFFFu);
    uint32_t outs = static_cast<uint32_t>((enc_before[j] >> 24) & 0xFFFFFFu);
    for (uint32_t k = 0; k < 8 && 8 * j + k < nb; ++k) {
      const uint32_t b = 8 * j + k;
      pay_off[b] = pay;
      out_off[b] = outs;
      pay += lane::block_bytes(wlens[b]);
      outs += static_cast<uint32_t>(__builtin_popcount(omask[b]));
    }
  }
  if (out == nullptr) return;
  // The bitmap and code lengths (ranked by S2), then D: planes (the chosen kind's values again
  // from the codes) and outliers.
  const size_t fixed = z.direct ? 5 : 9;
  for (unsigned j = 0; j < bm; ++j) {
    out[fixed + j] = static_cast<uint8_t>(z.my_byte[j]);
    uint8_t* lens_out = out + fixed + bm + z.my_rank[j];
    for (uint32_t k = 0; k < 8; ++k) {
      if ((z.my_byte[j] >> k) & 1u) *lens_out++ = wlens[8 * j + k];
    }
  }
  const size_t planes_at = fixed + bm + z.nonzero, idx_at = planes_at + z.payload;
  const size_t val_at = idx_at + 2 * size_t{z.n_out};
  for (uint32_t b = 0; b < nb; ++b) {
    if (wlens[b] != 0) {
      int32_t e[32], d[32];
      model_staged_lorenzo(&codes[b * 32], carry[b], b, e, d);
      uint32_t sign = 0;
      std::vector<uint32_t> mag(32);
      for (unsigned l = 0; l < 32; ++l) {
        const int32_t code = codes[b * 32 + l];
        const int32_t v = z.direct ? (code == kNoCode ? 0 : code) : d[l];
        sign |= uint32_t{v < 0} << l;
        mag[l] = magnitude(v);
      }
      const std::vector<uint32_t> planes = emulated_transpose(mag);
      uint8_t* wp = out + planes_at + pay_off[b];
      fmt::store<uint32_t>(wp, sign);
      for (uint32_t l = 0; l < wlens[b]; ++l) fmt::store<uint32_t>(wp + 4 + 4 * l, planes[l]);
    }
    for (unsigned l = 0; l < 32; ++l) {
      if (!((omask[b] >> l) & 1u)) continue;
      const uint32_t k = out_off[b] + __builtin_popcount(omask[b] & ((1u << l) - 1u));
      fmt::store<uint16_t>(out + idx_at + 2 * size_t{k}, static_cast<uint16_t>(b * 32 + l));
      std::memcpy(out + val_at + size_t{k} * sizeof(S), &x[b * 32 + l], sizeof(S));
    }
  }
}

// encode_kernel's sizing step after its pass: thread j's bitmap byte of either kind, one scan of
// (payload | nonzero << 32) of both, the choice.
void model_kernel_sizing(uint32_t nb, const std::vector<uint8_t>& lens, const std::vector<uint8_t>& dlens,
                         uint32_t n_out, ModelSizing& z) {
  const uint32_t bm = lane::bitmap_bytes(nb);
  std::vector<uint64_t> enc(kThreads, 0), dir(kThreads, 0);
  std::vector<uint32_t> enc_byte(kThreads, 0), dir_byte(kThreads, 0);
  for (unsigned j = 0; j < kThreads && j < bm; ++j) {
    for (uint32_t k = 0; k < 8; ++k) {
      const uint32_t b = 8 * j + k;
      if (b >= nb) break;
      if (lens[b] != 0) enc_byte[j] |= 1u << k;
      if (dlens[b] != 0) dir_byte[j] |= 1u << k;
      enc[j] += lane::block_bytes(lens[b]);
      dir[j] += lane::block_bytes(dlens[b]);
    }
    enc[j] |= static_cast<uint64_t>(__builtin_popcount(enc_byte[j])) << 32;
    dir[j] |= static_cast<uint64_t>(__builtin_popcount(dir_byte[j])) << 32;
  }
  uint64_t enc_total = 0, dir_total = 0;
  const std::vector<uint64_t> enc_before = model_exclusive_scan(enc, &enc_total);
  const std::vector<uint64_t> dir_before = model_exclusive_scan(dir, &dir_total);
  z.n_out = n_out;
  z.enc_varying = (enc_total >> 32) + static_cast<uint32_t>(enc_total);
  z.dir_varying = (dir_total >> 32) + static_cast<uint32_t>(dir_total);
  z.direct = model_direct_wins(z.enc_varying, z.dir_varying);
  const uint64_t total = z.direct ? dir_total : enc_total;
  z.nonzero = static_cast<uint32_t>(total >> 32);
  z.payload = static_cast<uint32_t>(total);
  for (unsigned j = 0; j < kThreads; ++j) {
    z.my_byte[j] = z.direct ? dir_byte[j] : enc_byte[j];
    z.my_rank[j] = static_cast<uint32_t>((z.direct ? dir_before[j] : enc_before[j]) >> 32);
  }
}

struct ModelChunk {
  std::vector<uint8_t> bytes;  // what the kernel writes at the chunk's offset (empty: a repeat)
  uint32_t size = 0;           // its table size
  uint32_t crc = 0;            // its table CRC (a repeat: the repeated constant chunk's)
};

// encode_kernel (staged: encode_staged_kernel) for chunk c: `prev` is the previous (full,
// cl-value) chunk, nullptr for c == 0.
template <class K>
ModelChunk model_chunk(const S_of<K>* x, uint32_t m, const S_of<K>* prev, uint32_t cl,
                       const ModelQuantizer<C_of<K>>& qz, bool staged) {
  using S = S_of<K>;
  constexpr uint32_t elem = sizeof(S);
  const uint32_t nb = (m + 31) / 32;
  const uint32_t bm = lane::bitmap_bytes(nb);
  const uint64_t raw_bytes = 1 + uint64_t{m} * elem;
  const S v0 = x[0];
  const bool constant = model_all_equal(x, m, v0);
  const bool repeat = constant && prev != nullptr && model_all_equal(prev, cl, v0);
  bool encode = !constant && qz.lossy && 5 + bm < raw_bytes;  // plan_chunk: the direct fixed part
  uint64_t size = repeat ? 0 : constant ? 1 + elem : raw_bytes;
  std::vector<uint8_t> lens(nb), dlens(nb);
  int32_t q_start = 0;
  ModelSizing z;
  if (encode) {
    if (staged) {
      model_staged<K>(x, m, qz, lens, dlens, q_start, z, nullptr);
    } else {
      const uint32_t n_out = model_pass<K, false>(x, m, qz, lens, dlens, q_start, nullptr, 0, 0, 0, false);
      model_kernel_sizing(nb, lens, dlens, n_out, z);
    }
    // ChunkPlan::settle.
    const uint64_t shared = bm + uint64_t{z.n_out} * (2 + elem);
    const uint64_t bytes = z.direct ? 5 + z.dir_varying + shared : 9 + z.enc_varying + shared;
    if (bytes <= raw_bytes) {
      size = bytes;
    } else {
      encode = false;
    }
  }
  ModelChunk r;
  r.size = static_cast<uint32_t>(size);
  if (constant) {
    uint8_t cb[1 + sizeof(S)];
    cb[0] = fmt::kChunkConstant;
    std::memcpy(cb + 1, &v0, sizeof(S));
    r.crc = emulated_block_crc(cb, 1 + elem, kThreads, 5);
    if (!repeat) r.bytes.assign(cb, cb + 1 + elem);
    return r;
  }
  r.bytes.assign(size, 0xEE);  // poison: every byte must be written
  uint8_t* out = r.bytes.data();
  if (encode) {
    // write_encoded_head's fixed fields.
    if (z.direct) {
      out[0] = fmt::kChunkDirect;
      fmt::store<uint32_t>(out + 1, z.n_out);
    } else {
      out[0] = fmt::kChunkEncoded;
      fmt::store<int32_t>(out + 1, q_start);
      fmt::store<uint32_t>(out + 5, z.n_out);
    }
  }
  if (encode && staged) {
    model_staged<K>(x, m, qz, lens, dlens, q_start, z, out);
  } else if (encode) {
    const size_t fixed = z.direct ? 5 : 9;
    const std::vector<uint8_t>& wlens = z.direct ? dlens : lens;
    for (unsigned j = 0; j < bm; ++j) {
      out[fixed + j] = static_cast<uint8_t>(z.my_byte[j]);
      uint8_t* lens_out = out + fixed + bm + z.my_rank[j];
      for (uint32_t k = 0; k < 8; ++k) {
        if ((z.my_byte[j] >> k) & 1u) *lens_out++ = wlens[8 * j + k];
      }
    }
    model_pass<K, true>(x, m, qz, lens, dlens, q_start, out, fixed + bm + z.nonzero, z.payload, z.n_out, z.direct);
  } else {
    out[0] = fmt::kChunkRaw;
    std::memcpy(out + 1, x, size_t{m} * elem);
  }
  r.crc = emulated_block_crc(out, size, kThreads, 5);
  return r;
}

// ------------------------------------------------------------------------------------------
// Host model of parse_kernel + decode_kernel (store mode): every check in the kernels' order, the
// same error codes, and the decode by tiles. Returns the first error in chunk order (the device
// reports whichever failing chunk gets there first); out holds the decoded values.

struct ModelInfo {
  uint8_t version = 0, dtype = 0, ndim = 0;
  uint32_t chunk_len = 0, codec = 0;
  uint64_t count = 0, num_chunks = 0, header_bytes = 0, total_bytes = 0;
  double eb = 0, bin = 0;
};

template <class K>
int model_parse(const uint8_t* s, size_t len, uint64_t dst_count, ModelInfo& info, std::vector<uint64_t>& offsets) {
  if (len < 52) return static_cast<int>(Err::Truncated);
  if (std::memcmp(s, "ZCFZ", 4) != 0) return static_cast<int>(Err::BadMagic);
  if (s[4] != 1 && s[4] != 2 && s[4] != 3) return static_cast<int>(Err::BadVersion);
  info.version = s[4];
  if (s[5] < 1 || s[5] > (info.version == 1 ? 2 : 4)) return static_cast<int>(Err::BadDType);
  info.dtype = s[5];
  if (s[5] != lane::Kind<K>::kDType) return static_cast<int>(Err::DTypeMismatch);
  if (s[6] != 32) return static_cast<int>(Err::BadBlockLen);
  info.ndim = s[7];
  if (info.ndim > 64) return static_cast<int>(Err::BadNdim);
  info.count = fmt::load<uint64_t>(s + 8);
  info.eb = fmt::load<double>(s + 16);
  info.bin = fmt::load<double>(s + 24);
  info.chunk_len = fmt::load<uint32_t>(s + 32);
  info.codec = fmt::load<uint32_t>(s + 36);
  if (info.version == 1 && info.codec != 0) return static_cast<int>(Err::BadReserved);
  if (info.codec > 1) return static_cast<int>(Err::BadCodec);
  info.total_bytes = fmt::load<uint64_t>(s + 40);
  const uint32_t cl = info.chunk_len;
  if (cl < 32 || cl > 65536 || cl % 32 != 0) return static_cast<int>(Err::BadChunkLen);
  info.num_chunks = info.count == 0 ? 0 : (info.count - 1) / cl + 1;
  if (info.num_chunks > len / 8) return static_cast<int>(Err::TableTooLarge);
  info.header_bytes = 48 + 8 * uint64_t{info.ndim} + 8 * info.num_chunks + 4;
  if (info.header_bytes > len) return static_cast<int>(Err::Truncated);
  if (emulated_block_crc(s, info.header_bytes - 4, kThreads, 5) != fmt::load<uint32_t>(s + info.header_bytes - 4)) {
    return static_cast<int>(Err::HeaderCrc);
  }
  if (info.total_bytes > len) return static_cast<int>(Err::BadTotalBytes);
  const double eb = info.eb, bin = info.bin;
  if (!std::isfinite(eb) || eb < 0) return static_cast<int>(Err::BadErrorBound);
  if (!std::isfinite(bin) || bin < 0) return static_cast<int>(Err::BadBin);
  if (bin > 2.0 * eb) return static_cast<int>(Err::BadBin);
  if (info.dtype != 2 && static_cast<double>(static_cast<float>(bin)) != bin) return static_cast<int>(Err::BadBin);
  if (info.codec != 0 && bin != 0.0) return static_cast<int>(Err::LosslessCodecInLossyStream);
  if (info.codec == 1) return static_cast<int>(Err::LosslessCodecOnHost);
  uint64_t product = 1;
  for (uint32_t d = 0; d < info.ndim; ++d) {
    const uint64_t dim = fmt::load<uint64_t>(s + 48 + 8 * d);
    if (dim != 0 && product > ~0ull / dim) return static_cast<int>(Err::ShapeMismatch);
    product *= dim;
  }
  if (product != info.count) return static_cast<int>(Err::ShapeMismatch);
  if (info.count > dst_count) return static_cast<int>(Err::CountMismatch);
  const uint64_t elem = sizeof(S_of<K>);
  const uint8_t* table = s + 48 + 8 * uint64_t{info.ndim};
  offsets.assign(info.num_chunks + 1, 0);
  uint64_t run = info.header_bytes;
  bool bad = false;
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    const uint64_t bytes = fmt::load<uint32_t>(table + 8 * c);
    const uint64_t prev = c > 0 ? fmt::load<uint32_t>(table + 8 * (c - 1)) : 0;
    const bool repeat_ok = info.version >= 2 && c > 0 && (prev == 0 || prev == 1 + elem);
    const uint64_t m = std::min<uint64_t>(cl, info.count - c * cl);
    if ((bytes == 0 && !repeat_ok) || bytes > 1 + m * elem) bad = true;
    offsets[c] = run;
    run += bytes;
  }
  offsets[info.num_chunks] = run;
  if (bad) return static_cast<int>(Err::BadChunkSize);
  if (run != info.total_bytes) return static_cast<int>(Err::ChunkSizesSum);
  return 0;
}

// decode_kernel's checks and decode of chunk c (p: its size bytes; repeat: a size-0 entry).
template <class K>
int model_decode_chunk(const uint8_t* p, uint64_t size, bool repeat, uint32_t want_crc, uint32_t m,
                       const ModelInfo& info, S_of<K>* out) {
  using S = S_of<K>;
  using C = C_of<K>;
  constexpr uint32_t elem = sizeof(S);
  const uint32_t nb = (m + 31) / 32;
  const bool v1 = info.version == 1;
  const uint32_t crc = emulated_block_crc(p, size, kThreads, 5);
  const uint32_t mode = p[0];
  const uint64_t fixed = mode == fmt::kChunkDirect ? 5 : 9;  // n_outliers ends the fixed part
  const uint32_t n_out_field = size >= fixed ? fmt::load<uint32_t>(p + fixed - 4) : 0u;
  if (repeat && mode != fmt::kChunkConstant) return static_cast<int>(Err::RepeatNotConstant);
  if (crc != want_crc) return static_cast<int>(Err::ChunkCrc);
  if (mode == fmt::kChunkRaw) {
    if (size != 1 + uint64_t{m} * elem) return static_cast<int>(Err::BadRawSize);
    std::memcpy(out, p + 1, size_t{m} * elem);
    return 0;
  }
  if (mode == fmt::kChunkConstant && !v1) {
    if (size != 1 + elem) return static_cast<int>(Err::BadConstantSize);
    S v;
    std::memcpy(&v, p + 1, elem);
    for (uint32_t i = 0; i < m; ++i) out[i] = v;
    return 0;
  }
  const bool direct = mode == fmt::kChunkDirect && info.version >= 3;
  if (mode != fmt::kChunkEncoded && !direct) return static_cast<int>(Err::BadChunkMode);
  if (info.bin == 0.0) return static_cast<int>(Err::LosslessEncoded);
  const uint32_t bm = lane::bitmap_bytes(nb);
  uint64_t header = fixed + (v1 ? nb : bm);
  if (size < header) return static_cast<int>(Err::ChunkTooShort);
  std::vector<uint8_t> lens(nb);
  std::vector<uint32_t> obits(nb, 0);
  bool bad = false;
  if (v1) {
    for (uint32_t b = 0; b < nb; ++b) {
      lens[b] = p[fixed + b];
      bad = bad || lens[b] > 31;
    }
  } else {
    // Thread j: bitmap byte j, the exclusive popcount scan ranks its length bytes.
    std::vector<uint64_t> pop(kThreads, 0);
    std::vector<uint32_t> byte(kThreads, 0);
    bool padding = false;
    for (unsigned j = 0; j < kThreads; ++j) {
      byte[j] = j < bm ? p[fixed + j] : 0u;
      pop[j] = static_cast<uint64_t>(__builtin_popcount(byte[j]));
      padding = padding || (j + 1 == bm && nb % 8 != 0 && (byte[j] >> (nb % 8)) != 0);
    }
    uint64_t nonzero = 0;
    const std::vector<uint64_t> rank = model_exclusive_scan(pop, &nonzero);
    if (padding) return static_cast<int>(Err::BadBitmapPadding);
    if (size < header + nonzero) return static_cast<int>(Err::ChunkTooShort);
    for (unsigned j = 0; j < kThreads; ++j) {
      uint32_t r = static_cast<uint32_t>(rank[j]);
      for (uint32_t k = 0; k < 8; ++k) {
        const uint32_t b = 8 * j + k;
        if (b >= nb) break;
        const bool set = (byte[j] >> k) & 1u;
        lens[b] = set ? p[header + r++] : 0;
        bad = bad || (set && (lens[b] == 0 || lens[b] > 31));
      }
    }
    header += nonzero;
  }
  if (bad) return static_cast<int>(Err::BadCodeLength);
  const uint32_t n_out = n_out_field;
  if (n_out > m) return static_cast<int>(Err::TooManyOutliers);
  uint64_t payload = 0;
  for (uint8_t l : lens) payload += lane::block_bytes(l);
  if (header + payload + uint64_t{n_out} * (2 + elem) != size) return static_cast<int>(Err::ChunkSizeMismatch);
  const uint8_t* idx = p + header + payload;
  const uint8_t* vals = idx + 2 * size_t{n_out};
  for (uint32_t k = 0; k < n_out; ++k) {
    const uint32_t i = fmt::load<uint16_t>(idx + 2 * k);
    if (i >= m || (k > 0 && i <= fmt::load<uint16_t>(idx + 2 * (k - 1)))) {
      bad = true;
    } else {
      obits[i >> 5] |= 1u << (i & 31);
    }
  }
  if (bad) return static_cast<int>(Err::BadOutlierIndex);

  // The tile loop: per-tile block totals, planes -> magnitudes by the transpose, outlier ranks.
  // A direct chunk (decode_tiles<.., kDirect>): no prefix sums, the signed magnitudes are codes.
  const C bin = static_cast<C>(info.bin);
  const uint8_t* planes = p + header;
  uint32_t carry = direct ? 0u : fmt::load<uint32_t>(p + 1), out_run = 0, pay_run = 0;
  for (uint32_t t = 0; t < (nb + kWarps - 1) / kWarps; ++t) {
    uint32_t incl[kWarps][32] = {}, total[kWarps] = {};
    uint32_t pay_before[kWarps] = {}, out_before[kWarps] = {};
    uint32_t pay_tile = 0, out_tile = 0;
    for (int w = 0; w < kWarps; ++w) {
      pay_before[w] = pay_run;
      out_before[w] = out_run;
      for (int k = 0; k < kWarps; ++k) {
        const uint32_t bk = t * kWarps + k;
        if (bk >= nb) break;
        if (k < w) {
          pay_before[w] += lane::block_bytes(lens[bk]);
          out_before[w] += __builtin_popcount(obits[bk]);
        }
      }
    }
    for (int k = 0; k < kWarps; ++k) {
      const uint32_t bk = t * kWarps + k;
      if (bk >= nb) break;
      pay_tile += lane::block_bytes(lens[bk]);
      out_tile += __builtin_popcount(obits[bk]);
    }
    for (int w = 0; w < kWarps; ++w) {
      const uint32_t b = t * kWarps + w;
      if (b >= nb) continue;
      const uint32_t len = lens[b];
      std::vector<uint32_t> row(32, 0), mag(32, 0);
      uint32_t sign = 0;
      if (len != 0) {
        const uint8_t* wp = planes + pay_before[w];
        sign = fmt::load<uint32_t>(wp);
        for (uint32_t l = 0; l < len; ++l) row[l] = fmt::load<uint32_t>(wp + 4 + 4 * l);
        mag = emulated_transpose(row);
      }
      uint32_t acc = 0;
      for (unsigned l = 0; l < 32; ++l) {
        const uint32_t delta = ((sign >> l) & 1u) ? 0u - mag[l] : mag[l];
        acc += delta;
        incl[w][l] = direct ? delta : acc;
      }
      total[w] = direct ? 0u : acc;
    }
    for (int w = 0; w < kWarps; ++w) {
      const uint32_t b = t * kWarps + w;
      if (b >= nb) continue;
      uint32_t before = carry;
      for (int k = 0; k < w; ++k) before += total[k];
      for (unsigned l = 0; l < 32; ++l) {
        const uint32_t i = b * 32 + l;
        if (i >= m) continue;
        if ((obits[b] >> l) & 1u) {
          const uint32_t k = out_before[w] + __builtin_popcount(obits[b] & ((1u << l) - 1u));
          std::memcpy(&out[i], vals + size_t{k} * elem, elem);
        } else {
          out[i] = lane::reconstruct_bits<K>(static_cast<int32_t>(before + incl[w][l]), bin);
        }
      }
    }
    for (int k = 0; k < kWarps; ++k) carry += total[k];
    pay_run += pay_tile;
    out_run += out_tile;
  }
  return 0;
}

template <class K>
int model_decompress(const uint8_t* s, size_t len, uint64_t dst_count, std::vector<S_of<K>>& out) {
  ModelInfo info;
  std::vector<uint64_t> offsets;
  const int err = model_parse<K>(s, len, dst_count, info, offsets);
  if (err != 0) return err;
  out.assign(info.count, S_of<K>{});
  const uint8_t* table = s + 48 + 8 * uint64_t{info.ndim};
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    uint64_t off = offsets[c], size = offsets[c + 1] - off;
    const bool repeat = size == 0;
    if (repeat) {
      size = 1 + sizeof(S_of<K>);
      off -= size;
    }
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(info.chunk_len, info.count - c * info.chunk_len));
    const int e = model_decode_chunk<K>(s + off, size, repeat, fmt::load<uint32_t>(table + 8 * c + 4), m, info,
                                        out.data() + c * info.chunk_len);
    if (e != 0) return e;
  }
  return 0;
}

// ------------------------------------------------------------------------------------------
// The models against the CPU codec.

template <class K>
constexpr zccl::fz::DType dtype_of() {
  return static_cast<zccl::fz::DType>(lane::Kind<K>::kDType);
}

template <class K>
std::vector<uint8_t> cpu_stream(const std::vector<S_of<K>>& x, double eb, uint32_t chunk_len, int threads = 1) {
  zccl::fz::CompressParams p;
  p.error_bound = eb;
  p.chunk_len = chunk_len;
  p.threads = threads;
  p.lossless_codec = zccl::fz::LosslessCodec::None;  // what the GPU writes for lossless streams
  std::vector<uint8_t> stream(zccl::fz::max_compressed_size(dtype_of<K>(), x.size(), chunk_len));
  stream.resize(zccl::fz::compress(x.data(), dtype_of<K>(), x.size(), p, stream.data(), stream.size()));
  return stream;
}

// The decoder model on a valid stream: no error, fz::decompress's bits.
template <class K>
void check_decode_model(const std::vector<uint8_t>& stream, uint64_t count, const std::string& name) {
  using S = S_of<K>;
  std::vector<S> want(count), got;
  zccl::fz::decompress(stream.data(), stream.size(), want.data(), count, 1);
  const int err = model_decompress<K>(stream.data(), stream.size(), count, got);
  expect(err == 0, "decoder model error " + std::to_string(err) + " on " + name);
  if (err == 0) {
    expect(got.size() == count && std::memcmp(want.data(), got.data(), count * sizeof(S)) == 0,
           "decoder model values of " + name);
  }
}

// Chunks of each mode (0..4) the encoder models wrote in check_model, [5] repeats; reset per
// dtype by test_model, which asserts that encoded and direct chunks both occurred.
std::vector<long> g_model_modes(6, 0);

template <class K>
void check_model(const std::vector<S_of<K>>& x, double eb, uint32_t chunk_len, const std::string& name) {
  using S = S_of<K>;
  const std::vector<uint8_t> stream = cpu_stream<K>(x, eb, chunk_len);
  const zccl::fz::StreamInfo info = zccl::fz::read_info(stream.data(), stream.size());
  const std::string what = name + " eb=" + std::to_string(eb) + " cl=" + std::to_string(chunk_len);
  expect(info.version == 3, "CPU writes version 3: " + what);
  const ModelQuantizer<C_of<K>> qz = model_quantizer<C_of<K>>(eb);
  const uint8_t* table = stream.data() + 48 + 8 * info.shape.size();
  size_t at = info.header_bytes;
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(chunk_len, x.size() - c * chunk_len));
    const S* xc = x.data() + c * chunk_len;
    const uint32_t size = fmt::load<uint32_t>(table + 8 * c);
    for (const bool staged : {false, true}) {  // encode_kernel's decomposition, encode_staged_kernel's
      const ModelChunk mine = model_chunk<K>(xc, m, c > 0 ? xc - chunk_len : nullptr, chunk_len, qz, staged);
      const std::string which = staged ? "staged model chunk " : "model chunk ";
      const bool same = mine.size == size && mine.bytes.size() == size &&
                        (size == 0 || std::memcmp(mine.bytes.data(), stream.data() + at, size) == 0);
      expect(same, which + std::to_string(c) + " of " + what + " (sizes " + std::to_string(mine.size) + " vs " +
                       std::to_string(size) + ", modes " + std::to_string(mine.bytes.empty() ? -1 : mine.bytes[0]) +
                       " vs " + std::to_string(size == 0 ? -1 : stream[at]) + ")");
      expect(mine.crc == fmt::load<uint32_t>(table + 8 * c + 4), which + "crc " + std::to_string(c) + " of " + what);
      ++g_model_modes[mine.bytes.empty() ? 5 : std::min<size_t>(mine.bytes[0], 4)];
    }
    at += size;
  }
  expect(emulated_block_crc(stream.data(), info.header_bytes - 4, kThreads, 5) ==
             fmt::load<uint32_t>(stream.data() + info.header_bytes - 4),
         "header crc of " + what);
  // The CPU's stream does not depend on its thread count (the GPU's chunks are independent).
  expect(cpu_stream<K>(x, eb, chunk_len, 3) == stream, "CPU stream with 3 threads differs: " + what);
  check_decode_model<K>(stream, x.size(), what);
  // The same values as a version-2 stream (direct chunks re-encoded) and, float32/float64, as a
  // version-1 stream, through both decoders.
  std::vector<S> want(x.size()), got(x.size());
  zccl::fz::decompress(stream.data(), stream.size(), want.data(), want.size(), 1);
  const auto same_values = [&](const std::vector<uint8_t>& copy) {
    zccl::fz::decompress(copy.data(), copy.size(), got.data(), got.size(), 1);
    return std::memcmp(got.data(), want.data(), want.size() * sizeof(S)) == 0;
  };
  const std::vector<uint8_t> v2 = zccl::testing::to_v2(stream);
  expect(zccl::fz::read_info(v2.data(), v2.size()).version == 2 && !zccl::testing::chunk_kinds(v2)[fmt::kChunkDirect],
         "to_v2 writes version 2 without direct chunks");
  expect(same_values(v2), "to_v2 keeps the values: " + what);
  check_decode_model<K>(v2, x.size(), what + " (v2)");
  if constexpr (!lane::kIsHalf<K>) {
    const std::vector<uint8_t> v1 = zccl::testing::to_v1(stream);
    expect(zccl::fz::read_info(v1.data(), v1.size()).version == 1, "to_v1 writes version 1");
    expect(same_values(v1), "to_v1 keeps the values: " + what);
    check_decode_model<K>(v1, x.size(), what + " (v1)");
  }
}

// Test fields as stored bits: float and double directly, halves by rounding the float field.
template <class K>
std::vector<S_of<K>> field(const std::string& kind, size_t n, std::mt19937_64& rng) {
  using S = S_of<K>;
  using V = std::conditional_t<std::is_same_v<K, double>, double, float>;
  std::vector<V> v(n);
  std::normal_distribution<double> g(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    const double s = std::sin(0.001 * static_cast<double>(i)) * 100.0 + std::cos(0.037 * static_cast<double>(i));
    if (kind == "smooth") v[i] = static_cast<V>(s);
    else if (kind == "random") v[i] = static_cast<V>(g(rng) * 1e3);
    else if (kind == "bignoise") v[i] = static_cast<V>(g(rng) * 1e9);  // codes overflow: outliers
    else if (kind == "gauss") v[i] = static_cast<V>(g(rng));  // gradient-like: direct chunks at small eb
    else if (kind == "constant") v[i] = static_cast<V>(3.25);
    else if (kind == "zero") v[i] = static_cast<V>(i < n / 3 || i > n - n / 4 ? 0.0 : s);  // zero runs
    else if (kind == "steps") v[i] = static_cast<V>(std::floor(static_cast<double>(i) / 700.0));  // constant runs
    else v[i] = static_cast<V>(s + g(rng));
  }
  if (kind == "gaussnan") {  // noise with outliers (direct chunks' outlier lanes code 0)
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<V>(g(rng));
    for (size_t i = 0; i < n; i += 1 + rng() % 61) v[i] = i % 2 ? std::numeric_limits<V>::quiet_NaN() : static_cast<V>(1e30);
    if (n > 0) v[0] = std::numeric_limits<V>::infinity();  // the first value an outlier
  }
  if (kind == "special") {
    for (size_t i = 0; i < n; i += 1 + rng() % 97) {
      switch (rng() % 7) {
        case 0: v[i] = std::numeric_limits<V>::quiet_NaN(); break;
        case 1: v[i] = std::numeric_limits<V>::infinity(); break;
        case 2: v[i] = -std::numeric_limits<V>::infinity(); break;
        case 3: v[i] = std::numeric_limits<V>::max(); break;
        case 4: v[i] = std::numeric_limits<V>::denorm_min(); break;
        case 5: v[i] = static_cast<V>(-0.0); break;
        default: v[i] = static_cast<V>(1e30); break;
      }
    }
    if (n > 0) v[0] = std::numeric_limits<V>::quiet_NaN();  // first value an outlier: q_start 0
  }
  std::vector<S> x(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (lane::kIsHalf<K>) {
      x[i] = lane::Kind<K>::narrow(v[i]);
    } else {
      std::memcpy(&x[i], &v[i], sizeof(S));
    }
  }
  if constexpr (lane::kIsHalf<K>) {
    if (kind == "special") {  // half specials: max, smallest subnormal, NaN with a payload
      for (size_t i = 5; i < n; i += 131) x[i] = static_cast<S>(i % 3 == 0 ? 0x0001 : i % 3 == 1 ? 0x7E05 : 0xFBFF);
      if (std::is_same_v<K, lane::BFloat16>) {
        for (size_t i = 7; i < n; i += 173) x[i] = 0x7F7F;  // bfloat16 max
      }
    }
  }
  return x;
}

template <class K>
void test_model(std::mt19937_64& rng) {
  std::fill(g_model_modes.begin(), g_model_modes.end(), 0);
  const char* kinds[] = {"smooth", "random", "constant", "noisy", "special", "zero", "steps", "gauss", "gaussnan"};
  for (const char* kind : kinds) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{31}, size_t{32}, size_t{33}, size_t{255},
                     size_t{256}, size_t{257}, size_t{5119}, size_t{5121}, size_t{40000}}) {
      const std::vector<S_of<K>> x = field<K>(kind, n, rng);
      for (double eb : {0.0, 1e-40, 1e-6, 1e-2, 1.0, 1e3}) {
        for (uint32_t cl : {32u, 96u, 5120u}) {
          check_model<K>(x, eb, cl, std::string(kind) + " n=" + std::to_string(n));
        }
      }
    }
  }
  const std::vector<S_of<K>> big = field<K>("noisy", 300000, rng);
  check_model<K>(big, 1e-3, 65536, "noisy 300000");
  const std::vector<S_of<K>> noise = field<K>("gauss", 200000, rng);
  check_model<K>(noise, 1e-3, 65536, "gauss 200000");
  const std::vector<S_of<K>> zeros(1000000, S_of<K>{0});
  check_model<K>(zeros, 1e-3, 5120, "zeros 1e6");
  check_model<K>(zeros, 0.0, 5120, "zeros 1e6 lossless");
  // Not vacuous: the models wrote both kinds of coded chunk (and the plain kinds).
  const std::string dt = zccl::fz::dtype_name(dtype_of<K>());
  std::printf("  encoder models, %s: %ld encoded, %ld direct, %ld raw, %ld constant chunks, %ld repeats\n", dt.c_str(),
              g_model_modes[0], g_model_modes[4], g_model_modes[1], g_model_modes[2], g_model_modes[5]);
  expect(g_model_modes[0] > 0 && g_model_modes[4] > 0 && g_model_modes[1] > 0 && g_model_modes[2] > 0 &&
             g_model_modes[5] > 0,
         "encoder models wrote encoded, direct, raw, constant and repeat chunks: " + dt);
}

// Mutated streams through the decoder model and fz::decompress: the model rejects exactly when
// the CPU throws and decodes the same bits when neither does.
std::vector<int> g_error_hist(64, 0);  // model error codes seen in the corruption tests

template <class K>
void model_differential(const std::vector<uint8_t>& s, size_t len, const std::string& what, int& rejected) {
  const uint8_t code = len > 5 ? s[5] : 0;
  if (code != lane::Kind<K>::kDType && code >= 1 && code <= 4) {
    switch (code) {
      case 1: return model_differential<float>(s, len, what, rejected);
      case 2: return model_differential<double>(s, len, what, rejected);
      case 3: return model_differential<lane::Half>(s, len, what, rejected);
      default: return model_differential<lane::BFloat16>(s, len, what, rejected);
    }
  }
  using S = S_of<K>;
  uint64_t count = 4017;
  try {
    count = zccl::fz::read_info(s.data(), len).count;
  } catch (const std::exception&) {
  }
  if (count > (uint64_t{1} << 24)) return;
  std::vector<S> cpu_out(count), model_out;
  bool cpu_ok = true;
  std::string cpu_msg;
  try {
    zccl::fz::decompress(s.data(), len, cpu_out.data(), count, 1);
  } catch (const std::exception& e) {
    cpu_ok = false;
    cpu_msg = e.what();
  }
  const int err = model_decompress<K>(s.data(), len, count, model_out);
  rejected += err != 0;
  ++g_error_hist[static_cast<size_t>(err) % g_error_hist.size()];
  // A codec-1 stream is valid; a CPU built with zstd decodes it, the GPU never does.
  if (err == static_cast<int>(Err::LosslessCodecOnHost)) return;
  expect((err == 0) == cpu_ok, what + ": model says " + std::to_string(err) + ", cpu says '" +
                                   (cpu_ok ? std::string("ok") : cpu_msg) + "'");
  if (err == 0 && cpu_ok) {
    expect(model_out.size() == count && std::memcmp(model_out.data(), cpu_out.data(), count * sizeof(S)) == 0,
           what + ": both decoders accept but disagree on values");
  }
}

// The corruption base: encoded, direct, raw, constant and repeat chunks, outliers (in encoded and
// direct chunks), a partial last block, a 2-D shape (as tests/cuda/test_cuszp.cu's).
template <class K>
std::vector<uint8_t> corruption_base(std::mt19937_64& rng) {
  std::vector<S_of<K>> x = field<K>("special", 4000 + 17, rng);
  std::vector<S_of<K>> noise = field<K>("bignoise", 700, rng);  // raw chunks
  std::copy(noise.begin(), noise.end(), x.begin() + 1300);
  std::vector<S_of<K>> grad = field<K>("gaussnan", 512, rng);  // chunk 1: direct, with outliers
  std::copy(grad.begin(), grad.end(), x.begin() + 512);
  std::fill(x.begin() + 2048, x.begin() + 3584, S_of<K>{0});  // chunks 4..6: constant, repeats
  zccl::fz::CompressParams p;
  p.error_bound = lane::kIsHalf<K> ? 1e-2 : std::is_same_v<K, float> ? 1e-3 : 1e-6;
  p.chunk_len = 512;
  p.shape = std::vector<uint64_t>{4017, 1};
  p.threads = 1;
  std::vector<uint8_t> s(zccl::fz::max_compressed_size(dtype_of<K>(), x.size(), p.chunk_len, 2));
  s.resize(zccl::fz::compress(x.data(), dtype_of<K>(), x.size(), p, s.data(), s.size()));
  return s;
}

template <class K>
void test_model_corruption(std::mt19937_64& rng, uint8_t version) {
  std::vector<uint8_t> base = corruption_base<K>(rng);
  if (version < 3) base = zccl::testing::to_version(base, version);
  const std::vector<bool> have = zccl::testing::chunk_kinds(base);
  expect(have[0] && have[1] && (version == 1 || (have[2] && have[5])) && have[4] == (version == 3),
         "corruption base v" + std::to_string(version) +
             " has encoded, raw, constant and repeat chunks, and direct ones in version 3");
  int rejected = 0, total = 0, on_direct = 0, direct_rejected = 0;
  zccl::testing::for_each_mutation(base, 3000, 300, rng, [&](const std::vector<uint8_t>& s, size_t len, const std::string& what) {
    ++total;
    const int before = rejected;
    model_differential<K>(s, len, what, rejected);
    if (what.find("(direct chunk)") != std::string::npos) {
      ++on_direct;
      direct_rejected += rejected - before;
    }
  });
  std::printf("  decoder model vs CPU on mutated %s v%d streams: %d/%d rejected (direct chunks: %d/%d)\n",
              zccl::fz::dtype_name(dtype_of<K>()), version, rejected, total, direct_rejected, on_direct);
  expect(rejected > total / 2 && rejected < total, "mutations mostly but not all rejected");
  if (version == 3) {
    expect(on_direct >= 100 && direct_rejected > 0 && direct_rejected < on_direct,
           "mutations of direct chunks: some rejected, some decoded");
  }
}

// Errors the mutation fuzz cannot reach first. A codec-1 stream (crafted: a lossless stream with
// the codec field set) is refused with LosslessCodecOnHost; a version-1 stream may not use the
// field at all; a repeat of bytes that are no constant chunk; a dtype other than the caller's.
void test_targeted_errors() {
  const std::vector<uint32_t> x(3000, 0x3FC00000u);  // 1.5f
  std::vector<uint8_t> s = cpu_stream<float>(x, 0.0, 1024);
  std::vector<uint32_t> out;
  expect(model_decompress<float>(s.data(), s.size(), x.size(), out) == 0, "lossless stream decodes");
  fmt::store<uint32_t>(s.data() + 36, 1);
  zccl::testing::reseal(s);
  expect(model_decompress<float>(s.data(), s.size(), x.size(), out) == static_cast<int>(Err::LosslessCodecOnHost),
         "codec 1 refused as host-only");
  s[4] = 1;
  zccl::testing::reseal(s);
  expect(model_decompress<float>(s.data(), s.size(), x.size(), out) == static_cast<int>(Err::BadReserved),
         "codec field in a version-1 stream");
  std::vector<uint8_t> lossy = cpu_stream<float>(x, 1e-3, 1024);
  fmt::store<uint32_t>(lossy.data() + 36, 1);
  zccl::testing::reseal(lossy);
  expect(model_decompress<float>(lossy.data(), lossy.size(), x.size(), out) ==
             static_cast<int>(Err::LosslessCodecInLossyStream),
         "codec 1 in a lossy stream");
  std::vector<uint64_t> dout;
  expect(model_decompress<double>(lossy.data(), lossy.size(), x.size(), dout) == static_cast<int>(Err::DTypeMismatch),
         "float32 stream decoded as float64");
  // Chunk 0 of a varied stream is encoded or raw, never constant: as the bytes of a repeat.
  std::vector<uint32_t> varied(3000);
  for (size_t i = 0; i < varied.size(); ++i) varied[i] = 0x3F800000u + static_cast<uint32_t>(i * 977);
  const std::vector<uint8_t> v = cpu_stream<float>(varied, 1e-3, 1024);
  ModelInfo info;
  std::vector<uint64_t> offsets;
  expect(model_parse<float>(v.data(), v.size(), varied.size(), info, offsets) == 0, "varied stream parses");
  const uint8_t* table = v.data() + 56;
  std::vector<uint32_t> chunk(1024);
  expect(model_decode_chunk<float>(v.data() + offsets[0], offsets[1] - offsets[0], true, fmt::load<uint32_t>(table + 4),
                                   1024, info, chunk.data()) == static_cast<int>(Err::RepeatNotConstant),
         "repeat of a chunk that is not constant");
  // Direct chunks (mode 4) are version 3's: the same stream labelled version 2 or 1 is corrupt
  // (BadChunkMode at the first direct chunk), for the CPU too.
  std::mt19937_64 g(5);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::vector<float> noise(3000);
  for (float& f : noise) f = static_cast<float>(n01(g));
  std::vector<uint32_t> bits(noise.size());
  std::memcpy(bits.data(), noise.data(), noise.size() * 4);
  const std::vector<uint8_t> d = cpu_stream<float>(bits, 1e-3, 1024);
  expect(zccl::testing::chunk_kinds(d)[fmt::kChunkDirect], "noise at eb 1e-3 gives direct chunks");
  check_decode_model<float>(d, bits.size(), "noise with direct chunks");
  for (uint8_t old_version : {uint8_t{2}, uint8_t{1}}) {
    std::vector<uint8_t> o = d;
    o[4] = old_version;
    zccl::testing::reseal(o);
    expect(model_decompress<float>(o.data(), o.size(), bits.size(), out) == static_cast<int>(Err::BadChunkMode),
           "mode 4 in a version-" + std::to_string(old_version) + " stream: BadChunkMode");
    bool threw = false;
    try {
      std::vector<float> y(bits.size());
      zccl::fz::decompress(o.data(), o.size(), y.data(), y.size(), 1);
    } catch (const std::exception&) {
      threw = true;
    }
    expect(threw, "the CPU refuses mode 4 in a version-" + std::to_string(old_version) + " stream");
  }
}

// Real streams of an older version (tests/data/format_v1 and format_v2, made by the version-1
// and version-2 encoders): the decoder model reproduces that version's decoder output bit for
// bit, as fz::decompress does (a codec-1 stream: LosslessCodecOnHost), and the streams stay valid
// corruption bases.
template <class K>
void check_fixture(const zccl::testing::Fixture& f, int version, std::mt19937_64& rng) {
  using S = S_of<K>;
  const std::string v = "version-" + std::to_string(version);
  expect(f.stream.size() > 52 && f.stream[4] == version, f.name + " is a " + v + " stream");
  std::vector<S> got;
  if (fmt::load<uint32_t>(f.stream.data() + 36) == fmt::kCodecShuffleZstd) {
    // Host-only for the GPU (and for a CPU built without zstd, as this test is: no mutations).
    const int err = model_decompress<K>(f.stream.data(), f.stream.size(), ~uint64_t{0}, got);
    expect(err == static_cast<int>(Err::LosslessCodecOnHost), f.name + ": codec 1 is host-only");
    return;
  }
  const zccl::fz::StreamInfo info = zccl::fz::read_info(f.stream.data(), f.stream.size());
  const int err = model_decompress<K>(f.stream.data(), f.stream.size(), info.count, got);
  expect(err == 0, f.name + ": decoder model error " + std::to_string(err));
  expect(err != 0 || (f.decoded.size() == info.count * sizeof(S) &&
                      std::memcmp(got.data(), f.decoded.data(), f.decoded.size()) == 0),
         f.name + ": decoder model == the " + v + " decoder's output");
  int rejected = 0;
  zccl::testing::for_each_mutation(f.stream, 300, 0, rng, [&](const std::vector<uint8_t>& s, size_t len, const std::string& what) {
    model_differential<K>(s, len, f.name + " " + what, rejected);
  });
}

// The version-1 and version-2 fixtures in dir; returns how many there were.
size_t test_fixtures(const char* dir, std::mt19937_64& rng) {
  size_t n = 0;
  for (int version : {1, 2}) {
    const std::vector<zccl::testing::Fixture> fixtures = zccl::testing::fixtures(dir, version);
    for (const auto& f : fixtures) {
      switch (f.stream.size() > 5 ? f.stream[5] : 0) {
        case 1: check_fixture<float>(f, version, rng); break;
        case 2: check_fixture<double>(f, version, rng); break;
        case 3: check_fixture<lane::Half>(f, version, rng); break;
        case 4: check_fixture<lane::BFloat16>(f, version, rng); break;
        default: expect(false, f.name + ": unknown dtype code");
      }
    }
    if (!fixtures.empty()) std::printf("  %zu version-%d fixtures from %s\n", fixtures.size(), version, dir);
    n += fixtures.size();
  }
  return n;
}

}  // namespace

// Usage: host_model_test [DIR...]   DIR: tests/data/format_v1, tests/data/format_v2 (real
// version-1 and version-2 streams), optional; each must hold some.
int main(int argc, char** argv) {
  std::mt19937_64 rng(20240611);
  test_crc(rng);
  test_transpose(rng);
  test_quantize<float>(rng);
  test_quantize<double>(rng);
  test_quantize_half<lane::Half, zccl::fz::block::KindF16>(rng);
  test_quantize_half<lane::BFloat16, zccl::fz::block::KindBF16>(rng);
  test_model<float>(rng);
  test_model<double>(rng);
  test_model<lane::Half>(rng);
  test_model<lane::BFloat16>(rng);
  test_targeted_errors();
  for (int a = 1; a < argc; ++a) expect(test_fixtures(argv[a], rng) > 0, std::string("no fixtures in ") + argv[a]);
  for (uint8_t version : {uint8_t{3}, uint8_t{2}, uint8_t{1}}) {
    test_model_corruption<float>(rng, version);
    test_model_corruption<double>(rng, version);
  }
  for (uint8_t version : {uint8_t{3}, uint8_t{2}}) {
    test_model_corruption<lane::Half>(rng, version);
    test_model_corruption<lane::BFloat16>(rng, version);
  }
  std::printf("  error codes the decoder model reported (code: count):");
  for (size_t e = 0; e < g_error_hist.size(); ++e) {
    if (g_error_hist[e] != 0) std::printf(" %zu:%d", e, g_error_hist[e]);
  }
  std::printf("\n");
  // Every check of the decoder is reached by some mutation, except those test_targeted_errors
  // reaches directly: DTypeMismatch (the differential decodes as the stream's dtype),
  // LosslessCodecOnHost (the bases are lossy), RepeatNotConstant (in a mutated stream some
  // earlier chunk always fails first), and CountMismatch and WorkspaceTooSmall (caller sizes).
  for (int e = 0; e <= static_cast<int>(Err::BadBitmapPadding); ++e) {
    if (e == static_cast<int>(Err::DTypeMismatch) || e == static_cast<int>(Err::LosslessCodecOnHost) ||
        e == static_cast<int>(Err::RepeatNotConstant) || e == static_cast<int>(Err::CountMismatch) ||
        e == static_cast<int>(Err::WorkspaceTooSmall)) {
      continue;
    }
    expect(g_error_hist[static_cast<size_t>(e)] > 0, "no mutation reached error code " + std::to_string(e));
  }
  if (failures != 0) {
    std::printf("%d failure(s)\n", failures);
    return 1;
  }
  std::printf("ok: crc32c_combine.h, cuszp_lane.h and the encoder/decoder models agree with the CPU codec\n");
  return 0;
}
