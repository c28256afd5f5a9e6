"""Plots of ``benchmarks/collectives.py`` results: speedup over the best uncompressed MPI time
against message size, against rank count, and (several result files) against link rate.

Run alone to redraw: ``python benchmarks/plot_collectives.py benchmarks/results/collectives.json
[more.json ...]`` (extra files, taken at other ``--rate`` values, feed the link-rate plot).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SHOWN = ("zccl_auto", "zccl_ring", "zccl_rd", "zccl_cprp2p", "gloo", "fp16")
STYLE = {
    "zccl_auto": "o-",
    "zccl_ring": "s--",
    "zccl_rd": "^--",
    "zccl_cprp2p": "v:",
    "gloo": "x-",
    "fp16": "d-",
}
COLOR = {name: f"C{i}" for i, name in enumerate(SHOWN)}  # same colour in every panel


def _rows(result: dict, **match: object) -> list[dict]:
    return [
        s
        for s in result["summary"]
        if all(s.get(k) == v for k, v in match.items()) and "speedup_vs_mpi_best" in s
    ]


def _collectives(result: dict) -> list[str]:
    order = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "scatter")
    present = {s["collective"] for s in result["summary"]}
    return [c for c in order if c in present]


def _axes(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    return fig, list(axes[0])


def _finish(fig: plt.Figure, axes: Iterable[plt.Axes], title: str, path: Path) -> Path:
    for ax in axes:
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    axes = list(axes)
    axes[0].set_ylabel("speedup over best uncompressed MPI")
    seen: dict[str, object] = {}
    for ax in axes:  # the legend collects every contender that appears in any panel
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    labels = [name for name in SHOWN if name in seen]
    handles = [seen[name] for name in labels]
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_speedups(ax: plt.Axes, result: dict, x: str, **where: object) -> None:
    """One line per shown contender: speed-up over the best MPI against row field `x`, over the
    rows matching `where`."""
    for name in SHOWN:
        rows = sorted(_rows(result, contender=name, **where), key=lambda s: s[x])
        if rows:
            ax.plot(
                [s[x] for s in rows],
                [s["speedup_vs_mpi_best"] for s in rows],
                STYLE[name],
                color=COLOR[name],
                label=name,
                ms=4,
            )


def plot_vs_size(result: dict, out_dir: Path, ranks: int) -> Path:
    colls = _collectives(result)
    fig, axes = _axes(len(colls))
    for ax, coll in zip(axes, colls, strict=True):
        _plot_speedups(ax, result, "size_mb", ranks=ranks, collective=coll)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (MB)")
        ax.set_title(coll)
    title = (
        f"{ranks} ranks, {result['rate']} links (emulated), {result['data']}, REL {result['rel']:g}"
    )
    suffix = "" if result["rate"] == "1gbit" else f"_{result['rate']}"  # other rates: own files
    return _finish(fig, axes, title, out_dir / f"collectives_speedup_vs_size_p{ranks}{suffix}.png")


def plot_vs_ranks(result: dict, out_dir: Path, size_mb: float) -> Path:
    colls = _collectives(result)
    fig, axes = _axes(len(colls))
    for ax, coll in zip(axes, colls, strict=True):
        _plot_speedups(ax, result, "ranks", size_mb=size_mb, collective=coll)
        ax.set_xlabel("ranks (one per emulated host)")
        ax.set_title(coll)
    title = f"{size_mb:g} MB, {result['rate']} links (emulated), REL {result['rel']:g}"
    suffix = "" if result["rate"] == "1gbit" else f"_{result['rate']}"
    return _finish(
        fig, axes, title, out_dir / f"collectives_speedup_vs_ranks_{size_mb:g}MB{suffix}.png"
    )


def _rate_gbit(rate: str) -> float:
    r = rate.lower()
    for suffix, scale in (("gbit", 1.0), ("mbit", 1e-3), ("kbit", 1e-6)):
        if r.endswith(suffix):
            return float(r[: -len(suffix)]) * scale
    raise ValueError(f"unknown rate {rate!r}")


def plot_vs_rate(results: list[dict], out_dir: Path, ranks: int, size_mb: float) -> Path:
    colls = sorted(
        {c for r in results for c in _collectives(r)},
        key=("all_reduce", "reduce_scatter", "all_gather", "broadcast", "scatter").index,
    )
    fig, axes = _axes(len(colls))
    for ax, coll in zip(axes, colls, strict=True):
        for name in SHOWN:
            pts = sorted(
                (_rate_gbit(r["rate"]), s["speedup_vs_mpi_best"])
                for r in results
                for s in _rows(r, ranks=ranks, size_mb=size_mb, collective=coll, contender=name)
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), STYLE[name], color=COLOR[name], label=name, ms=4)
        ax.set_xscale("log")
        ax.set_xlabel("link rate (Gbit/s, tbf)")
        ax.set_title(coll)
    return _finish(
        fig,
        axes,
        f"{ranks} ranks, {size_mb:g} MB, emulated links",
        out_dir / f"collectives_speedup_vs_rate_p{ranks}_{size_mb:g}MB.png",
    )


def _merge_by_rate(results: list[dict]) -> list[dict]:
    """One result per link rate (in first-seen order), the summaries of same-rate files joined
    (e.g. a 256 MB run next to the 1-64 MB one)."""
    merged: dict[str, dict] = {}
    for r in results:
        if r["rate"] in merged:
            merged[r["rate"]]["summary"] += r["summary"]
        else:
            merged[r["rate"]] = dict(r, summary=list(r["summary"]))
    return list(merged.values())


def plot_all(result: dict, out_dir: Path, others: list[dict] | None = None) -> list[Path]:
    """Every plot the data supports; returns the files written. ``others`` at the same link rate
    as ``result`` add points to its size and rank plots; at other rates they feed the link-rate
    plot (at the rank count and size every rate has, 64 MB and 4 ranks preferred)."""
    paths = []
    by_rate = _merge_by_rate([result, *(others or [])])
    main = by_rate[0]
    ranks = sorted({s["ranks"] for s in main["summary"]})
    sizes = sorted({s["size_mb"] for s in main["summary"]})
    for p in ranks:
        if len({s["size_mb"] for s in main["summary"] if s["ranks"] == p}) > 1:
            paths.append(plot_vs_size(main, out_dir, p))
    if len(ranks) > 1:
        size = 64.0 if 64.0 in sizes else sizes[-1]
        paths.append(plot_vs_ranks(main, out_dir, size))
    if len(by_rate) > 1:
        common = set.intersection(
            *({(s["ranks"], s["size_mb"]) for s in r["summary"]} for r in by_rate)
        )
        if common:
            p, size = max(common, key=lambda x: (x[1] == 64.0, x[0] == 4, x[1]))
            paths.append(plot_vs_rate(by_rate, out_dir, p, size))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args()
    loaded = [json.loads(p.read_text()) for p in args.results]
    out_dir = args.out_dir or args.results[0].parent
    for path in plot_all(loaded[0], out_dir, loaded[1:]):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
