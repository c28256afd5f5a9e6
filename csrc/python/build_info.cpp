// The build's identity, baked in at compile time. Kept in a file of its own: the generated header
// changes with every edit under csrc/, and only this file includes it, so only it recompiles.
#include "build_info.h"

#include "zccl_build_info.h"  // build/zccl_generated/, written by setup.py

namespace zccl::python {

const char* source_digest() { return ZCCL_SOURCE_DIGEST; }

}  // namespace zccl::python
