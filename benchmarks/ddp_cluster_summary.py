"""Summary of ``benchmarks/ddp_cluster.py`` rows: speedups, loss checks, the product owner's
targets, where zccl's step time goes, and the printed table.

Conventions: a contender's step time is the median over the timed steps of the slowest rank's
step; "best uncompressed" is the faster of ``mpi`` and ``gloo``; the loss reference is ``mpi``
(``gloo`` when absent); "final loss" is the mean global train loss of the last ``tail`` steps
(every contender sees the same batches, so averaging removes batch noise, not differences).
"""

from __future__ import annotations

from typing import Any

TARGETS = {"speedup_vs_best_uncompressed": 2.0, "speedup_vs_fp16": 1.5, "loss_rel_max": 0.02}
UNCOMPRESSED = ("mpi", "gloo")
#: The zccl hook's contenders, each judged against the targets: ``zccl`` at the hook's default
#: policy (or ``--zccl-rel``), ``zccl_tuned`` at ``--tuned-rel`` (its launcher also sets
#: ``ddp_cluster.TUNED_ENV``).
ZCCL = ("zccl", "zccl_tuned")


def _ring_fp32_bytes(row: dict) -> float:
    """What a ring all-reduce of the float32 gradients sends per rank and step."""
    p = row["ranks"]
    return 2.0 * (p - 1) / p * row["grad_bytes"]


def _rel(value: float, ref: float) -> float:
    return (value - ref) / ref if ref else float("nan")


def contender_rows(rows: list[dict]) -> list[dict[str, Any]]:
    """One summary line per contender (the figures of the table)."""
    by = {r["contender"]: r for r in rows}
    uncompressed = [by[n] for n in UNCOMPRESSED if n in by]
    best = min(uncompressed, key=lambda r: r["step_ms_median"]) if uncompressed else None
    ref = by.get("mpi") or by.get("gloo")
    fp16 = by.get("fp16")
    out = []
    for r in rows:
        trains = r["contender"] != "compute"
        line: dict[str, Any] = {
            "contender": r["contender"],
            "step_ms": r["step_ms_median"],
            "step_ms_p10": r["step_ms_p10"],
            "step_ms_p90": r["step_ms_p90"],
            "mb_per_step": r["bytes_per_step_median"] / 1e6,
            "wire_reduction_vs_fp32_ring": (
                _ring_fp32_bytes(r) / r["bytes_per_step_median"]
                if r["bytes_per_step_median"]
                else None
            ),
            "final_loss": r["final_loss"] if trains else None,
            "eval_loss": r["eval_loss"] if trains else None,
            "weights_max_divergence": r.get("weights_max_divergence"),
        }
        if best is not None and trains:  # "compute" is a floor, not a way to train
            line["speedup_vs_best_uncompressed"] = best["step_ms_median"] / r["step_ms_median"]
            line["best_uncompressed"] = best["contender"]
        if fp16 is not None and trains:
            line["speedup_vs_fp16"] = fp16["step_ms_median"] / r["step_ms_median"]
        if ref is not None and trains:
            line["loss_reference"] = ref["contender"]
            line["final_loss_rel"] = _rel(r["final_loss"], ref["final_loss"])
            line["eval_loss_rel"] = _rel(r["eval_loss"], ref["eval_loss"])
            line["loss_within_2pct"] = abs(line["final_loss_rel"]) <= TARGETS["loss_rel_max"]
        out.append(line)
    return out


