// cuSZp-style GPU compressor for float32/float64/float16/bfloat16, writing and reading the
// fZ-light stream format.
//
// Design (after cuSZp, Huang et al., "cuSZp: An Ultra-fast GPU Error-bounded Lossy Compression
// Framework with Optimized End-to-End Performance", SC'23; written from the paper, no code taken):
// one fused kernel quantises, predicts (1-D Lorenzo on integer codes) and bit-plane encodes, and
// places every chunk at its final offset in the same pass through a single-pass global prefix sum
// with decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with Decoupled
// Look-back", NVIDIA TR 2016). One thread block per chunk (chunks are taken in ticket order, so
// the look-back always waits on blocks that are already running); inside a chunk one warp per
// 32-value block: ballots give the sign plane and outlier masks, a warp OR gives the block's code
// length, a 32x32 bit transpose across the warp turns magnitudes into bit planes (and back).
// A chunk is first checked for constancy (one barrier per 256 values, so varied data stops after
// the first 256; a constant chunk also checks the previous chunk, for a repeat). Otherwise it is
// sized both ways, as an encoded chunk (Lorenzo deltas) and as a direct one (the codes
// themselves), for the choice of kind and for the look-back, then the chosen kind is written:
// for chunks whose codes fit in shared memory (the default chunk length) by quantising once into
// shared memory (cuszp_encode_staged.cuh), for larger ones by encoding twice, reading the input
// from a shared-memory copy loaded in one burst of 16-byte loads when the chunk fits (<= 38 KiB),
// else from global memory/L2; the compressed chunk is thus never staged anywhere.
// The block bitmap (versions >= 2) is one byte per thread (8 blocks each), its code-length bytes
// placed by a block-wide scan of the bytes' popcounts. Each chunk's CRC-32C is computed by its block
// (slices per thread folded with the CRC combine operator, crc32c_combine.h); a repeat's is that
// of the constant chunk it repeats. A small kernel then writes the header and its CRC.
// The decoder validates the header and table in one block (offsets by a block-wide scan), then
// one block per chunk (persistent grid) stages the compressed chunk in shared memory (<= 24 KiB),
// checks its CRC and structure, and decodes it a tile of 8 blocks at a time.
//
// Format compatibility: the output is the CPU's ZCCL fZ-light stream, version 3
// (fzlight_format.h), byte for byte: the same quantiser (bin and 1/bin derived on the host exactly
// as fzlight.cpp does, products rounded to nearest without FMA contraction, codes rounded
// ties-to-even), the same strict check |x - x'| <= eb in double, the same outlier rules (NaN, Inf,
// |x/bin| >= 2^30 - 64, or a reconstruction that would miss eb: stored exactly, bit for bit), the
// same per-chunk choice (a repeat when the chunk and the previous one are constant with the same
// bits, else a constant chunk when all values have the same bits, in lossy and lossless streams
// alike, else the direct chunk when its code-length bytes and planes are fewer than the encoded
// chunk's, else the encoded one, either when not larger than raw, else raw), the same block
// bitmap layout, the same CRC-32C per chunk and over the header. The decoder reads versions 1, 2
// and 3 (v1: one code-length byte per block, no constant chunks or repeats, codec field 0; direct
// chunks, mode 4, only in version 3). Float16/bfloat16 (dtypes 3, 4)
// are quantised in float32 like the CPU's: q = rint(float(x) * inv_bin), reconstruction
// narrow(float(q) * bin) rounded to nearest-even into the half type (__float2half_rn; bfloat16 by
// the CPU's integer rounding, which equals __float2bfloat16_rn on every non-NaN value), verified
// against eb in double. Lossless streams (eb below the compute type's smallest normal, or 0):
// the GPU writes codec 0 (raw and constant chunks) for LosslessCodec::None and ::Auto, and
// refuses ::ShuffleZstd (ArgumentError: the GPU has no zstd), so its lossless streams equal a
// CPU's made with codec None. A CPU stream of codec 1 (zstd chunks) is valid but decodes on the
// host only: the decoder and inspect() report Error::LosslessCodecOnHost. A GPU stream decodes
// with fz::decompress and a CPU stream with gpu::decompress; fz::read_info parses the header of a
// GPU stream on the host when the caller has its bytes. The only deliberate difference is in
// what a decoder is told: the GPU decoder gets a buffer bound `len_bound` instead of the exact
// stream length (the length of a device-resident stream is only on the device), so it accepts a
// stream whose recorded total is <= len_bound where the CPU requires equality. Subnormal inputs
// are handled as on the CPU: the encoder's float32 multiply and widening are PTX without .ftz,
// so even -ftz=true/--use_fast_math builds produce the same bytes (setup.py builds with
// -fmad=false and otherwise IEEE defaults; the reduce kernels do assume no flush-to-zero).
//
// Hot path: every call is stream-ordered and allocation-free. The caller owns a device workspace
// (workspace_bytes()); each call clears the part it uses with cudaMemsetAsync on the caller's
// stream, launches its kernels there, and copies its result word (compressed size, error code,
// range) with cudaMemcpyAsync into caller-supplied pinned host memory. Nothing synchronises the
// device or the host: the result is valid once the stream has reached that point (event or
// stream sync by the caller). One workspace serves one call in flight at a time.
//
// Workspace: 256 bytes of control words, then one 8-byte word per chunk plus one (look-back
// status while compressing, chunk offsets while decompressing), at least 16 KiB. A workspace
// sized for (count, chunk_len) can decompress any stream of at most that many chunks; a stream
// with more chunks (a smaller chunk length) sets Error::WorkspaceTooSmall instead of decoding.
//
// Errors: invalid arguments (sizes, null pointers, pageable result pointers, misaligned
// workspace) throw fz::ArgumentError on the host before anything is launched; a failing CUDA call
// throws CudaError with cudaGetErrorString's text. A corrupt, truncated or hostile stream never
// makes the decoder read or write out of bounds: it sets a device error word (the first error
// wins; Error below) that is copied to the caller's pinned int32, and leaves the output partly
// written. A chunk that fails its checks is not written at all.
//
// Half types: compress, decompress, inspect and finite_range take them; decompress_reduce,
// reduce and divide are float32/float64 only (ArgumentError for halves: widen to float32 first).
//
// This header is torch-free, MPI-free and includable without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "fzlight.h"

