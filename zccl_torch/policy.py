"""Error-bound policies: turn an accuracy intent into the absolute bound of each compressed call.

A policy decides, per collective call, the configuration the zccl backend uses (a
:class:`Decision`: exact, or a bound ``error_bound`` in ``mode`` "abs"/"rel", optionally a pinned
algorithm). Leaf policies:

* :class:`Absolute` ``(eb)``: every compression uses ``eb``.
* :class:`Relative` ``(rel)``: ``rel * (max - min)`` of the values across all ranks (the backend's
  ``mode="rel"``; the bound actually used is in ``zccl_torch.last_stats()["error_bound"]``).
* :class:`NormRelative` ``(rel, norm="rms"|"l2")``: ``rel * norm(tensor)``, the norm agreed across
  ranks (maximum) by one tiny exact all_reduce. Meant for gradients.
* :class:`EndToEnd` ``(target, statistical=False, algorithm=None)``: a bound on the collective's
  OUTPUT. The per-compression bound is ``target / F`` where
  ``F = _C.output_error_bound(alg, op, p, 1.0, allreduce)`` is the documented worst-case error
  growth of the algorithm that runs (for ``"auto"`` the maximum over ring and recursive doubling),
  so ``|out - exact| <= target`` in exact arithmetic (float rounding of the reduction comes on
  top, as for uncompressed MPI). ``statistical=True`` divides by ``sqrt(k)`` instead (``k`` the
  number of compression errors that can add up in one output value; for AVG ``sqrt(k) / p``):
  for independent, zero-mean errors the output error then stays within ``target`` with high
  probability, but this is NOT a guarantee.
* :class:`Exact`: no compression (``algorithm="mpi"``, bit-exact like MPI).

:class:`Rules` wraps a policy with exemptions and overrides (by parameter name, fnmatch
patterns), see its docstring.

Where a policy applies, highest precedence first: the ``policy=`` argument of the wrappers below
(:func:`all_reduce`, :func:`reduce_scatter_single`, :func:`all_gather`, :func:`all_gather_single`,
:func:`broadcast`);
the innermost ``with use_policy(p):`` block of the calling thread; the group's default set by
:func:`set_policy`. With none of these the call runs with the backend configuration as is.

The policy's decision replaces ``error_bound``, ``mode`` and (when pinned) ``algorithm`` of the
configuration in effect for the thread (``zccl_torch.current_options()``, i.e. the enclosing
``zccl_torch.config`` block or the ``ZCCL_*`` environment), like ``zccl_torch.config`` does; note
that, like ``zccl_torch.config``, this does not read the group's ``pg_options``.

Every wrapped call is logged at DEBUG on the ``"zccl_torch.policy"`` logger; :func:`last_stats`
returns the backend's statistics together with the decision of the thread's last wrapped call.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import math
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist

from zccl_torch import _torch_names
from zccl_torch._native import _C
from zccl_torch.config import ALGORITHMS, Options, config, current_options

logger = logging.getLogger("zccl_torch.policy")

__all__ = [
    "Absolute",
    "CallContext",
    "Decision",
    "EndToEnd",
    "Exact",
    "NormRelative",
    "Policy",
    "Relative",
    "Rules",
    "all_gather",
    "all_gather_single",
    "all_reduce",
    "broadcast",
    "check_zccl_group",
    "current_policy",
    "effective_error_bound",
    "get_policy",
    "last_decision",
    "last_stats",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "set_policy",
    "use_policy",
]


_OP_NAMES = {
    dist.ReduceOp.SUM: "sum",
    # A sum of premultiplied inputs: the SUM's error growth (EndToEnd divides by it).
    dist.ReduceOp.PREMUL_SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
}
_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def _check_bound(value: Any, what: str, *, positive: bool = False) -> float:
    """A finite real >= 0 (> 0 with ``positive``), else ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a real number, got {value!r}")
    v = float(value)
    if math.isnan(v) or math.isinf(v) or v < 0 or (positive and v == 0):
        need = "> 0" if positive else ">= 0"
        raise ValueError(f"{what} must be finite and {need}, got {value!r}")
    return v


