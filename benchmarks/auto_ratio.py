"""What sampling the data's compression ratio changes in ``algorithm="auto"``: the fixed ratio
of 5 the cost model assumes by default (``auto_ratio=5``) against the ratio sampled from each
call's data (``auto_ratio=0``), and both against the exact path (``algorithm="mpi"``), in the
same processes, calls alternating.

Three kinds of float32 data per rank: the benchmark wavefield at REL 1e-4 (compresses 10-14x),
white noise at REL 1e-3 (about 3.6x: gradient-like) and white noise at ABS 1e-9 (below the
values' spacing: every chunk stays raw, ratio just under 1). For each kind, collective and size,
``--reps`` timed calls per setting after one untimed call each; the time of a call is the
slowest rank's, the figure the median over the calls. Also timed: the sample's coding
(``zccl_torch.estimate_ratio`` with the backend's sample size at the resolved absolute bound,
median of 20, on rank 0).

``python3 benchmarks/auto_ratio.py [--where loopback,1gbit] [--ranks 3] [--reps 7]
[--sizes-kib 256,1024,16384] [--kinds wavefield,noise,incompressible]``: ``loopback`` runs
``mpirun`` on this host; a tc rate (e.g. ``1gbit``) brings up the emulated cluster of
``benchmarks/cluster`` (as root), one rank per host, and takes it down again. Prints a table
per setting and writes ``--out`` (JSON; default ``results/auto_ratio.json``). Under mpirun it
runs as one rank (``--rank``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from local_mpirun import driver_arguments, run_where, time_settings_alternating  # noqa: E402

COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "scatter")
# kind -> (mode, error bound)
KINDS = {
    "wavefield": ("rel", 1e-4),
    "noise": ("rel", 1e-3),
    "incompressible": ("abs", 1e-9),
}
# name -> config() changes: the default fixed ratio, the sampled ratio, and the exact path
SETTINGS: dict[str, dict[str, object]] = {
    "fixed 5": {"auto_ratio": 5.0},
    "sampled": {"auto_ratio": 0.0},
    "exact": {"algorithm": "mpi"},
}


def make_input(kind: str, rank: int, n: int) -> torch.Tensor:
    import torch

    if kind == "wavefield":
        import bench_data

        return bench_data.values("wavefield", seed=rank, numel=n)
    return torch.randn(n, generator=torch.Generator().manual_seed(100 + rank))


class Input(NamedTuple):
    """One rank's data for one kind and size, and the bound it is compressed with."""

    kind: str
    mode: str
    eb: float  # as configured (REL or ABS)
    abs_eb: float  # resolved on this rank's values
    x: torch.Tensor


def inputs(
    kinds: list[str], sizes_kib: list[int], p: int, me: int, whole_blocks: bool
) -> Iterator[Input]:
    """Rank ``me``'s data for every kind and size (float32, ``kib`` KiB; a multiple of ``p``
    values when ``whole_blocks``, for the collectives that split a tensor among the ranks)."""
    import zccl_torch

    for kind in kinds:
        mode, eb = KINDS[kind]
        for kib in sizes_kib:
            n = kib * 256
            n -= n % p if whole_blocks else 0
            x = make_input(kind, me, n)
            yield Input(kind, mode, eb, zccl_torch.resolve_error_bound(x, eb, mode), x)


def sizes_and_kinds(sizes_kib: str, kinds: str) -> tuple[list[int], list[str]]:
    """``--sizes-kib`` and ``--kinds`` (comma-separated) as lists; unknown kinds end the run."""
    names = kinds.split(",")
    if unknown := set(names) - set(KINDS):
        raise SystemExit(f"unknown kinds {sorted(unknown)}; expected some of {list(KINDS)}")
    return [int(s) for s in sizes_kib.split(",")], names


