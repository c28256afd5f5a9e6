// Python entry points of the integer code segments (compress/fzcodes.h), for the tests and the
// hop-cost benchmark: one ring hop (combine) and its decoding, on CPU tensors.
#include "codes_bindings.h"

#include <torch/extension.h>

#include <optional>

#include "../compress/fzcodes.h"

namespace zccl::python {

namespace {

namespace codes = fz::codes;

codes::Grid grid_for(double eb, int ranks) {
  const std::optional<codes::Grid> g = codes::make_grid(eb, ranks);
  TORCH_CHECK_VALUE(g.has_value(), "zccl: no integer grid for error bound ", eb, " and ", ranks,
                    " ranks (needs a finite eb >= 2.2e-308 and ranks >= 1)");
  return *g;
}

void check_values(const torch::Tensor& x) {
  TORCH_CHECK_TYPE(x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kFloat64,
                   "zccl: integer code segments hold float32 or float64 values");
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous(), "zccl: need a contiguous CPU tensor");
}

void check_segment(const torch::Tensor& s) {
  TORCH_CHECK_TYPE(s.scalar_type() == torch::kUInt8, "zccl: a segment is a uint8 tensor");
  TORCH_CHECK(s.device().is_cpu() && s.is_contiguous() && s.dim() == 1,
              "zccl: a segment is a contiguous 1-D CPU tensor");
}

// `into` (optional): a buffer of at least max_segment_bytes to write into; the segment is then
// returned as a view of it.
torch::Tensor combine(const std::optional<torch::Tensor>& incoming, const torch::Tensor& x,
                      double eb, int ranks, const std::optional<torch::Tensor>& into) {
  check_values(x);
  if (incoming) check_segment(*incoming);
  const codes::Grid g = grid_for(eb, ranks);
  const uint64_t n = static_cast<uint64_t>(x.numel());
  const size_t cap = codes::max_segment_bytes(n);
  if (into) {
    check_segment(*into);
    TORCH_CHECK(static_cast<size_t>(into->numel()) >= cap, "zccl: out holds ", into->numel(),
                " bytes, the segment may need ", cap);
  }
  torch::Tensor out = into ? *into : torch::empty({static_cast<int64_t>(cap)}, torch::kUInt8);
  const uint8_t* in = incoming ? incoming->data_ptr<uint8_t>() : nullptr;
  const size_t in_len = incoming ? static_cast<size_t>(incoming->numel()) : 0;
  size_t used = 0;
  {
    pybind11::gil_scoped_release nogil;
    used = x.scalar_type() == torch::kFloat32
               ? codes::combine(in, in_len, x.data_ptr<float>(), n, g, out.data_ptr<uint8_t>(), cap)
               : codes::combine(in, in_len, x.data_ptr<double>(), n, g, out.data_ptr<uint8_t>(),
                                cap);
  }
  torch::Tensor segment = out.narrow(0, 0, static_cast<int64_t>(used));
  return into ? segment : segment.clone();
}

torch::Tensor decode(const torch::Tensor& segment, double eb, int ranks,
                     const std::optional<torch::Tensor>& into) {
  check_segment(segment);
  const codes::Grid g = grid_for(eb, ranks);
  const uint8_t* src = segment.data_ptr<uint8_t>();
  const size_t len = static_cast<size_t>(segment.numel());
  const codes::SegmentInfo info = codes::read_segment_info(src, len);
  const bool f32 = info.dtype == fz::DType::Float32;
  const auto type = f32 ? torch::kFloat32 : torch::kFloat64;
  if (into) {
    TORCH_CHECK(into->scalar_type() == type && into->device().is_cpu() &&
                    into->is_contiguous() && static_cast<uint64_t>(into->numel()) == info.count,
                "zccl: out must be a contiguous CPU tensor of the segment's dtype and count");
  }
  torch::Tensor out = into ? *into : torch::empty({static_cast<int64_t>(info.count)}, type);
  pybind11::gil_scoped_release nogil;
  if (f32) {
    codes::decode(src, len, info.count, g, out.data_ptr<float>());
  } else {
    codes::decode(src, len, info.count, g, out.data_ptr<double>());
  }
  return out;
}

}  // namespace

void bind_codes(pybind11::module_& m) {
  m.def("codes_combine", &combine, pybind11::arg("incoming"), pybind11::arg("x"),
        pybind11::arg("error_bound"), pybind11::arg("ranks"), pybind11::arg("out") = pybind11::none(),
        "One integer ring hop: the code segment of (incoming segment + quantised x); "
        "incoming=None: x alone");
  m.def("codes_decode", &decode, pybind11::arg("segment"), pybind11::arg("error_bound"),
        pybind11::arg("ranks"), pybind11::arg("out") = pybind11::none(),
        "The values of an integer code segment");
  m.def("codes_max_segment_bytes", &codes::max_segment_bytes, pybind11::arg("n"),
        "Worst-case size of an integer code segment of n values");
}

}  // namespace zccl::python
