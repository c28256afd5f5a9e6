"""benchmarks/gpu_ddp.py in its CPU mode (``--device cpu``, small dims, few steps) on 2 ranks:
every contender trains, its row is complete, losses are finite and the ranks' models agree.

The CUDA mode (every rank on ``cuda:0``) needs a GPU and the extension's CUDA path; this test
checks the benchmark's own plumbing (groups, hooks, byte accounting, JSON and table).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.mpi_launch import mpirun, python_argv

CONTENDERS = ["uncompressed", "fp16", "zccl", "zccl_ef"]
STEPS = 20

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="mpirun not found (scripts/setup.sh installs openmpi-bin)",
)


def test_gpu_ddp_cpu_mode(tmp_path: Path) -> None:
    out = tmp_path / "gpu_ddp.json"
    done = mpirun(
        2,
        python_argv(
            "benchmarks/gpu_ddp.py",
            "--device",
            "cpu",
            "--dims",
            "64,256,256,10",
            "--steps",
            str(STEPS),
            "--out",
            str(out),
        ),
        timeout=300,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert "final losses within 2% of uncompressed" in done.stdout, report[-4000:]

    result = json.loads(out.read_text())
    rows = {r["contender"]: r for r in result["rows"]}
    assert list(rows) == CONTENDERS and result["complete"]
    grad = rows["uncompressed"]["grad_bytes"]  # 2 ranks: the ring formula is the payload itself
    assert rows["uncompressed"]["bytes_per_step_median"] == pytest.approx(grad)
    assert rows["fp16"]["bytes_per_step_median"] == pytest.approx(grad / 2)
    for name in CONTENDERS:
        row = rows[name]
        assert name in done.stdout
        assert row["device"] == "cpu" and row["ranks"] == 2
        assert len(row["losses"]) == STEPS and row["losses_finite"]
        assert all(math.isfinite(v) for v in row["losses"]), name
        assert math.isfinite(row["final_loss"]) and math.isfinite(row["eval_loss"]), name
        assert 0.0 <= row["eval_acc"] <= 1.0
        assert row["step_ms_median"] > 0
        assert row["max_param_diff_across_ranks"] == 0.0, name  # DDP keeps replicas identical
        assert row["loss_vs_uncompressed"] is not None
        assert abs(row["loss_vs_uncompressed"]) < 0.02, name
    for name in ("zccl", "zccl_ef"):
        row = rows[name]
        # Compressed after the hook's exact warm-up, counted from the backend's own records.
        assert 0 < row["bytes_per_step_median"] < grad, name
        assert row["zccl_unmatched_payloads"] == 0 and row["zccl_lossy_payloads_all_ranks"] > 0
        assert row["lossy_payload_devices"] == ["cpu"]
        # The hook's time on the backward's thread, with its agreement exchange inside it.
        assert 0 < row["agree_ms_median"] <= row["hook_ms_median"] < row["step_ms_median"], row
