"""examples/ddp_train.py at --quick size on 2 ranks, under mpirun and under torchrun: three
runs, summary lines, figure, check."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.mpi_launch import ROOT, mpirun, python_argv, torchrun

RESULT = re.compile(
    r"^RESULT\s+(?P<name>\S+) final_loss=(?P<loss>\S+) rel=\S+ test_acc=(?P<acc>\S+) "
    r"step_ms=(?P<ms>\S+) bytes_per_step=(?P<bytes>\d+) .*$",
    re.MULTILINE,
)


@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
def test_ddp_train_quick(launcher: str, tmp_path: Path) -> None:
    args = ["--quick", "--no-progress", "--out", str(tmp_path)]
    if launcher == "mpirun":
        done = mpirun(2, python_argv("examples/ddp_train.py", *args), timeout=170)
    else:  # it must not launch itself again (it once started an mpirun per torchrun worker)
        done = torchrun(2, [str(ROOT / "examples" / "ddp_train.py"), *args], timeout=170)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]

    rows = {m["name"]: m for m in RESULT.finditer(done.stdout)}
    assert list(rows) == ["uncompressed", "zccl", "fp16"], done.stdout
    grad_bytes = int(re.search(r"\((\d+) gradient bytes\)", done.stdout)[1])
    # Ring all-reduce on 2 ranks: 2 * (p - 1) / p = 1x the payload per rank and step.
    assert int(rows["uncompressed"]["bytes"]) == grad_bytes
    assert int(rows["fp16"]["bytes"]) == grad_bytes // 2
    assert 0 < int(rows["zccl"]["bytes"]) < grad_bytes  # compressed after the warm-up
    for row in rows.values():
        assert 0.0 < float(row["loss"]) < math.log(10)  # below chance level: it learned
        assert 0.0 <= float(row["acc"]) <= 1.0
        assert float(row["ms"]) > 0.0
    assert "CHECK PASS: zccl final loss" in done.stdout

    png = tmp_path / "ddp_train_loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "ddp_train.json").read_text())
    assert summary["passed"] is True
    assert [run["name"] for run in summary["runs"]] == ["uncompressed", "zccl", "fp16"]
    assert all(len(run["losses"]) == summary["args"]["steps"] for run in summary["runs"])
