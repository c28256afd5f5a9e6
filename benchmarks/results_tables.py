"""Markdown tables for ``benchmarks/RESULTS.md`` from the JSON the benchmarks wrote, so every
figure in that file can be regenerated: ``python benchmarks/results_tables.py FILE.json ...``.

For a ``collectives.py`` result: the calibration, then per (ranks, collective, size) the best
uncompressed MPI time and each contender's time, speedup, wire ratio, error/bound and PSNR.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

ORDER = (
    "zccl_auto",
    "zccl_ring",
    "zccl_rd",
    "zccl_hd",
    "zccl_cprp2p",
    "zccl_mt",
    "mpi",
    "gloo",
    "fp16",
)


def _fmt(v: float | None, spec: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return format(v, spec)


def calibration_table(result: dict) -> str:
    lines = [
        "| ranks | link achieved (Gbit/s) | latency (us) | compress (GB/s/rank) | "
        "decompress (GB/s/rank) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for p, c in sorted(result["calibration"].items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"| {p} | {c.get('link_Bps', 0) * 8 / 1e9:.3f} | "
            f"{c.get('latency_s', 0) * 1e6:.0f} | {c['compress_Bps'] / 1e9:.2f} | "
            f"{c['decompress_Bps'] / 1e9:.2f} | {c['ratio']:.1f} |"
        )
    return "\n".join(lines)


def collective_table(result: dict, collective: str) -> str:
    rows = [s for s in result["summary"] if s["collective"] == collective]
    lines = [
        f"**{collective}** (time = median over repeats of the slowest rank's mean; "
        "speedup vs the best uncompressed MPI time of the same run)",
        "",
        "| ranks | MB | best MPI | MPI s | contender | time s | speedup | wire ratio | "
        "err/bound | PSNR dB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keyed = sorted({(s["ranks"], s["size_mb"]) for s in rows})
    for p, mb in keyed:
        case = {s["contender"]: s for s in rows if s["ranks"] == p and s["size_mb"] == mb}
        any_row = next(iter(case.values()))
        best = any_row.get("mpi_best_name", "-")
        for name in ORDER:
            s = case.get(name)
            if s is None:
                continue
            lines.append(
                f"| {p} | {mb:g} | {best} | {_fmt(any_row.get('mpi_best_s'), '.4f')} | {name} | "
                f"{s['time_s']:.4f} | {_fmt(s.get('speedup_vs_mpi_best'), '.2f')}x | "
                f"{_fmt(s.get('wire_ratio'), '.1f')} | {_fmt(s.get('err_over_bound'), '.3f')} | "
                f"{_fmt(s['psnr_db'], '.1f')} |"
            )
    return "\n".join(lines)


def headline(result: dict, ranks: int, size_mb: float) -> str:
    """One line per collective: zccl auto vs best MPI at (ranks, size)."""
    lines = [
        "| collective | best MPI (algorithm) | zccl auto | speedup | max err / bound |",
        "|---|---|---|---|---|",
    ]
    for s in result["summary"]:
        if s["ranks"] == ranks and s["size_mb"] == size_mb and s["contender"] == "zccl_auto":
            lines.append(
                f"| {s['collective']} | {s['mpi_best_s']:.3f} s ({s['mpi_best_name']}) "
                f"| {s['time_s']:.3f} s | **{s['speedup_vs_mpi_best']:.2f}x** | "
                f"{_fmt(s.get('err_over_bound'), '.3f')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--headline", default="4:64", help="ranks:MB for the headline table")
    args = parser.parse_args()
    p, mb = args.headline.split(":")
    for path in args.results:
        result = json.loads(path.read_text())
        print(f"### {path.name}: `{result['command']}`\n")
        print(
            f"rate {result['rate']}, data {result['data']}, REL {result['rel']:g}, "
            f"machine: {result['machine']}\n"
        )
        print(calibration_table(result) + "\n")
        print(headline(result, int(p), float(mb)) + "\n")
        for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "scatter"):
            if any(s["collective"] == coll for s in result["summary"]):
                print(collective_table(result, coll) + "\n")


if __name__ == "__main__":
    main()
