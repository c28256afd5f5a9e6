"""Randomised checks that ranks which disagree on a collective all raise, and stay in step.

``mpirun -np P python tests/mpi/disagreement_checks.py [--seed S] [--cases N]`` (P >= 2). Every
rank draws the same random case as tests/mpi/fuzz_checks.py does (op, dtype, count, root,
reduce op, layout, async, settings, the default group or a subgroup without rank 1), then a
random set of ranks (never all, never none) calls it with one thing changed:

* ``count``: more values (every op whose counts must match; one tensor of a coalesced op);
* ``dtype``: another dtype the reduce op allows;
* ``reduce``: another reduce op (the reductions);
* ``root``: another root (reduce, broadcast, gather, scatter);
* ``collective``: another collective;
* ``setting``: another value of a setting the ranks must share (float data only: the settings
  do not change how integers travel, so they are not compared there);
* ``splits``: all_to_all split sizes (or list-entry sizes) that disagree between a sender and
  its receiver;
* ``threads`` (benign): another thread count, which must not change the result at all: the
  case runs and is checked as in fuzz_checks.py.

For every kind but ``threads``, every rank of the group must raise an error that names the
problem (no rank may return a result), and afterwards an all_reduce on the same group must give
the right sum on every rank: nobody is left behind in a half-finished collective. A case that
fails prints its number, kind and settings on every rank; the exit code is 1 if any failed.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import traceback
from collections import Counter

import torch
import torch.distributed as dist
from fuzz_checks import (
    ALGORITHMS,
    COALESCED,
    FLOATS,
    INTS,
    REDUCTIONS,
    Case,
    Where,
    draw_case,
    issue,
    start,
)

import zccl_torch

# The collective each torch op is to the backend (ops of one kind may meet: all_gather and
# all_gather_into_tensor with the same count are the same call).
KIND_OF = {
    "all_reduce": "all_reduce",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "gather": "gather",
    "scatter": "scatter",
    "all_to_all_single": "all_to_all",
    "all_to_all": "all_to_all",
}
ROOTED = {"reduce", "broadcast", "gather", "scatter"}
# Settings every rank must share, and other values to draw from.
SHARED_SETTINGS = {
    "algorithm": ALGORITHMS,
    "mode": ["abs", "rel", "lossless"],
    "error_bound": [1e-2, 3e-4, 1e-5],
    "chunk_size": [32, 1024, 5120, 65536],
    "min_compress_bytes": [0, 4096, 1 << 30],
    "integer_ring": [False, True],
    "owner_exact": [False, True],
    "link_gbps": [1.0, 10.0, 100.0],
    "link_latency_us": [5.0, 25.0],
}
NEEDLE = {
    "count": "size mismatch across ranks",
    "dtype": "dtype",
    "reduce": "reduce op",
    "root": "root",
    "collective": "collective",
    "splits": "split sizes disagree",
}


def reduce_ops_for(dtype: torch.dtype) -> list[str]:
    """The reduce ops fuzz_checks draws for `dtype` (AVG and PREMUL_SUM need a float)."""
    ops = ["sum", "min", "max", "product"]
    return [*ops, "avg", "premul_sum"] if dtype.is_floating_point else ops


def kinds_for(case: Case) -> list[str]:
    """The changes that apply to the case's op."""
    if case.op in COALESCED:
        return ["count"] if case.parts else []
    kinds = ["dtype", "collective", "threads"]
    # (splits twice: only 2 of the ops take them)
    kinds += ["splits"] * 2 if KIND_OF[case.op] == "all_to_all" else ["count"]
    if case.op in REDUCTIONS:
        kinds.append("reduce")
    if case.op in ROOTED:
        kinds.append("root")
    if case.dtype.is_floating_point:
        kinds.append("setting")
    return kinds


