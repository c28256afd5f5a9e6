"""Cost of error feedback's quantisation: ``zccl_torch.quantize`` against the compress +
decompress round trip it replaces in the DDP hook, on gradient-like data (Gaussian noise), one
thread, same run.

Run: ``OMP_NUM_THREADS=1 python benchmarks/quantize_cost.py [--mvalues 26] [--rel 1e-3]``.
Prints the medians and writes ``benchmarks/results/quantize_cost.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from bench_timing import median_seconds  # benchmarks/bench_timing.py

import zccl_torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mvalues", type=float, default=26.0, help="million float32 values")
    parser.add_argument("--rel", type=float, default=1e-3, help="bound relative to the RMS")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "quantize_cost.json"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(int(args.mvalues * 1e6), generator=torch.Generator().manual_seed(0)) * 1e-3
    eb = args.rel * float(x.pow(2).mean().sqrt())
    out, rest = torch.empty_like(x), torch.empty_like(x)

    def round_trip() -> None:  # what the hook did before: x' and x - x' through a stream
        decoded = zccl_torch.decompress(zccl_torch.compress(x, eb, threads=1), threads=1)
        _ = x - decoded

    results = {
        "round_trip_s": median_seconds(round_trip, args.repeats),
        "quantize_residual_s": median_seconds(
            lambda: zccl_torch.quantize(x, eb, threads=1, residual=True), args.repeats
        ),
        "quantize_residual_into_buffers_s": median_seconds(
            lambda: zccl_torch.quantize(x, eb, threads=1, residual=rest, out=out), args.repeats
        ),
    }
    megabytes = x.numel() * 4 / 1e6
    print(
        f"{megabytes:.0f} MB float32 Gaussian noise, eb = {args.rel:g} x RMS, one thread, "
        f"median of {args.repeats}:"
    )
    for name, seconds in results.items():
        print(f"  {name:<34} {seconds:.3f} s  ({megabytes / 1e3 / seconds:.2f} GB/s)")
    print(
        f"  round trip / quantize (with residual): "
        f"{results['round_trip_s'] / results['quantize_residual_s']:.2f}x"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"megabytes": megabytes, "rel": args.rel, **results}, indent=1) + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
