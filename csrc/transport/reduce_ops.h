// Elementwise reductions on typed buffers, for transports that reduce in their own code (the
// TCP transport's exact collectives): acc[i] = acc[i] (op) x[i]. Folding the ranks' vectors in
// rank order with it defines the result bit for bit: ((x0 op x1) op x2) ...
#pragma once

#include <cstddef>

#include "transport.h"

namespace zccl::transport {

// acc[i] = acc[i] op x[i] for i < n. Throws std::invalid_argument for an op the type has not
// (bitwise ops on floats). Bool values are 0/1 bytes; Sum/Prod on Bool are logical or/and.
// MIN/MAX keep NaN when either operand is NaN (as torch's own min/max do) and give the same
// bits in either operand order (-0 below +0; of two NaNs, the larger bit pattern).
void fold(void* acc, const void* x, size_t n, ElemType type, ReduceKind op);

}  // namespace zccl::transport
