"""The TCP transport: zccl groups launched without mpirun (torchrun), and the whole multi-rank
check suite run over our own TCP connections instead of Open MPI (``ZCCL_TRANSPORT=tcp`` under
mpirun, so mpi4py still gives the reference values where a check needs MPI's own result).

torchrun and mpirun must give the same compressed results bit for bit: the algorithms are the
same, only the carrier of the bytes differs (tests/mpi/launch_checks.py prints digests).
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.mpi_launch import assert_every_check_passed, mpirun, python_argv, torchrun
from zccl_torch import backend, launcher

TCP = {"ZCCL_TRANSPORT": "tcp"}
DIGEST = re.compile(r"DIGEST (\S+) (\d+) ([0-9a-f]{16})")


def digests(report: str) -> dict[tuple[str, int], str]:
    return {(name, int(r)): h for name, r, h in DIGEST.findall(report)}


@pytest.mark.parametrize("nprocs", [1, 2, 3, 5])
def test_backend_checks_over_tcp(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv("tests/mpi/backend_checks.py"), 600, TCP)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert_every_check_passed(done.stdout, nprocs)


@pytest.mark.parametrize("nprocs", [3, 4])
def test_conformance_over_tcp(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv("tests/mpi/conformance_checks.py"), 600, TCP)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert_every_check_passed(done.stdout, nprocs)


@pytest.mark.parametrize(
    ("check", "nprocs", "marker"),
    [
        ("timeout", 2, "TIMEOUT RAISED"),
        ("p2p_timeout", 2, "P2P TIMEOUT RAISED"),
        ("monitored_barrier", 4, "MONITORED BARRIER OK"),
        ("transport_error", 3, "TRANSPORT ERROR RAISED"),
    ],
)
def test_lifecycle_over_tcp(check: str, nprocs: int, marker: str) -> None:
    done = mpirun(nprocs, python_argv("tests/mpi/lifecycle_checks.py", check), 180, TCP)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert marker in done.stdout, (done.stdout + done.stderr)[-6000:]


def launch_3(
    launch: str, script: str, args: list[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``script args`` on 3 ranks: ``torchrun``, or ``mpirun-mpi`` / ``mpirun-tcp`` (mpirun with
    that ZCCL_TRANSPORT)."""
    if launch == "torchrun":
        return torchrun(3, [script, *args], timeout)
    transport = launch.removeprefix("mpirun-")
    return mpirun(3, python_argv(script, *args), timeout, {"ZCCL_TRANSPORT": transport})


@pytest.mark.parametrize(
    ("launch", "variable", "value", "expected"),
    [
        (
            "mpirun-tcp",
            "ZCCL_SOCKET_IFNAME",
            "zccl-none0",
            "ValueError: ZCCL_SOCKET_IFNAME='zccl-none0': no",
        ),
        ("mpirun-tcp", "ZCCL_ERROR_BOUND", "-1", "ValueError: "),
        ("mpirun-mpi", "ZCCL_TRANSPORT", "gloo", "ValueError: ZCCL_TRANSPORT must be one of"),
        (
            "mpirun-mpi",
            "ZCCL_ABORT_ON_EXCEPTION",
            "maybe",
            "ValueError: ZCCL_ABORT_ON_EXCEPTION='maybe'",
        ),
        (
            "torchrun",
            "ZCCL_SOCKET_IFNAME",
            "zccl-none0",
            "ValueError: ZCCL_SOCKET_IFNAME='zccl-none0': no",
        ),
    ],
)
def test_a_rank_that_cannot_take_part_fails_every_rank_at_once(
    launch: str, variable: str, value: str, expected: str
) -> None:
    """One rank cannot take part in a new group (its listener's interface does not exist, a
    setting is invalid on that host): it raises its own error and the other two, within seconds,
    the same error naming it; before, they waited for it until the group's timeout. Under
    mpirun the store lives in rank 0's process, under torchrun in the agent's."""
    args = ["one_rank_cannot_create", variable, value, expected]
    done = launch_3(launch, "tests/mpi/lifecycle_checks.py", args, 120)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert done.stdout.count("OWN ERROR RAISED ValueError") == 1, report[-6000:]
    raised = re.findall(r"VERDICT RAISED ([0-9a-f]{16})", done.stdout)
    assert len(raised) == 2 and len(set(raised)) == 1, report[-6000:]


def test_torchrun_matches_mpirun_bit_for_bit() -> None:
    """3 ranks on one host: torchrun (no MPI variables, nothing extra set) picks the TCP
    transport, mpirun Open MPI; every bound holds under both and every output is identical."""
    script = "tests/mpi/launch_checks.py"
    by_torchrun = torchrun(3, [script], 300)
    report = by_torchrun.stdout + by_torchrun.stderr
    assert by_torchrun.returncode == 0, report[-8000:]
    assert by_torchrun.stdout.count("LAUNCH OK") == 3, report[-8000:]
    assert by_torchrun.stdout.count("TRANSPORT tcp") == 3, report[-4000:]
    by_mpirun = mpirun(3, python_argv(script), 300)
    assert by_mpirun.returncode == 0, (by_mpirun.stdout + by_mpirun.stderr)[-8000:]
    assert by_mpirun.stdout.count("TRANSPORT mpi") == 3
    tcp, mpi = digests(by_torchrun.stdout), digests(by_mpirun.stdout)
    # 2 all_reduce + 3 broadcast + all_gather, reduce_scatter, scatter, sendrecv, on 3 ranks
    assert len(tcp) == 9 * 3, sorted(tcp)
    assert tcp == mpi


