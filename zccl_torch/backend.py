"""Registration of the ``"zccl"`` torch.distributed backend.

``import zccl_torch`` registers it (idempotently). Launch with ``torchrun`` (zccl groups then
carry their bytes over their own TCP connections, set up through the group's store) or with an
MPI launcher: Open MPI's ``mpirun``, or the Hydra ``mpiexec`` of MPICH and its kin (over the MPI
library the build links when it is the launcher's, else over TCP); see :func:`transport`.
Under an MPI launcher on one host nothing else is needed: the launch variables torch's
``env://`` rendezvous wants (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are derived from the
launcher's when absent (zccl_torch.launcher). On several hosts, set MASTER_ADDR (a host all ranks
reach) and MASTER_PORT as usual, or pass ``init_method``. MPI itself is initialised only when
the first zccl group over MPI is created, never at import.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import fcntl
import os
import secrets
import socket
import struct
import sys
import threading
import time
import warnings
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from zccl_torch import launcher, link, membership, state_transfer
from zccl_torch._native import _C
from zccl_torch.config import Options, group_options, register_group_options

BACKEND_NAME = "zccl"
_incarnations: dict[str, int] = {}
_incarnations_lock = threading.Lock()


def _group_store(store: Any, group_id: str) -> Any:
    """The store this creation of group ``group_id`` rendezvouses in (membership, TCP addresses).

    torch gives a group re-created in the same process (``destroy_process_group`` then
    ``init_process_group`` again, or the same ``new_group`` sequence after it) the same store
    prefix, and under torchrun that store outlives the group: the first group's keys (its
    arrival count, its verdict, its TCP addresses and session) would answer the second's
    questions, and the second re-creation hung. Every rank creates its groups in the same order,
    so the k-th creation of a group name in this process is the k-th on every rank: the first
    uses the store as it is (the keys builds before this one used too), each later one a prefix
    of its own.
    """
    with _incarnations_lock:
        k = _incarnations.get(group_id, 0)
        _incarnations[group_id] = k + 1
    return store if k == 0 else dist.PrefixStore(f"zccl-incarnation-{k}/", store)


def _create(dist_opts: Any, pg_options: Any) -> Any:
    """Creator torch calls for each zccl process group (extended API)."""
    timeout = dist_opts.timeout
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    rank, size = int(dist_opts.group_rank), int(dist_opts.group_size)
    # Every member must be there, running the same build and choosing the same transport, before
    # the transport connects: MPI creates the group's communicator collectively and without a
    # deadline (one member that never comes would leave the others waiting forever), and ranks
    # of different builds or transports would fail later on one rank only, or hang
    # (membership.py).
    store = _group_store(dist_opts.store, str(dist_opts.group_id))
    try:
        group = _prepare(pg_options)
    except (TypeError, ValueError, RuntimeError, OSError) as exc:
        # This rank cannot take part (its settings, its transport): the others learn why from
        # the verdict and raise at once, naming it, instead of waiting for it until the group's
        # timeout; it raises its own error once they have read the verdict (the store may live
        # in this process).
        reason = f"{type(exc).__name__}: {exc}"
        try:
            membership.join_group(store, rank, size, seconds, cannot_create=reason)
        except Exception:  # the verdict, or a timeout: this rank's own error says more here
            pass
        raise
    membership.join_group(
        store, rank, size, seconds, transport=group.transport, measure_link=group.measure_link
    )
    if group.listener is not None:
        backend = _create_over_tcp(dist_opts, store, seconds, group.options, group.listener)
    else:
        backend = _C.create_backend(
            dist_opts.group_rank,
            dist_opts.group_size,
            [int(r) for r in dist_opts.global_ranks_in_group],
            str(dist_opts.group_id),
            seconds,
            group.options.to_native(),
        )
        if group.abort_on_exception:
            _install_abort_on_exception()
    options = group.options
    if group.measure_link and size > 1:
        options = _take_measured_link(backend, str(dist_opts.group_id), size, options)
    register_group_options(str(dist_opts.group_id), options)
    return backend


def _take_measured_link(backend: Any, group_id: str, size: int, options: Options) -> Options:
    """Measures the network of the group being created (ZCCL_MEASURE_LINK, zccl_torch/link.py)
    and makes it the backend's link defaults; returns ``options`` with them.

    In a build with the CUDA path torch creates a backend per device type for a group, and each
    measures (every rank creates them in the same order, so each backend's figures are the same
    on every rank); the group's options then show the last one's. Measuring once for both
    would need to know which creation a backend belongs to, which torch does not say."""
    estimate = link._measure(backend, size, link.DEFAULT_PROBE_BYTES)
    link.logger.info(
        "zccl group %s: measured link %.3g Gbit/s, %.3g us",
        group_id,
        estimate.gbps,
        estimate.latency_us,
    )
    _C.set_link_model(backend, estimate.gbps, estimate.latency_us)
    return dataclasses.replace(options, **estimate.settings())


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """What one rank decided, before the members meet, about the group it creates."""

    options: Options
    transport: str
    abort_on_exception: bool
    listener: Any  # the TCP transport's listener, opened before its address is published
    measure_link: bool  # ZCCL_MEASURE_LINK: measure the group's network once it is created


def _prepare(pg_options: Any) -> _Prepared:
    """This rank's options, transport and TCP listener for the group being created; raises when
    they are invalid or the transport cannot open here."""
    if pg_options is None:
        # The default group's options (its pg_options, else the environment's), so that the
        # bound set once in init_process_group holds on every group made from it, also those
        # made where no pg_options can be passed (DeviceMesh, new_subgroups, FSDP's hybrid
        # sharding). torch's split_group inherits its parent's options the same way; its
        # new_group starts from the backend's defaults, which for NCCL only tune speed, but
        # here set the accuracy. While the default group itself is created: the environment.
        options = group_options()
    elif isinstance(pg_options, Options):
        options = pg_options
    else:
        raise TypeError(
            f"pg_options for the zccl backend must be a zccl_torch.Options, got "
            f"{type(pg_options).__name__}"
        )
    chosen = transport()
    measure = link.measure_on_create()
    if chosen == "mpi" and not mpi_transport_built():
        # no_mpi.cpp's open_mpi_group would throw too, but after the members met.
        raise RuntimeError(_C.NO_MPI_TRANSPORT_MESSAGE)
    mismatch = None
    if chosen == "mpi":
        mismatch = launcher.library_mismatch(launcher.mpi_launch(), _library())
    if mismatch is not None:
        # Before MPI_Init: every rank would be rank 0 of a world of one.
        raise RuntimeError(
            f"{mismatch}. Launch with the mpirun of that MPI, rebuild zccl against the "
            "launcher's MPI (MPICC=<its mpicc> pip install --no-build-isolation .), or use the "
            "TCP transport (ZCCL_TRANSPORT=tcp)."
        )
    use_tcp = chosen == "tcp"
    return _Prepared(
        options=options,
        transport=chosen,
        abort_on_exception=False if use_tcp else _abort_on_exception_enabled(),
        listener=_C.TcpListener(_listen_address()) if use_tcp else None,
        measure_link=measure,
    )


_ABORT_ENV = "ZCCL_ABORT_ON_EXCEPTION"
_ABORT_GRACE_SECONDS = 0.5


def _abort_on_exception_enabled(environ: dict[str, str] | None = None) -> bool:
    """``ZCCL_ABORT_ON_EXCEPTION`` (``1``, the default, or ``0``)."""
    env = os.environ if environ is None else environ
    value = env.get(_ABORT_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{_ABORT_ENV}={value!r}: must be 0 or 1")
    return value == "1"


def _install_abort_on_exception() -> None:
    """Makes an uncaught exception end the whole mpirun job, as torchrun does.

    Without it, a rank that dies of an exception under mpirun runs MPI_Finalize at exit, which
    waits for the other ranks, which wait in a collective for the dead one: the job hangs until
    the group's timeout (30 minutes by default). This hook, chained to the one in place (torch's
    rank-prefixing hook wraps it in turn), only notes the death; at exit, once every hook has
    printed the traceback, :func:`_finalize_mpi` calls MPI_Abort instead of MPI_Finalize. Only
    when zccl initialised MPI and the job has several ranks: an MPI started by mpi4py or the user
    is theirs to end (``python -m mpi4py`` does the same). ``ZCCL_ABORT_ON_EXCEPTION=0`` turns
    it off.
    """
    global _abort_hook_installed
    if _abort_hook_installed:  # torch's hook may wrap ours since: look at our own flag
        return
    _abort_hook_installed = True
    previous = sys.excepthook

    def note_uncaught(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        global _dying_of_exception
        # An interactive session (python -i, the REPL) reports errors through the same hook
        # and goes on: only a script's uncaught exception ends the process.
        if not (hasattr(sys, "ps1") or sys.flags.interactive):
            _dying_of_exception = True
        previous(exc_type, exc, tb)

    sys.excepthook = note_uncaught


_abort_hook_installed = False
_dying_of_exception = False


def _finalize_mpi() -> None:
    """At exit: MPI_Finalize if zccl initialised MPI, or MPI_Abort of the job if this process is
    dying of an uncaught exception (see :func:`_install_abort_on_exception`)."""
    if _dying_of_exception:
        sys.stdout.flush()
        sys.stderr.flush()
        # The launcher forwards output asynchronously and drops what it has not read when the
        # abort kills the job: give it a moment, or the traceback can be lost.
        time.sleep(_ABORT_GRACE_SECONDS)
        if _C.abort_mpi_if_owned(1):
            return
    _C.finalize_mpi_if_owned()


def _create_over_tcp(
    dist_opts: Any, group_store: Any, seconds: float, options: Options, listener: Any
) -> Any:
    """The group over the TCP transport: each rank publishes the address of its ``listener``
    (and rank 0 a fresh session number that refuses stray connections) in the group's own store
    (``group_store``: :func:`_group_store`), then every pair of ranks connects
    (csrc/transport/tcp/)."""
    rank, size = int(dist_opts.group_rank), int(dist_opts.group_size)
    store = dist.PrefixStore("zccl-tcp/", group_store)
    store.set(f"address/{rank}", listener.address)
    if rank == 0:
        store.set("session", str(secrets.randbits(63)))
    session = int(store.get("session"))  # waits (store timeout) until rank 0 wrote it
    addresses = [store.get(f"address/{r}").decode() for r in range(size)]
    return _C.create_backend_tcp(
        listener, addresses, session, rank, size, seconds, options.to_native()
    )


def _listen_address() -> str:
    """The address the TCP transport listens on: that of the interface named by
    ``ZCCL_SOCKET_IFNAME`` when set, else the one on the route to MASTER_ADDR (which every rank
    reaches; the host name often resolves to loopback on multi-homed or containerised hosts)."""
    iface = os.environ.get("ZCCL_SOCKET_IFNAME", "").strip()
    if not iface:
        return _local_address()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface[:15].encode()))
    except OSError as exc:
        raise ValueError(
            f"ZCCL_SOCKET_IFNAME={iface!r}: no IPv4 address on that interface ({exc})"
        ) from exc
    return socket.inet_ntoa(packed[20:24])


_SIOCGIFADDR = 0x8915


def _local_address() -> str:
    """This host's address on the route to MASTER_ADDR (a UDP socket's connect sends nothing);
    loopback when there is no MASTER_ADDR or no route."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        family = socket.getaddrinfo(master, None)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


