// Helpers shared by the data-movement collectives (allgather_ring.cpp, broadcast_binomial.cpp,
// scatter_binomial.cpp, gather_binomial.cpp, alltoallv_pairwise.cpp): argument checks, the
// compress-once / decompress-once block codec with Stats accounting, the "uncompressed MPI path"
// decision, size-mismatch errors, and the binomial tree geometry. Torch-free.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "collectives.h"

namespace zccl::coll::detail {

// An allocator whose value-less construct() leaves memory uninitialised: compressed-stream
// buffers are sized by max_compressed_size and written right after, so zero-filling them would
// cost as much as a copy of the data.
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() noexcept = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

// A compressed stream (or any byte payload) in flight.
using Bytes = std::vector<uint8_t, NoInitAllocator<uint8_t>>;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0);

// MPI datatype of a compressible dtype (MPI_FLOAT / MPI_DOUBLE).
MPI_Datatype mpi_type(DType dt);

// count * dtype_size(dt), throwing std::invalid_argument when it overflows size_t.
size_t payload_bytes(size_t count, DType dt, const char* op);

// Argument checks (std::invalid_argument with the operation's name).
void check_buffer(const void* p, size_t count, const char* op, const char* name);
void check_root(const Comm& comm, int root, const char* op);
void check_config(const Config& cfg, const char* op);

// Whether a call goes through the plain (uncompressed, exact) MPI collective: the caller chose
// Algorithm::Mpi, there is one rank (nothing moves), nothing to send, or the payload is below
// cfg.min_compress_bytes. Every argument must be the same on all ranks so all take one path.
bool use_mpi_path(const Config& cfg, int p, size_t count, size_t payload);

// Worst-case stream size for `count` values with cfg's chunk length.
size_t max_stream_bytes(size_t count, DType dt, const Config& cfg);

// Compresses `count` values once (cfg.error_bound, cfg.threads, cfg.chunk_len). The first form
// resizes `out` to the stream; the second writes at `dst` (capacity >= max_stream_bytes) and
// returns the stream size. Both add to st.compress_seconds and st.bytes_compressed.
void compress_block(const void* src, size_t count, DType dt, const Config& cfg, Bytes& out,
                    Stats& st);
size_t compress_into(const void* src, size_t count, DType dt, const Config& cfg, uint8_t* dst,
                     size_t cap, Stats& st);

// Decompresses a stream that must hold exactly `count` values of `dt` into `dst` (room for
// `count` values; nothing outside it is written). A stream of another count or dtype throws
// std::runtime_error "size mismatch across ranks: ..."; a corrupt stream throws fz::StreamError.
// Adds to st.decompress_seconds.
void decompress_block(const uint8_t* stream, size_t len, void* dst, size_t count, DType dt,
                      const Config& cfg, Stats& st, const char* op, int from_rank);

[[noreturn]] void throw_size_mismatch(const char* op, const std::string& detail);

// memmove of `bytes` unless src == dst (in-place calls): own blocks are copied exactly.
void copy_exact(const void* src, void* dst, size_t bytes);

// Binomial tree rooted at `root` over p ranks, in virtual ranks v = (rank - root) mod p.
// Node v owns the subtree [v, v + span(v)) clipped to p, where span(0) is the smallest power of
// two >= p and span(v) = lowest set bit of v otherwise; its parent is v - span(v); its children
// are v + m for m = span(v)/2, span(v)/4, ..., 1 with v + m < p (largest subtree first).
struct Binomial {
  Binomial(int p, int root, int rank);
  int p, root, v;
  int rank_of(int vrank) const { return (vrank + root) % p; }
  int span(int vrank) const;
  int subtree_end(int vrank) const;  // one past the last vrank of vrank's subtree
  int parent() const;                // vrank of the parent, -1 at the root
  std::vector<int> children() const; // vranks, largest subtree first
};

// Times the whole call and publishes the Stats when the algorithm finished.
class CallStats {
 public:
  explicit CallStats(Stats* out) : out_(out) {}
  Stats s;
  void done(Algorithm algorithm) {
    s.algorithm = algorithm;
    s.total_seconds = seconds_since(t0_);
    if (out_ != nullptr) *out_ = s;
  }

 private:
  Stats* out_;
  Clock::time_point t0_ = Clock::now();
};

}  // namespace zccl::coll::detail