@pytest.mark.parametrize("launch", ["torchrun", "mpirun-mpi", "mpirun-tcp"])
def test_groups_recreated_in_one_process(launch: str) -> None:
    """init_process_group / new_group / destroy_process_group three times in one process, a
    rank arriving late each time: under torchrun the store outlives the groups, and the third
    creation hung (the second found the first's keys: arrival count, verdict, TCP addresses)."""
    done = launch_3(launch, "tests/mpi/recreate_groups.py", [], 180)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert sorted(re.findall(r"recreate ok rank (\d) of 3", done.stdout)) == ["0", "1", "2"]


def test_exit_without_destroy_process_group() -> None:
    """A torchrun script that returns without destroy_process_group exits with 0, every time.
    The backend's threads used to drop their references to the last op's tensors after
    completing it, racing the interpreter's finalization: 6 of 10 runs of this script (3 ranks)
    ended in std::terminate (exit code 134) after correct results. Ten runs, none may abort;
    two at a time (each torchrun takes a free port of its own), which also varies the timing."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(
            pool.map(lambda _: torchrun(3, ["tests/mpi/exit_without_destroy.py"], 120), range(10))
        )
    for attempt, done in enumerate(runs):
        report = done.stdout + done.stderr
        assert done.returncode == 0, f"run {attempt}: {report[-6000:]}"
        assert done.stdout.count("exit without destroy: ok") == 3, report[-4000:]
        assert "terminate called" not in report, report[-4000:]


def test_transport_choice() -> None:
    assert backend.transport({}) == "tcp"
    assert backend.transport({"OMPI_COMM_WORLD_SIZE": "4"}) == "mpi"
    assert backend.transport({"PMIX_RANK": "0"}) == "mpi"
    assert backend.transport({"ZCCL_TRANSPORT": "tcp", "OMPI_COMM_WORLD_SIZE": "4"}) == "tcp"
    assert backend.transport({"ZCCL_TRANSPORT": "MPI"}) == "mpi"
    with pytest.raises(ValueError, match="ZCCL_TRANSPORT must be one of"):
        backend.transport({"ZCCL_TRANSPORT": "gloo"})
    # A build without Open MPI: mpirun's launch goes over TCP; an explicit "mpi" is kept, and
    # creating a group then fails on every rank (tests/test_build_without_mpi.py).
    assert backend.transport({"OMPI_COMM_WORLD_SIZE": "4"}, mpi_built=False) == "tcp"
    assert backend.transport({"OMPI_COMM_WORLD_SIZE": "4"}, mpi_built=True) == "mpi"
    assert backend.transport({"ZCCL_TRANSPORT": "mpi"}, mpi_built=False) == "mpi"
    assert backend.mpi_transport_built()  # this checkout's build has it


def test_derived_master_ports_of_concurrent_jobs_spread_over_the_whole_range() -> None:
    """Jobs run side by side on one host meet in one store when their derived ports collide (the
    second then fails). Open MPI 4's job ids are ``family << 16 | 1`` (a 16-bit family per
    mpirun); taken modulo the range they gave only 375 distinct ports. Every family, and Open MPI
    5's namespaces for consecutive mpirun pids, must reach nearly all 12000."""

    def port(job: str, variable: str = "OMPI_MCA_ess_base_jobid") -> int:
        env = {
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            variable: job,
        }
        launcher.set_launch_defaults(env)
        return int(env["MASTER_PORT"])

    ompi4 = {port(str(family << 16 | 1)) for family in range(1 << 16)}
    ompi5 = {port(f"prterun-node7-{pid}@1", "PMIX_NAMESPACE") for pid in range(4000, 40000)}
    for ports in (ompi4, ompi5):
        assert min(ports) == launcher.PORT_BASE
        assert max(ports) == launcher.PORT_BASE + launcher.PORT_SPAN - 1
        # 65536 and 36000 names thrown into 12000 ports leave 0.4 % and 5 % of them empty.
        assert len(ports) > 0.9 * launcher.PORT_SPAN, len(ports)


def test_derived_master_port_is_below_the_ephemeral_range() -> None:
    """Under mpirun on one host MASTER_PORT is derived from the job id. It must stay below the
    kernel's ephemeral ports: the TCP transport's listeners and every outgoing connection take
    those, and one still in TIME_WAIT made the next job's store fail with EADDRINUSE."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except OSError:
        pass
    for job in ("0", "1", "4242", "99999", "3218473985", "prterun-host-12345@1"):
        env = {
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMPI_MCA_ess_base_jobid": job,
        }
        launcher.set_launch_defaults(env)
        port = int(env["MASTER_PORT"])
        assert 1024 < port and port + 1 < low, (job, port)  # +1: a second group's store
