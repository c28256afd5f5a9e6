"""Build of the zccl_torch._C extension (torch C++ extension API + pybind11, OpenMP; an MPI
library when present: Open MPI, or MPICH and its kin).

The extension is compiled against the torch installed in the environment that builds it, so
always build without pip's build isolation (an isolated build would compile against another torch,
whose C++ ABI differs). Into your own environment (torch installed first)::

    pip install --no-build-isolation .               # or: pip wheel --no-build-isolation -w DIR .
    pip install --no-build-isolation -e .            # development (what scripts/setup.sh does)

Environment knobs:

* ``ZCCL_MARCH``: ``-march`` value (default ``native``: this is a source build for the machine it
  runs on; the AVX2 kernels need it on x86). ``ZCCL_MARCH=none`` drops the flag (portable scalar
  kernels, several times slower). The CPU features it lets the compiler use are recorded in
  ``zccl_torch/_build_target.py``: importing the build on a CPU without one raises an
  ImportError naming it.
* ``ZCCL_WITH_ZSTD``: ``0`` builds without libzstd (default: with it when ``zstd.h`` is found;
  ``scripts/setup.sh`` installs ``libzstd-dev``). Without it the lossless mode stores raw chunks
  and streams that use the zstd codec cannot be read.
* ``ZCCL_WITH_MPI``: ``auto`` (default) builds the MPI transport when ``mpicc`` is found and
  without it otherwise (with a warning); ``1`` requires it; ``0`` leaves it out. A build without it
  needs no Open MPI at build or run time; its process groups use zccl's TCP transport (torchrun,
  or mpirun on one host).
* ``MPICC``: MPI compiler wrapper to query for include and link flags (default ``mpicc``): Open
  MPI's, or one of the MPICH family (``MPICC=mpicc.mpich`` for Debian's MPICH).
* ``ZCCL_CUDA_ARCH``: GPU architectures of the CUDA build (default ``90``; e.g. ``90;100``). The
  CUDA build (csrc/**/*.cu, ``ZCCL_WITH_CUDA=1``) happens only when torch has CUDA
  (``torch.version.cuda``) and nvcc is found; otherwise the build is CPU-only, as before.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

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


def mpicc_name() -> str:
    """The MPI compiler wrapper asked for: ``MPICC``, default ``mpicc``."""
    return os.environ.get("MPICC", "mpicc")


def find_mpicc() -> str | None:
    """The MPI compiler wrapper (:func:`mpicc_name`), or None when it is absent."""
    mpicc = mpicc_name()
    return mpicc if shutil.which(mpicc) else None


def with_mpi(mpicc: str | None) -> bool:
    """Whether the build has the Open MPI transport: ``ZCCL_WITH_MPI`` (``auto``, the default:
    when ``mpicc`` is found; ``1``: required; ``0``: never)."""
    choice = os.environ.get("ZCCL_WITH_MPI", "auto").strip().lower() or "auto"
    if choice not in ("auto", "0", "1"):
        raise SystemExit(f"zccl-torch: ZCCL_WITH_MPI must be auto, 0 or 1, got {choice!r}")
    if choice == "1" and mpicc is None:
        raise SystemExit(
            f"zccl-torch: ZCCL_WITH_MPI=1 but {mpicc_name()} was not found: "
            "install Open MPI (Debian: apt-get install libopenmpi-dev openmpi-bin), point MPICC at "
            "your MPI compiler wrapper, or build without it (ZCCL_WITH_MPI=0)"
        )
    if choice == "0":
        return False
    if mpicc is None:
        print(
            "zccl-torch: mpicc not found, building WITHOUT the Open MPI transport: process groups "
            "will use zccl's TCP transport (torchrun, or mpirun on one host). Install Open MPI "
            "(apt-get install libopenmpi-dev openmpi-bin) and rebuild for the MPI transport, or "
            "set ZCCL_WITH_MPI=1 to make its absence an error.",
            file=sys.stderr,
        )
        return False
    return True


class MpiFlags(NamedTuple):
    """What an MPI compiler wrapper adds to a compiler call."""

    include_dirs: list[str]
    compile: list[str]  # other compile flags (-D, -pthread)
    link: list[str]


def mpi_flags(mpicc: str | None, link: bool) -> MpiFlags:
    """The MPI library's flags, from its compiler wrapper: Open MPI's (``--showme:compile`` /
    ``--showme:link``) or, where that option is unknown, an MPICH-family one (MPICH, MVAPICH,
    Intel MPI): ``-show`` prints the whole command line it would run.

    The compile flags (include folders) are used whenever the wrapper is there, also for a build
    without the MPI transport (``link`` False): they change nothing in the files that build
    compiles, and identical compile commands let ninja reuse every object when one build tree
    switches between the two (the test of the build without MPI does that)."""
    if mpicc is None:
        return MpiFlags([], [], [])
    flags = classify_flags(wrapper_arguments(mpicc))
    return flags if link else flags._replace(link=[])


def wrapper_arguments(mpicc: str) -> list[str]:
    """The arguments the MPI compiler wrapper ``mpicc`` adds to a compiler call."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([mpicc, *args], capture_output=True, text=True, timeout=120)

    compile_out, link_out = run("--showme:compile"), run("--showme:link")
    if compile_out.returncode == 0 and link_out.returncode == 0:  # Open MPI
        return shlex.split(compile_out.stdout) + shlex.split(link_out.stdout)
    shown = run("-show")  # the MPICH family: "gcc -I... -L... -lmpich"
    if shown.returncode != 0 or not shown.stdout.strip():
        why = (shown.stderr or compile_out.stderr).strip()
        raise SystemExit(
            f"zccl-torch: cannot read the MPI flags from {mpicc}: neither Open MPI's "
            f"--showme:compile nor MPICH's -show worked ({why}). "
            "Point MPICC at your MPI's C compiler wrapper, or build without the MPI transport "
            "(ZCCL_WITH_MPI=0)."
        )
    return shlex.split(shown.stdout)[1:]  # the compiler left out


