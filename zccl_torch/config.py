"""Every knob of the zccl backend: ``Options``, ``config()`` and the ``ZCCL_*`` variables.

Each setting (name, type, default, allowed values, environment variable, one line of
documentation) is defined once, in the C++ table ``csrc/backend/settings.cpp``. This module
reads it (``_C.settings()``) for the parsing of the ``ZCCL_*`` variables and ``Options``'
docstring, and the table's own validator checks every value. ``Options`` writes its fields out
for type checkers, and the import fails if they differ from the table. The list is in
``help(zccl_torch.Options)`` and README's configuration table (``markdown_table()``).

Precedence: an ``Options`` passed as ``pg_options`` to ``init_process_group``/``new_group`` is
used as given; a group created without one takes the default group's options (so the bound set
once holds on every group, also those DeviceMesh creates), and the default group, created
without one, the ``ZCCL_*`` environment variables over the defaults. Inside
``with zccl_torch.config(...)``, collectives issued from that thread use their group's options
with the block's fields replaced.

``check_agreement``, ``owner_exact``, ``integer_ring``, ``algorithm``, ``mode``, ``error_bound``,
``chunk_size`` and ``min_compress_bytes`` must be the same on every rank for each collective: with
``check_agreement`` (the default) a difference raises on every rank naming the field and ranks.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypedDict, get_type_hints

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; torch brings typing_extensions
    from typing_extensions import Unpack

from zccl_torch._native import _C

_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


@dataclass(frozen=True)
class Setting:
    """One row of the settings table (``csrc/backend/settings.cpp``), from ``_C.settings()``."""

    name: str  # the Options field
    env: str  # environment variable
    type: str  # "float", "int", "bool" or "choice"
    default: Any
    choices: tuple[str | None, ...]  # a choice's allowed values (None: may be unset)
    requirement: str  # what an allowed value is, as messages say it
    doc: str  # one line, markdown

    @property
    def annotation(self) -> Any:
        """The Python type of the field."""
        if self.type == "choice":
            return str | None if None in self.choices else str
        return {"float": float, "int": int, "bool": bool}[self.type]

    def parse_env(self, raw: str) -> Any:
        """The value of the environment variable's text ``raw`` (checked later, by Options)."""
        try:
            if self.type == "float":
                return float(raw)
            if self.type == "int":
                return int(raw)
            lowered = raw.strip().lower()
            if self.type == "bool":
                if lowered not in _TRUE + _FALSE:
                    raise ValueError(raw)
                return lowered in _TRUE
            return None if None in self.choices and lowered in ("none", "") else lowered
        except ValueError as exc:
            raise ValueError(f"{self.env}={raw!r} is not a valid {self.name}") from exc


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(**{**row, "choices": tuple(row["choices"])}) for row in _C.settings()
)
_BY_NAME = {s.name: s for s in SETTINGS}
ALGORITHMS: tuple[str, ...] = tuple(str(c) for c in _BY_NAME["algorithm"].choices)
BASELINES: tuple[str | None, ...] = _BY_NAME["baseline"].choices


def _literal(value: Any) -> str:
    """A default as README writes it: ``1e-4``, ``25``, ``"rel"``, ``true``, unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float):
        if value == 0.0 or 1.0 <= abs(value) < 1e6:
            return f"`{value:g}`"  # 0, 1, 25
        mantissa, exponent = f"{value:e}".split("e")
        return f"`{float(mantissa):g}e{int(exponent)}`"
    return f"`{value}`"


def markdown_table() -> str:
    """README's configuration table (field, environment, default, meaning), from the table."""
    lines = ["| field | environment | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{s.name}` | `{s.env}` | {_literal(s.default)} | {s.doc} |" for s in SETTINGS]
    return "\n".join(lines)


def _with_settings(cls: type) -> type:
    """Checks that ``cls`` declares exactly the table's settings, in its order, with its types
    and defaults, and gives it a docstring listing them.

    The fields are written out in ``Options`` so that type checkers and editors know them; the
    C++ table stays the one definition, and a field that differs from it (a setting added,
    renamed or given another default in C++ only) fails the import, naming it.
    """
    declared = [(name, str(kind)) for name, kind in cls.__annotations__.items()]
    wanted = [(s.name, _annotation_text(s)) for s in SETTINGS]
    differences = [f"{d} != {w}" for d, w in zip(declared, wanted, strict=False) if d != w]
    differences += [f"only in Options: {d}" for d in declared[len(wanted) :]]
    differences += [f"only in the table: {w}" for w in wanted[len(declared) :]]
    for s in SETTINGS:
        default = getattr(cls, s.name, None)
        if default != s.default or type(default) is not type(s.default):
            differences.append(f"{s.name} defaults to {default!r}, the table to {s.default!r}")
    if differences:
        raise RuntimeError(
            "zccl: Options' fields differ from the settings table (csrc/backend/settings.cpp): "
            + "; ".join(differences)
        )
    listing = "\n".join(
        f"    {s.name} ({s.type}; {s.env}; default {_literal(s.default)}): {s.doc}"
        for s in SETTINGS
    )
    cls.__doc__ = f"{cls.__doc__}\n\n    Fields:\n\n{listing}\n"
    return cls


def _annotation_text(setting: Setting) -> str:
    """The field's annotation as ``Options`` writes it (this module's annotations are text)."""
    kind = setting.annotation
    return kind.__name__ if isinstance(kind, type) else str(kind)


