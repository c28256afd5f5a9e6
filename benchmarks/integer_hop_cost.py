"""Cost of one ring all_reduce hop: the integer hop (decode the incoming codes, add this rank's
codes, re-pack: ``integer_ring=True``) against decode-add-encode (``integer_ring=False``: each
chunk of the incoming stream decoded, this rank's values added and the sum compressed while in
cache, ``recompress_add``; also timed as the ring did it before: the partial written out by
``decompress(add=)`` and compressed in a second pass, and with a third, separate add pass), and
of decoding a final block (the allgather stage) in each format. Same data, same run, one thread.

Inputs: two ranks' values (the incoming partial's and the local ones) of the RTM-like wavefield
(benchmarks/bench_data.py, cached after the first run, ~30 s per field to simulate) and of
gradient-like Gaussian noise; eb = REL x the value range of the sum, on the grid of a 4-rank ring.

Run: ``OMP_NUM_THREADS=1 python benchmarks/integer_hop_cost.py [--mvalues 4] [--repeats 7]``.
Prints the medians and writes ``benchmarks/results/integer_hop_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_data
from bench_timing import median_seconds

import zccl_torch
from zccl_torch import _C

RANKS = 4  # the grid's rank count (its code limit); the hop's cost does not depend on it


def inputs(kind: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    if kind == "noise":
        g = torch.Generator().manual_seed(0)
        return torch.randn(n, generator=g) * 1e-3, torch.randn(n, generator=g) * 1e-3
    return bench_data.values(kind, 0, n), bench_data.values(kind, 1, n)


def measure(kind: str, rel: float, n: int, repeats: int) -> dict[str, float | str]:
    incoming_x, local = inputs(kind, n)
    total = incoming_x.double() + local.double()
    eb = rel * float(total.max() - total.min())
    # Both paths write into buffers allocated once, as the ring does (its workspace).
    scratch, partial = torch.empty_like(local), torch.empty_like(local)
    seg_buf = torch.empty(_C.codes_max_segment_bytes(n), dtype=torch.uint8)
    stream_buf = torch.empty(_C.max_compressed_size(1, n, 5120, 1), dtype=torch.uint8)
    # Integer hop: the incoming segment holds the other rank's codes.
    seg_in = _C.codes_combine(None, incoming_x, eb, RANKS)
    seg_out = _C.codes_combine(seg_in, local, eb, RANKS)
    integer_hop = median_seconds(
        lambda: _C.codes_combine(seg_in, local, eb, RANKS, out=seg_buf), repeats
    )
    integer_decode = median_seconds(
        lambda: _C.codes_decode(seg_out, eb, RANKS, out=scratch), repeats
    )
    # Float hop: the incoming stream holds the other rank's values.
    stream_in = zccl_torch.compress(incoming_x, eb, threads=1)

    def float_hop() -> torch.Tensor:  # as the ring does it: decode, add, encode chunk by chunk
        return zccl_torch.recompress_add(stream_in, local, eb, threads=1, out=stream_buf)

    def float_hop_decode_add() -> torch.Tensor:  # eleventh session: the partial written out
        zccl_torch.decompress(stream_in, threads=1, out=partial, add=local)
        return _C.compress(partial, 1, eb, 5120, 1, [n], None, out=stream_buf)

    def float_hop_two_pass() -> torch.Tensor:  # before: decode, then a separate add
        zccl_torch.decompress(stream_in, threads=1, out=scratch)
        torch.add(scratch, local, out=partial)
        return _C.compress(partial, 1, eb, 5120, 1, [n], None, out=stream_buf)

    stream_out = float_hop()
    float_hop_s = median_seconds(float_hop, repeats)
    float_hop_decode_add_s = median_seconds(float_hop_decode_add, repeats)
    float_hop_two_pass_s = median_seconds(float_hop_two_pass, repeats)
    float_decode = median_seconds(
        lambda: zccl_torch.decompress(stream_out, threads=1, out=scratch), repeats
    )
    mb = n * 4 / 1e6
    return {
        "data": kind,
        "rel": rel,
        "eb": eb,
        "values": n,
        "integer_hop_s": integer_hop,
        "float_hop_s": float_hop_s,
        "float_hop_decode_add_s": float_hop_decode_add_s,
        "float_hop_two_pass_s": float_hop_two_pass_s,
        "hop_speedup": float_hop_s / integer_hop,
        "integer_hop_mb_per_s": mb / integer_hop,
        "float_hop_mb_per_s": mb / float_hop_s,
        "integer_decode_s": integer_decode,
        "float_decode_s": float_decode,
        "integer_partial_ratio": n * 4 / seg_out.numel(),
        "float_partial_ratio": n * 4 / stream_out.numel(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mvalues", type=float, default=4.0, help="million float32 values")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "integer_hop_cost.json"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = int(args.mvalues * 1e6)
    rows = []
    print(f"{n * 4 / 1e6:.0f} MB float32 per hop, one thread, median of {args.repeats}")
    print(
        f"{'data':10} {'REL':>6} {'int hop':>9} {'float hop':>9} {'dec+add':>9} {'2-pass':>9} "
        f"{'x':>5} "
        f"{'int MB/s':>9} {'float MB/s':>10} {'int dec':>8} {'flt dec':>8} "
        f"{'int ratio':>9} {'flt ratio':>9}"
    )
    for kind in ("wavefield", "noise"):
        for rel in (1e-2, 1e-3, 1e-4):
            r = measure(kind, rel, n, args.repeats)
            rows.append(r)
            print(
                f"{kind:10} {rel:6.0e} {r['integer_hop_s'] * 1e3:7.1f}ms "
                f"{r['float_hop_s'] * 1e3:7.1f}ms {r['float_hop_decode_add_s'] * 1e3:7.1f}ms "
                f"{r['float_hop_two_pass_s'] * 1e3:7.1f}ms "
                f"{r['hop_speedup']:5.2f} "
                f"{r['integer_hop_mb_per_s']:9.0f} {r['float_hop_mb_per_s']:10.0f} "
                f"{r['integer_decode_s'] * 1e3:6.1f}ms {r['float_decode_s'] * 1e3:6.1f}ms "
                f"{r['integer_partial_ratio']:9.2f} {r['float_partial_ratio']:9.2f}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = "OMP_NUM_THREADS=1 python benchmarks/integer_hop_cost.py " + " ".join(sys.argv[1:])
    args.out.write_text(json.dumps({"command": command.strip(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