def targets(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The product owner's three targets for each zccl contender that ran: measured value,
    target, met, and by how much a missed speedup falls short (measured / target)."""
    by = {s["contender"]: s for s in lines}
    return {name: _targets_of(by[name]) for name in ZCCL if name in by}


def _targets_of(z: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key in ("speedup_vs_best_uncompressed", "speedup_vs_fp16"):
        if key in z:
            got, want = z[key], TARGETS[key]
            result[key] = {
                "target": want,
                "measured": got,
                "met": got >= want,
                "fraction_of_target": got / want,
            }
    if "final_loss_rel" in z:
        got = abs(z["final_loss_rel"])
        result["loss_within_2pct"] = {
            "target": TARGETS["loss_rel_max"],
            "measured": got,
            "met": got <= TARGETS["loss_rel_max"],
            "eval_loss_rel": z["eval_loss_rel"],
        }
    return result


def zccl_breakdown(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Where each zccl contender's step time goes (medians over timed steps, ms, mean over
    ranks): compute alone, the hook's blocking part and its pieces, the backend codec, and the
    time the measured bytes would take on the measured link."""
    by = {r["contender"]: r for r in rows}
    return {
        name: _breakdown_of(by[name], by.get("compute"))
        for name in ZCCL
        if name in by and "zccl_ms_median" in by[name]
    }


def _breakdown_of(z: dict[str, Any], compute: dict[str, Any] | None) -> dict[str, float]:
    parts = z["zccl_ms_median"]
    out = {
        "step_ms": z["step_ms_median"],
        "forward_ms": z["forward_ms_median"],
        "backward_incl_comm_ms": z["backward_ms_median"],
        "optimizer_ms": z["optimizer_ms_median"],
        "hook_blocking_ms": parts.get("hook_ms", float("nan")),
        "hook_norm_agreement_wait_ms": parts.get("agree_ms", float("nan")),
        "hook_error_feedback_codec_ms": parts.get("ef_codec_ms", float("nan")),
        "backend_codec_ms": parts.get("backend_codec_ms", float("nan")),
    }
    if compute is not None:
        out["compute_only_step_ms"] = compute["step_ms_median"]
    if z.get("link_Bps"):
        out["wire_ms_at_measured_link"] = 1e3 * z["bytes_per_step_median"] / z["link_Bps"]
        out["fp32_ring_wire_ms_at_measured_link"] = 1e3 * _ring_fp32_bytes(z) / z["link_Bps"]
    return out


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Everything the JSON's ``summary`` holds."""
    lines = contender_rows(rows)
    return {"contenders": lines, "targets": targets(lines), "zccl_breakdown": zccl_breakdown(rows)}


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    """``value`` formatted (plus ``suffix``), or "-" padded to the same width when absent."""
    width = int("".join(ch for ch in spec.split(".")[0] if ch.isdigit()) or 0)
    return "-".rjust(width + len(suffix)) if value is None else format(value, spec) + suffix


def print_table(summary: dict[str, Any]) -> None:
    """The table on stdout (also what the final report quotes)."""
    print(
        f"{'contender':>9} {'step ms':>8} {'p10-p90 ms':>13} {'MB/step':>8} {'wire /':>7} "
        f"{'vs best unc':>11} {'vs fp16':>7} {'final loss':>10} {'vs ref':>7} "
        f"{'held-out':>8} {'vs ref':>7}"
    )
    for s in summary["contenders"]:
        spread = f"{s['step_ms_p10']:.0f}-{s['step_ms_p90']:.0f}"
        print(
            f"{s['contender']:>9} {s['step_ms']:8.1f} {spread:>13} {s['mb_per_step']:8.2f} "
            f"{_fmt(s['wire_reduction_vs_fp32_ring'], '6.2f', 'x')} "
            f"{_fmt(s.get('speedup_vs_best_uncompressed'), '10.2f', 'x')} "
            f"{_fmt(s.get('speedup_vs_fp16'), '6.2f', 'x')} {_fmt(s['final_loss'], '10.4f')} "
            f"{_fmt(s.get('final_loss_rel'), '+7.2%')} {_fmt(s['eval_loss'], '8.4f')} "
            f"{_fmt(s.get('eval_loss_rel'), '+7.2%')}"
        )
    for name, checks in summary["targets"].items():
        for key, t in checks.items():
            verdict = "MET" if t["met"] else "MISSED"
            print(f"target {name} {key}: {t['measured']:.3g} vs {t['target']:g} -> {verdict}")
    for name, breakdown in summary["zccl_breakdown"].items():
        parts = ", ".join(f"{k} {v:.1f}" for k, v in breakdown.items())
        print(f"{name} step breakdown (ms): {parts}")
