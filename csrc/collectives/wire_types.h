// The exact transport's element type and reduction for the collectives' data types (one
// definition for the data-movement and computation frameworks).
#pragma once

#include <stdexcept>
#include <string>

#include "collectives.h"

namespace zccl::coll {

// Halves are moved, never reduced, by the data-movement collectives: their bytes as UInt16.
inline transport::ElemType elem_type(DType dt) {
  switch (dt) {
    case DType::Float32: return transport::ElemType::Float32;
    case DType::Float64: return transport::ElemType::Float64;
    case DType::Float16:
    case DType::BFloat16: return transport::ElemType::UInt16;
  }
  throw std::invalid_argument("zccl: unknown dtype " + std::to_string(static_cast<int>(dt)));
}

// Avg maps to Sum (the caller divides).
inline transport::ReduceKind reduce_kind(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return transport::ReduceKind::Sum;
    case ReduceOp::Min: return transport::ReduceKind::Min;
    case ReduceOp::Max: return transport::ReduceKind::Max;
  }
  return transport::ReduceKind::Sum;
}

}  // namespace zccl::coll
