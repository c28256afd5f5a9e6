"""Quick single-thread comparison of SZp (github.com/szcompressor/SZp) with zccl_torch's fZ-light.

For two float32 fields (a 3-D acoustic wavefield, mostly at rest, and Laplace noise shaped like
gradients) and relative bounds 1e-2 ... 1e-5 (absolute bound = rel * (max - min)), it measures
SZp at every block size :func:`szp_driver.available_block_sizes` lists and
``zccl_torch.compress`` / ``decompress`` in the same run: compression ratio, compress and
decompress throughput (GB/s of uncompressed bytes, GB = 1e9, median of ``--reps`` single-call
repetitions after one warm-up call, one thread) and the largest error as a fraction of the
bound, computed in float64. Validation (data checks, stream walks) happens outside the timed
calls. SZp's timed calls go through ctypes and include the driver's copies (compress: the
stream into ``bytes``; decompress: the stream into a padded buffer).

SZp is not part of this project: build it first with ``benchmarks/szp_build.sh SRC BUILD``.

Usage::

    OMP_NUM_THREADS=1 python3 benchmarks/szp_compare_quick.py --szp /path/to/SZp/build

Exit status 1 when zccl_torch breaks a bound (SZp results over the bound are flagged only).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

# szp_driver sits beside this file; zccl_torch is taken from this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from szp_driver import SZp, available_block_sizes

import zccl_torch
from zccl_torch import datasets

REL_BOUNDS = (1e-2, 1e-3, 1e-4, 1e-5)
GB = 1e9
Row = dict[str, Any]


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of ``reps`` calls of ``fn`` after one untimed warm-up call."""
    fn()
    times = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(times)


def error_stats(x: np.ndarray, y: np.ndarray, abs_eb: float) -> Row:
    """``max |x - y| / abs_eb`` and the count of values over the bound, in float64."""
    diff = np.abs(x.reshape(-1).astype(np.float64) - y.reshape(-1).astype(np.float64))
    err = float(np.max(diff)) if diff.size else 0.0
    return {"max_err_over_bound": err / abs_eb, "values_over_bound": int(np.sum(diff > abs_eb))}


def make_fields(side: int) -> dict[str, torch.Tensor]:
    """The two test fields, float32."""
    return {
        "wavefield3d": datasets.acoustic_wavefield_3d((side, side, side), dtype=torch.float32),
        "laplace": datasets.laplace_noise(side**3, scale=1e-3),
    }


def measure_szp(szp: SZp, x: np.ndarray, abs_eb: float, block_size: int, reps: int) -> Row:
    """One SZp configuration; validates once with checks on, times with them off."""
    stream = szp.compress(x, abs_eb, block_size, check=True)
    y = szp.decompress(stream, x.size, x.dtype, abs_eb, block_size, check=True)
    t_c = median_seconds(lambda: szp.compress(x, abs_eb, block_size, check=False), reps)
    t_d = median_seconds(
        lambda: szp.decompress(stream, x.size, x.dtype, abs_eb, block_size, check=False), reps
    )
    return {
        "codec": "szp",
        "block_size": block_size,
        "bytes": len(stream),
        "ratio": x.nbytes / len(stream),
        "compress_gbps": x.nbytes / t_c / GB,
        "decompress_gbps": x.nbytes / t_d / GB,
        **error_stats(x, y, abs_eb),
    }


def measure_ours(t: torch.Tensor, abs_eb: float, reps: int) -> Row:
    """zccl_torch's compressor, one thread, absolute bound."""
    stream = zccl_torch.compress(t, error_bound=abs_eb, mode="abs", threads=1)
    y = zccl_torch.decompress(stream, threads=1)
    t_c = median_seconds(
        lambda: zccl_torch.compress(t, error_bound=abs_eb, mode="abs", threads=1), reps
    )
    t_d = median_seconds(lambda: zccl_torch.decompress(stream, threads=1), reps)
    nbytes = t.numel() * t.element_size()
    return {
        "codec": "zccl",
        "block_size": None,
        "bytes": int(stream.numel()),
        "ratio": nbytes / stream.numel(),
        "compress_gbps": nbytes / t_c / GB,
        "decompress_gbps": nbytes / t_d / GB,
        **error_stats(t.numpy(), y.numpy(), abs_eb),
    }


def zccl_provenance() -> Row:
    """Which zccl_torch was measured: its extension file and the checkout's git state."""
    ext = Path(zccl_torch._C.__file__)
    info: Row = {
        "extension": str(ext),
        "extension_mtime_utc": datetime.datetime.fromtimestamp(
            ext.stat().st_mtime, datetime.timezone.utc
        ).isoformat(),
    }
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "csrc", "zccl_torch"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return info
    info["git_head"] = head.stdout.strip()
    info["modified_sources"] = [line[3:] for line in dirty.stdout.splitlines()]
    return info


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def fmt_row(field: str, rel: float, row: Row) -> str:
    """One table line; ``!`` marks a result over its bound."""
    name = "zccl" if row["codec"] == "zccl" else f"szp/{row['block_size']}"
    flag = "!" if row["max_err_over_bound"] > 1.0 else " "
    return (
        f"{field:<12} {rel:>7.0e} {name:<9} {row['ratio']:>9.2f} {row['compress_gbps']:>8.3f} "
        f"{row['decompress_gbps']:>8.3f} {row['max_err_over_bound']:>10.6f}{flag}"
    )


