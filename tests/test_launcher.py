"""What MPI launchers tell a rank (zccl_torch.launcher): Open MPI's mpirun, the Hydra mpiexec of
MPICH and its kin, other PMI launchers; the job name Hydra's process tree gives; and the
transport chosen when the build's MPI library is not the launcher's. The real launches are in
tests/test_mpich.py and test_backend_mpi.py."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from zccl_torch import backend, launcher

OPEN_MPI = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4"
MPICH = "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022"


@pytest.fixture
def hydra_job(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pretends this process runs under a hydra_pmi_proxy."""
    name = "hydra-node7-4242-98765"
    monkeypatch.setattr(launcher, "hydra_job", lambda: name)
    return name


@pytest.fixture
def no_hydra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "hydra_job", lambda: None)


def test_open_mpi_on_one_host_fills_the_rendezvous() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "2",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "OMPI_MCA_ess_base_jobid": "1234567",
    }
    got = launcher.set_launch_defaults(env)
    assert got == launcher.MpiLaunch("Open MPI", 2, 4, 2, 4, "1234567")
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (
        "2",
        "4",
        "2",
        "4",
    )
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["MASTER_PORT"] == str(launcher.derived_master_port("1234567"))
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"


def test_several_hosts_leave_the_store_address_to_the_user(hydra_job: str) -> None:
    ompi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8"}
    ompi["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4"
    hydra = {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"}
    for env in (ompi, hydra):
        launcher.set_launch_defaults(env)
        assert env["RANK"] == "5" and env["WORLD_SIZE"] == "8" and env["LOCAL_WORLD_SIZE"] == "4"
        assert "MASTER_ADDR" not in env and "MASTER_PORT" not in env


def test_hydra_on_one_host(hydra_job: str) -> None:
    env = {"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"}
    got = launcher.set_launch_defaults(env)
    assert got == launcher.MpiLaunch("Hydra", 1, 3, 1, 3, hydra_job)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3"
    assert env["LOCAL_RANK"] == "1" and env["LOCAL_WORLD_SIZE"] == "3"
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["MASTER_PORT"] == str(launcher.derived_master_port(hydra_job))
    assert "OMPI_MCA_btl_vader_single_copy_mechanism" not in env  # Open MPI's alone


def test_what_the_user_set_is_kept(hydra_job: str) -> None:
    env = {"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"}
    env |= {"RANK": "0", "MASTER_PORT": "29500", "MASTER_ADDR": "node0"}
    launcher.set_launch_defaults(env)
    assert (env["RANK"], env["MASTER_PORT"], env["MASTER_ADDR"]) == ("0", "29500", "node0")


def test_without_a_job_name_no_port_is_made_up(no_hydra: None) -> None:
    """A PMI launcher that names no job: MASTER_PORT stays unset (torch's rendezvous then asks
    for it), rather than a port the ranks might not agree on."""
    env = {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    got = launcher.set_launch_defaults(env)
    assert got is not None and got.launcher == "Hydra" and got.job is None
    assert env["MASTER_ADDR"] == "127.0.0.1" and "MASTER_PORT" not in env


def test_other_pmi_launchers(no_hydra: None) -> None:
    pals = {"PMI_RANK": "3", "PMI_SIZE": "4", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "2"}
    assert launcher.mpi_launch(pals) == launcher.MpiLaunch("PMI", 3, 4, 1, 2, None)
    slurm = {"PMI_RANK": "2", "PMI_SIZE": "3", "SLURM_LOCALID": "2", "SLURM_JOB_ID": "77"}
    slurm |= {"SLURM_STEP_ID": "1", "SLURM_STEP_NUM_NODES": "1"}
    got = launcher.set_launch_defaults(slurm)
    assert got == launcher.MpiLaunch("PMI", 2, 3, 2, 3, "slurm-77.1")
    assert slurm["MASTER_PORT"] == str(launcher.derived_master_port("slurm-77.1"))


def test_no_launcher() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2"}  # torchrun's
    assert launcher.set_launch_defaults(env) is None
    assert env == {"RANK": "0", "WORLD_SIZE": "2"}


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"PMI_RANK": "0"}, "PMI_RANK is set but PMI_SIZE is not"),
        ({"PMI_RANK": "zero", "PMI_SIZE": "2"}, "PMI_RANK='zero' is not an integer"),
        ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE is not"),
    ],
)
def test_malformed_launcher_variables_are_named(
    env: dict[str, str], needle: str, no_hydra: None
) -> None:
    with pytest.raises(ValueError, match=needle):
        launcher.set_launch_defaults(env)


