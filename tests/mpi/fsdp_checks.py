"""FSDP (torch's fully sharded data parallel, both APIs) on a "zccl" group, on CPU tensors; run
under mpirun by tests/test_fsdp.py (``mpirun -np P python tests/mpi/fsdp_checks.py [check ...]``).

FSDP all-gathers the parameters before each forward and backward (all_gather_into_tensor) and
reduce-scatters the gradients (reduce_scatter_tensor): on zccl both compress, the parameters
within ``eb`` of the sharded values, the gradients within the reduction's bound. The checks
train the same model from the same weights on the same batches three times: on zccl, on zccl
with ``algorithm="mpi"`` (exact) and on Gloo (the reference torch ships), and require

* the zccl run's loss within 2 % of Gloo's at every logged step, and its final sharded weights
  within a small distance of Gloo's;
* the zccl run to differ from the exact run (so the collectives really compressed), and the
  exact run to match Gloo's within float rounding.

(FSDP1's ``sync_module_states`` refuses CPU modules in torch itself, so it is not checked here.)
"""

import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from check_common import gloo, rank, run_checks, world
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

import zccl_torch

CHECKS: dict[str, Callable[[], None]] = {}
STEPS = 40
CPU = torch.device("cpu")
LOSS_TOLERANCE = 0.02  # relative, as the DDP example's acceptance


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def make_model() -> torch.nn.Module:
    """A small MLP, the same weights on every rank (its layers' shards are over 64 KiB)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 384),
        torch.nn.Tanh(),
        torch.nn.Linear(384, 384),
        torch.nn.Tanh(),
        torch.nn.Linear(384, 8),
    )


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's batches: a fixed teacher, rank-dependent inputs."""
    teacher = torch.randn(64, 8, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(100 + rank())
    out = []
    for _ in range(STEPS):
        x = torch.randn(32, 64, generator=g)
        out.append((x, torch.tanh(x @ teacher)))
    return out


def train(model: torch.nn.Module, group: Any, device: torch.device = CPU) -> list[float]:
    """STEPS of SGD on ``device``; returns the loss averaged over the ranks (exactly, on
    ``group``) per step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for x, y in batches():
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        with zccl_torch.config(algorithm="mpi"):  # the bookkeeping is exact (no effect on Gloo)
            dist.all_reduce(mean, group=group)
        losses.append(float(mean) / world())
    return losses


def local_shards(model: torch.nn.Module) -> torch.Tensor:
    """This rank's parameter values (its shards), flattened."""
    parts = []
    for param in model.parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        parts.append(local.detach().reshape(-1))
    return torch.cat(parts)


def compare(label: str, zccl: list[float], exact: list[float], ref: list[float]) -> None:
    worst = max(abs(got - want) / abs(want) for got, want in zip(zccl, ref, strict=True))
    if rank() == 0:
        print(f"{label}: final loss {zccl[-1]:.6f} (Gloo {ref[-1]:.6f}), worst step {worst:.2e}")
    for step, (got, want) in enumerate(zip(zccl, ref, strict=True)):
        if abs(got - want) > LOSS_TOLERANCE * abs(want):
            raise AssertionError(f"{label}: step {step} loss {got} vs Gloo's {want} (> 2 %)")
    if zccl == exact:
        raise AssertionError(
            f"{label}: the compressed run equals the exact one: nothing compressed"
        )
    # The exact zccl run is Gloo's run up to the order of float additions.
    for step, (got, want) in enumerate(zip(exact, ref, strict=True)):
        if abs(got - want) > 1e-4 * abs(want):
            raise AssertionError(f"{label}: exact run step {step} loss {got} vs Gloo's {want}")


def fsdp2(group: Any, device: torch.device = CPU) -> torch.nn.Module:
    """make_model() on ``device``, each Linear and the whole model sharded by fully_shard."""
    mesh = DeviceMesh.from_group(group, device.type)
    model = make_model().to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def trains_like_gloo(label: str, wrap: Callable[[Any], torch.nn.Module]) -> None:
    """Trains ``wrap(group)`` on zccl, on zccl exact and on Gloo (compare()), and requires the
    zccl run's final shards within 1e-2 of Gloo's."""
    world_group = dist.group.WORLD
    zccl_model = wrap(world_group)
    zccl_losses = train(zccl_model, world_group)
    with zccl_torch.config(algorithm="mpi"):
        exact_losses = train(wrap(world_group), world_group)
    gloo_model = wrap(gloo())
    gloo_losses = train(gloo_model, gloo())
    compare(label, zccl_losses, exact_losses, gloo_losses)
    drift = float((local_shards(zccl_model) - local_shards(gloo_model)).abs().max())
    assert drift < 1e-2, f"{label}: weights drifted {drift} from Gloo's run"


def fsdp1(group: Any) -> torch.nn.Module:
    return FullyShardedDataParallel(make_model(), process_group=group, device_id=CPU)


@check
def fsdp2_trains_like_gloo() -> None:
    """fully_shard on a zccl mesh: loss within 2 % of Gloo's, weights close to Gloo's."""
    trains_like_gloo("FSDP2", fsdp2)


@check
def fsdp1_trains_like_gloo() -> None:
    """FullyShardedDataParallel on a zccl group: loss within 2 % of Gloo's, weights close."""
    trains_like_gloo("FSDP1", fsdp1)


def local_grads(model: torch.nn.Module) -> torch.Tensor:
    """This rank's gradient shards, flattened (FSDP2's grads are DTensors)."""
    return torch.cat([p.grad.to_local().reshape(-1) for p in model.parameters()])


def set_divide_factor(model: torch.nn.Module, factor: float) -> None:
    """set_gradient_divide_factor on every fully_shard-ed module (each has its own gradients)."""
    for module in model.modules():
        if hasattr(module, "set_gradient_divide_factor"):
            module.set_gradient_divide_factor(factor)


def divided_grads(group: Any, factor: float | None, algorithm: str = "auto") -> torch.Tensor:
    """One backward of fsdp2() on the first batch, with the gradient divide factor set (None:
    FSDP2's default, the average over the ranks); this rank's gradient shards."""
    model = fsdp2(group)
    if factor is not None:
        set_divide_factor(model, factor)
    x, y = batches()[0]
    with zccl_torch.config(algorithm=algorithm):
        torch.nn.functional.mse_loss(model(x), y).backward()
    return local_grads(model)


@check
def fsdp2_gradient_divide_factor() -> None:
    """fully_shard with set_gradient_divide_factor(f), f not the world size: FSDP2 then
    reduce-scatters with ReduceOp.PREMUL_SUM(1/f), which Gloo refuses (checked, so that this
    stays a check of PREMUL_SUM). The gradients must equal the default run's (AVG over p ranks)
    times p/f: within float rounding on the exact path, within the compressed reduction's error
    (relative to the largest gradient) on the default one."""
    p = world()
    factor = 2.0 * p
    if p > 1:  # FSDP2 runs no reduce-scatter on one rank
        try:
            divided_grads(gloo(), factor)
        except RuntimeError as exc:
            assert "PREMUL_SUM" in str(exc), exc
        else:
            raise AssertionError("Gloo ran FSDP2's divided reduce-scatter: no PREMUL_SUM there")
    for algorithm, tol in (("mpi", 1e-5), ("auto", 2e-2)):
        default = divided_grads(dist.group.WORLD, None, algorithm)
        divided = divided_grads(dist.group.WORLD, factor, algorithm)
        want = default * (p / factor)
        err = float((divided - want).abs().max())
        scale = float(want.abs().max())
        assert err <= tol * scale, f"{algorithm}: gradients off by {err} (max {scale})"


def main(argv: list[str]) -> int:
    # Every payload compresses (the default threshold would leave the smaller shards exact).
    options = zccl_torch.Options(min_compress_bytes=0)
    return run_checks(CHECKS, argv, options, timeout_s=300, scoped=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
