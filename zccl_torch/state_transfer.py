"""Torch's state-transfer paths run exact on zccl groups.

Some collectives do not carry a training step's data but copy *state*: model weights from a
source rank to the others, or a sharded model gathered into a checkpoint. Through a compressed
collective the copies would each sit within ``eb`` of the original, but would no longer be the
weights the user initialised, loaded or saved; a checkpoint round trip would drift by ``eb`` per
save. So the functions below run their collectives with ``algorithm="mpi"`` (exact) on every zccl
group, while every other call (gradient reductions, FSDP's parameter all-gathers, tensor
parallelism's activations, the user's own collectives) keeps its configuration:

* DDP's and FSDP's module-state synchronisation (``torch.distributed._broadcast_coalesced``).
* DTensor's placement from a source rank (``distribute_tensor`` with its default
  ``src_data_rank=0``, hence tensor parallelism's ``parallelize_module``, and
  ``DTensor.from_local(..., run_check=True)`` for replicas): its ``mesh_broadcast`` and
  ``mesh_scatter``.
* The checkpoint state-dict API, ``torch.distributed.checkpoint.state_dict`` (``get_/set_`` model,
  optimizer and whole state dicts; full state dicts and ``broadcast_from_rank0`` loads, for FSDP2,
  FSDP1 and DDP models alike).
* ``ZeroRedundancyOptimizer``'s parameter synchronisation after each step (each owner's updated
  shard copied to the others; with ``overlap_with_ddp`` too). It overwrites the weights, so
  through a compressed broadcast every step would snap them to the quantisation grid, and an
  update smaller than half a bin would be lost (training stalls with an absolute bound).
* Model averaging (``PeriodicModelAverager``, ``HierarchicalModelAverager``: post-local SGD),
  whose all-reduced average replaces every rank's weights in the same way.
* DCP's ``BroadcastingTorchSaveReader`` (a ``torch.save`` file read on one rank and broadcast
  into a distributed state dict) and the older ShardedTensor's ``ChunkShardingSpec.shard``
  (scatter from a source rank).
* FSDP1's own full state dicts: ``model.state_dict()`` under ``StateDictType.FULL_STATE_DICT``
  and its optimizer state-dict functions (``optim_state_dict``, ``full_optim_state_dict``,
  ``optim_state_dict_to_load``, ``scatter_full_optim_state_dict``, ...).

The targets are private torch functions, so each is patched when its module is first imported
(``wrapt``'s post-import hooks: nothing is imported early, and the order of the user's imports
does not matter) and skipped when a torch release does not have it. The check of the pinned torch
is ``tests/test_state_transfer.py``, which fails if any of them stopped being exact.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import wrapt

# module -> attributes (dotted below the module for class attributes) that move state.
TARGETS: dict[str, tuple[str, ...]] = {
    "torch.distributed": ("_broadcast_coalesced",),
    # placement_types and _api import the two by name, so each module's own reference is patched.
    "torch.distributed.tensor._collective_utils": ("mesh_broadcast", "mesh_scatter"),
    "torch.distributed.tensor.placement_types": ("mesh_broadcast", "mesh_scatter"),
    "torch.distributed.tensor._api": ("mesh_broadcast",),
    # The public get_/set_ functions call these through the module's globals.
    "torch.distributed.checkpoint.state_dict": (
        "_get_model_state_dict",
        "_load_model_state_dict",
        "_get_optim_state_dict",
        "_load_optim_state_dict",
    ),
    # Loads a torch.save file on one rank into a DCP state dict, broadcasting each tensor.
    "torch.distributed.checkpoint.format_utils": ("BroadcastingTorchSaveReader.read_data",),
    # ShardedTensor's (torch.distributed._shard) placement from a source rank.
    "torch.distributed._shard.sharding_spec.chunk_sharding_spec": ("ChunkShardingSpec.shard",),
    # ZeroRedundancyOptimizer: each owner broadcasts its updated parameters after the step (also
    # from the DDP hook that overlaps it). These overwrite the weights themselves, so a lossy
    # copy would re-quantise them every step and freeze every update under the bin.
    "torch.distributed.optim.zero_redundancy_optimizer": ("ZeroRedundancyOptimizer._sync_params",),
    "torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook": ("_broadcast_bucket",),
    # Model averaging (post-local SGD; the periodic and hierarchical averagers call this): the
    # averaged weights replace each rank's own, so the same holds.
    "torch.distributed.algorithms.model_averaging.utils": ("average_parameters",),
    "torch.distributed.fsdp._state_dict_utils": ("_full_pre_state_dict_hook",),
    "torch.distributed.fsdp.fully_sharded_data_parallel": (
        "FullyShardedDataParallel._optim_state_dict_impl",
        "FullyShardedDataParallel._optim_state_dict_to_load_impl",
    ),
}


def _run_exact(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    """wrapt wrapper: calls ``wrapped`` with every zccl collective of this thread exact."""
    from zccl_torch.config import config  # late: config imports the extension's options

    with config(algorithm="mpi"):
        return wrapped(*args, **kwargs)


def _raw_attribute(module: ModuleType, path: str) -> Any:
    """``module``'s attribute at dotted ``path`` as stored (a class's staticmethod, not the
    function it binds to); None when absent."""
    owner: Any = module
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
    return getattr(owner, "__dict__", {}).get(name)


def _patch(paths: tuple[str, ...], module: ModuleType) -> None:
    """Wraps each of ``paths`` in ``module`` with _run_exact, once; absent ones are skipped."""
    for path in paths:
        if _raw_attribute(module, path) is None:
            continue  # another torch release: nothing of that name to make exact
        if is_exact(module, path):
            continue  # already exact (imported by name from a module patched before)
        wrapt.wrap_function_wrapper(module, path, _run_exact)


def install() -> None:
    """Registers the patches (each applied now if its module is already imported). Idempotent:
    a second registration finds the functions wrapped and leaves them."""
    for module_name, paths in TARGETS.items():
        wrapt.register_post_import_hook(functools.partial(_patch, paths), module_name)


def is_exact(module: ModuleType, path: str) -> bool:
    """Whether ``module``'s attribute ``path`` runs exact on zccl groups (for tests)."""
    current = _raw_attribute(module, path)
    return isinstance(current, wrapt.FunctionWrapper) and current._self_wrapper is _run_exact
