"""State transfer exact, data path compressed: DTensor, tensor parallelism, checkpoint state dicts
and functional collectives on a "zccl" group; run under mpirun by tests/test_state_transfer.py
(``mpirun -np P python tests/mpi/state_transfer_checks.py [check ...]``).

zccl_torch/state_transfer.py runs torch's state-copying paths exact on zccl groups. Each check
below makes every payload compressible (``min_compress_bytes=0``), gives the ranks *different*
weights where torch copies rank 0's, and requires bit-for-bit equality with the source (and with
Gloo where torch's own result is the reference). Each also requires that the same process did
compress elsewhere (the training step, a plain broadcast), so equality cannot come from nothing
compressing. The functional collectives (``torch.distributed._functional_collectives``, what
DTensor and compiled code call) must compress and stay within the bound.
"""

import copy
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.checkpoint as dcp
from check_common import assert_within, gloo, rank, run_checks, world
from torch.distributed._shard.sharding_spec import ChunkShardingSpec
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.checkpoint.format_utils import (
    BroadcastingTorchSaveReader,
    DynamicMetaLoadPlanner,
)
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    FullStateDictConfig,
    FullyShardedDataParallel,
    StateDictType,
    fully_shard,
)
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

import zccl_torch

CHECKS: dict[str, Callable[[], None]] = {}
EB = 1e-3  # absolute: every compressed value moves by at most this, enough to see


_failures: list[str] = []


def expect(ok: bool, message: str) -> None:
    """Records a failed expectation; the check raises at its end (see check()). Raising at once
    would let the other ranks, whose values may pass, run on into the next collective alone."""
    if not ok:
        _failures.append(message)


def check(fn: Callable[[], None]) -> Callable[[], None]:
    """Registers ``fn``: after it ran to its end on every rank, every rank raises if any failed."""

    def agreed() -> None:
        _failures.clear()
        fn()
        failed = torch.tensor([len(_failures)])
        dist.all_reduce(failed, group=gloo())  # exact, and apart from the group under test
        if int(failed):
            raise AssertionError(f"{int(failed)} failures on all ranks; here: {_failures}")

    agreed.__doc__ = fn.__doc__
    CHECKS[fn.__name__] = agreed
    return fn


def mesh(group: Any = None) -> DeviceMesh:
    return DeviceMesh.from_group(group or dist.group.WORLD, "cpu")


def compressed_calls() -> int:
    return int(zccl_torch.total_stats()["compressed_calls"])


def exact(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if not torch.equal(got, want):
        err = float((got.double() - want.double()).abs().max()) if got.shape == want.shape else -1
        expect(
            False,
            f"{name}: not bit-identical (shapes {got.shape} / {want.shape}, max difference {err})",
        )


def within(name: str, got: torch.Tensor, ref: torch.Tensor, bound: Any) -> None:
    try:
        assert_within(name, got, ref, bound)
    except AssertionError as e:
        expect(False, str(e))


def still_compresses() -> None:
    """A plain broadcast of a float tensor compresses here (so the equalities above mean
    something): it lands within EB of rank 0's values and differs from them somewhere."""
    src = torch.randn(4200, generator=torch.Generator().manual_seed(11)) * 10
    t = src.clone() if rank() == 0 else torch.zeros_like(src)
    before = compressed_calls()
    dist.broadcast(t, src=0)
    expect(compressed_calls() == before + 1, "a plain broadcast did not compress")
    within("plain broadcast", t, src, EB)
    expect(not torch.equal(t, src), "a compressed broadcast changed nothing")


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(48, 240), torch.nn.Tanh(), torch.nn.Linear(240, 48))


