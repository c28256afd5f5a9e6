"""What an MPI launcher tells a rank, turned into the variables torch's ``env://`` rendezvous reads.

Open MPI's ``mpirun`` and the Hydra process manager of MPICH and its derivatives (``mpiexec`` of
MPICH, MVAPICH, Intel MPI) start every rank with its rank and the job's size in variables of
their own. ``import zccl_torch`` fills ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE`` from them where those are unset, and on one host also ``MASTER_ADDR``
(127.0.0.1) and a ``MASTER_PORT`` derived from the job's name, so ``mpirun -np 4 python
train.py`` needs no environment of its own. On several hosts the store's host is not something
a launcher says: set ``MASTER_ADDR`` and ``MASTER_PORT`` (or pass ``init_method``).

The variables, per launcher:

* Open MPI: ``OMPI_COMM_WORLD_RANK`` / ``_SIZE`` / ``_LOCAL_RANK`` / ``_LOCAL_SIZE``; the job is
  named by ``OMPI_MCA_ess_base_jobid`` (Open MPI 4) or ``PMIX_NAMESPACE`` (Open MPI 5).
* Hydra: ``PMI_RANK`` / ``PMI_SIZE`` / ``MPI_LOCALRANKID`` / ``MPI_LOCALNRANKS``. Hydra puts no
  job name in the environment, but it starts the ranks of a job on a host from one
  ``hydra_pmi_proxy`` process: the job is named by that ancestor's pid and start time (read from
  /proc, so a wrapper script between the proxy and Python changes nothing).
* Other launchers that speak PMI set ``PMI_RANK`` / ``PMI_SIZE`` too; their local rank and size
  are read from ``PMI_LOCAL_RANK`` / ``PMI_LOCAL_SIZE`` (Cray's PALS) or ``SLURM_LOCALID`` (Slurm's
  ``srun``, one host when ``SLURM_STEP_NUM_NODES`` is 1, the job ``SLURM_JOB_ID`` /
  ``SLURM_STEP_ID``). Only Open MPI and Hydra have run here.

Where no job name can be found, ``MASTER_PORT`` is left unset and torch's rendezvous says so.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

# MASTER_PORT derived under an MPI launcher on one host: 20000-31999, below Linux's default
# ephemeral range (32768-60999), where the kernel picks the local ports of outgoing connections
# and of listeners bound to port 0 (the TCP transport's): a port in that range can still be held
# in TIME_WAIT when the next job's store binds it (EADDRINUSE; the other ranks then wait for a
# store that never comes).
PORT_BASE, PORT_SPAN = 20000, 12000

# The process Hydra runs on each host of a job, whose children are that host's ranks.
HYDRA_PROXY = "hydra_pmi_proxy"

Environ = MutableMapping[str, str]


@dataclass(frozen=True)
class MpiLaunch:
    """A rank's place in a job as its MPI launcher describes it."""

    launcher: str  # "Open MPI", "Hydra" or "PMI" (another PMI launcher: srun, Cray's PALS)
    rank: int
    size: int
    local_rank: int
    local_size: int | None  # None: the launcher does not say
    job: str | None  # the same on every rank of the job on this host; None: unknown

    @property
    def single_host(self) -> bool:
        """Whether every rank of the job runs on this host."""
        return self.local_size == self.size


def _int(env: Environ, name: str, default: int | None = None) -> int | None:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"zccl: the launcher variable {name}={value!r} is not an integer"
        ) from None


def _first_int(env: Environ, *names: str) -> int | None:
    """The first of the variables ``names`` that is set, as an integer (None: none is)."""
    for name in names:
        value = _int(env, name)
        if value is not None:
            return value
    return None