HEADER = (
    f"{'field':<12} {'rel':>7} {'codec':<9} {'ratio':>9} {'cmp GB/s':>8} {'dec GB/s':>8} "
    f"{'maxerr/eb':>11}"
)


def main(argv: list[str] | None = None) -> int:
    """Runs the comparison; returns 1 if zccl_torch broke a bound."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--szp", type=Path, required=True, help="directory holding libSZp.so")
    parser.add_argument("--out", type=Path, default=Path("/tmp/szp_compare.json"))
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions (median)")
    parser.add_argument("--side", type=int, default=128, help="field size: side**3 values")
    parser.add_argument(
        "--block-sizes", type=int, nargs="+", default=None, help="SZp block sizes (default: all)"
    )
    args = parser.parse_args(argv)
    if args.reps < 1 or args.side < 2:
        parser.error("need --reps >= 1 and --side >= 2")

    torch.set_num_threads(1)
    szp = SZp(args.szp)
    block_sizes = tuple(args.block_sizes or available_block_sizes())
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    print(
        f"SZp: {szp.path}  block sizes {block_sizes}  OpenMP max threads "
        f"{szp.omp_max_threads()}  OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average before "
        f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}"
    )

    fields = make_fields(args.side)
    results: list[Row] = []
    field_info: dict[str, Row] = {}
    omp_check: dict[str, Any] = {}
    print(HEADER)
    for field, t in fields.items():
        t = t.contiguous()
        x = t.numpy()
        lo, hi = float(x.min()), float(x.max())
        value_range = hi - lo
        field_info[field] = {
            "shape": list(t.shape),
            "dtype": str(x.dtype),
            "min": lo,
            "max": hi,
            "zero_fraction": float(np.mean(x == 0)),
        }
        for rel in REL_BOUNDS:
            abs_eb = rel * value_range
            rows = [measure_szp(szp, x, abs_eb, bs, args.reps) for bs in block_sizes]
            rows.append(measure_ours(t, abs_eb, args.reps))
            for row in rows:
                row.update(field=field, rel_bound=rel, abs_bound=abs_eb)
                print(fmt_row(field, rel, row), flush=True)
            results.extend(rows)
        if szp.omp_max_threads() == 1:  # SZp's serial and OpenMP entries agree on one thread
            bs, eb = block_sizes[0], REL_BOUNDS[-1] * value_range
            omp_check[field] = szp.compress_omp(x, eb, bs) == szp.compress(x, eb, bs)

    load_after = os.getloadavg()
    print(f"load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")

    summary = []
    print("\nbest SZp block size (highest ratio) vs zccl")
    print(
        f"{'field':<12} {'rel':>7} {'bs':>5} {'szp ratio':>9} {'cmp':>6} {'dec':>6} "
        f"{'err/eb':>9} | {'zccl ratio':>10} {'cmp':>6} {'dec':>6} {'err/eb':>9}"
    )
    for field in fields:
        for rel in REL_BOUNDS:
            group = [r for r in results if r["field"] == field and r["rel_bound"] == rel]
            best = max((r for r in group if r["codec"] == "szp"), key=lambda r: r["ratio"])
            ours = next(r for r in group if r["codec"] == "zccl")
            summary.append({"field": field, "rel_bound": rel, "szp_best": best, "zccl": ours})
            print(
                f"{field:<12} {rel:>7.0e} {best['block_size']:>5} {best['ratio']:>9.2f} "
                f"{best['compress_gbps']:>6.3f} {best['decompress_gbps']:>6.3f} "
                f"{best['max_err_over_bound']:>9.6f} | {ours['ratio']:>10.2f} "
                f"{ours['compress_gbps']:>6.3f} {ours['decompress_gbps']:>6.3f} "
                f"{ours['max_err_over_bound']:>9.6f}"
            )
    over = [r for r in results if r["max_err_over_bound"] > 1.0]
    for r in over:
        name = "zccl" if r["codec"] == "zccl" else f"SZp block {r['block_size']}"
        print(
            f"OVER BOUND: {name} on {r['field']} rel {r['rel_bound']:g}: "
            f"max error {r['max_err_over_bound']:.6f} x bound, {r['values_over_bound']} values"
        )

    report = {
        "started_utc": started.isoformat(),
        "host": platform.node(),
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "szp_library": str(szp.path),
        "zccl": zccl_provenance(),
        "reps": args.reps,
        "timing": "median of reps single calls after one warm-up; GB/s of uncompressed bytes",
        "fields": field_info,
        "szp_serial_equals_openmp_1thread": omp_check,
        "results": results,
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}")
    return 1 if any(r["codec"] == "zccl" for r in over) else 0


if __name__ == "__main__":
    sys.exit(main())