def calls(n: int, p: int) -> dict[str, Callable[[object], None]]:
    import torch
    import torch.distributed as dist

    gathered = torch.empty(n * p)
    block = torch.empty(n // p)
    root = dist.get_rank() == 0
    return {
        "all_reduce": lambda y: dist.all_reduce(y),
        "broadcast": lambda y: dist.broadcast(y, src=0),
        "all_gather": lambda y: dist.all_gather_into_tensor(gathered, y),
        "scatter": lambda y: dist.scatter(block, list(y.chunk(p)) if root else None, src=0),
    }


def rank_main(reps: int, sizes_kib: list[int], kinds: list[str]) -> None:
    import torch.distributed as dist

    import zccl_torch
    from zccl_torch import _C

    dist.init_process_group("zccl")
    p, me = dist.get_world_size(), dist.get_rank()
    for kind, mode, eb, abs_eb, x in inputs(kinds, sizes_kib, p, me, whole_blocks=True):
        n = x.numel()
        todo = calls(n, p)
        # The sample's coding alone: a REL bound's range pass is the collective's own work (its
        # bound needs it whether or not a sample is taken), done by inputs().
        sample_s = []
        for _ in range(20):
            start = time.perf_counter()
            zccl_torch.estimate_ratio(x, abs_eb, max_values=_C.ratio_sample_values(n))
            sample_s.append(time.perf_counter() - start)
        for collective, call in todo.items():
            settings = {
                name: {"mode": mode, "error_bound": eb, **changes}
                for name, changes in SETTINGS.items()
            }
            medians, seen = time_settings_alternating(x, call, settings, reps)
            if me != 0:
                continue
            row = {"kind": kind, "collective": collective, "bytes": n * 4}
            row["sample_ms"] = statistics.median(sample_s) * 1e3
            for name in SETTINGS:
                row[name] = {
                    **medians[name],
                    "algorithm": seen[name]["algorithm"],
                    "auto_ratio": seen[name]["auto_ratio"],
                }
            print(json.dumps(row), flush=True)
    dist.destroy_process_group()


def print_table(where: str, rows: list[dict]) -> None:
    print(f"\n{where}: median ms of the slowest rank (algorithm): fixed ratio 5, sampled, exact")
    print(
        f"{'kind':>14} {'collective':>10} {'KiB':>6} {'fixed 5':>22} {'sampled':>22} "
        f"{'ratio':>7} {'fixed/sampled':>13} {'exact ms':>9} {'sample ms':>9}"
    )
    for r in rows:
        f, s = r["fixed 5"], r["sampled"]
        ratio = s["auto_ratio"] if s["auto_ratio"] is not None else float("nan")
        print(
            f"{r['kind']:>14} {r['collective']:>10} {r['bytes'] // 1024:>6} "
            f"{f['ms']:9.2f} {f['algorithm']:>12} {s['ms']:9.2f} {s['algorithm']:>12} "
            f"{ratio:7.2f} {f['ms'] / s['ms']:13.2f} {r['exact']['ms']:9.2f} "
            f"{r['sample_ms']:9.3f}"
        )


def main() -> None:
    parser = driver_arguments(__doc__.splitlines()[0], HERE / "results" / "auto_ratio.json")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--where", default="loopback,1gbit")
    parser.add_argument("--sizes-kib", default="256,1024,16384")
    parser.add_argument("--kinds", default=",".join(KINDS), help="of " + ",".join(KINDS))
    args = parser.parse_args()
    sizes, kinds = sizes_and_kinds(args.sizes_kib, args.kinds)
    if args.rank:
        rank_main(args.reps, sizes, kinds)
        return
    argv = [__file__, "--rank", "--reps", str(args.reps), "--sizes-kib", args.sizes_kib]
    argv += ["--kinds", args.kinds]
    results: dict[str, list[dict]] = {}
    for where in args.where.split(","):
        results[where] = run_where(where, args.ranks, argv)
        print_table(where, results[where])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "ranks": args.ranks,
        "cores": os.cpu_count(),
        "reps": args.reps,
        "exact_schedules": "see README (Open MPI: libnbc)",
        **results,
    }
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
