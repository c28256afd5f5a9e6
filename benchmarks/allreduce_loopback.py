"""All-reduce of a smooth float32 field through the zccl backend on one host (loopback MPI).

Run: ``mpirun --oversubscribe -np 4 python benchmarks/allreduce_loopback.py [--mb 64] [--rel 1e-4]``
(with ``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` as root).

Times zccl ring, zccl recursive doubling, the naive cprp2p baseline and MPI's own uncompressed
all-reduce on the same data (distinct per rank), OSU style: warm-up, barrier before each repetition,
per-rank time, the slowest rank taken per repetition, median over repetitions. Checks each result
against an exact reference (a float64 all-reduce of the same data, exact for 4 float32 terms) and
against the documented bound. Loopback MPI moves memory at memory speed, so compression is not
expected to win here; the bandwidth-limited case is the emulated-network benchmark's job.
Writes JSON to ``benchmarks/results/allreduce_loopback.json`` (rank 0).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import sample_fields  # benchmarks/sample_fields.py
import torch
import torch.distributed as dist

import zccl_torch

CONTENDERS = ("ring", "recursive_doubling", "cprp2p", "mpi")


def smooth_field(numel: int, seed: int) -> torch.Tensor:
    edge = round(numel ** (1 / 3))
    shape = (edge, edge, edge)
    field = sample_fields.smooth_random_field(shape, correlation_length=12.0, seed=seed)
    flat = field.reshape(-1)
    return torch.cat([flat, flat[: numel - flat.numel()]]) if flat.numel() < numel else flat[:numel]


def timed_allreduce(
    x: torch.Tensor, algorithm: str, reps: int
) -> tuple[list[float], torch.Tensor, dict]:
    """Per-rep times, the result, and the stats of the last timed all_reduce."""
    times = []
    out = x
    stats: dict = {}
    for rep in range(reps + 1):  # the first run is the warm-up
        out = x.clone()
        dist.barrier()
        start = time.perf_counter()
        with zccl_torch.config(algorithm=algorithm):
            dist.all_reduce(out)
        local = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        stats = dict(zccl_torch.last_stats())  # before the timing all_reduce replaces them
        with zccl_torch.config(algorithm="mpi"):
            dist.all_reduce(local, op=dist.ReduceOp.MAX)
        if rep:
            times.append(float(local))
    return times, out, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="message size in MB (float32)")
    parser.add_argument("--rel", type=float, default=1e-4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()

    options = zccl_torch.Options(error_bound=args.rel, mode="rel")
    dist.init_process_group("zccl", timeout=datetime.timedelta(minutes=10), pg_options=options)
    rank, p = dist.get_rank(), dist.get_world_size()
    numel = int(args.mb * 1e6 / 4)
    x = smooth_field(numel, seed=rank) + 0.1 * rank

    exact = x.double()
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(exact)
    results = {}
    for algorithm in CONTENDERS:
        times, out, stats = timed_allreduce(x, algorithm, args.reps)
        if algorithm == "mpi":
            stats = {}
        eb = stats.get("error_bound", 0.0)
        bound = zccl_torch._C.output_error_bound(algorithm, "sum", p, eb, True) if eb else 0.0
        err = float((out.double() - exact).abs().max())
        results[algorithm] = {
            "median_s": statistics.median(times),
            "times_s": times,
            "max_abs_error": err,
            "eb_per_compression": eb,
            "documented_bound": bound,
            "bytes_sent_rank0": stats.get("bytes_sent"),
        }
    if rank == 0:
        mpi_time = results["mpi"]["median_s"]
        print(
            f"all_reduce SUM, {args.mb:.0f} MB float32 smooth field, REL {args.rel:g}, "
            f"{p} ranks on one host (loopback), median of {args.reps}:"
        )
        print(f"{'contender':>20} {'time s':>8} {'vs mpi':>7} {'max err':>10} {'bound':>10}")
        for name, r in results.items():
            print(
                f"{name:>20} {r['median_s']:>8.3f} {mpi_time / r['median_s']:>6.2f}x "
                f"{r['max_abs_error']:>10.3e} {r['documented_bound']:>10.3e}"
            )
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "allreduce_loopback.json"
        path.write_text(
            json.dumps({"ranks": p, "mb": args.mb, "rel": args.rel, "results": results}, indent=1)
            + "\n"
        )
        print(f"wrote {path}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