struct CUstream_st;

namespace zccl::gpu {

using GpuStream = CUstream_st*;  // a cudaStream_t; nullptr is the legacy default stream
using fz::DType;

// A CUDA runtime call failed (message: the call and cudaGetErrorString).
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Device-side decode errors, in the order the checks run (the CPU decoder's order). The codes
// added with version 2 sit at the end of the enum but run at their places: BadCodec beside
// BadReserved, LosslessCodecInLossyStream and LosslessCodecOnHost after BadBin, RepeatNotConstant
// before ChunkCrc, BadConstantSize after BadRawSize, BadBitmapPadding before BadCodeLength.
enum class Error : int32_t {
  Ok = 0,
  Truncated,          // len_bound shorter than the fixed header, or the header/table beyond it
  BadMagic,
  BadVersion,         // not 1, 2 or 3
  BadDType,
  DTypeMismatch,      // a valid dtype, but not the one the caller asked for
  BadBlockLen,
  BadNdim,
  BadReserved,        // version 1: the field at offset 36 is not zero
  BadChunkLen,
  TableTooLarge,      // more chunks than len_bound could hold table entries for
  HeaderCrc,
  BadTotalBytes,      // recorded total larger than len_bound
  BadErrorBound,
  BadBin,
  ShapeMismatch,      // shape overflows or its product is not the count
  CountMismatch,      // more values than the destination holds (reduce: count differs)
  WorkspaceTooSmall,  // more chunks than the workspace was sized for
  BadChunkSize,       // a table entry above the chunk's raw size, or 0 where no repeat may be
  ChunkSizesSum,      // table sizes do not add up to the recorded total
  ChunkCrc,
  BadChunkMode,       // unknown, or not of the stream's version (mode 2 in v1, mode 4 before v3)
  BadRawSize,
  LosslessEncoded,    // an encoded or direct chunk in a stream with bin 0
  ChunkTooShort,
  TooManyOutliers,
  BadCodeLength,
  ChunkSizeMismatch,  // sizes inside an encoded or direct chunk do not add up to its table size
  BadOutlierIndex,
  // Version 2 (appended: the codes above keep their values).
  BadCodec,                    // lossless codec field (header offset 36) above 1
  LosslessCodecInLossyStream,  // a lossless codec named by a stream with a quantisation bin
  LosslessCodecOnHost,         // codec 1 (zstd chunks): a valid stream the GPU cannot decode
  BadConstantSize,             // a constant chunk (mode 2) of other than 1 + sizeof(value) bytes
  RepeatNotConstant,           // a repeat entry (size 0) whose preceding bytes are no constant chunk
  BadBitmapPadding,            // block bitmap bits set past the chunk's last block
};
const char* error_string(int32_t code);

// Elementwise ops of the fused decompress+reduce (the CPU's coll::ReduceOp order). Avg reduces
// like Sum; divide() finishes it. NaN and tie semantics are those of
// csrc/collectives/reduce_kernels.h (MIN/MAX: a NaN in `a` wins, then a NaN in the decoded
// value, ties return `a`). One difference: a SUM involving NaN yields the GPU's canonical NaN
// (0x7fffffff), while x86 propagates an input NaN's payload; both are NaN.
enum class ReduceOp : uint8_t { Sum, Avg, Min, Max };

// Values per chunk and such: the CPU's.
using fz::kBlockLen;
using fz::kDefaultChunkLen;
using fz::kMaxChunkLen;
using fz::max_compressed_size;

// Device workspace for compress/decompress/finite_range of `count` values in chunks of
// `chunk_len`. Throws ArgumentError for an invalid chunk length.
size_t workspace_bytes(DType dt, uint64_t count, uint32_t chunk_len = kDefaultChunkLen);

// Compresses `count` values of `dt` at device pointer `src` into device buffer `dst` (capacity
// `dst_cap` >= max_compressed_size(dt, count, chunk_len, ndim)). params.threads is ignored.
// The stream's size is written to *size_pinned (pinned host memory) when `stream` gets there.
void compress(const void* src, DType dt, uint64_t count, const fz::CompressParams& params,
              uint8_t* dst, size_t dst_cap, void* workspace, size_t ws_bytes, GpuStream stream,
              size_t* size_pinned);

// Decompresses the device-resident stream at `src` (at most `len_bound` bytes readable) into
// `dst`, room for `dst_count` values of `dt` (the stream's dtype must be `dt`). The error code
// (0: success) is written to *err_pinned (pinned host memory) when `stream` gets there. `dst`
// must not overlap the stream or the workspace.
void decompress(const uint8_t* src, size_t len_bound, void* dst, DType dt, uint64_t dst_count,
                void* workspace, size_t ws_bytes, GpuStream stream, int32_t* err_pinned);

// Fused decompress + reduce: out[i] = op(a[i], decoded[i]) for the stream's `count` values
// (which must equal `count`); `a` may be `out` (in-place accumulate) or another buffer.
void decompress_reduce(const uint8_t* src, size_t len_bound, const void* a, void* out, DType dt,
                       uint64_t count, ReduceOp op, void* workspace, size_t ws_bytes,
                       GpuStream stream, int32_t* err_pinned);

// What a device-resident stream's header says, validated on the device (the same checks as the
// decoder, minus the dtype/count/capacity ones). `error` is 0 when the header and table are valid
// and the GPU can decode the stream; a codec-1 (zstd) stream reports LosslessCodecOnHost with its
// header fields filled in (decode it with fz::decompress after copying it to the host).
struct DeviceStreamInfo {  // plain aggregate (no initialisers: it lives in shared memory too)
  int32_t error;
  uint8_t dtype;    // DType code: 1 float32, 2 float64, 3 float16, 4 bfloat16
  uint8_t ndim;
  uint8_t version;  // stream format version (1, 2 or 3)
  uint8_t reserved;
  uint32_t chunk_len;
  uint32_t codec;   // lossless codec (header offset 36): 0 none, 1 zstd (host only)
  uint64_t count;
  uint64_t num_chunks;
  uint64_t header_bytes;
  uint64_t total_bytes;
  double error_bound;
  double bin;
};
void inspect(const uint8_t* src, size_t len_bound, void* workspace, size_t ws_bytes,
             GpuStream stream, DeviceStreamInfo* info_pinned);

// Min and max over the finite values of `src` (device) into *out_pinned (pinned host memory);
// any_finite = 0 when there are none. For relative bounds: eb = rel * (max - min).
struct RangeResult {
  double min;
  double max;
  uint32_t any_finite;
  uint32_t reserved;
};
void finite_range(const void* src, DType dt, uint64_t count, void* workspace, size_t ws_bytes,
                  GpuStream stream, RangeResult* out_pinned);

// Uncompressed elementwise reduce out[i] = op(a[i], b[i]) (same semantics as above; out may alias
// a or b) and the AVG finish x[i] = x[i] / divisor (correctly rounded, as the CPU's divide).
void reduce(void* out, const void* a, const void* b, DType dt, uint64_t count, ReduceOp op,
            GpuStream stream);
void divide(void* x, DType dt, uint64_t count, int divisor, GpuStream stream);

// Batches: job j runs on streams[j % num_streams], in order, each with its own workspace and
// result pointer, so independent buffers (scatter's per-destination blocks, allgather's N-1
// decompressions) overlap on the device. Arguments of every job are checked before any launch.
struct CompressJob {
  const void* src = nullptr;
  DType dtype = DType::Float32;
  uint64_t count = 0;
  fz::CompressParams params;
  uint8_t* dst = nullptr;
  size_t dst_cap = 0;
  void* workspace = nullptr;
  size_t ws_bytes = 0;
  size_t* size_pinned = nullptr;
};
struct DecompressJob {
  const uint8_t* src = nullptr;
  size_t len_bound = 0;
  const void* a = nullptr;  // reduce only: first operand (may equal dst)
  void* dst = nullptr;
  DType dtype = DType::Float32;
  uint64_t count = 0;       // decompress: capacity of dst; reduce: exact count
  bool reduce = false;      // false: plain decompress; true: dst = op(a, decoded)
  ReduceOp op = ReduceOp::Sum;
  void* workspace = nullptr;
  size_t ws_bytes = 0;
  int32_t* err_pinned = nullptr;
};
void compress_batch(const CompressJob* jobs, size_t num_jobs, const GpuStream* streams,
                    size_t num_streams);
void decompress_batch(const DecompressJob* jobs, size_t num_jobs, const GpuStream* streams,
                      size_t num_streams);

}  // namespace zccl::gpu