def run_under_fake_proxy(tmp_path: Path, wrapper: bool) -> tuple[str, int]:
    """hydra_job() in a Python started by a process named hydra_pmi_proxy (a shell under that
    name), directly or through a wrapper shell; returns its answer and the proxy's pid."""
    proxy = tmp_path / "hydra_pmi_proxy"
    if not proxy.exists():
        proxy.symlink_to("/bin/sh")
    code = "from zccl_torch import launcher; print(launcher.hydra_job())"
    python = f"{sys.executable} -c '{code}'"
    inner = f'/bin/sh -c "{python}; true"' if wrapper else python
    # "; true" keeps each shell alive as the parent instead of exec'ing its last command.
    script = f"echo $$; {inner}; true"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [str(proxy), "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr
    pid, job = done.stdout.split()
    return job, int(pid)


def test_hydra_job_is_named_by_the_proxy_ancestor(tmp_path: Path) -> None:
    direct, pid = run_under_fake_proxy(tmp_path, wrapper=False)
    assert direct.startswith("hydra-") and f"-{pid}-" in direct, (direct, pid)
    wrapped, pid2 = run_under_fake_proxy(tmp_path, wrapper=True)
    assert f"-{pid2}-" in wrapped, (wrapped, pid2)
    assert launcher.hydra_job() is None  # pytest runs under no proxy


def test_library_mismatch_is_named() -> None:
    hydra = launcher.MpiLaunch("Hydra", 0, 2, 0, 2, "hydra-x")
    ompi = launcher.MpiLaunch("Open MPI", 0, 2, 0, 2, "1")
    pmi = launcher.MpiLaunch("PMI", 0, 2, 0, 2, None)
    assert launcher.library_mismatch(hydra, MPICH) is None
    assert launcher.library_mismatch(ompi, OPEN_MPI) is None
    assert launcher.library_mismatch(hydra, "Intel(R) MPI Library 2021.10 for Linux* OS") is None
    text = launcher.library_mismatch(hydra, OPEN_MPI)
    assert text is not None and "Hydra" in text and "links Open MPI v4.1.4:" in text, text
    text = launcher.library_mismatch(ompi, MPICH)
    assert text is not None and "Open MPI's mpirun" in text and "MPICH Version: 4.0.2" in text
    # Unknown launchers or libraries: no verdict
    assert launcher.library_mismatch(pmi, OPEN_MPI) is None
    assert launcher.library_mismatch(hydra, "Some MPI 1.0") is None
    assert launcher.library_mismatch(None, OPEN_MPI) is None
    assert launcher.library_mismatch(hydra, "") is None


def test_transport_falls_back_to_tcp_when_the_build_links_another_mpi(
    hydra_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "_warned", set())
    hydra = {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    assert backend.transport(hydra, mpi_built=True, library=MPICH) == "mpi"
    with pytest.warns(RuntimeWarning, match="TCP transport instead"):
        assert backend.transport(hydra, mpi_built=True, library=OPEN_MPI) == "tcp"
    ompi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    assert backend.transport(ompi, mpi_built=True, library=OPEN_MPI) == "mpi"
    with pytest.warns(RuntimeWarning, match="links MPICH"):
        assert backend.transport(ompi, mpi_built=True, library=MPICH) == "tcp"
    # Asked for by name: kept (creating a group then raises, tests/test_mpich.py)
    asked = {**hydra, "ZCCL_TRANSPORT": "mpi"}
    assert backend.transport(asked, mpi_built=True, library=OPEN_MPI) == "mpi"
    # One warning per process: each group creation asks again.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backend.transport(hydra, mpi_built=True, library=OPEN_MPI) == "tcp"
