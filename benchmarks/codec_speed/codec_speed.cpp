// Times fz::compress and fz::decompress (one thread) on a raw float32 file at one absolute bound:
//   codec_speed FILE EB REPEATS
// prints one JSON object: ratio, median compress / decompress seconds, and the max error / eb
// of the last decode. Built by benchmarks/codec_revisions.py against the csrc/compress of any
// revision, so two revisions' codecs can be timed on the same data in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "fzlight.h"

namespace fz = zccl::fz;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FILE EB REPEATS\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> x(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(x.size() * sizeof(float)),
            reinterpret_cast<char*>(x.data()));
  fz::CompressParams p;
  p.error_bound = std::atof(argv[2]);
  p.threads = 1;
  const int repeats = std::max(1, std::atoi(argv[3]));
  std::vector<uint8_t> stream(fz::max_compressed_size(fz::DType::Float32, x.size()));
  std::vector<float> y(x.size());
  std::vector<double> tc, td;
  size_t size = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size = fz::compress(x.data(), fz::DType::Float32, x.size(), p, stream.data(), stream.size());
    const auto t1 = std::chrono::steady_clock::now();
    fz::decompress(stream.data(), size, y.data(), y.size(), 1);
    const auto t2 = std::chrono::steady_clock::now();
    tc.push_back(std::chrono::duration<double>(t1 - t0).count());
    td.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  }
  std::printf("{\"ratio\": %.6f, \"compress_s\": %.6g, \"decompress_s\": %.6g, \"err_over_eb\": %.6f}\n",
              static_cast<double>(x.size() * sizeof(float)) / static_cast<double>(size), median(tc),
              median(td), worst / p.error_bound);
  return 0;
}
