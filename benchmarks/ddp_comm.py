"""Contenders of ``benchmarks/ddp_cluster.py``: how each one wraps the model in DDP, and how the
bytes it puts on the wire per step are obtained.

=========  ==========================================================  ========================
contender  gradient all-reduce                                         bytes per step (per rank)
=========  ==========================================================  ========================
mpi        DDP on a zccl group with ``Options(algorithm="mpi")``:      computed: ring volume
           zccl's exact path (``MPI_Iallreduce``, Open MPI's choice)   2(p-1)/p * gradient bytes
gloo       DDP on a Gloo group (ring all-reduce over TCP)              computed: same formula
fp16       DDP on the Gloo group with torch's ``fp16_compress_hook``   computed: same formula on
           (Gloo is the faster uncompressed transport here, see        the float16 payload (half)
           RESULTS.md, so fp16 rides on it)
zccl       DDP on the default zccl group with                          measured: the backend's
           ``zccl_torch.hooks.compressed_allreduce_hook``,             ``bytes_sent`` counter for
           ``ZcclHookState(model=ddp)``: default policy (1-D params    each lossy payload; exact
           exact, weights within 1e-3 of the gradient RMS), error      payloads (biases, warm-up
           feedback, ``start_iter`` exact warm-up iterations           steps) by the ring formula
compute    no communication at all (each rank steps its own model):    0
           the compute floor of a step on the same oversubscribed
           cores, for the time breakdown
=========  ==========================================================  ========================

The ring formula is what a bandwidth-optimal all-reduce must send; it is not measured (Open MPI's
default algorithm may send more). The zccl hook's tiny exact all-reduce that agrees on gradient
norms (a few float64 per bucket) is left out of every count.
"""

# No `from __future__ import annotations`: DDP compares the hook's annotations with the real
# classes at register_comm_hook time, so they must be objects, not strings.
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
import torch.distributed as dist
from ddp_cluster_summary import ZCCL
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import zccl_torch
from zccl_torch import hooks
from zccl_torch.policy import NormRelative, Rules

# ZCCL (the hook's contenders) is defined once, with the summary that judges them.
CONTENDERS = ("mpi", "gloo", "fp16", *ZCCL, "compute")


def ring_bytes(payload_bytes: float, world: int) -> float:
    """Bytes one rank sends in a ring all-reduce (reduce-scatter then all-gather)."""
    return 2.0 * (world - 1) / world * payload_bytes


@dataclass
class Groups:
    """The process groups every contender may use (created once, collectively, at start)."""

    zccl: Any  # the default group: zccl at its default (compressing) options
    mpi: Any  # zccl group pinned to MPI_Allreduce
    gloo: Any


def make_groups() -> Groups:
    """Initialises the default zccl group and creates the MPI-pinned and Gloo groups."""
    dist.init_process_group("zccl")
    ranks = list(range(dist.get_world_size()))
    mpi = dist.new_group(ranks, backend="zccl", pg_options=zccl_torch.Options(algorithm="mpi"))
    gloo = dist.new_group(ranks, backend="gloo")
    return Groups(zccl=None, mpi=mpi, gloo=gloo)


@dataclass
class StepCounters:
    """Per-step accumulators of the zccl hook (read and reset once per training step)."""

    bytes_sent: float = 0.0
    hook_s: float = 0.0  # main thread inside the hook (blocks backward)
    agree_s: float = 0.0  # of which: the hook's exact all_reduce agreeing on gradient norms
    ef_codec_s: float = 0.0  # of which: the error-feedback quantisation (quantize)
    backend_codec_s: float = 0.0  # backend worker: compress + decompress inside all_reduce
    lossy_payload_bytes: float = 0.0
    mismatches: int = 0  # lossy payloads whose backend record did not match (not counted)

    def take(self) -> dict[str, float]:
        """The values since the last call, then zeroes them."""
        values = asdict(self)
        for f in fields(self):
            setattr(self, f.name, f.default)
        return values


