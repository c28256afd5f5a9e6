"""Our GPU compressor against the public cuSZp and the device's copy bandwidth, on one GPU.

Drives ``benchmarks/gpu/codec_compare`` (built by ``benchmarks/gpu/build_codec_compare.sh``) on
two float32 inputs of ``--mb`` MiB each (256 by default), written to a temporary folder:

* ``wavefield``: the RTM-like acoustic wavefield of the CPU and collective benchmarks
  (``bench_data.values("wavefield", seed=0, ...)``: the 256^3 field of seed 0, then mirrored and
  transposed copies of it up to the size; simulated once, ~30 s on one core, then cached under
  ``benchmarks/.cache``).
* ``gradients``: gradient-like noise. Real gradients are zero-mean, and their magnitude differs
  from layer to layer by orders of magnitude, so the whole buffer is heavy-tailed although each
  layer is roughly Gaussian. We model it as a concatenation of "layers" k, each of ``m_k``
  values drawn from N(0, s_k^2): ``m_k`` log-uniform in [2^12, 2^22] (4 Ki to 4 Mi values, the
  last one cut to fit), ``s_k`` log-uniform in [1e-4, 1e-1]; numpy's PCG64 with seed 0.

For each input and each ``--rels`` bound, codec_compare uses eb = REL * (max - min) (host,
double, rounded down to a float) as the same absolute bound for every codec, and reports ratio,
compress/decompress GB/s (input bytes / median of 10 CUDA-event-timed calls after 2 warm-ups),
max |x - x'| / eb and the count of values outside the bound, plus cudaMemcpyAsync
device-to-device GB/s of the same byte count (input bytes / time, so reading and writing). The
cuSZp rows time its API calls, which allocate and free scratch memory and read the compressed
size back with a blocking copy every call (see codec_compare.cu).

    benchmarks/gpu/build_codec_compare.sh /tmp/codec_compare
    python3 benchmarks/gpu_codec.py --exe /tmp/codec_compare --out /tmp/gpu_codec.json

``--dry-run`` writes the inputs and prints the commands without running them (no GPU needed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_data  # benchmarks/bench_data.py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CUSZP_SOURCE = ROOT / ".dev" / "cuSZp" / "ZCCL_SOURCE_COMMIT"
MIB = 1 << 20
RUN_TIMEOUT_S = 300


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--exe", type=Path, required=True, help="the built codec_compare program")
    p.add_argument("--out", type=Path, required=True, help="JSON file for the results")
    p.add_argument("--mb", type=int, default=256, help="MiB of float32 per input (default 256)")
    p.add_argument("--rels", default="1e-2,1e-3,1e-4", help="relative bounds, comma-separated")
    p.add_argument("--reps", type=int, default=10, help="timed calls per measurement")
    p.add_argument(
        "--codecs",
        default="ours,cuszp_plain,cuszp_outlier,cuszp_fixed",
        help="codec_compare's --codecs (cuSZp ones are skipped by a build without cuSZp)",
    )
    p.add_argument(
        "--data",
        default="wavefield,gradients",
        help="inputs to run, comma-separated, of: wavefield, gradients",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="write the inputs here and keep them (default: a temporary folder, removed)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="write the inputs, print the commands, run nothing"
    )
    args = p.parse_args(argv)
    if args.mb <= 0:
        p.error("--mb must be positive")
    try:
        rels = [float(r) for r in args.rels.split(",") if r.strip()]
    except ValueError:
        p.error(f"--rels: not a list of numbers: {args.rels!r}")
    if not rels or any(r <= 0 for r in rels):
        p.error("--rels needs positive bounds")
    unknown = set(args.data.split(",")) - set(GENERATORS)
    if unknown:
        p.error(f"--data: unknown input(s) {sorted(unknown)}; known: {sorted(GENERATORS)}")
    return args


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------


def wavefield(n: int) -> np.ndarray:
    """``n`` float32 values of the benchmarks' wavefield (bench_data, kind "wavefield", seed 0)."""
    return bench_data.values("wavefield", seed=0, numel=n).numpy().astype(np.float32, copy=False)


