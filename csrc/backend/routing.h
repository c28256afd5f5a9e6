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
// Whether the exact path has arithmetic for t (integers signed and unsigned, bool, the four
// floating types): the dtypes reductions accept. float8, complex and the bit types have none.
bool has_arithmetic(at::ScalarType t);
// Transport element type of a dtype with arithmetic (half types as 16-bit words, which only the
// data-movement collectives see: reductions widen them to float32 first). Throws for the others.
transport::ElemType elem_type(at::ScalarType t);
// Transport element type the data-movement collectives (broadcast, gathers, scatter, all_to_all)
// move t's elements as, exactly: elem_type(t) where t has arithmetic, else an unsigned word of
// t's element size (float8, float4_e2m1fn_x2, complex32/64, the bits types), the bytes
// unchanged. Throws std::invalid_argument naming the dtype for the others: complex128 (16-byte
// elements: no transport word that wide), the sub-byte shell dtypes uint1-7/int1-7 (torch cannot
// even copy them) and any dtype not listed. (Quantized tensors never get here: torch's
// dispatcher has no c10d kernels for them.)
transport::ElemType moved_as(at::ScalarType t);
// Transport reduction for the exact path (AVG and PREMUL_SUM map to SUM; the caller divides, or
// premultiplied). Throws for unsupported combinations with a message naming the op and dtype.
transport::ReduceKind reduce_kind(const c10d::ReduceOp& op, at::ScalarType t);
// The compressed-path reduction, if this op has one (SUM/AVG/MIN/MAX; PREMUL_SUM as SUM).
std::optional<coll::ReduceOp> compressed_op(const c10d::ReduceOp& op);
// PREMUL_SUM (torch's ReduceOp.PREMUL_SUM(factor) / _make_nccl_premul_sum, NCCL's
// ncclRedOpCreatePreMulSum): the SUM of every rank's input multiplied by that rank's own factor
// (a number or a one-element tensor; ranks may pass different ones).
bool is_premul_sum(const c10d::ReduceOp& op);
// For PREMUL_SUM: `staged` multiplied by the factor in place, in `staged`'s dtype (float32 for a
// half tensor the reduction widened, so the product is rounded once, with the sum). `staged`
// must be the call's own copy (Staged with own_copy): the caller's tensor stays as it was when
// the call is refused or is an input only. Any other op: nothing.
void premultiply_staged(at::Tensor& staged, const c10d::ReduceOp& op);
// Throws std::invalid_argument unless (op, dtype) is supported at all.
void validate_reduce(const c10d::ReduceOp& op, at::ScalarType t, const char* what);
// "SUM", "PREMUL_SUM", ...: the op's name as torch's ReduceOp spells it.
const char* op_name(c10d::ReduceOp::RedOpType op);

}  // namespace zccl::backend
