"""Throughput of the ring all_reduce's hop with 1..T threads, both hops, one process, no network.

Integer hop (``integer_ring=True``): the ring codes ``threads`` segments of ~1 MiB at a time, one
per thread (csrc/collectives/allreduce_ring_integer.cpp); here a thread pool runs
``_C.codes_combine`` (it releases the GIL) on the same windows of segments. Float hop
(``integer_ring=False``): decompress the incoming stream, add in float32, compress the partial,
each call splitting its chunks over ``threads`` threads, one segment after the other, as the
float ring does. Same data (the RTM-like wavefield and gradient-like noise of
``integer_hop_cost.py``), same run; medians of ``--repeats``.

Run: ``python benchmarks/integer_hop_threads.py [--threads 1,2] [--mvalues 4] [--repeats 7]``.
Prints MB/s of input per hop and the speed-up over one thread; writes
``benchmarks/results/integer_hop_threads.json``. On a machine with fewer cores than threads the
figures say nothing about scaling: the script prints the core count next to them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_timing import median_seconds
from integer_hop_cost import RANKS, inputs

import zccl_torch
from zccl_torch import _C

SEGMENT_VALUES = (1 << 20) // 4  # the ring's default segment: 1 MiB of float32


def measure(kind: str, rel: float, n: int, threads: int, repeats: int) -> dict[str, float]:
    incoming_x, local = inputs(kind, n)
    total = incoming_x.double() + local.double()
    eb = rel * float(total.max() - total.min())
    bounds = [(a, min(n, a + SEGMENT_VALUES)) for a in range(0, n, SEGMENT_VALUES)]
    # Integer hop: the incoming segments hold the other rank's codes; outputs into buffers
    # allocated once (the ring's workspace).
    seg_in = [_C.codes_combine(None, incoming_x[a:b], eb, RANKS) for a, b in bounds]
    seg_out = [torch.empty(_C.codes_max_segment_bytes(b - a), dtype=torch.uint8) for a, b in bounds]

    def combine(j: int) -> None:
        a, b = bounds[j]
        _C.codes_combine(seg_in[j], local[a:b], eb, RANKS, out=seg_out[j])

    # As run_lanes does: the calling thread takes the window's first segment, the pool's
    # threads - 1 workers the others (no hand-off at all with one thread).
    with ThreadPoolExecutor(max_workers=max(1, threads - 1)) as pool:

        def integer_hop() -> None:
            for j0 in range(0, len(bounds), threads):
                rest = [
                    pool.submit(combine, j) for j in range(j0 + 1, min(len(bounds), j0 + threads))
                ]
                combine(j0)
                for future in rest:
                    future.result()

        integer_s = median_seconds(integer_hop, repeats)
    # Float hop: the incoming streams hold the other rank's values.
    streams = [zccl_torch.compress(incoming_x[a:b], eb, threads=1) for a, b in bounds]
    partial = torch.empty_like(local)

    def float_hop() -> None:
        for (a, b), stream in zip(bounds, streams, strict=True):
            part = partial[a:b]
            zccl_torch.decompress(stream, threads=threads, out=part)
            part.add_(local[a:b])
            zccl_torch.compress(part, eb, threads=threads)

    float_s = median_seconds(float_hop, repeats)
    mb = n * 4 / 1e6
    return {
        "integer_hop_mb_s": mb / integer_s,
        "float_hop_mb_s": mb / float_s,
        "integer_hop_s": integer_s,
        "float_hop_s": float_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--mvalues", type=float, default=4.0, help="values per hop, millions")
    parser.add_argument("--rels", default="1e-2,1e-4")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "integer_hop_threads.json",
    )
    args = parser.parse_args()
    n = int(args.mvalues * 1e6)
    counts = [int(t) for t in args.threads.split(",")]
    cores = len(os.sched_getaffinity(0))
    print(f"{n * 4 / 1e6:.0f} MB per hop in {-(-n // SEGMENT_VALUES)} segments; {cores} cores")
    print(
        f"{'data':>9} {'REL':>6} {'thr':>3} {'integer MB/s':>12} {'x1':>5} "
        f"{'float MB/s':>10} {'x1':>5}"
    )
    rows = []
    for kind in ("wavefield", "noise"):
        for rel in (float(r) for r in args.rels.split(",")):
            base: dict[str, float] = {}
            for threads in counts:
                m = measure(kind, rel, n, threads, args.repeats)
                base = base or m
                row = {
                    "data": kind,
                    "rel": rel,
                    "threads": threads,
                    **m,
                    "integer_speedup": m["integer_hop_mb_s"] / base["integer_hop_mb_s"],
                    "float_speedup": m["float_hop_mb_s"] / base["float_hop_mb_s"],
                }
                rows.append(row)
                print(
                    f"{kind:>9} {rel:>6g} {threads:>3} {m['integer_hop_mb_s']:>12.0f} "
                    f"{row['integer_speedup']:>5.2f} {m['float_hop_mb_s']:>10.0f} "
                    f"{row['float_speedup']:>5.2f}",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cores": cores, "values": n, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
