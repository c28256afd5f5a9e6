// Host side of the GPU codec: argument checks, quantiser set-up (exactly fzlight.cpp's), workspace
// layout, launches. Device code: cuszp_kernels.cuh. Contracts: cuszp.h.
#include "cuszp.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cuszp_encode_staged.cuh"
#include "cuszp_kernels.cuh"
#include "fzlight_format.h"

namespace zccl::gpu {
namespace {

namespace fmt = fz::format;
using kern::Control;
using kern::kControlBytes;
using kern::kThreads;

static_assert(std::is_same_v<cudaStream_t, GpuStream>, "GpuStream must be cudaStream_t");
static_assert(sizeof(size_t) == 8, "the device writes the compressed size as 8 bytes");

// fzlight.cpp's kBinShrink and make_quantizer, verbatim in effect: the bins must be the same
// numbers for the streams to be the same bytes.
constexpr double kBinShrink = 1.0 - 1.0 / 1024.0;

template <class T>
bool make_quantizer(double eb, T& bin, T& inv_bin) {
  if (!(eb >= static_cast<double>(std::numeric_limits<T>::min()))) return false;
  const double b = std::min(2.0 * eb * kBinShrink, static_cast<double>(std::numeric_limits<T>::max()));
  bin = static_cast<T>(b);
  inv_bin = static_cast<T>(1.0 / static_cast<double>(bin));
  return true;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw CudaError(std::string("zccl gpu: ") + what + ": " + cudaGetErrorString(e));
  }
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

[[noreturn]] void bad_arg(const std::string& what) { throw fz::ArgumentError("zccl gpu: " + what); }

// Calls f(K{}) with the storage kind of dt (cuszp_lane.h): float, double, lane::Half,
// lane::BFloat16.
template <class F>
void with_kind(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(lane::Half{});
    case DType::BFloat16: return f(lane::BFloat16{});
  }
  bad_arg("unknown dtype code " + std::to_string(static_cast<int>(dt)));
}

bool is_half(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16; }

// The elementwise reduce paths (reduce, divide, decompress_reduce) are float32/float64 only.
void require_not_half(DType dt, const char* what) {
  if (is_half(dt)) {
    bad_arg(std::string(what) + " takes float32 or float64, not " + fz::dtype_name(dt) +
            " (widen to float32 first)");
  }
}

// Result pointers must be pinned (or managed): a pageable target would make cudaMemcpyAsync
// synchronous, which the hot path promises never to be.
void require_pinned(const void* p, const char* what) {
  if (p == nullptr) bad_arg(std::string(what) + " is null");
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  if (attr.type != cudaMemoryTypeHost && attr.type != cudaMemoryTypeManaged) {
    bad_arg(std::string(what) + " must be pinned host memory (cudaHostAlloc/cudaMallocHost)");
  }
}

uint64_t workspace_words(uint64_t chunks) {
  return std::max<uint64_t>(chunks + 1, kern::kMinWorkspaceWords);
}

// Chunks whose offsets a workspace of ws_bytes can hold; throws when it is not even minimal.
uint64_t workspace_chunks(void* ws, size_t ws_bytes) {
  if (ws == nullptr) bad_arg("workspace is null");
  if (reinterpret_cast<uintptr_t>(ws) % 16 != 0) bad_arg("workspace must be 16-byte aligned");
  const size_t min_bytes = kControlBytes + 8 * kern::kMinWorkspaceWords;
  if (ws_bytes < min_bytes) {
    bad_arg("workspace of " + std::to_string(ws_bytes) + " bytes is below the minimum " +
            std::to_string(min_bytes));
  }
  return (ws_bytes - kControlBytes) / 8 - 1;
}

Control* control(void* ws) { return static_cast<Control*>(ws); }
unsigned long long* words(void* ws) {
  return reinterpret_cast<unsigned long long*>(static_cast<uint8_t*>(ws) + kControlBytes);
}

// Multiprocessors of the current device and resident blocks per SM of a kernel, cached (the
// queries cost microseconds, a call should not).
int sm_count() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  static std::mutex lock;
  static std::map<int, int> cache;
  const std::lock_guard<std::mutex> guard(lock);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  int n = 0;
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  cache[dev] = std::max(1, n);
  return cache[dev];
}