def classify_flags(args: list[str]) -> MpiFlags:
    """A wrapper's arguments sorted: include folders (``-I``, ``-isystem``), other compile flags
    (``-D``, ``-pthread``) and link flags (``-L``, ``-l``, ``-Wl,``, ``-Xlinker``, ``-pthread``,
    library files); anything else (``-O2``, ``-g``) is the wrapper's own taste and dropped."""
    flags = MpiFlags([], [], [])
    i = 0
    while i < len(args):
        a = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        apart = value is not None and a in ("-I", "-isystem", "-D", "-L", "-l", "-Xlinker")
        i += 2 if apart else 1
        if a.startswith(("-I", "-isystem")):
            flags.include_dirs.append(value if apart else a[2 if a.startswith("-I") else 8 :])
        elif a.startswith("-D"):
            flags.compile.extend([a, value] if apart else [a])
        elif a == "-pthread":
            flags.compile.append(a)
            flags.link.append(a)
        elif a.startswith(("-L", "-l", "-Wl,", "-Xlinker")) or re.search(r"\.(so(\.\d+)*|a)$", a):
            flags.link.extend([a, value] if apart else [a])
    return flags


def sources(mpi: bool) -> list[str]:
    """The extension's C++ sources: with the Open MPI transport (``mpi``) its
    csrc/transport/mpi_*.cpp files, else csrc/transport/without_mpi/ in their place."""
    files: list[str] = []
    for folder in SOURCE_DIRS:
        files += sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*.cpp"))
    mpi_files = {f for f in files if re.fullmatch(r"csrc/transport/mpi_\w+\.cpp", f)}
    without = {f for f in files if f.startswith("csrc/transport/without_mpi/")}
    drop = without if mpi else mpi_files
    return [f for f in files if f not in drop]


GENERATED = ROOT / "build" / "zccl_generated"


def source_digest() -> str:
    """A hash of every C++/CUDA source under csrc/ (paths and contents), the build's identity: ranks
    whose digests differ refuse to form a group (zccl_torch/membership.py)."""
    h = hashlib.sha256()
    for path in sorted(
        p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")
    ):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def write_build_info() -> None:
    """build/zccl_generated/zccl_build_info.h, rewritten only when its text changes (ninja then
    recompiles only csrc/python/build_info.cpp, the one file that includes it)."""
    text = (
        "// Generated by setup.py at build time; do not edit.\n#pragma once\n"
        f'#define ZCCL_SOURCE_DIGEST "{source_digest()}"\n'
    )
    write_if_changed(GENERATED / "zccl_build_info.h", text)


