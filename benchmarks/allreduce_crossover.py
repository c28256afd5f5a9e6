"""Where the automatic all_reduce choice's cost model stands against measured times: the ring,
recursive doubling and the exact path (``algorithm="mpi"``) timed over sizes and data in the
same processes, calls alternating, next to what the model (``_C.allreduce_cost``, the terms
``algorithm="auto"`` compares) predicts for each at the data's compression ratio.

Data as in ``auto_ratio.py``: the benchmark wavefield at REL 1e-4 and white noise at REL 1e-3
(gradient-like). For each kind and size, ``--reps`` timed calls per algorithm after one untimed
call each; a call's time is the slowest rank's, the figure the median over the calls. The ratio
is the smallest over the ranks of ``zccl_torch.estimate_ratio`` of the whole tensor at the
resolved bound. The model runs with the network of ``--where`` (``1gbit``: 1 Gbit/s, 25 us;
``loopback``: the library's default assumption, also 1 Gbit/s), Open MPI's exact schedules and
one compression thread per rank (this VM's 2 cores hold every rank).

``python3 benchmarks/allreduce_crossover.py [--where 1gbit] [--ranks 4] [--reps 7]
[--sizes-kib 64,128,256,512,1024,2048,4096] [--kinds wavefield,noise]`` (the cluster needs
root) prints, per kind and size, each algorithm's measured and modelled ms, the fastest
measured, the model's choice at the data's ratio (what ``auto_ratio=0`` runs) and what ``auto``
ran at its default ratio of 5; writes ``--out`` (JSON; default
``results/allreduce_crossover_p<ranks>.json``). Under mpirun it runs as one rank (``--rank``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from auto_ratio import KINDS, inputs, sizes_and_kinds  # noqa: E402
from local_mpirun import driver_arguments, run_where, time_settings_alternating  # noqa: E402

ALGORITHMS = ("ring", "recursive_doubling", "mpi", "auto")
MODELLED = ("ring", "recursive_doubling", "mpi")
EXACT = "open_mpi"  # the exact schedules of the Open MPI transport the ranks run on


def rank_main(reps: int, sizes_kib: list[int], kinds: list[str]) -> None:
    import torch.distributed as dist

    import zccl_torch

    dist.init_process_group("zccl")
    p, me = dist.get_world_size(), dist.get_rank()
    for kind, mode, eb, abs_eb, x in inputs(kinds, sizes_kib, p, me, whole_blocks=False):
        ratio = zccl_torch.estimate_ratio(x, abs_eb, max_values=x.numel())
        settings = {a: {"mode": mode, "error_bound": eb, "algorithm": a} for a in ALGORITHMS}
        medians, seen = time_settings_alternating(x, dist.all_reduce, settings, reps)
        ratios: list[float] = [0.0] * p
        dist.all_gather_object(ratios, ratio)
        if me != 0:
            continue
        row: dict[str, object] = {
            "kind": kind,
            "bytes": x.numel() * 4,
            "ratio": min(ratios),
            "auto_ran": seen["auto"]["algorithm"],
            **medians,
        }
        print(json.dumps(row), flush=True)
    dist.destroy_process_group()


def add_model(rows: list[dict], p: int, link_gbps: float) -> None:
    """Each row's modelled ms per algorithm at its ratio, the model's choice at that ratio and
    the fastest measured."""
    from zccl_torch import _C

    for row in rows:
        for algorithm in MODELLED:
            cost = _C.allreduce_cost(
                algorithm, row["bytes"], p, link_gbps=link_gbps, ratio=row["ratio"], exact=EXACT
            )
            row[algorithm]["model_ms"] = cost * 1e3
        # what auto runs at this ratio (auto_ratio=0): the cheapest, exact within 1.1x
        row["model_choice"] = _C.route(
            "all_reduce", row["bytes"], p, link_gbps=link_gbps, ratio=row["ratio"], exact=EXACT
        )[1]
        row["fastest"] = min(MODELLED, key=lambda a: row[a]["ms"])


def print_table(where: str, rows: list[dict]) -> None:
    print(f"\n{where}: median ms of the slowest rank, measured / modelled at the data's ratio")
    head = "".join(f"{a:>22}" for a in MODELLED)
    print(f"{'kind':>10} {'KiB':>6} {'ratio':>6}{head} {'fastest':>19} {'model':>19} {'auto':>19}")
    for r in rows:
        cells = "".join(f"{r[a]['ms']:10.2f} / {r[a]['model_ms']:9.2f}" for a in MODELLED)
        print(
            f"{r['kind']:>10} {r['bytes'] // 1024:>6} {r['ratio']:6.2f}{cells} "
            f"{r['fastest']:>19} {r['model_choice']:>19} {r['auto_ran']:>19}"
        )


def link_of(where: str) -> float:
    """The link rate in Gbit/s that ``where`` emulates (loopback: the default assumption)."""
    if where == "loopback":
        return 1.0
    units = {"gbit": 1.0, "mbit": 1e-3}
    for unit, scale in units.items():
        if where.endswith(unit):
            return float(where[: -len(unit)]) * scale
    raise SystemExit(f"--where {where!r}: expected loopback or a tc rate such as 1gbit")


def main() -> None:
    parser = driver_arguments(__doc__.splitlines()[0], None)
    parser.set_defaults(reps=7)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--where", default="1gbit")
    parser.add_argument("--sizes-kib", default="64,128,256,512,1024,2048,4096")
    parser.add_argument("--kinds", default="wavefield,noise", help="of " + ",".join(KINDS))
    args = parser.parse_args()
    out = args.out or HERE / "results" / f"allreduce_crossover_p{args.ranks}.json"
    sizes, kinds = sizes_and_kinds(args.sizes_kib, args.kinds)
    if args.rank:
        rank_main(args.reps, sizes, kinds)
        return
    gbps = link_of(args.where)
    argv = [__file__, "--rank", "--reps", str(args.reps), "--sizes-kib", args.sizes_kib]
    rows = run_where(args.where, args.ranks, [*argv, "--kinds", args.kinds])
    add_model(rows, args.ranks, gbps)
    print_table(args.where, rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "where": args.where,
        "ranks": args.ranks,
        "cores": os.cpu_count(),
        "reps": args.reps,
        "rows": rows,
    }
    out.write_text(json.dumps(summary, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