def gradients(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 gradient-like values: layers of N(0, s_k^2), sizes and s_k log-uniform.

    Layer sizes are log-uniform in [2^12, 2^22] values, scales s_k log-uniform in [1e-4, 1e-1]
    (module docstring). Deterministic for a given ``seed``.
    """
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=np.float32)
    pos = 0
    while pos < n:
        m = min(n - pos, round(2.0 ** rng.uniform(12, 22)))
        scale = np.float32(10.0 ** rng.uniform(-4, -1))
        out[pos : pos + m] = rng.standard_normal(m, dtype=np.float32) * scale
        pos += m
    return out


GENERATORS = {"wavefield": wavefield, "gradients": gradients}


def absolute_bound(x: np.ndarray, rel: float) -> float:
    """The absolute bound the CPU-side scripts give the codecs for ``rel`` on ``x``: REL x value
    span in double, as a float32 one step below (a float, so every codec gets the same bound)."""
    return float(np.nextafter(np.float32(rel * (float(x.max()) - float(x.min()))), 0))


def write_inputs(names: list[str], n: int, folder: Path) -> dict[str, Path]:
    """Writes each named input (``n`` raw float32 values) to ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        start = time.perf_counter()
        x = GENERATORS[name](n)
        assert x.dtype == np.float32 and x.size == n
        path = folder / f"{name}-{n}.f32"
        x.tofile(path)
        paths[name] = path
        print(
            f"input {name}: {n} float32 ({x.nbytes / MIB:.0f} MiB), range "
            f"[{float(x.min()):.4g}, {float(x.max()):.4g}], std {float(x.std()):.4g}, "
            f"written to {path} in {time.perf_counter() - start:.1f} s",
            flush=True,
        )
    return paths


# ------------------------------------------------------------------------------------------------
# Running and reporting
# ------------------------------------------------------------------------------------------------


def command(args: argparse.Namespace, path: Path, n: int, name: str) -> list[str]:
    return [
        str(args.exe), str(path), str(n), name,
        "--rels", args.rels, "--reps", str(args.reps), "--codecs", args.codecs,
    ]  # fmt: skip


def run_one(cmd: list[str]) -> tuple[list[dict[str, Any]], int]:
    """Runs codec_compare (its stderr passes through); returns its JSON lines and exit status."""
    print("$ " + shlex.join(cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, stdout=subprocess.PIPE, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    print(f"  ({len(rows)} results in {time.perf_counter() - start:.1f} s)", flush=True)
    if proc.returncode != 0:
        print(f"ERROR: codec_compare exited with status {proc.returncode}", file=sys.stderr)
    return rows, proc.returncode


def table(rows: list[dict[str, Any]]) -> str:
    """Readable table: per input and bound, each codec's ratio, GB/s and % of the copy's."""
    head = (
        f"{'data':<10} {'rel':>6} {'codec':<14} {'ratio':>8} {'comp GB/s':>10} {'%copy':>6} "
        f"{'dec GB/s':>9} {'%copy':>6} {'max_err/eb':>10} {'viol':>6}"
    )
    lines = [head, "-" * len(head)]
    last = None
    for r in rows:
        key = (r["data"], r["rel"])
        if last is not None and key != last:
            lines.append("")
        last = key
        copy = r["copy_gbps"]
        err = r["max_err_over_eb"]
        lines.append(
            f"{r['data']:<10} {r['rel']:>6.0e} {r['codec']:<14} {r['ratio']:>8.2f} "
            f"{r['comp_gbps']:>10.1f} {100 * r['comp_gbps'] / copy:>5.0f}% "
            f"{r['decomp_gbps']:>9.1f} {100 * r['decomp_gbps'] / copy:>5.0f}% "
            f"{'nan' if err is None else format(err, '.4f'):>10} {r['violations']:>6}"
        )
    copies = {r["data"]: r["copy_gbps"] for r in rows}
    for data, gbps in copies.items():
        lines.append(
            f"cudaMemcpyAsync D2D ({data}, same bytes): {gbps:.1f} GB/s (input bytes / time)"
        )
    return "\n".join(lines)


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except OSError:
        return None
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.mb * MIB // 4
    names = [d for d in args.data.split(",") if d]
    if not args.dry_run and not args.exe.is_file():
        raise SystemExit(
            f"--exe {args.exe}: no such program (build it with build_codec_compare.sh)"
        )
    with tempfile.TemporaryDirectory(prefix="zccl_gpu_codec_") as tmp:
        folder = args.data_dir if args.data_dir is not None else Path(tmp)
        paths = write_inputs(names, n, folder)
        cmds = {name: command(args, paths[name], n, name) for name in names}
        if args.dry_run:
            for cmd in cmds.values():
                print("would run: " + shlex.join(cmd))
            return 0
        rows: list[dict[str, Any]] = []
        failed: list[str] = []
        for name, cmd in cmds.items():
            got, rc = run_one(cmd)
            rows += got  # a failed run keeps the results it printed before failing
            if rc != 0:
                failed.append(name)
    print()
    print(table(rows))
    bad = [r for r in rows if r["violations"] or r.get("decode_error", 0)]
    for r in bad:
        print(
            f"WARNING: {r['codec']} on {r['data']} at REL {r['rel']:g}: {r['violations']} values "
            f"outside eb, decode_error {r.get('decode_error', '-')}",
            file=sys.stderr,
        )
    result = {
        "benchmark": "gpu_codec",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
        "git": git_revision(),
        "cuszp_commit": CUSZP_SOURCE.read_text().strip() if CUSZP_SOURCE.is_file() else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mb": args.mb,
        "n": n,
        "rels": args.rels,
        "gradients_model": "concatenated layers of N(0, s_k^2); sizes log-uniform in "
        "[2^12, 2^22] values, s_k log-uniform in [1e-4, 1e-1]; numpy PCG64 seed 0",
        "wavefield_model": 'bench_data.values("wavefield", seed=0)',
        "field_edge": bench_data.EDGE,
        "failed_inputs": failed,
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    if failed:
        print(f"ERROR: codec_compare failed on {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
