// Compares our GPU compressor (csrc/compress/cuszp.h, zccl::gpu) with the public cuSZp
// (github.com/szcompressor/cuSZp, when built with -DWITH_CUSZP) and with the device's own
// device-to-device copy bandwidth, on one raw float32 file, in one run.
//
//   codec_compare PATH COUNT NAME [--rels 1e-2,1e-3,1e-4] [--reps 10] [--warmup 2]
//                                 [--codecs ours,cuszp_plain,cuszp_outlier,cuszp_fixed]
//
// PATH holds at least COUNT native-endian float32 values; NAME labels the data in the output.
// For each relative bound REL: eb = REL * (max - min) over the finite values, computed on the
// host in double, then rounded down to a float (cuSZp takes a float bound) and passed as that
// same ABSOLUTE bound to every codec; the bound check uses that value too.
//
// Per codec and bound, one JSON object per line on stdout:
//   codec, mode, data, rel, eb (the float bound used), eb_unrounded (REL * span in double), n,
//   bytes, compressed_bytes, ratio, comp_ms, decomp_ms (medians),
//   comp_gbps, decomp_gbps (input bytes / median time, GB = 1e9 bytes), max_err (max |x - x'|,
//   in double on the host), max_err_over_eb, violations (values with |x - x'| > eb, strictly;
//   a NaN where the input has none counts too), copy_gbps, copy_ms (cudaMemcpyAsync
//   device-to-device of the same byte count, median), device, timing, decode_error (ours only).
//
// Timing: every call is bracketed by its own pair of CUDA events recorded on one stream; `warmup`
// untimed calls first, then `reps` timed ones; the median is reported. Our codec is stream-ordered
// and allocation-free, so its calls queue back to back with no host synchronisation. cuSZp's API
// functions allocate (cudaMalloc), clear (cudaMemset) and free their scratch per call, and its
// compress reads the size back with a blocking cudaMemcpy: those costs fall inside its events, as
// in cuSZp's own "end-to-end" timer (events around the API call); its kernel alone is faster.
// Outputs are checked after the timed calls: the decompression buffer is filled with NaN bytes
// before the timed decompressions, and the last one's output is downloaded and compared.
//
// Only cuSZp's public API is called (the 1-D float32 entry points of cuSZp.h:
// cuSZp_{compress,decompress}_1D_{plain,outlier,fixed}_f32); none of its code is copied here.
// cuSZp's README: "plain" (delta + fixed-length encoding) is the mode of its API examples,
// "outlier" (delta + fixed-length + outlier preservation) gives "always highest compression
// ratios", "fixed" (no delta) is for non-smooth data such as ML weights.

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuszp.h"
#include "fzlight.h"

#ifdef WITH_CUSZP
#include <cuSZp.h>
#endif

namespace {

namespace gpu = zccl::gpu;
namespace fz = zccl::fz;

void cuda_check(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " (line " + std::to_string(line) +
                             "): " + cudaGetErrorString(e));
  }
}
#define CUDA_OK(call) cuda_check((call), #call, __LINE__)

// Owning wrappers (freed on every exit path, errors ignored on the way out).
template <typename T>
struct Device {
  T* p = nullptr;
  explicit Device(size_t n) { CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T))); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};
template <typename T>
struct Pinned {
  T* p = nullptr;
  explicit Pinned(size_t n) { CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T))); }
  ~Pinned() { cudaFreeHost(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

struct Options {
  std::string path, name;
  uint64_t count = 0;
  std::vector<double> rels{1e-2, 1e-3, 1e-4};
  int reps = 10, warmup = 2;
  std::vector<std::string> codecs{"ours", "cuszp_plain", "cuszp_outlier", "cuszp_fixed"};
};

[[noreturn]] void usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr,
               "error: %s\nusage: %s PATH COUNT NAME [--rels 1e-2,1e-3,1e-4] [--reps 10] "
               "[--warmup 2] [--codecs ours,cuszp_plain,cuszp_outlier,cuszp_fixed]\n",
               why.c_str(), argv0);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0], a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--rels") {
        o.rels.clear();
        for (const auto& r : split(value())) o.rels.push_back(std::stod(r));
      } else if (a == "--reps") {
        o.reps = std::stoi(value());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(value());
      } else if (a == "--codecs") {
        o.codecs = split(value());
      } else if (!a.empty() && a[0] == '-' && a.size() > 1) {
        usage(argv[0], "unknown option " + a);
      } else {
        pos.push_back(a);
      }
    } catch (const std::logic_error&) {  // stod/stoi: not a number
      usage(argv[0], "bad value for " + a);
    }
  }
  if (pos.size() != 3) usage(argv[0], "expected PATH COUNT NAME");
  o.path = pos[0];
  o.name = pos[2];
  try {
    o.count = std::stoull(pos[1]);
  } catch (const std::logic_error&) {
    usage(argv[0], "COUNT is not a number: " + pos[1]);
  }
  if (o.count == 0) usage(argv[0], "COUNT must be positive");
  if (o.reps < 1 || o.warmup < 0) usage(argv[0], "--reps must be >= 1 and --warmup >= 0");
  if (o.rels.empty()) usage(argv[0], "--rels is empty");
  for (double r : o.rels) {
    if (!(r > 0)) usage(argv[0], "every REL must be > 0");
  }
  for (const auto& c : o.codecs) {
    if (c != "ours" && c != "cuszp_plain" && c != "cuszp_outlier" && c != "cuszp_fixed") {
      usage(argv[0], "unknown codec " + c);
    }
  }
  return o;
}

