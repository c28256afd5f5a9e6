// fold() of reduce_ops.h: one loop per (type, op), written once as templates.
#include "reduce_ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace zccl::transport {
namespace {

// MIN/MAX: a NaN operand wins (as in torch.minimum/maximum), and the result never depends on
// the operand order, since MPI may apply its operators in any order on each rank: of two NaNs
// the one with the larger bit pattern, and -0 is below +0 (IEEE 754-2019 minimum/maximum).
template <class T>
T nan_operand(T a, T b) {
  if (a == a) return b;  // only b is NaN
  if (b == b) return a;
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  Bits x = 0, y = 0;
  std::memcpy(&x, &a, sizeof(T));
  std::memcpy(&y, &b, sizeof(T));
  return x < y ? b : a;
}

// MIN (Max false) or MAX (Max true).
template <bool Max, class T>
T extreme(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a || b != b) return nan_operand(a, b);
    if (a == b) return std::signbit(a) == Max ? b : a;  // MIN keeps the -0, MAX the +0
  }
  return (Max ? a < b : b < a) ? b : a;
}

// The unsigned type integer arithmetic runs in (floats: themselves). Types narrower than
// unsigned would be promoted to (signed) int, so they compute in unsigned.
template <class T, bool = std::is_integral_v<T>>
struct Arith {
  using type = T;
};
template <class T>
struct Arith<T, true> {
  using type = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};

template <class T, class F>
void each(T* a, const T* x, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], x[i]);
}

template <class T>
void fold_typed(T* a, const T* x, size_t n, ReduceKind op) {
  // Integer arithmetic wraps like MPI's on the two's-complement bits (no signed overflow UB).
  using U = typename Arith<T>::type;
  switch (op) {
    case ReduceKind::Sum:
      return each(a, x, n, [](T p, T q) { return static_cast<T>(static_cast<U>(p) + static_cast<U>(q)); });
    case ReduceKind::Prod:
      return each(a, x, n, [](T p, T q) { return static_cast<T>(static_cast<U>(p) * static_cast<U>(q)); });
    case ReduceKind::Min: return each(a, x, n, extreme<false, T>);
    case ReduceKind::Max: return each(a, x, n, extreme<true, T>);
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceKind::BAnd: return each(a, x, n, [](T p, T q) { return static_cast<T>(p & q); });
      case ReduceKind::BOr: return each(a, x, n, [](T p, T q) { return static_cast<T>(p | q); });
      case ReduceKind::BXor: return each(a, x, n, [](T p, T q) { return static_cast<T>(p ^ q); });
      case ReduceKind::LAnd: return each(a, x, n, [](T p, T q) { return static_cast<T>(p && q); });
      case ReduceKind::LOr: return each(a, x, n, [](T p, T q) { return static_cast<T>(p || q); });
      case ReduceKind::LXor: return each(a, x, n, [](T p, T q) { return static_cast<T>(!p != !q); });
      default: break;
    }
  }
  throw std::invalid_argument("zccl: reduction " + std::to_string(static_cast<int>(op)) +
                              " is not defined on floating-point data");
}

void fold_bool(uint8_t* a, const uint8_t* x, size_t n, ReduceKind op) {
  switch (op) {
    case ReduceKind::Sum:
    case ReduceKind::Max:
    case ReduceKind::LOr:
    case ReduceKind::BOr: return each(a, x, n, [](uint8_t p, uint8_t q) { return uint8_t(p || q); });
    case ReduceKind::Prod:
    case ReduceKind::Min:
    case ReduceKind::LAnd:
    case ReduceKind::BAnd: return each(a, x, n, [](uint8_t p, uint8_t q) { return uint8_t(p && q); });
    case ReduceKind::LXor:
    case ReduceKind::BXor: return each(a, x, n, [](uint8_t p, uint8_t q) { return uint8_t(!p != !q); });
  }
  throw std::invalid_argument("zccl: unknown reduction");
}

}  // namespace

void fold(void* acc, const void* x, size_t n, ElemType type, ReduceKind op) {
  switch (type) {
    case ElemType::UInt8: return fold_typed(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, op);
    case ElemType::Int8: return fold_typed(static_cast<int8_t*>(acc), static_cast<const int8_t*>(x), n, op);
    case ElemType::Int16: return fold_typed(static_cast<int16_t*>(acc), static_cast<const int16_t*>(x), n, op);
    case ElemType::UInt16: return fold_typed(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(x), n, op);
    case ElemType::UInt32: return fold_typed(static_cast<uint32_t*>(acc), static_cast<const uint32_t*>(x), n, op);
    case ElemType::Int32: return fold_typed(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case ElemType::Int64: return fold_typed(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    case ElemType::UInt64: return fold_typed(static_cast<uint64_t*>(acc), static_cast<const uint64_t*>(x), n, op);
    case ElemType::Float32: return fold_typed(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case ElemType::Float64: return fold_typed(static_cast<double*>(acc), static_cast<const double*>(x), n, op);
    case ElemType::Bool: return fold_bool(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, op);
  }
  throw std::invalid_argument("zccl: unknown element type");
}

}  // namespace zccl::transport