def batches(steps: int, per_rank: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # 256 x 48 outputs: tensor parallelism's all-reduce of them (48 KiB) compresses at p = 2..5.
    """Data parallel: each rank its own batches; tensor parallel: the same on every rank."""
    g = torch.Generator().manual_seed(100 + (rank() if per_rank else 0))
    return [
        (torch.randn(256, 48, generator=g), torch.randn(256, 48, generator=g)) for _ in range(steps)
    ]


def train(
    model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, per_rank: bool = True
) -> list[float]:
    losses = []
    for x, y in batches(steps, per_rank):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


# ----------------------------------------------------------------------------------------------


@check
def distribute_tensor_copies_rank0_exactly() -> None:
    """distribute_tensor (src_data_rank=0) scatters / broadcasts rank 0's tensor: every rank's
    local piece is rank 0's, bit for bit, for shards of uneven size and for replicas."""
    p = world()
    source = torch.randn(5 * p + 1, 37, generator=torch.Generator().manual_seed(0)) * 10
    mine = source if rank() == 0 else torch.randn(source.shape)  # the others hold other values
    before = compressed_calls()
    for placement in (Shard(0), Shard(1), Replicate()):
        local = distribute_tensor(mine, mesh(), [placement]).to_local()
        if isinstance(placement, Shard):
            want = list(torch.chunk(source, p, dim=placement.dim))[rank()]
        else:
            want = source
        exact(f"distribute_tensor {placement}", local, want)
    expect(compressed_calls() == before, "distribute_tensor compressed")
    still_compresses()


@check
def from_local_run_check_replicates_rank0_exactly() -> None:
    """DTensor.from_local(..., [Replicate()], run_check=True) broadcasts rank 0's tensor."""
    source = torch.randn(300, generator=torch.Generator().manual_seed(1))
    mine = source if rank() == 0 else torch.randn(300)
    got = DTensor.from_local(mine, mesh(), [Replicate()], run_check=True).to_local()
    exact("from_local", got, source)


@check
def ddp_construction_copies_rank0_exactly() -> None:
    """DistributedDataParallel(model) broadcasts rank 0's parameters (ranks start apart): every
    rank ends with rank 0's initial weights bit for bit, rank 0 keeping its own."""
    source = {k: v.clone() for k, v in make_model(seed=0).state_dict().items()}
    model = make_model(seed=rank())
    torch.nn.parallel.DistributedDataParallel(model)
    same_state("DDP", {k: v.detach() for k, v in model.state_dict().items()}, source)
    still_compresses()


@check
def tensor_parallel_weights_exact_training_compressed() -> None:
    """parallelize_module copies rank 0's weights exactly (ranks start from different weights; the
    shards equal Gloo's bit for bit); the training step's activation all-reduces compress, and
    the loss follows Gloo's within 2 %."""
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    runs = {}
    for name, group in (("zccl", dist.group.WORLD), ("gloo", gloo())):
        model = parallelize_module(make_model(seed=rank()), mesh(group), plan)
        start = {k: v.to_local().clone() for k, v in model.state_dict().items()}
        before = compressed_calls()
        losses = train(
            model, torch.optim.SGD(model.parameters(), lr=0.05), steps=10, per_rank=False
        )
        runs[name] = (start, losses, compressed_calls() - before)
    for key, want in runs["gloo"][0].items():
        exact(f"parallelize_module {key}", runs["zccl"][0][key], want)
    expect(runs["zccl"][2] > 0, "tensor-parallel training compressed nothing")
    for step, (got, want) in enumerate(zip(runs["zccl"][1], runs["gloo"][1], strict=True)):
        expect(abs(got - want) <= 0.02 * abs(want), f"step {step}: loss {got} vs Gloo {want}")


def fsdp2_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = make_model(seed=0)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh())
    fully_shard(model, mesh=mesh())
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def gathered_exactly(state: dict[str, Any]) -> dict[str, Any]:
    """Every DTensor of a (possibly nested) state dict gathered with algorithm="mpi"."""
    with zccl_torch.config(algorithm="mpi"):
        return {
            k: gathered_exactly(v)
            if isinstance(v, dict)
            else (v.full_tensor() if isinstance(v, DTensor) else v)
            for k, v in state.items()
        }


def same_state(label: str, got: dict[str, Any], want: dict[str, Any]) -> None:
    """Expects ``got`` to hold ``want``'s keys and values, tensors bit for bit (nested dicts)."""
    expect(got.keys() == want.keys(), f"{label}: keys {sorted(got)} != {sorted(want)}")
    for k, w in want.items():
        if k not in got:
            continue
        if isinstance(w, dict):
            same_state(f"{label}.{k}", got[k], w)
        elif isinstance(w, torch.Tensor):
            exact(f"{label}.{k}", got[k], w)
        else:
            expect(got[k] == w, f"{label}.{k}: {got[k]} != {w}")


