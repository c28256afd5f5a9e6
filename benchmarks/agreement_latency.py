"""What the agreement exchange costs on small messages.

Before a collective moves data, zccl ranks agree on what it is (op, reduce op, root, dtype,
counts, settings) in one small MPI_Allreduce (csrc/backend/agreement.h). This measures, on
loopback with P ranks, the median latency of small ``all_reduce`` calls with the agreement on
(the default) and off (``check_agreement=False``), and, to separate the cost of the wider
descriptor from the cost of the message itself, a raw MPI_Allreduce (mpi4py) of the 4 doubles
the size check used to send against the 27 the full agreement sends.

    python3 benchmarks/agreement_latency.py [--np 4] [--iters 2000]

Prints a table and writes benchmarks/results/agreement_latency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1, 16, 256, 4096)  # float32 values: all below min_compress_bytes (the MPI path)


def timed(fn, iters: int) -> float:
    """Median seconds per call over `iters` calls, in 20 batches (the batch medians' median)."""
    batch = max(1, iters // 20)
    samples = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples)


def rank_main(iters: int, out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    import zccl_torch

    dist.init_process_group("zccl")
    comm = MPI.COMM_WORLD
    rows = []
    for n in SIZES:
        t = torch.ones(n)
        row = {"values": n}
        for check in (True, False):
            with zccl_torch.config(check_agreement=check):
                for _ in range(50):  # warm-up
                    dist.all_reduce(t)
                dist.barrier()
                row["agreement_on_us" if check else "agreement_off_us"] = (
                    timed(lambda t=t: dist.all_reduce(t), iters) * 1e6
                )
        rows.append(row)
    raw = {}
    for k in (4, 27):
        a, b = np.zeros(k), np.zeros(k)
        comm.Barrier()
        raw[k] = timed(lambda a=a, b=b: comm.Allreduce(a, b, op=MPI.MAX), iters) * 1e6
    # Every rank measured; report the slowest rank's figures (a collective waits for it).
    gathered = comm.gather((rows, raw), root=0)
    if comm.rank == 0:
        worst_rows = []
        for i, n in enumerate(SIZES):
            worst = {"values": n}
            for key in ("agreement_on_us", "agreement_off_us"):
                worst[key] = max(g[0][i][key] for g in gathered)
            worst["added_us"] = worst["agreement_on_us"] - worst["agreement_off_us"]
            worst_rows.append(worst)
        result = {
            "ranks": comm.size,
            "iters": iters,
            "rows": worst_rows,
            "raw_allreduce_us": {str(k): max(g[1][k] for g in gathered) for k in (4, 27)},
            "load_avg": os.getloadavg(),
            "command": " ".join(["python3", "benchmarks/agreement_latency.py", *sys.argv[1:]]),
        }
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/agreement_latency.json"))
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank:
        rank_main(args.iters, args.out)
        return
    env = dict(
        os.environ,
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
    )
    cmd = [
        "mpirun",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        str(args.np),
        sys.executable,
        __file__,
        "--rank",
        "--iters",
        str(args.iters),
        "--out",
        args.out,
    ]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, timeout=1800)
    result = json.loads(Path(args.out).read_text())
    print(f"all_reduce latency, {result['ranks']} ranks on loopback (median, slowest rank), us")
    print(f"{'values':>8} {'agreement on':>13} {'off':>8} {'added':>8}")
    for row in result["rows"]:
        print(
            f"{row['values']:>8} {row['agreement_on_us']:>13.1f} {row['agreement_off_us']:>8.1f}"
            f" {row['added_us']:>8.1f}"
        )
    raw = result["raw_allreduce_us"]
    print(f"raw MPI_Allreduce (MAX): 4 doubles {raw['4']:.1f} us, 27 doubles {raw['27']:.1f} us")
    print(f"load average {result['load_avg']}; wrote {args.out}")


if __name__ == "__main__":
    main()
