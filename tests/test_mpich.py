"""zccl built against MPICH and launched by MPICH's Hydra ``mpiexec``: the same checks as under
Open MPI pass (backend, conformance, dtypes, lifecycle), ``import zccl_torch`` fills the
rendezvous from Hydra's variables, and a build whose MPI is not the launcher's falls back to
the TCP transport with a warning (or, asked for MPI by name, raises on every rank).

The extension is built with ``MPICC=mpicc.mpich scripts/build_with_mpi.sh`` in the checkout's
build tree into a folder of its own: only MPI's five transport files see MPI's headers
(setup.py, mpi_compile_args), so only they recompile (seconds), and the link takes libmpich.
Runs where Debian's MPICH is installed beside Open MPI (``scripts/test.sh`` installs ``mpich``
and ``libmpich-dev``; Open MPI stays the default ``mpicc``/``mpirun``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi_launch import (
    ROOT,
    assert_every_check_passed,
    mpirun,
    python_argv,
    run_bounded,
    torchrun_env,
)
from tests.test_build_without_mpi import needed_libraries

MPICH_CC = shutil.which("mpicc.mpich")
MPIEXEC = shutil.which("mpiexec.mpich")
pytestmark = pytest.mark.skipif(
    MPICH_CC is None or MPIEXEC is None,
    reason="MPICH is not installed (scripts/test.sh installs it: apt-get install mpich "
    "libmpich-dev)",
)
TRANSPORT_FILES = {
    f"csrc/transport/mpi_{name}.cpp" for name in ("comm", "exact", "groups", "info", "runtime")
}


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zccl_torch package whose extension links MPICH, outside the checkout
    (scripts/build_with_mpi.sh)."""
    tmp = tmp_path_factory.mktemp("mpich")
    done = subprocess.run(
        [str(ROOT / "scripts" / "build_with_mpi.sh"), str(tmp)],
        cwd=ROOT,
        env={**torchrun_env(), "MPICC": str(MPICH_CC), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    compiled = set(re.findall(r"^\[\d+/\d+\] .* -c (?:\S*/)?(csrc/\S+\.cpp)", done.stdout, re.M))
    # The transport alone (the main build compiled it against Open MPI; nothing when the tree's
    # objects are MPICH's already), warning-free.
    assert compiled <= TRANSPORT_FILES, (compiled, done.stdout[-3000:])
    assert "warning" not in done.stdout + done.stderr, done.stdout[-4000:]
    (so,) = (tmp / "site" / "zccl_torch").glob("_C*.so")
    needed = needed_libraries(so)
    assert any(n.startswith("libmpich") for n in needed), needed
    assert not any(n.startswith("libmpi.so") for n in needed), needed
    return tmp / "site"


@pytest.fixture(scope="module")
def mpich_abi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``libmpi.so.12``: the checks' mpi4py references load MPICH under its
    upstream name (mpi4py's wheel, ``MPI4PY_MPIABI=mpich``), which Debian calls
    ``libmpich.so.12``."""
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True)
    paths = re.findall(r"libmpich\.so\.12 \(libc6,x86-64\) => (\S+)", found.stdout)
    assert paths, "libmpich.so.12 not found by ldconfig"
    folder = tmp_path_factory.mktemp("mpich_abi")
    (folder / "libmpi.so.12").symlink_to(paths[0])
    return folder


def mpiexec(
    nprocs: int,
    argv: list[str],
    package: Path | None,
    abi: Path,
    timeout: float = 300,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``mpiexec.mpich -n nprocs argv`` with ``package`` (None: the checkout's Open MPI build)
    first on the path and nothing of Open MPI's launch in the environment."""
    env = torchrun_env()
    site = str(package) if package is not None else str(ROOT)
    env.update(
        PYTHONPATH=site,
        LD_LIBRARY_PATH=str(abi),
        MPI4PY_MPIABI="mpich",
        OMP_NUM_THREADS="1",
        **(extra_env or {}),
    )
    return run_bounded([str(MPIEXEC), "-n", str(nprocs), *argv], env, timeout)


@pytest.mark.parametrize("nprocs", [2, 3, 5])
def test_backend_checks_under_hydra(nprocs: int, package: Path, mpich_abi: Path) -> None:
    done = mpiexec(nprocs, python_argv("tests/mpi/backend_checks.py"), package, mpich_abi)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize(("script", "nprocs"), [("conformance", 4), ("dtype", 3)])
def test_conformance_and_dtypes_under_hydra(
    script: str, nprocs: int, package: Path, mpich_abi: Path
) -> None:
    """dtype_checks includes MIN/MAX of uint8/16/32/64 over their whole range, which MPICH
    4.0's own MPI_MIN/MPI_MAX got wrong (compared as signed) before zccl used its own."""
    argv = python_argv(f"tests/mpi/{script}_checks.py")
    done = mpiexec(nprocs, argv, package, mpich_abi)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize(
    ("check", "nprocs", "marker"),
    [
        ("rank_mismatch", 2, "MISMATCH RAISED"),
        ("timeout", 2, "TIMEOUT RAISED"),
        ("transport_error", 3, "TRANSPORT ERROR RAISED"),
        ("no_init_on_import", 3, "LIFECYCLE OK"),
    ],
)
def test_lifecycle_under_hydra(
    check: str, nprocs: int, marker: str, package: Path, mpich_abi: Path
) -> None:
    argv = python_argv("tests/mpi/lifecycle_checks.py", check)
    done = mpiexec(nprocs, argv, package, mpich_abi, timeout=180)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert marker in done.stdout, report[-6000:]


def test_uncaught_exception_ends_the_hydra_job(package: Path, mpich_abi: Path) -> None:
    """MPI_Abort at exit ends the job at once under Hydra too (the others would wait 300 s)."""
    argv = python_argv("tests/mpi/lifecycle_checks.py", "uncaught_exception")
    done = mpiexec(3, argv, package, mpich_abi, timeout=120)
    report = done.stdout + done.stderr
    assert done.returncode != 0, report[-6000:]
    assert report.count("FIRST ALL_REDUCE DONE") == 3, report[-6000:]
    assert "RuntimeError: rank 0 fails on purpose" in report, report[-6000:]
    assert "UNREACHABLE" not in report, report[-6000:]


LAUNCH = r"""
import os, sys
import torch, torch.distributed as dist
import zccl_torch
from zccl_torch import backend, launcher

launch = launcher.mpi_launch()
dist.init_process_group("zccl")
r, p = dist.get_rank(), dist.get_world_size()
x = torch.full((1 << 16,), float(r + 1))
dist.all_reduce(x)
assert torch.all(x == p * (p + 1) / 2), x[:4]
env = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                  "MASTER_ADDR", "MASTER_PORT")}
print(f"LAUNCH {launch.launcher.replace(' ', '_')} {backend.transport()} {launch.job} "
      f"{' '.join(f'{k}={v}' for k, v in env.items())} {zccl_torch.__file__} END", flush=True)
dist.destroy_process_group()
"""


def launches(report: str) -> list[list[str]]:
    return [line.split() for line in re.findall(r"LAUNCH (.*?) END", report)]


def test_import_fills_the_rendezvous_under_hydra(
    package: Path, mpich_abi: Path, tmp_path: Path
) -> None:
    """No environment but Hydra's: every rank gets RANK..MASTER_PORT, the same port, from the
    job's hydra_pmi_proxy, also behind a wrapper shell; two jobs are named apart."""
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH)
    direct = mpiexec(3, [sys.executable, str(script)], package, mpich_abi)
    assert direct.returncode == 0, (direct.stdout + direct.stderr)[-6000:]
    wrapped_cmd = ["/bin/sh", "-c", f'"{sys.executable}" "{script}"; true']
    wrapped = mpiexec(3, wrapped_cmd, package, mpich_abi)
    assert wrapped.returncode == 0, (wrapped.stdout + wrapped.stderr)[-6000:]
    jobs = []
    for done in (direct, wrapped):
        rows = launches(done.stdout)
        assert len(rows) == 3, done.stdout[-3000:]
        assert {row[0] for row in rows} == {"Hydra"} and {row[1] for row in rows} == {"mpi"}
        assert len({row[2] for row in rows}) == 1 and rows[0][2].startswith("hydra-"), rows
        ranks = sorted(next(f for f in row if f.startswith("RANK=")) for row in rows)
        assert ranks == ["RANK=0", "RANK=1", "RANK=2"], rows
        assert all("WORLD_SIZE=3" in row and "LOCAL_WORLD_SIZE=3" in row for row in rows)
        assert all("MASTER_ADDR=127.0.0.1" in row for row in rows)
        assert len({next(f for f in row if f.startswith("MASTER_PORT=")) for row in rows}) == 1
        assert all(row[-1].startswith(str(package)) for row in rows), rows
        jobs.append(rows[0][2])
    assert jobs[0] != jobs[1], jobs


def test_open_mpi_build_under_hydra_takes_tcp_or_raises(mpich_abi: Path, tmp_path: Path) -> None:
    """The checkout's build links Open MPI: under Hydra its MPI would make each rank a world of
    one. ``auto`` warns and runs over TCP; ``ZCCL_TRANSPORT=mpi`` raises on every rank."""
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH)
    done = mpiexec(3, [sys.executable, str(script)], None, mpich_abi)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    rows = launches(done.stdout)
    assert len(rows) == 3 and {row[1] for row in rows} == {"tcp"}, report[-4000:]
    assert report.count("links Open MPI") == 3 and "TCP transport instead" in report
    asked = mpiexec(
        2, [sys.executable, str(script)], None, mpich_abi, 120, {"ZCCL_TRANSPORT": "mpi"}
    )
    report = asked.stdout + asked.stderr
    assert asked.returncode != 0 and "LAUNCH" not in asked.stdout, report[-4000:]
    assert report.count("RuntimeError: zccl: this job was started by Hydra") == 2, report[-4000:]


def test_mpich_build_under_open_mpi_takes_tcp(package: Path, tmp_path: Path) -> None:
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH)
    done = mpirun(2, [sys.executable, str(script)], 180, {"PYTHONPATH": str(package)})
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    rows = launches(done.stdout)
    assert len(rows) == 2 and {(row[0], row[1]) for row in rows} == {("Open_MPI", "tcp")}, rows
    assert report.count("links MPICH Version: 4.") == 2, report[-4000:]
