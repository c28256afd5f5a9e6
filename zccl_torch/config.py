"""Every knob of the zccl backend in one place: Python (``Options``, ``config()``) and ``ZCCL_*``.

Precedence: an ``Options`` passed as ``pg_options`` to ``init_process_group``/``new_group`` is
used as given; otherwise the group's options come from the ``ZCCL_*`` environment variables over
the defaults below. Inside ``with zccl_torch.config(...)``, collectives issued from that thread use
their group's options with the block's fields replaced.

==========================  =======================  ==========  ================================
field                       environment variable     default     meaning
==========================  =======================  ==========  ================================
error_bound                 ZCCL_ERROR_BOUND         1e-4        bound per compression
mode                        ZCCL_MODE                "rel"       "abs", "rel" to the value range
                                                                 agreed across ranks, or
                                                                 "lossless" (bit-exact,
                                                                 error_bound ignored; chunks
                                                                 coded with zstd)
threads                     ZCCL_THREADS             0           compressor threads (0: OpenMP
                                                                 default, OMP_NUM_THREADS)
chunk_size                  ZCCL_CHUNK_SIZE          5120        pipelined compressor chunk
min_compress_bytes          ZCCL_MIN_COMPRESS_BYTES  65536       smaller payloads go uncompressed
algorithm                   ZCCL_ALGORITHM           "auto"      auto | ring | recursive_doubling
                                                                 | mpi | cprp2p
baseline                    ZCCL_BASELINE            None        "mpi" or "cprp2p": overrides
                                                                 algorithm (benchmarks)
check_agreement             ZCCL_CHECK_AGREEMENT     True        agree first on what each
                                                                 collective is (op, reduce op,
                                                                 root, dtype, counts, settings):
                                                                 mismatch -> error on every rank
owner_exact                 ZCCL_OWNER_EXACT         False       broadcast/all_gather: the owner
                                                                 keeps exact values (outputs then
                                                                 differ across ranks)
==========================  =======================  ==========  ================================

``check_agreement``, ``owner_exact``, ``algorithm``, ``mode``, ``error_bound``, ``chunk_size`` and
``min_compress_bytes`` must be the same on every rank for each collective: with
``check_agreement`` (the default) a difference raises on every rank naming the field and ranks.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from zccl_torch import _C
from zccl_torch.compressor import MODES

ALGORITHMS = ("auto", "ring", "recursive_doubling", "mpi", "cprp2p")
BASELINES = (None, "mpi", "cprp2p")


@dataclass(frozen=True)
class Options:
    """Configuration of a zccl process group (pass as ``pg_options``) or of a ``config()`` block."""

    error_bound: float = 1e-4
    mode: str = "rel"
    threads: int = 0
    chunk_size: int = _C.DEFAULT_CHUNK_LEN
    min_compress_bytes: int = 65536
    algorithm: str = "auto"
    baseline: str | None = None
    check_agreement: bool = True
    owner_exact: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError/TypeError naming the first bad field."""
        eb = self.error_bound
        if isinstance(eb, bool) or not isinstance(eb, (int, float)):
            raise TypeError(f"error_bound must be a real number, got {eb!r}")
        if math.isnan(eb) or math.isinf(eb) or eb < 0:
            raise ValueError(f"error_bound must be finite and >= 0, got {eb}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ValueError(
                f"threads must be an int >= 0 (0 = OpenMP default), got {self.threads!r}"
            )
        block = _C.BLOCK_LEN
        cs = self.chunk_size
        if not isinstance(cs, int) or cs < block or cs > _C.MAX_CHUNK_LEN or cs % block:
            raise ValueError(
                f"chunk_size must be a multiple of {block} in [{block}, {_C.MAX_CHUNK_LEN}], "
                f"got {cs!r}"
            )
        mcb = self.min_compress_bytes
        if isinstance(mcb, bool) or not isinstance(mcb, int) or mcb < 0:
            raise ValueError(f"min_compress_bytes must be an int >= 0, got {mcb!r}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {self.baseline!r}")
        for name in ("check_agreement", "owner_exact"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def effective_algorithm(self) -> str:
        """The algorithm that runs: ``baseline`` when set, else ``algorithm``."""
        return self.baseline or self.algorithm

    def to_native(self) -> dict[str, Any]:
        """The plain dict the C++ backend reads."""
        return {
            "error_bound": float(self.error_bound),
            "mode": self.mode,
            "threads": self.threads,
            "chunk_size": self.chunk_size,
            "min_compress_bytes": self.min_compress_bytes,
            "algorithm": self.effective_algorithm,
            "check_agreement": self.check_agreement,
            "owner_exact": self.owner_exact,
        }

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Options:
        """Defaults overridden by ``ZCCL_*`` environment variables (invalid values raise)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"ZCCL_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            values[f.name] = _parse_env(f.name, raw)
        return cls(**values)


def _parse_env(name: str, raw: str) -> Any:
    try:
        if name == "error_bound":
            return float(raw)
        if name in ("threads", "chunk_size", "min_compress_bytes"):
            return int(raw)
        if name in ("check_agreement", "owner_exact"):
            lowered = raw.strip().lower()
            if lowered not in ("0", "1", "true", "false", "yes", "no"):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes")
        if name == "baseline":
            return None if raw.strip().lower() in ("none", "") else raw.strip().lower()
        return raw.strip().lower()
    except ValueError as exc:
        raise ValueError(f"ZCCL_{name.upper()}={raw!r} is not a valid {name}") from exc


_local = threading.local()
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


def _changes() -> list[dict[str, Any]]:
    """This thread's stack of config() blocks, each the merged field changes in effect."""
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_options(group: Any = None) -> Options:
    """The configuration collectives issued from this thread on ``group`` use now: the group's
    options with the enclosing ``config()`` blocks' changes laid over them."""
    base = group_options(group)
    stack = _changes()
    return replace(base, **stack[-1]) if stack else base


@contextlib.contextmanager
def config(options: Options | None = None, **changes: Any) -> Iterator[Options]:
    """Changes the configuration of zccl collectives issued from this thread inside the block.

    ``with zccl_torch.config(error_bound=1e-3, mode="abs"): dist.all_reduce(t)``: the given fields
    replace the process group's own (its ``pg_options``, or the environment defaults) for every
    zccl group; the other fields stay the group's. Passing ``options`` replaces every field.
    Blocks nest, inner changes over outer ones. Yields the effective ``Options`` of the default
    group (or of the environment defaults when no group exists).
    """
    stack = _changes()
    merged: dict[str, Any] = dict(stack[-1]) if stack else {}
    if options is not None:
        merged = {f.name: getattr(options, f.name) for f in fields(Options)}
    merged.update(changes)
    if "algorithm" in changes and "baseline" not in changes:
        merged["baseline"] = None  # an explicit algorithm wins over an inherited baseline
    effective = replace(group_options(), **merged)  # validates every changed field
    native = effective.to_native()
    keys = {"baseline": "algorithm"}
    stack.append(merged)
    _C.set_call_override({keys.get(k, k): native[keys.get(k, k)] for k in merged})
    try:
        yield effective
    finally:
        stack.pop()
        if stack:
            outer = replace(group_options(), **stack[-1]).to_native()
            _C.set_call_override({keys.get(k, k): outer[keys.get(k, k)] for k in stack[-1]})
        else:
            _C.set_call_override(None)
