// CPU checks of the GPU codec's __host__ __device__ pieces (no CUDA needed; built with g++):
//
//   1. crc32c_combine.h: tables, slicing-by-4 update, x^(8n), combine, against crc32c.cpp;
//      and an emulation of the thread-block CRC (slice plan + the warp/cross-warp fold tree of
//      cuszp_kernels.cuh's cta_crc32c) over many lengths and alignments.
//   2. cuszp_lane.h: the warp bit transpose (emulated lane by lane) and the quantiser against
//      fzlight_block.h's scalar quantiser.
//   3. A host model of encode_kernel's decomposition (tiles of kWarps warps, one 32-value block
//      per warp, warp summaries carried across tiles, effective codes, bit planes from the
//      transpose, outliers ranked by popcount) that must reproduce fz::compress's chunks byte
//      for byte, and whose chunk CRCs (by the emulated block CRC) must match the stream's table.
//   4. A host model of decode_kernel's decomposition (per-tile block totals, planes -> magnitudes
//      by the transpose, outlier bitmap ranks) that must decode every chunk as fz::decompress.
//
// Exit status 0 when everything holds; prints the first failures otherwise.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "crc32c.h"
#include "crc32c_combine.h"
#include "cuszp_lane.h"
#include "fzlight.h"
#include "fzlight_block.h"
#include "fzlight_format.h"

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
    for (unsigned l = 0; l < 32; ++l) y[l] = lane::transpose_stage(x[l], x[l ^ s], s, (l & s) != 0);
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

// ------------------------------------------------------------------------------------------
// Host model of encode_kernel (see cuszp_kernels.cuh): the same decomposition, lane by lane.

constexpr int kWarps = 8;

template <class T>
struct ModelQuantizer {
  T bin = 0, inv_bin = 0;
  double eb = 0;
  bool lossy = false;
};

template <class T>
ModelQuantizer<T> model_quantizer(double eb) {
  ModelQuantizer<T> m;
  m.eb = eb;
  if (!(eb >= static_cast<double>(std::numeric_limits<T>::min()))) return m;
  const double b = std::min(2.0 * eb * (1.0 - 1.0 / 1024.0), static_cast<double>(std::numeric_limits<T>::max()));
  m.bin = static_cast<T>(b);
  m.inv_bin = static_cast<T>(1.0 / static_cast<double>(m.bin));
  m.lossy = true;
  return m;
}

struct Summary {
  bool has_good = false;
  int32_t last = 0;
  uint32_t outliers = 0;
};

// One pass; returns the outlier count. kWrite: writes at out (sizes from lens / totals).
template <class T, bool kWrite>
uint32_t model_pass(const T* x, uint32_t m, const ModelQuantizer<T>& qz, std::vector<uint8_t>& lens,
                    int32_t& q_start, uint8_t* out, uint32_t payload_total, uint32_t n_out_total) {
  const uint32_t nb = (m + 31) / 32;
  int32_t carry_code = 0;
  uint32_t carry_out = 0, carry_payload = 0;
  const size_t planes_at = 9 + nb, idx_at = planes_at + payload_total, val_at = idx_at + 2 * size_t{n_out_total};
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
        good[w][l] = valid && lane::quantize<T>(x[i], qz.inv_bin, qz.bin, qz.eb, q[w][l]);
        bad[w][l] = valid && !good[w][l];
        gmask[w] |= uint32_t{good[w][l]} << l;
        omask[w] |= uint32_t{bad[w][l]} << l;
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
        if (kWrite) pay_before += lane::block_bytes(lens[t * kWarps + k]);
      }
      int32_t e[32];
      for (unsigned l = 0; l < 32; ++l) {
        const uint32_t upto = gmask[w] & ((2u << l) - 1u);
        e[l] = upto != 0 ? q[w][31 - __builtin_clz(upto)] : prev;
      }
      uint32_t mag[32], any = 0, sign = 0;
      for (unsigned l = 0; l < 32; ++l) {
        const int32_t pred = l == 0 ? (b == 0 ? e[0] : prev) : e[l - 1];
        const int32_t d = e[l] - pred;
        mag[l] = d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
        any |= mag[l];
        sign |= uint32_t{d < 0} << l;
      }
      const uint32_t len = any == 0 ? 0 : 32 - __builtin_clz(any);
      if (!kWrite) {
        lens[b] = static_cast<uint8_t>(len);
        if (b == 0) q_start = e[0];
      } else {
        out[9 + b] = static_cast<uint8_t>(len);
        const std::vector<uint32_t> planes = emulated_transpose(std::vector<uint32_t>(mag, mag + 32));
        if (len != 0) {
          uint8_t* wp = out + planes_at + pay_before;
          fmt::store<uint32_t>(wp, sign);
          for (uint32_t l = 0; l < len; ++l) fmt::store<uint32_t>(wp + 4 + 4 * l, planes[l]);
        }
        for (unsigned l = 0; l < 32; ++l) {
          if (!bad[w][l]) continue;
          const uint32_t k = out_before + __builtin_popcount(omask[w] & ((1u << l) - 1u));
          fmt::store<uint16_t>(out + idx_at + 2 * size_t{k}, static_cast<uint16_t>(b * 32 + l));
          std::memcpy(out + val_at + size_t{k} * sizeof(T), &x[b * 32 + l], sizeof(T));
        }
      }
    }
    for (int k = 0; k < kWarps; ++k) {
      if (sum[k].has_good) carry_code = sum[k].last;
      carry_out += sum[k].outliers;
      if (kWrite && t * kWarps + k < nb) carry_payload += lane::block_bytes(lens[t * kWarps + k]);
    }
  }
  return carry_out;
}

