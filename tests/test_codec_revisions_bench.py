"""benchmarks/codec_revisions.py end to end at 1 MiB: both revisions' codec_speed programs build
(the working tree against HEAD), run alternately, and report ratio, compress, decompress and
ring-hop speeds with every decoded value within its bound (the script asserts that itself).

The wavefield is 64^3 (``ZCCL_BENCH_EDGE``, exactly the 1 MiB asked for; 0.2 s to simulate) in a
cache under ``tmp_path``: in a clean checkout the default 256^3 field costs ~50 s of simulation
on this VM, which was most of this test's time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_codec_revisions_smoke(tmp_path: Path) -> None:
    out = tmp_path / "revisions.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "codec_revisions.py"),
        "--base",
        "HEAD",
        "--mb",
        "1",
        "--repeats",
        "1",
        "--rounds",
        "2",
        "--rels",
        "1e-3",
        "--out",
        str(out),
    ]
    env = {**os.environ, "ZCCL_BENCH_EDGE": "64", "ZCCL_BENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["threads"] == 1 and "--rounds 2" in doc["command"]
    assert doc["field_edge"] == 64
    assert [(r["data"], r["rel"]) for r in doc["rows"]] == [
        ("gradients", 1e-3),
        ("wavefield", 1e-3),
    ]
    same_codec = (
        subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "csrc/compress"], cwd=ROOT, check=False
        ).returncode
        == 0
    )
    for row in doc["rows"]:
        for which in ("base", "tree"):
            assert row[f"{which}_ratio"] > 1, row
            for speed in ("compress", "decompress", "hop"):
                assert row[f"{which}_{speed}_gbps"] > 0, (which, speed, row)
        if same_codec:  # the same sources give the same stream
            assert row["base_ratio"] == row["tree_ratio"], row
