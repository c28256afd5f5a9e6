"""A build without Open MPI (``ZCCL_WITH_MPI=0``, or no ``mpicc``): it needs no Open MPI to
build or run, its groups use zccl's TCP transport under torchrun and under mpirun, asking for the
MPI transport fails on every rank naming what to do, and setup.py's choice is what its docs say.

The extension is built with ``ZCCL_WITH_MPI=0`` in the checkout's build tree, which the suite's
setup already filled, into a folder of its own (``--build-lib``): the compile commands are the
same as the main build's (setup.py keeps MPI's include folders), so only
csrc/transport/without_mpi/no_mpi.cpp compiles and the link leaves libmpi out (seconds).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi_launch import ROOT, mpirun, torchrun

SMOKE = r"""
import os, sys
import torch, torch.distributed as dist
import zccl_torch
from zccl_torch import backend

assert not zccl_torch.mpi_transport_built()
assert backend.transport() == "tcp", backend.transport()
dist.init_process_group("zccl")
rank, p = dist.get_rank(), dist.get_world_size()
n = (1 << 16) + 7
eb = 1e-3
zccl_torch.config(error_bound=eb, mode="abs")

# float SUM, compressed: within p * eb of the exact sum (the ring's documented bound), every
# rank holding the same bits ...
x = torch.sin(torch.arange(n, dtype=torch.float32) * 0.01 + rank)
exact = sum(torch.sin(torch.arange(n, dtype=torch.float64) * 0.01 + r) for r in range(p))
dist.all_reduce(x)
assert zccl_torch.last_stats()["bytes_compressed"] > 0
err = float((x.double() - exact).abs().max())
assert err <= p * eb, err
# ... which all_gather shows: every rank's copy of the sum coded to the same stream
gathered = [torch.empty_like(x) for _ in range(p)]
dist.all_gather(gathered, x)
assert all(torch.equal(g, gathered[0]) for g in gathered)
assert float((gathered[0].double() - x.double()).abs().max()) <= eb

