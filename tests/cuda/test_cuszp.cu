// GPU tests of the cuSZp-style codec (csrc/compress/cuszp.h) against the CPU fZ-light codec.
// Standalone and torch-free: nvcc builds it with csrc/compress/{cuszp.cu, fzlight.cpp,
// crc32c.cpp} (see tests/test_cuda_gpu.py, which also gives the exact command).
//
//   test_cuszp            all correctness tests (needs a CUDA device)
//   test_cuszp --quick    smaller sizes and fewer fuzz cases (for compute-sanitizer runs)
//   test_cuszp --bench    also prints throughput on a 256 MB float32 wavefield
//   test_cuszp --host-only   checks the test harness itself on the CPU (no device needed)
//   test_cuszp --only A,B    runs only these test groups (bytes, direct, decode, v2, corrupt,
//                            reduce, batch, range, async, args, bench)
//
// What is checked:
//   bytes    GPU streams (format version 3) are byte-identical to fz::compress (float32/float64;
//            smooth, random, constant, NaN/Inf/huge/denormal, zero-run and step fields (constant
//            chunks and repeats); counts 0, 1, 31..33, chunk_len +- 1, 2^24;
//            error bounds 0 (lossless), below the dtype's min normal, 1e-7 .. 1e6; chunk lengths
//            32, 96, 5120, 65536; 1-D, 3-D and 0-d shapes)
//   direct   noise (gradient-like, with outliers) gives direct chunks (mode 4) on the GPU, byte
//            for byte as on the CPU, through both encoders (staged: default chunk length;
//            encode_kernel: 65536), alone and beside encoded chunks, every dtype; decoded as the
//            CPU decodes it, also as version-2/version-1 copies; mode 4 in a stream labelled
//            version 2 or 1 is refused (BadChunkMode) as the CPU refuses it
//   decode   GPU decoding of GPU and CPU streams: |x - x'| <= eb in double, non-finite values
//            bit-identical, output identical to fz::decompress; CPU decoding of GPU streams;
//            len_bound larger than the stream; inspect() against fz::read_info
//   v2       version-1 and version-2 streams (tests/data/format_v1's and format_v2's real ones,
//            and to_v1 / to_v2 of CPU streams) decoded as the old decoders / the CPU do; all-zero
//            tensors
//            (float32 ratio >= 1000, one constant chunk then repeats, lossy and lossless),
//            -0.0/NaN constants, constant runs; a codec-1 stream gives LosslessCodecOnHost
//            (decompress and inspect), Auto lossless == CPU codec None, an explicit zstd request
//            throws; float16/bfloat16 byte identity, decode, bound, finite_range, and the reduce
//            paths refusing halves
//   corrupt  flipped bits, resealed structural mutations (stream_tools.h: header fields, table
//            sizes and repeats, modes, code lengths and block bitmaps, outlier counts/indices,
//            shapes, the version, codec and dtype fields; encoded and direct chunks alike),
//            truncations, garbage, on v3, v2 and v1 streams of float32/float64 and v3 and v2
//            streams of float16/bfloat16: the GPU
//            reports an error exactly when fz::decompress throws, decodes the same values when
//            it does not, never writes past the destination (guard bytes), never faults (run
//            under compute-sanitizer to check reads too); workspace too small for the stream
//   reduce   fused decompress+reduce (sum/avg/min/max, in place and out of place, NaN and
//            signed-zero operands) and reduce()/divide() against the CPU semantics
//   batch    compress_batch/decompress_batch over several streams, each job checked
//   range    finite_range against fz::finite_range
//   async    calls return without waiting for the device (a long kernel ahead on the stream)
//   args     argument errors throw fz::ArgumentError before launching
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "crc32c.h"
#include "cuszp.h"
#include "cuszp_lane.h"
#include "fzlight.h"
#include "fzlight_format.h"
#include "stream_tools.h"

namespace fz = zccl::fz;
namespace gpu = zccl::gpu;
namespace fmt = zccl::fz::format;
namespace lane = zccl::gpu::lane;
using zccl::testing::ChunkRef;
using zccl::testing::chunk_kinds;
using zccl::testing::chunks_of;
using zccl::testing::for_each_mutation;
using zccl::testing::reseal;
using zccl::testing::to_v1;
using zccl::testing::to_v2;
using zccl::testing::to_version;

#define CUDA_OK(call)                                                                      \
  do {                                                                                     \
    const cudaError_t cuda_ok_status_ = (call);                                                         \
    if (cuda_ok_status_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,            \
                   cudaGetErrorString(cuda_ok_status_));                                   \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

bool g_quick = false;
int g_failures = 0;
int g_checks = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok && ++g_failures <= 40) std::printf("FAIL: %s\n", what.c_str());
}

