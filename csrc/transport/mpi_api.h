// What the rest of the extension calls of the Open MPI transport, without including <mpi.h>: the
// backend and the Python bindings include only this, so that a build without Open MPI (setup.py,
// ZCCL_WITH_MPI=0 or no mpicc) compiles them unchanged and links without_mpi/no_mpi.cpp in place
// of the mpi_*.cpp files. Every function is callable before MPI_Init.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace zccl::transport {

// Whether this build has the Open MPI transport (false: built without Open MPI).
bool mpi_transport_built();

// What asking for an MPI group in a build without the MPI transport raises (open_mpi_group here,
// and the Python backend before a group's members meet).
inline constexpr const char* kNoMpiTransportMessage =
    "zccl: this zccl build has no Open MPI transport (it was built without Open MPI): use the TCP "
    "transport (ZCCL_TRANSPORT=tcp, the default under torchrun and, in this build, under mpirun "
    "too), or install Open MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) and rebuild";

// MPI_Get_library_version, e.g. "Open MPI v4.1.4, ..." ("" without the MPI transport). Does not
// initialise MPI.
std::string mpi_library_version();

// Whether MPI_Init has been called in this process (by anyone; false without the MPI transport).
bool mpi_is_initialized();

// Finalises MPI only if this library initialised it and it is not finalised yet.
void finalize_if_owned();

// MPI_Abort(MPI_COMM_WORLD, code) -- the launcher then ends every rank of the job -- only if this
// library initialised MPI, it is still running and the job has more than one rank; returns false
// (doing nothing) otherwise. For a process dying of an error: MPI_Finalize would wait for ranks
// that are themselves waiting for this one, until their timeout.
bool abort_if_owned(int code);

// The communicator of a torch process group of `size` ranks in which this process is `rank`:
// a duplicate of MPI_COMM_WORLD when `global_ranks` is empty or all of it in order, else a
// communicator of exactly those world ranks (`group_id` names the group; the same on every
// member). Initialises MPI on first use. Throws std::invalid_argument when torch's ranks disagree
// with MPI's, and TransportError in a build without the MPI transport.
std::unique_ptr<Comm> open_mpi_group(int rank, int size, const std::vector<int64_t>& global_ranks,
                                     const std::string& group_id);

}  // namespace zccl::transport
