"""A representative subset of torch's own distributed test suite on "zccl", 3 ranks, in three
configs: default, exact (algorithm "mpi") and compressed (every float payload through the
compressed collectives with the lossless codec, see run_suite.CONFIGS).

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

# Collectives the subset must have run through the compressed path in the "compressed" config
# (torch's suite has no CPU reduce_scatter test; see subset.py).
COMPRESSED_OPS = {
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "gather",
    "scatter",
    "all_to_all",
}


@pytest.mark.parametrize("config", ["default", "exact", "compressed"])
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
    # Which collectives ran compressed, from the backend's own totals read around each test.
    ran: dict[str, int] = {}
    for test in tests.values():
        for outcome in test["ranks"]:
            for op, n in outcome.get("compressed_calls", {}).items():
                ran[op] = ran.get(op, 0) + n
    if config == "compressed":
        assert COMPRESSED_OPS <= set(ran), f"not compressed: {COMPRESSED_OPS - set(ran)} ({ran})"
    elif config == "exact":
        assert not ran, f"the exact config compressed: {ran}"
