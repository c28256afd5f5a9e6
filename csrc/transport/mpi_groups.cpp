// Creating MpiComm communicators (mpi_comm.h): duplicates, groups of world ranks, subgroups, and
// the communicator of a torch process group.
#include <algorithm>
#include <functional>
#include <string>

#include "mpi_internal.h"

namespace zccl::transport {

using mpi::Guard;

std::unique_ptr<MpiComm> MpiComm::duplicate(MPI_Comm parent, std::chrono::milliseconds timeout) {
  ensure_initialized();
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  {
    Guard g;
    check(MPI_Comm_idup(parent, &dup, &req), "MPI_Comm_idup");
  }
  auto done = [&] {
    int flag = 0;
    Guard g;
    check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Comm_idup (wait)");
    return flag != 0;
  };
  wait_until(timeout, done, [&] {
    throw TimeoutError("zccl: Timed out after " + std::to_string(timeout.count()) +
                       " ms duplicating a communicator (MPI_Comm_idup): not every rank of the "
                       "parent communicator joined");
  });
  std::unique_ptr<MpiComm> out(new MpiComm(dup));
  out->timeout_ = timeout;
  return out;
}

std::unique_ptr<Comm> MpiComm::duplicate() const {
  std::unique_ptr<MpiComm> out = duplicate(comm_, timeout_);
  out->take_waits_of(*this);
  return out;
}

std::unique_ptr<Comm> MpiComm::subgroup(const std::vector<int>& ranks) const {
  if (ranks.empty()) throw std::invalid_argument("zccl: subgroup needs at least one rank");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= size_) {
      throw std::invalid_argument("zccl: subgroup rank " + std::to_string(sorted[i]) +
                                  " is out of range [0, " + std::to_string(size_) + ")");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw std::invalid_argument("zccl: subgroup rank " + std::to_string(sorted[i]) +
                                  " is listed twice");
    }
  }
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
  // MPI_Comm_create_group is collective over the members only (non-members need not call).
  // It is blocking: there is no non-blocking variant in MPI 3.1.
  Guard g;
  MPI_Group parent_group = MPI_GROUP_NULL, sub_group = MPI_GROUP_NULL;
  check(MPI_Comm_group(comm_, &parent_group), "MPI_Comm_group");
  int rc = MPI_Group_incl(parent_group, static_cast<int>(ranks.size()), ranks.data(), &sub_group);
  MPI_Group_free(&parent_group);
  check(rc, "MPI_Group_incl");
  MPI_Comm sub = MPI_COMM_NULL;
  rc = MPI_Comm_create_group(comm_, sub_group, /*tag=*/0, &sub);
  MPI_Group_free(&sub_group);
  check(rc, "MPI_Comm_create_group");
  if (sub == MPI_COMM_NULL) return nullptr;
  std::unique_ptr<MpiComm> out;
  try {
    out.reset(new MpiComm(sub));
  } catch (...) {
    MPI_Comm_free(&sub);
    throw;
  }
  out->take_waits_of(*this);
  return out;
}

std::unique_ptr<MpiComm> MpiComm::create_group(const std::vector<int>& world_ranks, int tag) {
  ensure_initialized();
  if (world_ranks.empty()) throw std::invalid_argument("zccl: a group needs at least one rank");
  Guard g;
  MPI_Group world_group = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
  int rc = MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(),
                          &members);
  MPI_Group_free(&world_group);
  check(rc, "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  // Collective over the members only: the other ranks of the world never call it.
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &comm);
  MPI_Group_free(&members);
  check(rc, "MPI_Comm_create_group");
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("zccl: this rank is not in the group");
  try {
    return std::unique_ptr<MpiComm>(new MpiComm(comm));
  } catch (...) {
    MPI_Comm_free(&comm);
    throw;
  }
}

std::unique_ptr<Comm> open_mpi_group(int rank, int size, const std::vector<int64_t>& global_ranks,
                                     const std::string& group_id) {
  ensure_initialized();
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  bool whole_world = global_ranks.empty();
  if (static_cast<int>(global_ranks.size()) == world_size) {
    whole_world = true;
    for (int r = 0; r < world_size; ++r) whole_world = whole_world && global_ranks[r] == r;
  }
  if (whole_world) {
    if (rank != world_rank || size != world_size) {
      throw std::invalid_argument("zccl: torch.distributed rank/world_size (" + std::to_string(rank) + "/" +
                                  std::to_string(size) + ") disagree with MPI's (" + std::to_string(world_rank) +
                                  "/" + std::to_string(world_size) + "); launch with mpirun and let zccl_torch "
                                  "set RANK/WORLD_SIZE, or pass MPI's values");
    }
    return MpiComm::duplicate(MPI_COMM_WORLD);
  }
  std::vector<int> ranks(global_ranks.begin(), global_ranks.end());
  if (static_cast<int>(ranks.size()) != size || rank < 0 || rank >= size || ranks[rank] != world_rank) {
    throw std::invalid_argument("zccl: subgroup ranks do not match MPI_COMM_WORLD ranks");
  }
  const int tag = static_cast<int>(std::hash<std::string>{}(group_id) % 30000u) + 1;
  return MpiComm::create_group(ranks, tag);
}

}  // namespace zccl::transport
