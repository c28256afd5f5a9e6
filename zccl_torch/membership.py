"""Joining a zccl group being created: every member arrives, and every member runs the same build.

Ranks of one job can run different zccl builds (a node with an older wheel, a checkout at another
commit, a build without libzstd). Their collectives then speak different wire formats, and the
first sign of it used to be an error on one receiving rank only ("unsupported format version 3")
or, worse, a hang. So each rank publishes what it is in the group's own store when it creates the
group, the last one to arrive compares them all, and every rank raises the same error naming the
difference and the ranks on each side before any data moves. NCCL refuses mismatched versions at
init the same way. In the same step a rank that cannot take part (invalid settings on its host, a
transport it cannot open) publishes why, and every other rank raises naming it, where they used
to wait for it until the group's timeout.

The exchange goes through the store torch gives every backend, not through the transport: it is
the one channel that works whatever the builds, and a rank whose build predates the check (it
publishes nothing) is named too instead of hanging the group.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from zccl_torch._native import _C
from zccl_torch.compressor import lossless_codec

# Keys in the group's store (torch prefixes them with the group's name).
_ARRIVED_KEY = "zccl-members/arrived"
_VERDICT_KEY = "zccl-members/all"
_IDENTITY_KEY = "zccl-members/build/{rank}"
_READ_KEY = "zccl-members/read"
_ALL_READ_KEY = "zccl-members/all-read"
_CLAIM_KEY = "zccl-members/claim/{rank}"  # how many processes joined as that rank
_READ_WAIT_SECONDS = 60.0
# What the last rank to arrive wrote before this check existed (builds that publish nothing).
_LEGACY_VERDICT = "1"

# Identity fields, in the order an error names them, with the words it uses.
_FIELD_NAMES = {
    "version": "zccl version",
    "format_version": "stream format version",
    "source_digest": "C++ source digest",
    "lossless_codec": "lossless codec",
}
# Not part of the build: the transport a rank chose for the group being created
# (zccl_torch.backend.transport()); ranks that chose differently would never reach each other.
_TRANSPORT_FIELD = "transport"
# Nor this: whether the rank measures the group's network once it is created (ZCCL_MEASURE_LINK,
# zccl_torch/link.py), an exchange that ranks which skip it would leave waiting.
_MEASURE_LINK_FIELD = "measure_link"
# Not compared either: why this rank cannot take part (invalid settings, a transport it cannot
# open). The verdict names it to every rank, so the others raise at once instead of waiting for
# it until the group's timeout, and the rank hosting the store stays until they have read it
# (_stay_until_read) instead of taking the store down under them ("Failed to recv").
_CANNOT_CREATE_FIELD = "cannot_create"


def build_identity() -> dict[str, Any]:
    """What this process's zccl build is, as far as other ranks must agree with it.

    ``source_digest`` is a hash of ``csrc/`` taken by ``setup.py`` at build time, so two builds of
    the same sources on different machines agree, and any change to the C++ (the collectives'
    messages, the codec) makes them differ. ``lossless_codec``: a build without libzstd cannot read
    the lossless streams of one with it.
    """
    import zccl_torch  # the package's version is set once its __init__ has run

    return {
        "version": str(getattr(zccl_torch, "__version__", "unknown")),
        "format_version": int(_C.FORMAT_VERSION),
        "source_digest": str(_C.SOURCE_DIGEST),
        "lossless_codec": lossless_codec(),
    }


def join_group(
    store: Any,
    rank: int,
    size: int,
    seconds: float,
    identity: dict[str, Any] | None = None,
    transport: str | None = None,
    cannot_create: str = "",
    measure_link: bool | None = None,
) -> None:
    """Returns once all ``size`` members of the group being created reached this point and all run
    the same build and, when ``transport`` is given, chose the same transport, which all can open
    (and, when ``measure_link`` is given, all measure the group's network or none does).

    Raises ``RuntimeError`` on every rank, naming each differing field of :func:`build_identity`
    (or the transports) and which ranks hold which value, or naming the ranks too old to publish
    one; raises ``RuntimeError`` naming how many ranks arrived after ``seconds``. A non-empty
    ``cannot_create`` (why this rank cannot take part) makes every rank raise, naming each such
    rank and its reason. ``identity`` replaces this rank's own (tests).
    """
    mine = dict(build_identity() if identity is None else identity)
    if transport is not None:
        mine[_TRANSPORT_FIELD] = transport
    if measure_link is not None:
        mine[_MEASURE_LINK_FIELD] = int(measure_link)
    if cannot_create:
        mine[_CANNOT_CREATE_FIELD] = cannot_create
    # A second process with the same rank (a script that launches itself under another
    # launcher, or two jobs sharing one store) raises here, before it counts as an arrival; one
    # that the verdict's writer sees makes every rank raise (_verdict).
    claims = int(store.add(_CLAIM_KEY.format(rank=rank), 1))
    if claims > 1:
        raise RuntimeError(_duplicate_message({rank: claims}, size))
    # Published before arriving: the rank that completes the count then reads every identity.
    store.set(_IDENTITY_KEY.format(rank=rank), json.dumps(mine, sort_keys=True))
    arrived = int(store.add(_ARRIVED_KEY, 1))
    if arrived == size:
        store.set(_VERDICT_KEY, json.dumps(_verdict(store, size)))
    _wait_for(store, _VERDICT_KEY, seconds, size)
    raw = store.get(_VERDICT_KEY).decode()
    # A rank of an older build that completes the count writes "1": it compared nothing.
    verdict = _verdict(store, size) if raw == _LEGACY_VERDICT else json.loads(raw)
    if verdict["error"]:
        _stay_until_read(store, verdict["publishers"], seconds)
        raise RuntimeError(verdict["error"])


def _stay_until_read(store: Any, readers: int, seconds: float) -> None:
    """Returns once every rank that reads the verdict has read it (or after ``seconds``): the
    store lives in one rank's process (torch's rank 0), and a script that ends on our error would
    otherwise take it down while others are still reading."""
    if int(store.add(_READ_KEY, 1)) == readers:
        store.set(_ALL_READ_KEY, "1")
    try:
        store.wait([_ALL_READ_KEY], datetime.timedelta(seconds=min(seconds, _READ_WAIT_SECONDS)))
    except Exception:  # a rank that died meanwhile: raising the verdict matters more
        pass


def _wait_for(store: Any, key: str, seconds: float, size: int) -> None:
    try:
        store.wait([key], datetime.timedelta(seconds=seconds))
    except Exception as exc:  # the store's own timeout (DistStoreError) or a lost store
        try:
            arrived = int(store.add(_ARRIVED_KEY, 0))
            count = f"{arrived} of {size} ranks"
        except Exception:
            count = f"not all {size} ranks"
        raise RuntimeError(
            f"zccl: Timed out after {seconds:g} s creating a process group: {count} reached "
            "it (a rank failed, is far behind, or did not create this group)"
        ) from exc


def _verdict(store: Any, size: int) -> dict[str, Any]:
    """``error``: what every rank raises (the same text on each), empty when all agree;
    ``publishers``: how many ranks published an identity (those read the verdict too)."""
    identities: list[dict[str, Any] | None] = []
    for r in range(size):
        key = _IDENTITY_KEY.format(rank=r)
        identities.append(json.loads(store.get(key).decode()) if store.check([key]) else None)
    publishers = sum(ident is not None for ident in identities)
    claims = {r: int(store.add(_CLAIM_KEY.format(rank=r), 0)) for r in range(size)}
    duplicates = {r: n for r, n in claims.items() if n > 1}
    if duplicates:
        return {"error": _duplicate_message(duplicates, size), "publishers": publishers}
    return {"error": describe_mismatch(identities), "publishers": publishers}


def _cannot_create_message(identities: list[dict[str, Any] | None]) -> str:
    """The ranks that cannot take part and each one's reason, or ``""`` when there are none."""
    reasons: dict[str, list[int]] = {}
    for r, ident in enumerate(identities):
        if ident is not None and ident.get(_CANNOT_CREATE_FIELD):
            reasons.setdefault(str(ident[_CANNOT_CREATE_FIELD]), []).append(r)
    if not reasons:
        return ""
    ranks = sorted(r for held in reasons.values() for r in held)
    which = "; ".join(f"{_ranks_phrase(held)}: {why}" for why, held in reasons.items())
    return (
        f"zccl: creating a process group of {len(identities)} ranks failed on "
        f"{_ranks_phrase(ranks)} ({which}). Every rank raised an error; no data was moved."
    )