def write_if_changed(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` unless it holds that already: a generated file keeps its time
    while unchanged, so ninja recompiles only what its change reaches."""
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


MPI_INCLUDE = GENERATED / "mpi_include"
MPI_INCLUDE_SLOTS = 4
MPI_HEADER = GENERATED / "zccl_mpi.h"


def mpi_compile_args(mpi: MpiFlags, mpicc: str | None) -> list[str]:
    """The MPI wrapper's compile flags as every file of this build gets them.

    Only csrc/transport/mpi_*.cpp include MPI's headers, through build/zccl_generated/zccl_mpi.h.
    The wrapper's include folders reach them through fixed slots, build/zccl_generated/
    mpi_include/0..3 (links to those folders, or to an empty one), so every compile command is
    the same whichever MPI the build uses, or none: a build against another MPI (Open MPI,
    MPICH) recompiles those five files alone, and zccl_mpi.h, which names the folders, changes
    with it (ninja follows links to the headers' times, which need not be newer than the
    objects; the rewritten zccl_mpi.h is). Include folders beyond the slots and other flags are
    passed as they are."""
    dirs = mpi.include_dirs
    empty = MPI_INCLUDE / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    for slot in range(MPI_INCLUDE_SLOTS):
        target = Path(dirs[slot]).resolve() if slot < len(dirs) else empty
        link = MPI_INCLUDE / str(slot)
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    if mpicc is None:
        body = '#error "no MPI compiler wrapper was found: nothing may include MPI\'s headers"\n'
    else:
        body = "#include <mpi.h>\n"
    text = (
        "// Generated by setup.py at build time; do not edit. MPI's headers for\n"
        f"// csrc/transport/mpi_*.cpp: {mpicc or 'no MPI'}, include folders {dirs or 'none'}.\n"
        f"#pragma once\n{body}"
    )
    write_if_changed(MPI_HEADER, text)
    slots = [f"-I{MPI_INCLUDE / str(slot)}" for slot in range(MPI_INCLUDE_SLOTS)]
    beyond = [f"-I{d}" for d in dirs[MPI_INCLUDE_SLOTS:]]
    return ["-DZCCL_GENERATED_MPI_HEADER=1", *slots, *beyond, *mpi.compile]


# Instruction-set extensions the compiler may use once `-march` enables them (the preprocessor
# macro it then defines), by the name Linux gives the CPU feature in /proc/cpuinfo.
CPU_FEATURE_MACROS = {
    "__SSE3__": "pni",
    "__SSSE3__": "ssse3",
    "__SSE4_1__": "sse4_1",
    "__SSE4_2__": "sse4_2",
    "__POPCNT__": "popcnt",
    "__AES__": "aes",
    "__PCLMUL__": "pclmulqdq",
    "__AVX__": "avx",
    "__AVX2__": "avx2",
    "__FMA__": "fma",
    "__F16C__": "f16c",
    "__BMI__": "bmi1",
    "__BMI2__": "bmi2",
    "__LZCNT__": "abm",
    "__MOVBE__": "movbe",
    "__SHA__": "sha_ni",
    "__AVXVNNI__": "avx_vnni",
    "__AVX512F__": "avx512f",
    "__AVX512BW__": "avx512bw",
    "__AVX512CD__": "avx512cd",
    "__AVX512DQ__": "avx512dq",
    "__AVX512VL__": "avx512vl",
    "__AVX512IFMA__": "avx512ifma",
    "__AVX512VBMI__": "avx512vbmi",
    "__AVX512VBMI2__": "avx512_vbmi2",
    "__AVX512VNNI__": "avx512_vnni",
    "__AVX512BITALG__": "avx512_bitalg",
    "__AVX512VPOPCNTDQ__": "avx512_vpopcntdq",
    "__AVX512BF16__": "avx512_bf16",
    "__AVX512FP16__": "avx512_fp16",
    "__GFNI__": "gfni",
    "__VAES__": "vaes",
    "__VPCLMULQDQ__": "vpclmulqdq",
}
BUILD_TARGET = ROOT / "zccl_torch" / "_build_target.py"


def cpu_features(predefined: str) -> list[str]:
    """The CPU features (/proc/cpuinfo names) that the compiler's predefined macros (the text of
    ``c++ -dM -E``) say the code may use."""
    defined = set(re.findall(r"^#define (__\w+__) ", predefined, flags=re.MULTILINE))
    return sorted(feature for macro, feature in CPU_FEATURE_MACROS.items() if macro in defined)


def write_build_target() -> None:
    """zccl_torch/_build_target.py: the ``-march`` this build used and the CPU features it lets
    the compiler use, so that ``import zccl_torch`` on a CPU without one of them raises an
    ImportError naming it instead of dying of SIGILL (zccl_torch/_native.py). Rewritten only when
    its text changes."""
    compiler = os.environ.get("CXX", "c++")
    try:
        predefined = subprocess.run(
            [compiler, *march_args(), "-dM", "-E", "-x", "c++", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"zccl: could not ask {compiler} for its target ({exc})", file=sys.stderr)
        predefined = ""
    text = (
        '"""Generated by setup.py at build time; do not edit."""\n\n'
        f"MARCH = {march()!r}\n"
        f"CPU_FEATURES: tuple[str, ...] = {tuple(cpu_features(predefined))!r}\n"
    )
    write_if_changed(BUILD_TARGET, text)


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


def march() -> str:
    """``ZCCL_MARCH``: the build's ``-march`` value (default native; ``none``: no flag)."""
    return os.environ.get("ZCCL_MARCH", "native")


def march_args() -> list[str]:
    """``-march=ZCCL_MARCH``, or nothing for ``ZCCL_MARCH=none``."""
    return [] if march() == "none" else [f"-march={march()}"]


def compile_args() -> list[str]:
    # OMPI_SKIP_MPICXX: use the C API only (the deprecated C++ bindings need libmpi_cxx).
    args = ["-O3", "-fopenmp", "-Wall", "-Wextra", "-ffp-contract=off", "-DOMPI_SKIP_MPICXX=1"]
    return args + torch_system_includes() + zstd_compile + [f"-I{GENERATED}", *march_args()]


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
    # -std it is given, so this must not undercut torch's own -std=c++20. No MPI flags: no .cu
    # file includes mpi.h (the transport answers Comm::device_memory()).
    args = ["-O3", "-fmad=false", "-std=c++20", "-DZCCL_WITH_CUDA=1", *zstd_compile]
    args += torch_system_includes()
    for arch in os.environ.get("ZCCL_CUDA_ARCH", "90").replace(",", ";").split(";"):
        if arch.strip():
            args.append(f"-gencode=arch=compute_{arch.strip()},code=sm_{arch.strip()}")
    return args


write_build_info()
write_build_target()
mpicc = find_mpicc()
mpi_built = with_mpi(mpicc)
mpi = mpi_flags(mpicc, link=mpi_built)
mpi_compile, mpi_link = mpi_compile_args(mpi, mpicc), mpi.link
zstd_compile, zstd_link = zstd_flags()

if cuda_enabled():
    extension = CUDAExtension(
        name="zccl_torch._C",
        sources=sources(mpi_built)
        + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cu")),
        extra_compile_args={
            "cxx": [*compile_args(), *mpi_compile, "-DZCCL_WITH_CUDA=1"],
            "nvcc": nvcc_args(),
        },
        extra_link_args=["-fopenmp", *mpi_link, *zstd_link],
    )
else:
    extension = CppExtension(
        name="zccl_torch._C",
        sources=sources(mpi_built),
        extra_compile_args=compile_args() + mpi_compile,
        extra_link_args=["-fopenmp", *mpi_link, *zstd_link],
    )


NinjaBuildExtension = BuildExtension.with_options(use_ninja=True)


class BuildExtensionKeepingObjects(NinjaBuildExtension):  # type: ignore[misc,valid-type]
    """torch's ninja build, whose object files stay in ``build/temp.*`` for editable installs too.

    setuptools' editable install (``pip install -e .``, what scripts/setup.sh runs) compiles in a
    fresh temporary directory each time, so every rebuild recompiled all ~50 files (2 minutes on
    2 cores) and a later ``pip wheel`` or ``setup.py build_ext`` found no objects to reuse.
    Compiling in the tree the other builds use lets ninja recompile only what changed.
    """

    def finalize_options(self) -> None:
        super().finalize_options()
        if getattr(self, "editable_mode", False):
            build = self.get_finalized_command("build")
            self.build_temp = os.path.join(
                build.build_base, f"temp.{build.plat_name}-{sys.implementation.cache_tag}"
            )


setup(
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtensionKeepingObjects},
)
