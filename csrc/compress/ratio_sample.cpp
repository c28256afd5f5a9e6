#include "ratio_sample.h"

#include <algorithm>
#include <vector>

#include "fzlight_format.h"

namespace zccl::fz {

double RatioSample::ratio() const {
  return compressed_bytes > 0.0 ? static_cast<double>(raw_bytes) / compressed_bytes : 0.0;
}

RatioSample sample_ratio(const void* src, DType dt, uint64_t count, const CompressParams& params,
                         uint64_t max_values) {
  RatioSample out;
  if (count == 0) return out;
  if (max_values == 0) throw ArgumentError("fzlight sample_ratio: max_values must be > 0");
  const bool whole = count <= max_values;
  const uint64_t windows =
      whole ? 1 : std::clamp<uint64_t>(max_values / kMinWindowValues, 1, kRatioSampleWindows);
  const uint64_t len =
      whole ? count : std::max<uint64_t>(kBlockLen, max_values / windows / kBlockLen * kBlockLen);
  CompressParams one = params;
  one.threads = 1;
  one.shape.reset();
  std::vector<uint8_t> stream(max_compressed_size(dt, len, params.chunk_len));
  const auto* bytes = static_cast<const uint8_t*>(src);
  const size_t size = dtype_size(dt);
  for (uint64_t w = 0; w < windows; ++w) {
    // Evenly spaced starts from 0 to count - len (windows * len <= max_values < count: no
    // overlap).
    const uint64_t last_start = count > len ? count - len : 0;
    const uint64_t gaps = std::max<uint64_t>(1, windows - 1);  // without overflowing the product
    const uint64_t start = last_start / gaps * w + last_start % gaps * w / gaps;
    const uint64_t n = std::min(len, count - start);
    const size_t total = compress(bytes + start * size, dt, n, one, stream.data(), stream.size());
    const StreamInfo info = read_info(stream.data(), total);
    out.raw_bytes += n * size;
    const double table = static_cast<double>(format::kTableEntryBytes) * static_cast<double>(n) /
                         static_cast<double>(params.chunk_len);
    out.compressed_bytes += static_cast<double>(total - info.header_bytes) + table;
    out.values += n;
  }
  return out;
}

}  // namespace zccl::fz
