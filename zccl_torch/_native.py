"""Loads the compiled extension (``zccl_torch._C``). When it cannot load, the ImportError says what
to install or rebuild instead of only the dynamic loader's words (which it keeps)."""

from __future__ import annotations

import re

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


try:
    from zccl_torch import _C
except ImportError as exc:
    raise ImportError(explain(exc)) from exc

__all__ = ["_C", "explain"]
