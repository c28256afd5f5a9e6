"""Installing zccl_torch as users do: a wheel (``pip wheel --no-build-isolation``) installed into
another environment and imported from outside the checkout, and the error a missing Open MPI
library gives.

The wheel is built in the checkout's build tree, which the suite's setup already filled, so the
build is incremental (seconds); the fresh environment is a venv that sees the installed torch
(``--system-site-packages``), as a user's own environment with torch would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.mpi_launch import ROOT, mpirun
from tests.test_typing import expected_errors, reported_errors
from zccl_torch._native import explain

SMOKE = """
import torch, torch.distributed as dist, zccl_torch
dist.init_process_group("zccl")
t = torch.full((1 << 18,), float(dist.get_rank()))
dist.all_reduce(t)
p = dist.get_world_size()
assert abs(float(t.mean()) - p * (p - 1) / 2) < 1e-2, float(t.mean())
assert zccl_torch.last_stats()["bytes_compressed"] > 0
print(f"WHEEL OK from {zccl_torch.__file__} END", flush=True)  # one write: ranks interleave
dist.destroy_process_group()
"""


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        cwd=ROOT,
        timeout=900,
    )
    (wheel,) = wheels.glob("zccl_torch-*.whl")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    script = tmp_path / "smoke.py"
    script.write_text(SMOKE)
    env_python = [str(python), str(script)]
    done = mpirun(2, env_python, 120, {"PYTHONPATH": ""})
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-4000:]
    files = re.findall(r"WHEEL OK from (\S+) END", done.stdout)
    assert len(files) == 2, report[-4000:]
    assert all(f.startswith(str(venv / "lib")) for f in files), files
    check_types_of_installed_wheel(wheel, python, tmp_path)


def check_types_of_installed_wheel(wheel: Path, python: Path, tmp_path: Path) -> None:
    """A user's mypy sees the installed package's types (PEP 561: py.typed and the native
    module's stub travel in the wheel): the typed user code passes and each marked mistake is
    found, type-checked outside the checkout against the venv's copy."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"zccl_torch/py.typed", "zccl_torch/_C.pyi"} <= names, sorted(names)
    assert "zccl_torch/_build_target.py" in names, sorted(names)  # the CPU check's record
    typing_dir = ROOT / "tests" / "typecheck"
    for name in ("user_code.py", "misuse.py"):
        shutil.copy(typing_dir / name, tmp_path / name)
    mypy = [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python)]
    mypy += ["--no-incremental"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    # One mypy run for both files (each run spends most of its ~8 s loading torch's types).
    done = subprocess.run(
        [*mypy, "user_code.py", "misuse.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = done.stdout + done.stderr
    assert "user_code.py:" not in report, report
    misuse = tmp_path / "misuse.py"
    want = expected_errors(misuse)
    assert want and reported_errors(done.stdout, misuse) == want, report
    assert f"Found {len(want)} errors in 1 file (checked 2 source files)" in done.stdout, report


def test_import_without_the_mpi_library_says_what_to_install(tmp_path: Path) -> None:
    # A broken libmpi.so.40 first on the loader's path stands in for a missing one: the loader
    # picks it before the system's and fails (the same ImportError path as "not found").
    (tmp_path / "libmpi.so.40").write_bytes(b"")
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", "import zccl_torch"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    expected = "ImportError: This zccl_torch build needs Open MPI's shared library"
    assert expected in done.stderr, done.stderr
    assert "apt-get install libopenmpi3" in done.stderr
    assert "libmpi.so.40: file too short" in done.stderr  # the loader's own words are kept


def test_explain_names_the_cause() -> None:
    missing = ImportError("libmpi.so.40: cannot open shared object file: No such file")
    assert explain(missing).startswith("This zccl_torch build needs Open MPI's shared library")
    stale = ImportError("_C.so: undefined symbol: _ZN3c104cuda")
    assert "rebuild it against this torch" in explain(stale)
    other = ImportError("something else")
    assert explain(other) == "something else"
