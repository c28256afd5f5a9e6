// CRC-32C (Castagnoli) arithmetic shared by the host and the GPU: table generation, a
// slicing-by-4 update, multiplication in GF(2)[x] mod P, and the combine operator, plus the plan
// by which a CUDA thread block splits one CRC over its threads (cuszp_kernels.cuh).
//
// Representation (the usual "reflected" one, as in crc32c.cpp): a 32-bit value v stands for the
// polynomial sum_i bit_i(v) * x^(31-i), so bit 31 is x^0 and multiplying by x is a right shift
// with a conditional xor of the polynomial. Let raw(s, D) be the register after feeding bytes D
// into a register holding s (no pre/post inversion); crc32c(D) = ~raw(~0, D). Then
//   raw(s, D) = s * x^(8|D|)  xor  raw(0, D)                               (linearity)
//   raw(0, A || B) = raw(0, A) * x^(8|B|)  xor  raw(0, B)
//   crc32c(A || B) = crc32c(A) * x^(8|B|)  xor  crc32c(B)                  (combine)
// so independent slices can be CRC'd in parallel and folded with one multiplication each.
//
// Everything here is header-only, constexpr where it can be, and compiles as host code (g++) and
// as __host__ __device__ code (nvcc); tests/cuda/host_model_test.cpp checks it against
// crc32c.cpp on the CPU, including an emulation of the thread-block plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZCCL_HD __host__ __device__
#else
#define ZCCL_HD
#endif

namespace zccl::fz::crc {

inline constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial (x^32 implied)
inline constexpr uint32_t kOne = 0x80000000u;   // the polynomial 1

// v * x mod P.
ZCCL_HD constexpr uint32_t mul_x(uint32_t v) { return (v >> 1) ^ ((v & 1u) ? kPoly : 0u); }

// `bits` zero bits fed into a register holding v, i.e. v * x^bits mod P, bit by bit (slow; used to
// build tables and as a reference).
ZCCL_HD constexpr uint32_t shift_bits(uint32_t v, int bits) {
  for (int i = 0; i < bits; ++i) v = mul_x(v);
  return v;
}

// a * b mod P. Walks a from its x^0 coefficient (bit 31) upward and stops at its last set bit.
ZCCL_HD constexpr uint32_t mulmod(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  while (a != 0) {
    if (a & kOne) p ^= b;
    a <<= 1;
    b = mul_x(b);
  }
  return p;
}

// x^(2^j) mod P for j = 0..63, so that x^(8n) is a product over the set bits of n. The sequence
// has period 31 from j = 0 (x^(2^31) = x mod P), so callers index it with j % 31 for any j; the
// 64 values are checked against repeated squaring by xpow2_table_ok() (which thereby also checks
// the period).
#define ZCCL_CRC32C_XPOW2_VALUES                                                     \
  0x40000000u, 0x20000000u, 0x08000000u, 0x00800000u, 0x00008000u, 0x82F63B78u,     \
      0x6EA2D55Cu, 0x18B8EA18u, 0x510AC59Au, 0xB82BE955u, 0xB8FDB1E7u, 0x88E56F72u, \
      0x74C360A4u, 0xE4172B16u, 0x0D65762Au, 0x35D73A62u, 0x28461564u, 0xBF455269u, \
      0xE2EA32DCu, 0xFE7740E6u, 0xF946610Bu, 0x3C204F8Fu, 0x538586E3u, 0x59726915u, \
      0x734D5309u, 0xBC1AC763u, 0x7D0722CCu, 0xD289CABEu, 0xE94CA9BCu, 0x05B74F3Fu, \
      0xA51E1F42u, 0x40000000u, 0x20000000u, 0x08000000u, 0x00800000u, 0x00008000u, \
      0x82F63B78u, 0x6EA2D55Cu, 0x18B8EA18u, 0x510AC59Au, 0xB82BE955u, 0xB8FDB1E7u, \
      0x88E56F72u, 0x74C360A4u, 0xE4172B16u, 0x0D65762Au, 0x35D73A62u, 0x28461564u, \
      0xBF455269u, 0xE2EA32DCu, 0xFE7740E6u, 0xF946610Bu, 0x3C204F8Fu, 0x538586E3u, \
      0x59726915u, 0x734D5309u, 0xBC1AC763u, 0x7D0722CCu, 0xD289CABEu, 0xE94CA9BCu, \
      0x05B74F3Fu, 0xA51E1F42u, 0x40000000u, 0x20000000u

inline constexpr int kXPow2Count = 64;
inline constexpr uint32_t kXPow2Host[kXPow2Count] = {ZCCL_CRC32C_XPOW2_VALUES};

// x^(2^j) by repeated squaring (reference for the table).
ZCCL_HD constexpr uint32_t xpow2_slow(int j) {
  uint32_t v = kOne >> 1;  // x
  for (int i = 0; i < j; ++i) v = mulmod(v, v);
  return v;
}

constexpr bool xpow2_table_ok() {
  for (int j = 0; j < kXPow2Count; ++j) {
    if (kXPow2Host[j] != xpow2_slow(j)) return false;
  }
  return true;
}
static_assert(xpow2_table_ok(), "x^(2^j) mod P table is wrong");

// x^(8n) mod P from a table of x^(2^j) (host table, or the device's __constant__ copy).
ZCCL_HD constexpr uint32_t xpow8n(uint64_t n, const uint32_t* xpow2) {
  uint32_t r = kOne;
  for (int j = 3; n != 0; n >>= 1, ++j) {
    if (n & 1u) r = mulmod(r, xpow2[j % 31]);
  }
  return r;
}

// raw register v followed by n zero bytes.
ZCCL_HD constexpr uint32_t shift_bytes(uint32_t v, uint64_t n, const uint32_t* xpow2) {
  return mulmod(v, xpow8n(n, xpow2));
}

// crc32c(A || B) from crc32c(A), crc32c(B) and |B|.
ZCCL_HD constexpr uint32_t combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b,
                                   const uint32_t* xpow2) {
  return shift_bytes(crc_a, len_b, xpow2) ^ crc_b;
}

