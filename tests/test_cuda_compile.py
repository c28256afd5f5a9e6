"""Compile checks of the CUDA code, so it cannot rot unseen on machines without a GPU.

* ``test_cu_compiles``: every ``.cu`` file under csrc/ and tests/cuda/ is compiled (``nvcc -c``,
  no device code runs) with the flags of the extension build (``-O3 -fmad=false -std=c++17``,
  sm_90 or ``ZCCL_CUDA_ARCH``) plus ``-Xcompiler -Wall,-Wextra`` and ``-Werror all-warnings``:
  it must succeed and print nothing. Skipped, with the reason, when nvcc is absent. The backend's
  CUDA path (csrc/backend/*.cu) includes torch: it gets torch's nvcc flags and C++20 (as in the
  extension build), torch's and MPI's headers come in as system headers, and a CPU-only torch
  gets the one generated c10/cuda header it lacks from a shim (torch_cuda_shim).
* ``test_gpu_test_program_links_and_harness_runs``: links tests/cuda/test_cuszp.cu's program
  from those objects and runs ``--host-only``, its device-free self-check (corruption bases of
  versions 3, 2 and 1, reseal, the version converters, mutation generator through the CPU
  decoder, the CPU side of the direct-chunk test), so the GPU session finds a working harness.
* ``test_host_model``: tests/cuda/host_model_test.cpp, built with g++ (no CUDA needed) and run:
  the ``__host__ __device__`` CRC-32C combine helpers against crc32c.cpp, the warp bit transpose,
  the GPU quantiser of every dtype (float32/float64/float16/bfloat16) against fzlight_block.h,
  host models of both encode kernels (stream format version 3: constant chunks, repeats, block
  bitmaps, the per-chunk choice between encoded and direct chunks) against fz::compress byte for
  byte, and of the parse + decode kernels (versions 1, 2 and 3) against fz::decompress on valid
  and on thousands of mutated streams, and against the old decoders' output on the real
  version-1 and version-2 streams of tests/data/format_v1 and format_v2.

nvcc runs under ``nice -n 19`` (the compile test is background work; ``ZCCL_NVCC_NICE`` changes
the niceness, ``0`` disables it; ``ZCCL_NVCC_JOBS`` how many run at once, default 2).
``ZCCL_NVCC`` names the nvcc to use (default: ``nvcc`` on PATH,
then ``$CUDA_HOME/bin/nvcc``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cpp_build import (
    BIN_DIR,
    CSRC,
    CXX,
    MPICC,
    assert_ok,
    build_or_fail,
    compile_objects,
    headers,
    link,
    mpi_objects,
    needs_cxx,
    object_job,
    run,
)

ROOT = Path(__file__).resolve().parents[1]
CUDA_TESTS = ROOT / "tests" / "cuda"
NVCC_TIMEOUT = 600


def find_nvcc() -> str | None:
    """The nvcc to use: ``ZCCL_NVCC``, nvcc on PATH, or ``$CUDA_HOME/bin/nvcc``."""
    explicit = os.environ.get("ZCCL_NVCC")
    if explicit:
        return shutil.which(explicit)
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.is_file() else None


NVCC = find_nvcc()


def cuda_archs() -> list[str]:
    """``-gencode`` flags for ``ZCCL_CUDA_ARCH`` (e.g. ``90`` or ``90;100``), default sm_90."""
    archs = os.environ.get("ZCCL_CUDA_ARCH", "90").replace(",", ";").split(";")
    return [f"-gencode=arch=compute_{a.strip()},code=sm_{a.strip()}" for a in archs if a.strip()]


def nice_prefix() -> list[str]:
    level = os.environ.get("ZCCL_NVCC_NICE", "19")
    return ["nice", "-n", level] if level != "0" and shutil.which("nice") else []


def include_flags() -> list[str]:
    """csrc and its subfolders, torch's headers and MPI's, for .cu files that may want them.

    Third-party headers come in as system headers (-isystem): torch's own headers do not pass
    -Wextra, and their warnings are not ours to fix.
    """
    flags = [f"-I{CSRC}"] + [f"-I{d}" for d in sorted(CSRC.iterdir()) if d.is_dir()]
    try:
        from torch.utils.cpp_extension import include_paths

        for p in include_paths():
            flags += ["-isystem", p]
        flags += ["-isystem", str(torch_cuda_shim())]
    except Exception:  # torch is optional for this test
        pass
    mpicc = shutil.which("mpicc")
    if mpicc:
        out = subprocess.run(
            [mpicc, "--showme:compile"], capture_output=True, text=True, check=False, timeout=60
        )
        for f in out.stdout.split():
            if f.startswith("-I"):
                flags += ["-isystem", f[2:]]
            elif f.startswith("-D"):
                flags.append(f)
    return flags


def torch_cuda_shim() -> Path:
    """A folder supplying c10/cuda/impl/cuda_cmake_macros.h when torch lacks it.

    A CPU-only torch wheel ships c10/cuda's headers but not this one, which its CMake build
    generates; a CUDA torch has it (then the shim, searched after torch's folders, is unused).
    Its content mirrors the generated file of a shared-library build.
    """
    shim = ROOT / "build" / "cuda_compile_shim"
    header = shim / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    if not header.is_file():
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return shim


def nvcc_flags() -> list[str]:
    return [
        "-O3",
        "-std=c++17",
        "-fmad=false",
        *cuda_archs(),
        "-Xcompiler=-Wall,-Wextra",
        "-Werror",
        "all-warnings",
        "-DZCCL_WITH_CUDA=1",
        "-DOMPI_SKIP_MPICXX=1",
        *include_flags(),
    ]


def torch_nvcc_flags() -> list[str]:
    """Extra flags for .cu files that include torch's headers (csrc/backend): torch's own nvcc
    flags (--expt-relaxed-constexpr, no implicit half conversions) and C++20, which torch's
    headers need and the extension build uses (setup.py)."""
    try:
        from torch.utils.cpp_extension import COMMON_NVCC_FLAGS
    except Exception:
        return []
    return ["-std=c++20", *COMMON_NVCC_FLAGS]


CU_FILES = sorted(CSRC.rglob("*.cu")) + sorted(CUDA_TESTS.glob("*.cu"))
# The backend's CUDA path includes torch: compiled with torch's flags (see torch_nvcc_flags).
TORCH_CU = {p for p in CU_FILES if p.parent == CSRC / "backend"}


def compile_cu(
    src: Path, out_dir: Path, flags: list[str]
) -> tuple[Path, subprocess.CompletedProcess]:
    obj = out_dir / (src.stem + ".o")
    if src in TORCH_CU:  # torch's -std replaces ours (nvcc warns about two)
        flags = [f for f in flags if not f.startswith("-std=")] + torch_nvcc_flags()
    cmd = [*nice_prefix(), NVCC, *flags, "-c", str(src), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT, check=False)
    proc.args = cmd
    return src, proc


needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc not found (set ZCCL_NVCC or CUDA_HOME): CUDA sources not compiled"
)


@pytest.fixture(scope="module")
def cu_objects(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """Every .cu compiled once per session: (object folder, [(source, CompletedProcess)])."""
    out = tmp_path_factory.mktemp("cu")
    flags = nvcc_flags()
    # Two at a time (ZCCL_NVCC_JOBS): each nvcc is itself a pipeline of processes.
    jobs = max(1, int(os.environ.get("ZCCL_NVCC_JOBS", "2")))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda s: compile_cu(s, out, flags), CU_FILES))
    return out, results


@needs_nvcc
def test_cu_compiles(cu_objects: tuple[Path, list]) -> None:
    assert CU_FILES, "no .cu files found"
    problems = []
    for src, proc in cu_objects[1]:
        output = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or output:
            command = " ".join(proc.args)
            problems.append(
                f"{src.relative_to(ROOT)}: exit {proc.returncode}\n$ {command}\n{output}"
            )
    assert not problems, "nvcc failed or warned:\n\n" + "\n\n".join(problems)


@needs_nvcc
def test_gpu_test_program_links_and_harness_runs(cu_objects: tuple[Path, list]) -> None:
    """tests/cuda/test_cuszp links (every symbol defined) and its harness works without a GPU."""
    out, results = cu_objects
    if any(proc.returncode != 0 for _, proc in results):
        pytest.skip("a .cu file did not compile (see test_cu_compiles)")
    cpp = [CSRC / "compress" / "fzlight.cpp", CSRC / "compress" / "crc32c.cpp"]
    objects = [out / "test_cuszp.o", out / "cuszp.o"]
    for src in cpp:
        obj = out / (src.stem + ".o")
        cmd = [*nice_prefix(), NVCC, "-O2", "-std=c++17", "-Xcompiler=-fopenmp", "-c", str(src)]
        proc = subprocess.run([*cmd, "-o", str(obj)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        objects.append(obj)
    exe = out / "test_cuszp"
    cmd = [*nice_prefix(), NVCC, *cuda_archs(), *map(str, objects), "-lgomp", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT, check=False)
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    proc = run([str(exe), "--host-only"], timeout=600, env={"OMP_WAIT_POLICY": "passive"})
    assert_ok(proc, f"{exe} --host-only")
    assert "0 failures" in proc.stdout


# tests/cuda/test_gpu_collectives.cu's program: the gZ collectives with the codec and transport.
GPU_COLL_CU = [
    CUDA_TESTS / "test_gpu_collectives.cu",
    CSRC / "compress" / "cuszp.cu",
    *sorted((CSRC / "gpu_collectives").glob("*.cu")),
]
GPU_COLL_CPP = [
    CSRC / "collectives" / "route.cpp",  # the routing and argument checks the gZ entry points use
    CSRC / "collectives" / "toolkit" / "validate.cpp",
    CSRC / "compress" / "fzlight.cpp",
    CSRC / "compress" / "crc32c.cpp",
    *sorted((CSRC / "transport").glob("*.cpp")),
]


def mpi_link_flags() -> list[str]:
    """``mpicc --showme:link`` in nvcc's spelling (-Wl,x -> -Xlinker x; -pthread via -Xcompiler)."""
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        return []
    out = subprocess.run(
        [mpicc, "--showme:link"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    flags: list[str] = []
    for f in out:
        if f.startswith("-Wl,"):
            for part in f[4:].split(","):
                flags += ["-Xlinker", part]
        elif f == "-pthread":
            flags += ["-Xcompiler", "-pthread"]
        else:
            flags.append(f)
    return flags


def link_gpu_collectives_program(out: Path) -> Path:
    """Links tests/cuda/test_gpu_collectives from the .cu objects already in ``out`` (stem.o)
    and the host sources' objects of the MPI C++ tests (cpp_build.mpi_objects: compiled
    already when those ran first). Returns the executable."""
    if MPICC is None:
        pytest.skip("mpicc not found: the GPU collectives program needs MPI")
    objects = [out / (src.stem + ".o") for src in GPU_COLL_CU]
    objects += build_or_fail(lambda v: list(mpi_objects(GPU_COLL_CPP, v).values()), "o2")
    exe = out / "test_gpu_collectives"
    cmd = [*nice_prefix(), NVCC, *cuda_archs(), *map(str, objects), *mpi_link_flags(), "-lgomp"]
    proc = subprocess.run(
        [*cmd, "-o", str(exe)], capture_output=True, text=True, timeout=NVCC_TIMEOUT, check=False
    )
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return exe


@needs_nvcc
def test_gpu_collectives_program_links(cu_objects: tuple[Path, list]) -> None:
    """The gZ collectives link into their MPI test program (every symbol defined), which starts."""
    out, results = cu_objects
    if any(proc.returncode != 0 for _, proc in results):
        pytest.skip("a .cu file did not compile (see test_cu_compiles)")
    exe = link_gpu_collectives_program(out)
    proc = run([str(exe), "--host-only"], timeout=120, env={"OMP_WAIT_POLICY": "passive"})
    assert_ok(proc, f"{exe} --host-only")
    assert "0 failures" in proc.stdout


HOST_MODEL_FLAGS = [
    "-std=c++17",
    "-O2",
    "-fopenmp",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-ffp-contract=off",
    f"-I{CSRC / 'compress'}",
]


def build_host_model(variant: str) -> Path:
    sources = [
        CUDA_TESTS / "host_model_test.cpp",
        CSRC / "compress" / "crc32c.cpp",
        CSRC / "compress" / "fzlight.cpp",
    ]
    # The object key covers tests/cuda's shared headers (stream_tools.h) besides csrc's.
    deps = [*headers(), *sorted(CUDA_TESTS.glob("*.h"))]
    jobs = [object_job(src, HOST_MODEL_FLAGS, variant, deps) for src in sources]
    compile_objects(jobs)
    return link(BIN_DIR / "host_model_test", [j.out for j in jobs], ["-fopenmp"])


@needs_cxx
def test_host_model() -> None:
    assert CXX is not None
    exe = build_or_fail(build_host_model, "hostmodel")
    # Real version-1 and version-2 streams (written by those versions' encoders), when the
    # checkout has them.
    fixtures = [ROOT / "tests" / "data" / f"format_v{v}" for v in (1, 2)]
    args = [str(d) for d in fixtures if d.is_dir()]
    proc = run([str(exe), *args], timeout=600, env={"OMP_WAIT_POLICY": "passive"})
    assert_ok(proc, str(exe))
    assert "ok:" in proc.stdout
