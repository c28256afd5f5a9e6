// Writes a version-1 fZ-light stream with the OLD (git HEAD) encoder, and the old decoder's output.
// Usage: v1tool IN.bin DTYPE(f32|f64) EB CHUNK_LEN OUT_STREAM OUT_DECODED [dim0 dim1 ... | --0d]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "fzlight.h"
namespace fz = zccl::fz;
static std::vector<uint8_t> slurp(const char* p) {
  FILE* f = std::fopen(p, "rb");
  if (!f) { std::perror(p); std::exit(2); }
  std::vector<uint8_t> b; uint8_t t[65536]; size_t n;
  while ((n = std::fread(t, 1, sizeof t, f)) > 0) b.insert(b.end(), t, t + n);
  std::fclose(f);
  return b;
}
static void spit(const char* p, const uint8_t* d, size_t n) {
  FILE* f = std::fopen(p, "wb");
  if (!f) { std::perror(p); std::exit(2); }
  if (n) std::fwrite(d, 1, n, f);
  std::fclose(f);
}
int main(int argc, char** argv) {
  if (argc < 7) { std::fprintf(stderr, "usage\n"); return 2; }
  const std::vector<uint8_t> in = slurp(argv[1]);
  const bool f64 = std::string(argv[2]) == "f64";
  const fz::DType dt = f64 ? fz::DType::Float64 : fz::DType::Float32;
  const size_t elem = f64 ? 8 : 4;
  const uint64_t count = in.size() / elem;
  fz::CompressParams p;
  p.error_bound = std::strtod(argv[3], nullptr);
  p.chunk_len = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
  p.threads = 1;
  if (argc > 7) {
    std::vector<uint64_t> shape;
    for (int i = 7; i < argc; ++i) if (std::string(argv[i]) != "--0d") shape.push_back(std::strtoull(argv[i], nullptr, 10));
    p.shape = shape;
  }
  const size_t ndim = p.shape ? p.shape->size() : 1;
  std::vector<uint8_t> dst(fz::max_compressed_size(dt, count, p.chunk_len, ndim));
  const size_t n = fz::compress(in.data(), dt, count, p, dst.data(), dst.size());
  std::vector<uint8_t> out(count * elem);
  fz::decompress(dst.data(), n, out.data(), count, 1);
  // and the same with 3 threads: the stream must not depend on them
  std::vector<uint8_t> dst3(dst.size());
  p.threads = 3;
  const size_t n3 = fz::compress(in.data(), dt, count, p, dst3.data(), dst3.size());
  if (n3 != n || std::memcmp(dst.data(), dst3.data(), n) != 0) { std::fprintf(stderr, "thread-dependent\n"); return 1; }
  spit(argv[5], dst.data(), n);
  spit(argv[6], out.data(), out.size());
  std::printf("%s: version %u, %zu bytes, %llu values\n", argv[5], dst[4], n, (unsigned long long)count);
  return 0;
}