def op_name(op: Any) -> str:
    """``"sum"``/``"avg"``/``"min"``/``"max"`` for those ReduceOps (PREMUL_SUM counts as
    ``"sum"``) or strings, else "other"."""
    if isinstance(op, str):
        return op.lower() if op.lower() in ("sum", "avg", "min", "max") else "other"
    for key, name in _OP_NAMES.items():
        try:
            if op == key:
                return name
        except TypeError:  # pragma: no cover - exotic ReduceOp objects
            continue
    return "other"


@dataclass(frozen=True)
class CallContext:
    """What a policy knows about the call it decides for."""

    collective: str = "all_reduce"
    op: str = "sum"
    world_size: int = 1
    algorithm: str = "auto"  # effective algorithm of the configuration the call starts from
    name: str | None = None  # parameter name, when the tensor is (a slice of) a named parameter
    numel: int = 0
    param_ndim: int | None = None  # ndim of the parameter, when known (the hook knows it)
    absolute: bool = False  # the caller needs an absolute bound (no backend "rel" mode)


@dataclass(frozen=True)
class Decision:
    """One call: exact, or ``error_bound`` in ``mode``, with an optional pinned algorithm."""

    exact: bool = False
    error_bound: float = 0.0
    mode: str = "abs"
    algorithm: str | None = None

    def changes(self) -> dict[str, Any]:
        """The configuration fields this decision sets (for ``zccl_torch.config(**changes)``);
        the group's other options stay in force."""
        if self.exact:
            return {"algorithm": "mpi", "baseline": None}
        changes: dict[str, Any] = {"error_bound": self.error_bound, "mode": self.mode}
        if self.algorithm is not None:
            changes.update(algorithm=self.algorithm, baseline=None)
        return changes

    def options(self, base: Options | None = None) -> Options:
        """``base`` (default: the thread's current options) with this decision applied."""
        return replace(current_options() if base is None else base, **self.changes())


EXACT = Decision(exact=True)


class Policy:
    """Base class. A policy maps (tensor, call context, agreed statistics) to a :class:`Decision`.

    Subclasses implement :meth:`decide`; policies that need a value agreed across ranks return
    it from :meth:`stats` (the callers take the MAX across ranks, by one exact all_reduce).
    """

    def select(self, name: str | None, numel: int, param_ndim: int | None) -> Policy:
        """The leaf policy for a tensor (``Rules`` resolve exemptions/overrides here)."""
        return self

    def stats(self, tensor: torch.Tensor, ctx: CallContext) -> tuple[float, ...]:
        """Local statistics to agree on across ranks (MAX); empty when none are needed."""
        return ()

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        """The decision, given the agreed statistics."""
        raise NotImplementedError

    @property
    def needs_names(self) -> bool:
        """Whether parameter names change the decision (name-pattern rules)."""
        return False


@dataclass(frozen=True)
class Exact(Policy):
    """No compression: the call goes through MPI unchanged (bit-exact)."""

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        return EXACT


@dataclass(frozen=True)
class Absolute(Policy):
    """Absolute bound ``eb`` per compression (``eb=0``: lossless)."""

    eb: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "eb", _check_bound(self.eb, "Absolute.eb"))

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        return Decision(error_bound=self.eb)


def _finite_range(tensor: torch.Tensor) -> tuple[float, float]:
    t = tensor.detach().reshape(-1)
    if t.dtype not in (torch.float32, torch.float64):
        t = t.double()
    lo, hi, any_finite = _C.finite_range(t, 0)
    return (float(lo), float(hi)) if any_finite else (0.0, 0.0)


@dataclass(frozen=True)
class Relative(Policy):
    """``rel * (max - min)`` over the finite values of all ranks (the backend's ``mode="rel"``).

    Called with ``ctx.absolute`` (the DDP hook), the range is agreed here and the decision is
    absolute.
    """

    rel: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rel", _check_bound(self.rel, "Relative.rel"))

    def stats(self, tensor: torch.Tensor, ctx: CallContext) -> tuple[float, ...]:
        if not ctx.absolute:
            return ()
        lo, hi = _finite_range(tensor)
        return (hi, -lo)

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        if not stats:
            return Decision(error_bound=self.rel, mode="rel")
        eb = self.rel * (stats[0] + stats[1])
        return Decision(error_bound=eb) if math.isfinite(eb) and eb >= 0 else EXACT


