"""The zccl backend on CUDA tensors under real mpirun: several ranks sharing one GPU.

The checks live in tests/mpi/gpu_backend_checks.py (one mpirun per world size runs all of them):
all_reduce SUM/AVG/MIN/MAX by ring and recursive doubling against float64 references within the
documented bounds with bit-identical replicas, all_gather, broadcast and scatter from every root,
counts 0, 1, p-1, p+1 and primes, exact non-float dtypes, NaN/Inf, stream semantics (the caller's
stream before the op, ``work.wait()`` and futures after it) and the DDP comm hook on CUDA;
reduce, reduce_scatter, gather, all_to_all and the coalesced ops (run on host copies by the
CPU's collectives) bit-identical to the same calls on CPU tensors.

``test_gpu_checks_dry_run_on_cpu`` runs the same checks on CPU tensors (no GPU needed).
``test_gpu_collectives_program`` runs the torch-free layer alone
(tests/cuda/test_gpu_collectives.cu, built with nvcc) under mpirun. Skipped with "no CUDA
device" when there is no GPU, and the backend tests with "extension built without CUDA" when
zccl_torch._C has no CUDA path (``zccl_torch._C.with_cuda``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.mpi_launch import assert_every_check_passed, mpirun, python_argv
from tests.test_cuda_gpu import HAVE_GPU

SCRIPT = "tests/mpi/gpu_backend_checks.py"


def _with_cuda() -> bool:
    try:
        from zccl_torch import _C
    except ImportError:
        return False
    return bool(getattr(_C, "with_cuda", False))


def needs_cuda_backend(fn: Any) -> Any:
    """Skips a test unless both a GPU and the extension's CUDA path are there."""
    fn = pytest.mark.skipif(not _with_cuda(), reason="extension built without CUDA")(fn)
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")(fn)


@needs_cuda_backend
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_gpu_backend(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=900)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


@needs_cuda_backend
@pytest.mark.parametrize("cuda_aware", ["0", "1"])
def test_gpu_backend_staged_and_cuda_aware(
    cuda_aware: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both transports of the compressed bytes: staged through pinned memory, and device
    pointers handed to MPI (only meaningful when the MPI is CUDA-aware: skipped otherwise)."""
    if cuda_aware == "1" and not _mpi_cuda_aware():
        pytest.skip("MPI is not CUDA-aware (ompi_info reports no CUDA support)")
    monkeypatch.setenv("ZCCL_CUDA_AWARE", cuda_aware)
    checks = [
        "all_reduce_bounds_and_replicas",
        "all_gather_list_and_into_tensor",
        "scatter_every_root",
    ]
    done = mpirun(3, python_argv(SCRIPT, *checks), timeout=900)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, 3)


@pytest.mark.parametrize("nprocs", [1, 3])
def test_gpu_checks_dry_run_on_cpu(nprocs: int) -> None:
    """The GPU checks themselves, on CPU tensors (``--cpu-dry-run``; runs without a GPU): every
    check that needs no CUDA stream must pass, so that a bug in a check is found here and not in
    the rare, short GPU sessions. The CPU path's semantics are the ones the GPU path promises
    (same bounds, replicas, layouts)."""
    done = mpirun(nprocs, python_argv(SCRIPT, "--cpu-dry-run"), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)
    assert "reduce_every_root_matches_cpu" in report, report[-2000:]


def test_gpu_checks_dry_run_host_staged() -> None:
    """The same dry run with the CPU device staging every op through host copies written back
    afterwards (``ZCCL_TEST_HOST_STAGING=1``), as the CUDA device runs the ops it has no GPU
    algorithm for: a result an op body forgets to write back fails here, on CPU. (A
    half-precision broadcast whose root kept its own values was first found on a GPU.)"""
    done = mpirun(
        3,
        python_argv(SCRIPT, "--cpu-dry-run"),
        timeout=600,
        extra_env={"ZCCL_TEST_HOST_STAGING": "1"},
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert report.count("host staging: on") == 3, report[-2000:]
    assert_every_check_passed(report, 3)


@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device")
@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_gpu_collectives_program(nprocs: int, tmp_path: Path) -> None:
    """The torch-free layer alone: tests/cuda/test_gpu_collectives.cu under mpirun."""
    from tests.test_cuda_compile import (
        GPU_COLL_CU,
        NVCC,
        compile_cu,
        link_gpu_collectives_program,
        nvcc_flags,
    )

    if NVCC is None:
        pytest.skip("nvcc not found (set ZCCL_NVCC or CUDA_HOME)")
    flags = nvcc_flags()
    for src in GPU_COLL_CU:
        _, proc = compile_cu(src, tmp_path, flags)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    exe = link_gpu_collectives_program(tmp_path)
    done = mpirun(nprocs, [str(exe)], timeout=900)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert report.count(" 0 failures") == nprocs, report[-4000:]


def _mpi_cuda_aware() -> bool:
    import shutil
    import subprocess

    if shutil.which("ompi_info") is None:
        return False
    out = subprocess.run(
        ["ompi_info", "--parsable", "--all"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    return "mpi_built_with_cuda_support:value:true" in out
