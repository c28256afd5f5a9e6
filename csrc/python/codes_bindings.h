// Python entry points of the integer code segments (codes_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace zccl::python {

void bind_codes(pybind11::module_& m);

}  // namespace zccl::python
