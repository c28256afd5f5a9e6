"""Multi-rank C++ tests of the MPI transport (csrc/transport) and of the data-movement collectives
(csrc/collectives: allgather(v), broadcast, scatter, gather, alltoallv), torch-free.

Builds, into tests/cpp/bin/ (git-ignored; objects are cached by a hash of compiler, flags and
sources, so a rerun after no change only links and runs):

* ``mpi_transport_test``  tests/cpp/mpi_transport_test.cpp + the transport
* ``mpi_datamove_test``   tests/cpp/mpi_datamove_test.cpp + transport + collectives + compressor

with ``-O2 -Wall -Wextra -Werror -march=native -ffp-contract=off`` and the MPI wrapper's flags
(cpp_build.MPI_VARIANTS: the objects shared with test_cpp_mpi_compute compile once), then
runs each under ``timeout 120 mpirun --oversubscribe -np P`` for P in {1, 2, 3, 4, 5, 7}; a second
build with AddressSanitizer + UBSan (``-O1``) runs both programs once at P = 3.
The transport test also runs with MPI pre-initialised at MPI_THREAD_SERIALIZED by the program
(the transport's process-wide lock); the datamove test adds its ~1e6-value cases at two P only
(the machines this runs on have few cores shared by all ranks).

Skipped when mpicc / mpirun / g++ are missing. Environment knobs: ``ZCCL_CXX`` (compiler).
"""

from __future__ import annotations

import functools
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

TRANSPORT = sorted((CSRC / "transport").glob("*.cpp"))
# toolkit/codec.cpp (linked below) also wraps the ring's integer code segments (fzcodes.cpp).
COMPRESS = [
    CSRC / "compress" / "fzlight.cpp",
    CSRC / "compress" / "fzcodes.cpp",
    CSRC / "compress" / "crc32c.cpp",
]
# The data-movement collectives only (with the toolkit and routing they build on): the
# computation collectives are tested elsewhere.
DATAMOVE = [
    CSRC / "collectives" / name
    for name in (
        "toolkit/buffers.cpp",
        "toolkit/codec.cpp",
        "toolkit/validate.cpp",
        "toolkit/wait.cpp",
        "route.cpp",
        "datamove_common.cpp",
        "allgather_ring.cpp",
        "broadcast_pipelined.cpp",
        "scatter_pipelined.cpp",
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


@functools.cache
def build(variant: str) -> dict[str, Path]:
    """Builds both programs for a variant (cpp_build.MPI_VARIANTS); returns {program: path}."""
    objects = mpi_objects(sorted({src for srcs in PROGRAMS.values() for src in srcs}), variant)
    return {
        name: mpi_link(BIN_DIR / f"{name}-{variant}", [objects[src] for src in srcs], variant)
        for name, srcs in PROGRAMS.items()
    }


def _program(name: str, variant: str = "o2") -> Path:
    return build_or_fail(build, variant)[name]


def _mpirun(prog: Path, ranks: int, *args: str) -> None:
    """Runs prog at P = ranks and checks that every rank reported OK."""
    proc = mpirun(prog, ranks, args, MPIRUN_TIMEOUT)
    ok_lines = proc.stdout.count(f"{prog.name.rsplit('-', 1)[0]} OK")
    what = " ".join(proc.args)
    assert ok_lines == ranks, f"{what}: {ok_lines} of {ranks} ranks reported OK\n{proc.stdout}"


def test_mpi_programs_build_warning_clean():
    """Transport, collectives and test programs compile at -O2 with -Wall -Wextra -Werror."""
    progs = build_or_fail(build, "o2")
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
