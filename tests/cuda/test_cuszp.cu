// GPU tests of the cuSZp-style codec (csrc/compress/cuszp.h) against the CPU fZ-light codec.
// Standalone and torch-free: nvcc builds it with csrc/compress/{cuszp.cu, fzlight.cpp,
// crc32c.cpp} (see tests/test_cuda_gpu.py, which also gives the exact command).
//
//   test_cuszp            all correctness tests (needs a CUDA device)
//   test_cuszp --quick    smaller sizes and fewer fuzz cases (for compute-sanitizer runs)
//   test_cuszp --bench    also prints throughput on a 256 MB float32 wavefield
//   test_cuszp --host-only   checks the test harness itself on the CPU (no device needed)
//   test_cuszp --only A,B    runs only these test groups (bytes, decode, corrupt, reduce, batch,
//                            range, async, args, bench)
//
// What is checked:
//   bytes    GPU streams are byte-identical to fz::compress (float32/float64; smooth, random,
//            constant, NaN/Inf/huge/denormal fields; counts 0, 1, 31..33, chunk_len +- 1, 2^24;
//            error bounds 0 (lossless), below the dtype's min normal, 1e-7 .. 1e6; chunk lengths
//            32, 96, 5120, 65536; 1-D, 3-D and 0-d shapes)
//   decode   GPU decoding of GPU and CPU streams: |x - x'| <= eb in double, non-finite values
//            bit-identical, output identical to fz::decompress; CPU decoding of GPU streams;
//            len_bound larger than the stream; inspect() against fz::read_info
//   corrupt  flipped bits, resealed structural mutations (header fields, table sizes, modes,
//            code lengths, outlier counts/indices, shapes), truncations, garbage: the GPU
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
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "crc32c.h"
#include "cuszp.h"
#include "fzlight.h"
#include "fzlight_format.h"

namespace fz = zccl::fz;
namespace gpu = zccl::gpu;
namespace fmt = zccl::fz::format;

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
using BitsOf = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

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

std::vector<uint8_t> cpu_compress(const void* x, fz::DType dt, uint64_t n, const fz::CompressParams& p) {
  const size_t ndim = p.shape ? p.shape->size() : 1;
  std::vector<uint8_t> s(fz::max_compressed_size(dt, n, p.chunk_len, ndim));
  s.resize(fz::compress(x, dt, n, p, s.data(), s.size()));
  return s;
}

// GPU compression of host data; returns the stream bytes.
template <class T>
std::vector<uint8_t> gpu_compress(Ctx& ctx, const std::vector<T>& x, const fz::CompressParams& p) {
  const fz::DType dt = dtype_of<T>();
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
  for (size_t i = 0; i < guard.size(); ++i) guard[i] = static_cast<T>(12345.0 + static_cast<double>(i));
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
  const char* kinds[] = {"smooth", "random", "constant", "special"};
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
             (*info).dtype == static_cast<uint8_t>(ci.dtype) && (*info).ndim == ci.shape.size(),
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
// corrupt: differential against the CPU decoder.

// Recomputes chunk CRCs (as far as the table's sizes fit) and the header CRC, so a mutation
// reaches the structural checks instead of stopping at a checksum.
void reseal(std::vector<uint8_t>& s) {
  if (s.size() < 52) return;
  const size_t ndim = s[7];
  const uint64_t count = fmt::load<uint64_t>(s.data() + 8);
  const uint32_t cl = fmt::load<uint32_t>(s.data() + 32);
  if (cl == 0 || ndim > 64) return;
  const uint64_t chunks = fmt::num_chunks(count, cl);
  if (chunks > s.size() / 8) return;
  const size_t hb = fmt::header_bytes(ndim, chunks);
  if (hb > s.size()) return;
  uint8_t* table = s.data() + 48 + 8 * ndim;
  size_t at = hb;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint32_t sz = fmt::load<uint32_t>(table + 8 * c);
    if (at + sz > s.size()) break;
    fmt::store<uint32_t>(table + 8 * c + 4, fz::crc32c(s.data() + at, sz));
    at += sz;
  }
  fmt::store<uint32_t>(s.data() + hb - 4, fz::crc32c(s.data(), hb - 4));
}

