"""The image-stacking example runs end to end at tiny size (--quick) and passes its bound check."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import ROOT, mpirun, python_argv

SCRIPT = "examples/image_stacking.py"


@pytest.mark.parametrize(
    ("nprocs", "extra"),
    [(2, ()), (3, ("--algorithm", "recursive_doubling"))],  # 3: the non-power-of-two fold
    ids=["np2-ring", "np3-recursive-doubling"],
)
def test_image_stacking_quick(nprocs: int, extra: tuple[str, ...], tmp_path: Path) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT, "--quick", "--out", str(tmp_path), *extra), 120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    psnr = re.search(r"PSNR\s*:\s*([0-9.]+) dB", out)
    assert psnr is not None and float(psnr.group(1)) > 40.0, out
    assert re.search(r"NRMSE\s*:\s*[0-9.]+e[-+]\d+", out), out
    ratio = re.search(r"max error : \S+ \(documented bound .* max error / bound = ([0-9.]+)\)", out)
    assert ratio is not None and float(ratio.group(1)) <= 1.0, out
    assert "bound check: passed" in out, out
    assert "chose uncompressed MPI" not in out, out  # the quick run must really compress
    assert (tmp_path / "image_stacking.png").stat().st_size > 10_000


def test_demo_pieces_partials_summary_and_forced_mpi(tmp_path: Path) -> None:
    """What scripts/demo.sh chains: a run that migrates and caches the partial images, a run with
    Open MPI's allreduce forced to ring that reuses them, and the summary of both."""
    common = ("--quick", "--out", str(tmp_path), "--partials", str(tmp_path / "partials"))
    first = mpirun(
        2, python_argv(SCRIPT, *common, "--summary", str(tmp_path / "default.json")), 120
    )
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert "migration done" in first.stdout
    # The baseline is Open MPI's own blocking MPI_Allreduce (forced coll_tuned settings reach it).
    assert "exact MPI_Allreduce" in first.stdout, first.stdout
    assert json.loads((tmp_path / "default.json").read_text())["exact_mpi_is_direct"] is True
    forced = {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",
    }
    second = mpirun(
        2,
        python_argv(SCRIPT, *common, "--summary", str(tmp_path / "forced_ring.json")),
        120,
        forced,
    )
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert "partial images loaded" in second.stdout and "migration done" not in second.stdout
    summary = subprocess.run(
        [sys.executable, "examples/demo_summary.py", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert summary.returncode == 0, summary.stdout + summary.stderr
    assert "exact MPI forced ring" in summary.stdout, summary.stdout
    assert "exact MPI Iallreduce (zccl exact)" in summary.stdout, summary.stdout
    assert re.search(r"best exact \(.+\) *: +[0-9.]+ ms +zccl is x[0-9.]+ faster", summary.stdout)
    assert "bound check: passed on every run" in summary.stdout