def _proc_stat(pid: int) -> tuple[str, int, str] | None:
    """(command name, parent pid, start time) of process ``pid`` from /proc, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ... starttime ...": comm may hold spaces and parentheses.
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 0 or close_at < 0:
        return None
    fields = text[close_at + 2 :].split()
    if len(fields) < 20:
        return None
    return text[open_at + 1 : close_at], int(fields[1]), fields[19]


def hydra_job(pid: int | None = None, max_depth: int = 32) -> str | None:
    """The name of the Hydra job this process belongs to: its nearest ``hydra_pmi_proxy``
    ancestor's host, pid and start time (pids are reused, a pid with its start time is not).
    None when there is no such ancestor (or no /proc)."""
    pid = os.getpid() if pid is None else pid
    for _ in range(max_depth):
        stat = _proc_stat(pid)
        if stat is None:
            return None
        comm, parent, start = stat
        if comm.startswith(HYDRA_PROXY[:15]):  # the kernel keeps 15 characters of a name
            return f"hydra-{socket.gethostname()}-{pid}-{start}"
        if parent <= 1:
            return None
        pid = parent
    return None


# Set by an MPI launcher (also PMIx-only ones, such as srun --mpi=pmix, whose ranks mpi_launch
# cannot place).
MPI_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")


def started_by_mpi(env: Environ | None = None) -> bool:
    """Whether an MPI launcher started this process."""
    env = os.environ if env is None else env
    return any(v in env for v in MPI_LAUNCH_VARS)


def mpi_launch(env: Environ | None = None) -> MpiLaunch | None:
    """What the MPI launcher that started this process says about it; None when no MPI launcher
    did (torchrun, a plain ``python``)."""
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_RANK" in env:
        size = _int(env, "OMPI_COMM_WORLD_SIZE")
        if size is None:
            raise ValueError("zccl: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not")
        return MpiLaunch(
            launcher="Open MPI",
            rank=_int(env, "OMPI_COMM_WORLD_RANK") or 0,
            size=size,
            local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0) or 0,
            local_size=_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1),
            job=env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE") or "0",
        )
    if "PMI_RANK" in env:
        size = _int(env, "PMI_SIZE")
        if size is None:
            raise ValueError("zccl: PMI_RANK is set but PMI_SIZE is not")
        local_size = _first_int(env, "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE")
        if local_size is None and env.get("SLURM_STEP_NUM_NODES") == "1":
            local_size = size
        job = hydra_job()
        if job is None and "SLURM_JOB_ID" in env:
            job = f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
        hydra = "MPI_LOCALRANKID" in env or (job is not None and job.startswith("hydra-"))
        return MpiLaunch(
            launcher="Hydra" if hydra else "PMI",
            rank=_int(env, "PMI_RANK") or 0,
            size=size,
            local_rank=_first_int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID") or 0,
            local_size=local_size,
            job=job,
        )
    return None


def derived_master_port(job: str) -> int:
    """The store's port for job ``job`` on one host: the same on every rank of the job, and
    spread over the whole range between concurrent jobs.

    Open MPI 4's job ids are ``family << 16 | n`` (the family a 16-bit hash of mpirun's host and
    pid), Open MPI 5's namespaces ``prterun-HOST-PID@1``. The job id taken modulo the range, as
    before, put every Open MPI 4 job on one of only 375 ports (65536 = 5536 mod 12000, and 5536
    and 12000 share the factor 32): two jobs run side by side on one host then met in one store
    about once in 375. A hash of the name reaches all 12000 ports. Colliding jobs still fail
    clearly (the second one's store cannot bind the port, and its other ranks find the first
    job's ranks in the store: membership.py), never mix.
    """
    digest = hashlib.blake2b(job.encode(), digest_size=8).digest()
    return PORT_BASE + int.from_bytes(digest, "little") % PORT_SPAN


def set_launch_defaults(env: Environ | None = None) -> MpiLaunch | None:
    """Fills RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE (and MASTER_* on one host) from the MPI
    launcher's variables where they are unset; returns what the launcher said (None: none)."""
    env = os.environ if env is None else env
    launch = mpi_launch(env)
    if launch is None:
        return None
    env.setdefault("RANK", str(launch.rank))
    env.setdefault("WORLD_SIZE", str(launch.size))
    env.setdefault("LOCAL_RANK", str(launch.local_rank))
    if launch.local_size is not None:
        env.setdefault("LOCAL_WORLD_SIZE", str(launch.local_size))
    if launch.launcher == "Open MPI":
        # Open MPI 4.1's shared-memory single-copy (CMA) path writes past a receive buffer when
        # a larger message than posted arrives (before reporting MPI_ERR_TRUNCATE). Mismatched
        # sizes must give an error, never memory corruption, so single copy is off unless the
        # user says so.
        env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    if launch.single_host:
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        if launch.job is not None:
            env.setdefault("MASTER_PORT", str(derived_master_port(launch.job)))
    return launch


# The MPI libraries whose ranks each launcher starts (by MPI_Get_library_version): ranks of a
# library of another family each initialise MPI as a world of their own.
_LIBRARIES_OF = {
    "Open MPI": ("Open MPI",),
    "Hydra": ("MPICH", "MVAPICH", "Intel(R) MPI"),
}
_LAUNCHER_NAMES = {
    "Open MPI": "Open MPI's mpirun",
    "Hydra": "Hydra (the mpiexec of MPICH, MVAPICH or Intel MPI)",
}


def library_mismatch(launch: MpiLaunch | None, library_version: str) -> str | None:
    """Why the MPI library ``library_version`` (its MPI_Get_library_version text) cannot carry
    the ranks ``launch`` describes; None when it can, or when that is not known (no launcher,
    no MPI library, a launcher or library not listed)."""
    if launch is None or not library_version.strip():
        return None
    libraries = _LIBRARIES_OF.get(launch.launcher)
    if libraries is None or any(name in library_version for name in libraries):
        return None
    known = [n for names in _LIBRARIES_OF.values() for n in names if n in library_version]
    if not known:
        return None
    library = " ".join(library_version.strip().splitlines()[0].split(",")[0].split())
    return (
        f"zccl: this job was started by {_LAUNCHER_NAMES[launch.launcher]}, but this zccl build "
        f"links {library}: over MPI each rank would be a world of its own"
    )