# integers travel exactly
i = torch.arange(n, dtype=torch.int64) * (rank + 1)
dist.all_reduce(i)
assert torch.equal(i, torch.arange(n, dtype=torch.int64) * (p * (p + 1) // 2))

# broadcast from the last rank, within eb of the root's values
b = torch.cos(torch.arange(n, dtype=torch.float32) * 0.02) if rank == p - 1 else torch.zeros(n)
dist.broadcast(b, src=p - 1)
want = torch.cos(torch.arange(n, dtype=torch.float64) * 0.02)
assert float((b.double() - want).abs().max()) <= eb

dist.destroy_process_group()
from zccl_torch._native import _C
assert not _C.mpi_is_initialized()
maps = open("/proc/self/maps").read()
assert "libmpi" not in maps, [l for l in maps.splitlines() if "libmpi" in l][:3]
print(f"NO-MPI OK rank {rank} of {p} from {zccl_torch.__file__} END", flush=True)
"""

ASK_FOR_MPI = r"""
import torch.distributed as dist
import zccl_torch
try:
    dist.init_process_group("zccl")
except Exception as exc:
    print(f"RAISED {type(exc).__name__}: {exc} END", flush=True)
    raise SystemExit(0)
raise SystemExit("created a group over a transport this build does not have")
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zccl_torch package built without Open MPI, outside the checkout: its Python files and
    the extension ``setup.py build_ext`` made with ``ZCCL_WITH_MPI=0``."""
    tmp = tmp_path_factory.mktemp("without_mpi")
    lib = tmp / "lib"
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--build-lib", str(lib)],
        cwd=ROOT,
        env={**os.environ, "ZCCL_WITH_MPI": "0"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    # The objects of the main build were reused (a full build recompiles ~50 files).
    compiled = re.findall(r"^\[\d+/\d+\] \S*(?:c\+\+|g\+\+|nvcc)", done.stdout, re.MULTILINE)
    assert len(compiled) <= 3, done.stdout[-4000:]
    (so,) = (lib / "zccl_torch").glob("_C*.so")
    pkg = tmp / "site" / "zccl_torch"
    skip = shutil.ignore_patterns("_C*.so", "__pycache__")
    shutil.copytree(ROOT / "zccl_torch", pkg, ignore=skip)
    shutil.copy(so, pkg / so.name)
    return pkg.parent


def needed_libraries(so: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(so)], check=True, capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


def test_links_no_mpi_library(package: Path) -> None:
    (so,) = (package / "zccl_torch").glob("_C*.so")
    needed = needed_libraries(so)
    assert any(n.startswith("libtorch") for n in needed), needed  # the parse found the list
    assert not [n for n in needed if "mpi" in n or "open-" in n], needed
    (main_so,) = (ROOT / "zccl_torch").glob("_C*.so")
    assert any(n.startswith("libmpi") for n in needed_libraries(main_so))  # the check can fail


def test_imports_where_libmpi_cannot_load(package: Path, tmp_path: Path) -> None:
    # A broken libmpi.so.40 first on the loader's path: the MPI build fails to import with it
    # (tests/test_install.py), this one never asks for it.
    (tmp_path / "libmpi.so.40").write_bytes(b"")
    code = "import zccl_torch; print(zccl_torch.mpi_transport_built(), zccl_torch.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": str(package)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.startswith(f"False {package}"), done.stdout


def run_smoke(
    launch: str, nprocs: int, package: Path, tmp_path: Path, script: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``script`` on ``nprocs`` ranks launched by ``launch`` with the package built without MPI."""
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {"PYTHONPATH": str(package), **env}
    if launch == "mpirun":
        return mpirun(nprocs, [sys.executable, str(path)], 300, env)
    return torchrun(nprocs, [str(path)], 300, env)


@pytest.mark.parametrize(("launch", "nprocs"), [("torchrun", 3), ("mpirun", 2), ("mpirun", 5)])
def test_collectives_over_tcp(launch: str, nprocs: int, package: Path, tmp_path: Path) -> None:
    done = run_smoke(launch, nprocs, package, tmp_path, SMOKE)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    ranks = re.findall(rf"NO-MPI OK rank (\d+) of {nprocs} from (\S+) END", done.stdout)
    assert sorted(int(r) for r, _ in ranks) == list(range(nprocs)), report[-6000:]
    assert all(f.startswith(str(package)) for _, f in ranks), ranks


def test_asking_for_mpi_fails_on_every_rank(package: Path, tmp_path: Path) -> None:
    done = run_smoke("mpirun", 3, package, tmp_path, ASK_FOR_MPI, ZCCL_TRANSPORT="mpi")
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    raised = re.findall(r"RAISED (\w+): (.*?) END", done.stdout)
    assert len(raised) == 3, report[-6000:]
    assert all("has no Open MPI transport" in text for _, text in raised), raised
    assert all("ZCCL_TRANSPORT=tcp" in text for _, text in raised), raised
    # Each rank raised its own error once all had read the verdict: rank 0, the store's host, no
    # longer raised alone and took the store down under the others ("Failed to recv").
    assert all(kind == "RuntimeError" for kind, _ in raised), raised


def setup_choice(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``setup.py --name`` (no compiling) under ``env``: what the build decides about MPI."""
    full = {k: v for k, v in os.environ.items() if k not in ("MPICC", "ZCCL_WITH_MPI")}
    return subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=ROOT,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_setup_builds_without_mpi_when_mpicc_is_missing(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-mpicc")
    auto = setup_choice(tmp_path, MPICC=missing)
    assert auto.returncode == 0, auto.stderr[-2000:]
    assert "building WITHOUT the Open MPI transport" in auto.stderr, auto.stderr[-2000:]
    required = setup_choice(tmp_path, MPICC=missing, ZCCL_WITH_MPI="1")
    assert required.returncode != 0
    assert "ZCCL_WITH_MPI=1 but" in required.stderr and "not found" in required.stderr
    with_mpicc = setup_choice(tmp_path)
    assert with_mpicc.returncode == 0 and "WITHOUT" not in with_mpicc.stderr
    bad = setup_choice(tmp_path, ZCCL_WITH_MPI="yes")
    assert bad.returncode != 0 and "ZCCL_WITH_MPI must be auto, 0 or 1" in bad.stderr


def test_only_the_mpi_transport_includes_mpi_headers() -> None:
    """No file a build without MPI compiles reaches mpi.h through its includes (there MPI's
    include folders are absent, and such a file would not compile); this also keeps a build
    against another MPI to recompiling the transport alone (setup.py, mpi_compile_args)."""
    csrc = ROOT / "csrc"
    include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)

    def reaches_mpi(path: Path, seen: set[Path]) -> list[str]:
        for name in include.findall(path.read_text()):
            if name in ("mpi.h", "mpi-ext.h", "zccl_mpi.h"):
                return [path.name, name]
            target = (path.parent / name).resolve()
            if target.is_file() and target not in seen and csrc in target.parents:
                seen.add(target)
                chain = reaches_mpi(target, seen)
                if chain:
                    return [path.name, *chain]
        return []

    mpi_side = re.compile(r"transport/mpi_\w+\.(cpp|h)$")
    checked = 0
    for path in sorted([*csrc.rglob("*.cpp"), *csrc.rglob("*.cu")]):
        if mpi_side.search(path.as_posix()):
            continue
        checked += 1
        assert not reaches_mpi(path, set()), (path, reaches_mpi(path, set()))
    assert checked > 40
    # and the check can fail: the MPI transport itself reaches mpi.h
    assert reaches_mpi(csrc / "transport" / "mpi_groups.cpp", set())[-1] in ("mpi.h", "zccl_mpi.h")


def test_setup_names_a_wrapper_it_cannot_read(tmp_path: Path) -> None:
    """An MPICC that answers neither Open MPI's --showme nor MPICH's -show: a clear error naming
    it, not a traceback (MPICH's wrapper is read through -show: tests/test_mpich.py)."""
    wrapper = tmp_path / "mpicc"
    wrapper.write_text("#!/bin/sh\necho 'unknown option' >&2\nexit 3\n")
    wrapper.chmod(0o755)
    done = setup_choice(tmp_path, MPICC=str(wrapper))
    assert done.returncode != 0
    assert f"cannot read the MPI flags from {wrapper}" in done.stderr, done.stderr[-2000:]
    assert "unknown option" in done.stderr and "ZCCL_WITH_MPI=0" in done.stderr
