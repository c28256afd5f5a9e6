"""SIMULATION sweep: zccl's collectives vs uncompressed MPI under SimGrid SMPI, 4..256 hosts.

Run: ``python benchmarks/simgrid/run_smpi.py`` (full sweep) or ``--quick`` (smoke, < 2 min).
Needs ``smpicxx``/``smpirun`` (Debian: ``apt-get install -y libsimgrid-dev``, SimGrid 3.32).

1. Builds ``smpi_collectives.cpp`` with the unmodified csrc/ sources using smpicxx into
   ``benchmarks/simgrid/build/`` (git-ignored; reused while sources, flags and SimGrid are
   unchanged).
2. For every (p, link speed, message size) of the sweep writes a platform (smpi_platform.py), runs
   the driver under ``smpirun`` (niced): zccl + MPI with SMPI's Open MPI collective selector,
   then MPI alone under the MVAPICH2 and MPICH selectors (the uncompressed baseline is the best
   of the three), and zccl's Algorithm::Mpi path in a run of its own where its memory fits.
3. Writes every measurement, the machine, the SMPI configuration and the exact commands to
   ``benchmarks/results/smpi.json``, plots ``benchmarks/results/smpi_speedup.png`` and prints a
   summary table. Everything is labelled SIMULATION: times are SimGrid's simulated seconds.

How real compute time enters the simulation: SMPI measures the thread CPU time between two MPI
calls of each rank (``smpi/simulate-computation``), multiplies it by ``smpi/host-speed`` (flop/s)
and executes that many flops on the simulated host. The hosts' speed
(smpi_platform.HOST_SPEED) equals ``smpi/host-speed``, so one second of real CPU is one simulated
second.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform as pyplatform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # smpi_platform.py next to this file (also when imported)

import smpi_platform as PLATFORM  # noqa: E402,N812

MB = 1_000_000
DEFAULT_BUILD = HERE / "build"
RESULTS = ROOT / "benchmarks" / "results"

# Compile flags: the project's C++ test flags (tests/cpp_build.py) at -O3; SMPI_NO_OVERRIDE_MALLOC
# keeps smpicxx's helper header from redirecting malloc/free to SMPI's shared-malloc wrappers.
CXXFLAGS = [
    "-std=c++17",
    "-O3",
    "-fopenmp",
    "-ffp-contract=off",
    "-march=native",
    "-Wall",
    "-Wextra",
    "-DSMPI_NO_OVERRIDE_MALLOC",
]

# SMPI configuration (every run). Reasons, in order:
# * host-speed = platform host speed: one second of measured CPU becomes one simulated second.
# * simulate-computation: inject measured CPU bursts (the default, stated explicitly).
# * cpu-threshold 0: inject every burst, also the few-microsecond ones between two polls of zccl's
#   wait loops (spin, sched_yield), so a simulated wait advances the clock the way the real loop
#   spends time; with the default (1 us) those loops cost no simulated time and every wait falls
#   through to the transport's sleep back-off, overshooting.
# * test 0: do not add a fixed delay to each MPI_Test. Open MPI's MPI_Test on a pending request
#   measured 16-23 ns here; a non-zero value turns every poll into a simulation time step.
# * grow-injected-times no: SMPI would otherwise grow the MPI_Test/Iprobe delays across failed
#   polls (a process-wide counter shared by all ranks).
# * lat-factor 1, bw-factor 0.94: the platform's latency as is, 94 % of the line rate for data
#   (TCP/IP + Ethernet framing at MTU 1500: 1448/1538). SMPI's default factors were fitted to
#   one Gigabit-Ethernet cluster and multiply the latency of large messages by up to 11.6.
# * coll-selector: Open MPI's decision logic for MPI's own collectives, and MVAPICH2's in an
#   MPI-only run (SMPI's "ompi" broadcast is 3-4x slower than MVAPICH2's at some sizes). MPICH's
#   selector was also tried in a first sweep: it never beat the better of the two by more than
#   0.2 %, so it is left out to save time.
SMPI_CFG = [
    "smpi/host-speed:1Gf",
    "smpi/simulate-computation:yes",
    "smpi/cpu-threshold:0",
    "smpi/test:0",
    "smpi/grow-injected-times:no",
    "smpi/lat-factor:0:1",
    "smpi/bw-factor:0:0.94",
    "smpi/display-timing:yes",
]
SMPI_LOG = ["smpi_colls.thres:warning", "smpi_coll.thres:warning", "xbt_cfg.thres:warning"]
SELECTOR_MAIN = "ompi"
SELECTORS_MPI_ONLY = ("mvapich2",)
# OMP_THREAD_LIMIT=1: the simulated ranks share one process, so a driver run with --threads T
# (codec_threads.py) plans and schedules for T threads while one thread runs every lane.
RUN_ENV = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "OMP_THREAD_LIMIT": "1"}
# zccl's Algorithm::Mpi allreduce calls MPI_Iallreduce(MPI_IN_PLACE). SMPI 3.32 copies the input
# into a temporary that it frees when the call returns, while its simulated sends read that memory
# later: the result is garbage (reported, check excluded) and, once glibc returns the freed block
# to the kernel (large blocks are mmapped), the process segfaults. For that run only, glibc keeps
# every block on its heap and never trims it, so the stale reads stay mapped; the timing (bytes
# and messages) does not depend on the values.
MPI_PATH_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40)}
MPI_PATH_BUDGET = 2 * 2**30  # bytes of SMPI MPI_Iallreduce receive buffers (p*(p-1)*size)
COLLECTIVES = ("allreduce", "broadcast", "scatter", "allgather")


@dataclass(frozen=True)
class Case:
    """One simulated configuration."""

    p: int
    gbps: float
    mbytes: float  # message size in MB (see smpi_collectives.cpp --bytes)
    iters: int
    warmup: int
    skip_ring: bool = False  # leave out zccl's ring allreduce and allgather (driver --skip-ring)


def full_sweep() -> list[Case]:
    """The sweep: p = 4 at 1 Gbit/s (cross-check), p = 16..256 at 10 and 100 Gbit/s.

    The whole sweep is sized to finish in about 20 minutes on the 2-core VM under nice while
    another job loads it. Sizes shrink with p because every rank lives in one process (about 3x
    the message per rank plus zccl's workspaces) and the simulation's cost grows with p^2 for
    the ring algorithms (each rank's 2(p-1) waits poll MPI a few hundred times): 64 MB at
    p <= 16, then 32, 8, 4 and 2 MB, with fewer timed calls at larger p. At p >= 128 zccl's ring
    allreduce and ring allgather are left out: their per-call 24-byte MPI_Iallgather (p*(p-1)
    concurrent messages in SMPI, as in Open MPI's libnbc) takes 8 s to simulate at p = 128 and
    ~9 minutes at p = 256, and the ring allgather's polling ~2 minutes per call at p = 128.
    """
    cases = [Case(4, 1.0, 64, 3, 1)]
    plan = {16: (64, 2, 1), 32: (32, 2, 1), 64: (8, 1, 1), 128: (4, 1, 1), 256: (2, 1, 1)}
    for p, (mb, iters, warmup) in plan.items():
        for gbps in (10.0, 100.0):
            cases.append(Case(p, gbps, mb, iters, warmup, skip_ring=p >= 128))
    return cases


def quick_sweep() -> list[Case]:
    """A smoke sweep (< 2 minutes): p = 4 at 1 Gbit/s and p = 16 at 10 Gbit/s, 4 MB."""
    return [Case(4, 1.0, 4, 2, 1), Case(16, 10.0, 4, 2, 1)]


# --- build ----------------------------------------------------------------------------------------


def sources() -> list[Path]:
    """The driver and the csrc/ sources it links (transport, compressor, collectives)."""
    csrc = ROOT / "csrc"
    return [
        HERE / "smpi_collectives.cpp",
        *sorted((csrc / "transport").glob("*.cpp")),
        *sorted((csrc / "compress").glob("*.cpp")),
        *sorted((csrc / "collectives").rglob("*.cpp")),
    ]


def simgrid_version(smpicxx: str) -> str:
    """``smpicxx --version`` (e.g. 'SimGrid version 3.32')."""
    out = subprocess.run([smpicxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or out.stderr.strip()


def build(smpicxx: str, build_dir: Path, jobs: int = 2) -> Path:
    """Compiles and links the driver with smpicxx (niced); returns the executable.

    Reused when a hash of the sources, every csrc header, the flags and SimGrid's version is
    unchanged.
    """
    h = hashlib.sha256(simgrid_version(smpicxx).encode() + repr(CXXFLAGS).encode())
    for path in [*sources(), *sorted((ROOT / "csrc").rglob("*.h"))]:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    key = h.hexdigest()[:16]
    exe = build_dir / f"smpi_collectives-{key}"
    if exe.exists():
        return exe
    obj_dir = build_dir / f"obj-{key}"
    obj_dir.mkdir(parents=True, exist_ok=True)

    def compile_one(src: Path) -> Path:
        obj = obj_dir / f"{src.parent.name}_{src.stem}.o"
        cmd = ["nice", "-n", "19", smpicxx, *CXXFLAGS, "-c", str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or proc.stderr.strip():
            raise RuntimeError(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        return obj

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        objects = list(pool.map(compile_one, sources()))
    tmp = exe.with_name(exe.name + ".tmp")
    cmd = ["nice", "-n", "19", smpicxx, *CXXFLAGS, *map(str, objects), "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    os.replace(tmp, exe)  # atomic: a concurrent run never sees a half-written executable
    shutil.rmtree(obj_dir, ignore_errors=True)
    return exe


# --- running --------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One smpirun invocation: its command, records, status and timings."""

    cmd: list[str]
    records: list[dict[str, Any]] = field(default_factory=list)
    returncode: int = 0
    wall_s: float = 0.0
    sim_report: dict[str, float] = field(default_factory=dict)
    error: str = ""


def smpirun_command(
    smpirun: str,
    exe: Path,
    case: Case,
    plat_dir: Path,
    selector: str,
    driver_args: Iterable[str],
) -> list[str]:
    """The niced smpirun command line for one run of the driver."""
    xml, hostfile = PLATFORM.write_platform(case.p, case.gbps, plat_dir)
    cfg = [f"--cfg={c}" for c in [*SMPI_CFG, f"smpi/coll-selector:{selector}"]]
    log = [f"--log={entry}" for entry in SMPI_LOG]
    return [
        "nice", "-n", "19", smpirun,
        "-platform", str(xml), "-hostfile", str(hostfile), "-np", str(case.p),
        *cfg, *log, str(exe),
        "--bytes", str(int(case.mbytes * MB)),
        "--iters", str(case.iters), "--warmup", str(case.warmup),
        *driver_args,
    ]  # fmt: skip


def parse_output(stdout: str, stderr: str) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The driver's JSON records and SMPI's timing report (simulated time, wall, computation)."""
    records = [
        json.loads(line.split(" ", 1)[1])
        for line in stdout.splitlines()
        if line.startswith("SMPI_JSON ")
    ]
    report: dict[str, float] = {}
    text = stdout + stderr
    patterns = {
        "simulated_s": r"Simulated time: ([0-9.eE+-]+) seconds",
        "simulation_wall_s": r"The simulation took ([0-9.eE+-]+) seconds",
        "injected_computation_s": r"([0-9.eE+-]+) seconds were actual computation",
    }
    for key, pat in patterns.items():
        m = re.search(pat, text)
        if m:
            report[key] = float(m.group(1))
    return records, report


def run_once(cmd: list[str], timeout_s: float, env: dict[str, str] | None = None) -> RunResult:
    """Runs one smpirun command (``env`` on top of RUN_ENV); never raises for a failing
    simulation (recorded instead)."""
    res = RunResult(cmd=cmd)
    t0 = time.perf_counter()
    # Its own session, killed whole on a timeout: smpirun is a shell script, and killing only it
    # left its smpimain running (one kept 17 GB and a core busy after a 64-host timeout).
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **RUN_ENV, **(env or {})},
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        res.records, res.sim_report = parse_output(out or "", "")
        res.returncode = -1
        res.error = f"timed out after {timeout_s:.0f} s"
        res.wall_s = time.perf_counter() - t0
        return res
    proc = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    res.wall_s = time.perf_counter() - t0
    res.returncode = proc.returncode
    res.records, res.sim_report = parse_output(proc.stdout, proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-8:])
        res.error = f"exit status {proc.returncode}: {tail}"
    return res


def runs_for_case(case: Case) -> list[tuple[str, list[str]]]:
    """(selector, driver arguments) of every smpirun a case needs (the label comes last)."""
    main = ["--colls", ",".join(COLLECTIVES), "--label", "main"]
    runs = [(SELECTOR_MAIN, [*main, "--skip-ring", "1"] if case.skip_ring else main)]
    for sel in SELECTORS_MPI_ONLY:
        runs.append(
            (sel, ["--colls", ",".join(COLLECTIVES), "--impls", "mpi", "--label", f"mpi-{sel}"])
        )
    if case.p * (case.p - 1) * case.mbytes * MB <= MPI_PATH_BUDGET:
        runs.append(
            (
                SELECTOR_MAIN,
                ["--colls", "allreduce_mpi_path", "--mpi-path-budget", str(MPI_PATH_BUDGET),
                 "--label", "mpi-path"],
            )
        )  # fmt: skip
    return runs


# --- analysis -------------------------------------------------------------------------------------


def best(records: list[dict[str, Any]], prefix: str) -> dict[str, Any] | None:
    """The fastest timed record whose impl starts with ``prefix`` (None if there is none)."""
    timed = [r for r in records if r.get("impl", "").startswith(prefix) and r.get("time_s")]
    return min(timed, key=lambda r: r["time_s"]) if timed else None


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (p, link, collective): the best zccl vs the best uncompressed MPI."""
    groups: dict[tuple[int, float, str, int], list[dict[str, Any]]] = {}
    for r in records:
        if "collective" in r:
            key = (r["p"], r["link_gbps"], r["collective"], r["bytes"])
            groups.setdefault(key, []).append(r)
    rows = []
    for (p, gbps, coll, nbytes), recs in sorted(groups.items()):
        z = best([r for r in recs if r["impl"] != "zccl_mpi_path"], "zccl")
        m_plain = best(recs, "mpi")
        m_path = best(recs, "zccl_mpi_path")
        candidates = [m for m in (m_plain, m_path) if m is not None]
        m = min(candidates, key=lambda r: r["time_s"]) if candidates else None
        if z is None or m is None:
            continue
        zccl_checks = [r for r in recs if r["impl"].startswith("zccl") and "pass" in r]
        rows.append(
            {
                "p": p,
                "link_gbps": gbps,
                "collective": coll,
                "bytes": nbytes,
                "zccl_impl": z["impl"] + (f" ({z['algorithm']})" if coll == "allreduce" else ""),
                "zccl_time_s": z["time_s"],
                "mpi_impl": (
                    f"{m['impl']} [{m.get('coll_selector')}]" if m["impl"] == "mpi" else m["impl"]
                ),
                "mpi_time_s": m["time_s"],
                "speedup": m["time_s"] / z["time_s"],
                "zccl_err_over_bound": z.get("err_over_bound"),
                "all_checks_pass": all(
                    r["pass"] or r.get("check_excluded", False) for r in recs if "pass" in r
                ),
                "zccl_auto_algorithm": next(
                    (r.get("algorithm") for r in zccl_checks + recs if r["impl"] == "zccl_auto"),
                    None,
                ),
            }
        )
    return rows


def fmt_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the summary rows."""
    lines = [
        "| p | link | collective | size | zccl (best) | zccl time | MPI (best) | MPI time "
        "| speedup | max err / bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eob = r["zccl_err_over_bound"]
        lines.append(
            f"| {r['p']} | {r['link_gbps']:g} Gb/s | {r['collective']} | {r['bytes'] / MB:g} MB "
            f"| {r['zccl_impl']} | {r['zccl_time_s'] * 1e3:.2f} ms | {r['mpi_impl']} "
            f"| {r['mpi_time_s'] * 1e3:.2f} ms | {r['speedup']:.2f}x "
            f"| {'-' if eob is None else f'{eob:.3f}'} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """zccl speedup over the best uncompressed MPI vs p: one line per collective and link."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.2))
    colors = {"allreduce": "C0", "broadcast": "C1", "scatter": "C2", "allgather": "C3"}
    styles = {10.0: ("-", "o"), 100.0: ("--", "s"), 1.0: (":", "^")}
    for coll in COLLECTIVES:
        for gbps in sorted({r["link_gbps"] for r in rows}):
            pts = sorted(
                (r["p"], r["speedup"])
                for r in rows
                if r["collective"] == coll and r["link_gbps"] == gbps
            )
            if not pts:
                continue
            line, marker = styles.get(gbps, ("-.", "x"))
            ax.plot(
                [x for x, _ in pts],
                [y for _, y in pts],
                linestyle=line,
                marker=marker,
                color=colors[coll],
                label=f"{coll}, {gbps:g} Gbit/s",
            )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ps = sorted({r["p"] for r in rows})
    size_of = {r["p"]: r["bytes"] for r in rows if r["collective"] == "allreduce"}
    ax.set_xticks(ps, [f"{p}\n{size_of.get(p, 0) / MB:g} MB" for p in ps])
    ax.set_xlabel("simulated hosts p (one rank each) and message size")
    ax.set_ylabel("speedup = best uncompressed MPI time / best zccl time")
    ax.set_title(
        "SIMULATION (SimGrid SMPI): zccl vs uncompressed MPI, REL 1e-4, 1 compressor thread\n"
        "star of p hosts, 1 / 10 / 100 Gbit/s links; real compression CPU time injected",
        fontsize=10,
    )
    ax.legend(fontsize=7, ncol=2)
    if any(r["p"] >= 128 for r in rows):
        ax.text(
            0.99,
            0.99,
            "p >= 128: zccl ring allreduce / allgather not simulated\n"
            "(allreduce = recursive doubling there)",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7,
        )
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --- main -----------------------------------------------------------------------------------------


def machine_info(smpicxx: str) -> dict[str, Any]:
    """The host running the simulation (the simulated platform is described per case)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "platform": pyplatform.platform(),
        "python": pyplatform.python_version(),
        "simgrid": simgrid_version(smpicxx),
        "git": git or None,
        "load_average_1min_at_start": os.getloadavg()[0],
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke sweep (< 2 minutes); writes into --build-dir unless --out/--plot are given",
    )
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD)
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    parser.add_argument("--plot", type=Path, default=None, help="PNG output path")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per smpirun")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="no simulation: redo the summary table and plot of an existing results file",
    )
    parser.add_argument(
        "--only-p",
        type=int,
        nargs="*",
        default=None,
        help="rerun only these p; an existing --out file keeps its other p",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Builds, sweeps, writes JSON + plot, prints the summary; 1 if any check failed."""
    args = parse_args(argv)
    if args.from_json is not None:
        rows = summarize(json.loads(args.from_json.read_text())["records"])
        plot(rows, args.plot or args.from_json.with_name("smpi_speedup.png"))
        print(fmt_table(rows))
        return 0
    smpicxx, smpirun = shutil.which("smpicxx"), shutil.which("smpirun")
    if smpicxx is None or smpirun is None:
        print("run_smpi.py: smpicxx/smpirun not found (apt-get install -y libsimgrid-dev)")
        return 2
    from tqdm import tqdm

    t_start = time.perf_counter()
    args.build_dir.mkdir(parents=True, exist_ok=True)
    exe = build(smpicxx, args.build_dir)
    plat_dir = args.build_dir / "platforms"
    cases = quick_sweep() if args.quick else full_sweep()
    if args.only_p:
        cases = [c for c in cases if c.p in args.only_p]
    plan = [(case, sel, dargs) for case in cases for sel, dargs in runs_for_case(case)]
    # The quick smoke sweep writes next to the build (git-ignored), not over the real results.
    out_dir = args.build_dir if args.quick else RESULTS
    out = args.out or out_dir / "smpi.json"
    png = args.plot or out_dir / "smpi_speedup.png"

    records: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    failures = 0
    # Every record also goes here as it arrives, so a long sweep can be inspected (or salvaged).
    partial = args.build_dir / "smpi_partial.jsonl"
    partial.write_text("")
    bar = tqdm(plan, desc="SMPI simulation", unit="run")
    for case, sel, dargs in bar:
        bar.set_postfix_str(f"p={case.p} {case.gbps:g}Gb/s {case.mbytes:g}MB {sel} {dargs[-1]}")
        cmd = smpirun_command(smpirun, exe, case, plat_dir, sel, dargs)
        res = run_once(cmd, args.timeout, MPI_PATH_ENV if "mpi-path" in dargs else None)
        for r in res.records:
            r.update(link_gbps=case.gbps, latency_us=PLATFORM.latency_us(case.gbps))
            r["coll_selector"] = sel
        records.extend(res.records)
        summary = next((r for r in res.records if r.get("record") == "summary"), None)
        ok = res.returncode == 0 and summary is not None and summary.get("all_pass", False)
        if not ok and "mpi-path" not in dargs:
            failures += 1
        runs.append(
            {
                "case": case.__dict__,
                "coll_selector": sel,
                "command": " ".join(
                    [*(f"{k}={v}" for k, v in MPI_PATH_ENV.items() if "mpi-path" in dargs), *cmd]
                ),
                "returncode": res.returncode,
                "wall_s": round(res.wall_s, 2),
                "smpi_report": res.sim_report,
                "error": res.error,
            }
        )
        with partial.open("a") as f:
            for r in [*res.records, {"run": runs[-1]}]:
                f.write(json.dumps(r) + "\n")
        if res.error:
            tqdm.write(f"run failed ({res.error.splitlines()[0]}): {' '.join(cmd[3:9])} ...")
    elapsed = time.perf_counter() - t_start
    commands = [" ".join([sys.executable, *sys.argv])]
    if args.only_p and out.exists():
        # A partial rerun replaces these p in an existing results file and keeps the others.
        old = json.loads(out.read_text())
        keep = set(args.only_p)
        records = [r for r in old.get("records", []) if r.get("p") not in keep] + records
        runs = [r for r in old.get("runs", []) if r["case"]["p"] not in keep] + runs
        commands = [*old.get("commands", [old.get("command", "")]), *commands]
        cases = [Case(**c) for c in old.get("sweep", []) if c["p"] not in keep] + cases
        elapsed += old.get("elapsed_seconds", 0.0)
    rows = summarize(records)
    doc = {
        "SIMULATION": "SimGrid SMPI: every time below is simulated, not measured on a network",
        "description": __doc__,
        "machine": machine_info(smpicxx),
        "smpi_config": SMPI_CFG,
        "build": {"cxxflags": CXXFLAGS, "sources": [str(s.relative_to(ROOT)) for s in sources()]},
        "commands": commands,
        "sweep": [c.__dict__ for c in cases],
        "platform_latency_us": PLATFORM.LATENCY_US,
        "runs": runs,
        "summary": rows,
        "records": records,
        "elapsed_seconds": round(elapsed, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out)
    if rows:
        plot(rows, png)
    print("\nSIMULATION (SimGrid SMPI) -- zccl vs best uncompressed MPI")
    print(fmt_table(rows))
    walls = [r["wall_s"] for r in runs]
    print(
        f"\n{len(runs)} smpirun runs, {failures} failed; sweep wall time {elapsed:.0f} s "
        f"(median run {statistics.median(walls) if walls else 0:.1f} s); wrote {out} and {png}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
