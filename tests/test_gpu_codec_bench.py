"""benchmarks/gpu_codec.py without a GPU: ``--dry-run`` writes both inputs and prints the
codec_compare command for each (the program itself needs a GPU; scripts/gpu_session.sh runs it).
"""

from __future__ import annotations

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
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    n = (1 << 20) // 4
    for name in ("wavefield", "gradients"):
        values = np.fromfile(data / f"{name}-{n}.f32", dtype=np.float32)
        assert values.size == n and np.isfinite(values).all() and values.std() > 0, name
        assert f"would run: /nonexistent {data / f'{name}-{n}.f32'} {n} {name}" in done.stdout
    # The gradient model is zero-mean with layer scales over three decades.
    grads = np.fromfile(data / f"gradients-{n}.f32", dtype=np.float32)
    assert abs(float(grads.mean())) < 1e-3 and float(np.abs(grads).max()) < 1.0