// A variant to measure (scripts/gpu_build_variant.sh DIR -DZCCL_GPU_MAX_SHARED_CARVEOUT=1): the
// codec kernels prefer the largest shared-memory carveout, so that shared memory stops capping
// their resident blocks (Nsight Compute on an H200 found the decoder held to 3 blocks per
// multiprocessor by shared memory and by registers alike; benchmarks/RESULTS.md). Off until a GPU
// session has timed it.
#ifndef ZCCL_GPU_MAX_SHARED_CARVEOUT
#define ZCCL_GPU_MAX_SHARED_CARVEOUT 0
#endif
constexpr bool kMaxSharedCarveout = ZCCL_GPU_MAX_SHARED_CARVEOUT != 0;

int blocks_per_sm(const void* kernel, size_t dyn_smem) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  static std::mutex lock;
  static std::map<std::tuple<int, const void*, size_t>, int> cache;
  const std::lock_guard<std::mutex> guard(lock);
  const auto key = std::make_tuple(dev, kernel, dyn_smem);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (kMaxSharedCarveout) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared),
          "cudaFuncSetAttribute (shared memory carveout)");
  }
  int n = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, dyn_smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  cache[key] = std::max(1, n);
  return cache[key];
}

// Persistent grid: at most what fits on the device at once, at most `work` blocks.
unsigned grid_for(const void* kernel, size_t dyn_smem, uint64_t work) {
  const uint64_t resident = static_cast<uint64_t>(sm_count()) * blocks_per_sm(kernel, dyn_smem);
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min(resident, work)));
}

// Elementwise kernels: enough blocks to fill the device a few times over, grid-stride beyond.
unsigned grid_elementwise(uint64_t n) {
  const uint64_t want = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(want, 32ull * sm_count())));
}

// Shared memory for staging a chunk, within the 48 KiB a block gets without opting in (static
// and dynamic together). encode_kernel's input chunk, beside its ~9.7 KiB static (EncodeShared:
// two code-length arrays, one per chunk kind, since format version 3): 38 KiB, float32 chunks of
// up to 9,728 values. The decoder's compressed chunk (kStageBudget below), beside ~15.4 KiB
// static; larger chunks are read from global memory.
constexpr size_t kCacheBudget = 38 * 1024;
static_assert(sizeof(kern::EncodeShared) + kCacheBudget <= 48 * 1024,
              "encode_kernel's static shared memory and input cache exceed 48 KiB");
// encode_staged_kernel (one quantisation per value, no barrier inside its passes) for chunks
// whose codes fit in this much dynamic shared memory (chunks of up to 8,960 values; the default
// is 5,120), encode_kernel for larger ones. -DZCCL_GPU_STAGED_ENCODER=0 builds the previous
// encoder alone, to compare the two in one GPU run (scripts/gpu_build_variant.sh).
#ifndef ZCCL_GPU_STAGED_ENCODER
#define ZCCL_GPU_STAGED_ENCODER 1
#endif
constexpr bool kStagedEncoder = ZCCL_GPU_STAGED_ENCODER != 0;
constexpr size_t kCodesBudget = 40 * 1024;
static_assert(kern::staged_smem_bytes(fz::kDefaultChunkLen) <= kCodesBudget,
              "the default chunk length must take the staged encoder");
static_assert(kern::staged_smem_bytes(8960) <= kCodesBudget && kern::staged_smem_bytes(8992) > kCodesBudget,
              "the staged encoder's largest chunk, as the comment above says");
// The staged encoder's scan packs a chunk's payload bytes and outliers in 24 bits each: both are
// below its shared-memory size.
static_assert(kCodesBudget < (size_t{1} << 24), "staged chunks' payload and outliers must fit 24 bits");
constexpr uint32_t kStageBudget = 24 * 1024;

// ------------------------------------------------------------------------------------------
// Compress.

