"""torch's distributed test suite (``DistributedTest._DistTestBase``) on "zccl": one rank's part.

Every rank of ``mpirun -np N`` runs this program, as in torch's old ``TestMPI`` path
(``BACKEND == "mpi"``): the process group is created once per process, at start, and every test
of ``_DistTestBase`` then runs in that group (the tests make their own subgroups). torch's
spawn path (``TestDistBackend``: a process group per test, created in fresh processes) does not
apply to a backend whose ranks are MPI processes, which exist once per job.

    mpirun -np 3 python tests/torch_suite/run_suite.py --out /tmp/suite -k all_reduce

Outcomes go to ``<out>/rank<r>.json`` after every test. Each test runs under a watchdog: past
its timeout the rank records "timeout" with the stack it hung in and exits, which ends the job
(``driver.py`` then relaunches with the tests not yet run). After each test the ranks meet in a
file barrier (never through the backend under test) that also tells every rank whether any rank
failed; with ``--stop-after-failure`` the job then ends so the next test starts on a clean job.
``ZCCL_SUITE_PKG_DIR``, when set, is put first on ``sys.path`` (to test a copy of the package).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import threading
import time
import traceback
import unittest
from datetime import timedelta
from pathlib import Path
from typing import Any

if os.environ.get("ZCCL_SUITE_PKG_DIR"):  # before any zccl_torch import
    sys.path.insert(0, os.environ["ZCCL_SUITE_PKG_DIR"])

# Sibling modules (this file runs as a script, its directory first on sys.path).
from oob import FileBarrier, write_json
from skips import FEATURES, SKIPS, UNGATED

# Environment of each configuration; every other ZCCL_* variable is removed so a config name
# means the same run everywhere. "exact" goes through the environment, not pg_options, because
# the tests' own new_group() calls pass no pg_options and must be exact too.
CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "exact": {"ZCCL_ALGORITHM": "mpi"},
    # Every floating-point payload through the compressed collectives (torch's tensors are far
    # below the default min_compress_bytes), with the lossless codec so that torch's exact
    # assertions hold; "ring" sends the reductions through the compressed ring too (with
    # "auto", lossless reductions take MPI's exact allreduce).
    "compressed": {
        "ZCCL_MODE": "lossless",
        "ZCCL_MIN_COMPRESS_BYTES": "0",
        "ZCCL_ALGORITHM": "ring",
    },
}
FAILED = ("failed", "timeout")
EXIT_STOPPED, EXIT_TIMEOUT, EXIT_STARTUP = 3, 4, 5
# torch's own per-test process-group timeouts (distributed_test.CUSTOM_PG_TIMEOUT) cannot apply:
# one group serves every test, so it gets torch's default_pg_timeout (60 s) unless told otherwise.
DEFAULT_PG_TIMEOUT_S = 60.0
# Tests that legitimately need more than --timeout (seconds). None at torch 2.13 on CPU: the
# longest passing test takes under 2 s at 4 ranks on 2 cores.
SLOW: dict[str, float] = {}


def compressed_calls(zccl_torch: Any) -> dict[str, int]:
    """Compressed calls so far on the default group, by collective ({} for a zccl_torch copy
    without total_stats)."""
    if not hasattr(zccl_torch, "total_stats"):
        return {}
    return {op: t["compressed_calls"] for op, t in zccl_torch.total_stats()["by_op"].items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command line of one rank."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="default")
    p.add_argument(
        "-k",
        dest="keywords",
        action="append",
        default=[],
        help="run tests whose name contains this substring (repeatable: any of them)",
    )
    p.add_argument(
        "--tests", action="append", default=[], help="comma-separated exact test names (repeatable)"
    )
    p.add_argument("--tests-file", help="file of exact test names, one a line")
    p.add_argument("--out", required=True, help="directory for rank<r>.json and scratch files")
    p.add_argument("--timeout", type=float, default=180.0, help="per-test watchdog, seconds")
    p.add_argument("--pg-timeout", type=float, default=DEFAULT_PG_TIMEOUT_S)
    p.add_argument(
        "--stop-after-failure",
        action="store_true",
        help="end the job after a test failed on any rank (driver resumes)",
    )
    p.add_argument("--log", action="store_true", help="this rank's output to <out>/rank<r>.log")
    p.add_argument("--list", action="store_true", help="print the selected tests and exit")
    return p.parse_args(argv)


def configure_env(config: str) -> None:
    """Sets the ZCCL_* variables of ``config`` and drops every other one."""
    for key in [k for k in os.environ if k.startswith("ZCCL_") and k != "ZCCL_SUITE_PKG_DIR"]:
        del os.environ[key]
    os.environ.update(CONFIGS[config])


def load_case_class() -> tuple[type[unittest.TestCase], dict[str, list[str]]]:
    """Imports torch's suite for BACKEND=zccl and returns the concrete TestCase class (plus
    what was un-gated). BACKEND, WORLD_SIZE and TEMP_DIR must be set: the module reads them at
    import."""
    import gates

    gates.declare_features(os.environ["BACKEND"], FEATURES)
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import TEST_SKIPS
    from torch.testing._internal.common_utils import TestCase
    from torch.testing._internal.distributed.distributed_test import DistributedTest

    base = DistributedTest._DistTestBase
    skip_codes = {s.exit_code: s.message for s in TEST_SKIPS.values()}

    class TestZccl(TestCase, base):  # type: ignore[misc,valid-type]
        """``_DistTestBase`` over the process group this program created (TestMPI style)."""

        def setUp(self) -> None:
            super().setUp()
            # MultiProcessTestCase provides these; the tests read them (DDP tests: self.rank).
            self.rank = dist.get_rank()

        @property
        def world_size(self) -> str:
            return os.environ["WORLD_SIZE"]  # a str, as in torch's TestDistBackend

        def _callTestMethod(self, method: Any) -> None:  # noqa: N802 - unittest's name
            # torch's runtime skip decorators call sys.exit(<TEST_SKIPS code>) in the spawned
            # test process; here that process is the rank, so turn the exit into a skip.
            try:
                super()._callTestMethod(method)
            except SystemExit as exc:
                if exc.code in skip_codes:
                    raise unittest.SkipTest(skip_codes[exc.code]) from None
                raise RuntimeError(f"test called sys.exit({exc.code!r})") from None

    names = unittest.TestLoader().getTestCaseNames(TestZccl)
    # Strip first: a stripped outer wrapper hands its skip attributes to the function below it.
    stripped = gates.strip_small_worldsize(TestZccl, names)
    ungated = gates.ungate(TestZccl, UNGATED, int(os.environ["WORLD_SIZE"]))
    adapted = {"ungated": ungated, "small_worldsize_stripped": stripped}
    return TestZccl, adapted


def select(names: list[str], args: argparse.Namespace) -> list[str]:
    """The tests the command line asks for, in unittest's (alphabetical) order."""
    wanted = {n.strip() for arg in args.tests for n in arg.split(",") if n.strip()}
    if args.tests_file:
        lines = Path(args.tests_file).read_text().splitlines()
        wanted |= {ln.strip() for ln in lines if ln.strip()}
    unknown = wanted - set(names)
    if unknown:
        raise SystemExit(f"unknown test names: {sorted(unknown)}")
    chosen = [n for n in names if n in wanted] if wanted else list(names)
    if args.keywords:
        chosen = [n for n in chosen if any(k in n for k in args.keywords)]
    return chosen