template <class T>
std::vector<uint8_t> model_chunk(const T* x, uint32_t m, const ModelQuantizer<T>& qz) {
  const uint32_t nb = (m + 31) / 32;
  const uint64_t raw_bytes = 1 + uint64_t{m} * sizeof(T);
  bool encode = qz.lossy && 9 + nb < raw_bytes;
  std::vector<uint8_t> lens(nb);
  int32_t q_start = 0;
  uint32_t n_out = 0, payload = 0;
  uint64_t size = raw_bytes;
  if (encode) {
    n_out = model_pass<T, false>(x, m, qz, lens, q_start, nullptr, 0, 0);
    for (uint8_t l : lens) payload += lane::block_bytes(l);
    const uint64_t enc = 9 + nb + payload + uint64_t{n_out} * (2 + sizeof(T));
    if (enc <= raw_bytes) {
      size = enc;
    } else {
      encode = false;
    }
  }
  std::vector<uint8_t> out(size, 0xEE);  // poison: every byte must be written
  if (encode) {
    out[0] = 0;
    fmt::store<int32_t>(out.data() + 1, q_start);
    fmt::store<uint32_t>(out.data() + 5, n_out);
    model_pass<T, true>(x, m, qz, lens, q_start, out.data(), payload, n_out);
  } else {
    out[0] = 1;
    std::memcpy(out.data() + 1, x, size_t{m} * sizeof(T));
  }
  return out;
}

// Host model of decode_kernel's tile loop for one encoded chunk (already validated).
template <class T>
void model_decode_chunk(const uint8_t* p, uint32_t m, T bin, T* out) {
  const uint32_t nb = (m + 31) / 32;
  const uint32_t n_out = fmt::load<uint32_t>(p + 5);
  std::vector<uint8_t> lens(p + 9, p + 9 + nb);
  uint32_t payload = 0;
  for (uint8_t l : lens) payload += lane::block_bytes(l);
  const uint8_t* idx = p + 9 + nb + payload;
  const uint8_t* vals = idx + 2 * size_t{n_out};
  std::vector<uint32_t> obits(nb, 0);
  for (uint32_t k = 0; k < n_out; ++k) {
    const uint16_t i = fmt::load<uint16_t>(idx + 2 * k);
    obits[i >> 5] |= 1u << (i & 31);
  }
  const uint8_t* planes = p + 9 + nb;
  uint32_t carry = fmt::load<uint32_t>(p + 1), out_run = 0, pay_run = 0;
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
        acc += ((sign >> l) & 1u) ? 0u - mag[l] : mag[l];
        incl[w][l] = acc;
      }
      total[w] = acc;
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
          std::memcpy(&out[i], vals + size_t{k} * sizeof(T), sizeof(T));
        } else {
          out[i] = lane::reconstruct<T>(static_cast<int32_t>(before + incl[w][l]), bin);
        }
      }
    }
    for (int k = 0; k < kWarps; ++k) carry += total[k];
    pay_run += pay_tile;
    out_run += out_tile;
  }
}

