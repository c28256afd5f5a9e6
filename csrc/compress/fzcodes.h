// Integer code segments: the quantised form of fZ-light's values, for reductions that add codes
// as integers instead of decoding, adding floats and re-compressing at every hop.
//
// The idea is hZCCL's (Huang et al., SC'24: "reduction on compressed integers"), written from its
// description: when every rank quantises with the same bin, x ~ q * bin, and the sum of the
// ranks' values is approximated by (sum of their codes) * bin. A ring hop then decodes the
// incoming codes (bit planes -> Lorenzo deltas -> prefix sum, no multiply), adds its own codes
// and re-packs the sums; nothing is reconstructed or re-quantised on the way, so the only error
// is each rank quantising its own values once.
//
// A value that cannot be quantised (NaN, +/-Inf, |x / bin| beyond the grid's code limit, or one
// whose reconstruction would miss eb) contributes code 0 and travels as an exact "outlier
// partial": (index, value as float64), summed in float64 with the other ranks' outliers at the
// same index. The decoded value is T(Q * bin + F), F the outlier partial (0 where there is none).
//
// Error (SUM of p ranks' values x_k, in exact arithmetic, per value):
//   the grid's bin has at most 8 significant bits and |q|, |Q| < 2^30, so q * bin and Q * bin are
//   exact in float64; each rank verified |x_k - q_k * bin| <= eb in float64, hence
//   |Q * bin - sum x_k| <= p * eb (ranks that stored the value exactly contribute 0). Rounding
//   on top: the final conversion to T (float32: at most 2^-24 |result|; float64: none), and,
//   at outlier indices only, the float64 additions of the partials.
// Overflow: each rank's |q| <= code_limit = (2^30 - 64) / p, so every partial and final sum has
// |Q| < 2^30 and every Lorenzo delta fits in 31 bits (the packer's planes).
// Determinism: decoding is a pure function of the segment, so every rank that decodes the same
// segment gets the same bits.
//
// Segment layout (little-endian; internal to one collective, never stored):
//   0   4  magic "ZCIQ"
//   4   1  value dtype (1 = float32, 2 = float64: the type the codes are decoded into)
//   5   1  flags: bit 0 set when every code's magnitude is below 2^24 (float32 then decodes in
//          float32 arithmetic, which gives the same bits); other bits zero
//   6   2  zero
//   8   8  bin (float64)
//   16  8  count n (values)
//   24  8  number of outlier partials k
//   32  8  payload bytes (what follows the header)
//   40  4  CRC-32C of header bytes 0-39 and 44-47, then the payload
//   44  4  zero
//   48     payload: a bitmap of ceil(nblocks/8) bytes (bit b%8 of byte b/8 set when block b
//          of 32 values has a length byte: L > 0, or a direct block of zeros); the planes of
//          those blocks in block order (u32 sign plane, L x u32 magnitude planes:
//          fzlight_format.h's block planes of Lorenzo deltas, from the previous value's code, 0
//          before the first; or of the codes themselves in a "direct" block); one length byte
//          per set bit, in block order (after the planes, so the encoder writes in one pass: the
//          decoder finds them from the end): bits 0-5 the code length L (1..32; 0 in a direct
//          block of zero codes, which has no planes), bit 7 set for a direct block, bit 6 zero;
//          then k records of (u32 index, f64 partial), indices strictly increasing.
// Lanes past n in the last block repeat the last code (delta 0).
// Block kinds: codes of uncorrelated data (gradients, and the ranks' sums of them) need fewer
// bits than their deltas, whose variance is twice theirs, while smooth data's deltas need fewer.
// Any block may take either kind (the next block's deltas start from this block's last code,
// whichever kind it took). The encoder decides per group of 16 blocks (fzcodes.cpp,
// kKindGroup): the group's first block is packed both ways and the others take the kind with
// fewer bits there (a tie keeps the previous group's kind). (Format version 3 of
// fzlight_format.h chooses per chunk, for the same reason; segments are never stored, so their
// layout needs no version.)
//
// Torch-free and MPI-free, like the rest of compress/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "fzlight.h"

namespace zccl::fz::codes {

inline constexpr size_t kHeaderBytes = 48;
inline constexpr size_t kOutlierBytes = 12;  // u32 index + f64 partial

// The quantisation grid every rank of one reduction shares.
struct Grid {
  double eb = 0.0;       // per-rank bound, verified in float64
  double bin = 0.0;      // at most 8 significant bits (see above)
  double inv_bin = 0.0;  // 1 / bin rounded; a slip only ever makes an outlier
  double code_limit = 0.0;  // |x / bin| must stay below it
  // float32 values: when bin is a normal float32, codes are found in float32 (x * inv_bin_f,
  // eight lanes at a time) and |Q| < 2^24 decodes as float(Q) * bin_f, which equals the
  // correctly rounded Q * bin (float(Q) and bin_f are exact, the product rounds once). The
  // bound is still verified in float64 against the exact q * bin.
  bool float_path = false;
  float bin_f = 0.0f;
  float inv_bin_f = 0.0f;
  float code_limit_f = 0.0f;  // <= code_limit
  bool sure_path = false;     // float_path lanes passing block::sure_lanes8 skip the check
};

// The grid for bound eb shared by `ranks` ranks; nullopt when eb cannot be met by quantisation
// (eb == 0, not finite, or below float64's smallest normal; the callers then compress the
// float way). Same (eb, ranks) -> same grid on every rank.
std::optional<Grid> make_grid(double eb, int ranks);

// Worst-case segment size for n values: combine() never writes more.
size_t max_segment_bytes(uint64_t n);

// A well-formed segment of another value count than the caller expects (ranks disagree on the
// collective's size).
class CountMismatch : public StreamError {
 public:
  using StreamError::StreamError;
};

// What a segment's header says (validated: magic, dtype, sizes, the payload's CRC).
struct SegmentInfo {
  DType dtype = DType::Float32;
  double bin = 0.0;
  uint64_t count = 0;
  uint64_t outliers = 0;
  bool small_codes = false;  // every code's magnitude is below 2^24
  uint64_t direct_blocks = 0;  // blocks whose planes hold the codes, not Lorenzo deltas
  size_t bytes = 0;  // header + payload
};
// Throws StreamError when the segment is malformed, truncated or corrupted.
SegmentInfo read_segment_info(const uint8_t* src, size_t len);

// Writes to dst (capacity cap >= max_segment_bytes(n)) the segment of (incoming + quantised x):
// every code of `in` plus the code of the same value of x, the outlier partials of both merged.
// in == nullptr: x alone (the first hop). `in` must hold n values of this dtype on this grid
// (CountMismatch for another count, StreamError otherwise). progress, when given, runs every
// 4096 values. `values`, when given (n values; may be x), also gets what decode() of the new
// segment returns, bit for bit (the last hop of a ring, which would otherwise decode its own
// segment). Returns the bytes.
template <class T>
size_t combine(const uint8_t* in, size_t in_len, const T* x, uint64_t n, const Grid& grid,
               uint8_t* dst, size_t cap, const Progress* progress = nullptr,
               T* values = nullptr);

// Decodes a segment of n values into out: out[i] = T(Q_i * bin + F_i).
template <class T>
void decode(const uint8_t* src, size_t len, uint64_t n, const Grid& grid, T* out,
            const Progress* progress = nullptr);

}  // namespace zccl::fz::codes
