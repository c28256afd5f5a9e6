// The integer-code hop of one revision of csrc/compress, behind plain function pointers, so that
// two revisions can be linked into one program (benchmarks/codes_revisions.py compiles
// codes_hop_api.cpp once per revision, each with its namespace renamed).
#pragma once

#include <cstddef>
#include <cstdint>

struct HopApi {
  size_t (*max_segment_bytes)(uint64_t n);
  // fz::codes::combine on the grid of (eb, ranks); in == nullptr: the first hop.
  size_t (*combine)(const uint8_t* in, size_t in_len, const float* x, uint64_t n, double eb,
                    int ranks, uint8_t* dst, size_t cap);
  void (*decode)(const uint8_t* src, size_t len, uint64_t n, double eb, int ranks, float* out);
};

HopApi hop_api_base();
HopApi hop_api_tree();
