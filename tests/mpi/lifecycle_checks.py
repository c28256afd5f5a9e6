"""Backend life-cycle checks under mpirun; the first argument picks one.

* ``rank_mismatch``: torch ranks that disagree with MPI's must raise a clear error.
* ``timeout``: a collective that a peer never joins fails with a timeout error naming it.
* ``p2p_timeout``: a recv whose sender never sends fails with a timeout error naming it.
* ``monitored_barrier``: ``dist.monitored_barrier`` names the ranks that did not arrive.
* ``group_member_missing``: a group whose last member never creates it: the others raise after
  the group's timeout (naming how many arrived) instead of hanging; the world group still works.
* ``mixed_build``: the last rank pretends to run another build (stream format 2, another source
  digest): creating the world group raises on every rank, with the same message naming both,
  before MPI or a socket is touched; prints ``MIXED BUILD RAISED <hash of the message>``.
* ``one_rank_cannot_create VARIABLE VALUE EXPECTED``: the last rank alone sets the variable
  (a ``ZCCL_SOCKET_IFNAME`` naming no interface, an invalid setting): it raises its own error,
  the others the same error naming it (they used to wait for it until the group's timeout);
  prints ``OWN ERROR RAISED <type>`` and ``VERDICT RAISED <hash of the message>``.
* ``no_init_on_import``: importing zccl_torch leaves MPI uninitialised; the first group
  initialises it, destroy_process_group shuts the worker down, and a new group works again.
* ``oversubscribed_threads``: one compressed all_reduce with ``threads`` = max(2, cores) on
  every rank (the test looks for zccl's oversubscription warning).
* ``transport_error``: with the agreement off, all_to_all_single split sizes that disagree make
  a message longer than its receive: that rank raises (Open MPI 4.1 reported this through
  MPI_COMM_WORLD's handler, which aborted the job), and the group still works afterwards.
* ``uncaught_exception``: rank 0 raises after a collective while the others enter the next one
  (their group timeout: 300 s); the job must end at once, with the traceback (the test).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

import zccl_torch
from zccl_torch import launcher


def rank_mismatch() -> None:
    launch = launcher.mpi_launch()
    assert launch is not None, "run this check under an MPI launcher"
    p, r = launch.size, launch.rank
    try:
        dist.init_process_group(
            "zccl",
            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
            rank=(r + 1) % p,
            world_size=p,
            timeout=datetime.timedelta(seconds=30),
        )
    except Exception as exc:
        assert "disagree with MPI" in str(exc), str(exc)
        print("MISMATCH RAISED", flush=True)
        return
    raise AssertionError("mismatched ranks were accepted")


def timeout() -> None:
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=3))
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        t = torch.ones(10)
        start = datetime.datetime.now()
        try:
            dist.all_reduce(t)
        except Exception as exc:
            elapsed = (datetime.datetime.now() - start).total_seconds()
            # torch's tests and users' log filters look for "Timed out"; the peers are named.
            assert "Timed out" in str(exc), str(exc)
            assert "waiting for rank" in str(exc), str(exc)
            assert elapsed < 60, elapsed
            print(f"TIMEOUT RAISED after {elapsed:.1f} s: {str(exc).splitlines()[0]}", flush=True)
        else:
            raise AssertionError("all_reduce without peers completed")
        store.set("done", "1")
        # Rank 0 serves the store: leave only once the others have read "done" (without MPI,
        # as over the TCP transport, nothing else holds rank 0 until they have).
        store.wait(
            [f"left/{r}" for r in range(1, dist.get_world_size())], datetime.timedelta(seconds=120)
        )
    else:
        store.wait(["done"], datetime.timedelta(seconds=120))
        store.set(f"left/{dist.get_rank()}", "1")
    # The group is broken now (a collective timed out): finalise MPI and leave without tearing
    # the group down (its communicator still has the abandoned operation).
    zccl_torch._C.finalize_mpi_if_owned()
    sys.stdout.flush()
    os._exit(0)


def p2p_timeout() -> None:
    """A recv whose sender never sends fails after the group's timeout, naming that sender."""
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=3))
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        try:
            dist.recv(torch.empty(10), src=1, tag=5)
        except Exception as exc:
            assert "Timed out" in str(exc) and "from rank 1 (tag 5)" in str(exc), str(exc)
            print(f"P2P TIMEOUT RAISED: {str(exc).splitlines()[0]}", flush=True)
        else:
            raise AssertionError("recv without a sender completed")
        store.set("done", "1")
    else:
        store.wait(["done"], datetime.timedelta(seconds=120))
    dist.barrier()
    dist.destroy_process_group()


