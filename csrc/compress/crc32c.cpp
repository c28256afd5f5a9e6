#include "crc32c.h"

#include <array>
#include <cstring>

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

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t seed) {
  uint32_t c = ~seed;
#if defined(__SSE4_2__)
  uint64_t c64 = c;
  for (; len >= 8; len -= 8, data += 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; len > 0; --len, ++data) c = _mm_crc32_u8(c, *data);
#else
  for (; len > 0; --len, ++data) c = kTable[(c ^ *data) & 0xFFu] ^ (c >> 8);
#endif
  return ~c;
}

}  // namespace zccl::fz
