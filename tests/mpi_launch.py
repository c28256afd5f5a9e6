"""Launching test programs under real mpirun, with a timeout so a hang fails instead of blocking."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mpi_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        # Oversubscribed ranks must yield the CPU while polling, or 7 ranks on 2 cores crawl.
        OMPI_MCA_mpi_yield_when_idle="1",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def mpirun(
    nprocs: int, argv: list[str], timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs ``argv`` on ``nprocs`` ranks; a run past ``timeout`` seconds is killed and fails."""
    if shutil.which("mpirun") is None:
        raise RuntimeError("mpirun not found: run scripts/setup.sh (installs openmpi-bin)")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(nprocs), *argv]
    return run_bounded(cmd, {**mpi_env(), **(extra_env or {})}, timeout)


def torchrun_env() -> dict[str, str]:
    """What a user's shell has: no MPI launch variables, the checkout on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.update(
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def torchrun(
    nprocs: int, argv: list[str], timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node nprocs`` of a script (argv[0]) and its args."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nprocs),
        *argv,
    ]
    return run_bounded(cmd, {**torchrun_env(), **(extra_env or {})}, timeout)


def run_bounded(
    cmd: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Runs a launcher; one that runs past ``timeout`` seconds is killed and fails the test."""
    try:
        return subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"{' '.join(cmd)} timed out after {timeout} s\n{out[-4000:]}") from exc


def python_argv(script: str, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / script), *args]


def assert_every_check_passed(report: str, nprocs: int) -> None:
    """Every check the program listed ("CHECKS: a b c", printed by rank 0 of check_common's
    run_checks) printed ``[rank r] PASS name (ok)`` on every rank r, and nothing FAILed."""
    listed = [line for line in report.splitlines() if line.startswith("CHECKS: ")]
    assert len(listed) == 1, f"expected one CHECKS line\n{report[-4000:]}"
    names = listed[0].split()[1:]
    assert names, "no checks ran"
    assert "FAIL" not in report, report[-8000:]
    # Ranks write concurrently and mpirun may join one rank's line to another's, so a PASS line
    # carries its own terminator: "[rank r] PASS name (ok)".
    missing = [
        f"{name} on rank {r}"
        for name in names
        for r in range(nprocs)
        if f"[rank {r}] PASS {name} (ok)" not in report
    ]
    assert not missing, f"checks that did not pass: {missing}\n{report[-4000:]}"
