"""Calibrates the emulated cluster before a benchmark run (started under mpirun_cluster.sh).

Measures what the model in ``benchmarks/model.py`` needs, on the same ranks and network as the
benchmark that follows: the achieved per-link rate (every rank sends 64 MB to its right
neighbour while receiving from its left one, so all links are busy at once, as in a ring
collective), the one-way latency of a small message, and fZ-light's throughput on the benchmark
data with all ranks compressing at the same time (on an oversubscribed host that is less than
one core's worth each). Prints one JSON object (rank 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_data

import zccl_torch


def ring_rate(comm: MPI.Comm, nbytes: int, reps: int) -> float:
    """Median achieved bytes/s per link with every link busy (slowest rank per repetition)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    send = np.ones(nbytes, dtype=np.uint8)
    recv = np.empty_like(send)
    rates = []
    for rep in range(reps + 1):  # the first is a warm-up (TCP slow start, connection setup)
        comm.Barrier()
        start = time.perf_counter()
        comm.Sendrecv(send, (rank + 1) % p, 7, recv, (rank - 1) % p, 7)
        elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        if rep:
            rates.append(nbytes / elapsed)
    return statistics.median(rates)


def latency(comm: MPI.Comm, iters: int) -> float:
    """Half the round-trip time of an 8-byte ping-pong between ranks 0 and 1, seconds."""
    rank = comm.Get_rank()
    buf = np.zeros(1, dtype=np.float64)
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        if rank == 0:
            comm.Send(buf, 1, 3)
            comm.Recv(buf, 1, 3)
        elif rank == 1:
            comm.Recv(buf, 0, 3)
            comm.Send(buf, 0, 3)
    half_rtt = (time.perf_counter() - start) / iters / 2
    return comm.bcast(half_rtt, root=0)


def codec_rates(comm: MPI.Comm, kind: str, rel: float, mb: int) -> dict[str, float]:
    """Compression/decompression bytes/s per rank with every rank busy, and the ratio."""
    x = bench_data.values(kind, seed=comm.Get_rank(), numel=mb * (1 << 20) // 4)
    eb = zccl_torch.resolve_error_bound(x, rel, "rel")
    comm.Barrier()
    start = time.perf_counter()
    stream = zccl_torch.compress(x, eb, threads=1)
    t_c = time.perf_counter() - start
    out = torch.zeros_like(x)  # touched: the collectives decode into existing buffers too
    comm.Barrier()
    start = time.perf_counter()
    zccl_torch.decompress(stream, threads=1, out=out)
    t_d = time.perf_counter() - start
    n = x.numel() * 4
    return {
        "compress_Bps": statistics.median(comm.allgather(n / t_c)),
        "decompress_Bps": statistics.median(comm.allgather(n / t_d)),
        "ratio": statistics.median(comm.allgather(n / stream.numel())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--data", default="wavefield", choices=bench_data.KINDS)
    parser.add_argument("--rel", type=float, default=1e-4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    out = {"ranks": p}
    if p > 1:
        out["link_Bps"] = ring_rate(comm, args.mb << 20, reps=3)
        out["latency_s"] = latency(comm, 2000)
    out.update(codec_rates(comm, args.data, args.rel, args.mb))
    if comm.Get_rank() == 0:
        print("CALIBRATION " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
