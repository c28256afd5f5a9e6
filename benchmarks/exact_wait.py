"""zccl's exact collectives (``algorithm="mpi"``: Open MPI's non-blocking collectives, polled
until done) under both wait policies, on one oversubscribed host.

Why it exists: ranks that outnumber the cores wait with ``wait="sleep"`` (the automatic choice
there), and Open MPI's libnbc advances a collective's schedule only inside ``MPI_Test``: waits
that slept between polls held up every round, and a 16 MB exact all_reduce on 3 ranks of 2 cores
took 10x as long as with ``wait="spin"``. An exact collective now polls for as long as it should
take (csrc/transport/mpi_exact.cpp, ``spin_budget``) before it may sleep.

``python3 benchmarks/exact_wait.py [--ranks 3] [--reps 8]`` runs ``mpirun`` once per policy
(``ZCCL_WAIT``) and prints the median over ``--reps`` (after two untimed calls) of rank 0's time
per collective and size; writes ``--out`` (JSON). Under mpirun it runs as one rank (``--rank``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from local_mpirun import driver_arguments, run_per_setting  # noqa: E402

SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 22)  # float32 elements: 4 KiB .. 16 MiB
COLLECTIVES = ("all_reduce", "broadcast", "all_gather")


def rank_main(reps: int) -> None:
    import torch
    import torch.distributed as dist

    import zccl_torch

    dist.init_process_group("zccl")
    p = dist.get_world_size()
    for n in SIZES:
        x = torch.randn(n)
        gathered = torch.empty(n * p)
        for collective in COLLECTIVES:
            times = []
            for _ in range(reps + 2):
                y = x.clone()
                dist.barrier()
                start = time.perf_counter()
                with zccl_torch.config(algorithm="mpi"):
                    if collective == "all_reduce":
                        dist.all_reduce(y)
                    elif collective == "broadcast":
                        dist.broadcast(y, src=0)
                    else:
                        dist.all_gather_into_tensor(gathered, y)
                times.append(time.perf_counter() - start)
            if dist.get_rank() == 0:
                row = {
                    "collective": collective,
                    "bytes": n * 4,
                    "ms": statistics.median(times[2:]) * 1e3,
                }
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = driver_arguments(__doc__.splitlines()[0], HERE / "results" / "exact_wait.json")
    parser.add_argument("--ranks", type=int, default=3)
    args = parser.parse_args()
    if args.rank:
        rank_main(args.reps)
        return
    results = run_per_setting(args.ranks, __file__, args.reps, "ZCCL_WAIT", ("sleep", "spin"))
    print(f"{'collective':>10} {'bytes':>9} {'sleep ms':>9} {'spin ms':>8} {'sleep/spin':>10}")
    for sleep, spin in zip(results["sleep"], results["spin"], strict=True):
        print(
            f"{sleep['collective']:>10} {sleep['bytes']:>9} {sleep['ms']:9.2f} {spin['ms']:8.2f} "
            f"{sleep['ms'] / spin['ms']:10.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count()
    args.out.write_text(json.dumps({"ranks": args.ranks, "cores": cores, **results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