struct CompressPlan {
  std::vector<uint64_t> shape;
};

CompressPlan check_compress(const void* src, DType dt, uint64_t count, const fz::CompressParams& p,
                            const uint8_t* dst, size_t dst_cap, void* ws, size_t ws_bytes,
                            size_t* size_pinned) {
  fz::dtype_size(dt);  // throws for an unknown dtype
  if (!std::isfinite(p.error_bound) || p.error_bound < 0) {
    bad_arg("error bound must be finite and >= 0, got " + std::to_string(p.error_bound));
  }
  // Lossless streams: Auto and None give codec 0 (raw and constant chunks); the GPU has no zstd.
  if (p.lossless_codec != fz::LosslessCodec::None && p.lossless_codec != fz::LosslessCodec::Auto &&
      p.lossless_codec != fz::LosslessCodec::ShuffleZstd) {
    bad_arg("unknown lossless codec " + std::to_string(static_cast<uint32_t>(p.lossless_codec)));
  }
  if (p.error_bound == 0.0 && p.lossless_codec == fz::LosslessCodec::ShuffleZstd) {
    bad_arg("the GPU encoder has no zstd lossless codec: use LosslessCodec::None or Auto (raw and "
            "constant chunks), or compress on the host with fz::compress");
  }
  CompressPlan plan;
  plan.shape = p.shape ? *p.shape : std::vector<uint64_t>{count};
  if (plan.shape.size() > fz::kMaxDims) bad_arg("at most 64 dimensions");
  uint64_t product = 1;
  for (uint64_t d : plan.shape) {
    if (d != 0 && product > std::numeric_limits<uint64_t>::max() / d) bad_arg("shape overflows 64 bits");
    product *= d;
  }
  if (product != count) bad_arg("shape does not match the element count");
  // Also validates chunk_len (throws ArgumentError).
  const size_t need = fz::max_compressed_size(dt, count, p.chunk_len, plan.shape.size());
  if (dst == nullptr || dst_cap < need) {
    bad_arg("destination holds " + std::to_string(dst_cap) + " bytes, compression may need " +
            std::to_string(need));
  }
  if (src == nullptr && count > 0) bad_arg("null source pointer");
  const uint64_t chunks = fmt::num_chunks(count, p.chunk_len);
  if (workspace_chunks(ws, ws_bytes) < chunks) {
    bad_arg("workspace of " + std::to_string(ws_bytes) + " bytes is too small: " +
            std::to_string(workspace_bytes(dt, count, p.chunk_len)) + " needed");
  }
  require_pinned(size_pinned, "size_pinned");
  return plan;
}

