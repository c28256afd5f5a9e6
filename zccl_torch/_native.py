"""Loads the compiled extension (``zccl_torch._C``). When it cannot load, the ImportError says what
to install or rebuild instead of only the dynamic loader's words (which it keeps); and a build for
a CPU with instructions this one lacks raises an ImportError naming them before it loads, where
it would otherwise kill the process with SIGILL ("Illegal instruction"), without a message."""

from __future__ import annotations

import re
from collections.abc import Iterable

_MPI_HELP = (
    "This zccl_torch build needs Open MPI's shared library (libmpi.so.40; both the mpirun and the "
    "torchrun launch load it), and it could not be loaded. Install Open MPI's runtime: "
    "Debian/Ubuntu `apt-get install libopenmpi3` (`openmpi-bin libopenmpi-dev` to also run mpirun "
    "and build), conda `conda install -c conda-forge openmpi`; or, if it is installed in a "
    "non-standard place, add its lib directory to LD_LIBRARY_PATH. To run without Open MPI "
    "(torchrun, or mpirun on one host, over zccl's TCP transport), rebuild with ZCCL_WITH_MPI=0."
)
_TORCH_HELP = (
    "zccl_torch's extension was built against another torch than the one installed (undefined "
    "symbol): rebuild it against this torch (`pip install --no-build-isolation .`, or "
    "`scripts/setup.sh` in a checkout)."
)


def explain(error: ImportError) -> str:
    """The message of the ImportError raised when ``_C`` fails to load: what to do, then the
    loader's own text."""
    text = str(error)
    if re.search(r"libmpi\b|libmpi\.so|libopen-(pal|rte)", text):
        return f"{_MPI_HELP}\nLoader error: {text}"
    if "undefined symbol" in text:
        return f"{_TORCH_HELP}\nLoader error: {text}"
    return text


def cpu_features(cpuinfo: str) -> set[str] | None:
    """The features every processor in ``cpuinfo`` (the text of /proc/cpuinfo) has, or None when
    it lists none (not x86 Linux: nothing to compare)."""
    per_cpu = [
        set(line.split(":", 1)[1].split())
        for line in cpuinfo.splitlines()
        if line.startswith("flags") and ":" in line
    ]
    return set.intersection(*per_cpu) if per_cpu else None


def missing_features_message(march: str, built_for: Iterable[str], cpuinfo: str) -> str | None:
    """Why this CPU cannot run a build compiled with ``-march=march``, which lets the compiler
    use ``built_for`` (setup.py records both), or None when it can (or cannot tell)."""
    have = cpu_features(cpuinfo)
    if have is None:
        return None
    missing = sorted(set(built_for) - have)
    if not missing:
        return None
    return (
        f"This zccl_torch build was compiled with -march={march} for a CPU with instructions this "
        f"CPU lacks ({', '.join(missing)}); loading it would end the process with 'Illegal "
        "instruction'. Rebuild it on this machine (`pip install --no-build-isolation .`, or "
        "`scripts/setup.sh` in a checkout), or build one that runs on every CPU you use: "
        "ZCCL_MARCH=x86-64-v3 (AVX2 CPUs since 2013), x86-64-v4 (AVX-512) or none (any x86-64, "
        "slower), see README 'Limitations'."
    )


def _check_cpu() -> None:
    try:
        from zccl_torch._build_target import CPU_FEATURES, MARCH
    except ImportError:  # built without setup.py's record: nothing to compare
        return
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        return
    message = missing_features_message(MARCH, CPU_FEATURES, cpuinfo)
    if message is not None:
        raise ImportError(message)


_check_cpu()
try:
    from zccl_torch import _C
except ImportError as exc:
    raise ImportError(explain(exc)) from exc

__all__ = ["_C", "explain", "missing_features_message"]
