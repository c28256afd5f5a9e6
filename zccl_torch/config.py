"""Every knob of the zccl backend in one place: Python (``Options``, ``config()``) and ``ZCCL_*``.

Precedence: an ``Options`` passed as ``pg_options`` to ``init_process_group``/``new_group`` is
used as given; otherwise the group's options come from the ``ZCCL_*`` environment variables over
the defaults below. Inside ``with zccl_torch.config(...)``, collectives issued from that thread use
the enclosing configuration with the given fields replaced (for every zccl group).

==========================  =======================  ==========  ================================
field                       environment variable     default     meaning
==========================  =======================  ==========  ================================
error_bound                 ZCCL_ERROR_BOUND         1e-4        bound per compression
mode                        ZCCL_MODE                "rel"       "abs", or "rel" to the value
                                                                 range agreed across ranks
threads                     ZCCL_THREADS             0           compressor threads (0: OpenMP
                                                                 default, OMP_NUM_THREADS)
chunk_size                  ZCCL_CHUNK_SIZE          5120        pipelined compressor chunk
min_compress_bytes          ZCCL_MIN_COMPRESS_BYTES  65536       smaller payloads go uncompressed
algorithm                   ZCCL_ALGORITHM           "auto"      auto | ring | recursive_doubling
                                                                 | mpi | cprp2p
baseline                    ZCCL_BASELINE            None        "mpi" or "cprp2p": overrides
                                                                 algorithm (benchmarks)
check_sizes                 ZCCL_CHECK_SIZES         True        agree on element counts first
                                                                 (mismatch -> error, not a hang)
==========================  =======================  ==========  ================================
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

ALGORITHMS = ("auto", "ring", "recursive_doubling", "mpi", "cprp2p")
BASELINES = (None, "mpi", "cprp2p")
MODES = ("abs", "rel")


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
    check_sizes: bool = True

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
            "check_sizes": bool(self.check_sizes),
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
        if name == "check_sizes":
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


def _stack() -> list[Options]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_options() -> Options:
    """The configuration collectives issued from this thread use now, outside any pg_options."""
    stack = _stack()
    return stack[-1] if stack else Options.from_env()


@contextlib.contextmanager
def config(options: Options | None = None, **changes: Any) -> Iterator[Options]:
    """Overrides the configuration of zccl collectives issued from this thread in the block.

    ``with zccl_torch.config(error_bound=1e-3, mode="abs"): dist.all_reduce(t)``. Blocks nest;
    each starts from the enclosing one (or from the environment defaults) unless ``options`` is
    given. Yields the effective ``Options``.
    """
    base = options if options is not None else current_options()
    effective = replace(base, **changes) if changes else base
    stack = _stack()
    stack.append(effective)
    _C.set_call_override(effective.to_native())
    try:
        yield effective
    finally:
        stack.pop()
        _C.set_call_override(stack[-1].to_native() if stack else None)