@dataclass(frozen=True)
@_with_settings
class Options:
    """Configuration of a zccl process group (pass as ``pg_options``) or of a ``config()`` block."""

    error_bound: float = 1e-4
    mode: str = "rel"
    threads: int = 0
    chunk_size: int = 5120
    min_compress_bytes: int = 65536
    algorithm: str = "auto"
    baseline: str | None = None
    check_agreement: bool = True
    owner_exact: bool = False
    integer_ring: bool = False
    wait: str = "auto"
    link_gbps: float = 1.0
    link_latency_us: float = 25.0
    auto_ratio: float = 5.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError/TypeError naming the first bad field."""
        _C.check_settings({f.name: getattr(self, f.name) for f in fields(self)})

    @property
    def effective_algorithm(self) -> str:
        """The algorithm that runs: ``baseline`` when set, else ``algorithm``."""
        return self.baseline or self.algorithm

    def to_native(self) -> dict[str, Any]:
        """The plain dict the C++ backend reads: every field, the baseline folded into
        ``algorithm``."""
        native = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "baseline"}
        native["algorithm"] = self.effective_algorithm
        return native

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Options:
        """Defaults overridden by ``ZCCL_*`` environment variables (invalid values raise)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for s in SETTINGS:
            raw = env.get(s.env)
            if raw is None or raw == "":
                continue
            values[s.name] = s.parse_env(raw)
        return cls(**values)


class OptionChanges(TypedDict, total=False):
    """The fields a ``config()`` block may change: any of ``Options``', with their types."""

    error_bound: float
    mode: str
    threads: int
    chunk_size: int
    min_compress_bytes: int
    algorithm: str
    baseline: str | None
    check_agreement: bool
    owner_exact: bool
    integer_ring: bool
    wait: str
    link_gbps: float
    link_latency_us: float
    auto_ratio: float


def _check_changes_match(changes: type, options: type) -> None:
    """Raises RuntimeError naming each field ``changes`` (a TypedDict) has other than
    ``options``' (a setting added to Options but not to OptionChanges, or another type)."""
    have, want = get_type_hints(changes), get_type_hints(options)
    differences = [
        f"{name}: {have.get(name, 'missing')} != {want.get(name, 'missing')}"
        for name in dict.fromkeys([*want, *have])
        if have.get(name) != want.get(name)
    ]
    if differences:
        raise RuntimeError(
            f"zccl: {changes.__name__}' fields differ from {options.__name__}': "
            + "; ".join(differences)
        )


_check_changes_match(OptionChanges, Options)

_group_options: dict[str, Options] = {}  # group name -> the Options it was created with
_group_lock = threading.Lock()


def register_group_options(group_name: str, options: Options) -> None:
    """Records a zccl group's options (the backend creator calls this)."""
    with _group_lock:
        _group_options[group_name] = options


def group_options(group: Any = None) -> Options:
    """The options ``group`` (default group when None) was created with; environment defaults
    when there is no such zccl group."""
    import torch.distributed as dist  # late: keeps this module importable without a group

    if not dist.is_available() or not dist.is_initialized():
        return Options.from_env()
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    name = dist.distributed_c10d._get_process_group_name(pg)
    with _group_lock:
        found = _group_options.get(name)
    return found if found is not None else Options.from_env()


def current_options(group: Any = None) -> Options:
    """The configuration collectives issued from this thread on ``group`` use now: the group's
    options with the enclosing ``config()`` blocks' changes laid over them."""
    base = group_options(group)
    override = _C.call_override()
    return replace(base, **override) if override else base


@contextlib.contextmanager
def config(options: Options | None = None, **changes: Unpack[OptionChanges]) -> Iterator[Options]:
    """Changes the configuration of zccl collectives issued from this thread inside the block.

    ``with zccl_torch.config(error_bound=1e-3, mode="abs"): dist.all_reduce(t)``: the given fields
    replace the process group's own (its ``pg_options``, or the environment defaults) for every
    zccl group; the other fields stay the group's. Passing ``options`` replaces every field.
    Blocks nest, inner changes over outer ones. Yields the effective ``Options`` of the default
    group (or of the environment defaults when no group exists).

    The changes in effect are held by the C++ backend only (its per-thread override, which it
    reads for each collective without the GIL); each block restores the one it found.

    Per thread means: a block around ``loss.backward()`` reaches DDP's gradient all-reduces on
    CPU (autograd runs CPU work on the calling thread) but not on CUDA, where autograd runs
    them on a device thread of its own. Configure DDP through the group's ``Options``, or its
    hook's policy (``ZcclHookState(policy=...)``, ``policy.set_policy(p, group)``), or run
    that backward on the calling thread (``torch.autograd.set_multithreading_enabled(False)``).
    """
    outer = _C.call_override()
    merged: dict[str, Any] = dict(outer) if outer else {}
    if options is not None:
        merged = {f.name: getattr(options, f.name) for f in fields(Options)}
    merged.update(changes)
    if "algorithm" in changes and "baseline" not in changes:
        merged["baseline"] = None  # an explicit algorithm wins over an inherited baseline
    effective = replace(group_options(), **merged)  # validates every changed field
    if "baseline" in merged and merged["baseline"] is None and "algorithm" not in merged:
        # The backend's groups hold the baseline folded into their algorithm: clearing it
        # names the algorithm that runs instead.
        merged["algorithm"] = effective.algorithm
    _C.set_call_override(merged)
    try:
        yield effective
    finally:
        _C.set_call_override(outer)
