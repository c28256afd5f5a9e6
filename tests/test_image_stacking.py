"""The image-stacking example runs end to end at tiny size (--quick) and passes its bound check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mpi_launch import mpirun, python_argv

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
