"""The "zccl" backend under real mpirun at p in {1, 2, 3, 4, 5, 7}.

The checks themselves live in tests/mpi/backend_checks.py.
"""

from __future__ import annotations

import pytest

from tests.mpi_launch import assert_every_check_passed, mpirun, python_argv

SCRIPT = "tests/mpi/backend_checks.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 7])
def test_backend_collectives(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 7])
def test_conformance(nprocs: int) -> None:
    """torch's documented layouts, Gloo on the same input, agreement errors, any-source recv,
    sparse all_reduce and bit-identical DDP replicas (tests/mpi/conformance_checks.py)."""
    done = mpirun(nprocs, python_argv("tests/mpi/conformance_checks.py"), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


def test_ddp_smoke_two_ranks() -> None:
    done = mpirun(2, python_argv("tests/mpi/ddp_smoke.py"), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert "DDP OK" in done.stdout


@pytest.mark.parametrize(
    ("check", "nprocs", "marker"),
    [
        ("rank_mismatch", 2, "MISMATCH RAISED"),
        ("timeout", 2, "TIMEOUT RAISED"),
        ("p2p_timeout", 2, "P2P TIMEOUT RAISED"),
        ("monitored_barrier", 4, "MONITORED BARRIER OK"),
        ("no_init_on_import", 3, "LIFECYCLE OK"),
    ],
)
def test_backend_lifecycle(check: str, nprocs: int, marker: str) -> None:
    done = mpirun(nprocs, python_argv("tests/mpi/lifecycle_checks.py", check), timeout=180)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert marker in done.stdout, report[-6000:]
