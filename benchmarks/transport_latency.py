"""Round trip of a message through ``dist.send``/``dist.recv`` between ranks 0 and 1 of a zccl
group, and the exact allreduce of 29 doubles (the agreement exchange's size), over whichever
transport the group uses: run it under mpirun twice to compare them, e.g.

    ZCCL_TRANSPORT=tcp mpirun -np 2 python benchmarks/transport_latency.py
    ZCCL_TRANSPORT=mpi mpirun -np 2 python benchmarks/transport_latency.py

Integer tensors travel uncompressed, so this times the carrier (and the backend's queue), not
the compressor. Prints one line per size (median of ``--iters`` round trips, rank 0).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import zccl_torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    dist.init_process_group("zccl")
    rank, transport = dist.get_rank(), zccl_torch.backend.transport()
    for numel in (1, 1 << 14, 1 << 18, 1 << 20):
        t = torch.zeros(numel, dtype=torch.int32)
        times = []
        for _ in range(args.iters):
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
                dist.send(t, 0)
            times.append(time.perf_counter() - start)
        if rank == 0:
            us = statistics.median(times) * 1e6
            print(f"{transport} round trip {numel * 4:>8} B: {us:9.1f} us", flush=True)
    x = torch.zeros(29, dtype=torch.float64)
    times = []
    for _ in range(args.iters):
        start = time.perf_counter()
        with zccl_torch.config(algorithm="mpi"):
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        times.append(time.perf_counter() - start)
    if rank == 0:
        print(f"{transport} exact allreduce of 29 doubles: {statistics.median(times) * 1e6:.1f} us")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
