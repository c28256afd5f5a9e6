// Facts about the MPI library the extension is linked against (callable before MPI_Init).
#pragma once

#include <string>

namespace zccl::transport {

// MPI_Get_library_version, e.g. "Open MPI v4.1.4, ...". Safe to call without initialising MPI.
std::string mpi_library_version();

// Whether MPI_Init has been called in this process (by anyone).
bool mpi_is_initialized();

}  // namespace zccl::transport
