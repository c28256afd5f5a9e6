"""DDP communication hook: gradients all-reduced through the zccl backend under an error-bound
policy, with error feedback.

Usage::

    state = ZcclHookState(policy=Rules(NormRelative(1e-3)), model=ddp_model)
    ddp_model.register_comm_hook(state, compressed_allreduce_hook)

Per bucket (flat gradient buffer ``g`` of one rank, ``p`` ranks, iteration ``t``):

1. Warm-up: for the first ``start_iter`` iterations the bucket is averaged exactly
   (``algorithm="mpi"``), like torch's PowerSGD hook does for ``start_powerSGD_iter``.
2. ``x = g * (1/p) + e`` (in float32, float64 for float64 buffers, in one pass over the bucket
   buffer; ``e`` the bucket's residual, zero without error feedback).
3. The bucket is split into slices by parameter (``bucket.parameters()`` in buffer order). Each
   parameter gets its leaf policy from ``policy.select(name, numel, ndim)`` (``Rules``: 1-D
   parameters, small ones and name patterns exact, per-name overrides); slices with the same leaf
   policy form one payload. Statistics the policies agree on (norms, ranges) are MAX-reduced
   across ranks in one exact all_reduce; each payload gets an absolute per-compression bound
   ``eb`` (or exact).
4. Error feedback: each lossy payload ``x_s`` is put on the compressor's quantisation grid with
   ``eb``: ``x'_s = Q(x_s, eb)`` (:func:`zccl_torch.quantize`: the values ``D(C(x_s, eb))``
   reconstructs, without building the stream), ``|x'_s - x_s| <= eb`` element-wise. The
   residual becomes ``e <- x - x'`` (zero on exact slices and on values kept exactly, such as
   +/-Inf) and ``x'`` is what this rank contributes. Since ``x'`` lies on
   the compressor's quantisation grid, the backend's own compression of ``x'`` and of the partial
   sums of such values is (up to float rounding) lossless, so the output is
   ``sum_r x'_r`` up to the algorithm's documented worst-case bound (which the policy, e.g.
   ``EndToEnd``, accounts for). Over ``T`` steps, ``sum_t x'_t = sum_t g_t / p + e_0 - e_T``
   per rank: the compression error does not accumulate (it stays bounded by ``eb``).
   Without error feedback ``x_s`` goes to the compressed all_reduce directly.
5. All payloads are all-reduced (SUM) asynchronously; the returned future writes the results
   back into the bucket buffer (its dtype and shape) and yields it.

A payload of several slices (e.g. two weight matrices with a bias between them) is gathered
into a staging buffer that the state keeps per bucket and payload, as is its residual: a fresh
allocation of a large buffer costs a page fault per 4 KiB on every step (measured: 13 ms to
gather 8.4M float32 into a new tensor against 1.5 ms into a reused one), more than the copy.

Residuals are kept per parameter, not per bucket: DDP rebuilds its buckets after the first
iteration (a fresh DDP, e.g. one resumed from a checkpoint, starts again from its initial
buckets), and a bucket index or order names different parameters then. A parameter's residual
is keyed by its name when ``model=`` is given, otherwise by where it first appeared (initial
bucket index, position), which is the same in every fresh DDP of the same model: saved with the
state, the residuals find their parameters again in a resumed run, and its first step equals the
uninterrupted run's. A bucket whose layout is unknown (no parameter list) keeps one residual
under its index.

The iteration counter ``state.iter`` advances when the last bucket of an iteration
(``bucket.is_last()``) has been issued, as in PowerSGD.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations at runtime.
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from zccl_torch.compressor import quantize
from zccl_torch.config import Options, config, current_options
from zccl_torch.policy import (
    EXACT,
    CallContext,
    Decision,
    NormRelative,
    Policy,
    Rules,
    _agree,
    check_zccl_group,
    current_policy,
)

logger = logging.getLogger("zccl_torch.hooks")

__all__ = ["DEFAULT_POLICY", "ZcclHookState", "compressed_allreduce_hook"]

#: Policy of a hook state created with ``policy=None`` when no group/thread policy is set:
#: 1-D parameters exact, everything else within 1e-3 of the (cross-rank max) gradient RMS.
DEFAULT_POLICY: Policy = Rules(NormRelative(1e-3, "rms"))

_Slice = tuple[int, int]  # (offset, numel) in the bucket buffer


class ZcclHookState:
    """State of :func:`compressed_allreduce_hook` (pass to ``register_comm_hook``).

    Args:
        process_group: a process group on the "zccl" backend (None: the default group).
        policy: error-bound policy (:mod:`zccl_torch.policy`); None: the thread's
            ``use_policy`` block or the group's default at hook time, else :data:`DEFAULT_POLICY`.
        error_feedback: keep per-bucket residuals (see the module docstring).
        start_iter: iterations averaged exactly before compression starts (>= 0).
        model: the module (DDP-wrapped or not) whose parameters are bucketed; needed for
            name-based rules. ``"module."`` prefixes of DDP are stripped.

    Checkpointing: ``torch.save(state)`` keeps the iteration counter, residuals and policy; the
    process group and model are not saved (like ``PowerSGDState``): after ``torch.load`` the
    state uses the default group; set ``state.process_group`` / ``state.model`` again if needed.
    """

    def __init__(
        self,
        process_group: Any = None,
        policy: Policy | None = None,
        error_feedback: bool = True,
        start_iter: int = 10,
        model: torch.nn.Module | None = None,
    ) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise ValueError(f"ZcclHookState.policy must be a Policy or None, got {policy!r}")
        if isinstance(start_iter, bool) or not isinstance(start_iter, int) or start_iter < 0:
            raise ValueError(f"ZcclHookState.start_iter must be an int >= 0, got {start_iter!r}")
        if not isinstance(error_feedback, bool):
            raise ValueError(f"ZcclHookState.error_feedback must be a bool, got {error_feedback!r}")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ValueError(f"ZcclHookState.model must be a torch.nn.Module, got {model!r}")
        self.process_group = process_group
        self.policy = policy
        self.error_feedback = error_feedback
        self.start_iter = start_iter
        self.model = model
        #: completed iterations (advanced after the last bucket of each iteration)
        self.iter = 0
        #: calls of the hook per bucket index (informational)
        self.bucket_calls: dict[int, int] = {}
        #: error-feedback residual per parameter key (name, or first-seen position), flat,
        #: float32 (float64 for float64 buckets); see :meth:`bucket_residual`
        self.residuals: dict[Any, torch.Tensor] = {}
        #: decisions of the last compressed call per bucket index: [(eb or 0.0 exact, numel)]
        self.last_decisions: dict[int, list[tuple[float, int]]] = {}
        self._names: dict[int, str] | None = None
        #: parameter -> residual key of this process (id(param) is not saved)
        self._keys: dict[int, Any] = {}
        self._control: Any = None  # see _control_group
        #: reused gather buffers of multi-slice payloads: (bucket index, payload, role) -> tensor
        self._staging: dict[tuple[int, int, str], torch.Tensor] = {}

    # -- checkpointing ------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("process_group", "model", "_names", "_keys", "_control", "_staging"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.process_group = None
        self.model = None
        self._names = None
        self._keys = {}
        self._control = None
        self._staging = {}
        if state.get("residual_signatures") is not None:  # saved by 0.1 (per-bucket residuals)
            self.residuals = {}
            self.__dict__.pop("residual_signatures", None)

    # -- helpers ------------------------------------------------------------------------------
    def _maybe_increase_iter(self, bucket: dist.GradBucket) -> None:
        if bucket.is_last():
            self.iter += 1
            if self.iter == self.start_iter:
                logger.info("zccl hook: compression starts after %d iterations", self.iter)

    def _control_group(self) -> Any:
        """A second zccl group over the hook's ranks for the policy statistics (created on first
        use, collectively: every rank's first compressed bucket reaches this point)."""
        if self._control is None:
            ranks = dist.get_process_group_ranks(
                self.process_group or dist.distributed_c10d._get_default_group()
            )
            self._control = dist.new_group(ranks=ranks, backend="zccl")
        return self._control

    def _staged(
        self, index: int, payload: int, role: str, numel: int, dtype: torch.dtype
    ) -> torch.Tensor:
        """The staging buffer ``role`` of payload ``payload`` of bucket ``index`` (allocated on
        first use, and again if the payload's size or dtype changed)."""
        key = (index, payload, role)
        buf = self._staging.get(key)
        if buf is None or buf.numel() != numel or buf.dtype != dtype:
            buf = torch.empty(numel, dtype=dtype)
            self._staging[key] = buf
        return buf

    def _policy(self) -> Policy:
        pol = current_policy(self.process_group, self.policy)
        return pol if pol is not None else DEFAULT_POLICY

    def _name_of(self, param: torch.Tensor) -> str | None:
        if self.model is None:
            return None
        if self._names is None:
            module = self.model
            inner = getattr(module, "module", None)
            if isinstance(module, torch.nn.parallel.DistributedDataParallel) and inner is not None:
                module = inner
            self._names = {id(p): n for n, p in module.named_parameters()}
        return self._names.get(id(param))

    def _residual_keys(self, bucket: dist.GradBucket) -> list[tuple[Any, int]]:
        """(key, numel) of each parameter of the bucket in buffer order; one entry for the whole
        bucket when its layout is unknown."""
        buf = bucket.buffer()
        params = list(bucket.parameters())
        if not params or sum(p.numel() for p in params) != buf.numel():
            return [(("bucket", bucket.index()), buf.numel())]
        out = []
        for pos, p in enumerate(params):
            key = self._keys.get(id(p))
            if key is None:
                name = self._name_of(p)
                key = name if name is not None else ("first seen", bucket.index(), pos)
                self._keys[id(p)] = key
            out.append((key, p.numel()))
        return out

    def bucket_residual(
        self, bucket: dist.GradBucket, dtype: torch.dtype | None = None, *, live: bool = False
    ) -> torch.Tensor | None:
        """The bucket's residual in buffer order (zeros for parameters without one, or whose
        saved residual has another size or dtype), or None when no parameter has one.

        A new tensor, unless ``live``: then the stored residuals themselves when they lie back
        to back (the hook's own use: it overwrites them with the next residual)."""
        keys = self._residual_keys(bucket)
        found = [self.residuals.get(k) for k, _ in keys]
        if all(r is None for r in found):
            return None
        if dtype is None:
            dtype = next(r.dtype for r in found if r is not None)
        if live:
            whole = _consecutive_views(found, [n for _, n in keys], dtype)
            if whole is not None:  # the residual stored by the last call, as it was: no copy
                return whole
        parts = [
            r
            if r is not None and r.numel() == n and r.dtype == dtype
            else torch.zeros(n, dtype=dtype)
            for r, (_, n) in zip(found, keys, strict=True)
        ]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _store_residual(self, bucket: dist.GradBucket, residual: torch.Tensor) -> None:
        """Splits the bucket's new residual into per-parameter views (no copy)."""
        offset = 0
        for key, n in self._residual_keys(bucket):
            self.residuals[key] = residual.narrow(0, offset, n)
            offset += n

    def _slices(self, bucket: dist.GradBucket, policy: Policy) -> list[tuple[Policy, list[_Slice]]]:
        """[(leaf policy, [slices])] in first-appearance order."""
        buf = bucket.buffer()
        params = list(bucket.parameters())
        total = sum(p.numel() for p in params)
        if not params or total != buf.numel():  # unknown layout: one payload, default policy
            leaf = policy.select(None, buf.numel(), None)
            return [(leaf, [(0, buf.numel())])]
        groups: dict[Policy, list[_Slice]] = {}
        offset = 0
        for p in params:
            name = self._name_of(p)
            if name is None and policy.needs_names:
                raise RuntimeError(
                    "zccl hook: the policy has name rules but parameter names are unknown: pass "
                    "model= to ZcclHookState (after torch.load, set state.model again)"
                )
            leaf = policy.select(name, p.numel(), p.dim())
            groups.setdefault(leaf, []).append((offset, p.numel()))
            offset += p.numel()
        return list(groups.items())


