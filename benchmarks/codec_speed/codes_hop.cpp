// One ring hop of the integer codes (fz::codes::combine of an incoming one-rank segment with the
// local values) and the decode of its result, for two revisions of csrc/compress linked into one
// program (codes_hop.h), alternating call by call on the same inputs so that the machine's drift
// hits both alike. Built and run by benchmarks/codes_revisions.py:
//   codes_hop INCOMING.f32 LOCAL.f32 EB RANKS REPEATS
// prints one JSON object: per revision the bytes of the hop's segment, the median combine and
// decode seconds, and the decoded sum's max error / (2 * eb).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "codes_hop.h"

namespace {

std::vector<float> read_f32(const char* path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> x(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(x.size() * sizeof(float)),
            reinterpret_cast<char*>(x.data()));
  return x;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One revision's hop: its segments, timings and result.
struct Hop {
  HopApi api;
  std::vector<uint8_t> in, out;
  size_t in_len = 0, out_len = 0;
  std::vector<float> values;
  std::vector<double> combine_s, decode_s;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s INCOMING.f32 LOCAL.f32 EB RANKS REPEATS\n", argv[0]);
    return 2;
  }
  const std::vector<float> incoming = read_f32(argv[1]), local = read_f32(argv[2]);
  const double eb = std::atof(argv[3]);
  const int ranks = std::atoi(argv[4]), repeats = std::max(1, std::atoi(argv[5]));
  if (incoming.size() != local.size()) {
    std::fprintf(stderr, "inputs differ in length\n");
    return 2;
  }
  const size_t n = local.size();
  Hop hops[2] = {{hop_api_base(), {}, {}, 0, 0, {}, {}, {}},
                 {hop_api_tree(), {}, {}, 0, 0, {}, {}, {}}};
  for (Hop& h : hops) {
    h.in.resize(h.api.max_segment_bytes(n));
    h.out.resize(h.in.size());
    h.values.resize(n);
    h.in_len = h.api.combine(nullptr, 0, incoming.data(), n, eb, ranks, h.in.data(), h.in.size());
  }
  for (int r = 0; r < repeats; ++r) {
    for (Hop& h : hops) {
      auto t0 = std::chrono::steady_clock::now();
      h.out_len = h.api.combine(h.in.data(), h.in_len, local.data(), n, eb, ranks, h.out.data(),
                                h.out.size());
      h.combine_s.push_back(seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      h.api.decode(h.out.data(), h.out_len, n, eb, ranks, h.values.data());
      h.decode_s.push_back(seconds_since(t0));
    }
  }
  std::printf("{");
  const char* names[2] = {"base", "tree"};
  for (int k = 0; k < 2; ++k) {
    double worst = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double exact = static_cast<double>(incoming[i]) + static_cast<double>(local[i]);
      if (std::isfinite(exact)) worst = std::max(worst, std::fabs(exact - hops[k].values[i]));
    }
    std::printf("%s\"%s\": {\"bytes\": %zu, \"combine_s\": %.6g, \"decode_s\": %.6g, "
                "\"err_over_bound\": %.6f}",
                k ? ", " : "", names[k], hops[k].out_len, median(hops[k].combine_s),
                median(hops[k].decode_s), worst / (2.0 * eb));
  }
  std::printf("}\n");
  return 0;
}
