"""Multi-rank checks of the "zccl" backend against torch's documented contract and against Gloo
run on the same input in the same processes (a Gloo group over the same ranks).

``mpirun -np P python tests/mpi/conformance_checks.py [check ...]``. Covers what a drop-in backend
must never get wrong silently: the layouts of the coalesced ops (and their validation),
agreement on what a collective is (every disagreement raises on every rank, naming the field),
recv from any source, sparse all_reduce, and replicas that stay bit-identical (DDP).
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from check_common import assert_within, exact_gather, gloo, rank, rounding, run_checks, world

import zccl_torch
from zccl_torch import _C, _torch_names, link

EB = 1e-3
# The two paths whose results are exact: MPI's collectives, and every float payload compressed
# losslessly by the ring.
EXACT_PATHS = {
    "exact": {"algorithm": "mpi"},
    "lossless": {"mode": "lossless", "min_compress_bytes": 0, "algorithm": "ring"},
}
OPTIONS = zccl_torch.Options(error_bound=EB, mode="abs", min_compress_bytes=0)  # every group's
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def data(r: int, n: int, dtype: torch.dtype = torch.float32, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(7919 * r + 31 * salt + n)
    return (torch.randn(n, generator=g, dtype=torch.float64).cumsum(0) / 50 + r).to(dtype)


def same_bits(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.shape, want.shape)

    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1).view(torch.uint8) if t.is_floating_point() else t

    assert torch.equal(bits(got), bits(want)), f"{name}: differs from the reference"


def raises_everywhere(name: str, fn: Callable[[], Any], *needles: str) -> None:
    """fn() must raise on this rank with every needle in the message; then the ranks are still
    in step (a barrier passes)."""
    try:
        fn()
    except (ValueError, RuntimeError) as exc:
        text = str(exc)
        for needle in needles:
            assert needle in text, f"{name}: {needle!r} not in {text!r}"
    else:
        raise AssertionError(f"{name}: did not raise on rank {rank()}")
    dist.barrier()


# ---------------------------------------------------------------------------------------------
# Coalesced ops


@check
def all_gather_coalesced_torch_layout() -> None:
    """outputs[rank][i] holds input i of `rank` (torch's documented layout), compared with Gloo
    bit for bit on the exact path and within the bound on the compressed one; the number of
    inputs equal to the world size (where a transposed layout would go unnoticed) included."""
    p = world()
    for n_inputs, dtype in (
        (1, torch.float32),
        (2, torch.float64),
        (p, torch.float32),
        (p, torch.int64),
    ):
        inputs = [(data(rank(), 100 + 37 * i, salt=i) * 1000).to(dtype) for i in range(n_inputs)]
        for cfg in ({"algorithm": "mpi"}, {}):
            outs = [[torch.empty_like(t) for t in inputs] for _ in range(p)]
            with zccl_torch.config(**cfg):
                dist.all_gather_coalesced(outs, inputs)
            ref = [[torch.empty_like(t) for t in inputs] for _ in range(p)]
            dist.all_gather_coalesced(ref, inputs, group=gloo())
            for r in range(p):
                for i in range(n_inputs):
                    name = f"all_gather_coalesced {cfg} inputs={n_inputs} [{r}][{i}]"
                    if cfg or not dtype.is_floating_point:
                        same_bits(name, outs[r][i], ref[r][i])
                    else:
                        assert_within(name, outs[r][i], ref[r][i], EB)
    bad = [[torch.empty(3)] for _ in range(p + 1)]
    raises_everywhere(
        "all_gather_coalesced wrong lists",
        lambda: dist.all_gather_coalesced(bad, [torch.ones(3)]),
        "one list per rank",
    )


@check
def coalescing_manager_matches_single_ops() -> None:
    """all_reduce, all_gather_into_tensor and reduce_scatter_tensor inside _coalescing_manager
    (the backend's *_coalesced entry points) equal the single-tensor ops on the same data.
    (No device argument: torch then gathers the ops and calls the *_coalesced entry points.)"""
    p = world()
    sizes = (1, p + 1, 20_011)
    xs = [data(rank(), n, salt=3) for n in sizes]
    singles = [x.clone() for x in xs]
    for t in singles:
        dist.all_reduce(t)
    coalesced = [x.clone() for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in coalesced:
            dist.all_reduce(t)
    cm.wait()
    for n, a, b in zip(sizes, coalesced, singles, strict=True):
        same_bits(f"coalesced all_reduce n={n}", a, b)

    gathered = [torch.empty(p * x.numel()) for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for out, x in zip(gathered, xs, strict=True):
            dist.all_gather_into_tensor(out, x)
    cm.wait()
    for n, out, x in zip(sizes, gathered, xs, strict=True):
        single = torch.empty_like(out)
        dist.all_gather_into_tensor(single, x)
        same_bits(f"coalesced all_gather_into_tensor n={n}", out, single)

    inputs = [data(rank(), p * n, salt=4) for n in sizes]
    scattered = [torch.empty(n) for n in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for out, x in zip(scattered, inputs, strict=True):
            dist.reduce_scatter_tensor(out, x)
    cm.wait()
    for n, out, x in zip(sizes, scattered, inputs, strict=True):
        single = torch.empty_like(out)
        dist.reduce_scatter_tensor(single, x)
        same_bits(f"coalesced reduce_scatter_tensor n={n}", out, single)


@check
def single_tensor_ops_both_forms_match_gloo() -> None:
    """all_gather_single and reduce_scatter_single (torch 2.13's names for all_gather_into_tensor
    and reduce_scatter_tensor) in both documented output forms: the concatenation [p*n, ...] and
    the stack [p, n, ...] (reduce_scatter: the same two forms of its input). Gloo accepts only
    the concatenation, so the stacked result is compared with Gloo's as a view. all_gather and
    integer sums: bit for bit on the exact and lossless paths (lossless: every float payload
    compressed), within the bound on the lossy one; float sums (whose rounding depends on the
    order of the additions): zccl and Gloo each within that rounding of the exact sum."""
    p = world()
    all_gather = _torch_names.all_gather_single
    reduce_scatter = _torch_names.reduce_scatter_single
    lossless = {"mode": "lossless", "min_compress_bytes": 0}
    lossy = {"mode": "abs", "error_bound": EB, "min_compress_bytes": 0, "algorithm": "ring"}
    for n, dtype in itertools.product(
        (1, p + 1, 4099), (torch.float32, torch.float64, torch.int32)
    ):
        x = (data(rank(), 3 * n, salt=5) * 100).to(dtype).reshape(n, 3)
        rs_in = (data(rank(), 3 * p * n, salt=6) * 100).to(dtype).reshape(p * n, 3)
        want_ag = torch.empty(p * n, 3, dtype=dtype)
        all_gather(want_ag, x, group=gloo())
        want_rs = torch.empty(n, 3, dtype=dtype)
        reduce_scatter(want_rs, rs_in, group=gloo())
        terms = [t.reshape(p, n, 3)[rank()] for t in exact_gather(rs_in)]
        exact = sum(t.double() for t in terms)
        configs = [{"algorithm": "mpi"}, lossless]
        if dtype.is_floating_point:
            configs.append(lossy)
        for cfg, stacked in itertools.product(configs, (False, True)):
            name = f"n={n} {dtype} {cfg} {'stack' if stacked else 'cat'}"
            got = torch.full((p, n, 3) if stacked else (p * n, 3), -7, dtype=dtype)
            with zccl_torch.config(**cfg):
                all_gather(got, x)
                assert got.shape == ((p, n, 3) if stacked else (p * n, 3)), name
                out = torch.full((n, 3), -7, dtype=dtype)
                reduce_scatter(out, rs_in.reshape(p, n, 3) if stacked else rs_in)
            if cfg is lossy:
                assert_within(f"all_gather_single {name}", got.reshape(p * n, 3), want_ag, EB)
            else:
                same_bits(f"all_gather_single {name}", got.reshape(p * n, 3), want_ag)
            if not dtype.is_floating_point:
                same_bits(f"reduce_scatter_single {name}", out, want_rs)
                continue
            # Float sums: the order of the additions is the backend's own (Gloo's differs), so
            # both are held to the exact float64 sum, within the rounding of any order (plus
            # the ring's bound on the lossy path).
            eb = EB if cfg is lossy else 0.0
            bound = zccl_torch._C.output_error_bound("ring", "sum", p, eb, False)
            for who, res in (("zccl", out), ("gloo", want_rs)):
                slack = (bound if who == "zccl" else 0.0) + rounding(terms, eb, dtype)
                assert_within(f"reduce_scatter_single {who} {name}", res, exact, slack)


@check
def thread_counts_may_differ_across_ranks() -> None:
    """`threads` is a per-rank setting (hosts differ in cores; the automatic count is cores /
    ranks on the host), and the automatic all_reduce choice depends on the codec's speed: every
    rank must still pick the same algorithm. At a size where one thread and T threads give
    different choices, rank 0 runs 1 thread and the others T: all take the choice for the
    smallest count (agreed before the call), with results bit-identical across ranks and within
    the bound. Before the agreement carried the count, the ranks ran different algorithms and
    timed out. With check_agreement=False the choice assumes one thread on every rank."""
    p = world()
    if p < 2:
        return
    sizes_kib = sorted({m << j for m in (4, 5, 6, 7) for j in range(2, 11)})  # 16 KiB - 7 MiB

    # The choice at the default ratio of 5 and with this transport's exact schedules.
    exact = _C.exact_schedules(zccl_torch.backend.get_backend())

    def choice(kib: int, threads: int) -> str:
        return _C.route("all_reduce", kib * 1024, p, threads=threads, ratio=5.0, exact=exact)[1]

    differ = [
        (threads, kib)
        for threads in (2, 4, 8)
        for kib in sizes_kib
        if choice(kib, 1) != choice(kib, threads)
    ]
    # At p = 3 the cost model's choice does not depend on the thread count at all: the mixed
    # run below then still has to agree, at 1 MiB.
    threads, kib = differ[0] if differ else (4, 1024)
    want = choice(kib, 1)
    n = kib * 256
    terms = [data(r, n, salt=9) for r in range(p)]
    for check_agreement in (True, False):
        t = terms[rank()].clone()
        mine = 1 if rank() == 0 else threads
        with zccl_torch.config(threads=mine, check_agreement=check_agreement):
            dist.all_reduce(t)
        ran = zccl_torch.last_stats()["algorithm"]
        name = f"threads 1/{threads}, {kib} KiB, check_agreement={check_agreement}"
        assert ran == want, f"{name}: rank {rank()} ran {ran}, the choice for 1 thread is {want}"
        for r, other in enumerate(exact_gather(t)):
            same_bits(f"{name}: rank {r}'s result", other, t)
        bound = zccl_torch._C.output_error_bound(want, "sum", p, EB, True)
        exact = sum(x.double() for x in terms)
        assert_within(name, t, exact, bound + rounding(terms, EB, torch.float32))


@check
def fast_link_sends_data_movement_exact() -> None:
    """link_gbps: at 100 Gbit/s one thread's codec cannot keep up with the link, so with
    algorithm "auto" broadcast, all_gather, scatter, gather, all_to_all and a large all_reduce
    run exact (bit for bit); an explicit algorithm still compresses; ranks that assume different
    networks raise on every rank, naming link_gbps."""
    p = world()
    if p < 2:
        return
    n = 40_000
    fast = {"link_gbps": 100.0, "threads": 1}
    mine = data(rank(), n, salt=11)
    everyone = [data(r, n, salt=11) for r in range(p)]
    with zccl_torch.config(**fast):
        b = mine.clone()
        dist.broadcast(b, src=p - 1)
        assert zccl_torch.last_stats()["algorithm"] == "mpi", zccl_torch.last_stats()
        same_bits("broadcast at 100 Gbit/s", b, everyone[p - 1])
        gathered = torch.empty(p * n)
        dist.all_gather_into_tensor(gathered, mine)
        assert zccl_torch.last_stats()["algorithm"] == "mpi"
        same_bits("all_gather at 100 Gbit/s", gathered, torch.cat(everyone))
        k = n // p
        out = torch.empty(k * p)
        dist.all_to_all_single(out, mine[: k * p])
        assert zccl_torch.last_stats()["algorithm"] == "mpi"
        want = torch.cat([e[rank() * k : (rank() + 1) * k] for e in everyone])
        same_bits("all_to_all at 100 Gbit/s", out, want)
        s = torch.empty(n)
        dist.scatter(s, list(everyone) if rank() == 0 else None, src=0)
        same_bits("scatter at 100 Gbit/s", s, everyone[rank()])
        big = data(rank(), 1 << 20, salt=12)
        dist.all_reduce(big)
        assert zccl_torch.last_stats()["algorithm"] == "mpi", zccl_torch.last_stats()
    with zccl_torch.config(**fast, algorithm="ring"):
        gathered = torch.empty(p * n)
        dist.all_gather_into_tensor(gathered, mine)
        assert zccl_torch.last_stats()["algorithm"] == "ring"
        assert_within("all_gather, ring at 100 Gbit/s", gathered, torch.cat(everyone), EB)
    with zccl_torch.config(link_gbps=100.0 if rank() == 0 else 1.0):
        raises_everywhere(
            "link_gbps differs",
            lambda: dist.broadcast(mine.clone(), src=0),
            "link_gbps",
            "100 on rank 0",
        )


@check
def coalesced_ops_validate_dtype_and_size() -> None:
    """The findings that crashed or returned garbage: a float64 input into a float32 output
    (reduce_scatter) and float32 into float64 (all_gather), and wrong sizes, raise a ValueError
    naming the op on every rank before anything is queued."""
    p = world()

    def rs_dtype() -> None:
        with dist._coalescing_manager():
            dist.reduce_scatter_tensor(torch.empty(10), torch.ones(10 * p, dtype=torch.float64))

    def ag_dtype() -> None:
        with dist._coalescing_manager():
            dist.all_gather_into_tensor(torch.empty(10 * p, dtype=torch.float64), torch.ones(10))

    def rs_size() -> None:
        with dist._coalescing_manager():
            dist.reduce_scatter_tensor(torch.empty(10), torch.ones(10 * p + 1))

    for name, fn, needle in (
        ("reduce_scatter_tensor_coalesced dtype", rs_dtype, "reduce_scatter_tensor_coalesced"),
        ("all_gather_into_tensor_coalesced dtype", ag_dtype, "all_gather_into_tensor_coalesced"),
        ("reduce_scatter_tensor_coalesced size", rs_size, "reduce_scatter_tensor_coalesced"),
    ):
        raises_everywhere(name, fn, needle)
    outs = [torch.empty(5, dtype=torch.float64) for _ in range(p)]
    raises_everywhere("all_gather dtype", lambda: dist.all_gather(outs, torch.ones(5)), "dtype")


# ---------------------------------------------------------------------------------------------
# Agreement


@check
def disagreements_raise_on_every_rank() -> None:
    """Every finding of the issue, each raising on every rank with the field and ranks named,
    after which the ranks are still in step."""
    p = world()
    if p == 1:
        return
    last = p - 1
    odd = rank() == last
    large, small = 50_000, 10  # compressed and MPI paths

    for n in (large, small):
        t = data(rank(), n)
        op = dist.ReduceOp.MAX if odd else dist.ReduceOp.SUM
        raises_everywhere(
            f"reduce op n={n}",
            lambda t=t, op=op: dist.all_reduce(t, op=op),
            "reduce op",
            "SUM on rank",
            "MAX on rank",
        )
    src = 1 if odd else 0
    raises_everywhere(
        "broadcast src", lambda: dist.broadcast(data(0, large), src=src), "root", f"on rank {last}"
    )
    for n in (large, small):
        t = torch.ones(n, dtype=torch.int32) if odd else torch.ones(n)
        raises_everywhere(f"dtype n={n}", lambda t=t: dist.all_reduce(t), "dtype", "Int", "Float")
    with zccl_torch.config(algorithm="mpi"):  # the uncompressed path reinterpreted bytes before
        t = torch.ones(64, dtype=torch.int32) if odd else torch.ones(64)
        raises_everywhere("dtype on the mpi path", lambda: dist.all_reduce(t), "dtype")
    with zccl_torch.config(algorithm="recursive_doubling" if odd else "ring"):
        raises_everywhere("algorithm", lambda: dist.all_reduce(data(rank(), large)), "algorithm")
    with zccl_torch.config(min_compress_bytes=10**9 if odd else 0):
        raises_everywhere(
            "min_compress_bytes", lambda: dist.all_reduce(data(rank(), large)), "min_compress_bytes"
        )
    with zccl_torch.config(error_bound=2 * EB if odd else EB):
        raises_everywhere(
            "error_bound", lambda: dist.all_reduce(data(rank(), large)), "error_bound"
        )
    with zccl_torch.config(integer_ring=not odd):
        raises_everywhere(
            "integer_ring", lambda: dist.all_reduce(data(rank(), large)), "integer_ring"
        )

    def different_ops() -> None:
        if odd:
            dist.broadcast(torch.ones(8), src=0)
        else:
            dist.all_reduce(torch.ones(8))

    raises_everywhere(
        "different collectives", different_ops, "collective", "broadcast", "all_reduce"
    )
    raises_everywhere(
        "size",
        lambda: dist.all_reduce(torch.ones(100 + rank())),
        "size mismatch across ranks",
        "element count",
    )
    # all_to_all: what the last rank sends rank 0 is 3 values more than rank 0 expects, on the
    # exact path (it moved the shorter part and returned) and the compressed one (it raised on
    # rank 0 only).
    for n, alg in ((8, "mpi"), (large, "auto")):
        sends = [n] * p
        recvs = [n + 3 if rank() == 0 and q == last else n for q in range(p)]
        src, out = data(rank(), n * p), torch.empty(sum(recvs))
        with zccl_torch.config(algorithm=alg):
            raises_everywhere(
                f"all_to_all_single splits n={n}",
                lambda src=src, out=out, recvs=recvs, sends=sends: dist.all_to_all_single(
                    out, src, output_split_sizes=recvs, input_split_sizes=sends
                ),
                "size mismatch across ranks",
                f"rank {last} sends {n} values to rank 0, which expects {n + 3}",
            )
            ins = [data(rank(), n + (1 if odd and q == 0 else 0)) for q in range(p)]
            outs = [torch.empty(n) for _ in range(p)]
            raises_everywhere(
                f"all_to_all sizes n={n}",
                lambda ins=ins, outs=outs: dist.all_to_all(outs, ins),
                "split sizes disagree",
                f"rank {last} sends {n + 1} values to rank 0, which expects {n}",
            )
    # The opt-out still runs matching calls (and REL bounds still agree on the range).
    with zccl_torch.config(check_agreement=False):
        t = data(rank(), large)
        dist.all_reduce(t)
        ref = torch.stack([data(r, large).double() for r in range(p)]).sum(0)
        assert_within("check_agreement=False", t, ref, 2 * p * EB + 1e-3)


def coalesced(op: Callable[..., Any], *columns: list[torch.Tensor]) -> Callable[[], None]:
    """A call of op(*row) for every row of `columns`, all inside one _coalescing_manager."""

    def run() -> None:
        with dist._coalescing_manager():
            for row in zip(*columns, strict=True):
                op(*row)

    return run


@check
def coalesced_disagreements_raise_before_any_tensor_moves() -> None:
    """A coalesced call whose ranks disagree on one of its tensors (a count, a dtype) or on how
    many tensors it has raises on every rank before any tensor has moved, naming the first
    tensor that differs; every tensor, in and out, is as it was. (Each tensor used to be agreed
    just before it moved: those before the odd one came back reduced or gathered, under a
    message saying that no data was moved.) Then a coalesced call whose ranks agree runs."""
    p = world()
    if p == 1:
        return
    last = p - 1
    odd = rank() == last
    large, small = 50_000, 10
    others = {2: "rank 0", 3: "ranks 0, 1"}.get(p, f"ranks 0-{p - 2}")

    def kept(name: str, tensors: list[torch.Tensor], fn: Callable[[], None], *needles: str) -> None:
        before = [t.clone() for t in tensors]
        raises_everywhere(name, fn, *needles)
        for k, (t, b) in enumerate(zip(tensors, before, strict=True)):
            same_bits(f"{name}: tensor {k} after the refused call", t, b)

    for n in (large, small):
        # all_reduce: the second of three tensors is longer on the last rank.
        ts = [data(rank(), n, salt=k) for k in range(3)]
        if odd:
            ts[1] = data(rank(), n + 2, salt=1)

        kept(
            f"all_reduce_coalesced count n={n}",
            ts,
            coalesced(dist.all_reduce, ts),
            "all_reduce_coalesced: ranks disagree on tensor 1 of the 3 in the coalesced call",
            f"element count: {n} on {others}, {n + 2} on rank {last}",
            "size mismatch across ranks",
        )
        # all_gather_into_tensor: the third input is float64 on the last rank.
        dtypes = [torch.float32, torch.float32, torch.float64 if odd else torch.float32]
        ins = [data(rank(), n, dtype, salt=k) for k, dtype in enumerate(dtypes)]
        outs = [torch.zeros(p * n, dtype=dtype) for dtype in dtypes]

        kept(
            f"all_gather_into_tensor_coalesced dtype n={n}",
            ins + outs,
            coalesced(dist.all_gather_into_tensor, outs, ins),
            "ranks disagree on tensor 2 of the 3 in the coalesced call",
            f"dtype: Float on {others}, Double on rank {last}",
        )
        # reduce_scatter_tensor: one tensor more on the last rank.
        count = 3 if odd else 2
        big = [data(rank(), p * n, salt=k) for k in range(count)]
        outs = [torch.zeros(n) for _ in range(count)]

        kept(
            f"reduce_scatter_tensor_coalesced tensors n={n}",
            big + outs,
            coalesced(dist.reduce_scatter_tensor, outs, big),
            "ranks disagree on the collective they called",
            f"tensors of the coalesced call: 2 on {others}, 3 on rank {last}",
            "size mismatch across ranks",
        )
        # all_gather_coalesced (lists of lists), the first input longer on the last rank.
        ins = [data(rank(), n + (1 if odd and k == 0 else 0), salt=k) for k in range(2)]
        lists = [[torch.zeros_like(x) for x in ins] for _ in range(p)]
        kept(
            f"all_gather_coalesced count n={n}",
            ins + [t for row in lists for t in row],
            lambda ins=ins, lists=lists: dist.all_gather_coalesced(lists, ins),
            "all_gather_coalesced: ranks disagree on tensor 0 of the 2 in the coalesced call",
            "size mismatch across ranks",
        )
    # A coalesced call on some ranks and a single all_reduce on the others.

    def coalesced_or_single() -> None:
        if odd:
            dist.all_reduce(torch.ones(8))
        else:
            with dist._coalescing_manager():
                dist.all_reduce(torch.ones(8))

    raises_everywhere(
        "coalesced against a single call",
        coalesced_or_single,
        "ranks disagree on the collective they called; tensors of the coalesced call: none (not "
        f"a coalesced call) on rank {last}, 1 on {others} (size mismatch across ranks). Every",
    )
    # A setting that differs, with an integer first tensor (whose own agreement does not compare
    # settings) and a float one after it: refused before the integer one moved.
    ts = [torch.full((6,), rank(), dtype=torch.int64), data(rank(), large)]

    def int_then_float(ts: list[torch.Tensor] = ts) -> None:
        with zccl_torch.config(error_bound=2 * EB if odd else EB), dist._coalescing_manager():
            for t in ts:
                dist.all_reduce(t)

    kept(
        "all_reduce_coalesced int64 then float32, error_bound",
        ts,
        int_then_float,
        f"error_bound: {EB:.17g} on {others}, {2 * EB:.17g} on rank {last}",
    )
    # The ranks agree: it runs, each tensor reduced.
    ts = [data(rank(), n, salt=k) for k, n in enumerate((large, small, 0, 1))]
    with dist._coalescing_manager():
        for t in ts:
            dist.all_reduce(t)
    # (each tensor's algorithm is chosen on its own: the loosest of their bounds)
    bound = max(
        zccl_torch._C.output_error_bound(alg, "sum", p, EB, True)
        for alg in ("ring", "recursive_doubling", "halving_doubling", "cprp2p")
    )
    for k, t in enumerate(ts):
        terms = [data(r, t.numel(), salt=k) for r in range(p)]
        ref = torch.stack([x.double() for x in terms]).sum(0)
        tol = bound + rounding(terms, bound)
        assert_within(f"coalesced all_reduce tensor {k}", t, ref, tol)


# ---------------------------------------------------------------------------------------------
# Point-to-point and sparse


@check
def recv_from_any_source() -> None:
    """Rank 0 receives one message from every other rank with src=None, in whatever order they
    arrive: recv returns the sender, and the values are the sender's (compressed and exact)."""
    p = world()
    if p == 1:
        return
    for n, dtype in ((70_001, torch.float32), (33, torch.int64)):
        if rank() == 0:
            seen = set()
            for _ in range(p - 1):
                buf = torch.empty(n, dtype=dtype)
                sender = dist.recv(buf, src=None, tag=11)
                assert 0 < sender < p and sender not in seen, (sender, seen)
                seen.add(sender)
                want = data(sender, n) if dtype.is_floating_point else torch.arange(n) * sender
                if dtype.is_floating_point:
                    assert_within(f"recv any source from {sender}", buf, want.to(dtype), EB)
                else:
                    same_bits(f"recv any source from {sender}", buf, want)
            work = dist.irecv(torch.empty(n, dtype=dtype), tag=12)
            work.wait()
            assert work._source_rank() == 1, work._source_rank()
        else:
            mine = data(rank(), n) if dtype.is_floating_point else torch.arange(n) * rank()
            dist.send(mine.to(dtype), dst=0, tag=11)
            if rank() == 1:
                dist.send(mine.to(dtype), dst=0, tag=12)
        dist.barrier()


@check
def recv_smaller_than_the_message_raises() -> None:
    """A receive smaller than what was sent fails that receive with a ValueError naming the size
    mismatch (never memory corruption, never an abort) and the group goes on working: exact
    payloads (small, and larger than one network packet) and a compressed one. (Gloo, on 10
    float32 sent into 5, ended the receiving process.)"""
    p = world()
    if p == 1:
        return
    for n, dtype in ((1000, torch.int32), (100_000, torch.int32), (70_001, torch.float32)):
        if rank() == 0:
            dist.send(torch.ones(n, dtype=dtype), dst=1, tag=21)
        elif rank() == 1:
            try:
                dist.recv(torch.empty(n // 10, dtype=dtype), src=0, tag=21)
            except ValueError as exc:
                text = str(exc)
                assert "recv: size mismatch" in text, text
            else:
                raise AssertionError(f"a receive of {n // 10} values took {n} without an error")
        dist.barrier()
    t = torch.full((5,), float(rank()))
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(t)
    assert float(t[0]) == p * (p - 1) / 2, t


def stream_as_long_as_its_values(k: int = 1000, eb: float = 1e-9) -> torch.Tensor:
    """``k`` random float32 values and a tail of zeros whose stream (``mode="abs"``, ``eb``) is
    exactly as long as the values uncompressed. Found by search over the seed and the tail
    (each zero shortens the difference by about 4 bytes, so about half the seeds have such a
    tail), so a change of the codec finds another one, or fails here saying so."""
    for seed in range(32):
        head = torch.randn(k, generator=torch.Generator().manual_seed(seed))
        for n in range(k, k + 400):
            x = torch.cat([head, torch.zeros(n - k)])
            if zccl_torch.compress(x, eb, "abs").numel() == 4 * n:
                return x
    raise AssertionError(f"no tail of zeros makes a stream of {k} values as long as them")


@check
def send_recv_configuration_mismatch_raises() -> None:
    """Sender and receiver decide alike from dtype, size and configuration whether a message is
    compressed; when their settings differ, the receive raises a ValueError naming the
    configuration mismatch, never decodes garbage: a stream where raw values were expected
    (shorter than them, or exactly as long, which took the stream's bytes for the values
    before), raw values where a stream was expected. A uint8 tensor that carries a stream's
    bytes is an ordinary payload and arrives as sent. chunk_size may differ: a stream of
    incompressible data in 32-value chunks fits a receive with the default chunk_size (it
    raised "size mismatch" before) and arrives within its bound. A stream longer than the
    values (incompressible data) into a raw receive raises "size mismatch" naming the
    configuration mismatch as its likely cause (the truncated message cannot be read)."""
    p, me = world(), rank()
    if p == 1:
        return
    same = stream_as_long_as_its_values()
    n = same.numel()
    compress = {"min_compress_bytes": 0, "error_bound": 1e-3, "mode": "abs", "algorithm": "auto"}
    raw = {"min_compress_bytes": 1 << 30}
    cases = [
        ("a shorter stream", torch.randn(5000), compress, raw, "uncompressed bytes"),
        (
            "a stream as long as the values",
            same,
            {**compress, "error_bound": 1e-9},
            raw,
            f"{4 * n} bytes) where this receive expected {4 * n} uncompressed bytes",
        ),
        ("raw values", torch.randn(5000), raw, compress, "expected a compressed stream"),
    ]
    wrong: list[str] = []  # raised after the barriers, so that the other ranks are not left
    for label, x, send_cfg, recv_cfg, words in cases:
        if me == 0:
            with zccl_torch.config(**send_cfg):
                dist.send(x, dst=1, tag=31)
        elif me == 1:
            with zccl_torch.config(**recv_cfg):
                try:
                    dist.recv(torch.empty_like(x), src=0, tag=31)
                    wrong.append(f"{label}: a receive with other settings took it")
                except ValueError as exc:
                    text = str(exc)
                    if "recv: configuration mismatch" not in text or words not in text:
                        wrong.append(f"{label}: {text}")
        dist.barrier()
    carried = zccl_torch.compress(same, 1e-9, "abs")
    if me == 0:
        dist.send(carried, dst=1, tag=32)
    elif me == 1:
        got = torch.empty_like(carried)
        dist.recv(got, src=0, tag=32)
        assert torch.equal(got, carried), "a stream's bytes as a uint8 payload changed"
    noise = torch.randn(100_000, generator=torch.Generator().manual_seed(5))
    tight = {**compress, "error_bound": 1e-9}  # below float32's spacing: nothing compresses
    if me == 0:
        with zccl_torch.config(**tight, chunk_size=32):
            dist.send(noise, dst=1, tag=33)
    elif me == 1:
        got = torch.empty_like(noise)
        with zccl_torch.config(**tight):
            dist.recv(got, src=0, tag=33)
        assert_within("a stream in 32-value chunks", got, noise, tight["error_bound"])
    # Incompressible data makes a stream longer than the values: a raw receive cannot hold it,
    # and its "size mismatch" names the configuration mismatch as the likely cause.
    if me == 0:
        with zccl_torch.config(**tight):
            dist.send(noise, dst=1, tag=34)
    elif me == 1:
        try:
            with zccl_torch.config(**raw):
                dist.recv(torch.empty_like(noise), src=0, tag=34)
            wrong.append("a longer stream: a raw receive took it")
        except ValueError as exc:
            text = str(exc)
            for words in (
                "recv: size mismatch",
                "the sender compressed the message",
                "configuration mismatch",
            ):
                if words not in text:
                    wrong.append(f"a longer stream: {words!r} not in {text}")
    dist.barrier()
    t = torch.full((5,), float(me))
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(t)
    assert float(t[0]) == p * (p - 1) / 2, t
    assert not wrong, "\n".join(wrong)


@check
def strided_views_and_shared_elements() -> None:
    """A view of every other element of its storage from an offset (``as_strided``) is reduced
    and broadcast in place, exactly where exact, and the elements between are left untouched
    (Gloo, torch 2.13, 2 ranks: its all_reduce of such a 3-element view left the last element
    unreduced, so Gloo is no reference here). An all_reduce output whose elements share memory
    (``expand``) raises on every rank that passed one, with torch's own error, and nothing is
    written; the group goes on working."""
    p, me = world(), rank()
    n = 1001
    odd = torch.arange(1, 2 * n + 1, 2, dtype=torch.float64)
    even = torch.arange(0, 2 * n + 1, 2, dtype=torch.float64)

    def strided() -> tuple[torch.Tensor, torch.Tensor]:
        """Views of this rank's storage: its odd elements (what the collective gets) and the
        even ones."""
        base = torch.arange(2 * n + 1, dtype=torch.float64) + me
        return base.as_strided((n,), (2,), 1), base.as_strided((n + 1,), (2,), 0)

    for label, cfg in EXACT_PATHS.items():
        with zccl_torch.config(**cfg):
            view, between = strided()
            dist.all_reduce(view)
            want = odd * p + p * (p - 1) / 2
            same_bits(f"all_reduce of a strided view ({label})", view.contiguous(), want)
            same_bits(
                f"all_reduce: the elements between ({label})", between.contiguous(), even + me
            )
            for root in range(p):
                view, between = strided()
                dist.broadcast(view, src=root)
                name = f"broadcast of a strided view, root {root} ({label})"
                same_bits(name, view.contiguous(), odd + root)
                same_bits(f"{name}: the elements between", between.contiguous(), even + me)
    shared = torch.ones(1).expand(8)
    try:
        dist.all_reduce(shared)
    except RuntimeError as exc:
        assert "more than one element of the written-to tensor" in str(exc), exc
    else:
        raise AssertionError("all_reduce into an expanded tensor did not raise")
    assert shared.tolist() == [1.0] * 8, shared
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t.tolist() == [float(p)] * 4, t


@check
def aliased_outputs_match_gloo() -> None:
    """The in-place idioms FSDP and ZeRO use, against Gloo on the same input: all_gather_single
    whose input is this rank's chunk of the output, reduce_scatter_single whose output is this
    rank's chunk of the input, all_gather into views of one tensor, all_gather_single into a
    view at an offset, all_to_all_single from a copy into the input's own storage. Exact and
    lossless: bit for bit (integer-valued floats, so every order of the sums gives the same
    bits); lossy: within eb (data movement) or the reduce-scatter bound plus its float32
    rounding."""
    p, me = world(), rank()
    n = 4099

    def idioms(group: Any) -> dict[str, torch.Tensor]:
        res = {}
        out = torch.zeros(p * n)
        out[me * n : (me + 1) * n] = torch.arange(n) + 10 * me
        _torch_names.all_gather_single(out, out[me * n : (me + 1) * n], group=group)
        res["all_gather_single, input a chunk of the output"] = out
        buf = torch.arange(p * n, dtype=torch.float32) + me
        _torch_names.reduce_scatter_single(buf[me * n : (me + 1) * n], buf, group=group)
        res["reduce_scatter_single, output a chunk of the input"] = buf[me * n : (me + 1) * n]
        big = torch.full((p * n + 3,), -1.0)
        mine = torch.arange(n, dtype=torch.float32) + me
        _torch_names.all_gather_single(big[3:], mine, group=group)
        res["all_gather_single into a view at an offset"] = big
        t = torch.arange(p * n, dtype=torch.float32) + me
        outs = list(t.chunk(p))
        dist.all_gather(outs, outs[me].clone(), group=group)
        res["all_gather into views of one tensor"] = t
        x = torch.arange(p * n, dtype=torch.float32) * (me + 1)
        dist.all_to_all_single(x, x.clone(), group=group)
        res["all_to_all_single into its input's storage"] = x
        return res

    want = idioms(gloo())
    rs = "reduce_scatter_single, output a chunk of the input"
    lossy = {"mode": "abs", "error_bound": EB, "min_compress_bytes": 0}
    settings = {
        **{label: (cfg, 0.0, 0.0) for label, cfg in EXACT_PATHS.items()},
        "lossy ring": ({**lossy, "algorithm": "ring"}, EB, (p - 1) * EB),
        "lossy cprp2p": ({**lossy, "algorithm": "cprp2p"}, EB, (p - 1) * EB),
    }
    for label, (cfg, moved, reduced) in settings.items():
        with zccl_torch.config(**cfg):
            got = idioms(None)
        chunk = torch.arange(me * n, (me + 1) * n, dtype=torch.float64)
        sums_rounding = rounding([chunk + r for r in range(p)], EB)  # rank r's chunk: + r
        for name, ref in want.items():
            bound = reduced if name == rs else moved
            if bound == 0.0:
                same_bits(f"{name} ({label})", got[name].contiguous(), ref.contiguous())
            elif name == rs:  # and the float32 rounding of the partial sums
                assert_within(f"{name} ({label})", got[name], ref, bound + sums_rounding)
            else:
                assert_within(f"{name} ({label})", got[name], ref, bound)


@check
def sparse_all_reduce_matches_gloo() -> None:
    """SUM of sparse COO tensors (overlapping and disjoint indices, a dense trailing dimension,
    an empty one on rank 0) equals Gloo's on the same input and the dense sum, bit for bit
    (integer-valued floats: every summation order gives the same bits)."""
    p = world()
    g = torch.Generator().manual_seed(rank())
    nnz = 0 if rank() == 0 else 5 + rank()
    idx = torch.randint(0, 20, (1, nnz), generator=g)
    val = torch.randint(-9, 10, (nnz, 3), generator=g).to(torch.float32)
    mine = torch.sparse_coo_tensor(idx, val, (20, 3), check_invariants=True)
    ours, theirs = mine.clone(), mine.clone()
    dist.all_reduce(ours)
    dist.all_reduce(theirs, group=gloo())
    dense = torch.stack(exact_gather(mine.to_dense())).sum(0)
    assert ours.is_sparse and ours.is_coalesced()
    same_bits("sparse all_reduce vs dense", ours.to_dense(), dense)
    same_bits("sparse all_reduce vs gloo", ours.to_dense(), theirs.to_dense())
    raises_everywhere(
        "sparse MAX", lambda: dist.all_reduce(mine.clone(), op=dist.ReduceOp.MAX), "SUM"
    )
    del p


@check
def narrow_integer_sums_wrap() -> None:
    """SUMs of 8- and 16-bit integers that overflow wrap around, as in torch and Gloo (Open MPI
    4.1's AVX operator saturates them: 127 instead of -56), in all_reduce, reduce and both
    reduce_scatter forms, at 1000 values (the AVX path starts at a few dozen). int8 and uint8
    against Gloo on the same input; int16 (Gloo has no reduction for it) against torch's own
    wrapping sum of every rank's input."""
    p, n = world(), 1000
    for dtype in (torch.int8, torch.uint8, torch.int16):
        hi = {torch.int8: 120, torch.uint8: 250, torch.int16: 32000}[dtype]
        g = torch.Generator().manual_seed(rank())
        x = torch.randint(hi // 2, hi, (n * p,), generator=g).to(dtype)
        everyone = exact_gather(x)
        want = everyone[0].clone()
        for other in everyone[1:]:
            want += other  # torch's in-place add wraps in the tensor's own type
        block = want[rank() * n : (rank() + 1) * n]
        ar, red = x.clone(), x.clone()
        dist.all_reduce(ar)
        dist.reduce(red, dst=p - 1)
        rs_tensor, rs_list = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
        dist.reduce_scatter_tensor(rs_tensor, x)
        dist.reduce_scatter(rs_list, list(x.split(n)))
        name = str(dtype).replace("torch.", "")
        same_bits(f"{name} all_reduce", ar, want)
        if rank() == p - 1:
            same_bits(f"{name} reduce", red, want)
        same_bits(f"{name} reduce_scatter_tensor", rs_tensor, block)
        same_bits(f"{name} reduce_scatter", rs_list, block)
        if dtype in (torch.int8, torch.uint8):
            theirs = x.clone()
            dist.all_reduce(theirs, group=gloo())
            same_bits(f"{name} all_reduce vs gloo", ar, theirs)
        exact = torch.stack([t.long() for t in everyone]).sum(0)
        assert p == 1 or bool((exact > torch.iinfo(dtype).max).any()), "no sum overflowed"


@check
def half_min_max_replicas_identical_with_owner_exact() -> None:
    """MIN/MAX all_reduce of float16/bfloat16 on the ring leaves every rank with the same bits,
    also with owner_exact (an all_gather setting: the all_reduce's allgather stage must not keep
    the owner's block exact; it once recompressed it in float32 while the others decoded a half
    stream, so every rank held other bits)."""
    for dtype, op, owner_exact in itertools.product(
        (torch.float16, torch.bfloat16), (dist.ReduceOp.MIN, dist.ReduceOp.MAX), (True, False)
    ):
        t = data(rank(), 20_011, dtype)
        with zccl_torch.config(algorithm="ring", owner_exact=owner_exact, mode="rel"):
            dist.all_reduce(t, op=op)
            assert zccl_torch.last_stats()["bytes_compressed"] > 0 or world() == 1
        for q, other in enumerate(exact_gather(t)):
            same_bits(f"{dtype} {op} owner_exact={owner_exact}: rank {q} vs this rank", other, t)


@check
def min_max_keep_nan_on_every_path() -> None:
    """MIN/MAX keep a NaN whichever rank holds it, on the exact path (Open MPI's own MPI_MIN /
    MPI_MAX dropped it when it sat on rank 1 of 3) as on the compressed one and over either
    transport, as torch.minimum/maximum do; the exact path also orders -0 below +0 on every
    rank. Gloo is no reference here: it drops NaNs depending on the rank that holds them."""
    p, r = world(), rank()
    for count, alg, op in itertools.product(
        (1, 9, 1000), ("mpi", "ring", "auto"), (dist.ReduceOp.MIN, dist.ReduceOp.MAX)
    ):
        x = torch.full((count,), float(r + 1))
        holder = count // 2 % p  # the rank with the NaN moves with the case
        if r == holder:
            x[count // 2] = math.nan
        if count > 1:
            x[0] = -0.0 if r == p - 1 else 0.0
        for reduce_scatter in (False, True):
            with zccl_torch.config(algorithm=alg, min_compress_bytes=0):
                if reduce_scatter:
                    out = torch.empty(count)
                    dist.reduce_scatter_tensor(out, x.repeat(p), op=op)
                else:
                    out = x.clone()
                    dist.all_reduce(out, op=op)
            name = f"{'reduce_scatter' if reduce_scatter else 'all_reduce'} {op} {alg} n={count}"
            assert math.isnan(out[count // 2]), f"{name}: the NaN of rank {holder} was dropped"
            assert not out[: count // 2].isnan().any(), f"{name}: a NaN appeared"
            if count > 1 and alg == "mpi":
                want_negative = p == 1 or op == dist.ReduceOp.MIN  # alone: its own -0
                assert math.copysign(1.0, out[0]) == (-1.0 if want_negative else 1.0), name
            if reduce_scatter and alg != "mpi":
                continue  # lossy blocks of different ranks take different paths
            for q, other in enumerate(exact_gather(out)):
                same_bits(f"{name}: rank {q} vs this rank", other, out)


@check
def object_collectives_on_a_subgroup() -> None:
    """Object collectives on a subgroup work, and the backend's sequence number (which torch's
    debug wrapper checks across ranks) is the same on every member."""
    p = world()
    members = list(range(0, p, 2))
    group = dist.new_group(members)
    if rank() in members:
        objs: list[Any] = [None] * len(members)
        dist.all_gather_object(objs, {"rank": rank()}, group=group)
        assert objs == [{"rank": r} for r in members], objs
        gathered: list[Any] | None = [None] * len(members) if rank() == members[0] else None
        dist.gather_object(rank() * 10, gathered, dst=members[0], group=group)
        if rank() == members[0]:
            assert gathered == [r * 10 for r in members], gathered
        # torch's ProcessGroup only forwards this query for its built-in backends; its debug
        # wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) asks the backend object, as here.
        seq = zccl_torch.backend.get_backend(group)._get_sequence_number_for_group()
        seqs: list[Any] = [None] * len(members)
        dist.all_gather_object(seqs, seq, group=group)
        assert len(set(seqs)) == 1 and seq > 0, seqs
    dist.destroy_process_group(group)
    dist.barrier()


# ---------------------------------------------------------------------------------------------
# Replicas


@check
def ddp_replicas_bit_identical() -> None:
    with zccl_torch.config(zccl_torch.Options()):  # every field at its default
        _ddp_replicas()


def _ddp_replicas() -> None:
    """DDP with the default configuration and no extra user code: ranks start from different
    random inits, DDP's construction broadcast makes them bit-identical (the root included), and
    after compressed gradient all-reduces (the default hook, checked to compress) they stay so."""
    torch.manual_seed(1234 + rank())  # deliberately different inits per rank
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.Tanh(), torch.nn.Linear(512, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    assert flat.numel() * 4 >= 65_536  # above min_compress_bytes: the broadcast is compressed
    for r, other in enumerate(exact_gather(flat)):
        same_bits(f"DDP init rank {r}", other, flat)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(99 + rank())
    compressed = 0
    for _ in range(3):
        x = torch.randn(32, 64, generator=g)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        stats = zccl_torch.last_stats()
        compressed += stats["op"] == "all_reduce" and stats["bytes_compressed"] > 0
        opt.step()
    assert world() == 1 or compressed > 0, "no gradient all_reduce was compressed"
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    for r, other in enumerate(exact_gather(flat)):
        same_bits(f"DDP after 3 steps rank {r}", other, flat)


# ---------------------------------------------------------------------------------------------
# Several groups at once


@check
def groups_driven_from_several_threads_at_once() -> None:
    """Three groups over every rank (and, for p >= 3, one without rank 0), each driven by a
    Python thread of its own at the same time, as a data-loading or evaluation thread beside
    the training loop does: each compressed all_reduce (its own size per group and step, with
    a config() of its own thread) is within its bound of that group's exact sum, an integer
    all_reduce is exact and a broadcast is within the bound: the groups' workers and
    communicators never mix up their messages."""
    import threading

    p = world()
    members = [list(range(p))] * 3 + ([list(range(1, p))] if p >= 3 else [])
    # The default group's settings (main()); a group without pg_options would take the
    # environment's (REL 1e-4).
    groups = [dist.group.WORLD] + [dist.new_group(m, pg_options=OPTIONS) for m in members[1:]]
    failures: list[str] = []

    def drive(k: int) -> None:
        ranks, group = members[k], groups[k]
        try:
            for step in range(8):
                n = 20_000 + 997 * k + step
                terms = [data(r, n, salt=100 * k + step) for r in ranks]
                t = terms[ranks.index(rank())].clone()
                counts = torch.full((7 + k,), rank() + step, dtype=torch.int64)
                root = ranks[step % len(ranks)]
                b = data(root, n, salt=50 + k) if rank() == root else torch.zeros(n)
                with zccl_torch.config(threads=1 + k % 2):
                    dist.all_reduce(t, group=group)
                    ran = zccl_torch.last_stats(group)["algorithm"]
                    dist.all_reduce(counts, group=group)
                    dist.broadcast(b, src=root, group=group)
                name = f"group {k} step {step}"
                bound = zccl_torch._C.output_error_bound(ran, "sum", len(ranks), EB, True)
                exact = sum(x.double() for x in terms)
                assert_within(name, t, exact, bound + rounding(terms, EB, torch.float32))
                want = sum(r + step for r in ranks)
                assert bool((counts == want).all()), f"{name}: integer sum {counts} != {want}"
                assert_within(f"{name} broadcast", b, data(root, n, salt=50 + k), EB)
        except Exception as exc:  # reported below, on the main thread
            failures.append(f"thread of group {k}: {type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=drive, args=(k,))
        for k in range(len(groups))
        if rank() in members[k]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for group in groups[1:]:
        dist.destroy_process_group(group)


@check
def groups_made_without_options_take_the_default_groups() -> None:
    """The bound given once to init_process_group (OPTIONS: ABS 1e-3; the environment would give
    REL 1e-4) holds on the groups made without pg_options: new_group, new_subgroups and
    init_device_mesh's dimensions; pg_options given to new_group win."""
    from torch.distributed.device_mesh import init_device_mesh

    p = world()
    made: dict[str, Any] = {"new_group": dist.new_group(list(range(p)))}
    made["new_subgroups"], _ = dist.new_subgroups(group_size=1 if p % 2 else 2)
    shape = (2, p // 2) if p % 2 == 0 else (p,)
    mesh = init_device_mesh("cpu", shape)
    for dim in range(len(shape)):
        made[f"mesh dim {dim}"] = mesh.get_group(dim)
    own = zccl_torch.Options(error_bound=2 * EB, mode="abs", min_compress_bytes=0)
    made["new_group(pg_options)"] = dist.new_group(list(range(p)), pg_options=own)
    for name, group in made.items():
        want = own if name == "new_group(pg_options)" else OPTIONS
        got = zccl_torch.current_options(group)  # outside config(): the group's own
        assert got == want, f"{name}: {got} != {want}"
        t = data(rank(), 50_000)
        dist.all_reduce(t, group=group)
        if dist.get_world_size(group) > 1:
            stats = zccl_torch.last_stats(group)
            assert stats["error_bound"] == want.error_bound, (name, stats)


# ---------------------------------------------------------------------------------------------
# The network algorithm="auto" assumes, measured (zccl_torch/link.py)


def _new_group_measuring(on_ranks: list[int]) -> Any:
    """dist.new_group over every rank with ZCCL_MEASURE_LINK=1 on ``on_ranks`` only."""
    if rank() in on_ranks:
        os.environ["ZCCL_MEASURE_LINK"] = "1"
    try:
        return dist.new_group(list(range(world())))
    finally:
        os.environ.pop("ZCCL_MEASURE_LINK", None)


def _same_everywhere(name: str, values: tuple[float, ...]) -> None:
    """Every rank holds the same ``values`` (compared bit for bit through Gloo)."""
    mine = torch.tensor(values, dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(world())]
    dist.all_gather(every, mine, group=gloo())
    for r, theirs in enumerate(every):
        same_bits(f"{name} on rank {r}", theirs, mine)


@check
def measured_link_is_agreed_and_used() -> None:
    """ZCCL_MEASURE_LINK=1: a group measures its network when it is created; the backend's link
    defaults and the group's options hold the figures, the same on every rank, within the
    bounds; auto's choice follows them; measure_link() agrees across ranks; one rank has no
    network (the defaults stay, measure_link raises)."""
    group = _new_group_measuring(list(range(world())))
    opts = zccl_torch.current_options(group)
    model = _C.link_model(zccl_torch.backend.get_backend(group))
    assert model == (opts.link_gbps, opts.link_latency_us), (model, opts)
    if world() == 1:
        assert model == (OPTIONS.link_gbps, OPTIONS.link_latency_us), model
        raises_everywhere("one rank", lambda: zccl_torch.measure_link(group), "one rank")
        return
    gbps, latency_us = model
    assert link.MIN_GBPS <= gbps <= link.MAX_GBPS and 0 < latency_us < 1e6, model
    _same_everywhere("measured link", model)
    # auto takes the measured network: a 1 MiB broadcast compresses iff route() says so with it
    x = data(rank(), 1 << 18)
    before = zccl_torch.total_stats(group)["compressed_calls"]
    with zccl_torch.config(threads=1):
        dist.broadcast(x, src=world() - 1, group=group)
    exact = _C.exact_schedules(zccl_torch.backend.get_backend(group))
    compressed, _ = _C.route("broadcast", x.nbytes, world(), 1, gbps, latency_us, exact=exact)
    got = zccl_torch.total_stats(group)["compressed_calls"] - before
    assert got == int(compressed), (model, compressed, got)
    est = zccl_torch.measure_link(group, probe_bytes=1 << 16)
    assert est.settings() == {"link_gbps": est.gbps, "link_latency_us": est.latency_us}
    _same_everywhere("measure_link()", (est.gbps, est.latency_us))
    raises_everywhere(
        "bad probe", lambda: zccl_torch.measure_link(group, probe_bytes=1), "probe_bytes"
    )
    # Ranks probing different sizes would mix their messages: the agreement refuses it first.
    raises_everywhere(
        "probe sizes differ",
        lambda: zccl_torch.measure_link(group, probe_bytes=1000 + rank()),
        "measure_link",
        "1000 on rank 0",
    )
    assert zccl_torch.measure_link(group, probe_bytes=4096).probe_bytes == 4096  # still usable


@check
def measuring_on_some_ranks_only_raises_everywhere() -> None:
    """ZCCL_MEASURE_LINK set on rank 0 only: creating the group raises on every rank, naming the
    variable and who chose what, instead of leaving the others to wait in the measurement."""
    if world() == 1:
        return
    raises_everywhere(
        "ZCCL_MEASURE_LINK on rank 0 only",
        lambda: _new_group_measuring([0]),
        "ZCCL_MEASURE_LINK",
        "1 on rank 0",
        "0 on " + zccl_torch.membership._ranks_phrase(list(range(1, world()))),
    )


def main(argv: list[str]) -> int:
    return run_checks(CHECKS, argv, OPTIONS, timeout_s=60, scoped=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
