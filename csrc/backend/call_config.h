// Per-call configuration of the zccl backend: the group's defaults, optionally overridden for a
// block of code by the Python context manager (a thread-local override on the calling thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "../collectives/collectives.h"

namespace zccl::backend {

enum class BoundMode : uint8_t {
  Abs,  // error_bound is absolute
  Rel,  // error_bound is relative to the value range, agreed across ranks before compressing
};

struct CallConfig {
  double error_bound = 1e-4;
  BoundMode mode = BoundMode::Rel;
  int threads = 0;
  uint32_t chunk_len = fz::kDefaultChunkLen;
  size_t min_compress_bytes = 64 * 1024;
  coll::Algorithm algorithm = coll::Algorithm::Auto;
  bool check_sizes = true;  // agree on element counts before each collective (clear errors)
};

// Sets (or clears, with nullopt) the override for collectives issued from this thread.
void set_thread_override(std::optional<CallConfig> config);
const std::optional<CallConfig>& thread_override();

}  // namespace zccl::backend
