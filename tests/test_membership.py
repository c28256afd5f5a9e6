"""Group creation refuses ranks of different zccl builds (zccl_torch/membership.py), on every
rank, with the same message. Ranks are threads sharing one in-process store here; the mpirun
checks in tests/mpi/lifecycle_checks.py (``mixed_build``) run the same through
init_process_group over both transports."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

import zccl_torch
from zccl_torch import membership
from zccl_torch._native import _C

ROOT = Path(__file__).resolve().parent.parent


def identity(**changes: Any) -> dict[str, Any]:
    base = {
        "version": "0.1.0",
        "format_version": 3,
        "source_digest": "a" * 16,
        "lossless_codec": "zstd",
    }
    return {**base, **changes}


def join_all(
    identities: list[dict[str, Any] | None],
    seconds: float = 20.0,
    legacy_last: bool = False,
    transports: list[str | None] | None = None,
    cannot_create: list[str] | None = None,
    measure: list[bool | None] | None = None,
) -> list[BaseException | None]:
    """Every rank joins from its own thread; ``None`` identities run the protocol of builds older
    than the check (count the arrival, the last one writes "1", wait for it). ``transports``: the
    one each rank chose; ``cannot_create``: why each cannot take part; ``measure``: whether each
    measures the group's network (ZCCL_MEASURE_LINK). Returns what each rank raised
    (None: it joined)."""
    size = len(identities)
    store = dist.HashStore()
    outcomes: list[BaseException | None] = [None] * size

    def new_rank(r: int) -> None:
        try:
            chosen = transports[r] if transports else None
            why = cannot_create[r] if cannot_create else ""
            membership.join_group(
                store,
                r,
                size,
                seconds,
                identity=identities[r],
                transport=chosen,
                cannot_create=why,
                measure_link=measure[r] if measure else None,
            )
        except BaseException as exc:
            outcomes[r] = exc

    def legacy_rank(r: int) -> None:
        if legacy_last:  # arrive after every rank of the current build
            while int(store.add("zccl-members/arrived", 0)) < size - 1:
                time.sleep(0.001)
        if int(store.add("zccl-members/arrived", 1)) == size:
            store.set("zccl-members/all", "1")
        store.wait(["zccl-members/all"])

    threads = [
        threading.Thread(target=legacy_rank if ident is None else new_rank, args=(r,))
        for r, ident in enumerate(identities)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a rank hung joining the group"
    return outcomes


def the_same_error(outcomes: list[BaseException | None], ranks: list[int]) -> str:
    """The message all of ``ranks`` raised (asserting they all raised it, as RuntimeError)."""
    errors = [outcomes[r] for r in ranks]
    assert all(isinstance(e, RuntimeError) for e in errors), errors
    messages = {str(e) for e in errors}
    assert len(messages) == 1, messages
    return messages.pop()


@pytest.mark.parametrize("size", [1, 2, 5])
def test_ranks_of_one_build_join(size: int) -> None:
    assert join_all([identity() for _ in range(size)]) == [None] * size


def test_a_newer_format_on_one_rank_raises_on_every_rank() -> None:
    ids = [identity(), identity(), identity(), identity(format_version=2, source_digest="b" * 16)]
    message = the_same_error(join_all(ids), [0, 1, 2, 3])
    assert message.startswith("zccl: creating a process group: its ranks run different zccl")
    assert "stream format version: 3 on ranks 0-2, 2 on rank 3" in message
    assert f"C++ source digest: {'a' * 16} on ranks 0-2, {'b' * 16} on rank 3" in message
    assert "zccl version" not in message and "lossless" not in message  # only what differs
    assert "every rank raised this error" in message


def test_every_differing_field_is_named_with_its_ranks() -> None:
    ids = [
        identity(lossless_codec="none"),
        identity(),
        identity(version="0.2.0", lossless_codec="none"),
        identity(),
    ]
    message = the_same_error(join_all(ids), [0, 1, 2, 3])
    assert "zccl version: 0.1.0 on ranks 0, 1, 3, 0.2.0 on rank 2" in message
    assert "lossless codec: none on ranks 0, 2, zstd on ranks 1, 3" in message
    # Fields a later build adds are named by their key.
    ids = [identity(), identity(wire="x")]
    message = the_same_error(join_all(ids), [0, 1])
    assert "wire: none on rank 0, x on rank 1" in message


def join_in_order(ranks: list[int], size: int) -> list[BaseException | None]:
    """Processes (threads sharing a store) joining as ``ranks``, started in that order a little
    apart; what each raised (None: it joined)."""
    store = dist.HashStore()
    outcomes: list[BaseException | None] = [None] * len(ranks)

    def join(i: int) -> None:
        try:
            membership.join_group(store, ranks[i], size, 20.0, identity=identity())
        except BaseException as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=join, args=(i,)) for i in range(len(ranks))]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a process hung joining the group"
    return outcomes


def test_a_rank_joined_twice_raises_naming_it() -> None:
    """Two processes with the same RANK (examples/ddp_train.py under torchrun relaunched itself
    with mpirun once per worker, all in torchrun's store): the error said a rank "runs a zccl
    build older than this check", as the duplicate had completed the count in its place."""
    message = "a rank was joined more than once (rank 1 by 2 processes)"
    # The duplicate comes after the group formed: it raises, the group stands.
    outcomes = join_in_order([0, 1, 2, 1], 3)
    assert outcomes[:3] == [None, None, None], outcomes
    assert isinstance(outcomes[3], RuntimeError) and message in str(outcomes[3]), outcomes[3]
    # The duplicate comes before the count completes: every process raises, naming it.
    outcomes = join_in_order([1, 1, 0, 2], 3)
    assert all(isinstance(o, RuntimeError) and message in str(o) for o in outcomes), outcomes


def test_ranks_that_chose_different_transports_raise_on_every_rank() -> None:
    """ZCCL_TRANSPORT set on some ranks only: without the check the MPI ranks waited in
    MPI_Comm_dup and the TCP ranks for connections, until the group's timeout."""
    same = join_all([identity()] * 3, transports=["tcp"] * 3)
    assert same == [None] * 3
    outcomes = join_all([identity()] * 3, transports=["tcp", "mpi", "tcp"])
    message = the_same_error(outcomes, [0, 1, 2])
    assert message.startswith("zccl: creating a process group: its ranks chose different")
    assert "tcp on ranks 0, 2, mpi on rank 1" in message
    assert "Set ZCCL_TRANSPORT to the same value on every rank" in message
    # A build difference is the cause to name first (its advice differs).
    ids = [identity(), identity(format_version=2)]
    message = the_same_error(join_all(ids, transports=["tcp", "mpi"]), [0, 1])
    assert "different zccl builds" in message and "transports" not in message


def test_ranks_that_disagree_on_measuring_the_link_raise_on_every_rank() -> None:
    """ZCCL_MEASURE_LINK set on some ranks only: the measuring ranks would wait in the probe for
    the others until the group's timeout."""
    assert join_all([identity()] * 3, transports=["tcp"] * 3, measure=[True] * 3) == [None] * 3
    outcomes = join_all([identity()] * 4, transports=["tcp"] * 4, measure=[True, False, True, True])
    message = the_same_error(outcomes, [0, 1, 2, 3])
    assert message == (
        "zccl: creating a process group: its ranks disagree on measuring the group's network "
        "when it is created (ZCCL_MEASURE_LINK): 1 on ranks 0, 2, 3, 0 on rank 1. Set "
        "ZCCL_MEASURE_LINK to the same value on every rank (every rank raised this error; no "
        "data was moved)."
    ), message
    # Different transports are the cause to name first (the probe could not even start).
    outcomes = join_all([identity()] * 2, transports=["tcp", "mpi"], measure=[True, False])
    assert "different transports" in the_same_error(outcomes, [0, 1])


def test_ranks_that_cannot_take_part_are_named_on_every_rank() -> None:
    """Ranks that cannot take part (a setting invalid on their host, a transport they cannot open)
    publish why: every rank raises, naming those ranks and their reasons, and stays until all
    have read it. Before, the others waited for them until the group's timeout, and when rank 0,
    which hosts the store, raised alone, a rank still reading lost the store ("Failed to recv")."""
    bad_if = "ValueError: ZCCL_SOCKET_IFNAME='eth9': no IPv4 address on that interface"
    no_mpi = "RuntimeError: zccl: this zccl build has no Open MPI transport"
    why = [bad_if, "", bad_if, no_mpi, bad_if]
    chosen = ["tcp", "tcp", "tcp", "mpi", "tcp"]
    outcomes = join_all([identity()] * 5, transports=chosen, cannot_create=why)
    message = the_same_error(outcomes, [0, 1, 2, 3, 4])
    assert message == (
        "zccl: creating a process group of 5 ranks failed on ranks 0, 2-4 (ranks 0, 2, 4: "
        f"{bad_if}; rank 3: {no_mpi}). Every rank raised an error; no data was moved."
    ), message
    # A rank that cannot take part publishes no transport: the others' choice is no mismatch.
    outcomes = join_all([identity()] * 2, transports=["tcp", None], cannot_create=["", bad_if])
    assert "failed on rank 1 (rank 1: " in the_same_error(outcomes, [0, 1])
    # A build difference is still the cause to name first (its advice differs).
    ids = [identity(), identity(format_version=2)]
    outcomes = join_all(ids, cannot_create=["", bad_if])
    assert "different zccl builds" in the_same_error(outcomes, [0, 1])
    # A reason is not part of the build: ranks with none agree with each other.
    assert join_all([identity()] * 3, transports=["tcp"] * 3, cannot_create=[""] * 3) == [None] * 3


@pytest.mark.parametrize("legacy_last", [False, True])
def test_a_rank_of_a_build_before_the_check_is_named(legacy_last: bool) -> None:
    """Whether or not the old-build rank completes the count (it then writes the old "all
    arrived" value, comparing nothing), every current rank raises, naming it."""
    ids: list[dict[str, Any] | None] = [identity(), None, identity(), identity()]
    outcomes = join_all(ids, legacy_last=legacy_last)
    message = the_same_error(outcomes, [0, 2, 3])
    assert "rank 1 runs a zccl build older than this check" in message
    assert outcomes[1] is None  # the old build goes on: nothing here can stop it


def test_a_missing_member_times_out_naming_the_count() -> None:
    store = dist.HashStore()
    outcomes: list[BaseException | None] = [None, None]

    def join(r: int) -> None:
        try:
            membership.join_group(store, r, 3, 0.5, identity=identity())
        except RuntimeError as exc:
            outcomes[r] = exc

    start = time.monotonic()
    threads = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert time.monotonic() - start < 20
    message = the_same_error(outcomes, [0, 1])
    assert "Timed out after 0.5 s creating a process group: 2 of 3 ranks reached it" in message


def test_describe_mismatch() -> None:
    assert membership.describe_mismatch([identity()] * 3) == ""
    assert membership.describe_mismatch([]) == ""
    message = membership.describe_mismatch([None, None, identity()])
    assert "ranks 0, 1 run a zccl build older" in message
    many = [identity(format_version=2 if r in (0, 1, 2, 5, 7) else 3) for r in range(8)]
    message = membership.describe_mismatch(many)
    assert "stream format version: 2 on ranks 0-2, 5, 7, 3 on ranks 3, 4, 6" in message


def test_this_build_identity() -> None:
    """The digest the extension carries is that of the csrc/ it was built from (a stale build
    fails here), and the other fields are the extension's own."""
    h = hashlib.sha256()
    sources = sorted(
        p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")
    )
    for path in sources:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    mine = membership.build_identity()
    assert mine == {
        "version": zccl_torch.__version__,
        "format_version": zccl_torch.FORMAT_VERSION,
        "source_digest": h.hexdigest()[:16],
        "lossless_codec": "zstd" if _C.lossless_codec_available(1) else "none",
    }
