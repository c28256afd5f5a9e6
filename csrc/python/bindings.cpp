// pybind11 module zccl_torch._C: torch tensors in, fZ-light streams out. No algorithm logic here.
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../transport/tcp/tcp_comm.h"
#include "../backend/settings.h"
#include "../backend/zccl_backend.h"
#include "../collectives/toolkit/validate.h"
#include "../compress/fzlight.h"
#include "../compress/fzlight_format.h"
#include "../compress/ratio_sample.h"
#include "../transport/mpi_api.h"
#include "build_info.h"
#include "codes_bindings.h"

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

// Runs `code(dst, cap, hook)` (a compressor that writes at most `cap` bytes at dst and returns
// the count) with the GIL released, into `into` when given (checked to hold `cap` bytes), else
// into a new buffer. Returns the stream: a view of `into`, or of the new buffer, copied to its
// size when the stream is much smaller than the worst case.
template <class Code>
torch::Tensor write_stream(size_t cap, const std::optional<torch::Tensor>& into,
                           const py::object& progress, Code&& code) {
  if (into) {
    check_stream(*into);
    TORCH_CHECK(static_cast<size_t>(into->numel()) >= cap, "zccl: out holds ", into->numel(),
                " bytes, the stream may need ", cap);
  }
  torch::Tensor out = into ? *into : torch::empty({static_cast<int64_t>(cap)}, torch::kUInt8);
  const std::optional<fz::Progress> hook = wrap_progress(progress);
  size_t used = 0;
  {
    py::gil_scoped_release nogil;
    used = code(out.data_ptr<uint8_t>(), cap, hook ? &*hook : nullptr);
  }
  torch::Tensor stream = out.narrow(0, 0, static_cast<int64_t>(used));
  return !into && 2 * used < cap ? stream.clone() : stream;
}

// `out` (optional): a contiguous uint8 CPU buffer of at least max_compressed_size bytes to
// compress into; the stream is then returned as a view of it (benchmarks reuse one buffer).
torch::Tensor compress(const torch::Tensor& src, int dtype_code, double error_bound,
                       uint32_t chunk_len, int threads, const std::vector<int64_t>& shape,
                       const py::object& progress, uint32_t lossless_codec,
                       const std::optional<torch::Tensor>& into) {
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
  return write_stream(cap, into, progress, [&](uint8_t* dst, size_t room, const fz::Progress* h) {
    return fz::compress(src.data_ptr(), dt, count, params, dst, room, h);
  });
}

// fz::sample_ratio of a contiguous CPU tensor: (raw bytes, compressed bytes, values) sampled.
std::tuple<uint64_t, double, uint64_t> sample_ratio(const torch::Tensor& src, int dtype_code,
                                                      double error_bound, uint32_t chunk_len,
                                                      uint64_t max_values) {
  const fz::DType dt = dtype_from_code(dtype_code);
  TORCH_CHECK(src.scalar_type() == scalar_type(dt) && src.is_contiguous() && src.device().is_cpu(),
              "zccl: sample_ratio needs a contiguous CPU tensor of the declared dtype");
  fz::CompressParams params;
  params.error_bound = error_bound;
  params.chunk_len = chunk_len;
  py::gil_scoped_release nogil;
  const fz::RatioSample s = fz::sample_ratio(src.data_ptr(), dt, static_cast<uint64_t>(src.numel()),
                                             params, max_values);
  return {s.raw_bytes, s.compressed_bytes, s.values};
}

// The values decompress(compress(src, eb)) reconstructs, without the stream (fz::quantize), into
// `out` (may be `src`); src - those values into `residual` when given. Python checks and allocates.
void quantize(const torch::Tensor& src, int dtype_code, double error_bound, int threads,
              torch::Tensor& out, const std::optional<torch::Tensor>& residual) {
  const fz::DType dt = dtype_from_code(dtype_code);
  auto usable = [&](const torch::Tensor& t) {
    return t.scalar_type() == scalar_type(dt) && t.is_contiguous() && t.device().is_cpu() &&
           t.numel() == src.numel();
  };
  TORCH_CHECK(usable(src) && usable(out) && (!residual || usable(*residual)),
              "zccl: quantize needs contiguous CPU tensors of the declared dtype and size");
  void* res = residual ? residual->data_ptr() : nullptr;
  py::gil_scoped_release nogil;
  fz::quantize(src.data_ptr(), dt, static_cast<uint64_t>(src.numel()), error_bound,
               out.data_ptr(), res, threads);
}

