"""Runs torch's distributed suite on "zccl" under mpirun, in batches, and merges the outcomes.

    python tests/torch_suite/driver.py --np 3 4 --config default exact --out /tmp/torch_suite

For each (rank count, config) it launches ``run_suite.py`` on every rank. A job ends early when
a test hangs (the rank watchdog records "timeout" and exits), crashes, or, with isolation (the
default), fails: the next job resumes after that test, so a hang or a broken communicator costs
one test, not the run. Results: ``<out>/np<N>-<config>/summary.json`` (per test: merged status
and every rank's outcome) and ``rank<r>.json`` (one rank's outcomes); each job's files are kept
under ``attempt<k>/`` (rank logs, mpirun output). Exit status 1 when any test failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: make the `tests` package importable
    sys.path.insert(0, str(ROOT))

from tests.mpi_launch import mpirun, python_argv  # noqa: E402
from tests.torch_suite.oob import read_json, write_json  # noqa: E402

SCRIPT = "tests/torch_suite/run_suite.py"
BAD = ("failed", "timeout", "crashed")
Launch = Callable[[int, list[str], float], Any]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def _job_argv(
    config: str,
    adir: Path,
    batch: Sequence[str] | None,
    keywords: Sequence[str],
    timeout: float,
    pg_timeout: float,
    isolate: bool,
) -> list[str]:
    """run_suite.py's command line for one job (``batch``: exact names, else the keywords)."""
    argv = python_argv(
        SCRIPT,
        "--config",
        config,
        "--out",
        str(adir),
        "--log",
        "--timeout",
        str(timeout),
        "--pg-timeout",
        str(pg_timeout),
    )
    if isolate:
        argv.append("--stop-after-failure")
    if batch is None:
        for k in keywords:
            argv += ["-k", k]
    else:
        (adir / "tests.txt").write_text("\n".join(batch) + "\n")
        argv += ["--tests-file", str(adir / "tests.txt")]
    return argv


def run_config(
    nprocs: int,
    config: str,
    out: Path,
    *,
    keywords: Sequence[str] = (),
    tests: Sequence[str] | None = None,
    timeout: float = 180.0,
    pg_timeout: float = 60.0,
    job_timeout: float = 7200.0,
    isolate: bool = True,
    launch: Launch = mpirun,
) -> dict[str, Any]:
    """Runs the selected tests (``tests`` exact names, else ``keywords`` substrings, else all)
    on ``nprocs`` ranks in ``config``; returns (and writes) the merged summary. ``timeout``: the
    per-test watchdog; ``pg_timeout``: the process group's (keep it below the watchdog so a
    collective waiting on a failed peer raises in the test instead of ending the job)."""
    out.mkdir(parents=True, exist_ok=True)
    per_rank: list[dict[str, Any]] = [{} for _ in range(nprocs)]
    # The ranks decide the order (unittest's); the first job's reports give it to the driver.
    order: list[str] | None = None
    batch: list[str] | None = None
    notes: list[str] = []
    start = time.monotonic()
    for attempt in range(10_000):
        adir = out / f"attempt{attempt}"
        adir.mkdir(parents=True, exist_ok=True)
        argv = _job_argv(
            config, adir, batch if order else tests, keywords, timeout, pg_timeout, isolate
        )
        try:
            done = launch(nprocs, argv, job_timeout)
            log = f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
        except AssertionError as exc:  # mpi_launch.mpirun: past job_timeout, the job was killed
            log = f"job killed after {job_timeout} s\n{exc}"
        (adir / "mpirun.log").write_text(log)
        reports = [read_json(adir / f"rank{r}.json") for r in range(nprocs)]
        if order is None:
            order = next((rep["selected"] for rep in reports if rep and rep["selected"]), None)
            batch = order
        if batch is None or not any(rep and (rep["results"] or rep["running"]) for rep in reports):
            notes.append(_startup_failure(adir, reports, log))
            break
        reached = _merge(batch, reports, per_rank, adir)
        n_done = len(order) - len(batch) + reached + 1
        print(
            f"[{out.name}] job {attempt}: {n_done}/{len(order)} tests have an outcome", flush=True
        )
        if all(rep and rep["state"] == "finished" for rep in reports) or reached + 1 >= len(batch):
            break
        if reports[0] and reports[0]["state"] != "stopped_after_failure":
            noticed = [ln for ln in log.splitlines() if "mpirun noticed" in ln]
            notes.append(
                f"attempt{attempt}: job ended in {batch[reached]} "
                f"(rank states {[rep and rep['state'] for rep in reports]}) "
                + " ".join(noticed[:1])
            )
        batch = batch[reached + 1 :]
    summary = _summarize(nprocs, config, order or [], per_rank, notes, time.monotonic() - start)
    write_json(out / "summary.json", summary)
    for r, results in enumerate(per_rank):
        write_json(
            out / f"rank{r}.json",
            {"rank": r, "world_size": nprocs, "config": config, "results": results},
        )
    return summary


