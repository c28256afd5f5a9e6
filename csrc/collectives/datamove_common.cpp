// Helpers shared by the data-movement collectives (see datamove_common.h).
#include "datamove_common.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace zccl::coll::detail {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
  }
  throw std::invalid_argument("zccl: unknown dtype " + std::to_string(static_cast<int>(dt)));
}

size_t payload_bytes(size_t count, DType dt, const char* op) {
  const size_t es = fz::dtype_size(dt);
  if (count > std::numeric_limits<size_t>::max() / es) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": " + std::to_string(count) +
                                " values overflow the address space");
  }
  return count * es;
}

void check_buffer(const void* p, size_t count, const char* op, const char* name) {
  if (p == nullptr && count > 0) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": " + name + " is null but " +
                                std::to_string(count) + " values are expected there");
  }
}

void check_root(const Comm& comm, int root, const char* op) {
  if (root < 0 || root >= comm.size()) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": root " + std::to_string(root) +
                                " is out of range [0, " + std::to_string(comm.size()) + ")");
  }
}

void check_config(const Config& cfg, const char* op) {
  if (!std::isfinite(cfg.error_bound) || cfg.error_bound < 0) {
    throw std::invalid_argument(std::string("zccl: ") + op +
                                ": error bound must be finite and >= 0, got " +
                                std::to_string(cfg.error_bound));
  }
  if (cfg.chunk_len < fz::kBlockLen || cfg.chunk_len > fz::kMaxChunkLen ||
      cfg.chunk_len % fz::kBlockLen != 0) {
    throw std::invalid_argument(std::string("zccl: ") + op + ": chunk_len " +
                                std::to_string(cfg.chunk_len) + " must be a multiple of " +
                                std::to_string(fz::kBlockLen) + " in [" +
                                std::to_string(fz::kBlockLen) + ", " +
                                std::to_string(fz::kMaxChunkLen) + "]");
  }
}

bool use_mpi_path(const Config& cfg, int p, size_t count, size_t payload) {
  return cfg.algorithm == Algorithm::Mpi || p <= 1 || count == 0 ||
         payload < cfg.min_compress_bytes;
}

size_t max_stream_bytes(size_t count, DType dt, const Config& cfg) {
  return fz::max_compressed_size(dt, count, cfg.chunk_len);
}

size_t compress_into(const void* src, size_t count, DType dt, const Config& cfg, uint8_t* dst,
                     size_t cap, Stats& st) {
  const auto t0 = Clock::now();
  fz::CompressParams params;
  params.error_bound = cfg.error_bound;
  params.chunk_len = cfg.chunk_len;
  params.threads = cfg.threads;
  const size_t n = fz::compress(src, dt, count, params, dst, cap);
  st.compress_seconds += seconds_since(t0);
  st.bytes_compressed += count * fz::dtype_size(dt);
  return n;
}

void compress_block(const void* src, size_t count, DType dt, const Config& cfg, Bytes& out,
                    Stats& st) {
  out.resize(max_stream_bytes(count, dt, cfg));
  out.resize(compress_into(src, count, dt, cfg, out.data(), out.size(), st));
}

void throw_size_mismatch(const char* op, const std::string& detail) {
  throw std::runtime_error(std::string("zccl: size mismatch across ranks: ") + op + ": " + detail);
}

void decompress_block(const uint8_t* stream, size_t len, void* dst, size_t count, DType dt,
                      const Config& cfg, Stats& st, const char* op, int from_rank) {
  const auto t0 = Clock::now();
  const fz::StreamInfo info = fz::read_info(stream, len);
  if (info.count != count || info.dtype != dt) {
    throw_size_mismatch(op, "the block from rank " + std::to_string(from_rank) + " holds " +
                                std::to_string(info.count) + " " + fz::dtype_name(info.dtype) +
                                " values, this rank expects " + std::to_string(count) + " " +
                                fz::dtype_name(dt) + " values");
  }
  fz::decompress(stream, len, dst, count, cfg.threads);
  st.decompress_seconds += seconds_since(t0);
}

void copy_exact(const void* src, void* dst, size_t bytes) {
  if (src != dst && bytes > 0) std::memmove(dst, src, bytes);
}

Binomial::Binomial(int p_, int root_, int rank) : p(p_), root(root_), v((rank - root_ + p_) % p_) {}

int Binomial::span(int vrank) const {
  if (vrank == 0) {
    int s = 1;
    while (s < p) s <<= 1;
    return s;
  }
  return vrank & -vrank;
}

int Binomial::subtree_end(int vrank) const {
  const long end = static_cast<long>(vrank) + span(vrank);
  return end < p ? static_cast<int>(end) : p;
}

int Binomial::parent() const { return v == 0 ? -1 : v - span(v); }

std::vector<int> Binomial::children() const {
  std::vector<int> out;
  for (int m = span(v) / 2; m >= 1; m /= 2) {
    if (v + m < p) out.push_back(v + m);
  }
  return out;
}

}  // namespace zccl::coll::detail
