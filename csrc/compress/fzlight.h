// fZ-light: a fast, error-bounded lossy compressor for float32/float64 on the CPU.
//
// Written from the published design (Huang et al., "ZCCL: significantly improving collective
// communication with error-bounded lossy compression", and the SZp/fZ-light descriptions): fused
// quantization + 1-D Lorenzo prediction on integer codes, 32-value blocks with a per-block code
// length, a sign plane and fixed-length bit planes, all-zero blocks stored as one byte, and OpenMP
// over independent chunks. Beyond that design this implementation guarantees a *strict* bound:
// every finite value satisfies |x - x'| <= eb when computed in double with the decoder's own
// arithmetic (the encoder replays the decoder and stores any value that would miss exactly).
//
// This header is torch-free and MPI-free: pointers, counts, an error bound, a byte stream.
// The stream layout is documented in fzlight_format.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace zccl::fz {

// Stream value types. Float16/BFloat16 are quantised in float32 and stored in 2 bytes: the
// stream is measured against (and raw chunks hold) the 2-byte input.
enum class DType : uint8_t { Float32 = 1, Float64 = 2, Float16 = 3, BFloat16 = 4 };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);

// Values per chunk; chunks are the unit of parallelism, of pipelining and of random access.
inline constexpr uint32_t kDefaultChunkLen = 5120;
inline constexpr uint32_t kBlockLen = 32;        // values per block (one code length per block)
inline constexpr uint32_t kMaxChunkLen = 65536;  // outlier indices are stored as uint16
inline constexpr uint32_t kMaxDims = 64;         // shape metadata carried in the header

// Raised for every malformed, truncated or corrupted stream and for unusable arguments.
class StreamError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ArgumentError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Called between chunks by the pipelined (single-threaded) paths: (chunks_done, chunks_total).
// The collectives use it to poll MPI progress while compressing.
using Progress = std::function<void(uint64_t, uint64_t)>;

// How an error bound of 0 (lossless) codes its chunks.
enum class LosslessCodec : uint32_t {
  None = 0,         // raw chunks (and constant chunks): no CPU time spent
  ShuffleZstd = 1,  // byte planes + zstd level 1 per chunk (see fzlight_format.h)
  Auto = 255,       // ShuffleZstd when this build has zstd, else None (never in a stream)
};

// True when this build can write and read LosslessCodec::ShuffleZstd (built with libzstd).
bool lossless_codec_available(LosslessCodec codec);

struct CompressParams {
  double error_bound = 0.0;              // absolute bound; 0 means lossless (values stored exactly)
  LosslessCodec lossless_codec = LosslessCodec::Auto;  // used only when error_bound == 0
  uint32_t chunk_len = kDefaultChunkLen; // multiple of kBlockLen, in [kBlockLen, kMaxChunkLen]
  int threads = 0;                       // 0: OpenMP default (with progress: 1, see compress)
  // Shape recorded in the header: nullopt means 1-D {count}; an empty vector means 0-d (count 1).
  std::optional<std::vector<uint64_t>> shape;
};

struct StreamInfo {
  uint8_t version = 0;  // format version (fzlight_format.h)
  DType dtype = DType::Float32;
  LosslessCodec lossless_codec = LosslessCodec::None;
  uint64_t count = 0;
  double error_bound = 0.0;
  uint32_t chunk_len = 0;
  uint64_t num_chunks = 0;
  std::vector<uint64_t> shape;
  size_t header_bytes = 0;  // header + shape + chunk table
  size_t total_bytes = 0;   // whole stream, as recorded in the chunk table
};

// Worst-case stream size for (dtype, count, chunk_len, ndim): compress() never writes more.
size_t max_compressed_size(DType dt, uint64_t count, uint32_t chunk_len = kDefaultChunkLen,
                           size_t ndim = 1);

// Compresses `count` values at `src` into `dst` (capacity `dst_cap`, which must be at least
// max_compressed_size). Returns the stream size in bytes. With `progress` (PIPE-fZ-light) and
// params.threads <= 1, chunks are compressed one after another on the calling thread and
// `progress` runs after each chunk; with threads > 1 the chunks are split among that many
// OpenMP threads and the calling thread runs `progress` between its own chunks (the collectives
// keep MPI progressing while the other threads code). The stream is the same either way.
size_t compress(const void* src, DType dt, uint64_t count, const CompressParams& params,
                uint8_t* dst, size_t dst_cap, const Progress* progress = nullptr);

