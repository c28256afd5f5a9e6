// pybind11 module zccl_torch._C: torch tensors in, fZ-light streams out. No algorithm logic here.
// torch's headers are not -Wextra clean; keep our own warnings visible.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>
#pragma GCC diagnostic pop

#include <optional>
#include <string>
#include <vector>

#include "../backend/zccl_backend.h"
#include "../compress/fzlight.h"
#include "../compress/fzlight_format.h"
#include "../transport/mpi_comm.h"
#include "../transport/mpi_info.h"

namespace py = pybind11;
namespace fz = zccl::fz;

namespace {

fz::DType dtype_from_code(int code) {
  for (fz::DType dt : {fz::DType::Float32, fz::DType::Float64, fz::DType::Float16, fz::DType::BFloat16}) {
    if (code == static_cast<int>(dt)) return dt;
  }
  throw std::invalid_argument("zccl: unknown dtype code " + std::to_string(code));
}

torch::ScalarType scalar_type(fz::DType dt) {
  switch (dt) {
    case fz::DType::Float32: return torch::kFloat32;
    case fz::DType::Float64: return torch::kFloat64;
    case fz::DType::Float16: return torch::kFloat16;
    case fz::DType::BFloat16: return torch::kBFloat16;
  }
  throw std::invalid_argument("zccl: unknown dtype");
}

std::optional<fz::DType> stream_dtype(torch::ScalarType st) {
  switch (st) {
    case torch::kFloat32: return fz::DType::Float32;
    case torch::kFloat64: return fz::DType::Float64;
    case torch::kFloat16: return fz::DType::Float16;
    case torch::kBFloat16: return fz::DType::BFloat16;
    default: return std::nullopt;
  }
}

// Wraps an optional Python callable as a C++ progress hook that takes the GIL for each call.
std::optional<fz::Progress> wrap_progress(const py::object& callback) {
  if (callback.is_none()) return std::nullopt;
  return fz::Progress([callback](uint64_t done, uint64_t total) {
    py::gil_scoped_acquire gil;
    callback(done, total);
  });
}

void check_stream(const torch::Tensor& stream) {
  TORCH_CHECK_TYPE(stream.scalar_type() == torch::kUInt8, "zccl: stream must be uint8");
  TORCH_CHECK(stream.device().is_cpu() && stream.is_contiguous() && stream.dim() == 1,
              "zccl: stream must be a contiguous 1-D CPU tensor");
}

torch::Tensor compress(const torch::Tensor& src, int dtype_code, double error_bound,
                       uint32_t chunk_len, int threads, const std::vector<int64_t>& shape,
                       const py::object& progress, uint32_t lossless_codec) {
  const fz::DType dt = dtype_from_code(dtype_code);
  TORCH_CHECK(src.scalar_type() == scalar_type(dt) && src.is_contiguous() && src.device().is_cpu(),
              "zccl: compress needs a contiguous CPU tensor of the declared dtype");
  fz::CompressParams params;
  params.error_bound = error_bound;
  params.lossless_codec = static_cast<fz::LosslessCodec>(lossless_codec);
  params.chunk_len = chunk_len;
  params.threads = threads;
  params.shape = std::vector<uint64_t>(shape.begin(), shape.end());
  const uint64_t count = static_cast<uint64_t>(src.numel());
  const size_t cap = fz::max_compressed_size(dt, count, chunk_len, shape.size());
  torch::Tensor out = torch::empty({static_cast<int64_t>(cap)}, torch::kUInt8);
  const std::optional<fz::Progress> hook = wrap_progress(progress);
  size_t used = 0;
  {
    py::gil_scoped_release nogil;
    used = fz::compress(src.data_ptr(), dt, count, params, out.data_ptr<uint8_t>(), cap,
                        hook ? &*hook : nullptr);
  }
  // Hand back a right-sized buffer when the stream is much smaller than the worst case.
  torch::Tensor stream = out.narrow(0, 0, static_cast<int64_t>(used));
  return 2 * used < cap ? stream.clone() : stream;
}

// `out` (optional): a preallocated contiguous CPU tensor of the stream's dtype and value count
// to decode into (any shape), so repeated decodes skip the allocation and its page faults.
torch::Tensor decompress(const torch::Tensor& stream, int threads, const py::object& progress,
                         const std::optional<torch::Tensor>& out_opt) {
  check_stream(stream);
  const uint8_t* data = stream.data_ptr<uint8_t>();
  const size_t len = static_cast<size_t>(stream.numel());
  const fz::StreamInfo info = fz::read_info(data, len);
  torch::Tensor out;
  if (out_opt.has_value()) {
    out = *out_opt;
    if (!out.device().is_cpu() || !out.is_contiguous() ||
        out.scalar_type() != scalar_type(info.dtype) ||
        static_cast<uint64_t>(out.numel()) != info.count) {
      throw std::invalid_argument("zccl decompress: out must be a contiguous CPU tensor of " +
                                  std::to_string(info.count) + " values of the stream's dtype");
    }
  } else {
    std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
    out = torch::empty(shape, scalar_type(info.dtype));
  }
  const std::optional<fz::Progress> hook = wrap_progress(progress);
  {
    py::gil_scoped_release nogil;
    fz::decompress(data, len, out.data_ptr(), info.count, threads, hook ? &*hook : nullptr);
  }
  return out;
}

torch::Tensor decompress_chunk(const torch::Tensor& stream, int64_t index) {
  check_stream(stream);
  const uint8_t* data = stream.data_ptr<uint8_t>();
  const size_t len = static_cast<size_t>(stream.numel());
  const fz::StreamInfo info = fz::read_info(data, len);
  if (index < 0 || static_cast<uint64_t>(index) >= info.num_chunks) {
    throw std::out_of_range("zccl: chunk index " + std::to_string(index) + " out of range [0, " +
                            std::to_string(info.num_chunks) + ")");
  }
  torch::Tensor out = torch::empty({static_cast<int64_t>(info.chunk_len)}, scalar_type(info.dtype));
  const uint64_t m = fz::decompress_chunk(data, len, static_cast<uint64_t>(index), out.data_ptr(),
                                          info.chunk_len);
  return out.narrow(0, 0, static_cast<int64_t>(m)).clone();
}

py::dict stream_info(const torch::Tensor& stream) {
  check_stream(stream);
  const fz::StreamInfo info = fz::read_info(stream.data_ptr<uint8_t>(), stream.numel());
  py::dict d;
  d["version"] = static_cast<int>(info.version);
  d["dtype"] = static_cast<int>(info.dtype);
  d["lossless_codec"] = static_cast<uint32_t>(info.lossless_codec);
  d["count"] = info.count;
  d["shape"] = info.shape;
  d["error_bound"] = info.error_bound;
  d["chunk_len"] = info.chunk_len;
  d["num_chunks"] = info.num_chunks;
  d["header_bytes"] = info.header_bytes;
  d["total_bytes"] = info.total_bytes;
  return d;
}

namespace zb = zccl::backend;

// The Python options (a dict of plain values; any subset of the fields) -> the C++ override.
zb::CallOverride call_override_from(const py::dict& d) {
  using F = zb::CallOverride;
  zb::CallOverride o;
  auto has = [&](const char* key, uint32_t field) {
    if (!d.contains(key)) return false;
    o.fields |= field;
    return true;
  };
  if (has("error_bound", F::kErrorBound)) o.values.error_bound = d["error_bound"].cast<double>();
  if (has("mode", F::kMode)) {
    const std::string mode = d["mode"].cast<std::string>();
    o.values.mode = mode == "abs"        ? zb::BoundMode::Abs
                    : mode == "lossless" ? zb::BoundMode::Lossless
                                         : zb::BoundMode::Rel;
  }
  if (has("threads", F::kThreads)) o.values.threads = d["threads"].cast<int>();
  if (has("chunk_size", F::kChunkLen)) o.values.chunk_len = d["chunk_size"].cast<uint32_t>();
  if (has("min_compress_bytes", F::kMinCompressBytes)) {
    o.values.min_compress_bytes = d["min_compress_bytes"].cast<size_t>();
  }
  if (has("check_agreement", F::kCheckAgreement)) {
    o.values.check_agreement = d["check_agreement"].cast<bool>();
  }
  if (has("owner_exact", F::kOwnerExact)) o.values.owner_exact = d["owner_exact"].cast<bool>();
  if (has("algorithm", F::kAlgorithm)) {
    o.values.algorithm = zccl::coll::algorithm_from_name(d["algorithm"].cast<std::string>());
  }
  return o;
}

// A complete configuration (group creation): every field must be present.
zb::CallConfig call_config_from(const py::dict& d) {
  const zb::CallOverride o = call_override_from(d);
  if (o.fields != zb::CallOverride::kAll) throw std::invalid_argument("zccl: incomplete backend options");
  return o.values;
}


}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "zccl-torch native core: fZ-light compressor (and, later, the collectives)";
  py::register_exception<fz::StreamError>(m, "CorruptStreamError", PyExc_ValueError);
  // True when the extension was built with the CUDA path (ZCCL_WITH_CUDA): "zccl" then also
  // registers for cuda devices.