def _consecutive_views(
    parts: list[torch.Tensor | None], sizes: list[int], dtype: torch.dtype
) -> torch.Tensor | None:
    """One tensor over ``parts`` when they lie back to back in one storage with the given sizes
    and dtype (how :meth:`ZcclHookState._store_residual` leaves a bucket's residual), else None.
    """
    if not parts or any(r is None for r in parts):
        return None
    first = parts[0]
    assert first is not None
    offset = first.storage_offset()
    for r, n in zip(parts, sizes, strict=True):
        assert r is not None
        if (
            r.dtype != dtype
            or r.numel() != n
            or not r.is_contiguous()
            or r.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
            or r.storage_offset() != offset
        ):
            return None
        offset += n
    return first.as_strided((sum(sizes),), (1,), first.storage_offset())


def _gather(
    t: torch.Tensor, slices: list[_Slice], into: Callable[[int], torch.Tensor]
) -> torch.Tensor:
    """The slices of ``t`` as one payload: a view when they are one slice, else copied into
    ``into(total numel)``."""
    if len(slices) == 1:
        return t.narrow(0, *slices[0])
    out = into(sum(n for _, n in slices))
    pos = 0
    for off, n in slices:
        out.narrow(0, pos, n).copy_(t.narrow(0, off, n))
        pos += n
    return out