// (bin, 1/bin) of the quantiser for `error_bound` in dtype_code's compute type, or None when
// values are kept exactly (fz::quantizer_bins).
std::optional<std::pair<double, double>> quantizer_bins(int dtype_code, double error_bound) {
  double bin = 0.0, inv_bin = 0.0;
  if (!fz::quantizer_bins(dtype_from_code(dtype_code), error_bound, bin, inv_bin)) return std::nullopt;
  return std::make_pair(bin, inv_bin);
}

// `out` (optional): a preallocated contiguous CPU tensor of the stream's dtype and value count
// to decode into (any shape), so repeated decodes skip the allocation and its page faults.
// `add` (optional): a contiguous CPU tensor of the stream's (float32/float64) dtype and count;
// the result is then add + the decoded values (fz::decompress_add; `out` may be `add`).
torch::Tensor decompress(const torch::Tensor& stream, int threads, const py::object& progress,
                         const std::optional<torch::Tensor>& out_opt,
                         const std::optional<torch::Tensor>& add) {
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
  if (add.has_value() &&
      (!add->device().is_cpu() || !add->is_contiguous() ||
       add->scalar_type() != scalar_type(info.dtype) ||
       static_cast<uint64_t>(add->numel()) != info.count)) {
    throw std::invalid_argument("zccl decompress: add must be a contiguous CPU tensor of " +
                                std::to_string(info.count) + " values of the stream's dtype");
  }
  const std::optional<fz::Progress> hook = wrap_progress(progress);
  {
    py::gil_scoped_release nogil;
    if (add.has_value()) {
      fz::decompress_add(data, len, add->data_ptr(), out.data_ptr(), info.count, threads,
                         hook ? &*hook : nullptr);
    } else {
      fz::decompress(data, len, out.data_ptr(), info.count, threads, hook ? &*hook : nullptr);
    }
  }
  return out;
}

// The ring's hop (fz::recompress_add): the stream of add + decompress(stream) with bound
// `error_bound`, the chunk length of `stream` and the shape of `add`, into `into` when given.
// Python checks the arguments' types; fz checks counts, dtypes and chunk lengths.
torch::Tensor recompress_add(const torch::Tensor& stream, const torch::Tensor& add,
                             double error_bound, int threads, const py::object& progress,
                             const std::optional<torch::Tensor>& into) {
  check_stream(stream);
  const uint8_t* data = stream.data_ptr<uint8_t>();
  const size_t len = static_cast<size_t>(stream.numel());
  const fz::StreamInfo info = fz::read_info(data, len);
  TORCH_CHECK(add.device().is_cpu() && add.is_contiguous() &&
                  add.scalar_type() == scalar_type(info.dtype),
              "zccl recompress_add: add must be a contiguous CPU tensor of the stream's dtype");
  fz::CompressParams params;
  params.error_bound = error_bound;
  params.chunk_len = info.chunk_len;
  params.threads = threads;
  params.shape = std::vector<uint64_t>(add.sizes().begin(), add.sizes().end());
  const uint64_t count = static_cast<uint64_t>(add.numel());
  const size_t cap = fz::max_compressed_size(info.dtype, count, info.chunk_len, add.dim());
  return write_stream(cap, into, progress, [&](uint8_t* dst, size_t room, const fz::Progress* h) {
    return fz::recompress_add(data, len, add.data_ptr(), count, params, dst, room, h);
  });
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

namespace {

zb::ZcclBackend& as_zccl(const c10::intrusive_ptr<c10d::Backend>& backend) {
  auto* z = dynamic_cast<zb::ZcclBackend*>(backend.get());
  if (z == nullptr) throw std::invalid_argument("zccl: not a zccl backend");
  return *z;
}

}  // namespace

// ---- Settings: Python values <-> the settings table (backend/settings.h) ----

// A Python value as a SettingValue, for `s` to check; a value of a kind no setting takes (a list,
// a numpy scalar that is not a float) is the setting's type error.
zb::SettingValue setting_value(const zb::Setting& s, const py::handle& v) {
  PyObject* o = v.ptr();
  if (o == Py_None) return std::monostate{};
  if (PyBool_Check(o)) return o == Py_True;
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0) return static_cast<int64_t>(i);
    const double d = PyLong_AsDouble(o);  // past int64: a real, or an int out of every range
    if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();  // OverflowError
    return d;
  }
  if (PyFloat_Check(o)) return PyFloat_AsDouble(o);
  if (PyUnicode_Check(o)) return v.cast<std::string>();
  throw s.type_error();
}