struct ChunkRef {
  size_t at = 0, size = 0;
  uint32_t m = 0;
};

std::vector<ChunkRef> chunks_of(const std::vector<uint8_t>& s) {
  std::vector<ChunkRef> out;
  const fz::StreamInfo info = fz::read_info(s.data(), s.size());
  const uint8_t* table = s.data() + 48 + 8 * info.shape.size();
  size_t at = info.header_bytes;
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    ChunkRef r;
    r.at = at;
    r.size = fmt::load<uint32_t>(table + 8 * c);
    r.m = static_cast<uint32_t>(std::min<uint64_t>(info.chunk_len, info.count - c * info.chunk_len));
    out.push_back(r);
    at += r.size;
  }
  return out;
}

// One mutated stream through both decoders.
template <class T>
void differential(Ctx& ctx, const std::vector<uint8_t>& s, size_t len, uint64_t fallback_count,
                  const std::string& what, int& gpu_errors) {
  // Decode as the stream's own dtype when it names a valid one (as the CPU does).
  const uint8_t code = len > 5 ? s[5] : 0;
  const fz::DType want = code == 1 ? fz::DType::Float32 : code == 2 ? fz::DType::Float64 : dtype_of<T>();
  if (want != dtype_of<T>()) {
    if (want == fz::DType::Float32) return differential<float>(ctx, s, len, fallback_count, what, gpu_errors);
    return differential<double>(ctx, s, len, fallback_count, what, gpu_errors);
  }
  uint64_t count = fallback_count;
  try {
    count = fz::read_info(s.data(), len).count;
  } catch (const std::exception&) {
  }
  if (count > (uint64_t{1} << 24)) return;  // a hostile count too large to allocate: skip
  std::vector<T> cpu_out(count);
  bool cpu_ok = true;
  std::string cpu_msg;
  try {
    fz::decompress(s.data(), len, cpu_out.data(), count);
  } catch (const std::exception& e) {
    cpu_ok = false;
    cpu_msg = e.what();
  }
  std::vector<uint8_t> head(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(len));
  std::vector<T> gpu_out;
  // Workspace for the most chunks `count` values can make (chunks of 32).
  const int32_t err = gpu_decompress<T>(ctx, head, len, count, gpu_out, want,
                                        std::max<uint64_t>(count, 1) / fz::kBlockLen + 2);
  gpu_errors += err != 0;
  expect((err == 0) == cpu_ok, what + ": gpu says '" + gpu::error_string(err) + "', cpu says '" +
                                   (cpu_ok ? std::string("ok") : cpu_msg) + "'");
  if (err == 0 && cpu_ok) {
    bool same = true;
    for (size_t i = 0; i < count; ++i) same = same && bits(gpu_out[i]) == bits(cpu_out[i]);
    expect(same, what + ": both decoders accept but disagree on values");
  }
}

// The corruption base: encoded and raw chunks, outliers, a partial last block, a 2-D shape.
template <class T>
std::vector<uint8_t> corruption_base(std::mt19937_64& rng) {
  std::vector<T> x = make_field<T>("special", 4000 + 17, rng);
  std::vector<T> noise = make_field<T>("random", 700, rng);
  for (T& v : noise) v *= static_cast<T>(1000);  // codes overflow at eb 1e-6: raw chunks
  std::copy(noise.begin(), noise.end(), x.begin() + 1300);
  fz::CompressParams p;
  p.error_bound = 1e-6;
  p.chunk_len = 512;
  p.shape = std::vector<uint64_t>{4017, 1};
  return cpu_compress(x.data(), dtype_of<T>(), x.size(), p);
}

