"""Measuring a group's network, for the model behind ``algorithm="auto"``.

``auto`` decides from a cost model whether compression pays and which all_reduce algorithm runs;
the model needs the network's bandwidth and latency (the ``link_gbps`` / ``link_latency_us``
settings, 1 Gbit/s and 25 us unless set). A job that leaves them at the default on a fast
network compresses where MPI's exact collectives would be faster. :func:`measure_link` measures
instead, and ``ZCCL_MEASURE_LINK=1`` makes every zccl group measure its own network when it is
created and take the result as its defaults.

How: every rank sends to the next rank of the group and receives from the previous one at the
same time (the traffic of one ring step, which is what the model's per-rank bandwidth stands
for), over the transport's own point-to-point path, the one the compressed collectives take:
first one byte, then ``probe_bytes`` (csrc/transport/link_probe.cpp). Each rank keeps the median
of ``REPEATS`` timings of each size, the ranks take the slowest rank's (one exact all_reduce
MAX), and every rank computes from the same two times::

    latency_us = t(1 byte) in us
    link_gbps  = 8 * (probe_bytes - 1) / (t(probe_bytes) - t(1 byte)) / 1e9

clamped to ``[MIN_GBPS, MAX_GBPS]``: a link faster than the probe can resolve (loopback, shared
memory) reads as ``MAX_GBPS``, where ``auto`` sends every collective exact.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, TypedDict

import torch.distributed as dist

from zccl_torch._native import _C

logger = logging.getLogger("zccl_torch.link")

__all__ = ["LinkEstimate", "LinkSettings", "estimate_link", "measure_link", "measure_on_create"]

#: Bounds of a measured bandwidth, Gbit/s: the link_gbps setting's own minimum, and a ceiling
#: (10 Tbit/s) for links faster than the probe resolves.
MIN_GBPS = 1e-3
MAX_GBPS = 1e4
#: Bytes of the bandwidth probe by default: 8.4 ms at 1 Gbit/s, long enough against a 25 us
#: latency and a tc token bucket's burst; 84 us at 100 Gbit/s, still 3-10x the latency.
DEFAULT_PROBE_BYTES = 1 << 20
#: Timings of each size per rank (the backend's kLinkRepeats).
REPEATS = 5
_ENV = "ZCCL_MEASURE_LINK"


class LinkSettings(TypedDict):
    """The settings a :class:`LinkEstimate` gives (``config(**estimate.settings())``)."""

    link_gbps: float
    link_latency_us: float


@dataclasses.dataclass(frozen=True)
class LinkEstimate:
    """A group's network as measured by :func:`measure_link` (the same on every rank).

    Attributes:
        gbps: bandwidth per rank in Gbit/s, in ``[MIN_GBPS, MAX_GBPS]``.
        latency_us: time of a one-byte exchange in microseconds.
        probe_bytes: size of the bandwidth probe.
        repeats: timings of each size per rank (``REPEATS``).
    """

    gbps: float
    latency_us: float
    probe_bytes: int
    repeats: int

    def settings(self) -> LinkSettings:
        """``{"link_gbps": ..., "link_latency_us": ...}``, for ``zccl_torch.config(**...)`` or
        ``zccl_torch.Options(**...)``."""
        return LinkSettings(link_gbps=self.gbps, link_latency_us=self.latency_us)


def estimate_link(
    small_seconds: float, large_seconds: float, probe_bytes: int, repeats: int = 1
) -> LinkEstimate:
    """The estimate from the (slowest rank's) times of a one-byte and a ``probe_bytes`` ring
    exchange (see the module docstring)."""
    if probe_bytes < 2:
        raise ValueError(f"zccl: probe_bytes must be >= 2, got {probe_bytes}")
    if not (small_seconds >= 0 and large_seconds >= 0):
        raise ValueError(f"zccl: exchange times must be >= 0, got {small_seconds}, {large_seconds}")
    extra = large_seconds - small_seconds
    gbps = MAX_GBPS if extra <= 0 else 8.0 * (probe_bytes - 1) / extra / 1e9
    return LinkEstimate(
        gbps=min(max(gbps, MIN_GBPS), MAX_GBPS),
        latency_us=small_seconds * 1e6,
        probe_bytes=probe_bytes,
        repeats=repeats,
    )


def measure_link(
    group: Any = None,
    *,
    probe_bytes: int = DEFAULT_PROBE_BYTES,
) -> LinkEstimate:
    """Measures the network of the zccl ``group`` (default group when None); a collective: every
    rank of the group must call it with the same ``probe_bytes`` (ranks that differ, or that
    call another collective, raise on every rank), in order with the group's other collectives.

    Returns the same :class:`LinkEstimate` on every rank. Pass ``estimate.settings()`` to
    ``zccl_torch.config()`` or ``Options``; ``ZCCL_MEASURE_LINK=1`` does this for every group
    when it is created. Raises ValueError for a group of one rank (it has no network) or bad
    arguments, TypeError for a group not on the zccl backend.
    """
    from zccl_torch.backend import BACKEND_NAME, get_backend  # late: backend imports this module

    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call init_process_group('zccl')")
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if str(dist.get_backend(pg)) != BACKEND_NAME:
        raise TypeError(
            f"zccl: measure_link needs a group on the 'zccl' backend, this one runs on "
            f"{dist.get_backend(pg)!r}"
        )
    return _measure(get_backend(pg), pg.size(), probe_bytes)


def measure_on_create() -> bool:
    """Whether new zccl groups measure their network (``ZCCL_MEASURE_LINK``: ``1`` or ``0``,
    default ``0``); raises ValueError for any other value."""
    raw = os.environ.get(_ENV, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ValueError(f"{_ENV} must be 0 or 1, got {raw!r}")


def _measure(backend: Any, size: int, probe_bytes: int) -> LinkEstimate:
    """:func:`measure_link` on a zccl c10d ``Backend`` object (also one being created)."""
    if isinstance(probe_bytes, bool) or not isinstance(probe_bytes, int) or probe_bytes < 2:
        raise ValueError(
            f"zccl: measure_link: probe_bytes must be an int >= 2, got {probe_bytes!r}"
        )
    if size < 2:
        raise ValueError("zccl: measure_link: a group of one rank has no network to measure")
    small_s, large_s = _C.time_link(backend, probe_bytes)
    return estimate_link(small_s, large_s, probe_bytes, REPEATS)
