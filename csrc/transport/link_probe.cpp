#include "link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace zccl::transport {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

LinkTimes time_ring_exchanges(Comm& comm, size_t probe_bytes, int repeats, int small_exchanges) {
  if (probe_bytes < 2 || repeats < 1 || small_exchanges < 1) {
    throw std::invalid_argument(
        "zccl: measure_link: probe_bytes must be >= 2, repeats >= 1 and small_exchanges >= 1, got " +
        std::to_string(probe_bytes) + ", " + std::to_string(repeats) + " and " +
        std::to_string(small_exchanges));
  }
  const int p = comm.size(), r = comm.rank();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const int tag = comm.next_tag_base();
  std::vector<uint8_t> out(probe_bytes, 0), in(probe_bytes);
  const auto exchange = [&](size_t bytes) {
    comm.sendrecv(out.data(), bytes, next, in.data(), bytes, prev, tag);
  };
  // Behind a barrier, so that no rank times another's late arrival.
  const auto timed = [&](size_t bytes, int times) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < times; ++i) exchange(bytes);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    return took.count() / times;
  };
  exchange(1);  // warm-up: connections, TCP's slow start, first touch of the buffers
  exchange(probe_bytes);
  std::vector<double> small, large;
  for (int i = 0; i < repeats; ++i) small.push_back(timed(1, small_exchanges));
  for (int i = 0; i < repeats; ++i) large.push_back(timed(probe_bytes, 1));
  const double mine[2] = {median(small), median(large)};
  double slowest[2] = {0.0, 0.0};
  comm.allreduce(mine, slowest, 2, ElemType::Float64, ReduceKind::Max);
  return {slowest[0], slowest[1]};
}

}  // namespace zccl::transport
