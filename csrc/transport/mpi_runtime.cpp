// MPI runtime facts of the transport: lazy initialisation with the thread level we need,
// finalisation only when we initialised MPI, the call lock, limits, errors, type mapping.
//
// * Initialisation: ensure_initialized() calls MPI_Init_thread(MPI_THREAD_MULTIPLE) at most once,
//   lazily (never at import time), and remembers whether *we* initialised MPI; only then does
//   finalize_if_owned() finalise it. An MPI initialised by someone else is used as it is.
// * Thread level: when the library provides less than MPI_THREAD_MULTIPLE, every MPI call made
//   through this layer holds one process-wide mutex (reentrant per thread, so check() may be
//   called under it). Polling waits take the lock per MPI_Test, so concurrent waits on different
//   communicators interleave. MPI calls made by others (the user, mpi4py) are not covered by the
//   lock: with less than MULTIPLE they must not run concurrently with ours.
// * Errors: every communicator we create gets MPI_ERRORS_RETURN and every return code is checked
//   (MpiError with MPI_Error_string, the call and the peer/tag where there is one).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

#include "mpi_internal.h"
#include "reduce_ops.h"

namespace zccl::transport {
namespace {

std::mutex g_init_mutex;          // guards initialisation / finalisation state
std::atomic<int> g_provided{-1};  // provided thread level, -1 until initialised
bool g_owned = false;             // we called MPI_Init_thread (under g_init_mutex)
std::atomic<bool> g_finalized_by_us{false};
std::atomic<bool> g_serialize{false};  // provided < MPI_THREAD_MULTIPLE: serialise our calls
std::mutex g_mpi_mutex;
thread_local int t_lock_depth = 0;

std::atomic<size_t> g_piece_bytes{size_t{1} << 30};
std::atomic<size_t> g_max_coll_count{static_cast<size_t>(INT_MAX)};

}  // namespace

namespace mpi {

Guard::Guard() {
  if (t_lock_depth == 0 && g_serialize.load(std::memory_order_acquire)) {
    g_mpi_mutex.lock();
    locked_ = true;
  }
  ++t_lock_depth;
}

Guard::~Guard() {
  --t_lock_depth;
  if (locked_) g_mpi_mutex.unlock();
}

bool finalized() {
  int flag = 0;
  MPI_Finalized(&flag);  // callable at any time, thread-safe per the standard
  return flag != 0;
}

MpiError make_error(int rc, const std::string& what) {
  Guard g;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  std::string msg;
  if (MPI_Error_string(rc, text, &len) == MPI_SUCCESS && len > 0) {
    msg.assign(text, static_cast<size_t>(len));
  } else {
    msg = "unknown MPI error";
  }
  int cls = MPI_ERR_OTHER;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) cls = MPI_ERR_OTHER;
  return MpiError("zccl: " + what + " failed: " + msg + " (MPI error code " + std::to_string(rc) +
                      ")",
                  cls);
}

void check_str(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw make_error(rc, what);
}

int to_int_count(size_t n, const char* what) {
  if (n > max_collective_count()) {
    throw std::length_error(std::string("zccl: ") + what + ": count/displacement " +
                            std::to_string(n) + " exceeds the largest count of one MPI call (" +
                            std::to_string(max_collective_count()) +
                            "); split the operation into smaller ones");
  }
  return static_cast<int>(n);
}

std::string comm_desc(MPI_Comm comm) {
  int rank = -1, size = -1;
  if (comm != MPI_COMM_NULL && !finalized()) {
    Guard g;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  return "rank " + std::to_string(rank) + " of a communicator of " + std::to_string(size);
}

// The peers a collective on `size` ranks waits for, seen from `rank`: "rank 1", "ranks 0, 2-3".
std::string others_desc(int rank, int size) {
  if (size <= 1) return "no other rank";
  auto range = [](int a, int b) {
    return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
  };
  std::string s = size == 2 ? "rank " : "ranks ";
  if (rank > 0) s += range(0, rank - 1);
  if (rank < size - 1) s += std::string(rank > 0 ? ", " : "") + range(rank + 1, size - 1);
  return size > 2 ? s + " (any of them)" : s;
}

MPI_Datatype datatype(ElemType t) {
  switch (t) {
    case ElemType::UInt8: return MPI_UINT8_T;
    case ElemType::Int8: return MPI_INT8_T;
    case ElemType::Int16: return MPI_INT16_T;
    case ElemType::Int32: return MPI_INT32_T;
    case ElemType::Int64: return MPI_INT64_T;
    case ElemType::UInt16: return MPI_UINT16_T;
    case ElemType::UInt32: return MPI_UINT32_T;
    case ElemType::UInt64: return MPI_UINT64_T;
    case ElemType::Float32: return MPI_FLOAT;
    case ElemType::Float64: return MPI_DOUBLE;
    case ElemType::Bool: return MPI_C_BOOL;
  }
  throw std::invalid_argument("zccl: unknown element type");
}

namespace {

// Where MPI's built-in operator is not what torch, Gloo and our TCP transport compute, the
// reduction goes through an operator of ours that folds with the transport's arithmetic
// (reduce_ops.h):
// * SUM of 8- and 16-bit integers: Open MPI 4.1's AVX component (op/avx) saturates them
//   (100 + 100 as int8 gives 127, measured here for allreduce, reduce and reduce_scatter_block
//   from 8 to 64 values on; upstream open-mpi/ompi#8045, closed as wontfix); they must wrap (-56).
// * MIN/MAX of floats: MPI_MIN/MPI_MAX drop or keep a NaN depending on which rank holds it; ours
//   keep it, as the compressed path and the TCP transport do.
// * MIN/MAX of unsigned integers: MPICH 4.0 (Debian's 4.0.2, ch4) compares MPI_UINT8_T,
//   MPI_UINT16_T and MPI_UINT64_T as signed (the MAX of 200, 5 and 7 as uint8 gave 7), and Open
//   MPI 4.1 MPI_UNSIGNED_LONG (measured here with a C program on 3 ranks; Open MPI's
//   MPI_UINT*_T were right). Ours compare them as unsigned under every MPI.
ElemType elem_type_of(MPI_Datatype type) {
  for (ElemType t : {ElemType::Int8, ElemType::UInt8, ElemType::Int16, ElemType::UInt16,
                     ElemType::UInt32, ElemType::UInt64, ElemType::Float32, ElemType::Float64}) {
    if (datatype(t) == type) return t;
  }
  std::abort();  // unreachable: op() hands these operators out for the types above only
}

template <ReduceKind K>
void fold_callback(void* in, void* inout, int* len, MPI_Datatype* type) {
  fold(inout, in, static_cast<size_t>(*len), elem_type_of(*type), K);
}

// The operator of ours for K, created on first use (retried if MPI_Op_create fails). Commutative:
// fold gives the same bits in either operand order.
template <ReduceKind K>
MPI_Op folding_op() {
  static std::once_flag created;
  static MPI_Op handle = MPI_OP_NULL;
  std::call_once(created, [] {
    Guard g;
    check_str(MPI_Op_create(&fold_callback<K>, /*commute=*/1, &handle), "MPI_Op_create");
  });
  return handle;
}

}  // namespace

MPI_Op op(ReduceKind k, ElemType t) {
  const bool narrow_integer = t == ElemType::Int8 || t == ElemType::UInt8 ||
                              t == ElemType::Int16 || t == ElemType::UInt16;
  const bool floating = t == ElemType::Float32 || t == ElemType::Float64;
  const bool is_unsigned = t == ElemType::UInt8 || t == ElemType::UInt16 ||
                           t == ElemType::UInt32 || t == ElemType::UInt64;
  const bool ordered_by_us = floating || is_unsigned;
  if (k == ReduceKind::Sum && narrow_integer) return folding_op<ReduceKind::Sum>();
  if (k == ReduceKind::Min && ordered_by_us) return folding_op<ReduceKind::Min>();
  if (k == ReduceKind::Max && ordered_by_us) return folding_op<ReduceKind::Max>();
  switch (k) {
    case ReduceKind::Sum: return MPI_SUM;
    case ReduceKind::Prod: return MPI_PROD;
    case ReduceKind::Min: return MPI_MIN;
    case ReduceKind::Max: return MPI_MAX;
    case ReduceKind::BAnd: return MPI_BAND;
    case ReduceKind::BOr: return MPI_BOR;
    case ReduceKind::BXor: return MPI_BXOR;
    case ReduceKind::LAnd: return MPI_LAND;
    case ReduceKind::LOr: return MPI_LOR;
    case ReduceKind::LXor: return MPI_LXOR;
  }
  throw std::invalid_argument("zccl: unknown reduction");
}

}  // namespace mpi

using mpi::finalized;
using mpi::Guard;

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw mpi::make_error(rc, what);
}

