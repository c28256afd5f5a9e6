"""GPU tests of the cuSZp-style codec: builds tests/cuda/test_cuszp.cu with nvcc (linked with the
CPU codec it is compared against) and runs it on the local CUDA device.

Skipped with "no CUDA device" when ``nvidia-smi -L`` lists no GPU (and torch sees none), or when
nvcc is absent. The program checks byte identity with the CPU encoder, decoding both ways, the
error flag on corrupted/truncated streams (differentially against the CPU decoder), fused
decompress+reduce, batches over several streams, finite_range, asynchrony and argument errors;
see the comment at the top of tests/cuda/test_cuszp.cu.

* ``test_gpu_codec``: the full program.
* ``test_gpu_codec_sanitized``: ``--quick`` under compute-sanitizer's memcheck (out-of-bounds
  or misaligned accesses on hostile streams), racecheck and synccheck (shared-memory hazards and
  barrier misuse in the kernels), when compute-sanitizer is installed.
* ``test_gpu_bench``: ``--bench`` (256 MB float32 wavefield at REL 1e-2/1e-3/1e-4; prints GB/s and
  the share of cudaMemcpy D2D bandwidth) only with ``ZCCL_GPU_BENCH=1``; run with ``-s`` to see it.

The same by hand (from the repository root)::

    nvcc -O3 -std=c++17 -fmad=false -gencode arch=compute_90,code=sm_90 \\
         -Xcompiler -fopenmp -Icsrc/compress tests/cuda/test_cuszp.cu csrc/compress/cuszp.cu \\
         csrc/compress/fzlight.cpp csrc/compress/crc32c.cpp -lgomp -o /tmp/test_cuszp
    /tmp/test_cuszp && /tmp/test_cuszp --bench --only bench
    compute-sanitizer --tool memcheck /tmp/test_cuszp --quick

``ZCCL_CUDA_ARCH`` (e.g. ``90`` or ``90;100``) overrides the target; by default the arch is read
from ``nvidia-smi --query-gpu=compute_cap``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cpp_build import BIN_DIR, CSRC, assert_ok, run, tail
from test_cuda_compile import NVCC, nice_prefix

ROOT = Path(__file__).resolve().parents[1]
CUDA_TESTS = ROOT / "tests" / "cuda"
SANITIZER = shutil.which("compute-sanitizer") or (
    str(Path(NVCC).parent / "compute-sanitizer")
    if NVCC and (Path(NVCC).parent / "compute-sanitizer").is_file()
    else None
)


def gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False, timeout=60)
        if out.returncode == 0 and "GPU" in out.stdout:
            return True
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


HAVE_GPU = gpu_present()

pytestmark = [
    pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device"),
    pytest.mark.skipif(NVCC is None, reason="nvcc not found (set ZCCL_NVCC or CUDA_HOME)"),
]


def gpu_archs() -> list[str]:
    arch = os.environ.get("ZCCL_CUDA_ARCH")
    smi = shutil.which("nvidia-smi")
    if not arch and smi:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        caps = out.stdout.split()
        arch = caps[0].replace(".", "") if out.returncode == 0 and caps else None
    arch = arch or "90"
    archs = [a.strip() for a in arch.replace(",", ";").split(";") if a.strip()]
    # Real code for each arch plus PTX of the last, so a newer GPU can still JIT it.
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return [*flags, f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"]


SOURCES = [
    CUDA_TESTS / "test_cuszp.cu",
    CSRC / "compress" / "cuszp.cu",
    CSRC / "compress" / "fzlight.cpp",
    CSRC / "compress" / "crc32c.cpp",
]


@functools.cache
def build() -> Path:
    """nvcc build of the test program into tests/cpp/bin, cached by flags and sources."""
    flags = [
        "-O3",
        "-std=c++17",
        "-fmad=false",
        "-lineinfo",
        *gpu_archs(),
        "-Xcompiler=-fopenmp,-Wall,-Wextra",
        f"-I{CSRC / 'compress'}",
    ]
    h = hashlib.sha256(" ".join([NVCC or "", *flags]).encode())
    headers = sorted((CSRC / "compress").glob("*.h")) + sorted((CSRC / "compress").glob("*.cuh"))
    headers += sorted(CUDA_TESTS.glob("*.h"))  # stream_tools.h
    for f in [*SOURCES, *headers]:
        h.update(f.read_bytes())
    exe = BIN_DIR / f"test_cuszp-{h.hexdigest()[:16]}"
    if not exe.exists():
        BIN_DIR.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_name(exe.name + f".tmp{os.getpid()}")
        cmd = [*nice_prefix(), NVCC, *flags, *map(str, SOURCES), "-lgomp", "-o", str(tmp)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0:
            pytest.fail(f"$ {' '.join(cmd)}\n{tail(proc.stdout + proc.stderr)}", pytrace=False)
        os.replace(tmp, exe)
        for old in BIN_DIR.glob("test_cuszp-*"):  # builds of older sources or flags
            if old != exe and ".tmp" not in old.name:
                old.unlink(missing_ok=True)
    return exe


def test_gpu_codec() -> None:
    program = build()
    proc = run([str(program)], timeout=1800, env={"OMP_WAIT_POLICY": "passive"})
    print(proc.stdout)
    assert_ok(proc, str(program))


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_gpu_codec_sanitized(tool: str) -> None:
    if SANITIZER is None:
        pytest.skip("compute-sanitizer not found")
    program = build()
    # racecheck/synccheck are slow: the kernel-heavy groups only.
    groups = ["--only", "batch,corrupt"] if tool != "memcheck" else []
    cmd = [SANITIZER, "--tool", tool, "--error-exitcode", "99", str(program), "--quick", *groups]
    proc = run(cmd, timeout=3600, env={"OMP_WAIT_POLICY": "passive"})
    assert_ok(proc, " ".join(cmd))


def test_gpu_bench() -> None:
    if os.environ.get("ZCCL_GPU_BENCH") != "1":
        pytest.skip("set ZCCL_GPU_BENCH=1 to run")
    program = build()
    proc = run([str(program), "--bench", "--only", "bench"], timeout=1800, env={})
    print(proc.stdout)
    assert_ok(proc, str(program))
