"""Error-bound policies and the DDP hook under real mpirun at p in {2, 3}.

The checks live in tests/mpi/hook_checks.py (one mpirun per world size runs all of them). p = 4
and 5 matter: there the ring's and recursive doubling's worst-case factors differ, so a policy
that budgets for the wrong algorithm shows.
"""

from __future__ import annotations

import pytest

from tests.mpi_launch import assert_every_check_passed, mpirun, python_argv

SCRIPT = "tests/mpi/hook_checks.py"


@pytest.mark.parametrize("nprocs", [2, 3, 4, 5])
def test_policies_and_hook(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=240)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)
