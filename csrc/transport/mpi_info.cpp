// Facts about the MPI library the extension is linked against (mpi_api.h), and whether it reads
// device memory (MpiComm::device_memory).
#include "mpi_api.h"

#include "mpi_comm.h"  // <mpi.h> without its C++ bindings

// Open MPI declares MPIX_Query_cuda_support() in its extensions header.
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace zccl::transport {

bool mpi_transport_built() { return true; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) {
    throw std::runtime_error("zccl: MPI_Get_library_version failed");
  }
  return std::string(text, static_cast<size_t>(len));
}

bool mpi_is_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

ExactSchedules MpiComm::exact_schedules() const {
  static const ExactSchedules schedules = mpi_library_version().rfind("Open MPI", 0) == 0
                                              ? ExactSchedules::OpenMpiNbc
                                              : ExactSchedules::BandwidthOptimal;
  return schedules;
}

bool MpiComm::device_memory() const {
  // A function-local static: initialised once, thread-safely, on first use.
  static const bool aware = [] {
    if (const char* env = std::getenv("ZCCL_CUDA_AWARE")) {
      if (std::strcmp(env, "0") == 0) return false;
      if (std::strcmp(env, "1") == 0) return true;
      throw std::invalid_argument(std::string("zccl: ZCCL_CUDA_AWARE must be 0 or 1, got '") + env + "'");
    }
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;  // MPI is initialised: this communicator exists
#else
    return false;  // no way to ask: staging through pinned memory is always correct
#endif
  }();
  return aware;
}

}  // namespace zccl::transport
