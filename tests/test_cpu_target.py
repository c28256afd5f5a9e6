"""A build runs only on CPUs with the instructions its ``-march`` let the compiler use: setup.py
records them (zccl_torch/_build_target.py) and ``import zccl_torch`` on a CPU without one of them
raises an ImportError naming it, before the extension loads, instead of dying of SIGILL."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zccl_torch import _build_target
from zccl_torch._native import cpu_features, missing_features_message

ROOT = Path(__file__).resolve().parent.parent
CPUINFO = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
HERE = cpu_features(CPUINFO)

TWO_CPUS = """processor\t: 0
flags\t\t: fpu sse2 avx avx2 avx512f gfni
processor\t: 1
flags\t\t: fpu sse2 avx avx2
"""


def test_features_are_those_every_processor_has() -> None:
    assert cpu_features(TWO_CPUS) == {"fpu", "sse2", "avx", "avx2"}
    assert cpu_features("processor : 0\nFeatures : fp asimd\n") is None  # not x86: no flags line


def test_message_names_what_this_cpu_lacks() -> None:
    message = missing_features_message("native", ("avx2", "gfni", "avx512f"), TWO_CPUS)
    assert message is not None
    assert "-march=native" in message and "(avx512f, gfni)" in message, message
    assert "ZCCL_MARCH=x86-64-v3" in message and "Illegal instruction" in message
    assert missing_features_message("native", ("avx", "avx2"), TWO_CPUS) is None
    assert missing_features_message("native", ("avx512f",), "no flags here") is None


@pytest.mark.skipif(HERE is None, reason="no x86 flags in /proc/cpuinfo")
def test_this_build_records_what_the_compiler_was_allowed() -> None:
    """The record of this build: its -march, and features this CPU has (the suite built it
    here), matching what the compiler defines for that -march (AVX2 and AVX-512F among them
    where the CPU has them)."""
    march = os.environ.get("ZCCL_MARCH", "native")
    assert _build_target.MARCH == march
    assert HERE is not None and set(_build_target.CPU_FEATURES) <= HERE
    args = [] if march == "none" else [f"-march={march}"]
    compiler = os.environ.get("CXX", "c++")
    defined = subprocess.run(
        [compiler, *args, "-dM", "-E", "-x", "c++", os.devnull],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for macro, feature in (("__AVX2__", "avx2"), ("__AVX512F__", "avx512f"), ("__GFNI__", "gfni")):
        assert (re.search(rf"^#define {macro} ", defined, re.M) is not None) == (
            feature in _build_target.CPU_FEATURES
        ), (macro, feature)


@pytest.mark.skipif(HERE is None, reason="no x86 flags in /proc/cpuinfo")
def test_import_on_a_cpu_without_the_builds_instructions_raises(tmp_path: Path) -> None:
    """This package copied and its record changed to claim a real feature this CPU lacks: the
    import raises the ImportError naming it, and the extension is never loaded."""
    assert HERE is not None
    absent = next(
        f for f in ("avx512_4vnniw", "avx512_4fmaps", "avx512er", "xop", "fma4") if f not in HERE
    )
    copy = tmp_path / "zccl_torch"
    shutil.copytree(ROOT / "zccl_torch", copy, ignore=shutil.ignore_patterns("__pycache__"))
    features = (*_build_target.CPU_FEATURES, absent)
    (copy / "_build_target.py").write_text(f"MARCH = 'native'\nCPU_FEATURES = {features!r}\n")
    script = (
        "import sys\n"
        "try:\n"
        "    import zccl_torch\n"
        "except ImportError as exc:\n"
        "    print('LOADED' if 'zccl_torch._C' in sys.modules else 'NOT LOADED', exc)\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("NOT LOADED This zccl_torch build was compiled"), done.stdout
    assert f"({absent})" in done.stdout, done.stdout
