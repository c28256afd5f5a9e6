// The fZ-light stream format, versions 1, 2 and 3. All integers little-endian. Encoders write
// version 3; every decoder (CPU fzlight.cpp, GPU cuszp) reads all three.
//
//   offset size  field
//   0      4     magic "ZCFZ"
//   4      1     format version (1, 2 or 3)
//   5      1     dtype (1 = float32, 2 = float64; version 2 adds 3 = float16, 4 = bfloat16)
//   6      1     block length (32)
//   7      1     ndim (0..64)
//   8      8     count (values)
//   16     8     error bound eb (float64, absolute; 0 = lossless)
//   24     8     quantisation bin width as float64 (exactly representable in the compute type:
//                float32 for float32/float16/bfloat16, float64 for float64; 0 when lossless).
//                The decoder reconstructs x' = S(C(q) * C(bin)) (C the compute type, S the
//                storage type: the product is rounded to nearest-even into the half type), the
//                arithmetic the encoder verified against eb.
//   32     4     chunk length (values per chunk)
//   36     4     lossless chunk codec (version >= 2; 0 in version 1): 0 none (lossless chunks are
//                raw), 1 = byte-shuffle + zstd (chunk mode 3 below)
//   40     8     total stream bytes
//   48     8*ndim           shape
//   ..     8*num_chunks     chunk table: (u32 compressed bytes, u32 CRC-32C of those bytes)
//   ..     4                CRC-32C of everything above
//   ..     chunks, back to back, in order
//
// num_chunks = ceil(count / chunk_len). S is the storage type (sizeof(S) bytes per value).
// A chunk of m values is one of
//   raw       u8 1, then m values verbatim                                  (1 + m*sizeof(S))
//   constant  u8 2, then one value; all m values have exactly its bits (v2)  (1 + sizeof(S))
//   lossless  u8 3, then the codec's frame of the m values (v2, codec 1 only): the value bytes
//             split into sizeof(S) planes (byte k of every value, k = 0.. in order), the planes
//             concatenated and compressed as one zstd frame whose content size is recorded
//   encoded   version 1:  u8 0, i32 q_start, u32 n_outliers, u8 code length L per block
//                         (ceil(m/32) bytes), then the planes of every block with L > 0
//             version 2:  u8 0, i32 q_start, u32 n_outliers, a bitmap of ceil(nblocks/8) bytes
//                         (bit b%8 of byte b/8 set when block b has L > 0; padding bits 0), then
//                         one u8 L in 1..31 per set bit, in block order, then the planes of
//                         those blocks
//             planes of a block: u32 sign plane, L x u32 magnitude planes (plane j holds bit j
//             of each value's |delta|; value i of the block is bit i); after all planes:
//             n_outliers x u16 index (strictly increasing), n_outliers x S exact value.
//   direct    version 3:  u8 4, u32 n_outliers, then bitmap, code lengths, planes and outliers
//                         exactly as a version-2 encoded chunk, except that the planes hold each
//                         value's code q_i itself (no prediction, no q_start): "delta" above
//                         reads q_i. Outliers and the lanes past m in the last block have code 0.
// Version 3 differs from version 2 only by the direct chunk (mode 4); a version-1 or version-2
// stream holding mode 4 is corrupt.
// A chunk table entry of size 0 (version 2) repeats a constant chunk: the chunk is the previous
// chunk's constant value again (m values of it), its CRC field is that constant chunk's CRC,
// and it occupies no bytes. The previous chunk is a constant chunk or itself such a repeat, so
// the bytes it repeats are the 1 + sizeof(S) bytes that end where this chunk would start.
// Whole runs of zero (or any constant) chunks thus cost 8 table bytes each.
//
// Encoders choose, per chunk: a repeat when the chunk and the previous one are constant with
// the same bits, else constant when all its values have the same bits, else (lossy streams)
// direct when its code-length bytes and planes are fewer than the encoded chunk's (the two share
// bitmap and outliers, so: when direct is smaller by more than 4 bytes), else encoded, when not
// larger than raw, else (codec 1) lossless when smaller than raw, else raw. Hence
// max_compressed_size = 52 + 8*ndim + 9*num_chunks + count*sizeof(S).
//
// Why two predictors: Lorenzo residuals shrink smooth data's codes (fields, images), but on
// data without correlation between neighbours (gradients) a residual has twice the variance
// of the code itself, half a bit more per value. The choice is per chunk, from the code lengths
// both would give (benchmarks/predictor_choice.py: +6..12 % ratio on gradient-like noise).
//
// In encoded chunks, deltas are Lorenzo residuals of integer codes q_i = round(x_i / bin) within
// a chunk, q_{-1} = q_start. Outliers (NaN, Inf, |x/bin| too large, or a value whose
// reconstruction would miss eb) are predicted exactly (delta 0; their code is the previous
// value's) and patched with their stored value; lanes past m in the last block repeat the last
// code. |q| <= 2^30 - 1, so every delta and code fits 31 bits (L <= 31).
#pragma once

#include <cstdint>
#include <cstring>

namespace zccl::fz::format {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the stream format is little-endian");

inline constexpr uint8_t kMagic[4] = {'Z', 'C', 'F', 'Z'};
inline constexpr uint8_t kVersion1 = 1;
inline constexpr uint8_t kVersion2 = 2;
inline constexpr uint8_t kVersion = 3;  // what encoders write
inline constexpr size_t kFixedHeaderBytes = 48;
inline constexpr size_t kTableEntryBytes = 8;
inline constexpr size_t kHeaderCrcBytes = 4;
inline constexpr uint8_t kChunkEncoded = 0;
inline constexpr uint8_t kChunkRaw = 1;
inline constexpr uint8_t kChunkConstant = 2;
inline constexpr uint8_t kChunkLossless = 3;
inline constexpr uint8_t kChunkDirect = 4;  // version 3
inline constexpr uint32_t kCodecNone = 0;
inline constexpr uint32_t kCodecShuffleZstd = 1;
inline constexpr size_t kEncodedChunkFixedBytes = 9;  // mode, q_start, n_outliers
inline constexpr size_t kDirectChunkFixedBytes = 5;   // mode, n_outliers

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

// Bytes of the version-2 block bitmap of a chunk with `nblocks` blocks.
inline constexpr uint32_t bitmap_bytes(uint32_t nblocks) { return (nblocks + 7) / 8; }

}  // namespace zccl::fz::format
