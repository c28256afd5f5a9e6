"""Exact (uncompressed) all_reduce paths side by side, in one run on every rank: Open MPI's
blocking ``MPI_Allreduce`` and non-blocking ``MPI_Iallreduce`` (libnbc), each out of place and
in place, and zccl's exact path (``algorithm="mpi"``), which posts ``MPI_Iallreduce`` from a copy.

Why it exists: Open MPI 4.1's libnbc takes a slower schedule for ``MPI_IN_PLACE``; zccl's exact
path used to pass it and was about 2x slower than necessary on the emulated cluster.

Run on the emulated 1 Gbit/s cluster (as root)::

    benchmarks/cluster/cluster.sh up 4 1gbit
    benchmarks/cluster/mpirun_cluster.sh -np 4 python3 benchmarks/exact_allreduce_paths.py
    benchmarks/cluster/cluster.sh down

Rank 0 prints the median over ``--reps`` of the slowest rank's time per path and writes
``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI  # first: mpi4py initialises MPI (THREAD_MULTIPLE), zccl reuses it

import zccl_torch


def slowest_median(comm: MPI.Comm, fn: Callable[[], object], reps: int) -> float:
    """Median over ``reps`` (one untimed first call) of the slowest rank's time, in ms."""
    times = []
    for rep in range(reps + 1):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        if rep:
            times.append(elapsed)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="message size, MB of float32")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "exact_allreduce_paths.json"
    )
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    n = int(args.mb * 1e6 / 4)
    send = np.random.default_rng(comm.rank).random(n, dtype=np.float32)
    recv = np.empty_like(send)
    work = send.copy()
    dist.init_process_group("zccl")
    tensor = torch.from_numpy(send.copy())

    def zccl_exact() -> None:
        with zccl_torch.config(algorithm="mpi"):
            dist.all_reduce(tensor)

    paths = {
        "MPI_Allreduce": lambda: comm.Allreduce(send, recv),
        "MPI_Allreduce in place": lambda: comm.Allreduce(MPI.IN_PLACE, work),
        "MPI_Iallreduce": lambda: comm.Iallreduce(send, recv).Wait(),
        "MPI_Iallreduce in place": lambda: comm.Iallreduce(MPI.IN_PLACE, work).Wait(),
        "zccl exact path (algorithm=mpi)": zccl_exact,
    }
    results = {name: slowest_median(comm, fn, args.reps) for name, fn in paths.items()}
    if comm.rank == 0:
        print(
            f"exact all_reduce SUM of {args.mb:g} MB float32 on {comm.size} ranks, median of "
            f"{args.reps} (slowest rank):"
        )
        for name, ms in results.items():
            print(f"  {name:<32} {ms:8.2f} ms")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"ranks": comm.size, "mb": args.mb, "reps": args.reps, "median_ms": results},
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
