"""Running a benchmark's rank program under ``mpirun`` on this host and reading the JSON lines
its rank 0 prints (wait_policy.py, p2p_wait.py): the same script is the driver and, with
``--rank``, the rank program."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def driver_arguments(description: str, default_out: Path) -> argparse.ArgumentParser:
    """The options every such script has: ``--reps`` (timed calls), ``--rank`` (run as one rank
    under mpirun) and ``--out`` (the JSON written by the driver)."""
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
