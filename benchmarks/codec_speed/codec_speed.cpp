// Times fz::compress and fz::decompress (one thread) on a raw float32 file at one absolute bound,
// and the ring all_reduce's float hop (fz::recompress_add: the first half's stream decoded, the
// second half added, the sum compressed, chunk by chunk):
//   codec_speed FILE EB REPEATS
// prints one JSON object: ratio, median compress / decompress / hop seconds, and the max error /
// eb of the last decode. Built by benchmarks/codec_revisions.py against the csrc/compress of any
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
  const size_t h = x.size() / 2;
  std::vector<uint8_t> first(fz::max_compressed_size(fz::DType::Float32, h));
  std::vector<uint8_t> sum(first.size());
  const size_t first_size = fz::compress(x.data(), fz::DType::Float32, h, p, first.data(), first.size());
  std::vector<double> th;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fz::recompress_add(first.data(), first_size, x.data() + h, h, p, sum.data(), sum.size());
    th.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  }
  std::printf("{\"ratio\": %.6f, \"compress_s\": %.6g, \"decompress_s\": %.6g, \"hop_s\": %.6g, "
              "\"err_over_eb\": %.6f}\n",
              static_cast<double>(x.size() * sizeof(float)) / static_cast<double>(size), median(tc),
              median(td), median(th), worst / p.error_bound);
  return 0;
}
