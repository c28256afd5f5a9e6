"""SIMULATION: what the ``link_gbps`` setting changes for data movement on a fast network.

Run: ``python benchmarks/simgrid/link_setting.py [--p 16] [--gbps 100] [--mb 4]`` (needs SimGrid's
``smpicxx``/``smpirun``, as run_smpi.py). Builds the SMPI driver (run_smpi.build), then simulates
the same platform twice with zccl's broadcast, scatter and all_gather under ``algorithm="auto"``
and the plain MPI collectives (SMPI's Open MPI selector):

* ``default``: zccl assumes its default network (``link_gbps=1``), so it compresses whatever
  the platform's link is (what a user who leaves the setting alone gets);
* ``set``: zccl assumes the platform's network (``--link-gbps``/``--link-latency-us`` of the
  driver), so ``route()`` sends the data exact where one thread's codec cannot keep up.

Prints zccl's and MPI's simulated time per collective and their ratio, and writes
``benchmarks/results/smpi_link_setting.json``. Every time is SimGrid's simulated seconds, one
compressor thread per rank (see benchmarks/simgrid/README.md for the model and its caveats).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run_smpi as SMPI  # noqa: E402,N812

COLLS = ("broadcast", "scatter", "allgather")


def simulate(
    smpirun: str, exe: Path, case: SMPI.Case, plat: Path, label: str, extra: list[str]
) -> list[dict[str, Any]]:
    """One smpirun of the driver; its records (raises naming the failure)."""
    dargs = ["--colls", ",".join(COLLS), "--label", label, *extra]
    cmd = SMPI.smpirun_command(smpirun, exe, case, plat, SMPI.SELECTOR_MAIN, dargs)
    res = SMPI.run_once(cmd, timeout_s=3600.0)
    if res.returncode != 0:
        raise RuntimeError(f"{label}: {res.error}")
    return res.records


def main(argv: list[str] | None = None) -> int:
    """Simulates both settings; prints the table; 1 if a result missed its check."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=16)
    ap.add_argument("--gbps", type=float, default=100.0)
    ap.add_argument("--mb", type=float, default=4.0, help="message size, MB (driver --bytes)")
    ap.add_argument("--out", type=Path, default=SMPI.RESULTS / "smpi_link_setting.json")
    ap.add_argument("--build-dir", type=Path, default=SMPI.DEFAULT_BUILD)
    args = ap.parse_args(argv)
    smpicxx, smpirun = shutil.which("smpicxx"), shutil.which("smpirun")
    if smpicxx is None or smpirun is None:
        print("link_setting.py: smpicxx/smpirun not found (apt-get install -y libsimgrid-dev)")
        return 2
    args.build_dir.mkdir(parents=True, exist_ok=True)
    exe = SMPI.build(smpicxx, args.build_dir)
    case = SMPI.Case(args.p, args.gbps, args.mb, iters=3, warmup=1)
    plat = args.build_dir / "platforms"
    latency = SMPI.PLATFORM.latency_us(args.gbps)
    settings = {
        "default": [],
        "set": ["--link-gbps", f"{args.gbps:g}", "--link-latency-us", f"{latency:g}"],
    }
    records = {
        name: simulate(smpirun, exe, case, plat, name, extra) for name, extra in settings.items()
    }
    rows, failed = [], 0
    for coll in COLLS:
        for name, recs in records.items():
            z = next(r for r in recs if r.get("collective") == coll and r.get("impl") == "zccl")
            m = next(r for r in recs if r.get("collective") == coll and r.get("impl") == "mpi")
            failed += not (z.get("pass", False) and m.get("pass", False))
            rows.append(
                {
                    "collective": coll,
                    "setting": name,
                    "zccl_s": z["time_s"],
                    "mpi_s": m["time_s"],
                    "mpi_over_zccl": m["time_s"] / z["time_s"],
                    "zccl_bytes_compressed": z.get("bytes_compressed_total"),
                }
            )
    print(f"SIMULATION p={args.p}, {args.gbps:g} Gbit/s, {args.mb:g} MB, one thread per rank")
    print(f"{'collective':<11} {'zccl assumes':<22} {'zccl ms':>9} {'MPI ms':>9} {'MPI/zccl':>9}")
    for r in rows:
        assumed = "1 Gbit/s (default)" if r["setting"] == "default" else f"{args.gbps:g} Gbit/s"
        print(
            f"{r['collective']:<11} {assumed:<22} {1e3 * r['zccl_s']:>9.2f} "
            f"{1e3 * r['mpi_s']:>9.2f} {r['mpi_over_zccl']:>8.2f}x"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "simulation": True,
                "command": " ".join(
                    [
                        "python",
                        "benchmarks/simgrid/link_setting.py",
                        *(sys.argv[1:] if argv is None else argv),
                    ]
                ),
                "p": args.p,
                "gbps": args.gbps,
                "mb": args.mb,
                "settings": settings,
                "rows": rows,
                "records": records,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
