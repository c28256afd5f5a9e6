// Writes a version-2 fZ-light stream with the version-2 encoder (commit 6113997, see
// README.txt) and that version's decoder output for it.
//
// Usage: v2tool IN.bin DTYPE EB CHUNK_LEN CODEC OUT_STREAM OUT_DECODED [dim0 dim1 ... | --0d]
//   DTYPE f32 | f64 | f16 | bf16; CODEC none | zstd (the lossless codec used when EB is 0)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fzlight.h"

namespace fz = zccl::fz;

static std::vector<uint8_t> read_all(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    std::perror(path);
    std::exit(2);
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

static void write_all(const char* path, const uint8_t* data, size_t n) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr || (n > 0 && std::fwrite(data, 1, n, f) != n)) {
    std::perror(path);
    std::exit(2);
  }
  std::fclose(f);
}

static bool parse_dtype(const std::string& s, fz::DType& dt) {
  if (s == "f32") dt = fz::DType::Float32;
  else if (s == "f64") dt = fz::DType::Float64;
  else if (s == "f16") dt = fz::DType::Float16;
  else if (s == "bf16") dt = fz::DType::BFloat16;
  else return false;
  return true;
}

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: v2tool IN DTYPE EB CHUNK CODEC OUT_STREAM OUT_DECODED [shape]\n");
    return 2;
  }
  fz::DType dt;
  if (!parse_dtype(argv[2], dt)) {
    std::fprintf(stderr, "unknown dtype %s\n", argv[2]);
    return 2;
  }
  const std::string codec = argv[5];
  if (codec != "none" && codec != "zstd") {
    std::fprintf(stderr, "unknown codec %s\n", argv[5]);
    return 2;
  }
  const std::vector<uint8_t> in = read_all(argv[1]);
  const size_t elem = fz::dtype_size(dt);
  if (in.size() % elem != 0) {
    std::fprintf(stderr, "input is not a whole number of values\n");
    return 2;
  }
  const uint64_t count = in.size() / elem;
  fz::CompressParams p;
  p.error_bound = std::strtod(argv[3], nullptr);
  p.chunk_len = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
  // An explicit codec, never Auto: the fixture must not depend on how this tool was built.
  p.lossless_codec = codec == "zstd" ? fz::LosslessCodec::ShuffleZstd : fz::LosslessCodec::None;
  if (argc > 8) {
    std::vector<uint64_t> shape;
    for (int i = 8; i < argc; ++i) {
      if (std::string(argv[i]) != "--0d") shape.push_back(std::strtoull(argv[i], nullptr, 10));
    }
    p.shape = shape;
  }
  const size_t ndim = p.shape ? p.shape->size() : 1;
  const size_t cap = fz::max_compressed_size(dt, count, p.chunk_len, ndim);

  p.threads = 1;
  std::vector<uint8_t> stream(cap);
  const size_t n = fz::compress(in.data(), dt, count, p, stream.data(), cap);
  stream.resize(n);
  // The stream must not depend on the thread count (nor the decoder's output).
  p.threads = 3;
  std::vector<uint8_t> stream3(cap);
  stream3.resize(fz::compress(in.data(), dt, count, p, stream3.data(), cap));
  if (stream3 != stream) {
    std::fprintf(stderr, "the stream depends on the thread count\n");
    return 1;
  }
  std::vector<uint8_t> out(count * elem), out3(count * elem);
  fz::decompress(stream.data(), n, out.data(), count, 1);
  fz::decompress(stream.data(), n, out3.data(), count, 3);
  if (out3 != out) {
    std::fprintf(stderr, "the decoded values depend on the thread count\n");
    return 1;
  }
  if (stream[4] != 2) {
    std::fprintf(stderr, "not a version-2 encoder (wrote version %u)\n", stream[4]);
    return 1;
  }
  write_all(argv[6], stream.data(), n);
  write_all(argv[7], out.data(), out.size());
  std::printf("%s: version %u, %zu bytes, %llu values\n", argv[6], stream[4], n,
              static_cast<unsigned long long>(count));
  return 0;
}
