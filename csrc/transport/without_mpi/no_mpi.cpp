// mpi_api.h for a build without Open MPI (setup.py compiles this file instead of the mpi_*.cpp
// files when ZCCL_WITH_MPI=0 or no mpicc is found): groups run over the TCP transport only, MPI
// is never initialised, and asking for an MPI group says what to do instead. It lives in a folder
// of its own so that the test programs, which compile csrc/transport/*.cpp with MPI, never see it.
#include "../mpi_api.h"

namespace zccl::transport {

bool mpi_transport_built() { return false; }

std::string mpi_library_version() { return ""; }

bool mpi_is_initialized() { return false; }

void finalize_if_owned() {}

bool abort_if_owned(int) { return false; }

std::unique_ptr<Comm> open_mpi_group(int, int, const std::vector<int64_t>&, const std::string&) {
  throw TransportError(kNoMpiTransportMessage);
}

}  // namespace zccl::transport
