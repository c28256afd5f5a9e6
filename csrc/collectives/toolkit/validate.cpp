// Argument checks of the collectives' entry points (see validate.h).
#include "validate.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace zccl::coll::toolkit {

namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("zccl: ") + op + ": " + what);
}

}  // namespace

void check_config(const Config& cfg, const char* op) {
  switch (cfg.algorithm) {
    case Algorithm::Auto:
    case Algorithm::Ring:
    case Algorithm::RecursiveDoubling:
    case Algorithm::Mpi:
    case Algorithm::CprP2P:
    case Algorithm::HalvingDoubling: break;
    default: fail(op, "unknown algorithm code " + std::to_string(static_cast<int>(cfg.algorithm)));
  }
  if (!std::isfinite(cfg.error_bound) || cfg.error_bound < 0) {
    fail(op, "error bound must be finite and >= 0, got " + std::to_string(cfg.error_bound));
  }
  if (cfg.threads < 0) fail(op, "threads must be >= 0, got " + std::to_string(cfg.threads));
  if (!std::isfinite(cfg.link_gbps) || cfg.link_gbps <= 0) {
    fail(op, "link_gbps must be finite and > 0, got " + std::to_string(cfg.link_gbps));
  }
  if (!std::isfinite(cfg.link_latency_us) || cfg.link_latency_us < 0) {
    fail(op, "link_latency_us must be finite and >= 0, got " +
                 std::to_string(cfg.link_latency_us));
  }
  if (cfg.chunk_len < fz::kBlockLen || cfg.chunk_len > fz::kMaxChunkLen ||
      cfg.chunk_len % fz::kBlockLen != 0) {
    fail(op, "chunk_len must be a multiple of " + std::to_string(fz::kBlockLen) + " in [" +
                 std::to_string(fz::kBlockLen) + ", " + std::to_string(fz::kMaxChunkLen) +
                 "], got " + std::to_string(cfg.chunk_len));
  }
}

void check_reduction(DType dt, ReduceOp rop, const char* op) {
  if (dt != DType::Float32 && dt != DType::Float64) {
    fail(op, "dtype must be float32 or float64 (code " + std::to_string(static_cast<int>(dt)) +
                 ")");
  }
  if (rop != ReduceOp::Sum && rop != ReduceOp::Avg && rop != ReduceOp::Min &&
      rop != ReduceOp::Max) {
    fail(op, "unknown reduce op code " + std::to_string(static_cast<int>(rop)));
  }
}

void check_buffer(const void* p, size_t count, const char* op, const char* name) {
  if (p == nullptr && count > 0) {
    fail(op, std::string(name) + " is null but " + std::to_string(count) +
                 " values are expected there");
  }
}

void check_root(int root, int p, const char* op) {
  if (root < 0 || root >= p) {
    fail(op, "root " + std::to_string(root) + " is out of range [0, " + std::to_string(p) + ")");
  }
}

void check_block_list(size_t blocks, int p, const char* op) {
  if (blocks != static_cast<size_t>(p)) {
    fail(op, "the root needs " + std::to_string(p) + " blocks, got " + std::to_string(blocks));
  }
}

size_t check_counts(const std::vector<size_t>& counts, size_t count, int p, int rank,
                    const char* op) {
  if (counts.size() != static_cast<size_t>(p)) {
    fail(op, "counts has " + std::to_string(counts.size()) + " entries for " +
                 std::to_string(p) + " ranks");
  }
  const size_t own = counts[static_cast<size_t>(rank)];
  if (own != count) {
    fail(op, "count " + std::to_string(count) + " differs from counts[" + std::to_string(rank) +
                 "] = " + std::to_string(own));
  }
  size_t total = 0;
  for (const size_t c : counts) {
    if (c > std::numeric_limits<size_t>::max() - total) {
      fail(op, "the counts overflow the address space");
    }
    total += c;
  }
  return total;
}

size_t payload_bytes(size_t count, DType dt, const char* op, size_t blocks) {
  const size_t es = fz::dtype_size(dt);
  if (blocks > 0 && count > std::numeric_limits<size_t>::max() / es / blocks) {
    fail(op, (blocks > 1 ? std::to_string(blocks) + " x " : std::string()) +
                 std::to_string(count) + " values overflow the address space");
  }
  return count * blocks * es;
}

size_t check_rooted_blocks(int root, int p, size_t count, DType dt, const char* op) {
  check_root(root, p, op);
  payload_bytes(count, dt, op, static_cast<size_t>(p));
  return payload_bytes(count, dt, op);
}

}  // namespace zccl::coll::toolkit
