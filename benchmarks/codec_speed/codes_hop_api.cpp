// codes_hop.h's HopApi for the csrc/compress on the include path, named HOP_API_NAME
// (hop_api_base or hop_api_tree); compiled with -Dzccl=zccl_base / zccl_tree so that two
// revisions link together.
#include "codes_hop.h"

#include "fzcodes.h"

namespace {

namespace codes = zccl::fz::codes;

size_t max_segment_bytes(uint64_t n) { return codes::max_segment_bytes(n); }

size_t combine(const uint8_t* in, size_t in_len, const float* x, uint64_t n, double eb, int ranks,
               uint8_t* dst, size_t cap) {
  return codes::combine<float>(in, in_len, x, n, *codes::make_grid(eb, ranks), dst, cap);
}

void decode(const uint8_t* src, size_t len, uint64_t n, double eb, int ranks, float* out) {
  codes::decode<float>(src, len, n, *codes::make_grid(eb, ranks), out);
}

}  // namespace

HopApi HOP_API_NAME() { return HopApi{max_segment_bytes, combine, decode}; }
