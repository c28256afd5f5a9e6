"""The zccl collectives on the emulated 4-host 1 Gbit/s cluster launched two ways: ``mpirun``
(Open MPI carries the compressed bytes) and one ``torchrun`` per host joined by c10d rendezvous
(the TCP transport). Same rank program (``benchmarks/launch_rank.py``), same data, alternated
``--repeats`` times; prints the median of each and the ratio torchrun / mpirun.

Run (as root): ``python benchmarks/launch_compare.py``. Writes
``benchmarks/results/launch_compare.json``. The cluster is taken down at the end, also on errors.

Scheduling: torchrun starts each worker in a session of its own (``start_new_session``), and with
the kernel's autogroup scheduling (``kernel.sched_autogroup_enabled``, on by default) each session
is a CPU group of its own; mpirun's ranks share one session. The emulated hosts share this
machine's cores, so that alone changes how the CPU is split between them (mpirun ranks each put in
their own session with ``setsid`` went from 2.8 to 4.4 ms on the 16 MB scatter), which no cluster
of real hosts has. ``--autogroup off`` (the default) turns autogroup off for the run, so both
launchers are scheduled alike, and restores the setting after; ``--autogroup keep`` leaves it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")
ROOT = HERE.parent
CLUSTER = HERE / "cluster"


def run(cmd: list[str]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--sizes-mb", default="16")
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument(
        "--collectives", default="all_reduce,broadcast,all_gather,reduce_scatter,scatter"
    )
    parser.add_argument(
        "--autogroup",
        choices=("off", "keep"),
        default="off",
        help="kernel autogroup scheduling during the run (see the module doc)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "launch_compare.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("launch_compare.py builds network namespaces: run it as root")
    rank_args = [
        "--sizes-mb",
        args.sizes_mb,
        "--iters",
        str(args.iters),
        "--collectives",
        args.collectives,
    ]
    launchers = {
        "mpirun": [
            str(CLUSTER / "mpirun_cluster.sh"),
            "-np",
            str(args.ranks),
            "python3",
            str(HERE / "launch_rank.py"),
            *rank_args,
        ],
        "torchrun": [
            str(CLUSTER / "torchrun_cluster.sh"),
            "-np",
            str(args.ranks),
            str(HERE / "launch_rank.py"),
            *rank_args,
        ],
    }
    rows: list[dict] = []
    autogroup_before = AUTOGROUP.read_text().strip() if AUTOGROUP.exists() else None
    subprocess.run(
        [str(CLUSTER / "cluster.sh"), "up", str(args.ranks), args.rate],
        check=True,
        capture_output=True,
    )
    try:
        if args.autogroup == "off" and autogroup_before is not None:
            AUTOGROUP.write_text("0\n")
        for rep in range(args.repeats):
            for name, cmd in launchers.items():
                for row in run(cmd):
                    rows.append({**row, "launcher": name, "repeat": rep})
                print(f"repeat {rep + 1}/{args.repeats}: {name} done", flush=True)
    finally:
        if autogroup_before is not None:
            AUTOGROUP.write_text(autogroup_before + "\n")
        subprocess.run([str(CLUSTER / "cluster.sh"), "down"], capture_output=True)
    summary = []
    keys = sorted({(r["collective"], r["size_mb"]) for r in rows})
    head = ("collective", "MB", "mpirun s", "torchrun s", "torchrun/mpirun")
    print(f"{head[0]:>15} {head[1]:>5} {head[2]:>9} {head[3]:>10} {head[4]:>16}")
    for collective, mb in keys:
        med = {
            name: statistics.median(
                r["median_s"]
                for r in rows
                if r["launcher"] == name and r["collective"] == collective and r["size_mb"] == mb
            )
            for name in launchers
        }
        ratio = med["torchrun"] / med["mpirun"]
        summary.append(
            {
                "collective": collective,
                "size_mb": mb,
                "mpirun_s": med["mpirun"],
                "torchrun_s": med["torchrun"],
                "torchrun_over_mpirun": ratio,
            }
        )
        print(
            f"{collective:>15} {mb:>5g} {med['mpirun']:>9.4f} {med['torchrun']:>10.4f} "
            f"{ratio:>15.2f}x"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "autogroup_before": autogroup_before,
                "summary": summary,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
