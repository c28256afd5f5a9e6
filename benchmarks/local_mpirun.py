"""Running a benchmark's rank program under ``mpirun`` on this host and reading the JSON lines
its rank 0 prints (exact_wait.py, p2p_wait.py)."""

from __future__ import annotations

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