def group_member_missing() -> None:
    """A group one member never creates: the others raise after the group's timeout, naming how
    many ranks arrived, instead of waiting in MPI forever; the world group still works."""
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=60))
    store = dist.distributed_c10d._get_default_store()
    p, r = dist.get_world_size(), dist.get_rank()
    if r != p - 1:
        start = time.monotonic()
        try:
            dist.new_group(
                list(range(p)),
                timeout=datetime.timedelta(seconds=3),
                use_local_synchronization=True,
            )
        except Exception as exc:
            elapsed = time.monotonic() - start
            assert "Timed out" in str(exc) and f"{p - 1} of {p} ranks" in str(exc), str(exc)
            assert elapsed < 30, elapsed
            print(f"GROUP TIMEOUT RAISED after {elapsed:.1f} s: {exc}", flush=True)
        else:
            raise AssertionError("a group without its last member was created")
        store.add("failed", 1)
    else:
        while int(store.add("failed", 0)) < p - 1:  # the last rank skips the group
            time.sleep(0.05)
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1 << 16,), float(p))), "the world group broke"
    dist.destroy_process_group()


def mixed_build() -> None:
    p = int(os.environ["WORLD_SIZE"])
    r = int(os.environ["RANK"])
    mine = zccl_torch.membership.build_identity()
    other = {**mine, "format_version": 2, "source_digest": "0" * 16}
    if r == p - 1:
        zccl_torch.membership.build_identity = lambda: other
    try:
        dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=60))
    except RuntimeError as exc:
        message = str(exc)
    else:
        raise AssertionError("ranks of different builds formed a group")
    others = "ranks 0-" if p > 3 else "ranks 0, " if p == 3 else "rank "
    expected = (
        f"stream format version: {mine['format_version']} on {others}{p - 2}, 2 on rank {p - 1}"
    )
    assert expected in message, message
    assert f"{mine['source_digest']} on {others}{p - 2}, {'0' * 16} on rank {p - 1}" in message
    assert not zccl_torch._C.mpi_is_initialized(), "MPI was initialised before the check"
    digest = hashlib.sha256(message.encode()).hexdigest()[:16]
    print(f"MIXED BUILD RAISED {digest}", flush=True)


def one_rank_cannot_create(variable: str, value: str, expected: str) -> None:
    """The last rank sets ``variable=value`` before creating the world group, and raises its own
    error containing ``expected``; every other rank raises the verdict naming that rank and its
    error, within seconds of each other (not after the group's timeout)."""
    p = int(os.environ["WORLD_SIZE"])
    r = int(os.environ["RANK"])
    if r == p - 1:
        os.environ[variable] = value
    start = time.monotonic()
    try:
        dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=120))
    except (RuntimeError, ValueError) as exc:
        error = exc
    else:
        raise AssertionError(f"a group formed with {variable}={value!r} on rank {p - 1}")
    took = time.monotonic() - start
    assert took < 60, f"raised after {took:.0f} s: the group's timeout, not the verdict"
    if r == p - 1:
        assert expected in f"{type(error).__name__}: {error}", repr(error)
        print(f"OWN ERROR RAISED {type(error).__name__}", flush=True)
        return
    message = str(error)
    assert isinstance(error, RuntimeError), repr(error)
    assert message.startswith(
        f"zccl: creating a process group of {p} ranks failed on rank {p - 1} (rank {p - 1}: "
    ), message
    assert expected in message, message
    digest = hashlib.sha256(message.encode()).hexdigest()[:16]
    print(f"VERDICT RAISED {digest}", flush=True)