template <class K>
void launch_compress(const void* src, uint64_t count, const fz::CompressParams& p,
                     const std::vector<uint64_t>& shape, uint8_t* dst, void* ws, cudaStream_t s,
                     size_t* size_pinned) {
  using S = typename lane::Kind<K>::S;
  using C = typename lane::Kind<K>::C;  // halves are quantised in float32, as on the CPU
  C bin = 0, inv_bin = 0;
  const bool lossy = make_quantizer<C>(p.error_bound, bin, inv_bin);
  const uint32_t cl = p.chunk_len;
  const uint64_t chunks = fmt::num_chunks(count, cl);
  const uint64_t table_off = fmt::kFixedHeaderBytes + 8 * shape.size();
  const uint64_t header_bytes = fmt::header_bytes(shape.size(), chunks);
  Control* ctl = control(ws);
  check(cudaMemsetAsync(ws, 0, kControlBytes + 8 * chunks, s), "cudaMemsetAsync");

  if (chunks > 0) {
    kern::EncodeArgs<K> a{};
    a.src = static_cast<const S*>(src);
    a.dst = dst;
    a.count = count;
    a.num_chunks = chunks;
    a.data_base = header_bytes;
    a.table_off = table_off;
    a.chunk_len = cl;
    const size_t cache_bytes = static_cast<size_t>(cl) * sizeof(S);
    a.cache_values = cache_bytes <= kCacheBudget ? cl : 0;
    a.bin = bin;
    a.inv_bin = inv_bin;
    a.eb = p.error_bound;
    a.lossy = lossy ? 1 : 0;
    a.ctl = ctl;
    a.status = words(ws);
    const size_t staged = kern::staged_smem_bytes(cl);
    if (kStagedEncoder && staged <= kCodesBudget) {
      const void* fn = reinterpret_cast<const void*>(&kern::encode_staged_kernel<K>);
      kern::encode_staged_kernel<K><<<grid_for(fn, staged, chunks), kThreads, staged, s>>>(a);
      check_launch("encode_staged_kernel");
    } else {
      const size_t dyn = a.cache_values != 0 ? cache_bytes : 0;
      const void* fn = reinterpret_cast<const void*>(&kern::encode_kernel<K>);
      kern::encode_kernel<K><<<grid_for(fn, dyn, chunks), kThreads, dyn, s>>>(a);
      check_launch("encode_kernel");
    }
  }

  // The fixed header exactly as fzlight.cpp's write_header (total bytes filled on the device).
  kern::FinalizeArgs f{};
  f.dst = dst;
  f.num_chunks = chunks;
  f.header_bytes = header_bytes;
  f.fixed_len = static_cast<uint32_t>(table_off);
  std::copy(fmt::kMagic, fmt::kMagic + 4, f.fixed);
  f.fixed[4] = fmt::kVersion;
  f.fixed[5] = lane::Kind<K>::kDType;
  f.fixed[6] = static_cast<uint8_t>(fz::kBlockLen);
  f.fixed[7] = static_cast<uint8_t>(shape.size());
  fmt::store<uint64_t>(f.fixed + 8, count);
  fmt::store<double>(f.fixed + 16, p.error_bound);
  fmt::store<double>(f.fixed + 24, lossy ? static_cast<double>(bin) : 0.0);
  fmt::store<uint32_t>(f.fixed + 32, cl);
  fmt::store<uint32_t>(f.fixed + 36, fmt::kCodecNone);
  for (size_t d = 0; d < shape.size(); ++d) fmt::store<uint64_t>(f.fixed + 48 + 8 * d, shape[d]);
  f.ctl = ctl;
  f.status = words(ws);
  kern::finalize_kernel<<<1, kThreads, 0, s>>>(f);
  check_launch("finalize_kernel");
  check(cudaMemcpyAsync(size_pinned, &ctl->size, sizeof(size_t), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync(size)");
}

void run_compress(const CompressJob& j, const CompressPlan& plan, cudaStream_t s) {
  with_kind(j.dtype, [&](auto kind) {
    launch_compress<decltype(kind)>(j.src, j.count, j.params, plan.shape, j.dst, j.workspace, s,
                                    j.size_pinned);
  });
}

// ------------------------------------------------------------------------------------------
// Decompress.

void check_decompress(const DecompressJob& j) {
  fz::dtype_size(j.dtype);
  if (j.src == nullptr) bad_arg("null stream pointer");
  if (j.dst == nullptr && j.count > 0) bad_arg("null destination pointer");
  if (j.reduce && j.a == nullptr && j.count > 0) bad_arg("null reduce operand");
  if (j.reduce && static_cast<int>(j.op) > static_cast<int>(ReduceOp::Max)) bad_arg("unknown reduce op");
  if (j.reduce) require_not_half(j.dtype, "decompress_reduce");
  workspace_chunks(j.workspace, j.ws_bytes);
  require_pinned(j.err_pinned, "err_pinned");
}

// parse_kernel into the workspace: header checks + chunk offsets.
void launch_parse(const uint8_t* src, size_t len_bound, int want_dtype, int count_rule,
                  uint64_t dst_count, void* ws, size_t ws_bytes, cudaStream_t s) {
  check(cudaMemsetAsync(ws, 0, kControlBytes, s), "cudaMemsetAsync");
  kern::ParseArgs a{};
  a.src = src;
  a.len_bound = len_bound;
  a.want_dtype = want_dtype;
  a.count_rule = count_rule;
  a.dst_count = dst_count;
  a.cap_chunks = workspace_chunks(ws, ws_bytes);
  a.ctl = control(ws);
  a.offsets = words(ws);
  kern::parse_kernel<<<1, kThreads, 0, s>>>(a);
  check_launch("parse_kernel");
}

template <class K, kern::Mode kMode>
void launch_decode(const DecompressJob& j, cudaStream_t s) {
  using B = typename lane::Kind<K>::S;
  kern::DecodeArgs<K> a{};
  a.src = j.src;
  a.a = static_cast<const B*>(j.a);
  a.out = static_cast<B*>(j.dst);
  a.ctl = control(j.workspace);
  a.offsets = words(j.workspace);
  // The chunk count is on the device: bound it by the workspace and by the smallest chunks
  // (32 values) that could fill the destination.
  const uint64_t bound =
      std::min(workspace_chunks(j.workspace, j.ws_bytes), (j.count + fz::kBlockLen - 1) / fz::kBlockLen);
  a.stage_bytes = kStageBudget;
  const size_t dyn = kStageBudget + kern::kStageSlack;
  const void* fn = reinterpret_cast<const void*>(&kern::decode_kernel<K, kMode>);
  kern::decode_kernel<K, kMode><<<grid_for(fn, dyn, bound), kThreads, dyn, s>>>(a);
  check_launch("decode_kernel");
}

template <class K>
void launch_decode_typed(const DecompressJob& j, cudaStream_t s) {
  if constexpr (lane::kIsHalf<K>) {
    launch_decode<K, kern::Mode::Store>(j, s);  // check_decompress refused a half reduce
  } else {
    if (!j.reduce) return launch_decode<K, kern::Mode::Store>(j, s);
    switch (j.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return launch_decode<K, kern::Mode::Sum>(j, s);
      case ReduceOp::Min: return launch_decode<K, kern::Mode::Min>(j, s);
      case ReduceOp::Max: return launch_decode<K, kern::Mode::Max>(j, s);
    }
  }
}

void run_decompress(const DecompressJob& j, cudaStream_t s) {
  launch_parse(j.src, j.len_bound, static_cast<int>(j.dtype), j.reduce ? 2 : 1, j.count, j.workspace,
               j.ws_bytes, s);
  with_kind(j.dtype, [&](auto kind) { launch_decode_typed<decltype(kind)>(j, s); });
  Control* ctl = control(j.workspace);
  check(cudaMemcpyAsync(j.err_pinned, &ctl->err, sizeof(int32_t), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync(err)");
}

template <class T>
void launch_reduce(void* out, const void* a, const void* b, uint64_t n, ReduceOp op, cudaStream_t s) {
  using B = typename kern::Bits<T>::type;
  B* o = static_cast<B*>(out);
  const B* x = static_cast<const B*>(a);
  const B* y = static_cast<const B*>(b);
  const unsigned grid = grid_elementwise(n);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: kern::reduce_kernel<T, kern::Mode::Sum><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
    case ReduceOp::Min: kern::reduce_kernel<T, kern::Mode::Min><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
    case ReduceOp::Max: kern::reduce_kernel<T, kern::Mode::Max><<<grid, kThreads, 0, s>>>(o, x, y, n); break;
  }
  check_launch("reduce_kernel");
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Public API.

const char* error_string(int32_t code) {
  switch (static_cast<Error>(code)) {
    case Error::Ok: return "ok";
    case Error::Truncated: return "stream ends inside its header or chunk table";
    case Error::BadMagic: return "bad magic (not a zccl fZ-light stream)";
    case Error::BadVersion: return "unsupported format version";
    case Error::BadDType: return "unknown dtype code";
    case Error::DTypeMismatch: return "stream dtype differs from the requested dtype";
    case Error::BadBlockLen: return "unsupported block length";
    case Error::BadNdim: return "ndim exceeds 64";
    case Error::BadReserved: return "reserved header field is not zero";
    case Error::BadChunkLen: return "invalid chunk length";
    case Error::TableTooLarge: return "chunk table larger than the stream";
    case Error::HeaderCrc: return "header checksum mismatch";
    case Error::BadTotalBytes: return "recorded stream size exceeds the buffer";
    case Error::BadErrorBound: return "invalid error bound";
    case Error::BadBin: return "invalid quantisation bin";
    case Error::ShapeMismatch: return "shape does not match the element count";
    case Error::CountMismatch: return "stream count does not fit the destination";
    case Error::WorkspaceTooSmall: return "stream has more chunks than the workspace was sized for";
    case Error::BadChunkSize: return "a chunk has an impossible size";
    case Error::ChunkSizesSum: return "chunk sizes do not add up to the stream size";
    case Error::ChunkCrc: return "chunk checksum mismatch";
    case Error::BadChunkMode: return "unknown chunk mode";
    case Error::BadRawSize: return "raw chunk has the wrong size";
    case Error::LosslessEncoded: return "encoded chunk in a lossless stream";
    case Error::ChunkTooShort: return "chunk shorter than its header";
    case Error::TooManyOutliers: return "more outliers than values";
    case Error::BadCodeLength: return "code length out of range";
    case Error::ChunkSizeMismatch: return "sizes inside a chunk do not add up";
    case Error::BadOutlierIndex: return "outlier index out of order or out of range";
    case Error::BadCodec: return "unknown lossless codec";
    case Error::LosslessCodecInLossyStream: return "lossless codec in a lossy stream";
    case Error::LosslessCodecOnHost:
      return "stream uses the zstd lossless codec, which decodes on the host only (fz::decompress)";
    case Error::BadConstantSize: return "constant chunk has the wrong size";
    case Error::RepeatNotConstant: return "a chunk repeats a chunk that is not constant";
    case Error::BadBitmapPadding: return "block bitmap has bits past the last block";
  }
  return "unknown error code";
}

size_t workspace_bytes(DType dt, uint64_t count, uint32_t chunk_len) {
  fz::dtype_size(dt);
  fz::max_compressed_size(dt, count, chunk_len);  // validates chunk_len and count
  const uint64_t bytes = kControlBytes + 8 * workspace_words(fmt::num_chunks(count, chunk_len));
  return static_cast<size_t>((bytes + 255) / 256 * 256);
}

// The single-job calls: a batch of one.

void compress(const void* src, DType dt, uint64_t count, const fz::CompressParams& params,
              uint8_t* dst, size_t dst_cap, void* workspace, size_t ws_bytes, GpuStream stream,
              size_t* size_pinned) {
  const CompressJob j{src, dt, count, params, dst, dst_cap, workspace, ws_bytes, size_pinned};
  compress_batch(&j, 1, &stream, 1);
}

void decompress(const uint8_t* src, size_t len_bound, void* dst, DType dt, uint64_t dst_count,
                void* workspace, size_t ws_bytes, GpuStream stream, int32_t* err_pinned) {
  const DecompressJob j{src, len_bound, /*a=*/nullptr, dst, dt, dst_count, /*reduce=*/false,
                        ReduceOp::Sum, workspace, ws_bytes, err_pinned};
  decompress_batch(&j, 1, &stream, 1);
}

void decompress_reduce(const uint8_t* src, size_t len_bound, const void* a, void* out, DType dt,
                       uint64_t count, ReduceOp op, void* workspace, size_t ws_bytes,
                       GpuStream stream, int32_t* err_pinned) {
  const DecompressJob j{src, len_bound, a, out, dt, count, /*reduce=*/true, op,
                        workspace, ws_bytes, err_pinned};
  decompress_batch(&j, 1, &stream, 1);
}

void compress_batch(const CompressJob* jobs, size_t num_jobs, const GpuStream* streams,
                    size_t num_streams) {
  if (num_jobs == 0) return;
  if (jobs == nullptr) bad_arg("null job array");
  if (streams == nullptr || num_streams == 0) bad_arg("no streams given");
  std::vector<CompressPlan> plans;
  plans.reserve(num_jobs);
  for (size_t i = 0; i < num_jobs; ++i) {
    const CompressJob& j = jobs[i];
    plans.push_back(check_compress(j.src, j.dtype, j.count, j.params, j.dst, j.dst_cap, j.workspace,
                                   j.ws_bytes, j.size_pinned));
  }
  for (size_t i = 0; i < num_jobs; ++i) run_compress(jobs[i], plans[i], streams[i % num_streams]);
}

void decompress_batch(const DecompressJob* jobs, size_t num_jobs, const GpuStream* streams,
                      size_t num_streams) {
  if (num_jobs == 0) return;
  if (jobs == nullptr) bad_arg("null job array");
  if (streams == nullptr || num_streams == 0) bad_arg("no streams given");
  for (size_t i = 0; i < num_jobs; ++i) check_decompress(jobs[i]);
  for (size_t i = 0; i < num_jobs; ++i) run_decompress(jobs[i], streams[i % num_streams]);
}

void inspect(const uint8_t* src, size_t len_bound, void* workspace, size_t ws_bytes,
             GpuStream stream, DeviceStreamInfo* info_pinned) {
  if (src == nullptr) bad_arg("null stream pointer");
  workspace_chunks(workspace, ws_bytes);
  require_pinned(info_pinned, "info_pinned");
  launch_parse(src, len_bound, 0, 0, 0, workspace, ws_bytes, stream);
  check(cudaMemcpyAsync(info_pinned, &control(workspace)->info, sizeof(DeviceStreamInfo),
                        cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(info)");
}

void finite_range(const void* src, DType dt, uint64_t count, void* workspace, size_t ws_bytes,
                  GpuStream stream, RangeResult* out_pinned) {
  fz::dtype_size(dt);
  if (src == nullptr && count > 0) bad_arg("null source pointer");
  workspace_chunks(workspace, ws_bytes);
  require_pinned(out_pinned, "out_pinned");
  auto* partial = reinterpret_cast<double*>(words(workspace));
  const int blocks = static_cast<int>(
      std::max<uint64_t>(1, std::min<uint64_t>(kern::kRangeMaxBlocks, (count + 4 * kThreads - 1) / (4 * kThreads))));
  with_kind(dt, [&](auto kind) {
    using K = decltype(kind);
    kern::range_partial_kernel<K><<<blocks, kThreads, 0, stream>>>(
        static_cast<const typename lane::Kind<K>::S*>(src), count, partial);
  });
  check_launch("range_partial_kernel");
  kern::range_final_kernel<<<1, 32, 0, stream>>>(partial, blocks, control(workspace));
  check_launch("range_final_kernel");
  check(cudaMemcpyAsync(out_pinned, &control(workspace)->range, sizeof(RangeResult),
                        cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(range)");
}

void reduce(void* out, const void* a, const void* b, DType dt, uint64_t count, ReduceOp op,
            GpuStream stream) {
  fz::dtype_size(dt);
  require_not_half(dt, "reduce");
  if (count == 0) return;
  if (out == nullptr || a == nullptr || b == nullptr) bad_arg("null pointer");
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::Max)) bad_arg("unknown reduce op");
  if (dt == DType::Float32) {
    launch_reduce<float>(out, a, b, count, op, stream);
  } else {
    launch_reduce<double>(out, a, b, count, op, stream);
  }
}

void divide(void* x, DType dt, uint64_t count, int divisor, GpuStream stream) {
  fz::dtype_size(dt);
  require_not_half(dt, "divide");
  if (count == 0) return;
  if (x == nullptr) bad_arg("null pointer");
  if (divisor <= 0) bad_arg("divisor must be positive");
  const unsigned grid = grid_elementwise(count);
  if (dt == DType::Float32) {
    kern::divide_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<float*>(x), count,
                                                              static_cast<float>(divisor));
  } else {
    kern::divide_kernel<double><<<grid, kThreads, 0, stream>>>(static_cast<double*>(x), count,
                                                               static_cast<double>(divisor));
  }
  check_launch("divide_kernel");
}

}  // namespace zccl::gpu