#ifdef ZCCL_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  m.attr("DEFAULT_CHUNK_LEN") = fz::kDefaultChunkLen;
  m.attr("BLOCK_LEN") = fz::kBlockLen;
  m.attr("MAX_CHUNK_LEN") = fz::kMaxChunkLen;
  m.attr("MAX_DIMS") = fz::kMaxDims;
  m.def("compress", &compress, py::arg("src"), py::arg("dtype_code"), py::arg("error_bound"),
        py::arg("chunk_len"), py::arg("threads"), py::arg("shape"), py::arg("progress"),
        py::arg("lossless_codec") = static_cast<uint32_t>(fz::LosslessCodec::Auto));
  m.attr("FORMAT_VERSION") = zccl::fz::format::kVersion;
  m.def("lossless_codec_available", [](uint32_t codec) {
    return fz::lossless_codec_available(static_cast<fz::LosslessCodec>(codec));
  });
  m.def("decompress", &decompress, py::arg("stream"), py::arg("threads"), py::arg("progress"),
        py::arg("out") = py::none());
  m.def("decompress_chunk", &decompress_chunk, py::arg("stream"), py::arg("index"));
  m.def("stream_info", &stream_info, py::arg("stream"));
  m.def("max_compressed_size", [](int code, uint64_t n, uint32_t chunk_len, size_t ndim) {
    return fz::max_compressed_size(dtype_from_code(code), n, chunk_len, ndim);
  });
  m.def("finite_range", [](const torch::Tensor& src, int threads) {
    TORCH_CHECK(src.is_contiguous() && src.device().is_cpu(), "zccl: need a contiguous CPU tensor");
    const std::optional<fz::DType> dt = stream_dtype(src.scalar_type());
    TORCH_CHECK_TYPE(dt.has_value(), "zccl: finite_range needs float32, float64, float16 or bfloat16");
    py::gil_scoped_release nogil;
    const fz::FiniteRange r = fz::finite_range(src.data_ptr(), *dt, src.numel(), threads);
    return std::make_tuple(r.min, r.max, r.any_finite);
  }, py::arg("src"), py::arg("threads") = 0,
     "(min, max, any_finite) over the finite values of a float tensor");
  m.def("default_threads", &fz::default_threads, "OpenMP threads used when threads=None");
  m.def("mpi_library_version", &zccl::transport::mpi_library_version,
        "Version string of the linked MPI library (does not initialise MPI)");
  m.def("mpi_is_initialized", &zccl::transport::mpi_is_initialized);
  m.def("finalize_mpi_if_owned", &zccl::transport::finalize_if_owned,
        "MPI_Finalize, only if zccl initialised MPI and it is still running");

  // The backend object itself is returned as torch's c10d Backend (pybind11 finds the type
  // torch registered); zccl-specific queries go through these functions.
  m.def(
      "create_backend",
      [](int rank, int size, const std::vector<int64_t>& global_ranks, const std::string& group_id,
         double timeout_seconds, const py::dict& config) -> c10::intrusive_ptr<c10d::Backend> {
        const zb::CallConfig cfg = call_config_from(config);
        const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0));
        py::gil_scoped_release nogil;
        return zb::create_backend(rank, size, global_ranks, group_id, timeout, cfg);
      },
      py::arg("rank"), py::arg("size"), py::arg("global_ranks"), py::arg("group_id"),
      py::arg("timeout_seconds"), py::arg("config"));
  m.def(
      "set_call_override",
      [](const py::object& config) {
        if (config.is_none()) {
          zb::set_thread_override(std::nullopt);
        } else {
          zb::set_thread_override(call_override_from(config.cast<py::dict>()));
        }
      },
      "Fields (a subset) laid over each group's options for collectives issued from this thread; None clears");
  m.def(
      "output_error_bound",
      [](const std::string& algorithm, const std::string& op, int p, double eb, bool allreduce) {
        using zccl::coll::ReduceOp;
        py::dict d;
        d["algorithm"] = algorithm;
        d["mode"] = "abs";
        d["error_bound"] = 0.0;
        d["threads"] = 0;
        d["chunk_size"] = static_cast<int>(zccl::fz::kDefaultChunkLen);
        d["min_compress_bytes"] = 0;
        d["check_agreement"] = true;
        d["owner_exact"] = false;
        const zb::CallConfig c = call_config_from(d);
        ReduceOp rop = ReduceOp::Sum;
        if (op == "avg") rop = ReduceOp::Avg;
        else if (op == "min") rop = ReduceOp::Min;
        else if (op == "max") rop = ReduceOp::Max;
        else if (op != "sum") throw std::invalid_argument("zccl: op must be sum, avg, min or max");
        return zccl::coll::output_error_bound(c.algorithm, rop, p, eb, allreduce);
      },
      py::arg("algorithm"), py::arg("op"), py::arg("p"), py::arg("eb"), py::arg("allreduce"),
      "Documented worst-case output error of a compressed reduction");
  m.def("last_stats", [](const c10::intrusive_ptr<c10d::Backend>& backend) -> py::object {
    auto* z = dynamic_cast<zb::ZcclBackend*>(backend.get());
    if (z == nullptr) throw std::invalid_argument("zccl: not a zccl backend");
    const zb::LastStats s = z->last_stats();
    py::dict d;
    d["op"] = s.op;
    d["error_bound"] = s.error_bound;
    d["algorithm"] = zccl::coll::algorithm_name(s.stats.algorithm);
    d["bytes_in"] = s.stats.bytes_in;
    d["bytes_sent"] = s.stats.bytes_sent;
    d["bytes_compressed"] = s.stats.bytes_compressed;
    d["compress_seconds"] = s.stats.compress_seconds;
    d["decompress_seconds"] = s.stats.decompress_seconds;
    d["total_seconds"] = s.stats.total_seconds;
    return d;
  });
}
