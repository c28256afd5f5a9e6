"""Build of the zccl_torch._C extension (torch C++ extension API + pybind11, OpenMP, Open MPI).

The extension is compiled against the torch installed in the environment that builds it, so
always build without pip's build isolation (an isolated build would compile against another torch,
whose C++ ABI differs). Into your own environment (torch installed first)::

    pip install --no-build-isolation .               # or: pip wheel --no-build-isolation -w DIR .
    pip install --no-build-isolation -e .            # development (what scripts/setup.sh does)

Environment knobs:

* ``ZCCL_MARCH``: ``-march`` value (default ``native``: this is a source build for the machine it
  runs on; the AVX2 kernels need it on x86). ``ZCCL_MARCH=none`` drops the flag (portable scalar
  kernels, several times slower).
* ``ZCCL_WITH_ZSTD``: ``0`` builds without libzstd (default: with it when ``zstd.h`` is found;
  ``scripts/setup.sh`` installs ``libzstd-dev``). Without it the lossless mode stores raw chunks
  and streams that use the zstd codec cannot be read.
* ``MPICC``: MPI compiler wrapper to query for include and link flags (default ``mpicc``).
* ``ZCCL_CUDA_ARCH``: GPU architectures of the CUDA build (default ``90``; e.g. ``90;100``). The
  CUDA build (csrc/**/*.cu, ``ZCCL_WITH_CUDA=1``) happens only when torch has CUDA
  (``torch.version.cuda``) and nvcc is found; otherwise the build is CPU-only, as before.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import setuptools
from setuptools import setup

# Without build isolation pip builds with the environment's own setuptools: an old one (65.x in
# Python 3.11's venv) cannot make wheels without the separate `wheel` package ("invalid command
# 'bdist_wheel'"), and before 77 it cannot read pyproject.toml's SPDX license string (PEP 639).
if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (77, 0):
    raise SystemExit(
        f"zccl-torch: setuptools {setuptools.__version__} here is too old (77 or newer is needed); "
        "install the build tools into this environment first: pip install 'setuptools>=77' ninja "
        "pybind11"
    )

try:
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError as exc:  # pyproject.toml leaves torch out of the isolated build on purpose
    raise SystemExit(
        "zccl-torch compiles against the torch of the environment it is installed into: install "
        "torch first, then build without isolation: pip install --no-build-isolation . "
        f"({exc})"
    ) from exc

ROOT = Path(__file__).resolve().parent
# Torch-free core first, then the pybind11/torch layer.
SOURCE_DIRS = [
    "csrc/compress",
    "csrc/transport",
    "csrc/collectives",
    "csrc/backend",
    "csrc/python",
]


def mpi_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags of the MPI library, from the Open MPI compiler wrapper."""
    mpicc = os.environ.get("MPICC", "mpicc")
    if shutil.which(mpicc) is None:
        raise RuntimeError(
            f"{mpicc} not found: install Open MPI (Debian: apt-get install libopenmpi-dev "
            "openmpi-bin) or point MPICC at your MPI compiler wrapper"
        )

    def show(what: str) -> list[str]:
        cmd = [mpicc, f"--showme:{what}"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        return shlex.split(out.stdout)

    return show("compile"), show("link")


def sources() -> list[str]:
    files: list[str] = []
    for folder in SOURCE_DIRS:
        files += sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*.cpp"))
    return files


def zstd_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags for the lossless codec (libzstd), or none when its header is absent.

    ``ZCCL_WITH_ZSTD=0`` forces a build without it (lossless streams then use raw chunks).
    """
    if os.environ.get("ZCCL_WITH_ZSTD", "1") == "0":
        return [], []
    conda = os.environ.get("CONDA_PREFIX")
    include_dirs = ["/usr/include", "/usr/local/include", *([f"{conda}/include"] if conda else [])]
    if not any(Path(d, "zstd.h").is_file() for d in include_dirs):
        print("zccl: zstd.h not found, building without the lossless zstd codec", file=sys.stderr)
        return [], []
    return ["-DZCCL_WITH_ZSTD=1"], ["-lzstd"]


def torch_system_includes() -> list[str]:
    """torch's include folders as system headers: they are not -Wextra clean, and a folder given
    by -isystem outranks the same folder given by -I (GCC and nvcc), so torch's warnings stay
    out of our build without a pragma around every include of a torch header."""
    from torch.utils.cpp_extension import include_paths

    return [flag for path in include_paths() for flag in ("-isystem", path)]


def compile_args() -> list[str]:
    # OMPI_SKIP_MPICXX: use the C API only (the deprecated C++ bindings need libmpi_cxx).
    args = ["-O3", "-fopenmp", "-Wall", "-Wextra", "-ffp-contract=off", "-DOMPI_SKIP_MPICXX=1"]
    args += torch_system_includes() + zstd_compile
    march = os.environ.get("ZCCL_MARCH", "native")
    if march != "none":
        args.append(f"-march={march}")
    return args


def cuda_enabled() -> bool:
    """Torch built with CUDA, and the CUDA toolkit torch found (CUDA_HOME) has nvcc."""
    import torch

    return (
        torch.version.cuda is not None
        and CUDA_HOME is not None
        and (Path(CUDA_HOME) / "bin" / "nvcc").is_file()
    )


def nvcc_args() -> list[str]:
    # -fmad=false: no FMA contraction, so the GPU encoder reproduces the CPU's streams bit for bit.
    # C++20: torch's headers (included by csrc/backend/cuda_device.cu) need it; nvcc keeps the last
    # -std it is given, so this must not undercut torch's own -std=c++20. MPI's include flags:
    # csrc/gpu_collectives includes mpi.h.
    args = ["-O3", "-fmad=false", "-std=c++20", "-DZCCL_WITH_CUDA=1", "-DOMPI_SKIP_MPICXX=1"]
    args += [f for f in mpi_compile if f.startswith(("-I", "-D"))] + zstd_compile
    args += torch_system_includes()
    for arch in os.environ.get("ZCCL_CUDA_ARCH", "90").replace(",", ";").split(";"):
        if arch.strip():
            args.append(f"-gencode=arch=compute_{arch.strip()},code=sm_{arch.strip()}")
    return args


mpi_compile, mpi_link = mpi_flags()
zstd_compile, zstd_link = zstd_flags()

if cuda_enabled():
    extension = CUDAExtension(
        name="zccl_torch._C",
        sources=sources() + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cu")),
        extra_compile_args={
            "cxx": [*compile_args(), *mpi_compile, "-DZCCL_WITH_CUDA=1"],
            "nvcc": nvcc_args(),
        },
        extra_link_args=["-fopenmp", *mpi_link, *zstd_link],
    )
else:
    extension = CppExtension(
        name="zccl_torch._C",
        sources=sources(),
        extra_compile_args=compile_args() + mpi_compile,
        extra_link_args=["-fopenmp", *mpi_link, *zstd_link],
    )

setup(
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
