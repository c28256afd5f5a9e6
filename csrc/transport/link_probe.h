// Timing a group's network for the cost model behind algorithm="auto" (zccl_torch/link.py turns
// the times into link_gbps / link_latency_us). Knows nothing of compression: raw bytes over the
// transport's own point-to-point path, the one the compressed collectives' ring steps take.
#pragma once

#include <cstddef>

#include "transport.h"

namespace zccl::transport {

struct LinkTimes {
  double small_seconds = 0.0;  // one exchange of one byte
  double large_seconds = 0.0;  // one exchange of probe_bytes
};

// Collective on `comm` (every rank, same arguments). Each rank sends to the next rank and
// receives from the previous one at the same time (one ring step), after a warm-up exchange of
// each size: `repeats` timings of `small_exchanges` one-byte exchanges (their mean) and of one
// probe_bytes exchange, each started behind a barrier. Returns the slowest rank's medians (one
// exact MAX all-reduce), the same on every rank. Throws std::invalid_argument for
// probe_bytes < 2, repeats < 1 or small_exchanges < 1; transport errors and timeouts as its
// calls do.
LinkTimes time_ring_exchanges(Comm& comm, size_t probe_bytes, int repeats, int small_exchanges);

}  // namespace zccl::transport
