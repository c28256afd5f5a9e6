"""Randomised differential checks of the "zccl" backend: many random collectives, each against
an exact reference computed from every rank's input (moved by a Gloo group over the same ranks).

``mpirun -np P python tests/mpi/fuzz_checks.py [--seed S] [--cases N] [--max-count C]``. Every
rank draws the same case from the same generator (op, a send/recv ring shift and the coalesced
ops with 1-4 tensors of their own counts included; dtype, count, root, reduce op (PREMUL_SUM
with a number or tensor factor included); the default group or a subgroup without rank 1; a
strided or 2-D layout, async or not; and the zccl settings: algorithm, mode, bound, threads,
chunk size, integer hop, owner_exact), fills its input from its own generator (float data of
several kinds, NaN and +/-Inf included) and checks what the contract promises:

* integer and bool dtypes, ``mode="lossless"`` data movement: the exact values, bit for bit;
* float data movement: every finite value within the bound (REL: ``eb`` times the value range
  over every rank's input, an upper bound on any range the ranks agree on), non-finite values
  exact;
* float reductions: within ``output_error_bound(algorithm, op, p, eb)`` of the exact result
  (float64 of the inputs) plus the worst-case rounding of summing in the dtype (half dtypes: a
  rounding at every hop), non-finite results where and as the exact ones are;
* all_reduce leaves every rank with the same bits (CprP2P excepted: documented in cprp2p.cpp).

A failing case prints its number and settings on every rank; the run goes on, and the exit code
is 1 if any case failed on this rank. Counts cover 0, 1, p-1, p+1, primes and up to --max-count.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import random
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from check_common import rounding

import zccl_torch
from zccl_torch import _C

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8]
OPS = [
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all_single",
    "all_to_all",
    "send_recv",
    "all_reduce_coalesced",
    "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced",
    "all_gather_coalesced",
]
# The coalesced ops: inside torch's _coalescing_manager (the backend's *_coalesced entry points
# get every tensor at once) and the list-of-lists all_gather_coalesced.
COALESCED = {op for op in OPS if op.endswith("_coalesced")}
REDUCTIONS = {
    "all_reduce",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_reduce_coalesced",
    "reduce_scatter_tensor_coalesced",
}
ALGORITHMS = ["auto", "ring", "recursive_doubling", "halving_doubling", "cprp2p", "mpi"]
PRIMES = [2, 3, 5, 7, 11, 13, 31, 127, 257, 1021, 4099, 65537]
RED = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "product": dist.ReduceOp.PRODUCT,
}
# PREMUL_SUM's factor, by case number (exact in every float dtype; the products round).
PREMUL_FACTORS = (0.75, -1.5, 0.5, 3.0)


@dataclass
class Case:
    """One random collective and the settings it runs with (the same on every rank)."""

    index: int
    op: str
    dtype: torch.dtype
    count: int
    root: int
    reduce: str
    settings: dict[str, Any]
    nonfinite: bool
    kind: str  # float data: smooth, noise, constant, huge, tiny, signed_zeros
    layout: str  # the in-place tensor / input: flat, strided (a non-contiguous view) or 2d
    async_op: bool
    subgroup: bool  # on the group of every rank but rank 1 (p >= 3), else on the default group
    splits: list[list[int]] = field(default_factory=list)  # all_to_all: splits[src][dst]
    parts: list[int] = field(default_factory=list)  # coalesced ops: the count of each tensor

    def __str__(self) -> str:
        return (
            f"case {self.index}: {self.op} {str(self.dtype).replace('torch.', '')} "
            f"count={self.count} root={self.root} reduce={self.reduce} "
            f"nonfinite={self.nonfinite} kind={self.kind} layout={self.layout} "
            f"async={self.async_op} subgroup={self.subgroup} {self.settings}"
        )


def premul_factor(index: int) -> float:
    """The PREMUL_SUM factor of case `index`."""
    return PREMUL_FACTORS[index % len(PREMUL_FACTORS)]


def reduce_op(case: Case) -> Any:
    """The case's ReduceOp; PREMUL_SUM with its factor, as a number or (odd cases) a tensor."""
    if case.reduce != "premul_sum":
        return RED[case.reduce]
    f = premul_factor(case.index)
    if case.index % 2:
        return dist._make_nccl_premul_sum(torch.tensor([f], dtype=torch.float64))
    return dist.ReduceOp.PREMUL_SUM(f)


