// CRC-32C (Castagnoli) of a byte range: the stream's integrity check. Hardware instruction where
// the compiler targets SSE4.2, a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zccl::fz {

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t seed = 0);

}  // namespace zccl::fz
