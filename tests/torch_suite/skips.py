"""Which of torch's distributed tests run on "zccl", and why the others do not.

Rule: a test is never skipped because it fails on zccl (that failure is a bug to report). A
test is skipped only when it cannot be meaningful here; each entry says why.

* ``SKIPS``: tests the harness does not run (name -> reason).
* ``FEATURES``: torch's ``DistTestCases.backend_feature`` sets zccl joins (it implements them).
* ``UNGATED``: tests torch gates to literal backend names ("mpi", "gloo", the GPU backends) for a
  capability zccl has on CPU, with a body that does not branch on the backend name; they run.
  Each was reviewed: torch stores only the outermost skip reason, so an entry must not hide an
  inner skip decorator (``exact_world_size`` re-applies the one such inner gate).

torch's other gates (CUDA-only tests, features torch's Python allows only for gloo such as
monitored_barrier, world-size requirements) stay in force: their skips carry torch's reason.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ungate:
    """Why a test torch skips for zccl's name runs anyway."""

    torch_reason: str  # the skip reason torch gives for BACKEND=zccl (checked before clearing)
    why: str  # why the gate does not apply to zccl
    exact_world_size: int | None = None  # an inner require_exact_world_size() gate to keep


FEATURES: tuple[str, ...] = (
    "ddp",  # DistributedDataParallel on CPU models (zccl serves CPU tensors; hooks.py has a hook)
    "subgroup",  # new_group() subgroups: each is its own zccl group over an MPI communicator
    "plugin",  # require_backend_is_available() accepts a backend in this set as available
)

_GLOO = "Test requires backend zccl to be one of {'gloo'}"
_GPU = "Test requires backend zccl to be one of {'gloo', 'nccl', 'ucc'}"  # set order ignored
_A2A = Ungate("Only MPI supports all_to_all", "zccl implements all_to_all (MPI alltoallv)")
_A2AS = Ungate("Only MPI supports CPU all_to_all_single", _A2A.why)
_ARC = Ungate(_GLOO, "zccl implements all_reduce_coalesced on CPU tensors")
_OBJ = Ungate(_GPU, "object collectives on CPU (the body branches only for nccl)")

UNGATED: dict[str, Ungate] = {
    **{f"test_all_to_all{s}": _A2A for s in ("", "_complex", "_full_group", "_group")},
    **{
        f"test_all_to_all_single_{kind}{s}": _A2AS
        for kind in ("equal_split", "unequal_split")
        for s in ("", "_complex", "_full_group", "_group")
    },
    # Not the test_accumulate_gradients_no_sync* tests under the same gate: their body builds
    # the model only `if BACKEND == "mpi" or BACKEND == "gloo"` (else UnboundLocalError).
    "test_get_future": Ungate(
        "get_future is only supported on mpi, nccl and gloo",
        "zccl's Work objects provide get_future(), as the MPI backend's do",
    ),
    **{
        f"test_all_reduce_coalesced{g}_{op}": _ARC
        for g in ("", "_group", "_full_group")
        for op in ("sum", "product", "min", "max")
    },
    "test_scatter_object_list": Ungate(_GLOO, "scatter_object_list over CPU tensors"),
    "test_grads_same_across_ranks_with_no_sync": Ungate(_GLOO, "DDP no_sync() on a CPU model"),
    "test_all_gather_object_default_pg": _OBJ,
    "test_all_gather_object_subgroup": _OBJ,
    "test_gather_object": Ungate(_OBJ.torch_reason, _OBJ.why, exact_world_size=4),
    "test_gather_object_subgroup": Ungate(_OBJ.torch_reason, _OBJ.why, exact_world_size=4),
    **{
        f"test_batch_isend_irecv_gloo{s}": Ungate(
            "GLOO Batch Send Recv CPU", "batch_isend_irecv of CPU tensors (plain isend/irecv)"
        )
        for s in ("", "_tags")
    },
    # Generic c10d APIs that gloo happened to implement first; zccl implements them too (the
    # team's current work), so torch's suite tracks them. The monitored_barrier tests also need
    # dist.monitored_barrier, which torch's Python refuses for any non-gloo group, let through.
    **{
        f"test_monitored_barrier_{s}": Ungate(_GLOO, "zccl implements monitoredBarrier")
        for s in ("gloo", "gloo_subgroup", "gloo_rank_0_timeout", "failure_order", "wait_all_ranks")
    },
    "test_sparse_all_reduce_sum": Ungate(
        "Only Gloo backend supports sparse all reduce", "zccl implements sparse all_reduce"
    ),
    # Not test_barrier_timeout_global: it also needs a file:// re-initialisation of the default
    # group (an inner gate torch's outer "gloo" reason hides).
    **{
        f"test_barrier_timeout{s}": Ungate(
            "Only gloo backend supports timeouts",
            "zccl groups honour their timeout (a wait past it raises)",
        )
        for s in ("_group", "_full_group")
    },
}

SKIPS: dict[str, str] = {
    "test_ddp_logging_data_cpu": (
        "torch limitation for plugin backends: DDP logging records "
        'ProcessGroup::getBackendName(), which is "custom" for every registered backend '
        '(the test expects "zccl"); zccl cannot change it'
    ),
}
