#include "crc32c.h"

#include <array>
#include <cstring>

#include "crc32c_combine.h"

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif
#if defined(__VPCLMULQDQ__) && defined(__PCLMUL__) && defined(__AVX512F__) && defined(__SSE4_2__)
#include <immintrin.h>
#define ZCCL_CRC_FOLD 1
#endif

namespace zccl::fz {
namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kPoly = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

#if defined(__SSE4_2__)
// The crc32 instruction has a latency of three cycles and a throughput of one, so one chain of
// it runs at a third of the unit's speed. Ranges of at least 3 * kLane bytes are taken in rounds
// of three lanes of kLane bytes CRC'd side by side, then folded with the linearity of
// crc32c_combine.h: raw(c, A || B || C) = raw(c, A) x^(16 kLane) ^ raw(0, B) x^(8 kLane) ^
// raw(0, C). The two shifts are table lookups (a register shifted by n zero bytes is linear in
// its four bytes). Same value as the one-chain loop, ~2.5x its speed on long ranges.
constexpr size_t kLane = 128;

struct ShiftTables {
  uint32_t by_lane[4][256];      // byte k of a register, shifted by kLane zero bytes
  uint32_t by_two_lanes[4][256];  // ... by 2 * kLane zero bytes
};

ShiftTables make_shift_tables() {
  ShiftTables s{};
  const uint32_t one = crc::xpow8n(kLane, crc::kXPow2Host);
  const uint32_t two = crc::xpow8n(2 * kLane, crc::kXPow2Host);
  for (uint32_t k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      s.by_lane[k][b] = crc::mulmod(b << (8 * k), one);
      s.by_two_lanes[k][b] = crc::mulmod(b << (8 * k), two);
    }
  }
  return s;
}

inline uint32_t shifted(const uint32_t (&t)[4][256], uint32_t v) {
  return t[0][v & 0xFFu] ^ t[1][(v >> 8) & 0xFFu] ^ t[2][(v >> 16) & 0xFFu] ^ t[3][v >> 24];
}

inline uint64_t load_u64(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
#endif

#if defined(ZCCL_CRC_FOLD)
// Long ranges by folding (Gopal et al., "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ Instruction", Intel, 2009): the message is only needed modulo P, so a 16-byte piece
// C = L x^64 + H (L its first 8 bytes) can be moved D bits further, where it is added to the
// data there, as L (x^(D+64) mod P) + H (x^D mod P): two carry-less products of 64 x 32 bits.
// Four 512-bit registers take 256 bytes a round, then fold into one and down to 16 bytes, whose
// CRC the crc32 instruction takes (the tail then goes on in crc32c below). In a register loaded
// from memory bit i is the coefficient of x^(127-i) (the reflected order), and a carry-less
// product of two such 64-bit values comes out one place short (bit k is x^(126-k)), hence the
// constants for D - 1 and D + 63. The initial register goes into the first 4 bytes:
// raw(c, M) = raw(0, M ^ c).
struct FoldConstant {
  uint64_t first;   // x^(D+63) mod P, multiplies the first 8 bytes of a piece
  uint64_t second;  // x^(D-1) mod P, the last 8
};

// A polynomial of degree < 32 (crc32c_combine.h's representation) as a reflected 64-bit operand.
constexpr uint64_t operand(uint32_t v) { return static_cast<uint64_t>(v) << 32; }

FoldConstant fold_constant(int bits) {
  return {operand(crc::shift_bits(crc::kOne, bits + 63)),
          operand(crc::shift_bits(crc::kOne, bits - 1))};
}

struct FoldTables {
  __m512i by_256_bytes, by_64_bytes, lanes_to_last;  // the last: 48/32/16 bytes, lane 3 unused
  __m512i by_192_bytes, by_128_bytes;
  __m128i by_16_bytes;
};

// One 16-byte lane of constants: first in the low qword (it multiplies a piece's first 8 bytes).
__m128i lane_of(FoldConstant k) {
  return _mm_set_epi64x(static_cast<int64_t>(k.second), static_cast<int64_t>(k.first));
}

__m512i broadcast(FoldConstant k) { return _mm512_maskz_broadcast_i32x4(0xFFFF, lane_of(k)); }

FoldTables make_fold_tables() {
  FoldTables t{};
  t.by_256_bytes = broadcast(fold_constant(8 * 256));
  t.by_192_bytes = broadcast(fold_constant(8 * 192));
  t.by_128_bytes = broadcast(fold_constant(8 * 128));
  t.by_64_bytes = broadcast(fold_constant(8 * 64));
  t.by_16_bytes = lane_of(fold_constant(8 * 16));
  const __m128i lanes[4] = {lane_of(fold_constant(8 * 48)), lane_of(fold_constant(8 * 32)),
                            t.by_16_bytes, _mm_setzero_si128()};
  t.lanes_to_last = _mm512_loadu_si512(lanes);
  return t;
}

// x moved by the distance of k, plus `at` (per 16-byte lane).
inline __m512i fold(__m512i x, __m512i k, __m512i at) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), at, 0x96);
}

inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

template <int kLaneIndex>
inline __m128i lane(__m512i v) {
  return _mm512_maskz_extracti32x4_epi32(0xF, v, kLaneIndex);
}

// raw(c, ...) of the data up to its last len % 16 bytes (len >= 256 on entry); data and len are
// left at that tail.
uint32_t crc_folded(uint32_t c, const uint8_t*& data, size_t& len) {
  static const FoldTables t = make_fold_tables();  // thread-safe one-time init
  __m512i x0 = _mm512_xor_si512(load512(data), _mm512_zextsi128_si512(_mm_cvtsi32_si128(
                                                   static_cast<int>(c))));
  __m512i x1 = load512(data + 64), x2 = load512(data + 128), x3 = load512(data + 192);
  data += 256;
  len -= 256;
  for (; len >= 256; len -= 256, data += 256) {
    x0 = fold(x0, t.by_256_bytes, load512(data));
    x1 = fold(x1, t.by_256_bytes, load512(data + 64));
    x2 = fold(x2, t.by_256_bytes, load512(data + 128));
    x3 = fold(x3, t.by_256_bytes, load512(data + 192));
  }
  __m512i x = fold(x0, t.by_192_bytes, fold(x1, t.by_128_bytes, fold(x2, t.by_64_bytes, x3)));
  for (; len >= 64; len -= 64, data += 64) x = fold(x, t.by_64_bytes, load512(data));
  // The four 16-byte lanes onto the last one.
  const __m512i moved = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, t.lanes_to_last, 0x00),
                                         _mm512_clmulepi64_epi128(x, t.lanes_to_last, 0x11));
  __m128i r = _mm_xor_si128(_mm_xor_si128(lane<0>(moved), lane<1>(moved)),
                            _mm_xor_si128(lane<2>(moved), lane<3>(x)));
  for (; len >= 16; len -= 16, data += 16) {
    const __m128i at = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data));
    r = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(r, t.by_16_bytes, 0x00),
                                    _mm_clmulepi64_si128(r, t.by_16_bytes, 0x11)),
                      at);
  }
  uint8_t last[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(last), r);
  return static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, load_u64(last)), load_u64(last + 8)));
}
#endif

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t seed) {
  uint32_t c = ~seed;
#if defined(ZCCL_CRC_FOLD)
  if (len >= 256) c = crc_folded(c, data, len);
#endif
#if defined(__SSE4_2__)
  if (len >= 3 * kLane) {
    static const ShiftTables tables = make_shift_tables();  // thread-safe one-time init
    for (; len >= 3 * kLane; len -= 3 * kLane, data += 3 * kLane) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        a = _mm_crc32_u64(a, load_u64(data + i));
        b = _mm_crc32_u64(b, load_u64(data + kLane + i));
        d = _mm_crc32_u64(d, load_u64(data + 2 * kLane + i));
      }
      c = shifted(tables.by_two_lanes, static_cast<uint32_t>(a)) ^
          shifted(tables.by_lane, static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
    }
  }
  uint64_t c64 = c;
  for (; len >= 8; len -= 8, data += 8) c64 = _mm_crc32_u64(c64, load_u64(data));
  c = static_cast<uint32_t>(c64);
  for (; len > 0; --len, ++data) c = _mm_crc32_u8(c, *data);
#else
  for (; len > 0; --len, ++data) c = kTable[(c ^ *data) & 0xFFu] ^ (c >> 8);
#endif
  return ~c;
}

}  // namespace zccl::fz