def _duplicate_message(claims: dict[int, int], size: int) -> str:
    """The error for ranks that several processes joined as (``claims``: rank -> processes)."""
    which = ", ".join(f"rank {r} by {n} processes" for r, n in sorted(claims.items()))
    return (
        f"zccl: creating a process group of {size} ranks: a rank was joined more than once "
        f"({which}): several processes were started with the same RANK, e.g. a script that "
        "launches itself (mpirun) under another launcher (torchrun), or two jobs sharing one "
        "MASTER_ADDR:MASTER_PORT store. Every process of a job needs a rank of its own."
    )


def describe_mismatch(identities: list[dict[str, Any] | None]) -> str:
    """The error for these per-rank identities (``None``: the rank published none), or ``""``
    when they all agree."""
    parts: list[str] = []
    legacy = [r for r, ident in enumerate(identities) if ident is None]
    if legacy:
        parts.append(
            f"{_ranks_phrase(legacy)} {'runs' if len(legacy) == 1 else 'run'} a zccl build "
            "older than this check (no build identity published)"
        )
    known = [(r, ident) for r, ident in enumerate(identities) if ident is not None]
    fields = list(_FIELD_NAMES) + sorted(
        {k for _, ident in known for k in ident} - set(_FIELD_NAMES) - {_CANNOT_CREATE_FIELD}
    )
    transport = measure = ""
    for field in fields:
        holders: dict[str, list[int]] = {}
        for r, ident in known:
            holders.setdefault(json.dumps(ident.get(field)), []).append(r)
        if len(holders) < 2:
            continue
        sides = ", ".join(
            f"{_show(json.loads(value))} on {_ranks_phrase(ranks)}"
            for value, ranks in sorted(holders.items(), key=lambda item: item[1][0])
        )
        if field == _TRANSPORT_FIELD:
            transport = sides
        elif field == _MEASURE_LINK_FIELD:
            measure = sides
        else:
            parts.append(f"{_FIELD_NAMES.get(field, field)}: {sides}")
    if parts:
        return (
            "zccl: creating a process group: its ranks run different zccl builds, whose "
            "collectives cannot talk to each other; " + "; ".join(parts) + ". Install the same "
            "zccl-torch build on every node (every rank raised this error; no data was moved)."
        )
    # A rank that could not take part chose no transport: its reason is the cause to name.
    cannot_create = _cannot_create_message(identities)
    if cannot_create:
        return cannot_create
    if transport:
        return (
            "zccl: creating a process group: its ranks chose different transports, which cannot "
            f"reach each other: {transport}. Set ZCCL_TRANSPORT to the same value on every rank, "
            "or leave it unset on all (every rank raised this error; no data was moved)."
        )
    if measure:
        return (
            "zccl: creating a process group: its ranks disagree on measuring the group's network "
            f"when it is created (ZCCL_MEASURE_LINK): {measure}. Set ZCCL_MEASURE_LINK to the "
            "same value on every rank (every rank raised this error; no data was moved)."
        )
    return ""


def _show(value: Any) -> str:
    return "none" if value is None else str(value)


def _ranks_phrase(ranks: list[int]) -> str:
    """``"rank 3"``, ``"ranks 0, 1"``, ``"ranks 0-2, 5"``."""
    spans: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if i == j:
            spans.append(str(ranks[i]))
        else:  # two neighbours as a list, longer runs as a range (as the agreement check writes)
            spans.append(f"{ranks[i]}{', ' if j == i + 1 else '-'}{ranks[j]}")
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)
