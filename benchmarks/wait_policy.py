"""zccl's collectives under both wait policies (``ZCCL_WAIT=sleep`` / ``spin``), on one
oversubscribed host: the exact ones (``--algorithm mpi``) or the compressed ones (``ring``).

Why it exists: ranks that outnumber the cores wait with ``wait="sleep"`` (the automatic choice
there), and Open MPI moves a large message, and advances a non-blocking collective's schedule,
only while a rank polls. Waits that slept between polls held up every transfer: a 16 MB exact
all_reduce on 3 ranks of 2 cores took 10x as long as with ``wait="spin"``, a compressed 16 MB
all_gather 2x. A wait now polls for as long as its bytes should take (``transfer_spin_budget``,
csrc/transport/backoff.h) before it may sleep. (This script was ``exact_wait.py``, exact
collectives only, until the compressed ones got the same treatment.)

``python3 benchmarks/wait_policy.py [--algorithm ring] [--ranks 3] [--reps 8] [--runs 1]`` runs
``mpirun`` once per policy (``ZCCL_WAIT``), ``--runs`` times, and prints the median over the
runs of the median over ``--reps`` (after two untimed calls) of rank 0's time per collective
and size (float32 ``randn``, the library's default bound otherwise); writes ``--out`` (JSON;
default ``results/wait_policy_<algorithm>.json``). Under mpirun it runs as one rank
(``--rank``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from local_mpirun import driver_arguments, run_per_setting  # noqa: E402

SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 22)  # float32 elements: 4 KiB .. 16 MiB
EXACT_COLLECTIVES = ("all_reduce", "broadcast", "all_gather")
COMPRESSED_COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "scatter",
    "gather",
    "reduce",
    "all_to_all",
)


def collective_calls(n: int, p: int) -> dict[str, Callable[[object], None]]:
    """One call per collective on ``n`` float32 values per rank (the block of the collectives
    that split a tensor among ``p`` ranks holds ``n / p``); each takes a fresh copy of the data."""
    import torch
    import torch.distributed as dist

    gathered = torch.empty(n * p)
    block = torch.empty(n // p)
    scattered = [torch.empty(n // p) for _ in range(p)]
    rank = dist.get_rank()
    return {
        "all_reduce": lambda y: dist.all_reduce(y),
        "broadcast": lambda y: dist.broadcast(y, src=0),
        "all_gather": lambda y: dist.all_gather_into_tensor(gathered, y),
        "reduce_scatter": lambda y: dist.reduce_scatter_tensor(block, y),
        "scatter": lambda y: dist.scatter(block, list(y.chunk(p)) if rank == 0 else None, src=0),
        "gather": lambda y: dist.gather(y[: n // p], scattered if rank == 0 else None, dst=0),
        "reduce": lambda y: dist.reduce(y, dst=0),
        "all_to_all": lambda y: dist.all_to_all_single(torch.empty_like(y), y),
    }


def rank_main(reps: int, algorithm: str) -> None:
    import torch
    import torch.distributed as dist

    import zccl_torch

    dist.init_process_group("zccl")
    p = dist.get_world_size()
    names = EXACT_COLLECTIVES if algorithm == "mpi" else COMPRESSED_COLLECTIVES
    torch.manual_seed(dist.get_rank())
    for n in SIZES:
        n -= n % p  # the split collectives need whole blocks
        x = torch.randn(n)
        calls = collective_calls(n, p)
        for collective in names:
            times = []
            for _ in range(reps + 2):
                y = x.clone()
                dist.barrier()
                start = time.perf_counter()
                with zccl_torch.config(algorithm=algorithm):
                    calls[collective](y)
                times.append(time.perf_counter() - start)
            if dist.get_rank() == 0:
                row = {
                    "collective": collective,
                    "bytes": n * 4,
                    "ms": statistics.median(times[2:]) * 1e3,
                }
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()


def median_over_runs(runs: list[dict[str, list[dict]]]) -> dict[str, list[dict]]:
    """Each policy's rows with ``ms`` the median over the runs (``runs_ms``: every run's)."""
    merged: dict[str, list[dict]] = {}
    for policy, rows in runs[0].items():
        merged[policy] = []
        for i, row in enumerate(rows):
            each = [run[policy][i]["ms"] for run in runs]
            merged[policy].append({**row, "ms": statistics.median(each), "runs_ms": each})
    return merged


def main() -> None:
    parser = driver_arguments(__doc__.splitlines()[0], HERE / "results" / "wait_policy.json")
    parser.set_defaults(out=None)  # results/wait_policy_<algorithm>.json
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--algorithm", choices=("mpi", "ring"), default="mpi")
    parser.add_argument(
        "--runs", type=int, default=1, help="mpirun pairs; figures are medians over them"
    )
    args = parser.parse_args()
    args.out = args.out or HERE / "results" / f"wait_policy_{args.algorithm}.json"
    if args.rank:
        rank_main(args.reps, args.algorithm)
        return
    runs = [
        run_per_setting(
            args.ranks,
            __file__,
            args.reps,
            "ZCCL_WAIT",
            ("sleep", "spin"),
            extra=["--algorithm", args.algorithm],
        )
        for _ in range(args.runs)
    ]
    results = median_over_runs(runs)
    print(f"{'collective':>14} {'bytes':>9} {'sleep ms':>9} {'spin ms':>8} {'sleep/spin':>10}")
    for sleep, spin in zip(results["sleep"], results["spin"], strict=True):
        print(
            f"{sleep['collective']:>14} {sleep['bytes']:>9} {sleep['ms']:9.2f} "
            f"{spin['ms']:8.2f} {sleep['ms'] / spin['ms']:10.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count()
    summary = {
        "ranks": args.ranks,
        "cores": cores,
        "algorithm": args.algorithm,
        "runs": args.runs,
        "reps": args.reps,
        **results,
    }
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
