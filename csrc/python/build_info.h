// What this build of the extension is, for the check that every rank of a group runs the same one
// (zccl_torch/membership.py).
#pragma once

namespace zccl::python {

// The first 16 hex digits of a SHA-256 over every source under csrc/ (setup.py computes it).
const char* source_digest();

}  // namespace zccl::python