int ensure_initialized() {
  const int known = g_provided.load(std::memory_order_acquire);
  if (known >= 0 && !g_finalized_by_us) return known;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_finalized_by_us || finalized()) {
    throw MpiError("zccl: MPI has already been finalized; it cannot be initialised again",
                   MPI_ERR_OTHER);
  }
  if (g_provided.load() >= 0) return g_provided.load();
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
    g_owned = false;
  } else {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    // Open MPI 4.1 reports a failed non-blocking collective (a message longer than its receive,
    // as mismatched all_to_all splits give with check_agreement=False) through MPI_COMM_WORLD's
    // handler, not the communicator's, and the default one aborts the whole job. As MPI's owner
    // we make it return, so the error becomes a Python exception like every other one.
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    g_owned = true;
  }
  g_serialize.store(provided < MPI_THREAD_MULTIPLE, std::memory_order_release);
  g_provided.store(provided, std::memory_order_release);
  return provided;
}

void finalize_if_owned() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (!g_owned || g_finalized_by_us || finalized()) return;
  Guard g;
  check(MPI_Finalize(), "MPI_Finalize");
  g_finalized_by_us = true;
}

bool abort_if_owned(int code) {
  {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if (!g_owned || g_finalized_by_us || finalized()) return false;
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) return false;
  // No serialising lock: another thread may be inside a blocking MPI call, and MPI_Abort is
  // meant to be callable from any state.
  MPI_Abort(MPI_COMM_WORLD, code);
  return true;  // not reached: MPI_Abort does not return
}

bool thread_multiple() { return ensure_initialized() >= MPI_THREAD_MULTIPLE; }

void set_max_piece_bytes(size_t bytes) {
  g_piece_bytes.store(std::clamp<size_t>(bytes, 1, static_cast<size_t>(INT_MAX)));
}
size_t max_piece_bytes() { return g_piece_bytes.load(); }

void set_max_collective_count(size_t count) {
  g_max_coll_count.store(std::clamp<size_t>(count, 1, static_cast<size_t>(INT_MAX)));
}
size_t max_collective_count() { return g_max_coll_count.load(); }

}  // namespace zccl::transport
