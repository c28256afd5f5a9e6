"""Adapting torch's backend-name gates in ``distributed_test`` to the "zccl" backend.

torch decides which tests a backend runs from the literal backend name, in three ways:

1. feature sets in ``DistTestCases.backend_feature`` read while the test module is imported
   (``declare_features`` must run before that import);
2. ``skip_but_pass_in_sandcastle_if(BACKEND != "mpi", ...)`` or
   ``require_backend_is_available({"gloo"})`` decorators, which only set ``__unittest_skip__``
   on the function (``ungate`` clears it for the tests listed in ``skips.UNGATED``, checking
   torch's reason string so a torch upgrade cannot silently widen it);
3. ``skip_if_small_worldsize``, a runtime wrapper that exits unless ``BACKEND == "mpi"``
   (``strip_small_worldsize`` removes that wrapper layer: zccl takes torch's MPI path).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def declare_features(backend: str, features: Iterable[str]) -> None:
    """Adds ``backend`` to torch's ``DistTestCases.backend_feature`` sets (before the import of
    ``distributed_test``: its decorators read the sets at class-definition time)."""
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in features:
        DistTestCases.backend_feature[feature].add(backend)


def _same_reason(found: str, expected: str) -> bool:
    """Equal skip reasons; in "... to be one of {...}" the set's printed order may differ
    (string hashing is randomised per process)."""
    pattern = re.compile(r"(.*one of )(\{.*\})$")
    a, b = pattern.match(found), pattern.match(expected)
    if a and b:
        return a[1] == b[1] and ast.literal_eval(a[2]) == ast.literal_eval(b[2])
    return found == expected


def ungate(cls: type, table: Mapping[str, Any], world_size: int) -> list[str]:
    """Clears torch's skip marker on each test of ``table`` (name -> ``skips.Ungate``).

    Raises RuntimeError when a test is missing or torch skips it for another reason than the one
    recorded (the gate changed: the table must be reviewed, not applied blindly). An entry's
    ``exact_world_size`` keeps the test skipped, with torch's reason, at other world sizes.
    """
    done = []
    for name, entry in table.items():
        fn = getattr(cls, name, None)
        if fn is None:
            raise RuntimeError(f"ungate: {name} is not a test of {cls.__name__} in this torch")
        if not getattr(fn, "__unittest_skip__", False):
            continue  # torch already runs it (gate removed upstream)
        found = getattr(fn, "__unittest_skip_why__", "")
        if not _same_reason(found, entry.torch_reason):
            raise RuntimeError(
                f"ungate: torch skips {name} for {found!r}, not {entry.torch_reason!r}"
            )
        if entry.exact_world_size not in (None, world_size):
            # torch's own (inner) reason, which the outer gate's reason had overwritten
            size = entry.exact_world_size
            fn.__unittest_skip_why__ = f"Test requires an exact world size of {size:d}"
            continue
        fn.__unittest_skip__ = False
        done.append(name)
    return done


def _strip_layer(cls: type, name: str, code: Any) -> bool:
    """Removes the wrapper whose code object is ``code`` from the decorator chain of test
    ``name`` (functools.wraps chains: each wrapper has ``__wrapped__`` and a closure cell holding
    the inner function). Returns whether such a layer was found."""
    outer: Callable[..., Any] = getattr(cls, name)
    if getattr(outer, "__code__", None) is code:
        inner = outer.__wrapped__  # type: ignore[attr-defined]
        # Outer decorators (torch's skip markers) set attributes on the wrapper: keep them.
        inner.__dict__.update({k: v for k, v in outer.__dict__.items() if k != "__wrapped__"})
        setattr(cls, name, inner)
        return True
    while (inner := getattr(outer, "__wrapped__", None)) is not None:
        if getattr(inner, "__code__", None) is code:
            for cell in getattr(outer, "__closure__", None) or ():
                if cell.cell_contents is inner:
                    cell.cell_contents = inner.__wrapped__
                    return True
            raise RuntimeError(f"strip: cannot find the closure cell of {name}'s wrapper")
        outer = inner
    return False


def strip_small_worldsize(cls: type, names: Iterable[str]) -> list[str]:
    """Removes ``skip_if_small_worldsize`` from the given tests; returns the tests it was on.

    torch skips these "*_group" tests below 8 ranks for every backend but "mpi" (read from
    ``os.environ["BACKEND"]`` at run time); the MPI backend always ran them at 3 ranks.
    """
    from torch.testing._internal.common_distributed import skip_if_small_worldsize

    code = skip_if_small_worldsize(lambda: None).__code__  # the code object every wrapper shares
    return [name for name in names if _strip_layer(cls, name, code)]