// ------------------------------------------------------------------------------------------
// Slicing-by-4 tables: t[k][i] is byte i followed by k zero bytes, i.e. 8(k+1) zero bits fed into
// a register holding i. t[0] is the classic byte table.
struct Tables {
  uint32_t t[4][256];
};

ZCCL_HD constexpr uint32_t table_entry(int k, uint32_t i) { return shift_bits(i, 8 * (k + 1)); }

// Feeds bytes [a, b) of p into register `reg` (raw: no inversion). Reads 4-byte words where the
// address is aligned, single bytes elsewhere, and never touches a byte outside [a, b).
ZCCL_HD inline uint32_t update(uint32_t reg, const uint8_t* p, uint64_t a, uint64_t b,
                               const Tables& tab) {
  for (; a < b && (reinterpret_cast<uintptr_t>(p + a) & 3u) != 0; ++a) {
    reg = tab.t[0][(reg ^ p[a]) & 0xFFu] ^ (reg >> 8);
  }
  for (; a + 4 <= b; a += 4) {
    uint32_t w;
#if defined(__CUDA_ARCH__)
    w = *reinterpret_cast<const uint32_t*>(p + a);  // aligned by the loop above
#else
    std::memcpy(&w, p + a, 4);
#endif
    reg ^= w;  // little-endian: the first byte is the low byte
    reg = tab.t[3][reg & 0xFFu] ^ tab.t[2][(reg >> 8) & 0xFFu] ^ tab.t[1][(reg >> 16) & 0xFFu] ^
          tab.t[0][reg >> 24];
  }
  for (; a < b; ++a) reg = tab.t[0][(reg ^ p[a]) & 0xFFu] ^ (reg >> 8);
  return reg;
}

// ------------------------------------------------------------------------------------------
// How a block of `threads` threads (a power of two, at least 32) CRCs n > 0 bytes.
//
// Each thread takes a slice of R = 2^log2_slice bytes (R is a power of two so every shift in the
// fold is a table entry, no power computation per call). The message is conceptually prefixed
// with pad = threads*R - n zero bytes, so all slices have the same length and the first threads
// hold only padding: zero bytes fed into a zero register leave it zero, so they contribute
// nothing. The thread whose slice holds the first real byte starts from ~0 instead of 0, which is
// the standard pre-inversion (linearity: its ~0 gets shifted over the whole message). Slices are
// folded pairwise: at level k, the left half of every 2^(k+1)-slice group is shifted over the
// 2^k slices to its right, i.e. multiplied by x^(8 R 2^k) = x^(2^(3 + log2_slice + k)).
struct SlicePlan {
  int log2_slice = 0;
  uint64_t pad = 0;
};

ZCCL_HD constexpr SlicePlan plan_slices(uint64_t n, unsigned threads, int min_log2_slice) {
  SlicePlan plan;
  plan.log2_slice = min_log2_slice;
  while ((static_cast<uint64_t>(threads) << plan.log2_slice) < n) ++plan.log2_slice;
  plan.pad = (static_cast<uint64_t>(threads) << plan.log2_slice) - n;
  return plan;
}

// The real byte range [begin, end) of thread t's slice (empty when it is all padding).
struct Slice {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool first = false;  // holds byte 0: starts from ~0
};

ZCCL_HD constexpr Slice slice_of(const SlicePlan& plan, unsigned t) {
  const uint64_t lo = static_cast<uint64_t>(t) << plan.log2_slice;
  const uint64_t hi = lo + (uint64_t{1} << plan.log2_slice);
  Slice s;
  if (hi <= plan.pad) return s;
  s.begin = lo > plan.pad ? lo - plan.pad : 0;
  s.end = hi - plan.pad;
  s.first = lo <= plan.pad;
  return s;
}

// Fold step at `level` (0-based over the whole block: levels 0..4 inside a warp, 5.. across
// warps): left * x^(8 R 2^level) xor right.
ZCCL_HD constexpr uint32_t fold(uint32_t left, uint32_t right, const SlicePlan& plan, int level,
                                const uint32_t* xpow2) {
  return mulmod(left, xpow2[(3 + plan.log2_slice + level) % 31]) ^ right;
}

}  // namespace zccl::fz::crc