// `v` checked against `s`, raising TypeError or ValueError "<name> must be ..., got <value>" as
// Options always did (a float shown by str(), as its messages did, anything else by repr()).
zb::SettingValue checked_setting(const zb::Setting& s, const py::handle& v) {
  try {
    return s.checked(setting_value(s, v));
  } catch (const zb::SettingError& e) {
    const py::object text = PyFloat_Check(v.ptr()) ? py::str(v) : py::repr(v);
    const std::string message = std::string(e.what()) + ", got " + text.cast<std::string>();
    if (e.wrong_type()) throw py::type_error(message);
    throw py::value_error(message);
  }
}

py::object to_python(const zb::SettingValue& value) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return py::none();
        } else {
          return py::cast(v);
        }
      },
      value);
}

// A dict of settings (any subset; no unknown names) -> the override laying them over defaults.
zb::CallOverride call_override_from(const py::dict& d) {
  for (const auto& item : d) {
    const std::string key = py::str(item.first);
    if (zb::find_setting(key) == nullptr) throw py::value_error("zccl: unknown setting '" + key + "'");
  }
  zb::CallOverride o;
  for (const zb::Setting& s : zb::settings()) {
    if (d.contains(s.name)) o.fields.push_back({&s, checked_setting(s, d[s.name.c_str()])});
  }
  return o;
}

// A complete configuration (group creation): every setting must be present, except an optional
// choice (its absence is None).
zb::CallConfig call_config_from(const py::dict& d) {
  for (const zb::Setting& s : zb::settings()) {
    if (!s.none_allowed && !d.contains(s.name)) {
      throw std::invalid_argument("zccl: incomplete backend options (no " + s.name + ")");
    }
  }
  return call_override_from(d).apply(zb::CallConfig{});
}

py::dict to_python(const zb::CallConfig& c) {
  py::dict d;
  for (const zb::Setting& s : zb::settings()) d[s.name.c_str()] = to_python(s.read(s, c));
  return d;
}

py::dict to_python(const zb::CallOverride& o) {
  py::dict d;
  for (const zb::CallOverride::Field& f : o.fields) d[f.setting->name.c_str()] = to_python(f.value);
  return d;
}

const char* type_name(zb::SettingType t) {
  switch (t) {
    case zb::SettingType::Real: return "float";
    case zb::SettingType::Int: return "int";
    case zb::SettingType::Bool: return "bool";
    case zb::SettingType::Choice: return "choice";
  }
  return "unknown";
}

// The table for Python: one dict per setting, in the order of Options' fields.
py::list settings_for_python() {
  py::list rows;
  for (const zb::Setting& s : zb::settings()) {
    py::dict row;
    row["name"] = s.name;
    row["env"] = s.env;
    row["type"] = type_name(s.type);
    row["default"] = to_python(s.default_value());
    py::list choices;
    if (s.none_allowed) choices.append(py::none());
    for (const std::string& c : s.choices) choices.append(c);
    row["choices"] = py::tuple(choices);
    row["requirement"] = s.requirement();
    row["doc"] = s.doc;
    rows.append(row);
  }
  return rows;
}

}  // namespace

