"""Build and run machinery shared by the C++ test modules (tests/test_cpp_*.py).

Objects and executables go to tests/cpp/bin/ (git-ignored). An object's name carries a hash of
the toolchain (compiler version, MPI version), its flags, its source and the headers it may
include (by default every header of csrc/ and tests/cpp/), so a rerun after no change compiles
nothing; an executable is relinked only when its objects or link flags change (recorded in
``<exe>.key``). Writes are atomic, so concurrent pytest runs never see half-written files.

``ZCCL_CXX`` picks the compiler (default g++).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
CPP_DIR = ROOT / "tests" / "cpp"
BIN_DIR = CPP_DIR / "bin"

CXX = shutil.which(os.environ.get("ZCCL_CXX", "g++"))
MPICC = shutil.which("mpicc")
MPIRUN = shutil.which("mpirun")
TIMEOUT = shutil.which("timeout")
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

COMPILE_TIMEOUT = 600

needs_cxx = pytest.mark.skipif(CXX is None, reason="g++ not found: the C++ core tests need it")
needs_mpi = pytest.mark.skipif(
    None in (CXX, MPICC, MPIRUN, TIMEOUT),
    reason="the MPI C++ tests need g++, mpicc, mpirun and timeout",
)

MPI_RUN_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # Up to 7 ranks share the cores: one compressor thread each, and waiting threads sleep.
    "OMP_NUM_THREADS": "1",
    "OMP_WAIT_POLICY": "passive",
    # The MPI library keeps some allocations until exit: leak reports would only be noise
    # (leaks are the core tests' business).
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}

# Debug information of every test build: line tables (sanitizer reports name file, line and
# inlined frames from them) without GCC's tracking of variable locations, which took half of
# the compile time of csrc/compress/fzlight.cpp under the sanitizers (25 s -> 12 s on this VM).
TEST_DEBUG = ["-g", "-fno-var-tracking-assignments"]
# AddressSanitizer + UBSan, stopping at the first report, with libstdc++'s own checks.
SANITIZE = [
    "-O1",
    *TEST_DEBUG,
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-D_GLIBCXX_ASSERTIONS",
]
SANITIZE_LINK = ["-fsanitize=address,undefined"]
# The multi-rank C++ programs (test_cpp_mpi_*): one set of flags and object tags for all of
# them, so the sources they share (transport, compressor, collective toolkit) compile once per
# variant, not once per program. The MPI wrapper's compile flags come on top.
MPI_COMMON = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fopenmp",
    "-march=native",
    "-ffp-contract=off",
    "-DOMPI_SKIP_MPICXX=1",
]
MPI_VARIANTS = {
    # name: (compile flags, link flags)
    "o2": ([*MPI_COMMON, "-O2", *TEST_DEBUG], [*MPI_COMMON]),
    "san": ([*MPI_COMMON, *SANITIZE], [*MPI_COMMON, *SANITIZE_LINK]),
}

T = TypeVar("T")


class BuildError(Exception):
    """A compile or link step failed; the message holds the commands and compiler output."""


class Job(NamedTuple):
    """One compile step: the command (without ``-o``) and the object it produces."""

    cmd: list[str]
    out: Path


# --- toolchain ----------------------------------------------------------------------------------


@functools.cache
def toolchain_id() -> str:
    """The compiler path and version, plus the MPI version where mpicc exists."""
    ident = CXX + "\n"
    ident += subprocess.run([CXX, "--version"], capture_output=True, text=True, check=False).stdout
    if MPICC is not None:
        mpi = subprocess.run(
            [MPICC, "--showme:version"], capture_output=True, text=True, check=False
        )
        ident += mpi.stdout + mpi.stderr
    return ident


@functools.cache
def native_supported() -> bool:
    """Whether the compiler accepts -march=native on this machine."""
    out = subprocess.run(
        [CXX, "-march=native", "-dM", "-E", "-x", "c++", "-"],
        input="",
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode == 0


def mpi_flags(kind: Literal["compile", "link"]) -> list[str]:
    """The MPI wrapper's compile or link flags (``mpicc --showme:compile`` / ``:link``)."""
    out = subprocess.run(
        [MPICC, f"--showme:{kind}"], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.split()


# --- build --------------------------------------------------------------------------------------


def headers(*dirs: Path) -> list[Path]:
    """The headers (``*.h``) of ``dirs`` plus tests/cpp/*.h; of all of csrc/ if no dirs given."""
    found = [h for d in dirs for h in sorted(d.glob("*.h"))] if dirs else sorted(CSRC.rglob("*.h"))
    return found + sorted(CPP_DIR.glob("*.h"))


def cache_key(*parts: object) -> str:
    """16 hex digits hashing the toolchain and the parts (a Path by its name and contents)."""
    h = hashlib.sha256(toolchain_id().encode())
    for part in parts:
        if isinstance(part, Path):
            h.update(str(part).encode())
            h.update(part.read_bytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()[:16]


def object_job(src: Path, flags: list[str], tag: str, deps: list[Path] | None = None) -> Job:
    """The step compiling ``src`` with ``flags`` into ``bin/<stem>-<tag>-<key>.o``.

    The key covers ``deps``, the headers the object may include (default: ``headers()``).
    """
    key = cache_key(flags, src, *(headers() if deps is None else deps))
    return Job([CXX, *flags, "-c", str(src)], BIN_DIR / f"{src.stem}-{tag}-{key}.o")


def run_compiler(cmd: list[str], out: Path) -> None:
    """Runs ``cmd -o out`` through a temporary file; raises BuildError on failure."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    proc = subprocess.run(
        [*cmd, "-o", str(tmp)], capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    os.replace(tmp, out)  # atomic: a concurrent run never sees a half-written file


def prune_stale(objects: Iterable[Path]) -> None:
    """Removes objects of the same source and tag built from older sources or flags."""
    for obj in objects:
        stem_tag = obj.name[: -len("-0123456789abcdef.o")]
        pattern = re.compile(re.escape(stem_tag) + r"-[0-9a-f]{16}\.o")
        for old in BIN_DIR.glob(stem_tag + "-*.o"):
            if old != obj and pattern.fullmatch(old.name):
                old.unlink(missing_ok=True)


def compile_objects(jobs: Iterable[Job]) -> None:
    """Compiles, in parallel, the jobs whose object is missing, then prunes stale objects.

    Raises BuildError carrying every failed step's output.
    """
    jobs = list(jobs)
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    todo = [job for job in jobs if not job.out.exists()]
    if todo:
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            futures = [pool.submit(run_compiler, job.cmd, job.out) for job in todo]
            errors = []
            for f in futures:
                try:
                    f.result()
                except BuildError as e:
                    errors.append(str(e))
        if errors:
            raise BuildError("\n\n".join(errors))
    prune_stale(job.out for job in jobs)


def mpi_objects(sources: Iterable[Path], variant: str) -> dict[Path, Path]:
    """Compiles ``sources`` as MPI_VARIANTS[variant] objects; returns {source: object}."""
    flags = [*MPI_VARIANTS[variant][0], *mpi_flags("compile")]
    jobs = {src: object_job(src, flags, f"mpi-{variant}") for src in sources}
    compile_objects(jobs.values())
    return {src: job.out for src, job in jobs.items()}


def mpi_link(exe: Path, objects: list[Path], variant: str) -> Path:
    """Links MPI_VARIANTS[variant] objects into ``exe`` (see link)."""
    return link(exe, objects, [*MPI_VARIANTS[variant][1], *mpi_flags("link")])


def link(exe: Path, objects: list[Path], flags: list[str]) -> Path:
    """Links ``objects`` with ``flags`` into ``exe`` unless ``exe.key`` shows it is current."""
    stamp = exe.with_name(exe.name + ".key")
    key = cache_key(flags, *[o.name for o in objects])
    if not exe.exists() or not stamp.exists() or stamp.read_text() != key:
        run_compiler([CXX, *map(str, objects), *flags], exe)
        stamp.write_text(key)
    return exe


def build_or_fail(build: Callable[[str], T], variant: str) -> T:
    """``build(variant)``, failing the test (not erroring it) with the compiler output."""
    try:
        return build(variant)
    except BuildError as e:
        pytest.fail(f"build of variant {variant!r} failed:\n{e}", pytrace=False)


# --- run ----------------------------------------------------------------------------------------


def tail(text: str, n: int = 6000) -> str:
    """The last ``n`` characters of ``text``."""
    return text if len(text) <= n else "...\n" + text[-n:]


def run(cmd: list[str], timeout: int, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Runs ``cmd`` in bin/ with ``env`` over os.environ; fails the test past ``timeout`` s."""
    try:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **env},
            cwd=BIN_DIR,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        pytest.fail(f"{' '.join(cmd)} timed out after {timeout}s\n{out or ''}", pytrace=False)


def assert_ok(proc: subprocess.CompletedProcess, what: str, note: str = "") -> None:
    """Fails the test, with the tails of its output, unless ``proc`` exited with 0."""
    if proc.returncode != 0:
        pytest.fail(
            f"{what} exited with {proc.returncode}{note}\n--- stdout ---\n{tail(proc.stdout)}"
            f"\n--- stderr ---\n{tail(proc.stderr)}",
            pytrace=False,
        )


def mpirun(
    prog: Path, ranks: int, args: Iterable[str], timeout: int
) -> subprocess.CompletedProcess:
    """Runs ``timeout T mpirun --oversubscribe -np P prog args`` under MPI_RUN_ENV.

    Fails the test on a non-zero exit (124: the program hung past ``timeout`` seconds).
    """
    cmd = [TIMEOUT, str(timeout), MPIRUN, "--oversubscribe", "-np", str(ranks), str(prog), *args]
    proc = run(cmd, timeout + 30, MPI_RUN_ENV)
    assert_ok(proc, " ".join(cmd), " (timed out: a hang)" if proc.returncode == 124 else "")
    return proc
