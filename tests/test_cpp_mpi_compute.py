"""Multi-rank C++ tests of the computation collectives (csrc/collectives: reduce_scatter,
allreduce with Ring / RecursiveDoubling / CprP2P / Mpi / Auto, reduce, choose_allreduce,
output_error_bound), torch-free.

Builds ``tests/cpp/mpi_compute_test.cpp`` with the transport, the compressor and every
collective into tests/cpp/bin/ (git-ignored; objects are cached by a hash of compiler, flags and
sources, so a rerun after no change only runs the program):

* ``mpi_compute_test``       ``-O2 -Wall -Wextra -Werror -march=native -ffp-contract=off``
* ``mpi_compute_test-asan``  the same at -O1 with AddressSanitizer + UBSan (run once, at P=3)

and runs it under ``timeout 180 mpirun --oversubscribe -np P`` for P in {1, 2, 3, 4, 5, 7}; the
~1e6-value cases only at P in {2, 4} (the machines this runs on have 2 cores shared by all ranks).
The program checks every result against an exact float64 reference within
output_error_bound + the derived float rounding of the reductions, bit-identical outputs across
ranks, bit-exact lossless results on integer data, NaN/Inf propagation, argument errors, count
mismatches across ranks (an error, no hang), and the recompression property of fZ-light.

Skipped when mpicc / mpirun / g++ / timeout are missing. ``ZCCL_CXX`` picks the compiler.
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
    "-march=native",
    "-ffp-contract=off",
    "-DOMPI_SKIP_MPICXX=1",
]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
VARIANTS = {
    # name: (compile flags, link flags)
    "": (["-O2"], []),
    "-asan": (["-O1", "-fno-omit-frame-pointer", *SANITIZE], SANITIZE),
}

RANKS = [1, 2, 3, 4, 5, 7]
LARGE_RANKS = {2, 4}
MPIRUN_TIMEOUT = 180
COMPILE_TIMEOUT = 600

RUN_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # Up to 7 ranks share the cores: one compressor thread each, and waiting threads sleep.
    "OMP_NUM_THREADS": "1",
    "OMP_WAIT_POLICY": "passive",
    # MPI keeps some allocations until exit; leaks are the core tests' business.
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


class BuildError(Exception):
    pass


def _sources() -> list[Path]:
    return [
        CPP_DIR / "mpi_compute_test.cpp",
        CSRC / "transport" / "comm.cpp",
        *sorted((CSRC / "compress").glob("*.cpp")),
        *sorted((CSRC / "collectives").glob("*.cpp")),
    ]


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
        [*cmd, "-o", str(tmp)], capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    os.replace(tmp, out)  # atomic: a concurrent run never sees a half-written file


@functools.cache
def build(variant: str) -> Path:
    """Builds mpi_compute_test{variant}; returns the executable."""
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    flags, link = VARIANTS[variant]
    compile_flags = [*COMMON, *flags, *_mpi_flags("compile")]
    headers = sorted(CSRC.glob("*/*.h")) + sorted(CPP_DIR.glob("*.h"))
    tag = f"mpicompute{variant}"
    jobs = []
    for src in _sources():
        out = BIN_DIR / f"{src.stem}-{tag}-{_key(compile_flags, src, *headers)}.o"
        jobs.append(([CXX, *compile_flags, "-c", str(src)], out))
    todo = [(cmd, out) for cmd, out in jobs if not out.exists()]
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
    # Objects of the same source and variant built from older sources or flags.
    for _, obj in jobs:
        stem = obj.name[: -len("-0123456789abcdef.o")]
        pattern = re.compile(re.escape(stem) + r"-[0-9a-f]{16}\.o")
        for old in BIN_DIR.glob(stem + "-*.o"):
            if old != obj and pattern.fullmatch(old.name):
                old.unlink(missing_ok=True)
    objs = [out for _, out in jobs]
    exe = BIN_DIR / f"mpi_compute_test{variant}"
    stamp = BIN_DIR / f"mpi_compute_test{variant}.key"
    link_flags = [*COMMON, *link, *_mpi_flags("link")]
    key = _key(link_flags, *[o.name for o in objs])
    if not exe.exists() or not stamp.exists() or stamp.read_text() != key:
        _run_compiler([CXX, *map(str, objs), *link_flags], exe)
        stamp.write_text(key)
    return exe


def _program(variant: str = "") -> Path:
    try:
        return build(variant)
    except BuildError as e:
        pytest.fail(f"build failed:\n{e}", pytrace=False)


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


def _mpirun(prog: Path, ranks: int, *args: str) -> str:
    cmd = [TIMEOUT, str(MPIRUN_TIMEOUT), MPIRUN, "--oversubscribe", "-np", str(ranks), str(prog)]
    cmd += list(args)
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
    assert f"mpi_compute_test: all passed (p={ranks}," in proc.stdout, proc.stdout
    return proc.stdout


def test_compute_builds_warning_clean():
    assert _program().exists()


@pytest.mark.parametrize("ranks", RANKS)
def test_compute_collectives(ranks):
    args = ["--large"] if ranks in LARGE_RANKS else []
    out = _mpirun(_program(), ranks, *args, "--verbose")
    if ranks > 1:
        # The compressed algorithms really ran and their errors were measured against the bound.
        for alg in ("Ring", "RD", "CprP2P"):
            assert re.search(rf"allreduce {alg} SUM\s+[0-9.]+", out), out


def test_compute_collectives_under_sanitizers():
    """ASan + UBSan over the whole matrix (shorter counts) at 3 ranks (uneven blocks, RD fold)."""
    _mpirun(_program("-asan"), 3, "--quick")