def monitored_barrier_names_missing_ranks() -> None:
    """Like Gloo's: rank 0 names the ranks that never arrived (the first one, or all of them with
    wait_all_ranks=True); the ranks that did arrive raise too, naming the same ranks. Run with
    p >= 3: the last rank (and, for wait_all_ranks, the last two) skip the barrier."""
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=30))
    p, r = dist.get_world_size(), dist.get_rank()
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))  # everyone: passes
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5), wait_all_ranks=True)
    store = dist.distributed_c10d._get_default_store()
    for wait_all, missing in ((False, [p - 1]), (True, [p - 2, p - 1])):
        if r not in missing:
            try:
                short = datetime.timedelta(seconds=2)
                dist.monitored_barrier(timeout=short, wait_all_ranks=wait_all)
            except RuntimeError as exc:
                names = ", ".join(str(q) for q in missing)
                expect = f"Ranks {names}" if len(missing) > 1 else f"Rank {names}"
                if r != 0:  # Gloo's wording, then the cause
                    assert f"Rank {r} successfully reached monitoredBarrier" in str(exc), str(exc)
                    expect = f"rank(s) {names}"
                text = str(exc)
                assert expect in text and "failed to pass monitoredBarrier" in text, text
            else:
                raise AssertionError("monitored_barrier passed without every rank")
        store.add(f"after-{wait_all}", 1)
        while int(store.add(f"after-{wait_all}", 0)) < p:
            pass
    print("MONITORED BARRIER OK", flush=True)
    # Rank 0 serves the store: it leaves last, or a rank still in its store loop above loses the
    # connection ("Connection reset by peer").
    store.add("left", 1)
    while r == 0 and int(store.add("left", 0)) < p:
        pass
    # The skipped barriers left the ranks' tag counters apart: leave without more collectives.
    zccl_torch._C.finalize_mpi_if_owned()
    sys.stdout.flush()
    os._exit(0)


def no_init_on_import() -> None:
    assert not zccl_torch._C.mpi_is_initialized(), "import initialised MPI"
    dist.init_process_group("zccl")
    assert zccl_torch._C.mpi_is_initialized()
    t = torch.full((1000,), float(dist.get_rank()))
    dist.all_reduce(t)
    p = dist.get_world_size()
    assert bool((t - p * (p - 1) / 2).abs().max() < 1e-2), t[:3]
    dist.destroy_process_group()
    # A second group in the same processes (a fresh store port: the old store may still be
    # closing its connections).
    port = int(os.environ["MASTER_PORT"]) + 1
    dist.init_process_group(
        "zccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )
    dist.barrier()
    dist.destroy_process_group()
    print("LIFECYCLE OK", flush=True)


def oversubscribed_threads() -> None:
    dist.init_process_group("zccl")
    threads = max(2, len(os.sched_getaffinity(0)))
    t = torch.linspace(0, 1, 100_000)
    with zccl_torch.config(threads=threads, min_compress_bytes=0, error_bound=1e-3):
        dist.all_reduce(t)
    print(f"rank {dist.get_rank()} OVERSUBSCRIBED DONE", flush=True)
    dist.destroy_process_group()


def transport_error() -> None:
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=60))
    r, p = dist.get_rank(), dist.get_world_size()
    n = 8
    recvs = [n - 3 if r == 0 and q == p - 1 else n for q in range(p)]
    out = torch.empty(sum(recvs))
    try:
        with zccl_torch.config(algorithm="mpi", check_agreement=False):
            dist.all_to_all_single(out, torch.ones(n * p), output_split_sizes=recvs)
    except RuntimeError as exc:
        assert r == 0, f"rank {r} raised: {exc}"
        assert "TRUNCATE" in str(exc) or "truncated" in str(exc), str(exc)
    else:
        # MPICH 4.0 reports nothing: the block that does not fit is left out, silently (README,
        # Limitations: with check_agreement=False only Open MPI and the TCP transport see it).
        library = zccl_torch._C.mpi_library_version()
        mpich = zccl_torch.backend.transport() == "mpi" and "MPICH" in library
        assert r != 0 or mpich, "the short receive did not raise"
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t.tolist() == [float(p)] * 4, t
    print(f"rank {r} TRANSPORT ERROR RAISED", flush=True)
    dist.destroy_process_group()


def uncaught_exception() -> None:
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=300))
    t = torch.ones(64)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} FIRST ALL_REDUCE DONE", flush=True)
    if dist.get_rank() == 0:
        raise RuntimeError("rank 0 fails on purpose")
    dist.all_reduce(t)  # waits for rank 0, which never comes
    print("UNREACHABLE: the second all_reduce completed", flush=True)


if __name__ == "__main__":
    checks = {
        "rank_mismatch": rank_mismatch,
        "timeout": timeout,
        "p2p_timeout": p2p_timeout,
        "monitored_barrier": monitored_barrier_names_missing_ranks,
        "group_member_missing": group_member_missing,
        "mixed_build": mixed_build,
        "no_init_on_import": no_init_on_import,
        "oversubscribed_threads": oversubscribed_threads,
        "uncaught_exception": uncaught_exception,
        "transport_error": transport_error,
        "one_rank_cannot_create": one_rank_cannot_create,  # takes VARIABLE VALUE EXPECTED
    }
    checks[sys.argv[1]](*sys.argv[2:])
