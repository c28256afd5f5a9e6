"""benchmarks/gpu_codec.py without a GPU: ``--dry-run`` writes both inputs and prints the
codec_compare command for each (the program itself needs a GPU; scripts/gpu_session.sh runs it).
And benchmarks/predictor_choice.py, which estimates on the CPU, from the same gradient input, the
ratio a per-chunk choice of predictor gives, beside the real (version-3) encoder that makes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_codec_dry_run_writes_inputs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_codec.py"),
        "--exe",
        "/nonexistent",
        "--out",
        str(tmp_path / "out.json"),
        "--mb",
        "1",
        "--dry-run",
        "--data-dir",
        str(data),
    ]
    # 64^3 fields (0.2 s to simulate) instead of the benchmark's 256^3 (~44 s): 1 MB is one field
    env = {**os.environ, "ZCCL_BENCH_EDGE": "64", "ZCCL_BENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["wavefield-64-0.pt"]
    n = (1 << 20) // 4
    for name in ("wavefield", "gradients"):
        values = np.fromfile(data / f"{name}-{n}.f32", dtype=np.float32)
        assert values.size == n and np.isfinite(values).all() and values.std() > 0, name
        assert f"would run: /nonexistent {data / f'{name}-{n}.f32'} {n} {name}" in done.stdout
    # The gradient model is zero-mean with layer scales over three decades.
    grads = np.fromfile(data / f"gradients-{n}.f32", dtype=np.float32)
    assert abs(float(grads.mean())) < 1e-3 and float(np.abs(grads).max()) < 1.0


def test_predictor_choice_estimates_match_the_encoder(tmp_path: Path) -> None:
    """benchmarks/predictor_choice.py on 4 MiB of the gradient input: coding noise directly is
    smaller than its Lorenzo residuals, the per-chunk choice is at least as good as either, and
    the real (version-3) encoder, which makes that choice, reaches it: its ratio is the
    estimate's, plus at most the 4 bytes per chunk a direct chunk saves on q_start."""
    out = tmp_path / "choice.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "predictor_choice.py"),
        "--mb",
        "4",
        "--data",
        "gradients",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["rel"] for r in rows] == [1e-2, 1e-3, 1e-4]
    for r in rows:
        assert r["no prediction_ratio"] > r["lorenzo_ratio"], r
        best = r["best per chunk_ratio"]
        assert best >= max(r["lorenzo_ratio"], r["no prediction_ratio"]) * (1 - 1e-12), r
        # bytes: the real stream is the estimate less up to 4 per chunk (0.1 % of slack: the
        # estimate scales whole chunks to the input and leaves out the stream header)
        real_bytes, best_bytes = r["n"] * 4 / r["real_ratio"], r["n"] * 4 / best
        chunks = -(-r["n"] // 5120)
        slack = 1e-3 * best_bytes
        assert best_bytes - 4 * chunks - slack <= real_bytes <= best_bytes + slack, r
