// How well fZ-light compresses a buffer at a bound, estimated from a few windows of it. The
// automatic algorithm choice (collectives/route.cpp) weighs the wire's bytes by this ratio, so
// it must cost little next to the collective: at most `max_values` values are coded, on the
// calling thread.
#pragma once

#include <cstdint>

#include "fzlight.h"

namespace zccl::fz {

struct RatioSample {
  uint64_t raw_bytes = 0;   // bytes of the values sampled
  // Their chunks' bytes in a stream, plus a chunk-table entry's 8 bytes per chunk_len values (a
  // window's share of the table of a stream of the whole buffer).
  double compressed_bytes = 0.0;
  uint64_t values = 0;      // values sampled

  // raw_bytes / compressed_bytes; 0 when nothing was sampled.
  double ratio() const;
};

// Windows a sample is spread over (evenly, the first at the start of the buffer, the last at its
// end): data whose compressibility changes along the buffer (a quiet region, a noisy one) is seen
// in several places, not just at its start. Each window holds at least kMinWindowValues values
// (fewer windows for a smaller sample): a window is coded as a stream of its own, and in a short
// one the fixed bytes of a chunk (mode, outlier count, block bitmap) weigh more than in the
// buffer's chunks.
inline constexpr uint64_t kRatioSampleWindows = 8;
inline constexpr uint64_t kMinWindowValues = 1024;

// Compresses up to `max_values` of the `count` values at `src` with `params` (its threads are
// ignored: one thread) and reports their bytes against the compressed bytes of their chunks.
// The whole buffer when count <= max_values, else min(kRatioSampleWindows, max_values /
// kMinWindowValues) windows (at least one) of max_values / windows values, rounded down to a
// multiple of kBlockLen (at least one block). Each window is a stream of its own, whose header is
// not counted: one stream of the whole buffer would carry one header, not one per window. Throws
// ArgumentError for params compress() refuses, and when max_values is 0 and count is not.
RatioSample sample_ratio(const void* src, DType dt, uint64_t count, const CompressParams& params,
                         uint64_t max_values);

}  // namespace zccl::fz