def _startup_failure(adir: Path, reports: list[Any], log: str) -> str:
    """Why a job ran no test at all (the run stops: nothing would progress)."""
    errors = [rep.get("startup_error") for rep in reports if rep and rep.get("startup_error")]
    detail = errors[0] if errors else _tail(adir / "rank0.log") or log[-3000:]
    return f"{adir.name}: no test started; run stopped.\n{detail}"


def _merge(batch: list[str], reports: list[Any], per_rank: list[dict[str, Any]], adir: Path) -> int:
    """Adds one job's outcomes to ``per_rank``; a rank that left the test the job ended in
    without an outcome is "crashed" (its log tail attached). Returns that test's index."""
    reached = -1
    for rep in reports:
        if rep:
            seen = [*rep["results"], *([rep["running"]] if rep["running"] else [])]
            reached = max([reached, *(batch.index(n) for n in seen)])
    for r, rep in enumerate(reports):
        results = rep["results"] if rep else {}
        per_rank[r].update(results)
        if batch[reached] not in results:
            per_rank[r][batch[reached]] = {
                "status": "crashed",
                "seconds": None,
                "error": "no outcome: the job ended while this rank ran the test "
                "(it died, or mpirun killed it after another rank exited)",
                "traceback": _tail(adir / f"rank{r}.log", 40),
            }
    return reached


def merged_status(outcomes: list[dict[str, Any]]) -> str:
    """One status for a test from its ranks' outcomes: failed if any rank failed."""
    statuses = [o["status"] for o in outcomes]
    if any(s in BAD for s in statuses):
        return "failed"
    if all(s == "skipped" for s in statuses):
        return "skipped"
    return "passed"


def _summarize(
    nprocs: int,
    config: str,
    order: list[str],
    per_rank: list[dict[str, Any]],
    notes: list[str],
    wall_s: float,
) -> dict[str, Any]:
    tests: dict[str, Any] = {}
    for name in order:
        outcomes = [per_rank[r].get(name, {"status": "not run"}) for r in range(nprocs)]
        status = (
            merged_status(outcomes)
            if all(o["status"] != "not run" for o in outcomes)
            else "not run"
        )
        tests[name] = {"status": status, "ranks": outcomes}
    counts = {
        s: sum(t["status"] == s for t in tests.values())
        for s in ("passed", "failed", "skipped", "not run")
    }
    return {
        "np": nprocs,
        "config": config,
        "wall_s": round(wall_s, 1),
        "counts": counts,
        "notes": notes,
        "tests": tests,
    }


def failure_lines(summary: dict[str, Any]) -> list[str]:
    """Human-readable lines for each failed test: every distinct (status, error) with ranks."""
    lines = []
    for name, test in summary["tests"].items():
        if test["status"] not in ("failed", "not run"):
            continue
        lines.append(f"  {name}")
        seen: dict[str, list[int]] = {}
        for r, o in enumerate(test["ranks"]):
            if o["status"] in BAD or o["status"] == "not run":
                first = (o.get("error") or "").strip().splitlines()[:1] or [""]
                seen.setdefault(f"{o['status']}: {first[0][:220]}", []).append(r)
        lines += [f"      ranks {ranks}: {what}" for what, ranks in seen.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Runs every (rank count, config) pair; prints the table; 1 if any test failed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, nargs="+", default=[3])
    p.add_argument(
        "--config", nargs="+", default=["default"], choices=["default", "exact", "compressed"]
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("-k", dest="keywords", action="append", default=[])
    p.add_argument("--tests", help="comma-separated exact test names")
    p.add_argument("--subset", action="store_true", help="the pytest subset (subset.py)")
    p.add_argument("--timeout", type=float, default=180.0, help="per-test watchdog, seconds")
    p.add_argument("--pg-timeout", type=float, default=60.0, help="process group timeout, s")
    p.add_argument("--job-timeout", type=float, default=7200.0, help="one mpirun job, seconds")
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="keep going in the same job after a failure (faster, less trustworthy)",
    )
    args = p.parse_args(argv)
    tests = args.tests.split(",") if args.tests else None
    if args.subset:
        from tests.torch_suite.subset import SUBSET

        tests = list(SUBSET)
    rows, any_bad = [], False
    for nprocs in args.np:
        for config in args.config:
            s = run_config(
                nprocs,
                config,
                args.out / f"np{nprocs}-{config}",
                keywords=args.keywords,
                tests=tests,
                timeout=args.timeout,
                pg_timeout=args.pg_timeout,
                job_timeout=args.job_timeout,
                isolate=not args.no_isolate,
            )
            c = s["counts"]
            rows.append(
                f"{nprocs:>5}  {config:<8} {c['passed']:>6} {c['failed']:>6} "
                f"{c['skipped']:>7} {c['not run']:>7} {s['wall_s']:>8.0f}"
            )
            print(f"\n== np={nprocs} config={config}: {c}", flush=True)
            print("\n".join(failure_lines(s) + s["notes"]), flush=True)
            any_bad |= bool(c["failed"] or c["not run"] or not s["tests"])
    print("\n   np  config   passed failed skipped not-run   wall_s")
    print("\n".join(rows))
    return 1 if any_bad else 0


if __name__ == "__main__":
    sys.exit(main())
