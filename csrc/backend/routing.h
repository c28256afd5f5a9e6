// Maps torch dtypes and reduce ops onto the compressed path (fZ-light float types) or the exact
// MPI path. No algorithm logic: just the table of what goes where.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "../collectives/collectives.h"

namespace zccl::backend {

// Floating types compress. float16/bfloat16 travel as native half streams in the data-movement
// collectives and are widened to float32 for the reductions (which accumulate in float32).
bool is_compressible_dtype(at::ScalarType t);
bool is_floating(at::ScalarType t);
// fZ-light dtype of a (staged) buffer of type t.
fz::DType compressed_dtype(at::ScalarType t);
// Transport element type moving the tensor's bytes exactly (half types as 16-bit integers).
// Throws for dtypes the transport cannot move.
transport::ElemType elem_type(at::ScalarType t);
// Transport reduction for the exact path (AVG maps to SUM; the caller divides). Throws for
// unsupported combinations with a message naming the op and dtype.
transport::ReduceKind reduce_kind(const c10d::ReduceOp& op, at::ScalarType t);
// The compressed-path reduction, if this op has one (SUM/AVG/MIN/MAX).
std::optional<coll::ReduceOp> compressed_op(const c10d::ReduceOp& op);
// Throws std::invalid_argument unless (op, dtype) is supported at all.
void validate_reduce(const c10d::ReduceOp& op, at::ScalarType t, const char* what);
const char* op_name(const c10d::ReduceOp& op);

}  // namespace zccl::backend