template <class T>
void check_model(const std::vector<T>& x, double eb, uint32_t chunk_len, const std::string& name) {
  zccl::fz::CompressParams p;
  p.error_bound = eb;
  p.chunk_len = chunk_len;
  p.threads = 1;
  const zccl::fz::DType dt = sizeof(T) == 4 ? zccl::fz::DType::Float32 : zccl::fz::DType::Float64;
  std::vector<uint8_t> stream(zccl::fz::max_compressed_size(dt, x.size(), chunk_len));
  const size_t len = zccl::fz::compress(x.data(), dt, x.size(), p, stream.data(), stream.size());
  const zccl::fz::StreamInfo info = zccl::fz::read_info(stream.data(), len);
  const ModelQuantizer<T> qz = model_quantizer<T>(eb);
  const uint8_t* table = stream.data() + 48 + 8 * info.shape.size();
  size_t at = info.header_bytes;
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(chunk_len, x.size() - c * chunk_len));
    const std::vector<uint8_t> mine = model_chunk<T>(x.data() + c * chunk_len, m, qz);
    const uint32_t size = fmt::load<uint32_t>(table + 8 * c);
    const bool same = mine.size() == size && std::memcmp(mine.data(), stream.data() + at, size) == 0;
    expect(same, "model chunk " + std::to_string(c) + " of " + name + " eb=" + std::to_string(eb) +
                     " cl=" + std::to_string(chunk_len) + " (sizes " + std::to_string(mine.size()) +
                     " vs " + std::to_string(size) + ")");
    expect(emulated_block_crc(mine.data(), mine.size(), 256, 5) == fmt::load<uint32_t>(table + 8 * c + 4),
           "model chunk crc " + std::to_string(c) + " of " + name);
    // Decoder model against fz::decompress_chunk.
    if (stream[at] == fmt::kChunkEncoded) {
      std::vector<T> want(chunk_len), got(m);
      zccl::fz::decompress_chunk(stream.data(), len, c, want.data(), want.size());
      model_decode_chunk<T>(stream.data() + at, m, static_cast<T>(fmt::load<double>(stream.data() + 24)), got.data());
      expect(std::memcmp(want.data(), got.data(), size_t{m} * sizeof(T)) == 0,
             "decoder model chunk " + std::to_string(c) + " of " + name);
    }
    at += size;
  }
  expect(emulated_block_crc(stream.data(), info.header_bytes - 4, 256, 5) ==
             fmt::load<uint32_t>(stream.data() + info.header_bytes - 4),
         "header crc of " + name);
}

template <class T>
std::vector<T> field(const std::string& kind, size_t n, std::mt19937_64& rng) {
  std::vector<T> x(n);
  std::normal_distribution<double> g(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    const double s = std::sin(0.001 * static_cast<double>(i)) * 100.0 + std::cos(0.037 * static_cast<double>(i));
    if (kind == "smooth") x[i] = static_cast<T>(s);
    else if (kind == "random") x[i] = static_cast<T>(g(rng) * 1e3);
    else if (kind == "constant") x[i] = static_cast<T>(3.25);
    else x[i] = static_cast<T>(s + g(rng));
  }
  if (kind == "special") {
    for (size_t i = 0; i < n; i += 1 + rng() % 97) {
      switch (rng() % 6) {
        case 0: x[i] = std::numeric_limits<T>::quiet_NaN(); break;
        case 1: x[i] = std::numeric_limits<T>::infinity(); break;
        case 2: x[i] = -std::numeric_limits<T>::infinity(); break;
        case 3: x[i] = std::numeric_limits<T>::max(); break;
        case 4: x[i] = std::numeric_limits<T>::denorm_min(); break;
        default: x[i] = static_cast<T>(1e30); break;
      }
    }
    if (n > 0) x[0] = std::numeric_limits<T>::quiet_NaN();  // first value an outlier: q_start 0
  }
  return x;
}

template <class T>
void test_model(std::mt19937_64& rng) {
  const char* kinds[] = {"smooth", "random", "constant", "noisy", "special"};
  for (const char* kind : kinds) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{31}, size_t{32}, size_t{33}, size_t{255},
                     size_t{256}, size_t{257}, size_t{5119}, size_t{5121}, size_t{40000}}) {
      const std::vector<T> x = field<T>(kind, n, rng);
      for (double eb : {0.0, 1e-40, 1e-6, 1e-2, 1.0, 1e3}) {
        for (uint32_t cl : {32u, 96u, 5120u}) check_model<T>(x, eb, cl, std::string(kind) + " n=" + std::to_string(n));
      }
    }
  }
  const std::vector<T> big = field<T>("noisy", 300000, rng);
  check_model<T>(big, 1e-3, 65536, "noisy 300000");
}

}  // namespace

int main() {
  std::mt19937_64 rng(20240611);
  test_crc(rng);
  test_transpose(rng);
  test_quantize<float>(rng);
  test_quantize<double>(rng);
  test_model<float>(rng);
  test_model<double>(rng);
  if (failures != 0) {
    std::printf("%d failure(s)\n", failures);
    return 1;
  }
  std::printf("ok: crc32c_combine.h, cuszp_lane.h and the encoder/decoder models agree with the CPU codec\n");
  return 0;
}
