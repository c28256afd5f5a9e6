"""SIMULATION: zccl's all_reduce at 10 and 100 Gbit/s when each rank compresses with t threads.

SMPI injects the CPU time a rank spends between two MPI calls into the simulation
(``run_smpi.py``). This script runs the same driver with ``smpi/host-speed`` divided by t, so
every measured CPU second counts as 1/t simulated seconds: a model of a compressor (and
reduction) that scales perfectly over t threads. fZ-light's real scaling from 1 to 2 threads is
measured on this machine first and recorded next to it; t > 2 is an EXTRAPOLATION of that model,
labelled as such in the JSON and the table. Uncompressed MPI (the better of SMPI's Open MPI and
MVAPICH2 selectors) does not depend on t: it is simulated once per link.

The driver runs with zccl's ``threads`` = t (``--threads``; ``OMP_THREAD_LIMIT=1`` makes one
thread run every lane): the algorithms plan and schedule as a rank with t threads does, e.g. the
integer ring codes windows of t segments. Before 2026-11-27 the driver ran ``threads`` = 1 and
only the host speed modelled t threads, which credited the integer ring with a speed-up its plan
could not use (4 segments per block at 16 hosts, 1 at 64: at most 4 and 1 busy threads).

Run: ``python benchmarks/simgrid/codec_threads.py [--p 16] [--mb 64] [--threads 2,4,8,16]``
(needs ``smpicxx``/``smpirun``: ``apt-get install -y libsimgrid-dev``). Writes
``benchmarks/results/smpi_codec_threads.json`` and prints the table.

Scaling measured on a bigger machine (no SimGrid needed there)::

    python benchmarks/simgrid/codec_threads.py --measure-threads 1,2,4,8,16 --measure-only F.json

then here ``--scaling F.json`` models those thread counts as measured there (labelled with its
host and core count) and only the others as perfect scaling. ``scripts/gpu_session.sh``'s
``cpu_scaling`` stage does the measurement on the 16-core GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run_smpi as SMPI  # noqa: E402,N812

HOST_SPEED_GF = 1.0  # smpi_platform.HOST_SPEED, in Gflop/s (run_smpi.SMPI_CFG's host-speed)


def command(
    smpirun: str,
    exe: Path,
    case: SMPI.Case,
    plat: Path,
    selector: str,
    speedup: float,
    impls: str,
    wait: str = "spin",
    algos: str | None = None,
    threads: int = 1,
) -> list[str]:
    """run_smpi's command line with the host speed scaled for a CPU `speedup` times faster and
    zccl's waits polling as `wait` says (the driver's --wait); `algos` limits zccl's allreduce
    algorithms (the driver's --allreduce-algos; None: all four); `threads` is zccl's
    Config::threads (the driver's --threads: plans and schedules for that many threads, which
    run_smpi's OMP_THREAD_LIMIT=1 runs one after another)."""
    extra = ["--allreduce-algos", algos] if algos else []
    if threads > 1:
        extra += ["--threads", str(threads)]
    cmd = SMPI.smpirun_command(
        smpirun,
        exe,
        case,
        plat,
        selector,
        [
            *("--colls", "allreduce", "--impls", impls),
            *("--label", f"x{speedup:g}-{impls}", "--wait", wait),
            *extra,
        ],
    )
    speed = f"--cfg=smpi/host-speed:{HOST_SPEED_GF / speedup * 1e3:g}Mf"
    return [speed if c.startswith("--cfg=smpi/host-speed:") else c for c in cmd]


def measure_scaling(
    threads: tuple[int, ...] = (1, 2), mvalues: float = 16.0, repeats: int = 5
) -> dict[str, Any]:
    """fZ-light on this machine with each thread count (16M float32 wavefield values, REL 1e-4,
    medians, into reused buffers): the part of the thread model that can be measured here.
    Scalings are relative to one thread (``compress_scaling_{t}t``, ``decompress_scaling_{t}t``)."""
    import torch

    sys.path.insert(0, str(HERE.parent))
    import bench_data
    from bench_timing import median_seconds

    import zccl_torch

    x = bench_data.values("wavefield", 0, int(mvalues * 1e6))
    eb = 1e-4 * float(x.max() - x.min())
    out = torch.empty_like(x)
    # Both directions code into a buffer reused across calls, as the collectives do: a fresh
    # 64 MB stream buffer per call adds page faults and a copy that do not scale with threads.
    # compress_fresh_s_t{t} times that way too (how this was measured before), for comparison;
    # the scalings use the reused buffer.
    into = torch.empty(zccl_torch.max_compressed_size(x.dtype, x.numel()), dtype=torch.uint8)
    into.fill_(0)

    res: dict[str, Any] = {"cores": os.cpu_count(), "host": platform.node(), "threads": threads}
    for t in sorted({1, *threads}):
        stream = zccl_torch.compress(x, eb, threads=t)
        res[f"compress_s_t{t}"] = median_seconds(
            lambda t=t: zccl_torch.compress(x, eb, threads=t, out=into), repeats
        )
        res[f"compress_fresh_s_t{t}"] = median_seconds(
            lambda t=t: zccl_torch.compress(x, eb, threads=t), repeats
        )
        res[f"decompress_s_t{t}"] = median_seconds(
            lambda t=t, s=stream: zccl_torch.decompress(s, threads=t, out=out), repeats
        )
    # The ring codes one ~1 MiB segment per call (RingSegments: 261120 float32 values), so a
    # call's fixed costs (the parallel region, scratch, the slide of the threads' runs) weigh
    # more than in one 64 MB call: segment_* times those calls, 64 segments of the field in
    # turn, and the model prefers their scaling when the file has it.
    seg = 261120
    segs = [x[k * seg : (k + 1) * seg].contiguous() for k in range(min(64, x.numel() // seg))]
    seg_into = torch.empty(zccl_torch.max_compressed_size(x.dtype, seg), dtype=torch.uint8)
    seg_out = torch.empty(seg, dtype=x.dtype)
    for t in sorted({1, *threads}):
        streams = [zccl_torch.compress(v, eb, threads=t).clone() for v in segs]

        def each_compress(t: int = t) -> None:
            for v in segs:
                zccl_torch.compress(v, eb, threads=t, out=seg_into)

        def each_decompress(t: int = t, streams: list = streams) -> None:
            for st in streams:
                zccl_torch.decompress(st, threads=t, out=seg_out)

        res[f"segment_compress_s_t{t}"] = median_seconds(each_compress, repeats) / len(segs)
        res[f"segment_decompress_s_t{t}"] = median_seconds(each_decompress, repeats) / len(segs)
    for t in threads:
        if t > 1:
            res[f"compress_scaling_{t}t"] = res["compress_s_t1"] / res[f"compress_s_t{t}"]
            res[f"decompress_scaling_{t}t"] = res["decompress_s_t1"] / res[f"decompress_s_t{t}"]
            for d in ("compress", "decompress"):
                res[f"segment_{d}_scaling_{t}t"] = (
                    res[f"segment_{d}_s_t1"] / res[f"segment_{d}_s_t{t}"]
                )
    return res


def measured_speedups(scaling: dict[str, Any]) -> list[tuple[int, float]]:
    """(t, CPU speed-up) for every measured t > 1: the smaller of compress and decompress, of
    one ~1 MiB segment per call where the file has it (what the ring runs), else of one
    16M-value call (files measured before 2026-11-27)."""
    out = []
    for t in scaling.get("threads", ()):
        for prefix in ("segment_", ""):
            if t > 1 and f"{prefix}compress_scaling_{t}t" in scaling:
                both = (
                    scaling[f"{prefix}compress_scaling_{t}t"],
                    scaling[f"{prefix}decompress_scaling_{t}t"],
                )
                out.append((t, min(both)))
                break
    return out


# The zccl allreduce algorithms the driver times (impl names of its records) and their columns.
IMPLS = {
    "zccl_ring": "ring",
    "zccl_ring_int": "ring int",
    "zccl_recursive_doubling": "RD",
    "zccl_halving_doubling": "HD",
}


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as text: link, CPU speed-up modelled, speed-ups of each zccl algorithm."""

    def fmt(v: float | None) -> str:
        return f"{v:.2f}x" if v else "-"

    head = "".join(f" {label:>9}" for label in IMPLS.values())
    lines = [f"{'Gb/s':>5} {'CPU x':>6}{head}  model"]
    for r in rows:
        cells = "".join(f" {fmt(r[f'{impl}_speedup']):>9}" for impl in IMPLS)
        lines.append(f"{r['gbps']:5g} {r['cpu_speedup']:6g}{cells}  {r['model']}")
    return "\n".join(lines)


def run_record(cmd: list[str], res: SMPI.RunResult) -> dict[str, Any]:
    """What the JSON keeps of one smpirun invocation."""
    return {
        "command": " ".join(cmd),
        "returncode": res.returncode,
        "wall_s": round(res.wall_s, 1),
        "error": res.error,
    }


def fastest(records: list[dict[str, Any]], impl: str) -> float | None:
    times = [r["time_s"] for r in records if r.get("impl") == impl and r.get("time_s")]
    return min(times) if times else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p", type=int, default=16)
    parser.add_argument("--mb", type=float, default=64.0)
    parser.add_argument("--gbps", default="10,100")
    parser.add_argument(
        "--threads", default="2,4,8,16", help="thread counts modelled with perfect scaling"
    )
    parser.add_argument(
        "--no-measure",
        action="store_true",
        help="skip the 1- vs 2-thread compressor measurement on this machine",
    )
    parser.add_argument(
        "--measure-threads",
        default="1,2",
        help="thread counts whose compressor scaling is measured on this machine",
    )
    parser.add_argument(
        "--measure-only",
        type=Path,
        default=None,
        metavar="FILE",
        help="measure the scaling, write it to FILE and stop (no SimGrid needed: for a machine "
        "with more cores than this one)",
    )
    parser.add_argument(
        "--scaling",
        type=Path,
        default=None,
        metavar="FILE",
        help="scaling measured elsewhere (--measure-only's FILE): model its thread counts as "
        "measured there instead of measuring here",
    )
    parser.add_argument(
        "--scaling-threads",
        default=None,
        help="model only these of --scaling's measured thread counts (comma-separated; for the "
        "long runs at many hosts)",
    )
    parser.add_argument(
        "--wait",
        choices=("spin", "sleep"),
        default="spin",
        help="how zccl's waits poll (the backend's wait setting): spin, its choice with one rank "
        "per host, or sleep, its choice on an oversubscribed host (the only one before "
        "2026-11-26's fifth session)",
    )
    parser.add_argument(
        "--algos",
        default=None,
        help="zccl allreduce algorithms to simulate (comma-separated of ring, ring_int, "
        "recursive_doubling, halving_doubling; default all). Recursive doubling takes most of "
        "the wall time at 64 hosts and is never competitive at 64 MB",
    )
    parser.add_argument(
        "--no-one-thread",
        action="store_true",
        help="leave out the one-thread model (long runs that only need the threaded rows)",
    )
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, default=SMPI.RESULTS / "smpi_codec_threads.json")
    args = parser.parse_args()
    measure_threads = tuple(int(v) for v in args.measure_threads.split(","))
    if args.measure_only is not None:
        scaling = measure_scaling(measure_threads)
        args.measure_only.parent.mkdir(parents=True, exist_ok=True)
        args.measure_only.write_text(json.dumps(scaling, indent=1) + "\n")
        for t, speedup in measured_speedups(scaling):
            print(f"{t:3d} threads: CPU speed-up x{speedup:.2f} over one thread")
        print(f"wrote {args.measure_only}")
        return 0
    smpicxx, smpirun = shutil.which("smpicxx"), shutil.which("smpirun")
    if smpicxx is None or smpirun is None:
        print("codec_threads.py: smpicxx/smpirun not found (apt-get install -y libsimgrid-dev)")
        return 2
    started = time.perf_counter()
    if args.scaling is not None:
        scaling = json.loads(args.scaling.read_text())
        where = f"on {scaling.get('host')} ({scaling.get('cores')} cores)"
        if args.scaling_threads:
            keep = {int(v) for v in args.scaling_threads.split(",")}
            scaling["threads"] = [t for t in scaling.get("threads", ()) if t in keep]
    else:
        scaling = None if args.no_measure else measure_scaling(measure_threads)
        where = "here"
    if scaling:
        for t, speedup in measured_speedups(scaling):
            print(f"measured {where}: x{speedup:.2f} with {t} threads (16M values, REL 1e-4)")
    exe = SMPI.build(smpicxx, SMPI.DEFAULT_BUILD)
    plat = SMPI.DEFAULT_BUILD / "platforms"
    rows, runs = [], []
    for gbps in (float(g) for g in args.gbps.split(",")):
        case = SMPI.Case(args.p, gbps, args.mb, args.iters, 1)
        mpi_times = []
        for sel in (SMPI.SELECTOR_MAIN, *SMPI.SELECTORS_MPI_ONLY):
            cmd = command(smpirun, exe, case, plat, sel, 1, "mpi")
            res = SMPI.run_once(cmd, args.timeout)
            runs.append(run_record(cmd, res))
            t = fastest(res.records, "mpi")
            if t:
                mpi_times.append(t)
        mpi = min(mpi_times) if mpi_times else None
        # (label, CPU speed-up, threads): one thread as measured; the thread counts measured
        # here or in --scaling's file; then t threads with perfect scaling (an extrapolation).
        models = [] if args.no_one_thread else [("1 thread", 1.0, 1)]
        measured = dict(measured_speedups(scaling)) if scaling else {}
        models += [
            (f"{t} threads, as measured {where}", round(x, 2), t) for t, x in measured.items()
        ]
        models += [
            (f"{t} threads, perfect scaling (extrapolated)", float(t), t)
            for t in (int(v) for v in args.threads.split(","))
            if t > 1 and t not in measured
        ]
        for label, speedup, threads in models:
            cmd = command(
                smpirun,
                exe,
                case,
                plat,
                SMPI.SELECTOR_MAIN,
                speedup,
                "zccl",
                args.wait,
                args.algos,
                threads,
            )
            res = SMPI.run_once(cmd, args.timeout)
            runs.append(run_record(cmd, res))
            summary = next((r for r in res.records if r.get("record") == "summary"), {})
            row = {
                "p": args.p,
                "gbps": gbps,
                "mbytes": args.mb,
                "model": label,
                "cpu_speedup": speedup,
                "threads": threads,
                "extrapolated": "extrapolated" in label,
                "mpi_best_s": mpi,
                "checks_pass": summary.get("all_pass"),
            }
            for impl in IMPLS:
                t = fastest(res.records, impl)
                row[f"{impl}_s"] = t
                row[f"{impl}_speedup"] = mpi / t if mpi and t else None
            rows.append(row)
            print(json.dumps(row))
    doc = {
        "SIMULATION": "SimGrid SMPI; codec threads modelled by scaling injected CPU time by 1/t "
        "(t > 2: extrapolation beyond what this machine can measure)",
        "wait": args.wait,
        "measured_scaling": scaling,
        "command": " ".join([sys.executable, *sys.argv]),
        "rows": rows,
        "runs": runs,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nSIMULATION p={args.p}, {args.mb:g} MB all_reduce, speed-up over best MPI")
    print(table(rows))
    print(f"wrote {args.out} ({doc['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