def exception_text(tb: str, limit: int = 2000) -> str:
    """The exception lines (type and message) at the end of a formatted traceback."""
    lines = tb.rstrip().splitlines()
    last_frame = max((i for i, ln in enumerate(lines) if ln.startswith("  File ")), default=-1)
    rest = lines[last_frame + 1 :]
    while rest and rest[0].startswith("    "):  # the source line and ^^^ markers of the frame
        rest.pop(0)
    return "\n".join(rest)[:limit]


def outcome_of(result: unittest.TestResult, seconds: float) -> dict[str, Any]:
    """One test's outcome from its unittest result."""
    out: dict[str, Any] = {"seconds": round(seconds, 2)}
    bad = [
        (k, tb)
        for k, lst in (("error", result.errors), ("failure", result.failures))
        for _, tb in lst
    ]
    if bad:
        kind, tb = bad[0]
        lines = tb.rstrip().splitlines()
        out.update(
            status="failed",
            kind=kind,
            error=exception_text(tb),
            traceback="\n".join(lines[-60:]),
            n_failures=len(bad),
        )
    elif result.unexpectedSuccesses:
        out.update(status="failed", kind="unexpected success", error="unexpected success")
    elif result.skipped:
        out.update(status="skipped", reason=str(result.skipped[0][1]))
    else:
        out.update(status="passed")
    return out