_TRANSPORTS = ("auto", "mpi", "tcp")


def mpi_transport_built() -> bool:
    """Whether this build of zccl has the MPI transport (setup.py leaves it out when built with
    ``ZCCL_WITH_MPI=0`` or where no ``mpicc`` was found)."""
    return bool(_C.MPI_TRANSPORT)


def transport(
    environ: dict[str, str] | None = None,
    mpi_built: bool | None = None,
    library: str | None = None,
) -> str:
    """The transport new zccl groups use: ``"mpi"`` or ``"tcp"``.

    ``ZCCL_TRANSPORT`` (``auto``, ``mpi``, ``tcp``; default ``auto``) decides. ``auto`` takes MPI
    when an MPI launcher started the process (Open MPI's mpirun, or the Hydra mpiexec of MPICH
    and its kin: zccl_torch.launcher) and the build has the MPI transport
    (:func:`mpi_transport_built`) for that launcher's MPI, and our own TCP sockets otherwise
    (torchrun or any launcher that gives torch a store; under an MPI launcher on one host the
    store's address is derived from its variables): the compressed collectives are the same over
    both, only the bytes' carrier differs. A build that links another MPI than the launcher's
    (Open MPI's under MPICH's mpiexec) takes TCP, with a warning. ``mpi`` is returned as asked;
    creating a group then raises on every rank where the build cannot serve it.
    ``mpi_built`` and ``library`` (the MPI library's version text) override what this build
    says, for tests.
    """
    env = os.environ if environ is None else environ
    choice = env.get("ZCCL_TRANSPORT", "auto").strip().lower() or "auto"
    if choice not in _TRANSPORTS:
        raise ValueError(f"ZCCL_TRANSPORT must be one of {_TRANSPORTS}, got {choice!r}")
    if choice != "auto":
        return choice
    built = mpi_transport_built() if mpi_built is None else mpi_built
    if not built or not launcher.started_by_mpi(env):
        return "tcp"
    mismatch = launcher.library_mismatch(launcher.mpi_launch(env), _library(library))
    if mismatch is not None:
        _warn_once(
            f"{mismatch}; zccl groups use the TCP transport instead. For the MPI transport, "
            "launch with the mpirun of that MPI or rebuild zccl against the launcher's MPI "
            "(MPICC=<its mpicc> pip install --no-build-isolation .); ZCCL_TRANSPORT=tcp "
            "silences this warning."
        )
        return "tcp"
    return "mpi"


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(text: str) -> None:
    """A RuntimeWarning, the first time this process meets ``text`` (every group creation asks
    for the transport)."""
    with _warned_lock:
        if text in _warned:
            return
        _warned.add(text)
    warnings.warn(text, RuntimeWarning, stacklevel=3)