def _scatter(dst: torch.Tensor, src: torch.Tensor, slices: list[_Slice]) -> None:
    pos = 0
    for off, n in slices:
        dst.narrow(0, off, n).copy_(src.narrow(0, pos, n))
        pos += n


def _exact_allreduce(buf: torch.Tensor, group: Any) -> torch.futures.Future[torch.Tensor]:
    with config(algorithm="mpi", baseline=None):
        return _async_allreduce(buf, group)


def _async_allreduce(payload: torch.Tensor, group: Any) -> torch.futures.Future[torch.Tensor]:
    """Issues a SUM all_reduce of ``payload`` on ``group``; the future of the payload."""
    fut: torch.futures.Future[list[torch.Tensor]] = dist.all_reduce(
        payload, group=group, async_op=True
    ).get_future()
    return fut.then(_first_tensor)


def _first_tensor(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
    return done.value()[0]


def compressed_allreduce_hook(
    state: ZcclHookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket's average over ranks, compressed under ``state``'s policy.

    Returns a future of the bucket buffer (same shape and dtype) holding the average. See the
    module docstring for the exact math (warm-up, slices, error feedback). Raises TypeError if
    the process group does not run on the "zccl" backend.
    """
    group = state.process_group
    check_zccl_group(group, error=TypeError)
    p = dist.get_world_size(group)
    buf = bucket.buffer()
    index = bucket.index()
    state.bucket_calls[index] = state.bucket_calls.get(index, 0) + 1

    if state.iter < state.start_iter or not buf.is_floating_point():
        state._maybe_increase_iter(bucket)
        buf.div_(p)
        return _exact_allreduce(buf, group)

    base = current_options(group)
    work_dtype = torch.float64 if buf.dtype == torch.float64 else torch.float32
    # The bucket buffer is the hook's to overwrite (the result goes back into it): float32/64
    # buckets are scaled in place, half buckets widened once.
    x = buf.detach().reshape(-1)
    if x.dtype != work_dtype:
        x = x.to(work_dtype)
    policy = state._policy()
    groups = state._slices(bucket, policy)

    e = state.bucket_residual(bucket, work_dtype, live=True) if state.error_feedback else None
    # x = g * (1/p) + e in one pass (a multiply, not a division: torch.add's alpha)
    if e is not None:
        torch.add(e, x, alpha=1.0 / p, out=x)
    else:
        x.mul_(1.0 / p)

    def payload_buffer(k: int) -> Callable[[int], torch.Tensor]:
        return lambda numel: state._staged(index, k, "payload", numel, work_dtype)

    # Agree on every payload's statistics in one exact all_reduce (MAX).
    payloads = [_gather(x, slices, payload_buffer(k)) for k, (_, slices) in enumerate(groups)]
    ctxs: list[CallContext] = []
    stats: list[float] = []
    counts: list[int] = []
    for (leaf, _), payload in zip(groups, payloads, strict=True):
        ctx = CallContext(
            collective="all_reduce",
            op="sum",
            world_size=p,
            algorithm=base.effective_algorithm,
            numel=payload.numel(),
            absolute=True,
        )
        st = leaf.stats(payload, ctx)
        ctxs.append(ctx)
        stats.extend(st)
        counts.append(len(st))
    # On the state's control group: a separate worker, so this small exchange does not queue
    # behind the previous buckets' compressed all-reduces (which would serialise the backward).
    agreed = _agree(tuple(stats), state._control_group())

    residual = None
    plan: list[tuple[torch.Tensor, Decision]] = []
    decisions: list[tuple[float, int]] = []
    pos = 0
    for ordinal, ((leaf, slices), payload, ctx, k) in enumerate(
        zip(groups, payloads, ctxs, counts, strict=True)
    ):
        d = leaf.decide(ctx, agreed[pos : pos + k])
        pos += k
        nbytes = payload.numel() * payload.element_size()
        if d.exact or d.error_bound <= 0 or nbytes < base.min_compress_bytes or p == 1:
            d = EXACT
        if d.mode != "abs" and not d.exact:  # policies decide absolutely under ctx.absolute
            raise ValueError(f"zccl hook: policy {leaf!r} gave a non-absolute decision {d!r}")
        if not d.exact and state.error_feedback:
            if residual is None:
                # The old residual is spent (added into x above): its buffer takes the new one.
                residual = e if e is not None else torch.empty_like(x)
                if slices != [(0, x.numel())]:
                    residual.zero_()  # exact slices keep no residual
            # x' on the compressor's grid, in place (payload is the hook's: a view of the
            # bucket buffer or a gathered copy), and x - x' in the same pass.
            threads = base.threads or None
            if len(slices) == 1:
                quantize(
                    payload,
                    d.error_bound,
                    "abs",
                    threads=threads,
                    out=payload,
                    residual=residual.narrow(0, *slices[0]),
                )
            else:
                rest = state._staged(index, ordinal, "residual", payload.numel(), work_dtype)
                quantize(payload, d.error_bound, "abs", threads=threads, out=payload, residual=rest)
                _scatter(residual, rest, slices)
        decisions.append((0.0 if d.exact else d.error_bound, payload.numel()))
        plan.append((payload, d))

    state.last_decisions[index] = decisions
    if state.error_feedback:  # x - x' (zero where exact)
        state._store_residual(bucket, residual if residual is not None else torch.zeros_like(x))
    futures = [_issue(payload, d, base, group) for payload, d in plan]
    state._maybe_increase_iter(bucket)

    slices_list = [slices for _, slices in groups]

    def write_back(done: torch.futures.Future[list[torch.futures.Future[Any]]]) -> torch.Tensor:
        flat = buf.view(-1)
        for slices, f in zip(slices_list, done.value(), strict=True):
            result = f.value()
            if len(slices) == 1 and result.data_ptr() == flat.narrow(0, *slices[0]).data_ptr():
                continue  # reduced in place inside the bucket buffer already
            _scatter(flat, result.to(buf.dtype), slices)
        return buf

    return torch.futures.collect_all(futures).then(write_back)


def _issue(
    payload: torch.Tensor, d: Decision, base: Options, group: Any
) -> torch.futures.Future[torch.Tensor]:
    """Async SUM all_reduce of ``payload`` under decision ``d``; future of the payload."""
    with config(**d.changes()):
        return _async_allreduce(payload, group)
