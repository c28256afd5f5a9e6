"""SIMULATION: two builds of zccl's all_reduce in the same SimGrid model, runs alternating.

The model's run-to-run spread (a few percent for one algorithm alone, more when several run in
one simulation) is as large as the effect of most single changes, so comparing two builds from
two separate ``codec_threads.py`` runs says little. This script builds the SimGrid driver from two
git revisions (``--new`` defaults to the working tree), simulates Open MPI's best uncompressed
all_reduce once, then runs the same zccl command with each build in turn, ``--runs`` times,
alternating which goes first, and reports each build's median and the speed-ups over MPI.

Run: ``python benchmarks/simgrid/ab_builds.py --base REV [--new REV] [--p 16] [--gbps 100]
[--speedup 8.38 --threads 16] [--algos ring] [--runs 6] --out F.json``
(needs ``smpicxx``/``smpirun`` and git). ``--speedup`` is the CPU speed-up modelled (see
``codec_threads.py``: 8.38 is fZ-light's 16-thread scaling measured on the 16-core GPU machine,
``benchmarks/results/gpu_h200/run8/codec_scaling_16cores.json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import codec_threads as CT  # noqa: E402,N812
import run_smpi as SMPI  # noqa: E402,N812

REPO = HERE.parents[1]
BUILD_SNIPPET = (
    "import sys; from pathlib import Path; sys.path.insert(0, 'benchmarks/simgrid'); "
    "import run_smpi; print(run_smpi.build(sys.argv[1], Path(sys.argv[2])))"
)


def build_tree(tree: Path, smpicxx: str) -> Path:
    """The driver built from the sources in `tree` (into the shared, hash-keyed build folder)."""
    out = subprocess.run(
        [sys.executable, "-c", BUILD_SNIPPET, smpicxx, str(SMPI.DEFAULT_BUILD)],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def build_rev(rev: str | None, smpicxx: str) -> tuple[Path, str]:
    """(driver, description) for a git revision, or for the working tree when rev is None."""
    if rev is None:
        head = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True)
        dirty = subprocess.check_output(
            ["git", "status", "--porcelain", "csrc", "benchmarks/simgrid"], cwd=REPO, text=True
        ).strip()
        what = f"working tree (HEAD {head.strip()}{', with uncommitted sources' if dirty else ''})"
        return build_tree(REPO, smpicxx), what
    sha = subprocess.check_output(["git", "rev-parse", "--short", rev], cwd=REPO, text=True).strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(tree), sha], cwd=REPO, check=True
        )
        try:
            return build_tree(tree, smpicxx), sha
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=True
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision of the baseline build")
    parser.add_argument("--new", default=None, help="git revision (default: the working tree)")
    parser.add_argument("--p", type=int, default=16)
    parser.add_argument("--gbps", type=float, default=100.0)
    parser.add_argument("--mb", type=float, default=64.0)
    parser.add_argument("--speedup", type=float, default=8.38, help="CPU speed-up modelled")
    parser.add_argument("--threads", type=int, default=16, help="zccl's threads setting")
    parser.add_argument("--algos", default="ring", help="zccl allreduce algorithms (driver)")
    parser.add_argument("--wait", choices=("spin", "sleep"), default="spin")
    parser.add_argument("--runs", type=int, default=6, help="runs of each build")
    parser.add_argument("--iters", type=int, default=6, help="all_reduces timed per run")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    smpicxx, smpirun = shutil.which("smpicxx"), shutil.which("smpirun")
    if smpicxx is None or smpirun is None:
        print("ab_builds.py: smpicxx/smpirun not found (apt-get install -y libsimgrid-dev)")
        return 2
    started = time.perf_counter()
    builds = {"base": build_rev(args.base, smpicxx), "new": build_rev(args.new, smpicxx)}
    for name, (exe, what) in builds.items():
        print(f"{name}: {what} -> {exe.name}")
    plat = SMPI.DEFAULT_BUILD / "platforms"
    case = SMPI.Case(args.p, args.gbps, args.mb, args.iters, 1)
    mpi_times = []
    for sel in (SMPI.SELECTOR_MAIN, *SMPI.SELECTORS_MPI_ONLY):
        cmd = CT.command(smpirun, builds["base"][0], case, plat, sel, 1, "mpi")
        t = CT.fastest(SMPI.run_once(cmd, args.timeout).records, "mpi")
        if t:
            mpi_times.append(t)
    mpi = min(mpi_times) if mpi_times else None
    print(f"best uncompressed MPI: {mpi}")
    impls = [f"zccl_{a}" for a in args.algos.split(",")]
    times: dict[str, dict[str, list[float]]] = {b: {i: [] for i in impls} for b in builds}
    commands = {}
    for k in range(args.runs):
        order = ("base", "new") if k % 2 == 0 else ("new", "base")
        for name in order:
            cmd = CT.command(
                smpirun, builds[name][0], case, plat, SMPI.SELECTOR_MAIN, args.speedup, "zccl",
                args.wait, args.algos, args.threads,
            )  # fmt: skip
            commands[name] = " ".join(cmd)
            res = SMPI.run_once(cmd, args.timeout)
            if res.error:
                print(f"{name} run {k}: {res.error}")
                return 1
            for impl in impls:
                t = CT.fastest(res.records, impl)
                if t:
                    times[name][impl].append(t)
            print(f"run {k} {name}: " + " ".join(f"{i} {times[name][i][-1]:.6f}" for i in impls))
    summary = {}
    for name in builds:
        for impl in impls:
            med = statistics.median(times[name][impl])
            summary[f"{name}_{impl}_median_s"] = med
            summary[f"{name}_{impl}_speedup"] = mpi / med if mpi else None
            speedups = [mpi / t for t in times[name][impl]] if mpi else []
            print(
                f"{name:4} {impl}: median {med * 1e3:.3f} ms"
                + (f" = {mpi / med:.2f}x over MPI (runs {min(speedups):.2f}-{max(speedups):.2f}x)"
                   if mpi else "")
            )  # fmt: skip
    doc = {
        "SIMULATION": f"SimGrid SMPI, {args.p} hosts, {args.gbps:g} Gbit/s, {args.mb:g} MB "
        f"all_reduce, CPU speed-up x{args.speedup:g} modelled, threads={args.threads}; "
        "simulated seconds per all_reduce (driver median of --iters per run)",
        "command": " ".join([sys.executable, *sys.argv]),
        "builds": {name: what for name, (_, what) in builds.items()},
        "order": "alternating, the first build of each round swapped every round",
        "mpi_best_s": mpi,
        "runs_s": times,
        **summary,
        "smpirun": commands,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} ({doc['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