@dataclass(frozen=True)
class NormRelative(Policy):
    """``rel * norm(tensor)``, the norm agreed across ranks (MAX), for gradients.

    ``norm="rms"``: ``sqrt(mean(x^2))`` (a typical magnitude, independent of the size);
    ``norm="l2"``: ``sqrt(sum(x^2))``. Non-finite values (a diverged step) make the call exact.
    """

    rel: float
    norm: str = "rms"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rel", _check_bound(self.rel, "NormRelative.rel"))
        if self.norm not in ("rms", "l2"):
            raise ValueError(f"NormRelative.norm must be 'rms' or 'l2', got {self.norm!r}")

    def stats(self, tensor: torch.Tensor, ctx: CallContext) -> tuple[float, ...]:
        t = tensor.detach().reshape(-1)
        if t.numel() == 0:
            return (0.0,)
        # In the tensor's own precision (a float64 copy of a large gradient bucket costs more
        # than compressing it); only an overflowing float32 norm is redone in float64. The
        # statistic only picks the bound (every rank then takes the agreed MAX), so float32
        # accumulation error does not weaken any guarantee.
        l2 = float(torch.linalg.vector_norm(t))
        if not math.isfinite(l2):
            l2 = float(torch.linalg.vector_norm(t.double()))
        return (l2 / math.sqrt(t.numel()) if self.norm == "rms" else l2,)

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        eb = self.rel * stats[0] if stats else float("nan")
        return Decision(error_bound=eb) if math.isfinite(eb) else EXACT


def hop_factor(algorithm: str, collective: str, op: str, p: int, *, statistical: bool) -> float:
    """Output error per unit per-compression bound (0 when nothing is compressed)."""
    if collective not in ("all_reduce", "reduce_scatter") or op not in ("sum", "avg", "min", "max"):
        return 1.0
    if algorithm == "auto":
        algs = (
            ["ring", "recursive_doubling", "halving_doubling"]
            if collective == "all_reduce"
            else ["ring"]
        )
    elif collective == "reduce_scatter" and algorithm in ("recursive_doubling", "halving_doubling"):
        algs = ["ring"]  # the backend's only compressed reduce-scatter is the ring
    else:
        algs = [algorithm]
    allreduce = collective == "all_reduce"

    def factor(alg: str) -> float:
        if not statistical or op in ("min", "max"):
            return float(_C.output_error_bound(alg, op, p, 1.0, allreduce))
        k = float(_C.output_error_bound(alg, "sum", p, 1.0, allreduce))
        return math.sqrt(k) / p if op == "avg" else math.sqrt(k)

    return max(factor(a) for a in algs)


@dataclass(frozen=True)
class EndToEnd(Policy):
    """A bound ``target`` on the collective's output: per-compression ``eb = target / F``.

    ``F`` is the worst-case error growth of the algorithm that runs (``algorithm`` pins it;
    otherwise the configuration's, with ``"auto"`` taken as the max over ring and recursive
    doubling). ``statistical=True``: divide by ``sqrt`` of the number of compression errors an
    output value can accumulate instead: holds with high probability for independent errors,
    not guaranteed.
    """

    target: float
    statistical: bool = False
    algorithm: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", _check_bound(self.target, "EndToEnd.target"))
        if self.algorithm is not None and self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"EndToEnd.algorithm must be None or one of {ALGORITHMS}, got {self.algorithm!r}"
            )

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        alg = self.algorithm or ctx.algorithm
        f = hop_factor(alg, ctx.collective, ctx.op, ctx.world_size, statistical=self.statistical)
        if f <= 0:  # nothing compressed (p == 1 or MPI): any bound is honoured
            return Decision(error_bound=self.target, algorithm=self.algorithm)
        return Decision(error_bound=self.target / f, algorithm=self.algorithm)