// Calls fn(stream, len, description) for `iters` mutations of `base` (see the cases), then for
// random streams of random lengths. Resealed mutations get valid CRCs, so they reach the
// structural checks.
template <class T, class F>
void for_each_mutation(const std::vector<uint8_t>& base, int iters, int random_iters, std::mt19937_64& rng,
                       const F& fn) {
  const std::vector<ChunkRef> chunks = chunks_of(base);
  const fz::StreamInfo info = fz::read_info(base.data(), base.size());
  const size_t table = 48 + 8 * info.shape.size();
  std::uniform_int_distribution<int> byte(0, 255);
  for (int it = 0; it < iters; ++it) {
    std::vector<uint8_t> s = base;
    size_t len = s.size();
    std::string what;
    const ChunkRef& ch = chunks[rng() % chunks.size()];
    bool do_reseal = true;
    switch (it % 12) {
      case 0: {  // any bit, no reseal
        const size_t i = rng() % s.size();
        s[i] ^= static_cast<uint8_t>(1u << (rng() % 8));
        do_reseal = false;
        what = "bit flip at " + std::to_string(i);
        break;
      }
      case 1: {  // any byte of the fixed header or shape
        const size_t i = rng() % table;
        s[i] = static_cast<uint8_t>(byte(rng));
        what = "header byte " + std::to_string(i);
        break;
      }
      case 2: {  // a table size
        const size_t c = rng() % info.num_chunks;
        const uint32_t old = fmt::load<uint32_t>(s.data() + table + 8 * c);
        const uint32_t v[] = {0u, 1u, old - 1, old + 1, old + 8, 0xFFFFFFFFu, static_cast<uint32_t>(rng())};
        fmt::store<uint32_t>(s.data() + table + 8 * c, v[rng() % 7]);
        what = "table size of chunk " + std::to_string(c);
        break;
      }
      case 3: {  // a chunk's mode byte
        s[ch.at] = static_cast<uint8_t>(rng() % 4);
        what = "chunk mode";
        break;
      }
      case 4: {  // a code length
        if (s[ch.at] != 0) continue;
        const uint32_t nb = (ch.m + 31) / 32;
        s[ch.at + 9 + rng() % nb] = static_cast<uint8_t>(rng() % 2 ? byte(rng) : rng() % 33);
        what = "code length";
        break;
      }
      case 5: {  // outlier count
        if (s[ch.at] != 0) continue;
        const uint32_t old = fmt::load<uint32_t>(s.data() + ch.at + 5);
        const uint32_t v[] = {old + 1, old - 1, ch.m + 1, 0xFFFFFFFFu, 0u};
        fmt::store<uint32_t>(s.data() + ch.at + 5, v[rng() % 5]);
        what = "outlier count";
        break;
      }
      case 6: {  // an outlier index (the index list sits before the values, after the payload)
        if (s[ch.at] != 0) continue;
        const uint32_t n_out = fmt::load<uint32_t>(s.data() + ch.at + 5);
        if (n_out == 0) continue;
        const size_t idx_at = ch.at + ch.size - n_out * (2 + sizeof(T));
        const size_t k = rng() % n_out;
        const uint16_t v[] = {0, static_cast<uint16_t>(ch.m), 0xFFFF, static_cast<uint16_t>(rng())};
        fmt::store<uint16_t>(s.data() + idx_at + 2 * k, v[rng() % 4]);
        what = "outlier index";
        break;
      }
      case 7: {  // payload bytes (values change, structure stays): both must still agree
        const size_t i = ch.at + 1 + rng() % (ch.size - 1);
        s[i] = static_cast<uint8_t>(byte(rng));
        what = "payload byte";
        break;
      }
      case 8: {  // truncation
        len = rng() % s.size();
        do_reseal = false;
        what = "truncated to " + std::to_string(len);
        break;
      }
      case 9: {  // total bytes field
        const uint64_t v[] = {base.size() - 1, base.size() + 1, 0, ~0ull};
        fmt::store<uint64_t>(s.data() + 40, v[rng() % 4]);
        what = "total bytes";
        break;
      }
      case 10: {  // count / chunk length / ndim / shape
        switch (rng() % 4) {
          case 0: fmt::store<uint64_t>(s.data() + 8, info.count + (rng() % 3) - 1); break;
          case 1: fmt::store<uint32_t>(s.data() + 32, static_cast<uint32_t>(32 * (rng() % 40))); break;
          case 2: s[7] = static_cast<uint8_t>(rng() % 70); break;
          default: fmt::store<uint64_t>(s.data() + 48, rng() % 5000); break;
        }
        what = "geometry";
        break;
      }
      default: {  // garbage after a valid-looking fixed header
        for (size_t i = 48; i < s.size(); ++i) s[i] = static_cast<uint8_t>(byte(rng));
        what = "garbage body";
        break;
      }
    }
    if (do_reseal) reseal(s);
    fn(s, len, what + " (iteration " + std::to_string(it) + ")");
  }
  // Random garbage of random lengths (most fail at the magic; some get past it).
  for (int it = 0; it < random_iters; ++it) {
    std::vector<uint8_t> s(rng() % 300);
    for (auto& b : s) b = static_cast<uint8_t>(byte(rng));
    if (s.size() >= 8 && it % 2 == 0) {
      std::memcpy(s.data(), "ZCFZ", 4);
      s[4] = 1;
      s[5] = sizeof(T) == 4 ? 1 : 2;
      s[6] = 32;
      s[7] = static_cast<uint8_t>(rng() % 3);
      reseal(s);
    }
    fn(s, s.size(), "random stream " + std::to_string(it));
  }
}

