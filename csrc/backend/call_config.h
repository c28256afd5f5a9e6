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
  Lossless,  // bit-exact: error_bound is ignored (0), chunks go through the lossless codec
};

struct CallConfig {
  double error_bound = 1e-4;
  BoundMode mode = BoundMode::Rel;
  int threads = 0;
  uint32_t chunk_len = fz::kDefaultChunkLen;
  size_t min_compress_bytes = 64 * 1024;
  coll::Algorithm algorithm = coll::Algorithm::Auto;
  // Agree before each collective on what it is (op, reduce op, root, dtype, counts, the settings
  // below): a disagreement raises on every rank instead of hanging or a silent wrong answer.
  bool check_agreement = true;
  // Broadcast and all_gather: the owner of a block keeps its exact values instead of taking the
  // decoded ones every other rank holds (outputs then differ across ranks within the bound).
  bool owner_exact = false;
};

// Some fields of a CallConfig, laid over a group's defaults (the Python `config()` block).
struct CallOverride {
  enum Field : uint32_t {
    kErrorBound = 1u << 0,
    kMode = 1u << 1,
    kThreads = 1u << 2,
    kChunkLen = 1u << 3,
    kMinCompressBytes = 1u << 4,
    kAlgorithm = 1u << 5,
    kCheckAgreement = 1u << 6,
    kOwnerExact = 1u << 7,
    kAll = (1u << 8) - 1,
  };
  CallConfig values;
  uint32_t fields = 0;  // which members of `values` replace the group's defaults

  CallConfig apply(const CallConfig& base) const;
};

// Sets (or clears, with nullopt) the override for collectives issued from this thread.
void set_thread_override(std::optional<CallOverride> config);
const std::optional<CallOverride>& thread_override();
// The configuration a collective issued from this thread on a group with `defaults` uses.
CallConfig resolve_for_thread(const CallConfig& defaults);

}  // namespace zccl::backend
