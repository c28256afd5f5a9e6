"""Error-bound policies and the DDP hook under real mpirun at p in {2, 3}.

The checks live in tests/mpi/hook_checks.py (one mpirun per world size runs all of them).
"""

from __future__ import annotations

import pytest

from tests.mpi_launch import mpirun, python_argv

SCRIPT = "tests/mpi/hook_checks.py"
NCHECKS = 9


@pytest.mark.parametrize("nprocs", [2, 3])
def test_policies_and_hook(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=240)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert report.count("PASS ") == nprocs * NCHECKS, report[-4000:]
    assert "FAIL" not in report, report[-8000:]
