#include "mpi_info.h"

#include "mpi_comm.h"  // <mpi.h> without its C++ bindings

#include <stdexcept>

namespace zccl::transport {

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

}  // namespace zccl::transport
