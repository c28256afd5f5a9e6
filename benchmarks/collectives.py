"""Collectives on an emulated bandwidth-limited cluster: zccl against MPI, Gloo and fp16.

For each rank count it brings up the namespace cluster (``benchmarks/cluster/cluster.sh``, one
rank per emulated host, every link shaped to ``--rate`` in both directions), calibrates it
(achieved link rate, latency, codec throughput with all ranks busy), then runs
``benchmarks/collectives_rank.py`` ``--repeats`` times with every contender, plus one run per
set of forced Open MPI algorithms (``coll_tuned``) so the uncompressed baseline is the best MPI
can do, not only its default choice. The cluster is always taken down again, also on errors.

Each row's headline time is the slowest rank's average over the timed iterations; the value
reported is the median over the repeats. Speedups are against the best uncompressed MPI time
(default or forced) measured in the same invocation.

Run (as root): ``python benchmarks/collectives.py`` (full sweep, ~1 h on 2 cores) or
``--quick``; ``--help`` lists the knobs. ``--collectives`` also takes ``reduce`` (to rank 0; not
in the default sweep). Writes ``benchmarks/results/collectives.json`` and the
plots of ``benchmarks/plot_collectives.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLUSTER = HERE / "cluster" / "cluster.sh"
MPIRUN = HERE / "cluster" / "mpirun_cluster.sh"
sys.path.insert(0, str(HERE))

# Forced Open MPI 4.1 coll_tuned algorithms, one mpirun each (names from `ompi_info --param coll
# tuned --level 9`). Each run forces one algorithm per collective at once.
FORCED_MPI: list[dict[str, tuple[int, str]]] = [
    {
        "allreduce": (4, "ring"),
        "bcast": (3, "pipeline"),
        "scatter": (1, "basic_linear"),
        "allgather": (4, "ring"),
        "reduce_scatter_block": (3, "recursive_halving"),
        "reduce": (7, "rabenseifner"),
    },
    {
        "allreduce": (6, "rabenseifner"),
        "bcast": (9, "scatter_allgather_ring"),
        "scatter": (2, "binomial"),
        "allgather": (3, "recursive_doubling"),
        "reduce_scatter_block": (4, "butterfly"),
        "reduce": (5, "binomial"),
    },
    {
        "allreduce": (5, "segmented_ring"),
        "bcast": (8, "scatter_allgather"),
        "scatter": (3, "linear_nb"),
        "allgather": (2, "bruck"),
        "reduce_scatter_block": (1, "basic_linear"),
        "reduce": (3, "pipeline"),
    },
]
MPI_NAME = {
    "all_reduce": "allreduce",
    "reduce_scatter": "reduce_scatter_block",
    "all_gather": "allgather",
    "broadcast": "bcast",
    "scatter": "scatter",
    "reduce": "reduce",
}
ZCCL = ("zccl_auto", "zccl_ring", "zccl_ring_int", "zccl_rd", "zccl_hd", "zccl_cprp2p", "zccl_mt")


def sh(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> str:
    """Runs a command, returns stdout; a failure raises with the tail of its output."""
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return proc.stdout


def mpirun(
    np_: int, argv: list[str], env_extra: dict[str, str] | None = None, timeout: float = 3600
) -> str:
    env = dict(os.environ)
    env.update(env_extra or {})
    return sh([str(MPIRUN), "-np", str(np_), sys.executable, *argv], env=env, timeout=timeout)


def calibrate(p: int, data: str, rel: float) -> dict:
    out = mpirun(
        p, [str(HERE / "cluster" / "calibrate.py"), "--data", data, "--rel", str(rel)], timeout=900
    )
    match = re.search(r"^CALIBRATION (.*)$", out, re.M)
    if match is None:
        raise RuntimeError(f"calibration printed no result:\n{out[-2000:]}")
    return json.loads(match.group(1))


def forced_env(forced: dict[str, tuple[int, str]]) -> dict[str, str]:
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    for coll, (number, _) in forced.items():
        env[f"OMPI_MCA_coll_tuned_{coll}_algorithm"] = str(number)
    return env


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ompi = (
        sh(["ompi_info", "--version"]).splitlines()[0]
        if subprocess.run(["which", "ompi_info"], capture_output=True).returncode == 0
        else "unknown"
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mpi": ompi,
    }


def summarize(rows: list[dict]) -> list[dict]:
    """Median over repeats per (ranks, collective, size, contender); forced MPI runs fold into
    ``mpi_best``; speedups against ``mpi_best``."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "time_max_s" not in r:
            continue
        name = r["contender"] if not r["label"].startswith("forced:") else r["label"]
        groups.setdefault((r["ranks"], r["collective"], r["size_mb"], name), []).append(r)
    summary = []
    for (_p, _coll, _mb, name), rs in sorted(groups.items()):
        med = statistics.median(x["time_max_s"] for x in rs)
        best = min(rs, key=lambda x: abs(x["time_max_s"] - med))
        summary.append(
            {
                **best,
                "contender": name,
                "time_s": med,
                "repeats": len(rs),
                "times_s": [x["time_max_s"] for x in rs],
            }
        )
    by_case: dict[tuple, list[dict]] = {}
    for s in summary:
        by_case.setdefault((s["ranks"], s["collective"], s["size_mb"]), []).append(s)
    for case_rows in by_case.values():
        mpis = [
            s for s in case_rows if s["contender"] == "mpi" or s["contender"].startswith("forced:")
        ]
        if not mpis:
            continue
        best = min(mpis, key=lambda s: s["time_s"])
        for s in case_rows:
            s["mpi_best_s"] = best["time_s"]
            s["mpi_best_name"] = best["contender"]
            s["speedup_vs_mpi_best"] = best["time_s"] / s["time_s"]
    return summary