@check
def fsdp2_full_state_dicts_exact() -> None:
    """After compressed FSDP2 training, get_model/optimizer_state_dict(full_state_dict=True)
    equal the shards gathered exactly."""
    model, opt = fsdp2_model()
    before = compressed_calls()
    train(model, opt, steps=5)
    expect(compressed_calls() > before, "FSDP2 training compressed nothing")
    full = StateDictOptions(full_state_dict=True)
    same_state(
        "model", get_model_state_dict(model, options=full), gathered_exactly(model.state_dict())
    )
    got_optim = get_optimizer_state_dict(model, opt, options=full)
    want_optim = get_optimizer_state_dict(model, opt)  # sharded: DTensors, no collective
    same_state("optimizer", got_optim["state"], gathered_exactly(want_optim["state"]))


def off_grid(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with every float tensor of two or more values moved by a seeded random amount
    (the same on every rank)."""
    g = torch.Generator().manual_seed(5)
    out: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out[k] = off_grid(v)
        elif isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() > 1:
            out[k] = v + torch.randn(v.shape, generator=g) * 1e-2
        else:
            out[k] = v
    return out


@check
def fsdp2_broadcast_from_rank0_loads_exactly() -> None:
    """set_model/optimizer_state_dict(broadcast_from_rank0=True): every rank's shards are slices
    of rank 0's full state dict, bit for bit."""
    source_model, source_opt = fsdp2_model()
    train(source_model, source_opt, steps=3)
    full = StateDictOptions(full_state_dict=True)
    # Off the quantisation grid (a gathered state dict is on it, and a lossy broadcast of values
    # on the grid gives them back exactly): a fresh model, and the optimizer state nudged.
    model_sd = make_model(seed=7).state_dict()
    optim_sd = off_grid(get_optimizer_state_dict(source_model, source_opt, options=full))
    model, opt = fsdp2_model()
    train(model, opt, steps=1)  # other values and an initialised optimizer state to overwrite
    load = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    # Loading may turn the given dict's tensors into DTensors: rank 0 hands over a copy.
    set_model_state_dict(model, copy.deepcopy(model_sd) if rank() == 0 else {}, options=load)
    set_optimizer_state_dict(
        model, opt, copy.deepcopy(optim_sd) if rank() == 0 else {}, options=load
    )
    same_state("model", gathered_exactly(model.state_dict()), model_sd)
    got = gathered_exactly(get_optimizer_state_dict(model, opt)["state"])
    same_state("optimizer", got, optim_sd["state"])
    still_compresses()


@check
def fsdp1_full_state_dicts_exact() -> None:
    """FSDP1: model.state_dict() under FULL_STATE_DICT and FSDP.optim_state_dict equal the same
    calls made inside algorithm="mpi" (the exact reference), after compressed training."""
    model = FullyShardedDataParallel(make_model(seed=0), device_id=torch.device("cpu"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = compressed_calls()
    train(model, opt, steps=5)
    expect(compressed_calls() > before, "FSDP1 training compressed nothing")
    cfg = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        got_model = model.state_dict()
        got_optim = FullyShardedDataParallel.optim_state_dict(model, opt)
        with zccl_torch.config(algorithm="mpi"):
            want_model = model.state_dict()
            want_optim = FullyShardedDataParallel.optim_state_dict(model, opt)
    same_state("model", got_model, want_model)
    same_state("optimizer", got_optim["state"], want_optim["state"])


@check
def torch_save_file_broadcast_into_dcp_exactly() -> None:
    """dcp.load with BroadcastingTorchSaveReader: rank 0 reads a torch.save file and broadcasts
    each tensor into every rank's state dict (ranks start apart), bit for bit. (torch's reader
    fills plain tensors; FSDP2's DTensor shards it does not handle, on Gloo either.)"""
    source = make_model(seed=7).state_dict()
    folder = [tempfile.mkdtemp() if rank() == 0 else None]
    dist.broadcast_object_list(folder, src=0, group=gloo())
    path = os.path.join(folder[0], "model.pt")
    if rank() == 0:
        torch.save(source, path)
    dist.barrier(group=gloo())
    model = make_model(seed=rank())
    state = model.state_dict()
    dcp.load(
        state,
        checkpoint_id=path,
        storage_reader=BroadcastingTorchSaveReader(),
        planner=DynamicMetaLoadPlanner(),
    )
    same_state("torch.save -> DCP", model.state_dict(), source)
    dist.barrier(group=gloo())
    if rank() == 0:
        shutil.rmtree(folder[0])


@check
def sharded_tensor_scatter_exact() -> None:
    """ShardedTensor's ChunkShardingSpec.shard(tensor, src_rank=0) scatters rank 0's rows."""
    p = world()
    source = torch.randn(4 * p + 1, 33, generator=torch.Generator().manual_seed(3))
    mine = source if rank() == 0 else torch.randn(source.shape)
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(p)])
    (shard,) = spec.shard(mine, src_rank=0, process_group=dist.group.WORLD).local_shards()
    exact("ChunkShardingSpec.shard", shard.tensor, list(torch.chunk(source, p))[rank()])


@check
def zero_redundancy_optimizer_syncs_exactly() -> None:
    """ZeroRedundancyOptimizer broadcasts each owner's updated parameters after its step. With
    the same batch on every rank (the same gradients), every rank must end each step with exactly
    the SGD update of every parameter, an update far below the bound included."""
    lr = 1e-4  # updates ~1e-6, far under EB: a lossy copy would snap them back to the grid
    model = make_model(seed=0)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=lr)
    for step, (x, y) in enumerate(batches(3, per_rank=False)):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        # SGD's own arithmetic (param.add_(grad, alpha=-lr)) on every parameter, here.
        want = [q.detach().clone().add_(q.grad, alpha=-lr) for q in model.parameters()]
        opt.step()
        for i, (q, w) in enumerate(zip(model.parameters(), want, strict=True)):
            exact(f"ZeRO step {step} parameter {i}", q.detach(), w)
    still_compresses()