// JSON helpers: strings escaped minimally, non-finite numbers as null.
std::string jstr(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (static_cast<double>(v[m - 1]) + v[m]);
}

// Times `reps` calls of f on `stream`, each between its own two events, after `warmup` calls.
class Timer {
 public:
  Timer(cudaStream_t s, int warmup, int reps) : s_(s), warmup_(warmup), ev_(2 * static_cast<size_t>(reps)) {
    for (auto& e : ev_) CUDA_OK(cudaEventCreate(&e));
  }
  ~Timer() {
    for (auto& e : ev_) cudaEventDestroy(e);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  double median_ms(const std::function<void()>& f) {
    for (int i = 0; i < warmup_; ++i) f();
    CUDA_OK(cudaStreamSynchronize(s_));
    for (size_t i = 0; i < ev_.size(); i += 2) {
      CUDA_OK(cudaEventRecord(ev_[i], s_));
      f();
      CUDA_OK(cudaEventRecord(ev_[i + 1], s_));
    }
    CUDA_OK(cudaStreamSynchronize(s_));
    CUDA_OK(cudaGetLastError());  // a failed launch inside f (cuSZp checks none)
    std::vector<float> ms(ev_.size() / 2);
    for (size_t i = 0; i < ms.size(); ++i) CUDA_OK(cudaEventElapsedTime(&ms[i], ev_[2 * i], ev_[2 * i + 1]));
    return median(ms);
  }

 private:
  cudaStream_t s_;
  int warmup_;
  std::vector<cudaEvent_t> ev_;
};

struct ErrorStats {
  double max_err = 0;
  uint64_t violations = 0;
};

ErrorStats check(const float* orig, const float* dec, uint64_t n, double eb) {
  ErrorStats st;
  for (uint64_t i = 0; i < n; ++i) {
    const double a = orig[i], b = dec[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (!(std::isnan(a) && std::isnan(b))) {
        ++st.violations;
        st.max_err = std::numeric_limits<double>::infinity();
      }
      continue;
    }
    if (a == b) continue;  // also equal infinities
    const double d = std::fabs(a - b);
    if (d > st.max_err) st.max_err = d;
    if (!(d <= eb)) ++st.violations;
  }
  return st;
}

// One codec: compress(eb) enqueues a compression of x on the stream; size() is the compressed
// byte count once the stream has got there; decompress(eb) enqueues the decompression into y.
struct Codec {
  std::string name, mode, timing;
  std::function<void(float)> compress;
  std::function<size_t()> size;
  std::function<void(float)> decompress;
  std::function<int32_t()> decode_error;  // empty: the codec reports none
};

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::fprintf(stderr, "error: no CUDA device\n");
      return 3;
    }
    cudaDeviceProp prop{};
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    const std::string device = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                               std::to_string(prop.minor) + ", " +
                               std::to_string(prop.multiProcessorCount) + " SMs)";
    std::fprintf(stderr, "codec_compare: %s on %s\n", opt.name.c_str(), device.c_str());

    const uint64_t n = opt.count;
    const size_t bytes = n * sizeof(float);
    // cuSZp works in blocks of 32 x 1024 values; pad the device buffers so that nothing it
    // touches is out of bounds (the padding is zero and is never part of n).
    const uint64_t n_pad = (n + 32767) / 32768 * 32768;

    // Input, read into pinned memory (fast upload; the reference for the bound check).
    Pinned<float> host(n), back(n);
    {
      FILE* f = std::fopen(opt.path.c_str(), "rb");
      if (!f) throw std::runtime_error("cannot open " + opt.path + ": " + std::strerror(errno));
      const size_t got = std::fread(host.p, sizeof(float), n, f);
      std::fclose(f);
      if (got != n) {
        throw std::runtime_error(opt.path + " holds " + std::to_string(got) + " float32 values, COUNT is " +
                                 std::to_string(n));
      }
    }
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (uint64_t i = 0; i < n; ++i) {
      const double v = host.p[i];
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    const double span = hi >= lo ? hi - lo : 0.0;

    cudaStream_t st = nullptr;
    CUDA_OK(cudaStreamCreate(&st));  // a blocking stream: ordered with cuSZp's default-stream memsets
    Device<float> x(n_pad), y(n_pad), copy(n_pad);
    CUDA_OK(cudaMemsetAsync(x.p, 0, n_pad * sizeof(float), st));
    CUDA_OK(cudaMemcpyAsync(x.p, host.p, bytes, cudaMemcpyHostToDevice, st));

    // One compressed buffer for all codecs: ours needs max_compressed_size; cuSZp documents no
    // bound (its examples allocate the input size; its worst case is a few % above it).
    const size_t cap = std::max(fz::max_compressed_size(fz::DType::Float32, n), 2 * n_pad * sizeof(float));
    Device<uint8_t> cmp(cap);
    const size_t wsb = gpu::workspace_bytes(fz::DType::Float32, n);
    Device<uint8_t> ws(wsb);
    Pinned<size_t> size_pinned(1);
    Pinned<int32_t> err_pinned(1);
    CUDA_OK(cudaStreamSynchronize(st));

    Timer timer(st, opt.warmup, opt.reps);
    const double copy_ms = timer.median_ms(
        [&] { CUDA_OK(cudaMemcpyAsync(copy.p, x.p, bytes, cudaMemcpyDeviceToDevice, st)); });
    const double copy_gbps = bytes / copy_ms / 1e6;
    std::fprintf(stderr, "  cudaMemcpyAsync D2D %zu bytes: %.4f ms = %.1f GB/s; range [%.6g, %.6g]\n", bytes,
                 copy_ms, copy_gbps, lo, hi);

    std::vector<Codec> codecs;
    for (const auto& c : opt.codecs) {
      if (c == "ours") {
        Codec k;
        k.name = "ours";
        k.mode = "fzlight-v2";
        k.timing = "events around each stream-ordered API call";
        k.compress = [&](float eb) {
          fz::CompressParams p;
          p.error_bound = static_cast<double>(eb);
          gpu::compress(x.p, fz::DType::Float32, n, p, cmp.p, cap, ws.p, wsb, st, size_pinned.p);
        };
        k.size = [&] { return *size_pinned.p; };
        k.decompress = [&](float) {
          gpu::decompress(cmp.p, *size_pinned.p, y.p, fz::DType::Float32, n, ws.p, wsb, st, err_pinned.p);
        };
        k.decode_error = [&] { return *err_pinned.p; };
        codecs.push_back(k);
        continue;
      }
#ifdef WITH_CUSZP
      if (bytes >= (size_t{1} << 32)) {  // its offsets are 32-bit
        std::fprintf(stderr, "  %s skipped: cuSZp's 32-bit offsets need inputs under 4 GiB\n", c.c_str());
        continue;
      }
      auto sz = std::make_shared<size_t>(0);
      using CompressFn = void (*)(float*, unsigned char*, size_t, size_t*, float, cudaStream_t);
      using DecompressFn = void (*)(float*, unsigned char*, size_t, size_t, float, cudaStream_t);
      CompressFn cf = nullptr;
      DecompressFn df = nullptr;
      if (c == "cuszp_plain") {
        cf = cuSZp_compress_1D_plain_f32;
        df = cuSZp_decompress_1D_plain_f32;
      } else if (c == "cuszp_outlier") {
        cf = cuSZp_compress_1D_outlier_f32;
        df = cuSZp_decompress_1D_outlier_f32;
      } else {
        cf = cuSZp_compress_1D_fixed_f32;
        df = cuSZp_decompress_1D_fixed_f32;
      }
      Codec k;
      k.name = c;
      k.mode = c.substr(std::strlen("cuszp_")) + "-1D";
      k.timing = "events around each API call (incl. its cudaMalloc/cudaFree and blocking size readback)";
      k.compress = [&, sz, cf](float eb) { cf(x.p, cmp.p, n, sz.get(), eb, st); };
      k.size = [sz] { return *sz; };
      k.decompress = [&, sz, df](float eb) { df(y.p, cmp.p, n, *sz, eb, st); };
      codecs.push_back(k);
#else
      std::fprintf(stderr, "  %s skipped: built without cuSZp (-DWITH_CUSZP absent)\n", c.c_str());
#endif
    }

    for (double rel : opt.rels) {
      // The same absolute bound for every codec: rel * span in double, rounded down to a float.
      float ebf = static_cast<float>(rel * span);
      if (static_cast<double>(ebf) > rel * span) ebf = std::nextafter(ebf, 0.0f);
      const double eb = ebf;
      if (!(eb > 0)) {
        std::fprintf(stderr, "  REL %g: bound %g is not positive (constant input?), skipped\n", rel, eb);
        continue;
      }
      for (const Codec& k : codecs) {
        const double c_ms = timer.median_ms([&] { k.compress(ebf); });
        const size_t csize = k.size();
        if (k.decode_error) *err_pinned.p = -1;
        // Ours: NaN first, so a value the decoder failed to write shows. cuSZp's decoder leaves
        // the blocks whose values all quantise to 0 unwritten (its examples decode into zeroed
        // memory), so its output is zeroed first; that memset is not in its timed region.
        const bool zero_first = k.name.rfind("cuszp", 0) == 0;
        CUDA_OK(cudaMemsetAsync(y.p, zero_first ? 0x00 : 0xff, n_pad * sizeof(float), st));
        const double d_ms = timer.median_ms([&] { k.decompress(ebf); });
        CUDA_OK(cudaMemcpyAsync(back.p, y.p, bytes, cudaMemcpyDeviceToHost, st));
        CUDA_OK(cudaStreamSynchronize(st));
        const ErrorStats es = check(host.p, back.p, n, eb);
        const double cg = bytes / c_ms / 1e6, dg = bytes / d_ms / 1e6;
        std::string line = "{\"codec\": " + jstr(k.name) + ", \"mode\": " + jstr(k.mode) +
                           ", \"data\": " + jstr(opt.name) + ", \"rel\": " + jnum(rel) +
                           ", \"eb\": " + jnum(eb) + ", \"eb_unrounded\": " + jnum(rel * span) + ", \"n\": " + std::to_string(n) +
                           ", \"bytes\": " + std::to_string(bytes) +
                           ", \"compressed_bytes\": " + std::to_string(csize) +
                           ", \"ratio\": " + jnum(csize ? static_cast<double>(bytes) / csize : 0.0) +
                           ", \"comp_ms\": " + jnum(c_ms) + ", \"decomp_ms\": " + jnum(d_ms) +
                           ", \"comp_gbps\": " + jnum(cg) + ", \"decomp_gbps\": " + jnum(dg) +
                           ", \"max_err\": " + jnum(es.max_err) +
                           ", \"max_err_over_eb\": " + jnum(es.max_err / eb) +
                           ", \"violations\": " + std::to_string(es.violations) +
                           ", \"copy_gbps\": " + jnum(copy_gbps) + ", \"copy_ms\": " + jnum(copy_ms) +
                           ", \"reps\": " + std::to_string(opt.reps) +
                           ", \"device\": " + jstr(device) + ", \"timing\": " + jstr(k.timing);
        if (k.decode_error) {
          const int32_t de = k.decode_error();
          line += ", \"decode_error\": " + std::to_string(de);
          if (de != 0) std::fprintf(stderr, "  %s: decode error %d (%s)\n", k.name.c_str(), de, gpu::error_string(de));
        }
        line += "}";
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        std::fprintf(stderr, "  %-14s REL %-6g ratio %8.2f  comp %7.1f GB/s  decomp %7.1f GB/s  max_err/eb %.4f  violations %llu\n",
                     k.name.c_str(), rel, csize ? static_cast<double>(bytes) / csize : 0.0, cg, dg,
                     es.max_err / eb, static_cast<unsigned long long>(es.violations));
      }
    }
    CUDA_OK(cudaStreamDestroy(st));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
