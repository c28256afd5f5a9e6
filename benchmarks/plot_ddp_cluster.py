"""Plot of a ``benchmarks/ddp_cluster.py`` result: median step time per contender (bars, p10-p90
whiskers, bytes per step and speedup written on them) and the training loss curves.

Run alone to redraw: ``python benchmarks/plot_ddp_cluster.py benchmarks/results/ddp_cluster.json``
(writes the PNG next to the JSON, same stem).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

COLOR = {
    "mpi": "black",
    "gloo": "tab:gray",
    "fp16": "tab:blue",
    "zccl": "tab:red",
    "zccl_tuned": "tab:orange",
    "compute": "tab:green",
}
SMOOTH = 15  # steps in the moving average of the loss curves


def _moving_average(values: list[float], window: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the trailing moving average (x = the window's last step)."""
    v = np.asarray(values, dtype=np.float64)
    window = max(1, min(window, v.size))
    kernel = np.ones(window) / window
    return np.arange(window - 1, v.size), np.convolve(v, kernel, mode="valid")


def _step_bars(ax: plt.Axes, result: dict) -> None:
    rows = result["rows"]
    names = [r["contender"] for r in rows]
    med = [r["step_ms_median"] for r in rows]
    lo = [m - r["step_ms_p10"] for m, r in zip(med, rows, strict=True)]
    hi = [r["step_ms_p90"] - m for m, r in zip(med, rows, strict=True)]
    ax.bar(names, med, yerr=[lo, hi], capsize=4, color=[COLOR.get(n, "tab:purple") for n in names])
    summary = {s["contender"]: s for s in result["summary"]["contenders"]}
    for i, name in enumerate(names):
        s = summary.get(name, {})
        speed = s.get("speedup_vs_best_uncompressed")
        text = f"{s.get('mb_per_step', 0):.1f}\nMB/step"
        if speed is not None and name != "compute":
            text += f"\n{speed:.2f}x"
        ax.text(
            i,
            med[i] * 0.5,
            text,
            ha="center",
            va="center",
            fontsize=8,
            color="white" if name in ("mpi", "zccl", "fp16") else "black",
        )
    ax.set_ylabel("median step time (ms), p10-p90 whiskers")
    ax.set_title("step time (slowest rank per step); x = speedup\nvs best uncompressed", fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def _loss_curves(ax: plt.Axes, result: dict) -> None:
    # Short runs (smoke, trials) get a proportionally short window, so the curve still shows.
    window = min(SMOOTH, max(1, result["args"]["steps"] // 4))
    for r in result["rows"]:
        if r["contender"] == "compute":  # no gradient averaging: not a training run to compare
            continue
        color = COLOR.get(r["contender"], "tab:purple")
        ax.plot(r["losses"], color=color, alpha=0.15, linewidth=0.7)
        x, y = _moving_average(r["losses"], window)
        ax.plot(
            x,
            y,
            color=color,
            linewidth=1.4,
            label=f"{r['contender']}: final {r['final_loss']:.4f}, held-out {r['eval_loss']:.4f}",
        )
    ax.axvline(result["args"]["warmup"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel(f"step (dotted: end of untimed warm-up; curves: {window}-step mean)")
    ax.set_ylabel("train loss (global mini-batch mean)")
    ax.set_title("loss", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot(result: dict, path: Path) -> Path:
    """Writes the two-panel figure of ``result`` to ``path``; returns it."""
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1.5]}
    )
    _step_bars(left, result)
    _loss_curves(right, result)
    a = result["args"]
    where = "loopback smoke run" if a.get("smoke") else f"emulated {a['rate']} links"
    fig.suptitle(
        f"DDP, {a['ranks']} ranks ({where}), WideMLP {result['params'] / 1e6:.1f}M "
        f"params, batch {a['batch']}/rank, {a['steps']} steps; load "
        f"{result['loadavg_start'].split()[0]} -> {result['loadavg_end'].split()[0]}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    """Redraws the figure of a result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path)
    args = parser.parse_args()
    out = plot(json.loads(args.result.read_text()), args.result.with_suffix(".png"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