@dataclass
class ZcclAccounting:
    """Wraps ``compressed_allreduce_hook`` to count what each bucket sends, and times the
    hook's internals (see :func:`timed_hook_internals`)."""

    world: int
    group: Any = None
    counters: StepCounters = field(default_factory=StepCounters)
    compressed_buckets: int = 0

    def hook(
        self, state: hooks.ZcclHookState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        """The zccl hook, plus byte and time accounting for ``bucket``."""
        buf = bucket.buffer()
        item, numel = buf.element_size(), buf.numel()
        warm_up = state.iter < state.start_iter
        start = time.perf_counter()
        fut = hooks.compressed_allreduce_hook(state, bucket)
        self.counters.hook_s += time.perf_counter() - start
        decisions = None if warm_up else list(state.last_decisions.get(bucket.index(), []))

        def count(done: torch.futures.Future) -> torch.Tensor:
            # Runs when the bucket's last all_reduce completes; the future's callbacks run on
            # the thread completing it, which should be before the backend starts the next
            # queued collective, so last_stats() should be this bucket's. Checked against the
            # payload size below, never assumed: a mismatch is counted, not its bytes.
            if decisions is None:
                self.counters.bytes_sent += ring_bytes(numel * item, self.world)
                return done.value()
            exact = sum(n for eb, n in decisions if eb == 0.0)
            lossy = [n for eb, n in decisions if eb > 0.0]
            self.counters.bytes_sent += ring_bytes(exact * item, self.world)
            if len(lossy) > 1:  # last_stats keeps only the last collective
                self.counters.mismatches += len(lossy)
            elif lossy:
                stats = zccl_torch.last_stats(self.group)
                # The hook all-reduces lossy payloads in float32 (float64 for float64 buckets).
                payload_bytes = lossy[0] * (8 if buf.dtype == torch.float64 else 4)
                if stats.get("op") != "all_reduce" or stats.get("bytes_in") != payload_bytes:
                    self.counters.mismatches += 1
                else:
                    self.counters.bytes_sent += float(stats["bytes_sent"])
                    self.counters.backend_codec_s += float(stats["compress_seconds"]) + float(
                        stats["decompress_seconds"]
                    )
                    self.counters.lossy_payload_bytes += payload_bytes
                    self.compressed_buckets += 1
            return done.value()

        return fut.then(count)


@contextmanager
def timed_hook_internals(counters: StepCounters) -> Iterator[None]:
    """Times the zccl hook's blocking norm agreement and its error-feedback codec calls by
    wrapping the names ``zccl_torch.hooks`` looks up at call time (behaviour unchanged;
    restored on exit). Names the module no longer has are left alone (no timing for them)."""

    def timed(fn: Callable[..., Any], slot: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(counters, slot, getattr(counters, slot) + time.perf_counter() - start)

        return wrapper

    slots = {"_agree": "agree_s", "quantize": "ef_codec_s"}
    saved = {name: getattr(hooks, name) for name in slots if hasattr(hooks, name)}
    for name, fn in saved.items():
        setattr(hooks, name, timed(fn, slots[name]))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(hooks, name, fn)


@dataclass
class Wrapped:
    """A contender's model ready to train, and how to get its bytes per step."""

    model: nn.Module
    bytes_per_step: Callable[[], float]
    accounting: ZcclAccounting | None = None


def wrap(
    name: str,
    model: nn.Module,
    groups: Groups,
    start_iter: int,
    bucket_mb: float,
    zccl_rel: float | None = None,
) -> Wrapped:
    """Wraps ``model`` (same initial weights on every rank) for contender ``name``; ``zccl_rel``:
    the zccl hook's policy ``Rules(NormRelative(zccl_rel, "rms"))`` for the zccl contenders
    (None: the hook's default, the same policy at 1e-3)."""
    world = dist.get_world_size()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if name == "compute":
        return Wrapped(model, lambda: 0.0)
    if name in ("mpi", "gloo", "fp16"):
        group = groups.mpi if name == "mpi" else groups.gloo
        ddp = DistributedDataParallel(model, process_group=group, bucket_cap_mb=bucket_mb)
        if name == "fp16":
            ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
        payload = grad_bytes / 2 if name == "fp16" else grad_bytes
        return Wrapped(ddp, lambda: ring_bytes(payload, world))
    if name not in ZCCL:
        raise ValueError(f"unknown contender {name!r}; expected one of {CONTENDERS}")
    # DDP broadcasts rank 0's weights at construction; on the default zccl group that broadcast
    # would be compressed (lossy), so it goes through MPI like in the other contenders.
    with zccl_torch.config(algorithm="mpi"):
        ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    policy = None if zccl_rel is None else Rules(NormRelative(zccl_rel, "rms"))
    state = hooks.ZcclHookState(model=ddp, start_iter=start_iter, policy=policy)
    accounting = ZcclAccounting(world, groups.zccl)
    ddp.register_comm_hook(state, accounting.hook)
    return Wrapped(ddp, lambda: accounting.counters.bytes_sent, accounting)
