"""benchmarks/gpu_collectives.py end to end in its CPU mode (``--device cpu``) under mpirun.

The CUDA paths need a GPU; this runs the same program on CPU tensors at 2 ranks and 1 MB and
checks the JSON it writes: one row per (collective, contender), timed rows with their
per-iteration times, zccl rows within the documented bound, NCCL skipped with its reason.
Its wavefields are 64^3 (``ZCCL_BENCH_EDGE``, 0.2 s each, cached under ``tmp_path``): the
benchmark's 256^3 ones take ~44 s each to simulate on a fresh checkout, and 1 MB per rank is
exactly one 64^3 field.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.mpi_launch import mpirun, python_argv

COLLECTIVES = ("all_reduce", "broadcast", "scatter")
TIMED = ("zccl_gpu", "zccl_host", "gloo")


def test_gpu_collectives_cpu_mode(tmp_path: Path) -> None:
    out = tmp_path / "gpu_collectives.json"
    done = mpirun(
        2,
        python_argv(
            "benchmarks/gpu_collectives.py",
            "--device",
            "cpu",
            "--sizes-mb",
            "1",
            "--iters",
            "2",
            "--out",
            str(out),
        ),
        timeout=300,
        extra_env={"ZCCL_BENCH_EDGE": "64", "ZCCL_BENCH_CACHE": str(tmp_path / "cache")},
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and doc["device"] == "cpu" and doc["torch"]
    assert doc["data"] == "wavefield" and doc["field_edge"] == 64
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        "wavefield-64-0.pt",
        "wavefield-64-1.pt",
    ]
    rows = {(r["collective"], r["contender"]): r for r in doc["rows"]}
    expected = {(c, n) for c in COLLECTIVES for n in TIMED} | {("all_reduce", "nccl")}
    assert set(rows) == expected, sorted(rows)
    for c in COLLECTIVES:
        for name in TIMED:
            row = rows[c, name]
            assert "error" not in row, row
            assert row["size_mb"] == 1.0 and row["median_s"] > 0, row
            assert len(row["iter_times_s"]) == 2 and len(row["iter_times_per_rank_s"]) == 2
            assert row["speedup_vs_gloo"] > 0, row
            if name.startswith("zccl"):
                assert row["bound"] > 0 and row["err_over_bound"] <= 1.001, row
                assert row["wire_ratio"] > 1, row
            else:
                assert row["max_abs_error"] <= 1e-3, row  # exact up to float32 rounding
    assert rows["all_reduce", "nccl"]["error"].startswith("skipped"), rows["all_reduce", "nccl"]
    assert "median ms" in done.stdout  # rank 0's table