def _as_patterns(value: str | Iterable[str], what: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise ValueError(f"{what} must be non-empty fnmatch pattern strings, got {item!r}")
    return items


@dataclass(frozen=True)
class Rules(Policy):
    """Exemptions and per-name overrides around a ``default`` policy.

    For a tensor named ``name`` (a parameter name such as ``"layer1.0.weight"``; without a name
    only the size rule applies), first match wins:

    1. ``exempt``: fnmatch patterns -> exact;
    2. ``overrides``: ``{pattern: policy}`` (or pairs), in order -> that policy (itself resolved
       if it is a ``Rules``);
    3. ``exact_1d`` and the tensor is a 1-D parameter (biases, norm weights) -> exact (applies
       only when the parameter's shape is known: the DDP hook, or a wrapper call with ``name``);
    4. fewer than ``min_numel`` elements -> exact;
    5. ``default``.
    """

    default: Policy
    min_numel: int = 0
    exact_1d: bool = True
    exempt: tuple[str, ...] = ()
    overrides: tuple[tuple[str, Policy], ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.default, Policy):
            raise ValueError(f"Rules.default must be a Policy, got {self.default!r}")
        mn = self.min_numel
        if isinstance(mn, bool) or not isinstance(mn, int) or mn < 0:
            raise ValueError(f"Rules.min_numel must be an int >= 0, got {mn!r}")
        object.__setattr__(self, "exempt", _as_patterns(self.exempt, "Rules.exempt"))
        raw = self.overrides
        pairs = tuple(raw.items()) if isinstance(raw, Mapping) else tuple(raw)
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError(f"Rules.overrides must map pattern -> Policy, got {pair!r}")
            _as_patterns(pair[0], "Rules.overrides keys")
            if not isinstance(pair[1], Policy):
                raise ValueError(f"Rules.overrides[{pair[0]!r}] must be a Policy, got {pair[1]!r}")
        object.__setattr__(self, "overrides", pairs)

    def __hash__(self) -> int:
        return hash((self.default, self.min_numel, self.exact_1d, self.exempt, self.overrides))

    @property
    def needs_names(self) -> bool:
        return bool(self.exempt or self.overrides) or self.default.needs_names

    def select(self, name: str | None, numel: int, param_ndim: int | None) -> Policy:
        if name is not None:
            if any(fnmatch.fnmatchcase(name, pat) for pat in self.exempt):
                return Exact()
            for pat, pol in self.overrides:
                if fnmatch.fnmatchcase(name, pat):
                    return pol.select(name, numel, param_ndim)
        if self.exact_1d and param_ndim is not None and param_ndim <= 1:
            return Exact()
        if numel < self.min_numel:
            return Exact()
        return self.default.select(name, numel, param_ndim)

    def decide(self, ctx: CallContext, stats: tuple[float, ...]) -> Decision:
        # Normally callers select() first; deciding directly resolves with the context's facts.
        return self.select(ctx.name, ctx.numel, ctx.param_ndim).decide(ctx, stats)

    def stats(self, tensor: torch.Tensor, ctx: CallContext) -> tuple[float, ...]:
        return self.select(ctx.name, ctx.numel, ctx.param_ndim).stats(tensor, ctx)


# ----------------------------------------------------------------------------------------------
# Where a policy applies: per call > use_policy() (thread) > group default.

_DEFAULT_GROUP_KEY = "__default__"
_group_policies: dict[Any, Policy] = {}
_lock = threading.Lock()
_local = threading.local()


def _group_key(group: Any) -> Any:
    return _DEFAULT_GROUP_KEY if group is None or group is dist.group.WORLD else group


def _check_policy(policy: Any, what: str = "policy") -> None:
    if policy is not None and not isinstance(policy, Policy):
        raise ValueError(f"{what} must be a zccl_torch.policy.Policy or None, got {policy!r}")


def set_policy(policy: Policy | None, group: Any = None) -> None:
    """Sets (``None``: clears) the default policy of ``group`` (None: the default group)."""
    _check_policy(policy)
    with _lock:
        if policy is None:
            _group_policies.pop(_group_key(group), None)
        else:
            _group_policies[_group_key(group)] = policy


def get_policy(group: Any = None) -> Policy | None:
    """The default policy of ``group`` set by :func:`set_policy`, or None."""
    with _lock:
        return _group_policies.get(_group_key(group))


def _policy_stack() -> list[Policy]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    stack: list[Policy] = _local.stack
    return stack


@contextlib.contextmanager
def use_policy(policy: Policy) -> Iterator[Policy]:
    """Policy for wrapped calls issued from this thread inside the block (nestable).

    The DDP hook reads it too, when its state names no policy, but only where the hook runs on
    this thread: around ``loss.backward()`` on CPU, not on CUDA (autograd's device thread runs
    the hook there); use ``ZcclHookState(policy=...)`` or :func:`set_policy` for DDP.
    """
    _check_policy(policy)
    if policy is None:
        raise ValueError("use_policy needs a Policy, got None")
    stack = _policy_stack()
    stack.append(policy)
    try:
        yield policy
    finally:
        stack.pop()


def current_policy(group: Any = None, policy: Policy | None = None) -> Policy | None:
    """The policy a call on ``group`` uses: ``policy``, else the innermost ``use_policy`` block,
    else the group default, else None."""
    _check_policy(policy)
    if policy is not None:
        return policy
    stack = _policy_stack()
    return stack[-1] if stack else get_policy(group)


def check_zccl_group(group: Any = None, *, error: type[Exception] = TypeError) -> None:
    """Raises ``error`` (TypeError by default) unless ``group`` runs on the zccl backend."""
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call init_process_group('zccl')")
    backend = dist.get_backend(group)
    if str(backend) != "zccl":
        raise error(
            f"zccl_torch policies and hooks need a process group on the 'zccl' backend, "
            f"this group runs on {backend!r} (init_process_group('zccl') / new_group(backend="
            f"'zccl'))"
        )


def _context(
    tensor: torch.Tensor,
    collective: str,
    op: Any,
    world_size: int,
    name: str | None,
    base: Options,
    *,
    param_ndim: int | None = None,
    absolute: bool = False,
) -> CallContext:
    return CallContext(
        collective=collective,
        op=op_name(op),
        world_size=world_size,
        algorithm=base.effective_algorithm,
        name=name,
        numel=tensor.numel(),
        param_ndim=param_ndim,
        absolute=absolute,
    )


def effective_error_bound(
    tensor: torch.Tensor,
    op: Any = "sum",
    group: Any = None,
    policy: Policy | None = None,
    name: str | None = None,
    collective: str = "all_reduce",
    world_size: int | None = None,
) -> float:
    """The absolute per-compression bound a wrapped call would use, without communicating.

    Statistics that the call agrees across ranks (norms, value ranges) are taken from the local
    tensor here, so for :class:`NormRelative`/:class:`Relative` this is this rank's estimate (the
    call uses the maximum / the global range). 0.0 means exact. ``world_size`` defaults to the
    group's size (needed by :class:`EndToEnd`); no process group is needed when it is given.
    """
    if collective not in _COLLECTIVES:
        raise ValueError(f"collective must be one of {_COLLECTIVES}, got {collective!r}")
    pol = current_policy(group, policy)
    if pol is None:
        base = current_options(group)
        if base.mode == "lossless":
            return 0.0
        if base.mode == "abs":
            return float(base.error_bound)
        lo, hi = _finite_range(tensor)
        return float(base.error_bound) * (hi - lo)
    if world_size is None:
        world_size = dist.get_world_size(group) if dist.is_initialized() else 1
    base = current_options(group)
    param_ndim = tensor.dim() if name is not None else None
    leaf = pol.select(name, tensor.numel(), param_ndim)
    ctx = _context(
        tensor, collective, op, world_size, name, base, param_ndim=param_ndim, absolute=True
    )
    d = leaf.decide(ctx, leaf.stats(tensor, ctx))
    return 0.0 if d.exact else float(d.error_bound)


def _agree(stats: tuple[float, ...], group: Any, src: int | None = None) -> tuple[float, ...]:
    """MAX of ``stats`` across the group (or the root's values for broadcast), exactly."""
    if not stats:
        return ()
    t = torch.tensor(stats, dtype=torch.float64)
    with config(algorithm="mpi", baseline=None):
        if src is None:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        else:
            dist.broadcast(t, src=src, group=group)
    return tuple(float(v) for v in t)


def _resolve(
    tensor: torch.Tensor,
    collective: str,
    op: Any,
    group: Any,
    policy: Policy | None,
    name: str | None,
    src: int | None = None,
) -> tuple[Policy | None, Decision | None]:
    check_zccl_group(group)
    pol = current_policy(group, policy)
    if pol is None:
        return None, None
    if not tensor.is_floating_point():
        return pol, EXACT  # integers go through MPI anyway; nothing to agree on
    base = current_options(group)
    param_ndim = tensor.dim() if name is not None else None
    leaf = pol.select(name, tensor.numel(), param_ndim)
    ctx = _context(
        tensor, collective, op, dist.get_world_size(group), name, base, param_ndim=param_ndim
    )
    decision = leaf.decide(ctx, _agree(leaf.stats(tensor, ctx), group, src))
    return leaf, decision


def _record(collective: str, name: str | None, policy: Policy | None, d: Decision | None) -> None:
    _local.last = {"collective": collective, "name": name, "policy": policy, "decision": d}
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s name=%s policy=%r decision=%r", collective, name, policy, d)


def last_decision() -> dict[str, Any] | None:
    """``{collective, name, policy, decision}`` of this thread's last wrapped call, or None."""
    return getattr(_local, "last", None)


def last_stats(group: Any = None, device: str = "cpu") -> dict[str, Any]:
    """``zccl_torch.last_stats(group, device)`` plus ``policy``/``decision``/``name`` of this
    thread's last wrapped call (the backend figures refer to its last *compressed* collective: an
    exact decision does not update them)."""
    from zccl_torch.backend import last_stats as backend_stats

    out = dict(backend_stats(group, device))
    out.update(last_decision() or {})
    return out


def _run(decision: Decision | None, fn: Any) -> Any:
    if decision is None:
        return fn()
    with config(**decision.changes()):
        return fn()


def all_reduce(
    tensor: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: Any = None,
    policy: Policy | None = None,
    name: str | None = None,
    async_op: bool = False,
) -> Any:
    """``dist.all_reduce`` under the policy in effect (see the module docstring)."""
    leaf, d = _resolve(tensor, "all_reduce", op, group, policy, name)
    _record("all_reduce", name, leaf, d)
    return _run(d, lambda: dist.all_reduce(tensor, op=op, group=group, async_op=async_op))


def reduce_scatter_single(
    output: torch.Tensor,
    input: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: Any = None,
    policy: Policy | None = None,
    name: str | None = None,
    async_op: bool = False,
) -> Any:
    """``dist.reduce_scatter_single`` under the policy in effect (statistics of ``input``).

    Also exported as :func:`reduce_scatter_tensor`, torch's name for it before 2.13.
    """
    leaf, d = _resolve(input, "reduce_scatter", op, group, policy, name)
    _record("reduce_scatter", name, leaf, d)
    return _run(
        d,
        lambda: _torch_names.reduce_scatter_single(
            output, input, op=op, group=group, async_op=async_op
        ),
    )


reduce_scatter_tensor = reduce_scatter_single


def all_gather_single(
    output: torch.Tensor,
    input: torch.Tensor,
    group: Any = None,
    policy: Policy | None = None,
    name: str | None = None,
    async_op: bool = False,
) -> Any:
    """``dist.all_gather_single`` (``all_gather_into_tensor`` before torch 2.13) under the policy
    in effect (statistics of ``input``; output bound = the per-compression eb)."""
    leaf, d = _resolve(input, "all_gather", "sum", group, policy, name)
    _record("all_gather", name, leaf, d)
    return _run(
        d, lambda: _torch_names.all_gather_single(output, input, group=group, async_op=async_op)
    )


def all_gather(
    tensor_list: list[torch.Tensor],
    tensor: torch.Tensor,
    group: Any = None,
    policy: Policy | None = None,
    name: str | None = None,
    async_op: bool = False,
) -> Any:
    """``dist.all_gather`` under the policy in effect (output bound = the per-compression eb)."""
    leaf, d = _resolve(tensor, "all_gather", "sum", group, policy, name)
    _record("all_gather", name, leaf, d)
    return _run(d, lambda: dist.all_gather(tensor_list, tensor, group=group, async_op=async_op))


def broadcast(
    tensor: torch.Tensor,
    src: int,
    group: Any = None,
    policy: Policy | None = None,
    name: str | None = None,
    async_op: bool = False,
) -> Any:
    """``dist.broadcast`` under the policy in effect (statistics of the root's tensor)."""
    leaf, d = _resolve(tensor, "broadcast", "sum", group, policy, name, src=src)
    _record("broadcast", name, leaf, d)
    return _run(d, lambda: dist.broadcast(tensor, src=src, group=group, async_op=async_op))