// ------------------------------------------------------------------------------------------
// RAII for device memory, pinned memory, streams and events.

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n = 0) : n_(n) {
    if (n > 0) CUDA_OK(cudaMalloc(&p_, n * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  // cudaMemcpy from pageable memory may return before its DMA has landed, and the codec runs on
  // non-blocking streams that do not order after the legacy default stream: wait for the copy.
  void upload(const T* src, size_t n) {
    CUDA_OK(cudaMemcpy(p_, src, n * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());
  }
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    if (n > 0) CUDA_OK(cudaMemcpy(v.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T>
class Pinned {
 public:
  Pinned() { CUDA_OK(cudaMallocHost(&p_, sizeof(T))); }
  ~Pinned() { cudaFreeHost(p_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  T* get() const { return p_; }
  T& operator*() const { return *p_; }

 private:
  T* p_ = nullptr;
};

class Stream {
 public:
  Stream() { CUDA_OK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { CUDA_OK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { CUDA_OK(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) const { CUDA_OK(cudaEventRecord(e_, s)); }
  float ms_since(const Event& start) const {
    CUDA_OK(cudaEventSynchronize(e_));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start.get(), e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

template <class T>
constexpr fz::DType dtype_of() {
  return sizeof(T) == 4 ? fz::DType::Float32 : fz::DType::Float64;
}

template <class T>
using BitsOf = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;

template <class T>
BitsOf<T> bits(T v) {
  BitsOf<T> b;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <class T>
bool finite(T v) {
  return std::fabs(v) <= std::numeric_limits<T>::max();
}

// ------------------------------------------------------------------------------------------
// Test fields.

template <class T>
std::vector<T> make_field(const std::string& kind, size_t n, std::mt19937_64& rng) {
  std::vector<T> x(n);
  std::normal_distribution<double> g(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i);
    const double smooth = 100.0 * std::sin(0.001 * t) + std::cos(0.037 * t) + 0.01 * std::sin(0.9 * t);
    if (kind == "smooth") {
      x[i] = static_cast<T>(smooth);
    } else if (kind == "random") {
      x[i] = static_cast<T>(g(rng) * 1e3);
    } else if (kind == "constant") {
      x[i] = static_cast<T>(-7.125);
    } else if (kind == "zero") {  // zero runs at both ends: constant chunks and repeats
      x[i] = static_cast<T>(i < n / 3 || i >= n - n / 4 ? 0.0 : smooth);
    } else if (kind == "steps") {  // runs of 700 equal values
      x[i] = static_cast<T>(std::floor(t / 700.0));
    } else if (kind == "gauss") {  // gradient-like noise: direct chunks at small error bounds
      x[i] = static_cast<T>(g(rng));
    } else {  // special: smooth with NaN, Inf, huge, denormal, signed zero sprinkled in
      x[i] = static_cast<T>(smooth);
    }
  }
  if (kind == "special") {
    for (size_t i = 0; i < n; i += 1 + rng() % 61) {
      switch (rng() % 8) {
        case 0: x[i] = std::numeric_limits<T>::quiet_NaN(); break;
        case 1: {  // NaN with a payload
          BitsOf<T> b = bits(std::numeric_limits<T>::quiet_NaN()) | 0x5A5;
          std::memcpy(&x[i], &b, sizeof(T));
          break;
        }
        case 2: x[i] = std::numeric_limits<T>::infinity(); break;
        case 3: x[i] = -std::numeric_limits<T>::infinity(); break;
        case 4: x[i] = std::numeric_limits<T>::max(); break;
        case 5: x[i] = std::numeric_limits<T>::denorm_min() * static_cast<T>(rng() % 1000); break;
        case 6: x[i] = static_cast<T>(-0.0); break;
        default: x[i] = static_cast<T>(3e30 * g(rng)); break;
      }
    }
    if (n > 0) x[0] = std::numeric_limits<T>::quiet_NaN();  // first value an outlier
  }
  return x;
}

// ------------------------------------------------------------------------------------------
// Codec wrappers.

struct Ctx {
  Stream stream;
  Pinned<size_t> size;
  Pinned<int32_t> err;
};

// The CPU's stream as the GPU writes it: LosslessCodec::Auto means codec None on the GPU (no zstd
// there), so the CPU is asked for None too.
std::vector<uint8_t> cpu_compress(const void* x, fz::DType dt, uint64_t n, const fz::CompressParams& params) {
  fz::CompressParams p = params;
  if (p.lossless_codec == fz::LosslessCodec::Auto) p.lossless_codec = fz::LosslessCodec::None;
  const size_t ndim = p.shape ? p.shape->size() : 1;
  std::vector<uint8_t> s(fz::max_compressed_size(dt, n, p.chunk_len, ndim));
  s.resize(fz::compress(x, dt, n, p, s.data(), s.size()));
  return s;
}

// GPU compression of host data; returns the stream bytes.
// T is the storage type; dt defaults to T's (pass it for float16/bfloat16, stored as uint16_t).
template <class T>
std::vector<uint8_t> gpu_compress(Ctx& ctx, const std::vector<T>& x, const fz::CompressParams& p,
                                  fz::DType dt = dtype_of<T>()) {
  const size_t ndim = p.shape ? p.shape->size() : 1;
  DeviceBuffer<T> src(x.size());
  if (!x.empty()) src.upload(x.data(), x.size());
  const size_t cap = fz::max_compressed_size(dt, x.size(), p.chunk_len, ndim);
  DeviceBuffer<uint8_t> dst(cap);
  const size_t wsb = gpu::workspace_bytes(dt, x.size(), p.chunk_len);
  DeviceBuffer<uint8_t> ws(wsb);
  *ctx.size = 0;
  gpu::compress(src.get(), dt, x.size(), p, dst.get(), cap, ws.get(), wsb, ctx.stream.get(), ctx.size.get());
  ctx.stream.sync();
  const size_t len = *ctx.size;
  expect(len <= cap, "compressed size within capacity");
  return dst.download(std::min(len, cap));
}

// GPU decode of host stream bytes (the device buffer holds exactly len_bound bytes, so a read
// past it is a sanitizer error). Guard values after the destination detect stray writes.
template <class T>
int32_t gpu_decompress(Ctx& ctx, const std::vector<uint8_t>& stream, size_t len_bound, uint64_t dst_count,
                       std::vector<T>& out, fz::DType dt, size_t ws_chunks_for = 0,
                       uint32_t ws_chunk_len = fz::kBlockLen) {
  std::vector<uint8_t> padded(stream);
  padded.resize(len_bound, 0);
  DeviceBuffer<uint8_t> src(std::max<size_t>(len_bound, 1));
  if (len_bound > 0) src.upload(padded.data(), len_bound);
  constexpr size_t kGuard = 64;
  DeviceBuffer<T> dst(dst_count + kGuard);
  std::vector<T> guard(dst_count + kGuard);
  for (size_t i = 0; i < guard.size(); ++i) guard[i] = static_cast<T>(12345.0 + static_cast<double>(i % 4096));
  dst.upload(guard.data(), guard.size());
  const uint64_t ws_values = ws_chunks_for != 0 ? ws_chunks_for * ws_chunk_len : std::max<uint64_t>(dst_count, 1);
  const size_t wsb = gpu::workspace_bytes(dt, ws_values, ws_chunk_len);
  DeviceBuffer<uint8_t> ws(wsb);
  *ctx.err = -1;
  gpu::decompress(src.get(), len_bound, dst.get(), dt, dst_count, ws.get(), wsb, ctx.stream.get(), ctx.err.get());
  ctx.stream.sync();
  const std::vector<T> all = dst.download(dst_count + kGuard);
  bool guard_ok = true;
  for (size_t i = dst_count; i < all.size(); ++i) guard_ok = guard_ok && bits(all[i]) == bits(guard[i]);
  expect(guard_ok, "decoder wrote past the destination");
  out.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(dst_count));
  return *ctx.err;
}

std::string where_differs(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "identical";
  std::string s = "first difference at byte " + std::to_string(i) + " (sizes " + std::to_string(a.size()) +
                  " vs " + std::to_string(b.size()) + ")";
  try {
    const fz::StreamInfo info = fz::read_info(b.data(), b.size());
    const size_t table = 48 + 8 * info.shape.size();
    if (i < table) {
      s += ", fixed header";
    } else if (i < info.header_bytes - 4) {
      s += ", table entry " + std::to_string((i - table) / 8);
    } else if (i < info.header_bytes) {
      s += ", header crc";
    } else {
      size_t at = info.header_bytes;
      for (uint64_t c = 0; c < info.num_chunks; ++c) {
        const uint32_t sz = fmt::load<uint32_t>(b.data() + table + 8 * c);
        if (i < at + sz) {
          s += ", chunk " + std::to_string(c) + " byte " + std::to_string(i - at) + " (mode " +
               std::to_string(b[at]) + ")";
          break;
        }
        at += sz;
      }
    }
  } catch (const std::exception&) {
  }
  return s;
}

// ------------------------------------------------------------------------------------------
// bytes + decode

template <class T>
void check_decoded(const std::vector<T>& x, const std::vector<T>& y, double eb, const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    bool ok;
    if (!finite(x[i]) || eb == 0.0) {
      ok = bits(x[i]) == bits(y[i]);
    } else {
      ok = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i])) <= eb;
    }
    if (!ok && bad++ == 0) first = i;
  }
  expect(bad == 0, what + ": " + std::to_string(bad) + " values out of bound, first at " + std::to_string(first));
}

template <class T>
void roundtrip(Ctx& ctx, const std::vector<T>& x, double eb, uint32_t cl, const std::string& name,
               const std::vector<uint64_t>* shape = nullptr) {
  const fz::DType dt = dtype_of<T>();
  fz::CompressParams p;
  p.error_bound = eb;
  p.chunk_len = cl;
  p.threads = 0;
  if (shape != nullptr) p.shape = *shape;
  const std::string what = name + (sizeof(T) == 4 ? " f32" : " f64") + " n=" + std::to_string(x.size()) +
                           " eb=" + std::to_string(eb) + " cl=" + std::to_string(cl);
  const std::vector<uint8_t> cpu = cpu_compress(x.data(), dt, x.size(), p);
  const std::vector<uint8_t> gs = gpu_compress(ctx, x, p);
  expect(gs == cpu, "byte identity " + what + ": " + where_differs(gs, cpu));

  // CPU decode of the CPU stream is the reference.
  std::vector<T> ref(x.size());
  fz::decompress(cpu.data(), cpu.size(), ref.data(), ref.size());
  // GPU decode of the GPU stream and of the CPU stream.
  for (int which = 0; which < 2; ++which) {
    const std::vector<uint8_t>& s = which == 0 ? gs : cpu;
    std::vector<T> y;
    const int32_t err = gpu_decompress<T>(ctx, s, s.size(), x.size(), y, dt, 0, cl);
    const std::string w = what + (which == 0 ? " (gpu stream)" : " (cpu stream)");
    expect(err == 0, "decode error " + std::string(gpu::error_string(err)) + " " + w);
    if (err != 0) continue;
    check_decoded(x, y, eb, "bound " + w);
    bool same = true;
    for (size_t i = 0; i < y.size(); ++i) same = same && bits(y[i]) == bits(ref[i]);
    expect(same, "gpu decode == cpu decode " + w);
  }
  // CPU decode of the GPU stream.
  try {
    std::vector<T> y(x.size());
    fz::decompress(gs.data(), gs.size(), y.data(), y.size());
    bool same = true;
    for (size_t i = 0; i < y.size(); ++i) same = same && bits(y[i]) == bits(ref[i]);
    expect(same, "cpu decode of gpu stream " + what);
  } catch (const std::exception& e) {
    expect(false, "cpu decode of gpu stream threw " + std::string(e.what()) + " " + what);
  }
}

template <class T>
void test_bytes(Ctx& ctx, std::mt19937_64& rng) {
  const char* kinds[] = {"smooth", "random", "constant", "special", "zero", "steps"};
  const double tiny = static_cast<double>(std::numeric_limits<T>::min()) / 4;  // lossless
  std::vector<uint32_t> cls = {32, 96, fz::kDefaultChunkLen, 65536};
  std::vector<double> ebs = {0.0, tiny, 1e-7, 1e-4, 1e-2, 1.0, 1e6};
  if (g_quick) {
    cls = {32, fz::kDefaultChunkLen};
    ebs = {0.0, 1e-4, 1.0};
  }
  for (const char* kind : kinds) {
    for (uint32_t cl : cls) {
      std::vector<size_t> counts = {0, 1, 2, 31, 32, 33, 63, 64, 65, size_t{cl} - 1, cl, size_t{cl} + 1,
                                    2 * size_t{cl} + 17, 100003};
      if (g_quick) counts = {0, 1, 33, size_t{cl} - 1, size_t{cl} + 1, 2 * size_t{cl} + 17};
      for (size_t n : counts) {
        const std::vector<T> x = make_field<T>(kind, n, rng);
        for (double eb : ebs) roundtrip<T>(ctx, x, eb, cl, kind);
      }
    }
  }
  // Relative bounds on a large smooth field (REL 1e-2 .. 1e-5 of the value range).
  const size_t big = g_quick ? (size_t{1} << 16) : (size_t{1} << 24);
  const std::vector<T> x = make_field<T>("smooth", big, rng);
  const fz::FiniteRange r = fz::finite_range(x.data(), dtype_of<T>(), x.size());
  for (double rel : {1e-2, 1e-3, 1e-4, 1e-5}) roundtrip<T>(ctx, x, rel * (r.max - r.min), fz::kDefaultChunkLen, "large smooth");
  roundtrip<T>(ctx, make_field<T>("special", big, rng), 1e-3, fz::kDefaultChunkLen, "large special");
  // Shapes: 3-D and 0-d.
  const std::vector<T> cube = make_field<T>("smooth", 6 * 7 * 9, rng);
  const std::vector<uint64_t> s3 = {6, 7, 9};
  roundtrip<T>(ctx, cube, 1e-3, 64, "3-D shape", &s3);
  const std::vector<T> one = make_field<T>("smooth", 1, rng);
  const std::vector<uint64_t> s0 = {};
  roundtrip<T>(ctx, one, 1e-3, 64, "0-d shape", &s0);
}

// inspect() and len_bound > stream length.
template <class T>
void test_decode_extras(Ctx& ctx, std::mt19937_64& rng) {
  const fz::DType dt = dtype_of<T>();
  const std::vector<T> x = make_field<T>("special", 20000, rng);
  fz::CompressParams p;
  p.error_bound = 1e-3;
  p.chunk_len = 1024;
  const std::vector<uint8_t> s = cpu_compress(x.data(), dt, x.size(), p);
  std::vector<T> y;
  expect(gpu_decompress<T>(ctx, s, s.size() + 1000, x.size(), y, dt) == 0, "decode with len_bound > length");
  check_decoded(x, y, 1e-3, "decode with len_bound > length");
  expect(gpu_decompress<T>(ctx, s, s.size(), x.size() + 77, y, dt) == 0, "decode into a larger destination");

  DeviceBuffer<uint8_t> src(s.size());
  src.upload(s.data(), s.size());
  const size_t wsb = gpu::workspace_bytes(dt, x.size(), 1024);
  DeviceBuffer<uint8_t> ws(wsb);
  Pinned<gpu::DeviceStreamInfo> info;
  gpu::inspect(src.get(), s.size(), ws.get(), wsb, ctx.stream.get(), info.get());
  ctx.stream.sync();
  const fz::StreamInfo ci = fz::read_info(s.data(), s.size());
  expect((*info).error == 0 && (*info).count == ci.count && (*info).num_chunks == ci.num_chunks &&
             (*info).chunk_len == ci.chunk_len && (*info).header_bytes == ci.header_bytes &&
             (*info).total_bytes == ci.total_bytes && (*info).error_bound == ci.error_bound &&
             (*info).dtype == static_cast<uint8_t>(ci.dtype) && (*info).ndim == ci.shape.size() &&
             (*info).version == ci.version && (*info).version == 3 && (*info).codec == 0,
         "inspect matches read_info");

  // Wrong dtype requested, destination too small, workspace too small for the stream's chunks.
  const fz::DType other = sizeof(T) == 4 ? fz::DType::Float64 : fz::DType::Float32;
  std::vector<double> yd;
  std::vector<float> yf;
  const int32_t e1 = other == fz::DType::Float64 ? gpu_decompress<double>(ctx, s, s.size(), x.size(), yd, other)
                                                 : gpu_decompress<float>(ctx, s, s.size(), x.size(), yf, other);
  expect(e1 == static_cast<int32_t>(gpu::Error::DTypeMismatch), "dtype mismatch detected");
  expect(gpu_decompress<T>(ctx, s, s.size(), x.size() - 1, y, dt) == static_cast<int32_t>(gpu::Error::CountMismatch),
         "small destination detected");
  // 70000 values in chunks of 32 make 2188 chunks; a workspace sized for the default chunk
  // length holds offsets for 2047.
  const std::vector<T> x2 = make_field<T>("smooth", 70000, rng);
  p.chunk_len = 32;
  const std::vector<uint8_t> s2 = cpu_compress(x2.data(), dt, x2.size(), p);
  expect(gpu_decompress<T>(ctx, s2, s2.size(), x2.size(), y, dt, x2.size() / fz::kDefaultChunkLen + 1,
                           fz::kDefaultChunkLen) == static_cast<int32_t>(gpu::Error::WorkspaceTooSmall),
         "small workspace detected");
  expect(gpu_decompress<T>(ctx, s2, s2.size(), x2.size(), y, dt, 0, 32) == 0, "chunks of 32 decode");
  check_decoded(x2, y, 1e-3, "chunks of 32");
}

// ------------------------------------------------------------------------------------------
// corrupt: differential against the CPU decoder (reseal and the mutations: stream_tools.h).

template <class K>
using StoreOf = typename lane::Kind<K>::S;

template <class K>
constexpr fz::DType kind_dtype() {
  return static_cast<fz::DType>(lane::Kind<K>::kDType);
}

// One mutated stream through both decoders, as the stream's own dtype when it names a valid one
// (as the CPU does). K: float, double, lane::Half, lane::BFloat16.
template <class K>
void differential(Ctx& ctx, const std::vector<uint8_t>& s, size_t len, uint64_t fallback_count,
                  const std::string& what, int& gpu_errors) {
  using S = StoreOf<K>;
  const uint8_t code = len > 5 ? s[5] : 0;
  if (code >= 1 && code <= 4 && code != lane::Kind<K>::kDType) {
    switch (code) {
      case 1: return differential<float>(ctx, s, len, fallback_count, what, gpu_errors);
      case 2: return differential<double>(ctx, s, len, fallback_count, what, gpu_errors);
      case 3: return differential<lane::Half>(ctx, s, len, fallback_count, what, gpu_errors);
      default: return differential<lane::BFloat16>(ctx, s, len, fallback_count, what, gpu_errors);
    }
  }
  uint64_t count = fallback_count;
  try {
    count = fz::read_info(s.data(), len).count;
  } catch (const std::exception&) {
  }
  if (count > (uint64_t{1} << 24)) return;  // a hostile count too large to allocate: skip
  std::vector<S> cpu_out(count);
  bool cpu_ok = true;
  std::string cpu_msg;
  try {
    fz::decompress(s.data(), len, cpu_out.data(), count);
  } catch (const std::exception& e) {
    cpu_ok = false;
    cpu_msg = e.what();
  }
  std::vector<uint8_t> head(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(len));
  std::vector<S> gpu_out;
  // Workspace for the most chunks `count` values can make (chunks of 32).
  const int32_t err = gpu_decompress<S>(ctx, head, len, count, gpu_out, kind_dtype<K>(),
                                        std::max<uint64_t>(count, 1) / fz::kBlockLen + 2);
  gpu_errors += err != 0;
  // A codec-1 stream is valid but host-only: a CPU built with zstd decodes it, the GPU never.
  if (err == static_cast<int32_t>(gpu::Error::LosslessCodecOnHost)) return;
  expect((err == 0) == cpu_ok, what + ": gpu says '" + gpu::error_string(err) + "', cpu says '" +
                                   (cpu_ok ? std::string("ok") : cpu_msg) + "'");
  if (err == 0 && cpu_ok) {
    bool same = true;
    for (size_t i = 0; i < count; ++i) same = same && gpu_out[i] == cpu_out[i];
    expect(same, what + ": both decoders accept but disagree on values");
  }
}

// The corruption base: encoded, direct (noise with outliers, chunk 1), raw (values whose codes
// overflow), constant and repeat chunks (a zero run over chunks 4..6), outliers, a partial last
// block, a 2-D shape. Halves: the float32 field rounded to the half type.
template <class K>
std::vector<uint8_t> corruption_base(std::mt19937_64& rng) {
  using V = std::conditional_t<std::is_same_v<K, double>, double, float>;
  std::vector<V> v = make_field<V>("special", 4000 + 17, rng);
  std::vector<V> noise = make_field<V>("random", 700, rng);
  for (V& e : noise) e *= static_cast<V>(1e6);  // codes overflow: outliers, so raw chunks
  std::copy(noise.begin(), noise.end(), v.begin() + 1300);
  std::vector<V> grad = make_field<V>("gauss", 512, rng);
  for (size_t i = 0; i < grad.size(); i += 1 + rng() % 61) grad[i] = std::numeric_limits<V>::quiet_NaN();
  std::copy(grad.begin(), grad.end(), v.begin() + 512);
  std::fill(v.begin() + 2048, v.begin() + 3584, V(0));
  std::vector<StoreOf<K>> x(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (lane::kIsHalf<K>) {
      x[i] = lane::Kind<K>::narrow(v[i]);
    } else {
      std::memcpy(&x[i], &v[i], sizeof(V));
    }
  }
  fz::CompressParams p;
  p.error_bound = lane::kIsHalf<K> ? 1e-2 : std::is_same_v<K, float> ? 1e-3 : 1e-6;
  p.chunk_len = 512;
  p.shape = std::vector<uint64_t>{4017, 1};
  return cpu_compress(x.data(), kind_dtype<K>(), x.size(), p);
}

// The base as the given format version (3: as written; 2, 1: stream_tools.h's converters).
template <class K>
std::vector<uint8_t> corruption_base(std::mt19937_64& rng, uint8_t version) {
  const std::vector<uint8_t> base = corruption_base<K>(rng);
  return version < 3 ? to_version(base, version) : base;
}

template <class K>
void test_corrupt(Ctx& ctx, std::mt19937_64& rng, uint8_t version) {
  const std::vector<uint8_t> base = corruption_base<K>(rng, version);
  const int iters = g_quick ? 150 : 1500, random_iters = g_quick ? 50 : 300;
  int gpu_errors = 0, on_direct = 0;
  for_each_mutation(base, iters, random_iters, rng, [&](const std::vector<uint8_t>& s, size_t len, const std::string& what) {
    differential<K>(ctx, s, len, 4017, what, gpu_errors);
    on_direct += what.find("(direct chunk)") != std::string::npos;
  });
  std::printf("  corrupt %s v%d: %d/%d mutated streams rejected by the GPU decoder (%d on direct chunks)\n",
              fz::dtype_name(kind_dtype<K>()), version, gpu_errors, iters + random_iters, on_direct);
  if (version == 3) expect(on_direct > 0, "mutations reached direct chunks");
}

// Without a device: the harness itself (base stream, reseal, the version converters, mutations
// through the CPU decoder).
template <class K>
void test_harness_on_host(std::mt19937_64& rng, uint8_t version) {
  const std::vector<uint8_t> v3 = corruption_base<K>(rng);
  const std::vector<uint8_t> base = version < 3 ? to_version(v3, version) : v3;
  if (version < 3) {
    std::vector<StoreOf<K>> a(4017), b(4017);
    fz::decompress(v3.data(), v3.size(), a.data(), a.size());
    fz::decompress(base.data(), base.size(), b.data(), b.size());
    expect(std::memcmp(a.data(), b.data(), a.size() * sizeof(StoreOf<K>)) == 0,
           "to_v" + std::to_string(version) + " keeps the decoded values");
    expect(fz::read_info(base.data(), base.size()).version == version, "converted stream's version");
  }
  const std::vector<bool> have = chunk_kinds(base);
  expect(have[0] && have[1] && (version == 1 || (have[2] && have[5])) && have[4] == (version == 3),
         "corruption base stream v" + std::to_string(version) +
             " has encoded, raw, constant and repeat chunks, and direct ones in version 3");
  std::vector<uint8_t> again = base;
  reseal(again);
  expect(again == base, "reseal of an intact stream changes nothing");
  int rejected = 0, total = 0, on_direct = 0;
  for_each_mutation(base, 1500, 300, rng, [&](const std::vector<uint8_t>& s, size_t len, const std::string& what) {
    ++total;
    on_direct += what.find("(direct chunk)") != std::string::npos;
    try {
      const fz::StreamInfo info = fz::read_info(s.data(), len);
      if (info.count > (uint64_t{1} << 24)) return;
      std::vector<double> out(info.count);  // room for any dtype
      fz::decompress(s.data(), len, out.data(), info.count);
    } catch (const std::exception&) {
      ++rejected;
    }
  });
  std::printf("  host harness %s v%d: CPU decoder rejects %d/%d mutated streams (%d on direct chunks)\n",
              fz::dtype_name(kind_dtype<K>()), version, rejected, total, on_direct);
  expect(rejected > total / 2 && rejected < total, "mutations mostly but not all rejected");
  if (version == 3) expect(on_direct > 0, "mutations reach direct chunks");
}

// The stream with another version byte (resealed).
std::vector<uint8_t> relabelled(std::vector<uint8_t> s, uint8_t version) {
  s[4] = version;
  reseal(s);
  return s;
}

// ------------------------------------------------------------------------------------------
// reduce

template <class T>
BitsOf<T> ref_reduce(gpu::ReduceOp op, T a, T b) {
  switch (op) {
    case gpu::ReduceOp::Sum:
    case gpu::ReduceOp::Avg: return bits(static_cast<T>(a + b));
    case gpu::ReduceOp::Min: return bits(a != a ? a : (b != b ? b : (b < a ? b : a)));
    case gpu::ReduceOp::Max: return bits(a != a ? a : (b != b ? b : (b > a ? b : a)));
  }
  return 0;
}

template <class T>
bool same_reduced(gpu::ReduceOp op, BitsOf<T> got, BitsOf<T> want) {
  if (got == want) return true;
  T g, w;
  std::memcpy(&g, &got, sizeof(T));
  std::memcpy(&w, &want, sizeof(T));
  // SUM of a NaN: the GPU returns its canonical NaN, x86 the operand's payload (documented).
  return (op == gpu::ReduceOp::Sum || op == gpu::ReduceOp::Avg) && g != g && w != w;
}

template <class T>
void test_reduce(Ctx& ctx, std::mt19937_64& rng) {
  const fz::DType dt = dtype_of<T>();
  const size_t n = g_quick ? 9000 : 300001;
  std::vector<T> a = make_field<T>("special", n, rng);
  const std::vector<T> b = make_field<T>("special", n, rng);
  for (size_t i = 5; i < n; i += 101) a[i] = static_cast<T>(0.0);  // +0 against -0 ties
  fz::CompressParams p;
  p.error_bound = 1e-3;
  p.chunk_len = 2048;
  const std::vector<uint8_t> s = cpu_compress(b.data(), dt, n, p);
  std::vector<T> bd(n);
  fz::decompress(s.data(), s.size(), bd.data(), n);

  DeviceBuffer<uint8_t> src(s.size());
  src.upload(s.data(), s.size());
  DeviceBuffer<T> da(n), dout(n), db(n);
  db.upload(bd.data(), n);
  const size_t wsb = gpu::workspace_bytes(dt, n, p.chunk_len);
  DeviceBuffer<uint8_t> ws(wsb);
  for (gpu::ReduceOp op : {gpu::ReduceOp::Sum, gpu::ReduceOp::Avg, gpu::ReduceOp::Min, gpu::ReduceOp::Max}) {
    const std::string name = "reduce op " + std::to_string(static_cast<int>(op)) + (sizeof(T) == 4 ? " f32" : " f64");
    for (int in_place = 0; in_place < 2; ++in_place) {
      da.upload(a.data(), n);
      T* out = in_place ? da.get() : dout.get();
      gpu::decompress_reduce(src.get(), s.size(), da.get(), out, dt, n, op, ws.get(), wsb, ctx.stream.get(),
                             ctx.err.get());
      ctx.stream.sync();
      expect(*ctx.err == 0, name + " error " + gpu::error_string(*ctx.err));
      const std::vector<T> got = in_place ? da.download(n) : dout.download(n);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += !same_reduced<T>(op, bits(got[i]), ref_reduce(op, a[i], bd[i]));
      expect(bad == 0, name + (in_place ? " in place" : " out of place") + ": " + std::to_string(bad) + " mismatches");
    }
    // Plain reduce of two device buffers.
    da.upload(a.data(), n);
    gpu::reduce(dout.get(), da.get(), db.get(), dt, n, op, ctx.stream.get());
    ctx.stream.sync();
    const std::vector<T> got = dout.download(n);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += !same_reduced<T>(op, bits(got[i]), ref_reduce(op, a[i], bd[i]));
    expect(bad == 0, name + " reduce(): " + std::to_string(bad) + " mismatches");
  }
  // AVG finish.
  for (int p_ranks : {1, 3, 7}) {
    da.upload(a.data(), n);
    gpu::divide(da.get(), dt, n, p_ranks, ctx.stream.get());
    ctx.stream.sync();
    const std::vector<T> got = da.download(n);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      const T want = a[i] / static_cast<T>(p_ranks);
      bad += !(bits(got[i]) == bits(want) || (got[i] != got[i] && want != want));
    }
    expect(bad == 0, "divide by " + std::to_string(p_ranks) + ": " + std::to_string(bad) + " mismatches");
  }
  // Count must match exactly for a reduce.
  da.upload(a.data(), n);
  gpu::decompress_reduce(src.get(), s.size(), da.get(), da.get(), dt, n - 1, gpu::ReduceOp::Sum, ws.get(), wsb,
                         ctx.stream.get(), ctx.err.get());
  ctx.stream.sync();
  expect(*ctx.err == static_cast<int32_t>(gpu::Error::CountMismatch), "reduce with a wrong count is refused");
}

// ------------------------------------------------------------------------------------------
// batch

template <class T>
void test_batch(std::mt19937_64& rng) {
  const fz::DType dt = dtype_of<T>();
  const int jobs = 7;
  Stream streams[3];
  cudaStream_t handles[3] = {streams[0].get(), streams[1].get(), streams[2].get()};
  std::vector<std::vector<T>> xs;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> src, out;
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> dst, ws;
  std::vector<std::unique_ptr<Pinned<size_t>>> sizes;
  std::vector<std::unique_ptr<Pinned<int32_t>>> errs;
  std::vector<gpu::CompressJob> cj(jobs);
  for (int j = 0; j < jobs; ++j) {
    const size_t n = g_quick ? 1000 + 311 * j : 50000 + 123457 * j;
    xs.push_back(make_field<T>(j % 3 == 0 ? "special" : "smooth", n, rng));
    src.push_back(std::make_unique<DeviceBuffer<T>>(n));
    src.back()->upload(xs.back().data(), n);
    out.push_back(std::make_unique<DeviceBuffer<T>>(n));
    cj[j].src = src.back()->get();
    cj[j].dtype = dt;
    cj[j].count = n;
    cj[j].params.error_bound = 1e-3 * (j + 1);
    cj[j].params.chunk_len = j % 2 ? 1024 : fz::kDefaultChunkLen;
    cj[j].dst_cap = fz::max_compressed_size(dt, n, cj[j].params.chunk_len);
    dst.push_back(std::make_unique<DeviceBuffer<uint8_t>>(cj[j].dst_cap));
    cj[j].dst = dst.back()->get();
    cj[j].ws_bytes = gpu::workspace_bytes(dt, n, cj[j].params.chunk_len);
    ws.push_back(std::make_unique<DeviceBuffer<uint8_t>>(cj[j].ws_bytes));
    cj[j].workspace = ws.back()->get();
    sizes.push_back(std::make_unique<Pinned<size_t>>());
    errs.push_back(std::make_unique<Pinned<int32_t>>());
    cj[j].size_pinned = sizes.back()->get();
  }
  gpu::compress_batch(cj.data(), jobs, handles, 3);
  for (auto& s : streams) s.sync();
  std::vector<gpu::DecompressJob> dj(jobs);
  for (int j = 0; j < jobs; ++j) {
    const std::vector<uint8_t> cpu = cpu_compress(xs[j].data(), dt, xs[j].size(), cj[j].params);
    const std::vector<uint8_t> got = dst[j]->download(**sizes[j]);
    expect(got == cpu, "batch job " + std::to_string(j) + " bytes: " + where_differs(got, cpu));
    dj[j].src = dst[j]->get();
    dj[j].len_bound = **sizes[j];
    dj[j].dst = out[j]->get();
    dj[j].dtype = dt;
    dj[j].count = xs[j].size();
    dj[j].workspace = ws[j]->get();
    dj[j].ws_bytes = cj[j].ws_bytes;
    dj[j].err_pinned = errs[j]->get();
  }
  gpu::decompress_batch(dj.data(), jobs, handles, 3);
  for (auto& s : streams) s.sync();
  for (int j = 0; j < jobs; ++j) {
    expect(**errs[j] == 0, "batch decode error job " + std::to_string(j));
    check_decoded(xs[j], out[j]->download(xs[j].size()), cj[j].params.error_bound, "batch job " + std::to_string(j));
  }
}

// ------------------------------------------------------------------------------------------
// range, async, args

template <class T>
void test_range(Ctx& ctx, std::mt19937_64& rng) {
  const fz::DType dt = dtype_of<T>();
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
    for (const char* kind : {"smooth", "special", "random"}) {
      std::vector<T> x = make_field<T>(kind, n, rng);
      DeviceBuffer<T> d(n);
      if (n > 0) d.upload(x.data(), n);
      const size_t wsb = gpu::workspace_bytes(dt, n);
      DeviceBuffer<uint8_t> ws(wsb);
      Pinned<gpu::RangeResult> r;
      gpu::finite_range(d.get(), dt, n, ws.get(), wsb, ctx.stream.get(), r.get());
      ctx.stream.sync();
      const fz::FiniteRange c = fz::finite_range(x.data(), dt, n);
      expect(((*r).any_finite != 0) == c.any_finite && (!c.any_finite || ((*r).min == c.min && (*r).max == c.max)),
             std::string("finite_range ") + kind + " n=" + std::to_string(n));
    }
  }
  std::vector<T> nan(100, std::numeric_limits<T>::quiet_NaN());
  DeviceBuffer<T> d(100);
  d.upload(nan.data(), 100);
  const size_t wsb = gpu::workspace_bytes(dt, 100);
  DeviceBuffer<uint8_t> ws(wsb);
  Pinned<gpu::RangeResult> r;
  gpu::finite_range(d.get(), dt, 100, ws.get(), wsb, ctx.stream.get(), r.get());
  ctx.stream.sync();
  expect((*r).any_finite == 0, "finite_range of NaNs");
}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

void test_async(Ctx& ctx) {
  const size_t n = 1 << 20;
  DeviceBuffer<float> src(n), out(n);
  CUDA_OK(cudaMemset(src.get(), 0, n * sizeof(float)));
  CUDA_OK(cudaDeviceSynchronize());  // cudaMemset is async; ctx.stream is non-blocking
  fz::CompressParams p;
  p.error_bound = 1e-3;
  const size_t cap = fz::max_compressed_size(fz::DType::Float32, n, p.chunk_len);
  DeviceBuffer<uint8_t> dst(cap);
  const size_t wsb = gpu::workspace_bytes(fz::DType::Float32, n, p.chunk_len);
  DeviceBuffer<uint8_t> ws(wsb);
  int clock_khz = 0, dev = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  // Warm up (first launches load modules), then queue ~300 ms of spinning ahead of our calls.
  gpu::compress(src.get(), fz::DType::Float32, n, p, dst.get(), cap, ws.get(), wsb, ctx.stream.get(), ctx.size.get());
  gpu::decompress(dst.get(), cap, out.get(), fz::DType::Float32, n, ws.get(), wsb, ctx.stream.get(), ctx.err.get());
  spin_kernel<<<1, 1, 0, ctx.stream.get()>>>(1);
  ctx.stream.sync();
  spin_kernel<<<1, 1, 0, ctx.stream.get()>>>(static_cast<long long>(clock_khz) * 300);
  const auto t0 = std::chrono::steady_clock::now();
  gpu::compress(src.get(), fz::DType::Float32, n, p, dst.get(), cap, ws.get(), wsb, ctx.stream.get(), ctx.size.get());
  gpu::decompress(dst.get(), cap, out.get(), fz::DType::Float32, n, ws.get(), wsb, ctx.stream.get(), ctx.err.get());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  expect(cudaStreamQuery(ctx.stream.get()) == cudaErrorNotReady, "calls returned before the stream drained");
  expect(ms < 100.0, "compress+decompress calls took " + std::to_string(ms) + " ms on the host (a hidden sync?)");
  ctx.stream.sync();
  expect(*ctx.err == 0, "async decode ok");
}

template <class E, class F>
void expect_throw(F f, const std::string& what) {
  try {
    f();
    expect(false, what + ": no exception");
  } catch (const E&) {
    expect(true, what);
  } catch (const std::exception& e) {
    expect(false, what + ": wrong exception " + e.what());
  }
}

// ------------------------------------------------------------------------------------------
// v2: what stream format version 2 added (constant chunks, repeats, block bitmaps, the codec
// field, half dtypes) and decoding of versions 1 and 2.

int32_t inspect_error(Ctx& ctx, const std::vector<uint8_t>& s, gpu::DeviceStreamInfo* out = nullptr) {
  DeviceBuffer<uint8_t> src(s.size());
  src.upload(s.data(), s.size());
  const size_t wsb = gpu::workspace_bytes(fz::DType::Float32, 1 << 20, 32);
  DeviceBuffer<uint8_t> ws(wsb);
  Pinned<gpu::DeviceStreamInfo> info;
  gpu::inspect(src.get(), s.size(), ws.get(), wsb, ctx.stream.get(), info.get());
  ctx.stream.sync();
  if (out != nullptr) *out = *info;
  return (*info).error;
}

// Version-1 and version-2 streams (stream_tools.h's to_v1 / to_v2 of CPU streams: direct chunks
// re-encoded as encoded chunks) decode on the GPU as on the CPU.
template <class T>
void test_old_versions_decode(Ctx& ctx, std::mt19937_64& rng) {
  const fz::DType dt = dtype_of<T>();
  for (const char* kind : {"smooth", "special", "zero", "steps", "random", "gauss"}) {
    for (size_t n : {size_t{1}, size_t{33}, size_t{5121}, size_t{100003}}) {
      const std::vector<T> x = make_field<T>(kind, n, rng);
      for (double eb : {0.0, 1e-4, 1.0}) {
        for (uint32_t cl : {32u, 1024u}) {
          fz::CompressParams p;
          p.error_bound = eb;
          p.chunk_len = cl;
          const std::vector<uint8_t> v3 = cpu_compress(x.data(), dt, n, p);
          for (uint8_t version : {uint8_t{1}, uint8_t{2}}) {
            const std::vector<uint8_t> old = to_version(v3, version);
            const std::string what = "v" + std::to_string(version) + " " + kind + (sizeof(T) == 4 ? " f32" : " f64") +
                                     " n=" + std::to_string(n) + " eb=" + std::to_string(eb) + " cl=" + std::to_string(cl);
            std::vector<T> ref(n), y;
            fz::decompress(old.data(), old.size(), ref.data(), n);
            const int32_t err = gpu_decompress<T>(ctx, old, old.size(), n, y, dt, 0, cl);
            expect(err == 0, what + ": " + gpu::error_string(err));
            bool same = err == 0;
            for (size_t i = 0; same && i < n; ++i) same = bits(y[i]) == bits(ref[i]);
            expect(same, what + ": gpu decode == cpu decode");
            gpu::DeviceStreamInfo info{};
            expect(inspect_error(ctx, old, &info) == 0 && info.version == version && info.codec == 0, what + ": inspect");
          }
        }
      }
    }
  }
}

// The real version-1 and version-2 streams of tests/data/format_v1 and format_v2
// (ZCCL_V1_FIXTURES / ZCCL_V2_FIXTURES override the folders), written by those versions'
// encoders: the GPU decodes them to that version's decoder output (codec-1 ones: refused as
// host-only).
std::filesystem::path fixture_dir(int version) {
  const char* env = std::getenv(version == 1 ? "ZCCL_V1_FIXTURES" : "ZCCL_V2_FIXTURES");
  if (env != nullptr && *env != 0) return env;
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / ("format_v" + std::to_string(version));
}

bool codec1(const zccl::testing::Fixture& f) {
  return f.stream.size() > 40 && fmt::load<uint32_t>(f.stream.data() + 36) == fmt::kCodecShuffleZstd;
}

// GPU decode of a fixture as its own dtype, as bytes.
template <class S>
int32_t decode_fixture(Ctx& ctx, const zccl::testing::Fixture& f, uint64_t count, fz::DType dt,
                       std::vector<uint8_t>& got) {
  std::vector<S> y;
  const int32_t err = gpu_decompress<S>(ctx, f.stream, f.stream.size(), count, y, dt);
  got.resize(y.size() * sizeof(S));
  if (!y.empty()) std::memcpy(got.data(), y.data(), got.size());
  return err;
}

void test_fixtures(Ctx& ctx, int version) {
  const std::vector<zccl::testing::Fixture> fixtures = zccl::testing::fixtures(fixture_dir(version), version);
  if (fixtures.empty()) {
    std::printf("  no version-%d fixtures at %s: skipped\n", version, fixture_dir(version).string().c_str());
    return;
  }
  for (const auto& f : fixtures) {
    const std::string what = "v" + std::to_string(version) + " fixture " + f.name;
    const fz::DType dt = static_cast<fz::DType>(f.stream[5]);
    // The count from the header's fixed part (fz::read_info refuses codec 1 without zstd).
    const uint64_t count = fmt::load<uint64_t>(f.stream.data() + 8);
    std::vector<uint8_t> got;
    const int32_t err = fz::dtype_size(dt) == 8   ? decode_fixture<uint64_t>(ctx, f, count, dt, got)
                        : fz::dtype_size(dt) == 4 ? decode_fixture<uint32_t>(ctx, f, count, dt, got)
                                                  : decode_fixture<uint16_t>(ctx, f, count, dt, got);
    if (codec1(f)) {
      expect(err == static_cast<int32_t>(gpu::Error::LosslessCodecOnHost), what + ": " + gpu::error_string(err));
      continue;
    }
    expect(err == 0, what + ": " + gpu::error_string(err));
    expect(err != 0 || got == f.decoded, what + ": GPU decode == the version-" + std::to_string(version) +
                                             " decoder's output");
  }
  std::printf("  %zu version-%d fixtures decoded\n", fixtures.size(), version);
}

// Constant chunks and repeats: all-zero tensors compress >= 1000x (float32), -0.0 and NaN
// constants keep their bits, a constant run after varied data repeats, lossless streams too.
template <class T>
void test_constant_chunks(Ctx& ctx, std::mt19937_64& rng) {
  const fz::DType dt = dtype_of<T>();
  for (double eb : {1e-3, 0.0}) {
    const std::vector<T> zeros(1000000, T(0));
    fz::CompressParams p;
    p.error_bound = eb;
    const std::vector<uint8_t> gs = gpu_compress(ctx, zeros, p);
    const std::vector<uint8_t> cpu = cpu_compress(zeros.data(), dt, zeros.size(), p);
    const std::string what = std::string("zeros ") + (sizeof(T) == 4 ? "f32" : "f64") + " eb=" + std::to_string(eb);
    expect(gs == cpu, what + ": byte identity: " + where_differs(gs, cpu));
    const double ratio = static_cast<double>(zeros.size() * sizeof(T)) / static_cast<double>(gs.size());
    if (sizeof(T) == 4) expect(ratio >= 1000.0, what + ": ratio " + std::to_string(ratio) + " < 1000");
    const std::vector<bool> have = chunk_kinds(gs);
    expect(have[2] && have[5] && !have[0] && !have[1] && !have[4], what + ": one constant chunk, then repeats");
    std::vector<T> y;
    expect(gpu_decompress<T>(ctx, gs, gs.size(), zeros.size(), y, dt) == 0, what + ": decode");
    bool ok = true;
    for (const T& v : y) ok = ok && bits(v) == 0;
    expect(ok, what + ": decodes to +0.0");
  }
  // Constants whose bits matter, and constant runs between varied data (constant chunks that
  // follow a varied chunk, repeats of them, a partial constant last chunk).
  std::vector<T> special(20000, static_cast<T>(-0.0));
  roundtrip<T>(ctx, special, 1e-3, 1024, "constant -0.0");
  std::fill(special.begin(), special.end(), std::numeric_limits<T>::quiet_NaN());
  roundtrip<T>(ctx, special, 1e-3, 1024, "constant NaN");
  std::vector<T> runs = make_field<T>("smooth", 50000, rng);
  std::fill(runs.begin() + 3000, runs.begin() + 12000, static_cast<T>(2.5));
  std::fill(runs.begin() + 12000, runs.begin() + 14000, static_cast<T>(-2.5));
  std::fill(runs.begin() + 45000, runs.end(), static_cast<T>(7));
  for (double eb : {0.0, 1e-3}) {
    for (uint32_t cl : {32u, 1024u, 5120u}) roundtrip<T>(ctx, runs, eb, cl, "constant runs");
  }
}

// A codec-1 stream (crafted: a lossless CPU stream with the codec field set; this CPU build
// may have no zstd) is refused with LosslessCodecOnHost by decompress and inspect; the GPU
// encoder refuses an explicit zstd request and writes codec 0 for Auto.
void test_codec_field(Ctx& ctx, std::mt19937_64& rng) {
  const std::vector<float> x = make_field<float>("smooth", 30000, rng);
  fz::CompressParams p;
  p.error_bound = 0.0;
  p.chunk_len = 1024;
  std::vector<uint8_t> s = cpu_compress(x.data(), fz::DType::Float32, x.size(), p);
  fmt::store<uint32_t>(s.data() + 36, fmt::kCodecShuffleZstd);
  reseal(s);
  std::vector<float> y;
  const int32_t err = gpu_decompress<float>(ctx, s, s.size(), x.size(), y, fz::DType::Float32);
  expect(err == static_cast<int32_t>(gpu::Error::LosslessCodecOnHost),
         std::string("codec-1 stream: ") + gpu::error_string(err));
  expect(std::string(gpu::error_string(err)).find("host only") != std::string::npos, "codec-1 message");
  gpu::DeviceStreamInfo info{};
  expect(inspect_error(ctx, s, &info) == static_cast<int32_t>(gpu::Error::LosslessCodecOnHost) && info.codec == 1 &&
             info.version == 3,
         "inspect of a codec-1 stream");
  // Auto (eb 0): codec 0, the CPU's stream with codec None.
  p.lossless_codec = fz::LosslessCodec::Auto;
  const std::vector<uint8_t> gs = gpu_compress(ctx, x, p);
  p.lossless_codec = fz::LosslessCodec::None;
  expect(gs == cpu_compress(x.data(), fz::DType::Float32, x.size(), p), "Auto lossless == CPU codec None");
  expect(fmt::load<uint32_t>(gs.data() + 36) == 0, "GPU writes codec 0");
  // An explicit zstd request cannot be met (eb 0); with eb > 0 the codec is unused.
  p.lossless_codec = fz::LosslessCodec::ShuffleZstd;
  expect_throw<fz::ArgumentError>([&] { gpu_compress(ctx, x, p); }, "GPU refuses the zstd codec");
  p.error_bound = 1e-3;
  expect(gpu_compress(ctx, x, p) == cpu_compress(x.data(), fz::DType::Float32, x.size(), p),
         "zstd codec ignored by a lossy stream");
}

// float16/bfloat16 (K: lane::Half, lane::BFloat16): byte identity with fz::compress, GPU decode
// of GPU and CPU streams == fz::decompress, the bound in double, the CPU decode of GPU streams.
template <class K>
void roundtrip_half(Ctx& ctx, const std::vector<uint16_t>& x, double eb, uint32_t cl, const std::string& name) {
  const fz::DType dt = kind_dtype<K>();
  fz::CompressParams p;
  p.error_bound = eb;
  p.chunk_len = cl;
  const std::string what = name + " " + fz::dtype_name(dt) + " n=" + std::to_string(x.size()) +
                           " eb=" + std::to_string(eb) + " cl=" + std::to_string(cl);
  const std::vector<uint8_t> cpu = cpu_compress(x.data(), dt, x.size(), p);
  const std::vector<uint8_t> gs = gpu_compress(ctx, x, p, dt);
  expect(gs == cpu, "byte identity " + what + ": " + where_differs(gs, cpu));
  std::vector<uint16_t> ref(x.size());
  fz::decompress(cpu.data(), cpu.size(), ref.data(), ref.size());
  for (int which = 0; which < 2; ++which) {
    const std::vector<uint8_t>& s = which == 0 ? gs : cpu;
    std::vector<uint16_t> y;
    const int32_t err = gpu_decompress<uint16_t>(ctx, s, s.size(), x.size(), y, dt, 0, cl);
    const std::string w = what + (which == 0 ? " (gpu stream)" : " (cpu stream)");
    expect(err == 0, "decode error " + std::string(gpu::error_string(err)) + " " + w);
    if (err != 0) continue;
    expect(y == ref, "gpu decode == cpu decode " + w);
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float a = lane::Kind<K>::widen(x[i]), b = lane::Kind<K>::widen(y[i]);
      const bool finite_a = std::fabs(a) <= std::numeric_limits<float>::max();
      const bool ok = (!finite_a || eb == 0.0) ? x[i] == y[i]
                                               : std::fabs(static_cast<double>(a) - static_cast<double>(b)) <= eb;
      bad += !ok;
    }
    expect(bad == 0, "bound " + w + ": " + std::to_string(bad) + " values");
  }
  try {
    std::vector<uint16_t> y(x.size());
    fz::decompress(gs.data(), gs.size(), y.data(), y.size());
    expect(y == ref, "cpu decode of gpu stream " + what);
  } catch (const std::exception& e) {
    expect(false, "cpu decode of gpu stream threw " + std::string(e.what()) + " " + what);
  }
}

template <class K>
void test_halves(Ctx& ctx, std::mt19937_64& rng) {
  const fz::DType dt = kind_dtype<K>();
  std::vector<uint32_t> cls = {32, 96, fz::kDefaultChunkLen};
  std::vector<double> ebs = {0.0, 1e-5, 1e-3, 1e-2, 1.0, 100.0};
  std::vector<size_t> counts = {1, 2, 5, 33, 1023, 5121, 100003};
  if (g_quick) {
    ebs = {0.0, 1e-2};
    counts = {1, 33, 5121};
  }
  for (const char* kind : {"smooth", "random", "constant", "special", "zero", "steps"}) {
    for (size_t n : counts) {
      const std::vector<float> v = make_field<float>(kind, n, rng);
      std::vector<uint16_t> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = lane::Kind<K>::narrow(v[i]);
      if (std::string(kind) == "special") {  // the half type's own specials
        for (size_t i = 3; i < n; i += 37) x[i] = static_cast<uint16_t>(i % 2 ? 0x0001 : 0x7E05);
      }
      for (double eb : ebs) {
        for (uint32_t cl : cls) roundtrip_half<K>(ctx, x, eb, cl, kind);
      }
    }
  }
  // finite_range widens like the CPU; the reduce paths refuse halves.
  const std::vector<float> v = make_field<float>("special", 100000, rng);
  std::vector<uint16_t> x(v.size());
  for (size_t i = 0; i < v.size(); ++i) x[i] = lane::Kind<K>::narrow(v[i]);
  DeviceBuffer<uint16_t> d(x.size());
  d.upload(x.data(), x.size());
  const size_t wsb = gpu::workspace_bytes(dt, x.size());
  DeviceBuffer<uint8_t> ws(wsb);
  Pinned<gpu::RangeResult> r;
  gpu::finite_range(d.get(), dt, x.size(), ws.get(), wsb, ctx.stream.get(), r.get());
  ctx.stream.sync();
  const fz::FiniteRange c = fz::finite_range(x.data(), dt, x.size());
  expect(((*r).any_finite != 0) == c.any_finite && (*r).min == c.min && (*r).max == c.max,
         std::string("finite_range ") + fz::dtype_name(dt));
  const cudaStream_t s = ctx.stream.get();
  using AE = fz::ArgumentError;
  expect_throw<AE>([&] { gpu::reduce(d.get(), d.get(), d.get(), dt, x.size(), gpu::ReduceOp::Sum, s); }, "half reduce");
  expect_throw<AE>([&] { gpu::divide(d.get(), dt, x.size(), 2, s); }, "half divide");
  expect_throw<AE>(
      [&] {
        gpu::decompress_reduce(ws.get(), 100, d.get(), d.get(), dt, x.size(), gpu::ReduceOp::Max, ws.get(), wsb, s,
                               ctx.err.get());
      },
      "half decompress_reduce");
}

// direct: format version 3's direct chunks (mode 4). Noise, and noise with outliers, beside
// smooth data: the GPU stream has direct chunks (and encoded ones for the smooth part) and equals
// the CPU's byte for byte, through encode_staged_kernel (the default chunk length) and
// encode_kernel (65536); GPU decoding == fz::decompress, also of the version-2/1 copies; mode 4 in
// a stream labelled version 2 (or 1) is refused with BadChunkMode. K: every storage kind.
const char* const kDirectKinds[] = {"gauss", "gauss+outliers", "smooth|gauss"};
const uint32_t kDirectChunkLens[] = {fz::kDefaultChunkLen, 65536u};
// Bounds tight enough for noise to code (halves: coarser, or their noise is raw chunks).
template <class K>
std::vector<double> direct_bounds() {
  return lane::kIsHalf<K> ? std::vector<double>{1e-2, 1e-1} : std::vector<double>{1e-4, 1e-2};
}

template <class K>
std::vector<StoreOf<K>> direct_field(const std::string& kind, size_t n, std::mt19937_64& rng) {
  using V = std::conditional_t<std::is_same_v<K, double>, double, float>;
  std::vector<V> v = make_field<V>("gauss", n, rng);
  if (kind == "gauss+outliers") {
    for (size_t i = 0; i < n; i += 1 + rng() % 97) v[i] = i % 3 ? std::numeric_limits<V>::quiet_NaN() : static_cast<V>(1e30);
  } else if (kind == "smooth|gauss") {  // encoded chunks, then direct ones
    const std::vector<V> smooth = make_field<V>("smooth", n / 2, rng);
    std::copy(smooth.begin(), smooth.end(), v.begin());
  }
  std::vector<StoreOf<K>> x(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (lane::kIsHalf<K>) {
      x[i] = lane::Kind<K>::narrow(v[i]);
    } else {
      std::memcpy(&x[i], &v[i], sizeof(V));
    }
  }
  return x;
}

// The versions whose label on this stream makes mode 4 the first problem of every failing chunk:
// 2 always (its layouts are version 3's, less mode 4); 1 when the stream has only direct and raw
// chunks of a dtype version 1 knows (encoded chunks have another layout there, repeats are not
// allowed).
template <class K>
std::vector<uint8_t> relabel_versions(const std::vector<uint8_t>& s) {
  const std::vector<bool> have = chunk_kinds(s);
  if (lane::kIsHalf<K> || have[0] || have[2] || have[3] || have[5]) return {2};
  return {2, 1};
}

template <class K>
void test_direct(Ctx& ctx, std::mt19937_64& rng) {
  using S = StoreOf<K>;
  const fz::DType dt = kind_dtype<K>();
  const size_t n = g_quick ? 70001 : 400001;
  for (const char* kind : kDirectKinds) {
    const std::vector<S> x = direct_field<K>(kind, n, rng);
    for (uint32_t cl : kDirectChunkLens) {
      for (double eb : direct_bounds<K>()) {
        fz::CompressParams p;
        p.error_bound = eb;
        p.chunk_len = cl;
        const std::string what = std::string("direct ") + kind + " " + fz::dtype_name(dt) + " eb=" + std::to_string(eb) +
                                 " cl=" + std::to_string(cl);
        const std::vector<uint8_t> cpu = cpu_compress(x.data(), dt, n, p);
        const std::vector<uint8_t> gs = gpu_compress(ctx, x, p, dt);
        expect(gs == cpu, "byte identity " + what + ": " + where_differs(gs, cpu));
        const std::vector<bool> have = chunk_kinds(gs);
        expect(have[fmt::kChunkDirect], what + ": the GPU stream has direct chunks");
        if (std::string(kind) == "smooth|gauss") expect(have[fmt::kChunkEncoded], what + ": and encoded ones");
        std::vector<S> ref(n);
        fz::decompress(cpu.data(), cpu.size(), ref.data(), n);
        std::vector<std::vector<uint8_t>> copies = {gs, to_v2(gs)};
        if constexpr (!lane::kIsHalf<K>) copies.push_back(to_v1(gs));
        for (const std::vector<uint8_t>& s : copies) {
          const std::string w = what + " as v" + std::to_string(s[4]);
          std::vector<S> y;
          const int32_t err = gpu_decompress<S>(ctx, s, s.size(), n, y, dt, 0, cl);
          expect(err == 0, w + ": decode error " + gpu::error_string(err));
          expect(err != 0 || std::memcmp(y.data(), ref.data(), n * sizeof(S)) == 0, w + ": gpu decode == cpu decode");
        }
        for (uint8_t old : relabel_versions<K>(gs)) {
          const std::vector<uint8_t> r = relabelled(gs, old);
          std::vector<S> y;
          const int32_t err = gpu_decompress<S>(ctx, r, r.size(), n, y, dt, 0, cl);
          expect(err == static_cast<int32_t>(gpu::Error::BadChunkMode),
                 what + ": mode 4 in a version-" + std::to_string(old) + " stream: " + gpu::error_string(err));
        }
      }
    }
  }
}

// The CPU side of test_direct, without a device: its inputs give direct chunks (and encoded ones
// for the smooth part), the converted copies decode as the stream does, and the CPU refuses mode
// 4 in the relabelled streams test_direct gives the GPU.
template <class K>
void test_direct_on_host(std::mt19937_64& rng) {
  using S = StoreOf<K>;
  const fz::DType dt = kind_dtype<K>();
  const size_t n = 70001;
  for (const char* kind : kDirectKinds) {
    const std::vector<S> x = direct_field<K>(kind, n, rng);
    for (uint32_t cl : kDirectChunkLens) {
      for (double eb : direct_bounds<K>()) {
        fz::CompressParams p;
        p.error_bound = eb;
        p.chunk_len = cl;
        const std::string what = std::string("host direct ") + kind + " " + fz::dtype_name(dt) +
                                 " eb=" + std::to_string(eb) + " cl=" + std::to_string(cl);
        const std::vector<uint8_t> s = cpu_compress(x.data(), dt, n, p);
        const std::vector<bool> have = chunk_kinds(s);
        expect(fz::read_info(s.data(), s.size()).version == 3 && have[fmt::kChunkDirect], what + ": direct chunks");
        if (std::string(kind) == "smooth|gauss") expect(have[fmt::kChunkEncoded], what + ": and encoded ones");
        std::vector<S> ref(n), y(n);
        fz::decompress(s.data(), s.size(), ref.data(), n);
        std::vector<std::vector<uint8_t>> copies = {to_v2(s)};
        if constexpr (!lane::kIsHalf<K>) copies.push_back(to_v1(s));
        for (const std::vector<uint8_t>& c : copies) {
          fz::decompress(c.data(), c.size(), y.data(), n);
          expect(std::memcmp(y.data(), ref.data(), n * sizeof(S)) == 0 && !chunk_kinds(c)[fmt::kChunkDirect],
                 what + ": the v" + std::to_string(c[4]) + " copy decodes the same");
        }
        for (uint8_t old : relabel_versions<K>(s)) {
          const std::vector<uint8_t> r = relabelled(s, old);
          std::string msg;
          try {
            fz::decompress(r.data(), r.size(), y.data(), n);
          } catch (const std::exception& e) {
            msg = e.what();
          }
          expect(msg.find("unknown chunk mode") != std::string::npos,
                 what + ": the CPU refuses mode 4 in a version-" + std::to_string(old) + " stream ('" + msg + "')");
        }
      }
    }
  }
}

void test_args(Ctx& ctx) {
  const size_t n = 10000;
  DeviceBuffer<float> src(n);
  fz::CompressParams p;
  p.error_bound = 1e-3;
  const size_t cap = fz::max_compressed_size(fz::DType::Float32, n, p.chunk_len);
  DeviceBuffer<uint8_t> dst(cap);
  const size_t wsb = gpu::workspace_bytes(fz::DType::Float32, n, p.chunk_len);
  DeviceBuffer<uint8_t> ws(wsb);
  size_t pageable = 0;
  int32_t pageable_err = 0;
  using AE = fz::ArgumentError;
  const cudaStream_t s = ctx.stream.get();
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, p, dst.get(), cap - 1, ws.get(), wsb, s, ctx.size.get()); }, "small dst");
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, p, dst.get(), cap, ws.get(), 1024, s, ctx.size.get()); }, "small workspace");
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, p, dst.get(), cap, ws.get(), wsb, s, &pageable); }, "pageable size");
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, p, dst.get(), cap, ws.get() + 4, wsb - 4, s, ctx.size.get()); }, "misaligned workspace");
  fz::CompressParams q = p;
  q.chunk_len = 100;
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, q, dst.get(), cap, ws.get(), wsb, s, ctx.size.get()); }, "bad chunk_len");
  q = p;
  q.error_bound = -1;
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, q, dst.get(), cap, ws.get(), wsb, s, ctx.size.get()); }, "negative eb");
  q = p;
  q.shape = std::vector<uint64_t>{3, 3};
  expect_throw<AE>([&] { gpu::compress(src.get(), fz::DType::Float32, n, q, dst.get(), cap, ws.get(), wsb, s, ctx.size.get()); }, "shape mismatch");
  expect_throw<AE>([&] { gpu::decompress(dst.get(), cap, src.get(), fz::DType::Float32, n, ws.get(), wsb, s, &pageable_err); }, "pageable err");
  expect_throw<AE>([&] { gpu::decompress(dst.get(), cap, nullptr, fz::DType::Float32, n, ws.get(), wsb, s, ctx.err.get()); }, "null dst");
  expect_throw<AE>([&] { gpu::workspace_bytes(fz::DType::Float32, n, 33); }, "workspace_bytes bad chunk_len");
}