class Rank:
    """This rank's report (``<out>/rank<r>.json``, rewritten after every state change)."""

    def __init__(self, out: Path, rank: int, world: int, args: argparse.Namespace) -> None:
        self.path = out / f"rank{rank}.json"
        self.data: dict[str, Any] = {
            "rank": rank,
            "world_size": world,
            "config": args.config,
            "argv": sys.argv[1:],
            "state": "starting",
            "running": None,
            "results": {},
            "selected": [],
        }

    def save(self, **changes: Any) -> None:
        """Applies ``changes`` and rewrites the report."""
        self.data.update(changes)
        write_json(self.path, self.data)

    def record(self, name: str, outcome: dict[str, Any]) -> None:
        """Stores one test's outcome (the test is no longer running)."""
        self.data["results"][name] = outcome
        self.save(running=None)


def arm_watchdog(report: Rank, name: str, timeout: float) -> threading.Timer:
    """Past ``timeout`` s: records "timeout" with the main thread's stack and ends the rank.

    A hung collective leaves the ranks out of step, so no later test of this job could be
    trusted: exiting ends the job and the driver resumes after this test. faulthandler backs the
    Python timer up in case the hang holds the GIL."""
    main_id = threading.main_thread().ident

    def fire() -> None:
        frame = sys._current_frames().get(main_id)
        stack = "".join(traceback.format_stack(frame)) if frame else "(no main-thread frame)"
        report.record(
            name,
            {
                "status": "timeout",
                "seconds": timeout,
                "error": f"no result after {timeout:.0f} s (watchdog)",
                "traceback": "\n".join(stack.splitlines()[-40:]),
            },
        )
        report.save(state="timeout")
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(EXIT_TIMEOUT)

    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(timeout + 30, exit=True)
    return timer


def run_one(
    case_cls: type[unittest.TestCase], name: str, report: Rank, timeout: float, temp_root: Path
) -> dict[str, Any]:
    """Runs test ``name`` under the watchdog, in a fresh TEMP_DIR (torch's file barrier)."""
    from torch.testing._internal.distributed.distributed_test import Barrier

    temp = temp_root / name
    for sub in ("barrier", "test_dir"):
        (temp / sub).mkdir(parents=True, exist_ok=True)
    os.environ["TEMP_DIR"] = str(temp)
    Barrier.barrier_id = 0  # fresh directory, fresh counter (torch resets both per test too)
    result = unittest.TestResult()
    # torch's with_dist_debug_levels leaves its last level set when none was set before: harmless
    # in torch's process-per-test runs, not here (DETAIL would wrap every later new_group).
    debug_level = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
    timer = arm_watchdog(report, name, timeout)
    start = time.monotonic()
    try:
        case_cls(name).run(result)
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()
        restore_debug_level(debug_level)
    return outcome_of(result, time.monotonic() - start)


