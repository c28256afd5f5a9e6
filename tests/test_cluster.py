"""The emulated cluster of benchmarks/cluster/: up, MPI/zccl/Gloo across namespaces, down.

Needs root and network namespaces (as the benchmarks do); elsewhere the tests skip and say why.
Uses its own names and subnet so it never touches a benchmark's cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.mpi_launch import ROOT
from tests.test_transport_tcp import digests

CLUSTER = ROOT / "benchmarks" / "cluster" / "cluster.sh"
MPIRUN = ROOT / "benchmarks" / "cluster" / "mpirun_cluster.sh"
TORCHRUN = ROOT / "benchmarks" / "cluster" / "torchrun_cluster.sh"
ENV = {
    "ZC_PREFIX": "zt",
    "ZC_NET": "10.79.0",
    "ZC_STATE_DIR": "/run/zccl-cluster-test",
    "MASTER_PORT": "29571",
}


def _netns_usable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = subprocess.run(["ip", "netns", "add", "zt-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "zt-probe"], capture_output=True)
    return None


REASON = _netns_usable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def run(args: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **ENV, **env}
    return subprocess.run(args, cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("zt-")]


@pytest.fixture
def cluster():
    up = run([str(CLUSTER), "up", "3", "200mbit"])
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield
    finally:
        down = run([str(CLUSTER), "down"])
        assert down.returncode == 0, down.stderr
        assert namespaces() == [], f"left behind: {namespaces()}"


def test_ranks_run_in_shaped_namespaces(cluster):
    status = run([str(CLUSTER), "status"])
    assert "zt-h2: 10.79.0.12/24" in status.stdout and "rate 200Mbit" in status.stdout
    result = run(
        [str(MPIRUN), "-np", "3", sys.executable, "tests/mpi/cluster_checks.py"],
        timeout=300,
        ZC_TEST_SUBNET="10.79.0.0/24",
        ZC_TEST_RATE_BPS="2e8",
        PYTHONPATH=str(ROOT),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "CLUSTER OK 3 ranks" in result.stdout


def test_torchrun_per_host_gives_the_mpirun_results(cluster):
    """One torchrun per emulated host, joined by c10d rendezvous (the TCP transport), against
    mpirun on the same cluster (Open MPI): every bound holds and every compressed output is the
    same bits (tests/mpi/launch_checks.py)."""
    script = "tests/mpi/launch_checks.py"
    by_torchrun = run(
        [str(TORCHRUN), "-np", "3", script], timeout=300, PYTHONPATH=str(ROOT), ZC_RDZV_PORT="29572"
    )
    assert by_torchrun.returncode == 0, (by_torchrun.stdout + by_torchrun.stderr)[-4000:]
    assert by_torchrun.stdout.count("TRANSPORT tcp") == 3
    assert by_torchrun.stdout.count("LAUNCH OK") == 3
    by_mpirun = run(
        [str(MPIRUN), "-np", "3", sys.executable, script], timeout=300, PYTHONPATH=str(ROOT)
    )
    assert by_mpirun.returncode == 0, (by_mpirun.stdout + by_mpirun.stderr)[-4000:]
    assert by_mpirun.stdout.count("TRANSPORT mpi") == 3
    tcp, mpi = digests(by_torchrun.stdout), digests(by_mpirun.stdout)
    assert len(tcp) == 9 * 3 and tcp == mpi


@pytest.mark.parametrize(
    "args, words",
    [
        (["up", "2", "fast"], "must end in"),
        (["up", "0"], "N must be"),
        (["bogus"], "cluster.sh up"),
    ],
)
def test_bad_arguments_fail_clearly(args, words):
    result = run([str(CLUSTER), *args])
    assert result.returncode != 0
    assert words in result.stdout + result.stderr
    assert namespaces() == []


def test_mpirun_without_cluster_fails_clearly():
    run([str(CLUSTER), "down"])
    result = run([str(MPIRUN), "true"])
    assert result.returncode != 0 and "cluster is down" in result.stderr
