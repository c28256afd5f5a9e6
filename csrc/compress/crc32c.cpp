#include "crc32c.h"

#include <array>
#include <cstring>

#include "crc32c_combine.h"

#if defined(__SSE4_2__)
#include <nmmintrin.h>
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

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t seed) {
  uint32_t c = ~seed;
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
