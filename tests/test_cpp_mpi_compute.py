"""Multi-rank C++ tests of the computation collectives (csrc/collectives: reduce_scatter,
allreduce with Ring / RecursiveDoubling / CprP2P / Mpi / Auto, reduce, choose_allreduce,
output_error_bound), torch-free.

Builds ``tests/cpp/mpi_compute_test.cpp`` with the transport, the compressor and every
collective into tests/cpp/bin/ (git-ignored; objects are cached by a hash of compiler, flags and
sources, so a rerun after no change only runs the program):

* ``mpi_compute_test-o2``   ``-O2 -Wall -Wextra -Werror -march=native -ffp-contract=off``
* ``mpi_compute_test-san``  the same at -O1 with AddressSanitizer + UBSan (run once, at P=3)

(cpp_build.MPI_VARIANTS: the objects it shares with test_cpp_mpi_datamove compile once)

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
import re
from pathlib import Path

import pytest
from cpp_build import (
    BIN_DIR,
    CPP_DIR,
    CSRC,
    build_or_fail,
    mpi_link,
    mpi_objects,
    mpirun,
    needs_mpi,
)

pytestmark = needs_mpi

RANKS = [1, 2, 3, 4, 5, 7]
LARGE_RANKS = {2, 4}
MPIRUN_TIMEOUT = 180


def _sources() -> list[Path]:
    return [
        CPP_DIR / "mpi_compute_test.cpp",
        *sorted((CSRC / "transport").glob("*.cpp")),
        *sorted((CSRC / "compress").glob("*.cpp")),
        *sorted((CSRC / "collectives").rglob("*.cpp")),
    ]


@functools.cache
def build(variant: str) -> Path:
    """Builds mpi_compute_test-{variant} (cpp_build.MPI_VARIANTS); returns the executable."""
    objects = mpi_objects(_sources(), variant)
    return mpi_link(BIN_DIR / f"mpi_compute_test-{variant}", list(objects.values()), variant)


def _program(variant: str = "o2") -> Path:
    return build_or_fail(build, variant)


def _mpirun(prog: Path, ranks: int, *args: str) -> str:
    """Runs prog at P = ranks, checks that it passed and returns its output."""
    proc = mpirun(prog, ranks, args, MPIRUN_TIMEOUT)
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
        for alg in ("Ring", "RD", "CprP2P", "HD"):
            assert re.search(rf"allreduce {alg} SUM\s+[0-9.]+", out), out


@pytest.mark.parametrize("ranks", [8, 16])
def test_compute_allreduce_more_rounds(ranks):
    """Three and four halving-doubling rounds (its send and receive areas reused by round
    parity while two rounds overlap) and deeper recursive doubling: the allreduce matrix and the
    many-segment cases at 8 and 16 ranks."""
    for phase in ("allreduce matrix", "segmented ring"):
        out = _mpirun(_program(), ranks, "--quick", "--verbose", "--only", phase)
        assert re.search(r"allreduce HD SUM\s+[0-9.]+", out), out


def test_compute_collectives_under_sanitizers():
    """ASan + UBSan over the whole matrix (shorter counts) at 3 ranks (uneven blocks, RD fold)."""
    _mpirun(_program("san"), 3, "--quick")
