"""A representative subset of torch's own distributed test suite on "zccl", 3 ranks, both configs.

The whole suite (3 and 4 ranks) is ``scripts/torch_suite.sh``; the harness is tests/torch_suite/.
Every test of the subset must pass on every rank: a skip counts as a failure here (the subset
lists only tests that can run on a CPU-only zccl build).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mpi_launch import mpirun
from tests.torch_suite.driver import failure_lines, run_config
from tests.torch_suite.subset import SUBSET


@pytest.mark.parametrize("config", ["default", "exact"])
def test_torch_distributed_subset(config: str, tmp_path: Path) -> None:
    # No isolation (one job unless a test hangs or crashes): a fresh job after each failure
    # would cost ~20 s of rank start-up apiece. The per-test watchdog still bounds a hang; a
    # 20 s group timeout makes a collective left waiting by a failed peer raise well before it.
    summary = run_config(
        3,
        config,
        tmp_path,
        tests=SUBSET,
        timeout=60,
        pg_timeout=20,
        job_timeout=480,
        isolate=False,
        launch=mpirun,
    )
    tests = summary["tests"]
    not_passed = [name for name in SUBSET if tests.get(name, {}).get("status") != "passed"]
    report = "\n".join(failure_lines(summary) + summary["notes"])
    skipped = [
        f"  {n}: {tests[n]['ranks'][0].get('reason')}"
        for n in not_passed
        if tests.get(n, {}).get("status") == "skipped"
    ]
    assert not not_passed, (
        f"{len(not_passed)}/{len(SUBSET)} torch distributed tests did not pass ({config}):\n"
        f"{report}\n" + ("skipped:\n" + "\n".join(skipped) if skipped else "")
    )
