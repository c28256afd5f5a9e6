#include "routing.h"

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

transport::ElemType elem_type(at::ScalarType t) {
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
    case at::kBool: return transport::ElemType::Bool;
    default:
      throw std::invalid_argument(std::string("zccl: unsupported dtype ") + c10::toString(t));
  }
}

const char* op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
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
  const std::string where = std::string("zccl: ") + what + " with ReduceOp." + op_name(op) +
                            " on " + c10::toString(t) + ": ";
  (void)elem_type(t);  // unsupported dtypes throw here
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
    default:
      throw std::invalid_argument(where + "this reduce op is not supported by the zccl backend");
  }
}

transport::ReduceKind reduce_kind(const c10d::ReduceOp& op, at::ScalarType t) {
  const bool boolean = t == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG: return boolean ? transport::ReduceKind::LOr : transport::ReduceKind::Sum;
    case c10d::ReduceOp::PRODUCT: return boolean ? transport::ReduceKind::LAnd : transport::ReduceKind::Prod;
    case c10d::ReduceOp::MIN: return boolean ? transport::ReduceKind::LAnd : transport::ReduceKind::Min;
    case c10d::ReduceOp::MAX: return boolean ? transport::ReduceKind::LOr : transport::ReduceKind::Max;
    case c10d::ReduceOp::BAND: return boolean ? transport::ReduceKind::LAnd : transport::ReduceKind::BAnd;
    case c10d::ReduceOp::BOR: return boolean ? transport::ReduceKind::LOr : transport::ReduceKind::BOr;
    case c10d::ReduceOp::BXOR: return boolean ? transport::ReduceKind::LXor : transport::ReduceKind::BXor;
    default: throw std::invalid_argument(std::string("zccl: unsupported reduce op ") + op_name(op));
  }
}

std::optional<coll::ReduceOp> compressed_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return coll::ReduceOp::Sum;
    case c10d::ReduceOp::AVG: return coll::ReduceOp::Avg;
    case c10d::ReduceOp::MIN: return coll::ReduceOp::Min;
    case c10d::ReduceOp::MAX: return coll::ReduceOp::Max;
    default: return std::nullopt;
  }
}

}  // namespace zccl::backend
