#include "routing.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace zccl::backend {

bool is_compressible_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

bool is_floating(at::ScalarType t) { return is_compressible_dtype(t); }

fz::DType compressed_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return fz::DType::Float64;
    case at::kHalf: return fz::DType::Float16;
    case at::kBFloat16: return fz::DType::BFloat16;
    default: return fz::DType::Float32;
  }
}

namespace {

std::optional<transport::ElemType> arithmetic_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return transport::ElemType::Float32;
    case at::kDouble: return transport::ElemType::Float64;
    case at::kHalf:
    case at::kBFloat16: return transport::ElemType::UInt16;
    case at::kByte: return transport::ElemType::UInt8;
    case at::kChar: return transport::ElemType::Int8;
    case at::kShort: return transport::ElemType::Int16;
    case at::kInt: return transport::ElemType::Int32;
    case at::kLong: return transport::ElemType::Int64;
    case at::kUInt16: return transport::ElemType::UInt16;
    case at::kUInt32: return transport::ElemType::UInt32;
    case at::kUInt64: return transport::ElemType::UInt64;
    case at::kBool: return transport::ElemType::Bool;
    default: return std::nullopt;
  }
}

}  // namespace

bool has_arithmetic(at::ScalarType t) { return arithmetic_type(t).has_value(); }

transport::ElemType elem_type(at::ScalarType t) {
  if (const auto type = arithmetic_type(t)) return *type;
  throw std::invalid_argument(std::string("zccl: no arithmetic for dtype ") + c10::toString(t));
}

transport::ElemType moved_as(at::ScalarType t) {
  if (const auto type = arithmetic_type(t)) return *type;
  const std::string name = c10::toString(t);
  // A list, not "any size": a dtype torch adds later is refused until it has been checked.
  const bool bytes_only = c10::isFloat8Type(t) || t == c10::ScalarType::Float4_e2m1fn_x2 ||
                          c10::isBitsType(t) || c10::isComplexType(t);
  if (!bytes_only) {
    // The sub-byte shell dtypes (uint1-7, int1-7) have no copy kernels in torch itself.
    throw std::invalid_argument("zccl: dtype " + name + " is not supported (move t.view(torch.uint8) "
                                "instead)");
  }
  switch (c10::elementSize(t)) {
    case 1: return transport::ElemType::UInt8;
    case 2: return transport::ElemType::UInt16;
    case 4: return transport::ElemType::UInt32;
    case 8: return transport::ElemType::UInt64;
    default:  // complex128
      throw std::invalid_argument("zccl: dtype " + name + " is not supported: its " +
                                  std::to_string(c10::elementSize(t)) + "-byte elements have no "
                                  "transport type (torch.view_as_real moves it as float64 pairs)");
  }
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNKNOWN";
  }
}

void validate_reduce(const c10d::ReduceOp& op, at::ScalarType t, const char* what) {
  const std::string where = std::string("zccl: ") + what + " with ReduceOp." + op_name(op.op_) +
                            " on " + c10::toString(t) + ": ";
  if (!has_arithmetic(t)) {
    throw std::invalid_argument(where + "reductions need an integer, bool or floating dtype "
                                "(float16, bfloat16, float32, float64); this dtype can be moved "
                                "(broadcast, gathers, scatter, all_to_all, send/recv) but not reduced");
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX: return;
    case c10d::ReduceOp::AVG:
      if (!is_floating(t)) throw std::invalid_argument(where + "AVG needs a floating-point dtype");
      return;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (is_floating(t)) throw std::invalid_argument(where + "bitwise ops need an integer or bool dtype");
      return;
    case c10d::ReduceOp::PREMUL_SUM:
      // Integers would take the factor rounded to their type (NCCL does so): refused instead.
      if (!is_floating(t)) throw std::invalid_argument(where + "PREMUL_SUM needs a floating-point dtype");
      if (!op.supplement_) {
        throw std::invalid_argument(where + "PREMUL_SUM without its factor (make it with "
                                    "ReduceOp.PREMUL_SUM(factor) or dist._make_nccl_premul_sum(factor))");
      }
      return;
    default:
      throw std::invalid_argument(where + "this reduce op is not supported by the zccl backend");
  }
}

transport::ReduceKind reduce_kind(const c10d::ReduceOp& op, at::ScalarType t) {
  const bool boolean = t == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG:
    case c10d::ReduceOp::PREMUL_SUM: return boolean ? transport::ReduceKind::LOr : transport::ReduceKind::Sum;
    case c10d::ReduceOp::PRODUCT: return boolean ? transport::ReduceKind::LAnd : transport::ReduceKind::Prod;
    case c10d::ReduceOp::MIN: return boolean ? transport::ReduceKind::LAnd : transport::ReduceKind::Min;
    case c10d::ReduceOp::MAX: return boolean ? transport::ReduceKind::LOr : transport::ReduceKind::Max;
    case c10d::ReduceOp::BAND: return boolean ? transport::ReduceKind::LAnd : transport::ReduceKind::BAnd;
    case c10d::ReduceOp::BOR: return boolean ? transport::ReduceKind::LOr : transport::ReduceKind::BOr;
    case c10d::ReduceOp::BXOR: return boolean ? transport::ReduceKind::LXor : transport::ReduceKind::BXor;
    default: throw std::invalid_argument(std::string("zccl: unsupported reduce op ") + op_name(op.op_));
  }
}

std::optional<coll::ReduceOp> compressed_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM: return coll::ReduceOp::Sum;
    case c10d::ReduceOp::AVG: return coll::ReduceOp::Avg;
    case c10d::ReduceOp::MIN: return coll::ReduceOp::Min;
    case c10d::ReduceOp::MAX: return coll::ReduceOp::Max;
    default: return std::nullopt;
  }
}

bool is_premul_sum(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::PREMUL_SUM; }

void premultiply_staged(at::Tensor& staged, const c10d::ReduceOp& op) {
  if (!is_premul_sum(op)) return;
  // Only PREMUL_SUM carries a supplement, and torch's makePreMulSum makes it a
  // PreMulSumSupplement (validate_reduce checked it is there).
  const auto* factor = static_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  if (factor->tensor_factor.defined()) {
    // A one-element tensor, possibly on another device: as a 0-dim tensor of the buffer's dtype
    // on its device.
    const at::Tensor f =
        factor->tensor_factor.to(staged.device(), staged.scalar_type()).reshape({});
    staged.mul_(f);
  } else {
    staged.mul_(factor->double_factor);
  }
}

}  // namespace zccl::backend