def restore_debug_level(level: str | None) -> None:
    """Puts TORCH_DISTRIBUTED_DEBUG (and c10d's level read from it) back to ``level``."""
    import torch.distributed as dist

    if level is None:
        os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
    else:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = level
    dist.set_debug_level_from_env()


def main(argv: list[str] | None = None) -> int:
    """Runs the selected tests on this rank; the exit code says how the job ended."""
    args = parse_args(argv)
    configure_env(args.config)
    import zccl_torch  # registers "zccl" and derives RANK/WORLD_SIZE/MASTER_* from Open MPI's

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("WORLD_SIZE", str(world))
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.log and not args.list:
        log = os.open(out / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
    os.environ.update(
        BACKEND="zccl",
        INIT_METHOD="env://",
        TEMP_DIR=str(out / "tmp"),
        PYTORCH_PRINT_REPRO_ON_FAILURE="0",
    )  # its hint names torch's runner
    faulthandler.enable()
    report = Rank(out, rank, world, args)
    import torch

    report.save(zccl_torch_file=zccl_torch.__file__, torch_version=torch.__version__)
    case_cls, adapted = load_case_class()
    names = select(unittest.TestLoader().getTestCaseNames(case_cls), args)
    if args.list:
        print("\n".join(names))
        return 0
    report.save(selected=names, **adapted)
    print(
        f"rank {rank}/{world}: zccl_torch from {zccl_torch.__file__}, {len(names)} tests",
        flush=True,
    )
    return run_all(case_cls, names, report, args, out)


def run_all(
    case_cls: type[unittest.TestCase],
    names: list[str],
    report: Rank,
    args: argparse.Namespace,
    out: Path,
) -> int:
    """Creates the process group once, then runs ``names`` in order."""
    import torch.distributed as dist

    rank, world = report.data["rank"], report.data["world_size"]
    try:
        dist.init_process_group(backend="zccl", timeout=timedelta(seconds=args.pg_timeout))
    except Exception:
        report.save(state="startup_error", startup_error=traceback.format_exc()[-4000:])
        return EXIT_STARTUP
    barrier = FileBarrier(out / "sync", rank, world)
    import dataclasses

    import zccl_torch

    # The configuration the default group really got (provenance of the "default"/"exact" name).
    report.save(state="running", options=dataclasses.asdict(zccl_torch.current_options()))
    before = compressed_calls(zccl_torch)  # the counts after the previous test
    for name in names:
        report.save(running=name)
        limit = SLOW.get(name, args.timeout)
        if name in SKIPS:
            outcome = {"status": "skipped", "reason": f"skips.py: {SKIPS[name]}", "seconds": 0}
        else:
            outcome = run_one(case_cls, name, report, limit, out / "tmp")
            after = compressed_calls(zccl_torch)
            # Which collectives of the default group ran compressed during the test (the
            # "compressed" config's provenance: tests/test_torch_suite.py asserts on it).
            outcome["compressed_calls"] = {
                op: n - before.get(op, 0) for op, n in after.items() if n > before.get(op, 0)
            }
            before = after
        report.record(name, outcome)
        print(f"[{rank}] {name}: {outcome['status']} ({outcome['seconds']} s)", flush=True)
        try:
            # Longer than any peer's watchdog: a hung peer ends the job before this gives up.
            notes = barrier.wait(outcome["status"], timeout_s=limit + 120)
        except TimeoutError as exc:
            report.save(state="sync_timeout", sync_error=f"after {name}: {exc}")
            os._exit(EXIT_TIMEOUT)
        if args.stop_after_failure and any(n in FAILED for n in notes):
            report.save(state="stopped_after_failure", stopped_after=name)
            # Skip MPI_Finalize: a failed test may leave a communicator in a state where it
            # blocks. Every rank has written its report (the barrier above says so).
            os._exit(EXIT_STOPPED)
    report.save(state="finished")
    faulthandler.dump_traceback_later(60, exit=True)  # a hang in teardown must not block the job
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
