"""Multi-rank C++ tests of the MPI transport (csrc/transport) and of the data-movement collectives
(csrc/collectives: allgather(v), broadcast, scatter, gather, alltoallv), torch-free.

Builds, into tests/cpp/bin/ (git-ignored; objects are cached by a hash of compiler, flags and
sources, so a rerun after no change only links and runs):

* ``mpi_transport_test``  tests/cpp/mpi_transport_test.cpp + the transport
* ``mpi_datamove_test``   tests/cpp/mpi_datamove_test.cpp + transport + collectives + compressor

with ``-O2 -Wall -Wextra -Werror -march=native -ffp-contract=off`` and the MPI wrapper's flags,
then runs each under ``timeout 120 mpirun --oversubscribe -np P`` for P in {1, 2, 3, 4, 5, 7};
a second build with AddressSanitizer + UBSan (``-O1``) runs both programs once at P = 3.
The transport test also runs with MPI pre-initialised at MPI_THREAD_SERIALIZED by the program
(the transport's process-wide lock); the datamove test adds its ~1e6-value cases at two P only
(the machines this runs on have few cores shared by all ranks).

Skipped when mpicc / mpirun / g++ are missing. Environment knobs: ``ZCCL_CXX`` (compiler).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
CPP_DIR = ROOT / "tests" / "cpp"
BIN_DIR = CPP_DIR / "bin"

CXX = shutil.which(os.environ.get("ZCCL_CXX", "g++"))
MPICC = shutil.which("mpicc")
MPIRUN = shutil.which("mpirun")
TIMEOUT = shutil.which("timeout")

pytestmark = pytest.mark.skipif(
    None in (CXX, MPICC, MPIRUN, TIMEOUT),
    reason="the MPI C++ tests need g++, mpicc, mpirun and timeout",
)

COMMON = [
    "-std=c++17",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fopenmp",
    "-ffp-contract=off",
    "-DOMPI_SKIP_MPICXX=1",
]
VARIANTS = {
    # name: compile-and-link flags
    "o2": [*COMMON, "-O2", "-march=native"],
    "san": [
        *COMMON,
        "-O1",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-D_GLIBCXX_ASSERTIONS",
    ],
}

TRANSPORT = [CSRC / "transport" / "comm.cpp"]
COMPRESS = [CSRC / "compress" / "fzlight.cpp", CSRC / "compress" / "crc32c.cpp"]
# The data-movement collectives only: the computation collectives are tested elsewhere.
DATAMOVE = [
    CSRC / "collectives" / name
    for name in (
        "datamove_common.cpp",
        "allgather_ring.cpp",
        "broadcast_binomial.cpp",
        "scatter_binomial.cpp",
        "gather_binomial.cpp",
        "alltoallv_pairwise.cpp",
    )
]
PROGRAMS = {
    "mpi_transport_test": [CPP_DIR / "mpi_transport_test.cpp", *TRANSPORT],
    "mpi_datamove_test": [CPP_DIR / "mpi_datamove_test.cpp", *TRANSPORT, *COMPRESS, *DATAMOVE],
}

RANKS = [1, 2, 3, 4, 5, 7]
LARGE_RANKS = {2, 5}  # the ~1e6-value cases
SAN_RANKS = [3]  # the sanitizer build runs once (it is slower to build and to run)
MPIRUN_TIMEOUT = 120
COMPILE_TIMEOUT = 600

RUN_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # Up to 7 ranks share the cores: one compressor thread each, and waiting threads sleep.
    "OMP_NUM_THREADS": "1",
    "OMP_WAIT_POLICY": "passive",
    # The MPI library itself leaks at exit: leak reports would only be noise.
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


class BuildError(Exception):
    pass


def _mpi_flags(kind: str) -> list[str]:
    out = subprocess.run(
        [MPICC, f"--showme:{kind}"], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.split()


@functools.cache
def _compiler_id() -> str:
    out = subprocess.run([CXX, "--version"], capture_output=True, text=True, check=False)
    mpi = subprocess.run([MPICC, "--showme:version"], capture_output=True, text=True, check=False)
    return CXX + "\n" + out.stdout + mpi.stdout + mpi.stderr


def _headers() -> list[Path]:
    return sorted(CSRC.glob("*/*.h")) + sorted(CPP_DIR.glob("*.h"))


def _key(*parts: object) -> str:
    h = hashlib.sha256(_compiler_id().encode())
    for part in parts:
        if isinstance(part, Path):
            h.update(str(part).encode())
            h.update(part.read_bytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()[:16]


def _run_compiler(cmd: list[str], out: Path) -> None:
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    proc = subprocess.run(
        [*cmd, "-o", str(tmp)],
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    os.replace(tmp, out)  # atomic: a concurrent run never sees a half-written file


def _object(src: Path, flags: list[str], variant: str) -> tuple[list[str], Path]:
    key = _key(flags, src, *_headers())
    out = BIN_DIR / f"{src.stem}-mpi{variant}-{key}.o"
    return [CXX, *flags, "-c", str(src)], out


def _prune_stale(objects: list[Path]) -> None:
    """Removes objects of the same sources built from older sources or flags."""
    for obj in objects:
        stem = obj.name[: -len("-0123456789abcdef.o")]
        pattern = re.compile(re.escape(stem) + r"-[0-9a-f]{16}\.o")
        for old in BIN_DIR.glob(stem + "-*.o"):
            if old != obj and pattern.fullmatch(old.name):
                old.unlink(missing_ok=True)


@functools.cache
def build(variant: str) -> dict[str, Path]:
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    flags = VARIANTS[variant]
    compile_flags = [*flags, *_mpi_flags("compile")]
    link_flags = [*flags, *_mpi_flags("link")]
    sources = sorted({src for srcs in PROGRAMS.values() for src in srcs})
    jobs = {src: _object(src, compile_flags, variant) for src in sources}
    todo = [(cmd, out) for cmd, out in jobs.values() if not out.exists()]
    if todo:
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            futures = [pool.submit(_run_compiler, cmd, out) for cmd, out in todo]
            errors = []
            for f in futures:
                try:
                    f.result()
                except BuildError as e:
                    errors.append(str(e))
        if errors:
            raise BuildError("\n\n".join(errors))
    _prune_stale([out for _, out in jobs.values()])
    result = {}
    for name, srcs in PROGRAMS.items():
        objs = [jobs[src][1] for src in srcs]
        exe = BIN_DIR / f"{name}-{variant}"
        stamp = BIN_DIR / f"{name}-{variant}.key"
        key = _key(link_flags, *[o.name for o in objs])
        if not exe.exists() or not stamp.exists() or stamp.read_text() != key:
            _run_compiler([CXX, *map(str, objs), *link_flags], exe)
            stamp.write_text(key)
        result[name] = exe
    return result


def _program(name: str, variant: str = "o2") -> Path:
    try:
        return build(variant)[name]
    except BuildError as e:
        pytest.fail(f"build failed:\n{e}", pytrace=False)


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


def _mpirun(prog: Path, ranks: int, *args: str) -> None:
    cmd = [
        TIMEOUT,
        str(MPIRUN_TIMEOUT),
        MPIRUN,
        "--oversubscribe",
        "-np",
        str(ranks),
        str(prog),
        *args,
    ]
    env = dict(os.environ)
    env.update(RUN_ENV)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=MPIRUN_TIMEOUT + 30,
            env=env,
            cwd=BIN_DIR,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} hung past the timeout", pytrace=False)
    what = " ".join(cmd)
    if proc.returncode != 0:
        hint = " (timed out: a hang)" if proc.returncode == 124 else ""
        pytest.fail(
            f"{what} exited with {proc.returncode}{hint}\n--- stdout ---\n{_tail(proc.stdout)}"
            f"\n--- stderr ---\n{_tail(proc.stderr)}",
            pytrace=False,
        )
    ok_lines = proc.stdout.count(f"{prog.name.rsplit('-', 1)[0]} OK")
    assert ok_lines == ranks, f"{what}: {ok_lines} of {ranks} ranks reported OK\n{proc.stdout}"


def test_mpi_programs_build_warning_clean():
    """Transport, collectives and test programs compile at -O2 with -Wall -Wextra -Werror."""
    try:
        progs = build("o2")
    except BuildError as e:
        pytest.fail(f"build failed:\n{e}", pytrace=False)
    assert all(p.exists() for p in progs.values())


@pytest.mark.parametrize("ranks", RANKS)
def test_transport(ranks):
    _mpirun(_program("mpi_transport_test"), ranks)


@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_transport_preinitialized_serialized(ranks):
    """MPI initialised by the program (not by us) below MPI_THREAD_MULTIPLE."""
    _mpirun(_program("mpi_transport_test"), ranks, "--preinit-serialized")


@pytest.mark.parametrize("ranks", RANKS)
def test_datamove(ranks):
    args = ["--large"] if ranks in LARGE_RANKS else []
    _mpirun(_program("mpi_datamove_test"), ranks, *args)


@pytest.mark.parametrize("ranks", SAN_RANKS)
@pytest.mark.parametrize("program", ["mpi_transport_test", "mpi_datamove_test"])
def test_under_sanitizers(program, ranks):
    """AddressSanitizer + UBSan build: out-of-bounds writes, use after free, UB."""
    _mpirun(_program(program, "san"), ranks)
