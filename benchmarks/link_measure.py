"""What a zccl group measures of its network (``ZCCL_MEASURE_LINK=1``) and what
``algorithm="auto"`` then does, against the default assumption of a 1 Gbit/s link.

Two settings: **loopback** (every rank on this host, no shaping: a "network" far faster than the
codec, where MPI's exact collectives should win) and the **emulated cluster** of
``benchmarks/cluster/`` (one rank per network namespace, every link shaped to ``--rates`` with tc
tbf; needs root). In each, ``benchmarks/link_rank.py`` runs under both transports (Open MPI and
zccl's TCP): the default group measures its link when created, ``--measures`` further calls of
``measure_link`` show the spread, and each collective is timed under auto with the measured link
and with the default one. Writes ``benchmarks/results/link_measure.json``.

Run (as root for the cluster): ``python3 benchmarks/link_measure.py`` (about 10 minutes on 2
cores); ``--rates ''`` runs loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLUSTER = HERE / "cluster"
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_mpi_yield_when_idle": "1",
}


def run(cmd: list[str], transport: str) -> list[dict]:
    env = {
        **os.environ,
        **MPI_ENV,
        "PYTHONPATH": str(ROOT),
        "ZCCL_MEASURE_LINK": "1",
        "ZCCL_TRANSPORT": transport,
    }
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        where = f"{r['setting']:>9} {r['transport']:>4} p={r['ranks']}"
        if r["kind"] == "measure":
            again = r["again_gbps"]
            print(
                f"{where} measured {r['gbps']:8.3f} Gbit/s {r['latency_us']:7.1f} us at creation; "
                f"again {min(again):.3f}-{max(again):.3f} Gbit/s, "
                f"{statistics.median(r['measure_s']) * 1e3:.1f} ms per measurement"
            )
        else:
            m, d = r["measured"], r["default"]
            print(
                f"{where} {r['collective']:>10} {r['size_mb']:g} MB: measured link "
                f"{m['s'] * 1e3:8.2f} ms ({m['algorithm']}), default link {d['s'] * 1e3:8.2f} ms "
                f"({d['algorithm']}): {d['s'] / m['s']:.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--rates", default="200mbit,1gbit,5gbit", help="tc rates ('' = none)")
    parser.add_argument("--sizes-mb", default="16")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--measures", type=int, default=5)
    parser.add_argument("--collectives", default="all_reduce,broadcast,all_gather,scatter")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "link_measure.json")
    args = parser.parse_args()
    rank_args = [
        str(HERE / "link_rank.py"),
        "--sizes-mb",
        args.sizes_mb,
        "--iters",
        str(args.iters),
        "--measures",
        str(args.measures),
        "--collectives",
        args.collectives,
    ]
    rows: list[dict] = []
    local = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(args.ranks), "python3"]
    for transport in ("mpi", "tcp"):
        got = run([*local, *rank_args], transport)
        rows += [{**r, "setting": "loopback"} for r in got]
        print_rows(rows[-len(got) :])
    rates = [r for r in args.rates.split(",") if r]
    if rates and os.geteuid() != 0:
        raise SystemExit("the emulated cluster needs network namespaces: run as root")
    for rate in rates:
        up = [str(CLUSTER / "cluster.sh"), "up", str(args.ranks), rate]
        subprocess.run(up, check=True, capture_output=True)
        try:
            for transport in ("mpi", "tcp"):
                cmd = [str(CLUSTER / "mpirun_cluster.sh"), "-np", str(args.ranks), "python3"]
                got = run([*cmd, *rank_args], transport)
                rows += [{**r, "setting": rate} for r in got]
                print_rows(rows[-len(got) :])
        finally:
            subprocess.run([str(CLUSTER / "cluster.sh"), "down"], capture_output=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
