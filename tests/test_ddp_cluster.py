"""benchmarks/ddp_cluster.py --smoke: every contender trains on one host without the emulated
cluster (no root, no namespaces), and the result JSON, table and figure come out complete.

The cluster run itself needs root and network namespaces (tests/test_cluster.py covers the
cluster); this test checks the benchmark's own plumbing, which runs anywhere mpirun does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTENDERS = ["mpi", "gloo", "fp16", "zccl", "zccl_tuned", "compute"]

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="mpirun not found (scripts/setup.sh installs openmpi-bin)",
)


def test_ddp_cluster_smoke(tmp_path: Path) -> None:
    out = tmp_path / "ddp.json"
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
    done = subprocess.run(
        [sys.executable, "benchmarks/ddp_cluster.py", "--smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "target zccl loss_within_2pct" in done.stdout
    assert "target zccl_tuned loss_within_2pct" in done.stdout

    result = json.loads(out.read_text())
    rows = {r["contender"]: r for r in result["rows"]}
    assert list(rows) == CONTENDERS
    assert result["loadavg_start"] and result["loadavg_end"]
    steps, warmup = result["args"]["steps"], result["args"]["warmup"]
    grad = rows["mpi"]["grad_bytes"]
    ring = 2 * 3 / 4 * grad  # 4 ranks: a ring all-reduce sends 2(p-1)/p of the payload
    assert rows["mpi"]["bytes_per_step_median"] == pytest.approx(ring)
    assert rows["gloo"]["bytes_per_step_median"] == pytest.approx(ring)
    assert rows["fp16"]["bytes_per_step_median"] == pytest.approx(ring / 2)
    for name in ("zccl", "zccl_tuned"):
        zccl = rows[name]
        # Compressed after the hook's warm-up, counted from the backend's own records.
        assert 0 < zccl["bytes_per_step_median"] < ring, name
        assert zccl["zccl_unmatched_payloads"] == 0 and zccl["compressed_buckets_all_ranks"] > 0
    # The looser bound of zccl_tuned (0.1 x RMS against 1e-3) sends fewer bytes.
    assert rows["zccl_tuned"]["bytes_per_step_median"] < rows["zccl"]["bytes_per_step_median"]
    for name in ("mpi", "gloo", "fp16", "zccl", "zccl_tuned"):
        row = rows[name]
        assert len(row["losses"]) == steps and row["timed_steps"] == steps - warmup
        assert row["weights_max_divergence"] == 0.0  # DDP keeps every rank's model identical
        assert row["step_ms_median"] > 0
    targets = result["summary"]["targets"]
    assert set(targets) == {"zccl", "zccl_tuned"}
    for checks in targets.values():
        assert set(checks) == {
            "speedup_vs_best_uncompressed",
            "speedup_vs_fp16",
            "loss_within_2pct",
        }
        assert checks["loss_within_2pct"]["met"]  # tiny run: the losses barely move apart
    assert set(result["summary"]["zccl_breakdown"]) == {"zccl", "zccl_tuned"}
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