def print_table(summary: list[dict]) -> None:
    print(
        f"{'p':>2} {'collective':>14} {'MB':>5} {'contender':>34} {'time s':>8} "
        f"{'vs MPI':>7} {'ratio':>6} {'err/bound':>9} {'PSNR':>6}"
    )
    for s in summary:
        ratio = f"{s['wire_ratio']:.1f}" if s.get("wire_ratio") else "-"
        eob = f"{s['err_over_bound']:.3f}" if s.get("err_over_bound") is not None else "-"
        psnr = "inf" if s["psnr_db"] == float("inf") else f"{s['psnr_db']:.1f}"
        print(
            f"{s['ranks']:>2} {s['collective']:>14} {s['size_mb']:>5g} "
            f"{s['contender'][:34]:>34} {s['time_s']:>8.4f} "
            f"{s.get('speedup_vs_mpi_best', 0):>6.2f}x {ratio:>6} "
            f"{eob:>9} {psnr:>6}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--sizes-mb", default="1,4,16,64,256")
    parser.add_argument(
        "--collectives", default="all_reduce,reduce_scatter,all_gather,broadcast,scatter"
    )
    parser.add_argument("--contenders", default=",".join((*ZCCL, "mpi", "gloo", "fp16")))
    parser.add_argument("--rate", default="1gbit", help="per link and direction (tc syntax)")
    parser.add_argument("--rel", type=float, default=1e-4)
    parser.add_argument("--data", default="wavefield")
    parser.add_argument(
        "--root", type=int, default=0, help="root of reduce, broadcast and scatter (0 to ranks - 1)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--no-forced-mpi", action="store_true")
    parser.add_argument(
        "--quick", action="store_true", help="4 ranks, 16 and 64 MB, one repeat, no forced MPI runs"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "collectives.json")
    args = parser.parse_args()
    if args.quick:
        args.ranks, args.sizes_mb, args.repeats, args.no_forced_mpi = "4", "16,64", 1, True
    if os.geteuid() != 0:
        raise SystemExit("collectives.py builds network namespaces: run it as root")

    ranks = [int(r) for r in args.ranks.split(",")]
    forced = [] if args.no_forced_mpi else FORCED_MPI
    runs_per_p = args.repeats * (1 + len(forced))
    jsonl = args.out.with_suffix(".rows.jsonl")
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    jsonl.unlink(missing_ok=True)
    if not 0 <= args.root < min(ranks):
        raise SystemExit(f"--root {args.root} is not a rank of every run (ranks {args.ranks})")
    common = [
        "--collectives",
        args.collectives,
        "--sizes-mb",
        args.sizes_mb,
        "--rel",
        str(args.rel),
        "--data",
        args.data,
        "--iters",
        str(args.iters),
        "--root",
        str(args.root),
        "--out",
        str(jsonl),
    ]
    calibrations = {}
    started = time.time()
    bar = tqdm(total=len(ranks) * runs_per_p, desc="benchmark runs", unit="run")
    try:
        for p in ranks:
            sh([str(CLUSTER), "up", str(p), args.rate])
            bar.set_postfix_str(f"p={p} calibrating")
            calibrations[p] = calibrate(p, args.data, args.rel)
            cal = calibrations[p]
            tqdm.write(
                f"p={p}: link {cal['link_Bps'] * 8 / 1e9:.3f} Gbit/s achieved "
                f"(shaped {args.rate}), latency {cal['latency_s'] * 1e6:.0f} us, "
                f"compress {cal['compress_Bps'] / 1e9:.2f} GB/s/rank, "
                f"ratio {cal['ratio']:.1f}"
            )
            for rep in range(args.repeats):
                bar.set_postfix_str(f"p={p} repeat {rep + 1} all contenders")
                mpirun(
                    p,
                    [
                        str(HERE / "collectives_rank.py"),
                        *common,
                        "--contenders",
                        args.contenders,
                        "--label",
                        f"repeat{rep}",
                    ],
                )
                bar.update()
                for f in forced:
                    names = ",".join(f"{k}={v[1]}" for k, v in f.items())
                    bar.set_postfix_str(f"p={p} repeat {rep + 1} forced MPI")
                    mpirun(
                        p,
                        [
                            str(HERE / "collectives_rank.py"),
                            *common,
                            "--contenders",
                            "mpi",
                            "--label",
                            f"forced:{names}",
                        ],
                        env_extra=forced_env(f),
                    )
                    bar.update()
    finally:
        bar.close()
        sh([str(CLUSTER), "down"])
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    for r in rows:  # a forced run's label names all five; keep the one for this collective
        if r["label"].startswith("forced:"):
            key = MPI_NAME[r["collective"]]
            r["label"] = "forced:" + next(
                x for x in r["label"][7:].split(",") if x.startswith(key + "=")
            )
    summary = summarize(rows)
    print_table(summary)
    argv = " ".join(sys.argv[1:])
    result = {
        # zccl settings from the environment reach every rank: part of the command to rerun
        "command": " ".join(
            [
                *(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("ZCCL_")),
                f"python benchmarks/collectives.py {argv}".strip(),
            ]
        ),
        "machine": machine(),
        "rate": args.rate,
        "rel": args.rel,
        "data": args.data,
        "calibration": calibrations,
        "wall_s": time.time() - started,
        "summary": summary,
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    jsonl.unlink(missing_ok=True)
    print(f"wrote {args.out} ({time.time() - started:.0f} s)")
    from plot_collectives import plot_all

    for path in plot_all(result, args.out.parent):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
