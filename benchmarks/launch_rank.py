"""One rank of ``benchmarks/launch_compare.py``: the zccl collectives timed the same way under
any launcher (mpirun: Open MPI transport; torchrun: zccl's TCP transport). No mpi4py: barriers
and the slowest-rank reduction of the timings go through the zccl group itself (exact,
algorithm="mpi").

Prints one JSON line per collective (rank 0): label, collective, size, median over ``--iters`` of
the slowest rank's time, and the transport that carried it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_data

import zccl_torch
from zccl_torch._torch_names import all_gather_single, reduce_scatter_single


def slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def call(collective: str, numel: int) -> tuple[torch.Tensor, object]:
    """This rank's input (a field slice, as the collectives benchmark uses) and the timed call."""
    r, p = dist.get_rank(), dist.get_world_size()
    numel -= numel % p
    x = bench_data.values("wavefield", seed=r, numel=numel)
    block = numel // p
    if collective == "all_reduce":
        out = torch.empty_like(x)
        return out, lambda: (out.copy_(x), dist.all_reduce(out))
    if collective == "broadcast":
        out = x.clone()
        return out, lambda: dist.broadcast(out, src=0)
    if collective == "all_gather":
        mine = x[:block].clone()
        out = torch.empty(numel)
        return out, lambda: all_gather_single(out, mine)
    if collective == "reduce_scatter":
        out = torch.empty(block)
        return out, lambda: reduce_scatter_single(out, x)
    if collective == "scatter":
        out = torch.empty(block)
        blocks = list(x.chunk(p)) if r == 0 else None
        return out, lambda: dist.scatter(out, blocks, src=0)
    raise SystemExit(f"unknown collective {collective}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--collectives", default="all_reduce,broadcast,all_gather,reduce_scatter,scatter"
    )
    parser.add_argument("--sizes-mb", default="16")
    parser.add_argument("--rel", type=float, default=1e-4)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    dist.init_process_group("zccl")
    transport = zccl_torch.backend.transport()
    for mb in (float(s) for s in args.sizes_mb.split(",")):
        numel = int(mb * (1 << 20)) // 4
        for collective in args.collectives.split(","):
            _, run = call(collective, numel)
            times = []
            with zccl_torch.config(error_bound=args.rel, mode="rel"):
                for i in range(args.iters + 1):  # the first run warms connections and buffers
                    dist.barrier()
                    start = time.perf_counter()
                    run()
                    elapsed = slowest(time.perf_counter() - start)
                    if i > 0:
                        times.append(elapsed)
            if dist.get_rank() == 0:
                print(
                    json.dumps(
                        {
                            "label": args.label,
                            "transport": transport,
                            "collective": collective,
                            "size_mb": mb,
                            "ranks": dist.get_world_size(),
                            "median_s": statistics.median(times),
                            "times_s": times,
                        }
                    ),
                    flush=True,
                )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
