"""The "zccl" backend under real mpirun at p in {1, 2, 3, 4, 5, 7}.

The checks themselves live in tests/mpi/backend_checks.py.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.mpi_launch import assert_every_check_passed, mpirun, python_argv

SCRIPT = "tests/mpi/backend_checks.py"


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 7])
def test_backend_collectives(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)
    # wait="auto": the waits spin while each rank (one thread each) has a core, else they
    # sleep; on a 2-core machine both policies run through every check.
    wait = "spin" if nprocs <= len(os.sched_getaffinity(0)) else "sleep"
    assert report.count(f"wait policy: {wait}") == nprocs, report[-2000:]


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 7])
def test_conformance(nprocs: int) -> None:
    """torch's documented layouts, Gloo on the same input, agreement errors, any-source recv,
    sparse all_reduce and bit-identical DDP replicas (tests/mpi/conformance_checks.py)."""
    done = mpirun(nprocs, python_argv("tests/mpi/conformance_checks.py"), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize(
    ("nprocs", "transport"),
    [(1, "mpi"), (2, "mpi"), (3, "mpi"), (4, "mpi"), (7, "mpi"), (5, "tcp")],
)
def test_auto_ratio_from_the_data(nprocs: int, transport: str) -> None:
    """algorithm="auto" samples a reduction's compression ratio and the ranks take the
    smallest: every call takes route()'s choice at that ratio with the transport's exact
    schedules (bit-exact when exact), whichever rank holds which data, half tensors sample
    their float32 sums, and auto_ratio fixes the ratio instead (tests/mpi/auto_ratio_checks.py)."""
    env = {"ZCCL_TRANSPORT": transport}
    done = mpirun(nprocs, python_argv("tests/mpi/auto_ratio_checks.py"), 600, env)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize(("nprocs", "transport"), [(1, "mpi"), (3, "mpi"), (4, "mpi"), (3, "tcp")])
def test_dtypes_beyond_gloo(nprocs: int, transport: str) -> None:
    """uint16/32/64 reductions wrap like numpy's; float8 and the other dtypes without arithmetic
    move bit for bit through every data-movement collective; reductions on them, quantized
    tensors and 16-byte elements raise on every rank (tests/mpi/dtype_checks.py). Gloo refuses
    all of these dtypes."""
    env = {"ZCCL_TRANSPORT": transport}
    done = mpirun(nprocs, python_argv("tests/mpi/dtype_checks.py"), 600, env)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize(("nprocs", "seed"), [(2, 11), (3, 12), (5, 13)])
def test_random_collectives_match_exact_reference(nprocs: int, seed: int) -> None:
    """150 random collectives (op, dtype, count, root, reduce op and settings drawn alike on
    every rank) against an exact reference of every rank's input, each within its documented
    bound (tests/mpi/fuzz_checks.py). It found two silent wrong answers that the targeted checks
    missed: saturating int8 sums and owner_exact breaking half MIN/MAX replicas."""
    argv = python_argv("tests/mpi/fuzz_checks.py", "--seed", str(seed), "--cases", "150")
    done = mpirun(nprocs, argv, timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    # One summary per rank (mpirun may join the ranks' lines, so matched anywhere).
    found = re.findall(r"\[rank (\d+)\] fuzz: 150 cases, (\d+) compressed, (\d+) failed", report)
    assert sorted(int(r) for r, _, _ in found) == list(range(nprocs)), report[-4000:]
    assert all(failed == "0" for _, _, failed in found), report[-8000:]
    # The draw must exercise the compressed paths, not only the exact fallback.
    assert all(int(compressed) >= 30 for _, compressed, _ in found), found


DISAGREEMENT_KINDS = {
    "collective",
    "count",
    "dtype",
    "reduce",
    "root",
    "setting",
    "splits",
    "threads",
}


@pytest.mark.parametrize(
    ("nprocs", "seed", "transport"),
    [(2, 21, "mpi"), (3, 22, "mpi"), (5, 23, "mpi"), (4, 24, "tcp")],
)
def test_random_disagreements_raise_on_every_rank(nprocs: int, seed: int, transport: str) -> None:
    """150 random collectives that some ranks call with one thing changed (count, dtype, reduce
    op, root, collective, a shared setting, all_to_all split sizes): every rank raises naming
    it, and an all_reduce afterwards still works; another thread count must change nothing
    (tests/mpi/disagreement_checks.py). It found all_to_all split sizes that disagreed being
    moved silently on the exact path and raising on the receiver only on the compressed one."""
    argv = python_argv("tests/mpi/disagreement_checks.py", "--seed", str(seed), "--cases", "150")
    done = mpirun(nprocs, argv, 600, {"ZCCL_TRANSPORT": transport})
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    found = re.findall(
        r"\[rank (\d+)\] disagreements: \d+ cases, (\d+) failed \(seed \d+\) (\{.*?\})", report
    )
    assert sorted(int(r) for r, _, _ in found) == list(range(nprocs)), report[-4000:]
    assert all(failed == "0" for _, failed, _ in found), report[-8000:]
    drawn = set(re.findall(r"'(\w+)': \d+", found[0][2]))
    assert drawn == DISAGREEMENT_KINDS, drawn  # every kind of change was tried


@pytest.mark.parametrize("script", ["backend_checks.py", "conformance_checks.py"])
def test_host_staged_op_bodies(script: str) -> None:
    """The same checks with the CPU device running every op on host copies written back
    afterwards (``ZCCL_TEST_HOST_STAGING=1``), as the CUDA device runs the ops it has no GPU
    algorithm for: a result an op body forgets to write back (a half-precision broadcast whose
    root kept its own values was first found on a GPU) fails here, on CPU, at 3 ranks."""
    done = mpirun(3, python_argv(f"tests/mpi/{script}"), 600, {"ZCCL_TEST_HOST_STAGING": "1"})
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert report.count("host staging: on") == 3, report[-2000:]
    assert_every_check_passed(report, 3)


@pytest.mark.parametrize("limit", ["1", "2"])
def test_thread_limit_below_threads(limit: str) -> None:
    """OMP_THREAD_LIMIT below the ``threads`` asked for (an HPC job's setting, or a nested
    OpenMP region): OpenMP teams come out smaller than asked. The threaded compressor and the
    value-range scan must not count on the size they asked for: the same bits for threads 1-3
    (a team that skipped runs of chunks wrote corrupt streams) and the exact REL range."""
    checks = [
        "compression_threads_change_no_bit",
        "rel_bound_from_the_whole_range",
        "integer_ring_hop",
    ]
    done = mpirun(3, python_argv(SCRIPT, *checks), 600, {"OMP_THREAD_LIMIT": limit})
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, 3)


def test_ddp_smoke_two_ranks() -> None:
    done = mpirun(2, python_argv("tests/mpi/ddp_smoke.py"), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert "DDP OK" in done.stdout


@pytest.mark.parametrize(
    ("check", "nprocs", "marker", "env"),
    [
        ("rank_mismatch", 2, "MISMATCH RAISED", {}),
        ("timeout", 2, "TIMEOUT RAISED", {}),
        # On time whether the waits poll without sleeping or sleep.
        ("timeout", 2, "TIMEOUT RAISED", {"ZCCL_WAIT": "spin"}),
        ("timeout", 2, "TIMEOUT RAISED", {"ZCCL_WAIT": "sleep"}),
        ("p2p_timeout", 2, "P2P TIMEOUT RAISED", {}),
        ("monitored_barrier", 4, "MONITORED BARRIER OK", {}),
        ("group_member_missing", 3, "GROUP TIMEOUT RAISED", {}),
        ("no_init_on_import", 3, "LIFECYCLE OK", {}),
        ("transport_error", 3, "TRANSPORT ERROR RAISED", {}),
    ],
)
def test_backend_lifecycle(check: str, nprocs: int, marker: str, env: dict[str, str]) -> None:
    done = mpirun(
        nprocs, python_argv("tests/mpi/lifecycle_checks.py", check), timeout=180, extra_env=env
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert marker in done.stdout, report[-6000:]


@pytest.mark.parametrize(("transport", "nprocs"), [("mpi", 2), ("mpi", 4), ("tcp", 3)])
def test_mixed_builds_raise_on_every_rank(transport: str, nprocs: int) -> None:
    """A rank of another build (format 2, another source digest): every rank's
    init_process_group raises the same error naming both, before the transport is touched."""
    done = mpirun(
        nprocs,
        python_argv("tests/mpi/lifecycle_checks.py", "mixed_build"),
        timeout=120,
        extra_env={"ZCCL_TRANSPORT": transport},
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    raised = re.findall(r"MIXED BUILD RAISED ([0-9a-f]{16})", done.stdout)
    assert len(raised) == nprocs and len(set(raised)) == 1, report[-6000:]


def test_uncaught_exception_ends_the_job() -> None:
    """A rank dying of an uncaught exception ends the whole mpirun job at once (MPI_Abort at
    exit), with its traceback shown, instead of waiting in MPI_Finalize for ranks that wait for
    it until their 300 s group timeout (past this test's 120 s limit)."""
    done = mpirun(
        3, python_argv("tests/mpi/lifecycle_checks.py", "uncaught_exception"), timeout=120
    )
    report = done.stdout + done.stderr
    assert done.returncode != 0, report[-6000:]
    assert report.count("FIRST ALL_REDUCE DONE") == 3, report[-6000:]
    assert "RuntimeError: rank 0 fails on purpose" in report, report[-6000:]
    assert "UNREACHABLE" not in report, report[-6000:]


@pytest.mark.parametrize("policy", ["active", "passive"])
def test_oversubscribed_threads_warn(policy: str) -> None:
    """threads x ranks on the host > cores: one warning per rank naming the cure, unless the
    OpenMP threads already sleep while waiting (OMP_WAIT_POLICY=passive)."""
    done = mpirun(
        3,
        python_argv("tests/mpi/lifecycle_checks.py", "oversubscribed_threads"),
        timeout=180,
        extra_env={"OMP_WAIT_POLICY": policy},
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert report.count("OVERSUBSCRIBED DONE") == 3, report[-6000:]
    warned = report.count("oversubscribes the")
    assert warned == (0 if policy == "passive" else 3), report[-6000:]
    if policy == "active":
        assert "OMP_WAIT_POLICY=passive" in report


def test_abort_on_exception_setting() -> None:
    from zccl_torch import backend

    assert backend._abort_on_exception_enabled({}) is True
    assert backend._abort_on_exception_enabled({"ZCCL_ABORT_ON_EXCEPTION": "0"}) is False
    assert backend._abort_on_exception_enabled({"ZCCL_ABORT_ON_EXCEPTION": " 1 "}) is True
    with pytest.raises(ValueError, match="ZCCL_ABORT_ON_EXCEPTION='yes': must be 0 or 1"):
        backend._abort_on_exception_enabled({"ZCCL_ABORT_ON_EXCEPTION": "yes"})