def contributions(case: Case, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """What each rank's input adds to the reduction: PREMUL_SUM's input times the factor, in
    the input's dtype, float32 for half dtypes (as the backend scales it: in the float32 copy
    their reductions work on), the inputs themselves otherwise."""
    if case.reduce != "premul_sum":
        return xs
    return [widened(x) * premul_factor(case.index) for x in xs]


def widened(x: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 as float32 (the backend's reductions accumulate them there), other
    dtypes as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def draw_count(rng: random.Random, p: int, max_count: int) -> int:
    count = rng.choice([0, 1, p - 1, p + 1, rng.choice(PRIMES), rng.randint(2, 5000)])
    if rng.random() < 0.25:
        count = rng.randint(min(20_000, max_count), max_count)
    return max(count, 0)


def draw_case(rng: random.Random, index: int, p: int, max_count: int) -> Case:
    op = rng.choice(OPS)
    dtype = rng.choice(FLOATS * 4 + INTS)  # mostly floats: they take the compressed paths
    count = draw_count(rng, p, max_count)
    reduce = "sum"
    if op in REDUCTIONS:
        if dtype.is_floating_point:
            reduce = rng.choice(["sum", "sum", "avg", "min", "max", "product", "premul_sum"])
        else:
            reduce = rng.choice(["sum", "min", "max", "product"])
    mode = rng.choice(["abs", "abs", "abs", "rel", "rel", "lossless"])
    eb = 10.0 ** rng.uniform(-5, -1) if mode != "lossless" else 1e-3
    settings = {
        "algorithm": rng.choice(ALGORITHMS),
        "mode": mode,
        "error_bound": eb,
        "threads": rng.choice([1, 1, 2, 3]),
        "chunk_size": rng.choice([32, 1024, 5120, 65536]),
        "min_compress_bytes": rng.choice([0, 0, 0, 4096]),
        "integer_ring": rng.random() < 0.3,
        "owner_exact": rng.random() < 0.2,
        # 100 Gbit/s: data movement goes exact and all_reduce picks by the faster link
        "link_gbps": rng.choice([1.0, 1.0, 1.0, 10.0, 100.0]),
        "link_latency_us": rng.choice([5.0, 25.0]),
    }
    nonfinite = dtype.is_floating_point and rng.random() < 0.3
    kind = rng.choice(["smooth", "smooth", "noise", "constant", "huge", "tiny", "signed_zeros"])
    layout = rng.choice(["flat", "flat", "strided", "2d"])
    async_op = rng.random() < 0.3
    subgroup = p >= 3 and rng.random() < 0.25
    case = Case(
        index,
        op,
        dtype,
        count,
        rng.randrange(p),
        reduce,
        settings,
        nonfinite,
        kind,
        layout,
        async_op,
        subgroup,
    )
    if op == "all_to_all_single":
        case.splits = [[rng.randint(0, count) for _ in range(p)] for _ in range(p)]
    if op in COALESCED:
        case.parts = [draw_count(rng, p, max_count // 4) for _ in range(rng.randint(1, 4))]
    return case


def make_input(case: Case, rank: int, n: int, salt: int = 0) -> torch.Tensor:
    """This rank's input: a smooth field plus noise (floats), small values (ints: PRODUCT of p
    of them must not overflow int8), a few NaN/+-Inf when the case asks."""
    g = torch.Generator().manual_seed(case.index * 7919 + rank * 104729 + salt)
    if case.dtype.is_floating_point:
        noise = torch.randn(n, generator=g, dtype=torch.float64)
        smooth = noise.cumsum(0) / 40 + 0.01 * torch.randn(n, generator=g, dtype=torch.float64)
        x = {
            "smooth": smooth + rank,
            "noise": noise * 10.0 ** (rank - 2),
            "constant": torch.full((n,), 1.5 + rank, dtype=torch.float64),
            "huge": smooth * 1e30,  # quantisation codes overflow: stored exactly (or Inf)
            "tiny": smooth * 1e-39,  # float32 subnormals, zero in the half types
            "signed_zeros": torch.where(noise > 0, smooth, -0.0 * noise.sign()),
        }[case.kind]
        if case.reduce == "product":
            x = 1 + 0.1 * torch.tanh(smooth)  # products stay near 1 and finite
        x = x.to(case.dtype)
        if case.nonfinite and n > 0:
            for v in (math.nan, math.inf, -math.inf):
                x[torch.randint(0, n, (1 + n // 1000,), generator=g)] = v
        return x
    if case.reduce == "product":
        return torch.randint(1, 3, (n,), generator=g).to(case.dtype)
    hi = 100 if case.dtype in (torch.uint8, torch.int8) else 1_000_000
    lo = 0 if case.dtype == torch.uint8 else -hi
    return torch.randint(lo, hi, (n,), generator=g).to(case.dtype)


def laid_out(case: Case, x: torch.Tensor) -> torch.Tensor:
    """``x`` (1-D) as the case's layout: a copy, a non-contiguous view of every other value of
    a larger tensor, or a 2-D tensor; the backend must read and write it where it lies."""
    if case.layout == "strided":
        holder = torch.zeros(2 * x.numel(), dtype=x.dtype)
        view = holder[::2]
        view.copy_(x)
        return view
    if case.layout == "2d" and x.numel() % 2 == 0:
        return x.clone().reshape(2, -1)
    return x.clone()


def tensors_in(*args: Any) -> list[torch.Tensor]:
    """The tensors among `args`, lists of tensors (and lists of those) flattened."""
    found: list[torch.Tensor] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found += tensors_in(*a)
    return found


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as bytes (NaN payloads and signed zeros included)."""
    # A fresh stride-1 copy: clone() keeps a one-value strided view's stride 2.
    return torch.empty(t.numel(), dtype=t.dtype).copy_(t.detach().reshape(-1)).view(torch.uint8)


@contextlib.contextmanager
def unchanged_if_refused(*args: Any) -> Iterator[None]:
    """A collective that raises must leave every tensor it was given as it was, inputs and
    outputs: the agreement's message says "no data was moved". Raises AssertionError naming
    the changed tensor (with the call's own error as its cause) when one changed."""
    tensors = tensors_in(*args)
    before = [bits(t) for t in tensors]
    try:
        yield
    except Exception as exc:
        for k, (t, b) in enumerate(zip(tensors, before, strict=True)):
            if not torch.equal(bits(t), b):
                raise AssertionError(
                    f"a refused call changed tensor {k} of its {len(tensors)} ({exc})"
                ) from exc
        raise


def call(case: Case, fn: Any, *args: Any, **kwargs: Any) -> None:
    """Runs the collective, as an async op waited for when the case says so; a call that
    raises must leave its tensors as they were (unchanged_if_refused)."""
    with unchanged_if_refused(*args):
        if case.async_op:
            work = fn(*args, async_op=True, **kwargs)
            work.wait()
        else:
            fn(*args, **kwargs)


def everyone(t: torch.Tensor, gloo: Any) -> list[torch.Tensor]:
    """Every rank's ``t`` (same shape on every rank), moved exactly by Gloo."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size(group=gloo))]
    dist.all_gather(out, t, group=gloo)
    return out


def fold(xs: list[torch.Tensor], reduce: str, dtype: torch.dtype) -> torch.Tensor:
    """The exact reduction: float64 for floats, the dtype's own (wrapping) arithmetic for ints."""
    wide = dtype.is_floating_point
    acc = xs[0].double() if wide else xs[0].clone()
    for x in xs[1:]:
        y = x.double() if wide else x
        if reduce in ("sum", "avg"):
            acc = acc + y
        elif reduce == "product":
            acc = acc * y
        elif reduce == "min":
            acc = torch.minimum(acc, y)
        else:
            acc = torch.maximum(acc, y)
    if reduce == "avg":
        acc = acc / len(xs)
    return acc if wide else acc.to(dtype)


def value_range(xs: list[torch.Tensor]) -> float:
    """max - min of the finite values of every rank's input (0 when there are none)."""
    flat = torch.cat([x.double().reshape(-1) for x in xs]) if xs else torch.empty(0)
    flat = flat[torch.isfinite(flat)]
    return float(flat.max() - flat.min()) if flat.numel() else 0.0


def abs_bound(case: Case, xs: list[torch.Tensor]) -> float:
    """The per-compression bound in force: REL bounds are at most eb times the whole range."""
    s = case.settings
    if s["mode"] == "lossless":
        return 0.0
    if s["mode"] == "rel":  # PREMUL_SUM: the range of the scaled values, which are compressed
        return s["error_bound"] * value_range(contributions(case, xs))
    return s["error_bound"]


def check_moved(name: str, got: torch.Tensor, want: torch.Tensor, eb: float) -> None:
    """Data movement: integers exact; floats within eb where finite, non-finite exact."""
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
    if not want.dtype.is_floating_point or eb == 0.0:
        same = torch.equal(got, want) or (
            torch.equal(got.isnan(), want.isnan())
            and torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))
        )
        assert same, f"{name}: not exact"
        return
    g, w = got.double().reshape(-1), want.double().reshape(-1)
    finite = torch.isfinite(w)
    assert torch.equal(g[~finite].isnan(), w[~finite].isnan()), f"{name}: NaN lost or invented"
    infs = ~finite & ~w.isnan()
    assert torch.equal(g[infs], w[infs]), f"{name}: an infinity changed"
    err = (g[finite] - w[finite]).abs()
    if err.numel() and float(err.max()) > eb:
        i = int(err.argmax())
        value = float(w[finite][i])
        raise AssertionError(f"{name}: |error| {float(err[i])} > eb {eb} (value {value})")


def check_reduced(
    name: str, case: Case, got: torch.Tensor, terms: list[torch.Tensor], eb: float, p: int
) -> None:
    """Reductions: within the documented output bound plus rounding of the sums in the dtype."""
    terms = contributions(case, terms)
    reduce = "sum" if case.reduce == "premul_sum" else case.reduce
    want = fold(terms, reduce, case.dtype)
    if not case.dtype.is_floating_point:
        same = torch.equal(got.reshape(-1), want.reshape(-1))
        assert same, f"{name}: integer result differs from the exact one"
        return
    g, w = got.double().reshape(-1), want.reshape(-1)
    finite = torch.isfinite(w)
    assert torch.equal(g[~finite].isnan(), w[~finite].isnan()), f"{name}: NaN lost or invented"
    infs = ~finite & ~w.isnan()
    assert torch.equal(g[infs], w[infs]), f"{name}: an infinity differs"
    if case.reduce == "product":
        u = torch.finfo(case.dtype).eps
        bound = (2 * p + 2) * u * w.abs()  # exact transport; rounding of p products in the dtype
    else:
        alg = case.settings["algorithm"]
        allreduce = case.op in ("all_reduce", "reduce", "all_reduce_coalesced")
        factor = _C.output_error_bound(alg, reduce, p, 1.0, allreduce) if eb > 0 else 0.0
        # p + 1 roundings in the dtype (one per add and the AVG division; half dtypes round
        # to the half type at every hop, as half streams carry the partial sums).
        slack = factor * eb
        bound = slack + rounding([t.reshape(-1) for t in terms], slack, case.dtype)
        if case.dtype in (torch.float16, torch.bfloat16):
            # The result itself is a half value: one more rounding of |exact| + bound.
            bound = bound + torch.finfo(case.dtype).eps * (w.abs() + bound)
        # Below the normal range a rounding errs by up to half the smallest subnormal, not by a
        # relative amount: one such step per rounding (p + 2 at most).
        info = torch.finfo(case.dtype)
        bound = bound + (p + 2) * info.smallest_normal * info.eps / 2
    if isinstance(bound, torch.Tensor):
        bound = bound[finite]
    err = (g[finite] - w[finite]).abs()
    bad = err > bound
    # An exact value within the bound of the dtype's largest may round to an infinity of its
    # sign (a float16 sum past 65504 is Inf in any backend).
    near_max = w[finite].abs() + bound >= torch.finfo(case.dtype).max
    bad &= ~(near_max & g[finite].isinf() & (g[finite].sign() == w[finite].sign()))
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        b = bound[i] if isinstance(bound, torch.Tensor) else bound
        raise AssertionError(
            f"{name}: |error| {float(err[i])} > bound {float(b)} (exact {float(w[finite][i])})"
        )


def same_on_every_rank(name: str, t: torch.Tensor, gloo: Any) -> None:
    mine = bits(t)
    for r, other in enumerate(everyone(mine, gloo)):
        assert torch.equal(other, mine), f"{name}: rank {r} holds other bits than this rank"


@dataclass
class Where:
    """The group a case runs on: its members' global ranks, the zccl group (None: the default
    group) and a Gloo group over the same members (the references travel on it)."""

    members: list[int]
    zccl: Any
    gloo: Any


def issue(case: Case, where: Where) -> Callable[[], None] | None:
    """Issues the case's collective on this rank (its own input, nothing exchanged before) and
    returns the check of its result (which gathers every rank's input over Gloo); None when
    this rank takes no part in the case."""
    members, g = where.members, where.zccl
    r = dist.get_rank()
    if r not in members or (case.op == "send_recv" and len(members) == 1):
        return None
    p, i = len(members), members.index(r)  # group size and this rank's place in it
    root = members[case.root % p]  # a global rank, as torch's src/dst are
    n = case.count
    x = make_input(case, r, n)
    red = reduce_op(case)
    op = case.op

    def inputs() -> tuple[list[torch.Tensor], float]:
        xs = everyone(x, where.gloo)
        return xs, abs_bound(case, xs)

    if op == "all_reduce":
        t = laid_out(case, x)
        call(case, dist.all_reduce, t, op=red, group=g)

        def check() -> None:
            xs, eb = inputs()
            check_reduced(op, case, t, xs, eb, p)
            if case.settings["algorithm"] != "cprp2p":
                same_on_every_rank(op, t, where.gloo)

    elif op == "reduce":
        t = laid_out(case, x)
        call(case, dist.reduce, t, dst=root, op=red, group=g)

        def check() -> None:
            xs, eb = inputs()
            if r == root:
                check_reduced(op, case, t, xs, eb, p)

    elif op == "broadcast":
        t = laid_out(case, x)
        call(case, dist.broadcast, t, src=root, group=g)

        def check() -> None:
            xs, _ = inputs()
            j = members.index(root)
            check_moved(op, t.reshape(-1), xs[j], abs_bound(case, [xs[j]]))

    elif op == "all_gather":
        outs = [torch.empty_like(x) for _ in range(p)]
        call(case, dist.all_gather, outs, laid_out(case, x).reshape(-1), group=g)

        def check() -> None:
            xs, eb = inputs()
            for q in range(p):
                check_moved(f"{op}[{q}]", outs[q], xs[q], eb)

    elif op == "all_gather_into_tensor":
        out = torch.empty(p * n, dtype=case.dtype)
        call(case, dist.all_gather_into_tensor, out, laid_out(case, x).reshape(-1), group=g)

        def check() -> None:
            xs, eb = inputs()
            check_moved(op, out, torch.cat(xs), eb)

    elif op in ("reduce_scatter", "reduce_scatter_tensor"):
        big = make_input(case, r, n * p, salt=1)
        out = torch.empty(n, dtype=case.dtype)
        if op == "reduce_scatter":
            chunks = list(big.split(n)) if n else [big] * p
            with unchanged_if_refused(out, chunks):
                dist.reduce_scatter(out, chunks, op=red, group=g)
        else:
            call(case, dist.reduce_scatter_tensor, out, laid_out(case, big), op=red, group=g)

        def check() -> None:
            bigs = everyone(big, where.gloo)
            terms = [b[i * n : (i + 1) * n] for b in bigs]
            check_reduced(op, case, out, terms, abs_bound(case, bigs), p)

    elif op == "gather":
        gathered = [torch.empty_like(x) for _ in range(p)] if r == root else None
        call(case, dist.gather, laid_out(case, x).reshape(-1), gathered, dst=root, group=g)

        def check() -> None:
            xs, eb = inputs()
            for q in range(p) if gathered is not None else ():
                check_moved(f"{op}[{q}]", gathered[q], xs[q], eb)

    elif op == "scatter":
        blocks = [make_input(case, root, n, salt=2 + q) for q in range(p)]
        out = torch.empty(n, dtype=case.dtype)
        call(case, dist.scatter, out, blocks if r == root else None, src=root, group=g)

        def check() -> None:
            check_moved(op, out, blocks[i], abs_bound(case, blocks))

    elif op == "all_to_all_single":
        splits = [row[:p] for row in case.splits[:p]]  # splits[src][dst], group places
        sends, recvs = splits[i], [splits[q][i] for q in range(p)]
        src = make_input(case, r, sum(sends), salt=3)
        out = torch.empty(sum(recvs), dtype=case.dtype)
        with unchanged_if_refused(out, src):
            dist.all_to_all_single(
                out, src, output_split_sizes=recvs, input_split_sizes=sends, group=g
            )

        def check() -> None:
            srcs = [make_input(case, members[q], sum(splits[q]), salt=3) for q in range(p)]
            want = torch.cat(
                [s[sum(splits[q][:i]) : sum(splits[q][: i + 1])] for q, s in enumerate(srcs)]
            )
            check_moved(op, out, want, abs_bound(case, srcs))

    elif op == "all_to_all":
        ins = [make_input(case, r, n, salt=4 + q) for q in range(p)]
        outs = [torch.empty(n, dtype=case.dtype) for _ in range(p)]
        call(case, dist.all_to_all, outs, ins, group=g)

        def check() -> None:
            every = [
                [make_input(case, members[q], n, salt=4 + d) for d in range(p)] for q in range(p)
            ]
            bound = abs_bound(case, [b for row in every for b in row])
            for q in range(p):
                check_moved(f"{op}[{q}]", outs[q], every[q][i], bound)

    elif op == "send_recv":
        # A ring shift: each member sends its input to the next one and receives the previous
        # one's (sends and receives posted at once, as isend/irecv).
        nxt, prv = members[(i + 1) % p], members[(i - 1) % p]
        got = laid_out(case, torch.empty(n, dtype=case.dtype))
        works = [
            dist.isend(x, nxt, group=g, tag=case.index),
            dist.irecv(got, prv, group=g, tag=case.index),
        ]
        for w in works:
            w.wait()

        def check() -> None:
            xs, _ = inputs()
            j = (i - 1) % p
            check_moved(op, got.reshape(-1), xs[j], abs_bound(case, [xs[j]]))

    elif op in COALESCED:
        return issue_coalesced(case, where)
    else:
        raise AssertionError(f"unknown op {op}")
    return check


def issue_coalesced(case: Case, where: Where) -> Callable[[], None]:
    """issue() for the coalesced ops: one tensor of each count of case.parts."""
    g, op, red = where.zccl, case.op, reduce_op(case)
    r = dist.get_rank()
    p, i = len(where.members), where.members.index(r)
    widths = [c * p if op == "reduce_scatter_tensor_coalesced" else c for c in case.parts]
    xs = [make_input(case, r, c, salt=10 + k) for k, c in enumerate(widths)]
    if op == "all_gather_coalesced":  # outputs[rank][k] receives input k of rank
        lists = [[torch.empty_like(x) for x in xs] for _ in range(p)]
        call(case, dist.all_gather_coalesced, lists, xs, group=g)
        outs = [torch.cat([lists[q][k] for q in range(p)]) for k in range(len(xs))]
    else:
        outs = [laid_out(case, x) for x in xs] if op == "all_reduce_coalesced" else []
        # (the outputs of the gathers and scatters are made inside: only the inputs are kept)
        with (
            unchanged_if_refused(xs, outs),
            dist._coalescing_manager(group=g, async_ops=case.async_op) as cm,
        ):
            for k, x in enumerate(xs):
                if op == "all_reduce_coalesced":
                    dist.all_reduce(outs[k], op=red, group=g)
                elif op == "all_gather_into_tensor_coalesced":
                    outs.append(torch.empty(p * x.numel(), dtype=x.dtype))
                    dist.all_gather_into_tensor(outs[k], x, group=g)
                else:
                    outs.append(torch.empty(x.numel() // p, dtype=x.dtype))
                    dist.reduce_scatter_tensor(outs[k], x, op=red, group=g)
        if case.async_op:
            cm.wait()

    def check() -> None:
        for k, x in enumerate(xs):
            name, every = f"{op}[{k}]", everyone(x, where.gloo)
            eb = abs_bound(case, every)
            if op == "all_reduce_coalesced":
                check_reduced(name, case, outs[k], every, eb, p)
                if case.settings["algorithm"] != "cprp2p":
                    same_on_every_rank(name, outs[k], where.gloo)
            elif op == "reduce_scatter_tensor_coalesced":
                n = case.parts[k]
                check_reduced(name, case, outs[k], [e[i * n : (i + 1) * n] for e in every], eb, p)
            else:
                check_moved(name, outs[k], torch.cat(every), eb)

    return check


def run_case(case: Case, where: Where) -> bool:
    """Runs and checks the case; False when this rank took no part in it."""
    check = issue(case, where)
    if check is None:
        return False
    check()
    return True


def start(
    argv: list[str], doc: str, cases: int, max_count: int, timeout_s: int
) -> tuple[argparse.Namespace, Where, Where]:
    """Parses --seed, --cases and --max-count (defaults as given), starts the zccl group with a
    timeout of `timeout_s` and returns the arguments, the world and the subgroup of every rank
    but rank 1 (non-contiguous global ranks: roots and peers must be translated)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=cases)
    ap.add_argument("--max-count", type=int, default=max_count, help="largest count of a case")
    args = ap.parse_args(argv)
    dist.init_process_group(backend="zccl", timeout=datetime.timedelta(seconds=timeout_s))
    p = dist.get_world_size()
    world = Where(list(range(p)), None, dist.new_group(backend="gloo"))
    others = [q for q in range(p) if q != 1]
    sub = Where(others, dist.new_group(others), dist.new_group(others, backend="gloo"))
    return args, world, sub


def main(argv: list[str]) -> int:
    args, world, sub = start(argv, __doc__, cases=200, max_count=200_000, timeout_s=120)
    gloo = world.gloo
    p, r = dist.get_world_size(), dist.get_rank()
    rng = random.Random(args.seed * 1000 + p)
    failures = 0
    ran: Counter[str] = Counter()  # the algorithm of each case that compressed
    for index in range(args.cases):
        case = draw_case(rng, index, p, args.max_count)
        try:
            with zccl_torch.config(**case.settings):
                took_part = run_case(case, sub if case.subgroup else world)
            if took_part and case.op != "send_recv":  # p2p ops keep no stats
                stats = zccl_torch.last_stats(sub.zccl if case.subgroup else None)
                if stats["bytes_compressed"] > 0:
                    ran[f"{case.op}/{stats['algorithm']}"] += 1
        except Exception:
            failures += 1
            print(f"[rank {r}] FAIL {case}\n{traceback.format_exc()}", flush=True)
        dist.barrier(group=gloo)
    print(
        f"[rank {r}] fuzz: {args.cases} cases, {sum(ran.values())} compressed, {failures} failed "
        f"(seed {args.seed})",
        flush=True,
    )
    if r == 0:
        print(f"compressed cases by op/algorithm: {dict(sorted(ran.items()))}", flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