def _library(library: str | None = None) -> str:
    """The MPI library's version text (``library`` when given; "" in a build without MPI)."""
    if library is not None:
        return library
    return str(_C.mpi_library_version()) if mpi_transport_built() else ""


def register() -> None:
    """Registers the backend with torch.distributed (no-op when already registered)."""
    launcher.set_launch_defaults()
    _enable_monitored_barrier()
    state_transfer.install()
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=devices())


def _enable_monitored_barrier() -> None:
    """Lets ``dist.monitored_barrier`` run on zccl groups.

    torch's Python function refuses every backend but Gloo before it reaches the backend, though
    the C++ API (``ProcessGroup.monitored_barrier``) is generic and zccl implements it. The wrapper
    serves zccl groups itself and hands every other group to torch's own function unchanged.
    """
    c10d = dist.distributed_c10d
    original = c10d.monitored_barrier
    if getattr(original, "_zccl_wrapper", False):
        return

    def monitored_barrier(
        group: Any = None, timeout: Any = None, wait_all_ranks: bool = False
    ) -> None:
        pg: Any = c10d._get_default_group() if group in (None, c10d.GroupMember.WORLD) else group
        if c10d._rank_not_in_group(pg) or dist.get_backend(pg) != BACKEND_NAME:
            original(group, timeout, wait_all_ranks)
            return
        if timeout is None:
            timeout = c10d._get_default_timeout(dist.Backend(BACKEND_NAME))
        elif isinstance(timeout, (int, float)):
            timeout = datetime.timedelta(seconds=timeout)
        pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__doc__ = original.__doc__
    monitored_barrier._zccl_wrapper = True  # type: ignore[attr-defined]
    c10d.monitored_barrier = monitored_barrier
    dist.monitored_barrier = monitored_barrier