def changed(case: Case, kind: str, rng: random.Random, p: int, odd: set[int]) -> tuple[Case, str]:
    """The case as the odd ranks (group places `odd`) call it, and what errors must name."""
    c = dataclasses.replace(case, settings=dict(case.settings), parts=list(case.parts))
    c.splits = [list(row) for row in case.splits]
    needle = NEEDLE.get(kind, "")
    if kind == "count":
        if c.parts:
            c.parts[rng.randrange(len(c.parts))] += rng.randint(1, 3)
        else:
            c.count += rng.randint(1, 3)
    elif kind == "dtype":
        # (an integer dtype with AVG or PREMUL_SUM is refused before the ranks compare calls)
        allowed = FLOATS if case.reduce in ("avg", "premul_sum") else FLOATS + INTS
        c.dtype = rng.choice([d for d in allowed if d != case.dtype])
    elif kind == "reduce":
        c.reduce = rng.choice([r for r in reduce_ops_for(case.dtype) if r != case.reduce])
    elif kind == "root":
        c.root = (case.root + rng.randint(1, p - 1)) % p
    elif kind == "collective":
        c.op = rng.choice([o for o in KIND_OF if KIND_OF[o] != KIND_OF[case.op]])
        if c.op not in REDUCTIONS or case.op not in REDUCTIONS:
            c.reduce = "sum"  # allowed for every dtype (the data-movement ops ignore it)
    elif kind == "setting":
        name = rng.choice(sorted(SHARED_SETTINGS))
        c.settings[name] = rng.choice(
            [v for v in SHARED_SETTINGS[name] if v != case.settings[name]]
        )
        needle = name  # the agreement's message names the setting as Options does
    elif kind == "splits":
        # This rank expects more from one sender (all_to_all_single: a receive split; the list
        # op: every entry of one size), so that sender's count and this rank's differ.
        if case.op == "all_to_all_single":
            # An odd receiver and a sender that is not: only the receiver's copy of the split
            # changes (a pair of two odd ranks, or of two others, would still agree).
            dst = rng.choice(sorted(odd))
            src = rng.choice([q for q in range(p) if q not in odd])
            c.splits[src][dst] += rng.randint(1, 3)
        else:
            c.count += rng.randint(1, 3)
    elif kind == "threads":
        c.settings["threads"] = rng.choice([t for t in (1, 2, 3) if t != case.settings["threads"]])
    if not c.splits and c.op == "all_to_all_single":
        c.splits = [[c.count] * p for _ in range(p)]
    return c, needle


def in_step(where: Where) -> None:
    """An exact all_reduce on the group gives the sum of the ranks on every member."""
    t = torch.tensor([dist.get_rank()], dtype=torch.int64)
    dist.all_reduce(t, group=where.zccl)
    assert int(t) == sum(where.members), f"after the error, all_reduce gave {int(t)}"


def run(mine: Case, kind: str, where: Where) -> None:
    """Issues this rank's version of the case: it must raise, unless only threads differ (then
    its result is checked)."""
    with zccl_torch.config(**mine.settings):
        check = issue(mine, where)
    if kind == "threads":
        if check is not None:
            check()
        return
    raise AssertionError(f"{mine.op} returned on rank {dist.get_rank()} ({kind} differs)")


def main(argv: list[str]) -> int:
    # A short timeout: a case that leaves a rank waiting fails in seconds instead of hanging.
    args, world, sub = start(argv, __doc__, cases=100, max_count=100_000, timeout_s=30)
    gloo = world.gloo
    p, r = dist.get_world_size(), dist.get_rank()
    if p < 2:
        raise SystemExit("disagreement_checks needs at least 2 ranks")
    rng = random.Random(args.seed * 1000 + p)
    failures = 0
    kinds: Counter[str] = Counter()
    for index in range(args.cases):
        case = draw_case(rng, index, p, args.max_count)
        where = sub if case.subgroup else world
        q = len(where.members)
        choices = kinds_for(case) if case.op != "send_recv" and q >= 2 else []
        if not choices:
            continue
        kind = rng.choice(choices)
        odd = set(rng.sample(range(q), rng.randint(1, q - 1)))  # group places
        odd_case, needle = changed(case, kind, rng, q, odd)
        kinds[kind] += 1
        if r in where.members:
            mine = odd_case if where.members.index(r) in odd else case
            try:
                try:
                    run(mine, kind, where)
                except AssertionError:
                    raise
                except (ValueError, RuntimeError) as exc:
                    if kind == "threads" or needle not in str(exc):
                        raise AssertionError(f"wrong error for a {kind} change: {exc}") from exc
                in_step(where)
            except Exception:
                failures += 1
                print(
                    f"[rank {r}] FAIL {kind} on places {sorted(odd)}: {case}\n"
                    f"  odd ranks ran: {odd_case}\n{traceback.format_exc()}",
                    flush=True,
                )
        dist.barrier(group=gloo)
    print(
        f"[rank {r}] disagreements: {sum(kinds.values())} cases, {failures} failed "
        f"(seed {args.seed}) {dict(sorted(kinds.items()))}",
        flush=True,
    )
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