@check
def model_averaging_exact() -> None:
    """PeriodicModelAverager (post-local SGD): the averaged weights equal, bit for bit, the same
    average taken with algorithm="mpi" (ranks hold different weights)."""
    model = make_model(seed=rank())
    exact_copy = make_model(seed=rank())
    ((x, y),) = batches(1, per_rank=True)
    for m in (model, exact_copy):  # torch averages the parameters that have a gradient
        torch.nn.functional.mse_loss(m(x), y).backward()
    averager = PeriodicModelAverager(period=1, warmup_steps=0)
    with zccl_torch.config(algorithm="mpi"):
        averager.average_parameters(exact_copy.parameters())
    PeriodicModelAverager(period=1, warmup_steps=0).average_parameters(model.parameters())
    for i, (q, w) in enumerate(zip(model.parameters(), exact_copy.parameters(), strict=True)):
        exact(f"averaged parameter {i}", q.detach(), w.detach())
    still_compresses()


@check
def functional_collectives_compress_within_bound() -> None:
    """funcol.all_reduce / all_gather_tensor / all_to_all_single / broadcast and a DTensor
    redistribute on zccl: each compresses, within its bound of the exact result."""
    p = world()
    x = torch.randn(4200, generator=torch.Generator().manual_seed(20 + rank())) * 5
    everyone = [
        torch.randn(4200, generator=torch.Generator().manual_seed(20 + r)) * 5 for r in range(p)
    ]
    group = dist.group.WORLD

    before = compressed_calls()
    got = funcol.all_gather_tensor(x, 0, group).wait()
    within("all_gather_tensor", got, torch.cat(everyone), EB)
    got = funcol.broadcast(x.clone(), 0, group).wait()
    within("broadcast", got, everyone[0], EB)
    got = funcol.all_to_all_single(x, None, None, group).wait()
    want = torch.cat([t.chunk(p)[rank()] for t in everyone])
    within("all_to_all_single", got, want, EB)
    got = funcol.all_reduce(x, "sum", group).wait()
    stats = zccl_torch.last_stats()
    bound = zccl_torch._C.output_error_bound(stats["algorithm"], "sum", p, EB, True)
    total = torch.stack([t.double() for t in everyone]).sum(0)
    rounding = p * torch.finfo(torch.float32).eps * total.abs() + 1e-6
    within("all_reduce", got, total, bound + rounding)
    full = DTensor.from_local(x, mesh(), [Shard(0)], run_check=False).full_tensor()
    within("DTensor Shard -> Replicate", full, torch.cat(everyone), EB)
    partial = DTensor.from_local(x, mesh(), [Partial()], run_check=False)
    summed = partial.redistribute(mesh(), [Replicate()]).to_local()
    within("DTensor Partial -> Replicate", summed, total, bound + rounding)
    expect(compressed_calls() - before == 6, f"{compressed_calls() - before} compressed, not 6")


def main(argv: list[str]) -> int:
    options = zccl_torch.Options(min_compress_bytes=0, mode="abs", error_bound=EB)
    return run_checks(CHECKS, argv, options, timeout_s=120, scoped=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
