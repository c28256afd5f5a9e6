"""The demo and the compressor benchmark run end to end at small size and pass their own checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_compress_demo_holds_every_bound() -> None:
    done = run(["examples/compress_demo.py", "--size", "48", "--reps", "1"], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all error bounds hold" in done.stdout
    # One line per relative bound, each reporting a max error within the bound.
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("1e-")]
    assert len(rows) == 4
    assert all(float(row[4]) <= 1.0 for row in rows)


def test_compressor_benchmark_quick(tmp_path: Path) -> None:
    done = run(["benchmarks/compressor.py", "--quick", "--out", str(tmp_path)], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "compressor.json").read_text())
    assert (tmp_path / "compressor.png").stat().st_size > 0
    text = json.dumps(data)
    assert "memcpy" in text