namespace {
struct TcpListenerHandle {
  std::unique_ptr<zccl::transport::tcp::Listener> listener;
};
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
        py::arg("lossless_codec") = static_cast<uint32_t>(fz::LosslessCodec::Auto),
        py::arg("out") = py::none());
  m.attr("FORMAT_VERSION") = zccl::fz::format::kVersion;
  m.attr("SOURCE_DIGEST") = zccl::python::source_digest();
  m.def(
      "lossless_codec_available",
      [](uint32_t codec) { return fz::lossless_codec_available(static_cast<fz::LosslessCodec>(codec)); },
      py::arg("codec"));
  m.def("decompress", &decompress, py::arg("stream"), py::arg("threads"), py::arg("progress"),
        py::arg("out") = py::none(), py::arg("add") = py::none());
  m.def("recompress_add", &recompress_add, py::arg("stream"), py::arg("add"),
        py::arg("error_bound"), py::arg("threads"), py::arg("progress"),
        py::arg("out") = py::none());
  m.def("sample_ratio", &sample_ratio, py::arg("src"), py::arg("dtype_code"),
        py::arg("error_bound"), py::arg("chunk_len"), py::arg("max_values"));
  m.def("quantizer_bins", &quantizer_bins, py::arg("dtype_code"), py::arg("error_bound"));
  m.def("quantize", &quantize, py::arg("src"), py::arg("dtype_code"), py::arg("error_bound"),
        py::arg("threads"), py::arg("out"), py::arg("residual"));
  zccl::python::bind_codes(m);
  m.def("decompress_chunk", &decompress_chunk, py::arg("stream"), py::arg("index"));
  m.def("stream_info", &stream_info, py::arg("stream"));
  m.def(
      "max_compressed_size",
      [](int code, uint64_t n, uint32_t chunk_len, size_t ndim) {
        return fz::max_compressed_size(dtype_from_code(code), n, chunk_len, ndim);
      },
      py::arg("dtype_code"), py::arg("n"), py::arg("chunk_len"), py::arg("ndim"));
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
  m.attr("MPI_TRANSPORT") = zccl::transport::mpi_transport_built();
  m.attr("NO_MPI_TRANSPORT_MESSAGE") = zccl::transport::kNoMpiTransportMessage;
  m.def("mpi_library_version", &zccl::transport::mpi_library_version,
        "Version string of the linked MPI library (does not initialise MPI; \"\" in a build "
        "without Open MPI)");
  m.def("mpi_is_initialized", &zccl::transport::mpi_is_initialized);
  m.def("finalize_mpi_if_owned", &zccl::transport::finalize_if_owned,
        "MPI_Finalize, only if zccl initialised MPI and it is still running");
  m.def("abort_mpi_if_owned", &zccl::transport::abort_if_owned, py::arg("code"),
        "MPI_Abort of the whole job, only if zccl initialised MPI, it is running and the job "
        "has several ranks; False (nothing done) otherwise");

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
  // (A handle of internal linkage: pybind11's hidden visibility would clash with the transport's.)
  py::class_<TcpListenerHandle>(
      m, "TcpListener", "A listening socket of the TCP transport (opened before its address is published)")
      .def(py::init([](const std::string& host) {
             return TcpListenerHandle{std::make_unique<zccl::transport::tcp::Listener>(host)};
           }),
           py::arg("host"))
      .def_property_readonly("address", [](const TcpListenerHandle& h) { return h.listener->address(); });
  m.def(
      "create_backend_tcp",
      [](const TcpListenerHandle& listener, const std::vector<std::string>& addresses,
         uint64_t session, int rank, int size, double timeout_seconds,
         const py::dict& config) -> c10::intrusive_ptr<c10d::Backend> {
        const zb::CallConfig cfg = call_config_from(config);
        const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0));
        py::gil_scoped_release nogil;
        auto comm = zccl::transport::tcp::TcpComm::connect(*listener.listener, rank, size, addresses, session, timeout);
        return zb::create_backend_on(std::move(comm), timeout, cfg);
      },
      py::arg("listener"), py::arg("addresses"), py::arg("session"), py::arg("rank"),
      py::arg("size"), py::arg("timeout_seconds"), py::arg("config"),
      "The zccl backend over the TCP transport (launches without mpirun): connects to every "
      "rank's listener address");
  m.def("settings", &settings_for_python,
        "The settings table: name, env, type, default, choices, requirement, doc of each");
  m.def(
      "check_settings",
      [](const py::dict& values) { call_override_from(values); }, py::arg("values"),
      "Raises TypeError/ValueError naming the first setting (in table order) not allowed");
  m.def(
      "set_call_override",
      [](const py::object& config) {
        if (config.is_none()) {
          zb::set_thread_override(std::nullopt);
        } else {
          zb::set_thread_override(call_override_from(config.cast<py::dict>()));
        }
      },
      py::arg("config"),
      "Settings (a subset) laid over each group's options for collectives issued from this thread; None clears");
  m.def(
      "call_override",
      []() -> py::object {
        const std::optional<zb::CallOverride>& o = zb::thread_override();
        if (!o) return py::none();
        return to_python(*o);
      },
      "This thread's override as set_call_override took it (None when there is none)");
  m.def(
      "resolve_call_config",
      [](const py::dict& config) { return to_python(zb::resolve_for_thread(call_config_from(config))); },
      py::arg("config"),
      "The settings a collective issued from this thread on a group with `config` runs with");
  m.def(
      "wait_policy",
      [](const py::dict& config) {
        const zb::CallConfig c = zb::resolve_for_call(call_config_from(config));
        return zb::wait_policy(c) == zccl::WaitPolicy::Spin ? "spin" : "sleep";
      },
      py::arg("config"),
      "How a collective issued from this thread on a group with `config` waits: 'spin' or 'sleep'");
  m.def("automatic_threads", &zb::automatic_threads,
        "Compression threads per rank when the threads setting is 0 (fixed per process)");
  m.def(
      "output_error_bound",
      [](const std::string& algorithm, const std::string& op, int p, double eb, bool allreduce) {
        using zccl::coll::ReduceOp;
        const zccl::coll::Algorithm a = zccl::coll::algorithm_from_name(algorithm);
        ReduceOp rop = ReduceOp::Sum;
        if (op == "avg") rop = ReduceOp::Avg;
        else if (op == "min") rop = ReduceOp::Min;
        else if (op == "max") rop = ReduceOp::Max;
        else if (op != "sum") throw std::invalid_argument("zccl: op must be sum, avg, min or max");
        return zccl::coll::output_error_bound(a, rop, p, eb, allreduce);
      },
      py::arg("algorithm"), py::arg("op"), py::arg("p"), py::arg("eb"), py::arg("allreduce"),
      "Documented worst-case output error of a compressed reduction");
  // route() and ratio_matters() of a CPU collective, with the configuration's parts that the
  // choice reads: the test suite's view of the automatic choice (tests/test_routing.py).
  auto route_config = [](const std::string& collective, int p, int threads, double link_gbps,
                         double link_latency_us, const std::string& algorithm, bool lossless,
                         bool integer_ring, size_t min_compress_bytes, double ratio,
                         const std::string& exact) {
    using zccl::coll::Collective;
    static const std::map<std::string, Collective> names = {
        {"all_reduce", Collective::AllReduce}, {"reduce_scatter", Collective::ReduceScatter},
        {"reduce", Collective::Reduce},         {"broadcast", Collective::Broadcast},
        {"all_gather", Collective::AllGather},  {"gather", Collective::Gather},
        {"scatter", Collective::Scatter},       {"all_to_all", Collective::AllToAll}};
    const auto it = names.find(collective);
    if (it == names.end()) throw std::invalid_argument("zccl: unknown collective " + collective);
    if (p < 1) throw std::invalid_argument("zccl: p must be >= 1");
    if (!(ratio >= 0.0) || !std::isfinite(ratio)) {
      throw std::invalid_argument("zccl: ratio must be finite and >= 0");
    }
    zccl::coll::Config c;
    c.error_bound = lossless ? 0.0 : 1.0;  // only zero or not matters to the choice
    c.threads = threads;
    c.link_gbps = link_gbps;
    c.link_latency_us = link_latency_us;
    c.algorithm = zccl::coll::algorithm_from_name(algorithm);
    c.integer_ring = integer_ring;
    c.min_compress_bytes = min_compress_bytes;
    c.model_ratio = ratio;
    if (exact == "open_mpi") {
      c.exact_schedules = zccl::transport::ExactSchedules::OpenMpiNbc;
    } else if (exact != "bandwidth_optimal") {
      throw std::invalid_argument("zccl: exact must be 'bandwidth_optimal' or 'open_mpi', got '" +
                                  exact + "'");
    }
    zccl::coll::toolkit::check_config(c, "route");
    return std::make_pair(it->second, c);
  };
  m.def(
      "route",
      [route_config](const std::string& collective, size_t bytes, int p, int threads,
                     double link_gbps, double link_latency_us, const std::string& algorithm,
                     bool lossless, bool integer_ring, size_t min_compress_bytes, double ratio,
                     const std::string& exact) {
        const auto [c, cfg] = route_config(collective, p, threads, link_gbps, link_latency_us,
                                           algorithm, lossless, integer_ring, min_compress_bytes,
                                           ratio, exact);
        const zccl::coll::Route r = zccl::coll::route(c, bytes, p, cfg);
        return py::make_tuple(r.compressed, zccl::coll::algorithm_name(r.algorithm));
      },
      py::arg("collective"), py::arg("bytes"), py::arg("p"), py::arg("threads") = 1,
      py::arg("link_gbps") = 1.0, py::arg("link_latency_us") = 25.0, py::arg("algorithm") = "auto",
      py::arg("lossless") = false, py::arg("integer_ring") = false,
      py::arg("min_compress_bytes") = 0, py::arg("ratio") = 0.0,
      py::arg("exact") = "bandwidth_optimal",
      "(compressed, algorithm) that a CPU collective of `bytes` on `p` ranks takes (threads: the "
      "group's smallest compression thread count; ratio: the compression ratio the automatic "
      "choice assumes, 0: its fixed one; exact: the transport's exact schedules, "
      "'bandwidth_optimal' (TCP transport) or 'open_mpi' (libnbc))");
  m.def(
      "ratio_matters",
      [route_config](const std::string& collective, size_t bytes, int p, int threads,
                     double link_gbps, double link_latency_us, const std::string& algorithm,
                     bool lossless, bool integer_ring, size_t min_compress_bytes,
                     const std::string& exact) {
        const auto [c, cfg] = route_config(collective, p, threads, link_gbps, link_latency_us,
                                           algorithm, lossless, integer_ring, min_compress_bytes,
                                           0.0, exact);
        return zccl::coll::ratio_matters(c, bytes, p, cfg);
      },
      py::arg("collective"), py::arg("bytes"), py::arg("p"), py::arg("threads") = 1,
      py::arg("link_gbps") = 1.0, py::arg("link_latency_us") = 25.0, py::arg("algorithm") = "auto",
      py::arg("lossless") = false, py::arg("integer_ring") = false,
      py::arg("min_compress_bytes") = 0, py::arg("exact") = "bandwidth_optimal",
      "Whether route()'s choice for these arguments could change with the data's compression "
      "ratio (the backend samples the data only then)");
  m.def(
      "allreduce_cost",
      [route_config](const std::string& algorithm, size_t bytes, int p, int threads,
                     double link_gbps, double link_latency_us, bool integer_ring, double ratio,
                     const std::string& exact) {
        const auto [c, cfg] = route_config("all_reduce", p, threads, link_gbps, link_latency_us,
                                           "auto", false, integer_ring, 0, ratio, exact);
        return zccl::coll::allreduce_cost(zccl::coll::algorithm_from_name(algorithm), bytes, p,
                                          cfg);
      },
      py::arg("algorithm"), py::arg("bytes"), py::arg("p"), py::arg("threads") = 1,
      py::arg("link_gbps") = 1.0, py::arg("link_latency_us") = 25.0,
      py::arg("integer_ring") = false, py::arg("ratio") = 0.0,
      py::arg("exact") = "bandwidth_optimal",
      "The automatic choice's modelled time (seconds) of a CPU all_reduce of `bytes` on `p` "
      "ranks by `algorithm` ('mpi', 'ring', 'recursive_doubling' or 'halving_doubling')");
  m.def("ratio_sample_values", &zccl::coll::ratio_sample_values, py::arg("count"),
        "Values of a reduction's payload of `count` values that the backend samples for its "
        "compression ratio when `auto_ratio` is 0");
  m.def(
      "set_link_model",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, double gbps, double latency_us) {
        as_zccl(backend).set_link_model(gbps, latency_us);
      },
      py::arg("backend"), py::arg("gbps"), py::arg("latency_us"),
      "Sets the link_gbps / link_latency_us defaults of a backend being created (measured: "
      "zccl_torch/link.py); never once it serves collectives");
  m.def(
      "time_link",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, size_t probe_bytes) {
        auto times = std::make_shared<zccl::transport::LinkTimes>();
        auto work = as_zccl(backend).time_link(probe_bytes, times);
        {
          py::gil_scoped_release nogil;
          work->wait();
        }
        return py::make_tuple(times->small_seconds, times->large_seconds);
      },
      py::arg("backend"), py::arg("probe_bytes"),
      "(seconds of a one-byte, seconds of a probe_bytes ring exchange), the slowest rank's "
      "medians; a collective (zccl_torch/link.py)");
  m.def(
      "link_model",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) {
        const zb::CallConfig& d = as_zccl(backend).defaults();
        return py::make_tuple(d.link_gbps, d.link_latency_us);
      },
      py::arg("backend"), "(link_gbps, link_latency_us) of a backend's defaults");
  m.def(
      "exact_schedules",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) -> std::string {
        return as_zccl(backend).exact_schedules() == zccl::transport::ExactSchedules::OpenMpiNbc
                   ? "open_mpi"
                   : "bandwidth_optimal";
      },
      py::arg("backend"),
      "How the backend's transport schedules its exact collectives, as route()'s `exact` "
      "names it");
  m.def("last_stats", [](const c10::intrusive_ptr<c10d::Backend>& backend) -> py::dict {
    const zb::LastStats s = as_zccl(backend).last_stats();
    py::dict d;
    d["op"] = s.op;
    d["error_bound"] = s.error_bound;
    d["algorithm"] = zccl::coll::algorithm_name(s.stats.algorithm);
    d["integer_hop"] = s.stats.integer_hop;
    d["auto_ratio"] = s.auto_ratio > 0.0 ? py::object(py::float_(s.auto_ratio)) : py::none();
    d["bytes_in"] = s.stats.bytes_in;
    d["bytes_sent"] = s.stats.bytes_sent;
    d["bytes_compressed"] = s.stats.bytes_compressed;
    d["compress_seconds"] = s.stats.compress_seconds;
    d["decompress_seconds"] = s.stats.decompress_seconds;
    d["total_seconds"] = s.stats.total_seconds;
    return d;
  }, py::arg("backend"));
  m.def(
      "total_stats",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, bool reset) -> py::dict {
        py::dict by_op;
        for (const auto& [op, t] : as_zccl(backend).total_stats(reset)) {
          py::dict d;
          d["calls"] = t.calls;
          d["compressed_calls"] = t.compressed_calls;
          d["bytes_in"] = t.bytes_in;
          d["bytes_sent"] = t.bytes_sent;
          d["bytes_compressed"] = t.bytes_compressed;
          d["compress_seconds"] = t.compress_seconds;
          d["decompress_seconds"] = t.decompress_seconds;
          d["seconds"] = t.seconds;
          by_op[py::str(op)] = d;
        }
        return by_op;
      },
      py::arg("backend"), py::arg("reset") = false);
}