template <class T>
void test_corrupt(Ctx& ctx, std::mt19937_64& rng) {
  const std::vector<uint8_t> base = corruption_base<T>(rng);
  const int iters = g_quick ? 150 : 1500, random_iters = g_quick ? 50 : 300;
  int gpu_errors = 0;
  for_each_mutation<T>(base, iters, random_iters, rng, [&](const std::vector<uint8_t>& s, size_t len, const std::string& what) {
    differential<T>(ctx, s, len, 4017, what, gpu_errors);
  });
  std::printf("  corrupt %s: %d/%d mutated streams rejected by the GPU decoder\n", sizeof(T) == 4 ? "f32" : "f64",
              gpu_errors, iters + random_iters);
}

// Without a device: the harness itself (base stream, reseal, mutations through the CPU decoder).
template <class T>
void test_harness_on_host(std::mt19937_64& rng) {
  const std::vector<uint8_t> base = corruption_base<T>(rng);
  bool have_raw = false, have_encoded = false;
  for (const ChunkRef& ch : chunks_of(base)) (base[ch.at] == 1 ? have_raw : have_encoded) = true;
  expect(have_raw && have_encoded, "corruption base stream has raw and encoded chunks");
  std::vector<uint8_t> again = base;
  reseal(again);
  expect(again == base, "reseal of an intact stream changes nothing");
  int rejected = 0, total = 0;
  for_each_mutation<T>(base, 1500, 300, rng, [&](const std::vector<uint8_t>& s, size_t len, const std::string&) {
    ++total;
    try {
      const fz::StreamInfo info = fz::read_info(s.data(), len);
      if (info.count > (uint64_t{1} << 24)) return;
      std::vector<double> out(info.count);  // room for either dtype
      fz::decompress(s.data(), len, out.data(), info.count);
    } catch (const std::exception&) {
      ++rejected;
    }
  });
  std::printf("  host harness %s: CPU decoder rejects %d/%d mutated streams\n", sizeof(T) == 4 ? "f32" : "f64",
              rejected, total);
  expect(rejected > total / 2 && rejected < total, "mutations mostly but not all rejected");
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
      test_harness_on_host<float>(rng);
      test_harness_on_host<double>(rng);
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
  run("decode", [&] { test_decode_extras<float>(ctx, rng); test_decode_extras<double>(ctx, rng); });
  run("corrupt", [&] { test_corrupt<float>(ctx, rng); test_corrupt<double>(ctx, rng); });
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