// ------------------------------------------------------------------------------------------
// bench

__global__ void wavefield_kernel(float* x, int nx, int ny, int nz) {
  const uint64_t n = static_cast<uint64_t>(nx) * ny * nz;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const int ix = static_cast<int>(i % nx), iy = static_cast<int>((i / nx) % ny), iz = static_cast<int>(i / (static_cast<uint64_t>(nx) * ny));
    const float fx = ix - 0.5f * nx, fy = iy - 0.5f * ny, fz_ = iz - 0.3f * nz;
    const float r = sqrtf(fx * fx + fy * fy + fz_ * fz_);
    // An expanding spherical wave with decay, plus a plane wave and a gentle background.
    x[i] = 3.0f * sinf(0.15f * r) / (1.0f + 0.02f * r) + 0.5f * sinf(0.021f * ix + 0.013f * iy - 0.017f * iz) +
           0.001f * iz;
  }
}

void bench() {
  const int nx = 512, ny = 512, nz = 256;  // 64 Mi values = 256 MiB of float32
  const size_t n = static_cast<size_t>(nx) * ny * nz;
  const size_t bytes = n * sizeof(float);
  Stream st;
  DeviceBuffer<float> x(n), y(n), copy(n);
  wavefield_kernel<<<1024, 256, 0, st.get()>>>(x.get(), nx, ny, nz);
  CUDA_OK(cudaGetLastError());
  st.sync();
  const size_t cap = fz::max_compressed_size(fz::DType::Float32, n);
  DeviceBuffer<uint8_t> dst(cap);
  const size_t wsb = gpu::workspace_bytes(fz::DType::Float32, n);
  DeviceBuffer<uint8_t> ws(wsb);
  Pinned<size_t> size;
  Pinned<int32_t> err;
  Pinned<gpu::RangeResult> range;
  Event a, b;
  const int reps = 10;

  auto time_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < 2; ++i) f();  // warm-up
    st.sync();
    a.record(st.get());
    for (int i = 0; i < reps; ++i) f();
    b.record(st.get());
    return b.ms_since(a) / reps;
  };
  const double copy_ms = time_ms([&] {
    CUDA_OK(cudaMemcpyAsync(copy.get(), x.get(), bytes, cudaMemcpyDeviceToDevice, st.get()));
  });
  const double copy_gbs = bytes / copy_ms / 1e6;
  gpu::finite_range(x.get(), fz::DType::Float32, n, ws.get(), wsb, st.get(), range.get());
  st.sync();
  const double span = (*range).max - (*range).min;
  std::printf("bench: 256 MiB float32 wavefield (%dx%dx%d), range %.4g\n", nx, ny, nz, span);
  std::printf("  cudaMemcpy D2D: %.3f ms = %.1f GB/s\n", copy_ms, copy_gbs);
  const std::vector<float> host = x.download(n);
  for (double rel : {1e-2, 1e-3, 1e-4}) {
    fz::CompressParams p;
    p.error_bound = rel * span;
    const double c_ms = time_ms([&] {
      gpu::compress(x.get(), fz::DType::Float32, n, p, dst.get(), cap, ws.get(), wsb, st.get(), size.get());
    });
    st.sync();
    const size_t len = *size;
    const double d_ms = time_ms([&] {
      gpu::decompress(dst.get(), len, y.get(), fz::DType::Float32, n, ws.get(), wsb, st.get(), err.get());
    });
    st.sync();
    const double c_gbs = bytes / c_ms / 1e6, d_gbs = bytes / d_ms / 1e6;
    std::printf("  REL %.0e: ratio %.2f | compress %.3f ms = %.1f GB/s (%.0f%% of D2D, target 25%%) | "
                "decompress %.3f ms = %.1f GB/s (%.0f%% of D2D, target 35%%)\n",
                rel, static_cast<double>(bytes) / len, c_ms, c_gbs, 100 * c_gbs / copy_gbs, d_ms, d_gbs,
                100 * d_gbs / copy_gbs);
    // Correctness outside the timed loops: bound, and the CPU's bytes.
    expect(*err == 0, "bench decode error");
    check_decoded(host, y.download(n), p.error_bound, "bench REL " + std::to_string(rel));
    const std::vector<uint8_t> cpu = cpu_compress(host.data(), fz::DType::Float32, n, p);
    const std::vector<uint8_t> got = dst.download(len);
    expect(got == cpu, "bench stream == CPU stream: " + where_differs(got, cpu));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool do_bench = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--host-only") {
      std::mt19937_64 rng(7);
      for (uint8_t version : {uint8_t{3}, uint8_t{2}, uint8_t{1}}) {
        test_harness_on_host<float>(rng, version);
        test_harness_on_host<double>(rng, version);
      }
      for (uint8_t version : {uint8_t{3}, uint8_t{2}}) {
        test_harness_on_host<lane::Half>(rng, version);
        test_harness_on_host<lane::BFloat16>(rng, version);
      }
      test_direct_on_host<float>(rng);
      test_direct_on_host<double>(rng);
      test_direct_on_host<lane::Half>(rng);
      test_direct_on_host<lane::BFloat16>(rng);
      // The fixtures the GPU run decodes: found, and the CPU reproduces the old decoders' output
      // (codec-1 ones only when this build has zstd).
      for (int version : {1, 2}) {
        const auto fixtures = zccl::testing::fixtures(fixture_dir(version), version);
        std::printf("  %zu version-%d fixtures at %s\n", fixtures.size(), version, fixture_dir(version).string().c_str());
        for (const auto& f : fixtures) {
          const std::string v = std::to_string(version);
          expect(f.stream.size() > 5 && f.stream[4] == version && !f.decoded.empty(), f.name + ": a version-" + v + " fixture");
          try {
            const fz::StreamInfo info = fz::read_info(f.stream.data(), f.stream.size());
            std::vector<uint8_t> out(info.count * fz::dtype_size(info.dtype));
            fz::decompress(f.stream.data(), f.stream.size(), out.data(), info.count);
            expect(out == f.decoded, "v" + std::to_string(version) + " fixture " + f.name + " through the CPU decoder");
          } catch (const std::exception& e) {
            expect(codec1(f), f.name + ": " + e.what());
          }
        }
      }
      std::printf("%d checks, %d failures\n", g_checks, g_failures);
      return g_failures == 0 ? 0 : 1;
    }
    if (a == "--quick") g_quick = true;
    else if (a == "--bench") do_bench = true;
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--bench] [--only GROUP[,GROUP...]]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  std::mt19937_64 rng(7);
  Ctx ctx;
  auto run = [&](const char* name, const std::function<void()>& f) {
    if (!only.empty() && ("," + only + ",").find("," + std::string(name) + ",") == std::string::npos) return;
    const int before = g_failures;
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[%s] %s (%.1f s)\n", g_failures == before ? "ok" : "FAILED", name, s);
    std::fflush(stdout);
  };
  run("bytes", [&] { test_bytes<float>(ctx, rng); test_bytes<double>(ctx, rng); });
  run("direct", [&] {
    test_direct<float>(ctx, rng);
    test_direct<double>(ctx, rng);
    test_direct<lane::Half>(ctx, rng);
    test_direct<lane::BFloat16>(ctx, rng);
  });
  run("decode", [&] { test_decode_extras<float>(ctx, rng); test_decode_extras<double>(ctx, rng); });
  run("v2", [&] {
    test_fixtures(ctx, 1);
    test_fixtures(ctx, 2);
    test_old_versions_decode<float>(ctx, rng);
    test_old_versions_decode<double>(ctx, rng);
    test_constant_chunks<float>(ctx, rng);
    test_constant_chunks<double>(ctx, rng);
    test_codec_field(ctx, rng);
    test_halves<lane::Half>(ctx, rng);
    test_halves<lane::BFloat16>(ctx, rng);
  });
  run("corrupt", [&] {
    for (uint8_t version : {uint8_t{3}, uint8_t{2}, uint8_t{1}}) {
      test_corrupt<float>(ctx, rng, version);
      test_corrupt<double>(ctx, rng, version);
    }
    for (uint8_t version : {uint8_t{3}, uint8_t{2}}) {
      test_corrupt<lane::Half>(ctx, rng, version);
      test_corrupt<lane::BFloat16>(ctx, rng, version);
    }
  });
  run("reduce", [&] { test_reduce<float>(ctx, rng); test_reduce<double>(ctx, rng); });
  run("batch", [&] { test_batch<float>(rng); test_batch<double>(rng); });
  run("range", [&] { test_range<float>(ctx, rng); test_range<double>(ctx, rng); });
  run("async", [&] { test_async(ctx); });
  run("args", [&] { test_args(ctx); });
  if (do_bench) run("bench", [&] { bench(); });
  CUDA_OK(cudaDeviceSynchronize());
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
