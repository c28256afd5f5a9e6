"""Pieces shared by the multi-rank check scripts of this folder (backend_checks.py,
hook_checks.py, gpu_backend_checks.py), each run under mpirun: rank helpers, the bound
assertion, exact references, and the loop that runs the checks and reports PASS/FAIL per rank.
"""

import datetime
import functools
import os
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import zccl_torch


def rank() -> int:
    return dist.get_rank()


def world() -> int:
    return dist.get_world_size()


@functools.cache
def gloo() -> Any:
    """A Gloo group over every rank, the reference torch ships (created once, collectively, on
    first use: every rank must reach the first call)."""
    return dist.new_group(backend="gloo")


def assert_within(name: str, got: torch.Tensor, ref: torch.Tensor, bound: Any) -> None:
    """|got - ref| <= bound elementwise, in float64 (bound: a float or a tensor like ref); CUDA
    tensors are compared on the host."""
    got, ref = got.cpu().double(), ref.cpu().double()
    if isinstance(bound, torch.Tensor):
        bound = bound.cpu()
    err = (got - ref).abs()
    bad = err > bound
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        b = bound[i] if isinstance(bound, torch.Tensor) else bound
        raise AssertionError(f"{name}: |{got[i]} - {ref[i]}| = {float(err[i])} > {float(b)}")


def rounding(
    terms: list[torch.Tensor], slack: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Worst-case rounding in ``dtype`` of summing ``terms`` (each off by <= slack) and dividing."""
    u = torch.finfo(dtype).eps / 2
    k = len(terms) + 1
    return (k * u / (1 - k * u)) * sum(t.double().abs() + slack for t in terms)


def exact_gather(t: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``t``, moved exactly (algorithm="mpi")."""
    out = [torch.empty_like(t) for _ in range(world())]
    with zccl_torch.config(algorithm="mpi"):
        dist.all_gather(out, t)
    return out


def run_checks(
    checks: dict[str, Callable[[], None]],
    names: list[str],
    options: zccl_torch.Options,
    timeout_s: float,
    scoped: bool,
) -> int:
    """Creates the "zccl" group with ``options``, runs ``names`` (all checks when empty), prints
    PASS/FAIL per check and rank, and returns the exit code (1 if any check failed here).
    ``scoped``: each check also runs inside ``zccl_torch.config(options)``."""
    dist.init_process_group(
        backend="zccl", timeout=datetime.timedelta(seconds=timeout_s), pg_options=options
    )
    assert dist.get_backend() == "zccl"
    failures = 0
    selected = names or list(checks)
    if rank() == 0:  # the launcher checks that every listed check passed on every rank
        print(f"CHECKS: {' '.join(selected)}", flush=True)
    for name in selected:
        try:
            if scoped:
                with zccl_torch.config(options):
                    checks[name]()
            else:
                checks[name]()
            print(f"[rank {rank()}] PASS {name} (ok)", flush=True)
        except Exception:
            failures += 1
            print(f"[rank {rank()}] FAIL {name}\n{traceback.format_exc()}", flush=True)
    dist.barrier()
    if os.environ.get("ZCCL_TEST_HOST_STAGING") == "1":
        # The CPU device staged every op through host copies, as CUDA stages some
        # (csrc/backend/cpu_device.cpp); the launching test asserts every rank ran that way.
        # Printed last: before the checks it raced rank 0's CHECKS line, which mpirun may join
        # to another rank's output.
        print(f"[rank {rank()}] host staging: on", flush=True)
    # How this rank's waits polled (wait="auto" resolves per host): the launcher checks it.
    wait = zccl_torch._C.wait_policy(zccl_torch.current_options().to_native())
    print(f"[rank {rank()}] wait policy: {wait}", flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0
