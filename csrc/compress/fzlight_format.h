// The fZ-light stream format (version 1). All integers little-endian.
//
//   offset size  field
//   0      4     magic "ZCFZ"
//   4      1     format version (1)
//   5      1     dtype (1 = float32, 2 = float64)
//   6      1     block length (32)
//   7      1     ndim (0..64)
//   8      8     count (values)
//   16     8     error bound eb (float64, absolute; 0 = lossless)
//   24     8     quantisation bin width as float64 (exactly representable in the dtype; 0 when
//                lossless). The decoder reconstructs x' = T(q) * T(bin), the arithmetic the
//                encoder verified against eb.
//   32     4     chunk length (values per chunk)
//   36     4     reserved (0)
//   40     8     total stream bytes
//   48     8*ndim           shape
//   ..     8*num_chunks     chunk table: (u32 compressed bytes, u32 CRC-32C of those bytes)
//   ..     4                CRC-32C of everything above
//   ..     chunks, back to back, in order
//
// num_chunks = ceil(count / chunk_len). A chunk of m values is either
//   raw:      u8 1, then m values verbatim                                   (1 + m*sizeof(T))
//   encoded:  u8 0, i32 q_start, u32 n_outliers, u8 code length L per block (ceil(m/32) bytes),
//             then for each block with L > 0: u32 sign plane, L x u32 magnitude planes
//             (plane j holds bit j of each value's |delta|; value i of the block is bit i),
//             then n_outliers x u16 index (strictly increasing), n_outliers x T exact value.
// An encoded chunk is never larger than its raw form (the encoder falls back to raw), which
// gives max_compressed_size = 52 + 8*ndim + 9*num_chunks + count*sizeof(T).
//
// Deltas are Lorenzo residuals of integer codes q_i = round(x_i / bin) within a chunk,
// q_{-1} = q_start. Outliers (NaN, Inf, |x/bin| too large, or a value whose reconstruction would
// miss eb) are predicted exactly (delta 0) and patched with their stored value.
#pragma once

#include <cstdint>
#include <cstring>

namespace zccl::fz::format {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the stream format is little-endian");

inline constexpr uint8_t kMagic[4] = {'Z', 'C', 'F', 'Z'};
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kFixedHeaderBytes = 48;
inline constexpr size_t kTableEntryBytes = 8;
inline constexpr size_t kHeaderCrcBytes = 4;
inline constexpr uint8_t kChunkEncoded = 0;
inline constexpr uint8_t kChunkRaw = 1;
inline constexpr size_t kEncodedChunkFixedBytes = 9;  // mode, q_start, n_outliers

template <class V>
inline void store(uint8_t* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

template <class V>
inline V load(const uint8_t* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

inline uint64_t num_chunks(uint64_t count, uint32_t chunk_len) {
  return count == 0 ? 0 : (count - 1) / chunk_len + 1;
}

inline size_t header_bytes(size_t ndim, uint64_t chunks) {
  return kFixedHeaderBytes + 8 * ndim + kTableEntryBytes * chunks + kHeaderCrcBytes;
}

}  // namespace zccl::fz::format