def devices() -> list[str]:
    """Device types "zccl" serves: cuda too when the extension was built with its CUDA path."""
    return ["cpu", "cuda"] if bool(getattr(_C, "with_cuda", False)) else ["cpu"]


def get_backend(group: Any = None, device: str = "cpu") -> Any:
    """The C++ zccl backend object behind ``group`` (default group when None) for ``device``.

    torch creates one backend per registered device type: with the CUDA path, CPU and CUDA
    tensors are served by two backend objects (each its own worker thread and communicators).
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device(device))


def last_stats(group: Any = None, device: str = "cpu") -> dict[str, Any]:
    """Counters of the most recent compressed collective on ``group`` (on ``device``'s tensors):
    bytes, eb (``error_bound``, absolute; on the receivers of a REL broadcast or scatter the
    root's, read from the streams they decoded, NaN where the device's codec does not report
    it), the algorithm that ran, whether the ring added integer codes (``integer_hop``),
    timings, and ``auto_ratio``: the compression ratio ``algorithm="auto"`` assumed in
    choosing it (the ranks' smallest sampled ratio, the ``auto_ratio`` setting, or 5 where no
    rank sampled; None when the algorithm was not ``"auto"``, on GPU tensors, and for calls
    that could not compress)."""
    return _C.last_stats(get_backend(group, device))


_TOTAL_FIELDS = (
    "calls",
    "compressed_calls",
    "bytes_in",
    "bytes_sent",
    "bytes_compressed",
    "compress_seconds",
    "decompress_seconds",
    "seconds",
)


def total_stats(group: Any = None, device: str = "cpu", reset: bool = False) -> dict[str, Any]:
    """Running totals of this rank's collectives on ``group`` (on ``device``'s tensors) since the
    group was created or last reset: for per-step or per-run accounting, where
    :func:`last_stats` describes one call.

    Returns the totals over every collective (``calls``, ``compressed_calls``: those that ran a
    compressed algorithm, ``bytes_in``: payload bytes of every call, ``bytes_sent`` and
    ``bytes_compressed``: of the compressed calls, their ``compress_seconds``,
    ``decompress_seconds`` and ``seconds`` in all) and the same fields per collective under
    ``"by_op"`` (keyed by ``last_stats``' op names). Uncompressed calls count their payload
    only: the bytes MPI puts on the wire for them depend on its algorithm and are not counted.
    Point-to-point messages are not counted. ``reset=True`` zeroes the totals in the same step
    (nothing counted between reading and zeroing is lost), e.g. once per training step.
    Counts complete when the collective completes (after ``wait()``).
    """
    by_op = _C.total_stats(get_backend(group, device), reset)
    totals: dict[str, Any] = {
        k: sum(op[k] for op in by_op.values()) if by_op else 0 for k in _TOTAL_FIELDS
    }
    for k in ("compress_seconds", "decompress_seconds", "seconds"):
        totals[k] = float(totals[k])
    totals["by_op"] = by_op
    return totals


# MPI is finalised (or the job aborted) at exit only if zccl initialised it (registered once, at
# import, so it runs after the atexit handlers registered later).
atexit.register(_finalize_mpi)
