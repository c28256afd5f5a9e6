"""Running a benchmark's rank program under ``mpirun``, on this host or on the emulated cluster of
``benchmarks/cluster``, and reading the JSON lines its rank 0 prints (wait_policy.py,
p2p_wait.py, auto_ratio.py, allreduce_crossover.py): the same script is the driver and, with
``--rank``, the rank program; and the timing of settings alternating inside a rank program."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "benchmarks" / "cluster"


def run_ranks(
    nprocs: int, argv: list[str], env: dict[str, str], timeout: float = 900
) -> list[dict]:
    """``mpirun -np nprocs python argv`` (oversubscribed, as root too, one OpenMP thread, this
    checkout on PYTHONPATH) with ``env`` added; the JSON objects of its output lines. A failure
    raises SystemExit with the tail of the output."""
    full = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(nprocs)]
    done = subprocess.run(
        [*cmd, sys.executable, *argv], env=full, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def driver_arguments(description: str, default_out: Path | None) -> argparse.ArgumentParser:
    """The options every such script has: ``--reps`` (timed calls), ``--rank`` (run as one rank
    under mpirun) and ``--out`` (the JSON written by the driver; None: the script picks it)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--rank", action="store_true", help="run as one rank (under mpirun)")
    parser.add_argument("--out", type=Path, default=default_out)
    return parser


def run_per_setting(
    nprocs: int,
    script: str,
    reps: int,
    variable: str,
    values: tuple[str, ...],
    extra: list[str] | None = None,
) -> dict[str, list[dict]]:
    """``script --rank --reps reps [extra ...]`` on ``nprocs`` ranks once per value of the
    environment variable ``variable``: each value's JSON lines."""
    argv = [script, "--rank", "--reps", str(reps), *(extra or [])]
    return {value: run_ranks(nprocs, argv, {variable: value}) for value in values}


def run_where(where: str, nprocs: int, argv: list[str], timeout: float = 3600) -> list[dict]:
    """``python argv`` on ``nprocs`` ranks: ``where == "loopback"`` runs them on this host
    (run_ranks); a tc rate (``1gbit``) brings up the emulated cluster with one host per rank (as
    root), runs them there, and takes it down again. The JSON objects of the output lines."""
    if where == "loopback":
        return run_ranks(nprocs, argv, {}, timeout=timeout)
    if os.geteuid() != 0:
        raise SystemExit("the emulated cluster needs network namespaces: run as root")
    up = [str(CLUSTER / "cluster.sh"), "up", str(nprocs), where]
    subprocess.run(up, check=True, capture_output=True)
    try:
        cmd = [str(CLUSTER / "mpirun_cluster.sh"), "-np", str(nprocs)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [*cmd, sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise SystemExit((done.stdout + done.stderr)[-3000:])
        return [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    finally:
        subprocess.run([str(CLUSTER / "cluster.sh"), "down"], capture_output=True)


def time_settings_alternating(
    x: Any, call: Callable[[Any], None], settings: dict[str, dict[str, object]], reps: int
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Inside a rank program: ``call`` on a fresh copy of ``x`` under each of ``settings`` (name
    -> ``zccl_torch.config()`` changes), the settings alternating, ``reps`` rounds after one
    untimed round, each call between a barrier and the clock. Returns, on rank 0, per setting
    the median and every call's time of the slowest rank (``ms``, ``calls_ms``), and on every
    rank each setting's ``last_stats()`` after its last call."""
    import torch.distributed as dist

    import zccl_torch

    times: dict[str, list[float]] = {name: [] for name in settings}
    seen: dict[str, dict[str, Any]] = {}
    for rep in range(reps + 1):
        for name, changes in settings.items():
            y = x.clone()
            with zccl_torch.config(**changes):
                dist.barrier()
                start = time.perf_counter()
                call(y)
                took = time.perf_counter() - start
            if rep > 0:
                times[name].append(took)
            seen[name] = zccl_torch.last_stats()
    every: list[dict[str, list[float]]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(every, times)
    medians: dict[str, dict[str, Any]] = {}
    for name in settings:
        slowest = [max(r[name][i] for r in every) for i in range(reps)]
        medians[name] = {
            "ms": statistics.median(slowest) * 1e3,
            "calls_ms": [t * 1e3 for t in slowest],
        }
    return medians, seen