// Parses and validates the header and chunk table (sizes, checksums of the metadata, totals).
StreamInfo read_info(const uint8_t* src, size_t len);

// Decompresses the whole stream into `dst` (room for `dst_count` values of the stream's dtype).
// Verifies every chunk's checksum and structure; throws StreamError on any inconsistency.
// `progress` and `threads` as for compress (threads <= 1 with progress: the calling thread only).
void decompress(const uint8_t* src, size_t len, void* dst, uint64_t dst_count, int threads = 0,
                const Progress* progress = nullptr);

// dst[i] = addend[i] + x'[i] (x' what decompress writes; one rounding, as the separate sum
// would give) for a float32 or float64 stream, each chunk added while it is still in cache:
// the reductions' decode-and-add in one pass. `dst` may be `addend` (elementwise); `addend`
// needs the stream's count of values of its dtype. Other dtypes throw ArgumentError. Threads,
// progress and stream errors as for decompress (after an error dst is partly written).
void decompress_add(const uint8_t* src, size_t len, const void* addend, void* dst,
                    uint64_t dst_count, int threads = 0, const Progress* progress = nullptr);

// One hop of the ring reduction in one pass: compresses addend + x' (x' the values of stream
// `src`, added as decompress_add does) with `params` into dst, chunk by chunk, without writing
// the sum anywhere. The stream equals compress(decompress_add(src, addend), params) byte for
// byte, for any thread count. Takes float32/float64 streams of `count` values whose chunk length
// is params.chunk_len (ArgumentError otherwise); dst and progress as for compress, stream errors
// as for decompress (StreamError; dst is then partly written).
size_t recompress_add(const uint8_t* src, size_t len, const void* addend, uint64_t count,
                      const CompressParams& params, uint8_t* dst, size_t dst_cap,
                      const Progress* progress = nullptr);

// Decompresses chunk `index` alone into `dst` (room for chunk_len values; returns values written).
// Throws std::out_of_range (IndexError in Python) when index >= num_chunks. Parses the header
// and table on each call: for many chunks, prefer decompress().
uint64_t decompress_chunk(const uint8_t* src, size_t len, uint64_t index, void* dst,
                          uint64_t dst_count);

// Min and max over the finite values (NaN and +/-Inf skipped); `any_finite` is false when there
// are none. Used to turn a relative bound into an absolute one: eb = rel * (max - min).
struct FiniteRange {
  double min = 0.0;
  double max = 0.0;
  bool any_finite = false;
};
FiniteRange finite_range(const void* src, DType dt, uint64_t count, int threads = 0);

// The compressor's quantisation grid without the stream: writes to `dst` the value the decoder
// reconstructs for each quantised value, x' = C(q) * bin (rounded into the storage type), and x
// itself for every value the encoder stores exactly (NaN, +/-Inf, code overflow, or a rounding
// that would miss the bound), so |x - x'| <= eb in double for every value, as in compress().
// It equals decompress(compress(x, eb)) except in chunks the encoder keeps raw (incompressible)
// or as a constant, which decode to x itself. eb = 0 (or below the smallest normal of the
// compute type): dst = x. `residual` (optional, same type): x - x' in the storage type, 0 where x is kept exactly (so
// +/-Inf leave 0, not NaN). `dst`
// may be `src`. Used by error feedback, where the round trip only serves to find x'.
void quantize(const void* src, DType dt, uint64_t count, double error_bound, void* dst,
              void* residual = nullptr, int threads = 0);

// The quantiser's bin and 1/bin for `error_bound`, as compress and quantize derive them, each
// rounded to dt's compute type (float for float32/float16/bfloat16, double for float64) and
// returned widened to double. False (and nothing written) when values are kept exactly instead:
// a bound below the compute type's smallest normal, or 0. Lets another implementation of the
// quantiser (the elementwise one zccl_torch.quantize runs on CUDA tensors) use the same bins.
bool quantizer_bins(DType dt, double error_bound, double& bin, double& inv_bin);

// float32 <-> float16/bfloat16 (`half` names which), round to nearest even when narrowing (as
// the half streams' reconstruction does); widening is exact. Used where values accumulate in
// float32 but travel as half streams (the reductions of half tensors).
void narrow_to_half(const float* src, DType half, uint64_t n, void* dst);
void widen_half(const void* src, DType half, uint64_t n, float* dst);

// Number of threads used when `threads` <= 0.
int default_threads();

}  // namespace zccl::fz
