"""FSDP (``fully_shard`` and ``FullyShardedDataParallel``) on a "zccl" group under real mpirun.

The checks live in tests/mpi/fsdp_checks.py: the same model trained from the same weights on the
same batches on zccl (compressed parameter all-gathers and gradient reduce-scatters), on zccl
with ``algorithm="mpi"`` and on Gloo; the zccl loss must stay within 2 % of Gloo's at every step
and the compressed run must differ from the exact one.
"""

from __future__ import annotations

import pytest

from tests.mpi_launch import assert_every_check_passed, mpirun, python_argv

SCRIPT = "tests/mpi/fsdp_checks.py"


@pytest.mark.parametrize("nprocs", [2, 3])
def test_fsdp_on_zccl(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)
