"""Multi-rank checks of zccl_torch.policy and zccl_torch.hooks; run under mpirun by
tests/test_hooks_mpi.py (``mpirun -np P python tests/mpi/hook_checks.py [check ...]``).

Every rank runs the same checks against exact float64 references (per-rank data from seeds,
or gathered exactly with algorithm="mpi") and exits 1 if any check failed on this rank.
"""

import io
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from check_common import assert_within, exact_gather, rank, rounding, run_checks, world
from torch.nn.parallel import DistributedDataParallel

import zccl_torch
from zccl_torch import _C, policy
from zccl_torch.hooks import ZcclHookState, compressed_allreduce_hook
from zccl_torch.policy import Absolute, EndToEnd, NormRelative, Relative, Rules

CHECKS: dict[str, Callable[[], None]] = {}
N = 30_011  # a prime > 64 KiB of float32: compressed by every algorithm


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def data(r: int, n: int = N, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * r + 17 * salt + n)
    return (torch.randn(n, generator=g, dtype=torch.float64).cumsum(0) / math.sqrt(n) + r).float()


@check
def end_to_end_bound() -> None:
    p = world()
    terms = [data(r) for r in range(p)]
    ref = sum(t.double() for t in terms)
    target = 1e-2
    for alg in ("ring", "recursive_doubling", "auto"):
        for op, scale in ((dist.ReduceOp.SUM, 1.0), (dist.ReduceOp.AVG, 1.0 / p)):
            for statistical in (False, True):
                t = data(rank())
                pol = EndToEnd(target, statistical=statistical)
                with zccl_torch.config(algorithm=alg):
                    policy.all_reduce(t, op=op, policy=pol)
                eb = zccl_torch.last_stats()["error_bound"]
                opn = "sum" if op == dist.ReduceOp.SUM else "avg"
                factor = policy.hop_factor(alg, "all_reduce", opn, p, statistical=statistical)
                assert abs(eb - target / factor) <= 1e-12 * target, (alg, opn, eb, factor)
                if statistical:
                    continue  # high-probability bound only: not asserted element-wise
                bound = target + rounding(terms, eb) * scale
                assert_within(f"e2e {alg} {opn}", t, ref * scale, bound)


@check
def end_to_end_pinned_reduce_scatter() -> None:
    p = world()
    n = 8192 * p
    inp = data(rank(), n, salt=3)
    out = torch.empty(n // p)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch 2.13 deprecates reduce_scatter_tensor
        policy.reduce_scatter_single(out, inp, policy=EndToEnd(1e-2, algorithm="ring"))
    assert policy.reduce_scatter_tensor is policy.reduce_scatter_single
    st = zccl_torch.last_stats()
    assert st["algorithm"] == "ring", st
    assert (
        abs(st["error_bound"] - 1e-2 / _C.output_error_bound("ring", "sum", p, 1.0, False)) < 1e-15
    )
    terms = [data(r, n, salt=3) for r in range(p)]
    ref = sum(t.double() for t in terms).narrow(0, rank() * (n // p), n // p)
    bound = 1e-2 + rounding([t.narrow(0, rank() * (n // p), n // p) for t in terms], 1e-2)
    assert_within("e2e reduce_scatter", out, ref, bound)


@check
def norm_and_relative() -> None:
    p = world()
    terms = [data(r) for r in range(p)]
    rms = max(float(t.double().pow(2).mean().sqrt()) for t in terms)
    l2 = max(float(t.double().norm()) for t in terms)
    t = data(rank())
    with zccl_torch.config(algorithm="ring"):
        policy.all_reduce(t, policy=NormRelative(1e-3))
    eb = zccl_torch.last_stats()["error_bound"]
    assert math.isclose(eb, 1e-3 * rms, rel_tol=1e-6), (eb, rms)
    ref = sum(x.double() for x in terms)
    assert_within("normrel", t, ref, p * eb + rounding(terms, eb))
    got = policy.effective_error_bound(data(rank()), policy=NormRelative(1e-3, "l2"))
    assert got <= 1e-3 * l2 * (1 + 1e-6), (got, l2)  # the norm is taken in float32
    t = data(rank())
    with zccl_torch.config(algorithm="ring"):
        policy.all_reduce(t, policy=NormRelative(1e-3, "l2"))
    assert math.isclose(zccl_torch.last_stats()["error_bound"], 1e-3 * l2, rel_tol=1e-6)
    lo = min(float(x.min()) for x in terms)
    hi = max(float(x.max()) for x in terms)
    t = data(rank())
    policy.all_reduce(t, policy=Relative(1e-3))
    assert math.isclose(zccl_torch.last_stats()["error_bound"], 1e-3 * (hi - lo), rel_tol=1e-6)
    # broadcast: the root's statistics decide
    t = data(rank())
    policy.broadcast(t, src=0, policy=NormRelative(1e-3))
    root_rms = float(terms[0].double().pow(2).mean().sqrt())
    assert math.isclose(zccl_torch.last_stats()["error_bound"], 1e-3 * root_rms, rel_tol=1e-6)
    assert_within("bcast", t, terms[0], 1e-3 * root_rms)
    # all_gather under a policy
    outs = [torch.empty(N) for _ in range(p)]
    policy.all_gather(outs, data(rank()), policy=Absolute(1e-3))
    for r in range(p):
        assert_within("all_gather", outs[r], terms[r], 1e-3)
    # all_gather_single (torch 2.13's name for all_gather_into_tensor), stacked output
    stacked = torch.empty(p, N)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the wrapper must not call torch's deprecated names
        policy.all_gather_single(stacked, data(rank()), policy=Absolute(2e-3))
    assert zccl_torch.last_stats()["error_bound"] == 2e-3
    for r in range(p):
        assert_within("all_gather_single", stacked[r], terms[r], 2e-3)


@check
def group_default_and_context() -> None:
    p = world()
    terms = [data(r) for r in range(p)]
    policy.set_policy(Absolute(2e-3))
    try:
        t = data(rank())
        policy.all_reduce(t)
        assert zccl_torch.last_stats()["error_bound"] == 2e-3
        with policy.use_policy(Absolute(1e-3)):
            t = data(rank())
            policy.all_reduce(t)
            assert zccl_torch.last_stats()["error_bound"] == 1e-3
            t = data(rank())
            policy.all_reduce(t, policy=policy.Exact())
            assert_within("exact", t, sum(x.double() for x in terms), rounding(terms, 0.0))
            assert policy.last_stats()["decision"].exact
    finally:
        policy.set_policy(None)
    # named 1-D tensor: exact under Rules
    t = data(rank())
    policy.all_reduce(t, policy=Rules(Absolute(1e-2)), name="fc.bias")
    assert policy.last_decision()["decision"].exact


@check
def wrong_backend() -> None:
    gloo = dist.new_group(backend="gloo")
    for call in (
        lambda: policy.all_reduce(torch.ones(4), group=gloo, policy=Absolute(1e-3)),
        lambda: compressed_allreduce_hook(ZcclHookState(process_group=gloo), None),  # type: ignore[arg-type]
    ):
        try:
            call()
        except TypeError as exc:
            assert "zccl" in str(exc), exc
        else:
            raise AssertionError("non-zccl group accepted")
    # Gloo connects its full mesh in new_group; a rank that finished connecting and destroyed the
    # group could close a socket a slower rank was still handshaking on ("connectFullMesh failed:
    # Connection closed by peer", seen once at 5 ranks in CI). The barrier holds every rank until
    # all have connected.
    dist.barrier(group=gloo)
    dist.destroy_process_group(gloo)


def recorder(records: list[dict[str, Any]]) -> Any:
    """The hook, keeping each bucket's input, residuals and output for checks after backward."""

    def hook(state: ZcclHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        before = bucket.buffer().clone()
        index = bucket.index()
        old = state.bucket_residual(bucket)
        old = old.clone() if old is not None else None
        fut = compressed_allreduce_hook(state, bucket)
        rec: dict[str, Any] = {"before": before, "old": old, "index": index}
        rec["new"] = state.bucket_residual(bucket)
        rec["decisions"] = (
            state.last_decisions.get(index) if state.iter > state.start_iter else None
        )
        records.append(rec)

        def done(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            out = f.value()
            rec["out"] = out.clone()
            return out

        return fut.then(done)

    return hook


def make_model(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 512),
        torch.nn.Tanh(),
        torch.nn.Linear(512, 128),
        torch.nn.Tanh(),
        torch.nn.Linear(128, 1),
    ).to(dtype)


def batch(step: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10_000 * rank() + step)
    x = torch.randn(64, 64, generator=g)
    w = torch.randn(64, 1, generator=torch.Generator().manual_seed(5))
    return x.to(dtype), (torch.sin(x @ w) + 0.1 * x[:, :1]).to(dtype)


@check
def hook_contract() -> None:
    p = world()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        model = make_model(dtype)
        ddp = DistributedDataParallel(model)
        pol = Rules(EndToEnd(1e-3), exempt=("2.*",))
        state = ZcclHookState(policy=pol, start_iter=2, model=ddp)
        records: list[dict[str, Any]] = []
        ddp.register_comm_hook(state, recorder(records))
        for step in range(4):
            ddp.zero_grad()
            x, y = batch(step, dtype)
            torch.nn.functional.mse_loss(ddp(x).float(), y.float()).backward()
        assert state.iter == 4, state.iter
        for r in records:
            out, before = r["out"], r["before"]
            assert out.shape == before.shape and out.dtype == dtype, (out.shape, out.dtype)
            befores = exact_gather(before)
            ref = sum(b.double() / p for b in befores)
            half = dtype != torch.float32
            u = torch.finfo(dtype).eps / 2 if half else 0.0
            if r["decisions"] is None:  # warm-up: exact average (plus float rounding)
                sub = torch.finfo(dtype).tiny * torch.finfo(dtype).eps  # subnormal spacing
                bound = rounding([b.double() / p for b in befores], 0.0, dtype) + (p + 1) * sub
                assert_within(f"warm-up {dtype}", out, ref, bound)
                continue
            # exempt slices exactly averaged, others within the end-to-end target; the
            # residuals carry the difference: out ~ sum_r (before_r/p + old_r - new_r)
            olds = exact_gather(r["old"] if r["old"] is not None else torch.zeros_like(r["new"]))
            news = exact_gather(r["new"])
            eb_max = max(eb for eb, _ in r["decisions"])
            assert 0 < eb_max <= 1e-3 / p + 1e-12, r["decisions"]
            assert any(eb == 0.0 for eb, _ in r["decisions"]), r["decisions"]  # 1-D / exempt
            for nw in news:
                assert float(nw.abs().max()) <= eb_max, "residual exceeds eb"
            sent = [
                b.double() / p + o.double() - nw.double()
                for b, o, nw in zip(befores, olds, news, strict=True)
            ]
            slack = eb_max + float(sum(o.abs().max() for o in olds))
            bound = (
                1e-3
                + rounding([s.float() for s in sent], slack)
                + u * sum(s.abs() for s in sent)
                + 2 * u * ref.abs()
            )
            assert_within(f"ef math {dtype}", out, sum(sent), bound)
            if not half:
                bound = 1e-3 + eb_max * p + rounding([b / p for b in befores], slack)
                assert_within(
                    f"output vs exact {dtype}", out, ref + sum(o.double() for o in olds), bound
                )


@check
def blocks_around_backward_reach_the_hook_on_cpu() -> None:
    """On CPU autograd runs DDP's hook on the thread that calls backward, so a use_policy block
    (or config()) around it applies there, as README says; a policy named in the hook's state
    wins over the block. (On CUDA autograd's device thread runs the hook: there it does not.)"""
    block, named = Absolute(3e-4), Absolute(7e-4)
    for state_policy, want in ((None, block.eb), (named, named.eb)):
        ddp = DistributedDataParallel(make_model())
        state = ZcclHookState(policy=state_policy, start_iter=0, error_feedback=False)
        records: list[dict[str, Any]] = []
        ddp.register_comm_hook(state, recorder(records))
        for step in range(2):
            ddp.zero_grad()
            x, y = batch(step)
            with policy.use_policy(block), zccl_torch.config(min_compress_bytes=1 << 40):
                torch.nn.functional.mse_loss(ddp(x), y).backward()
        decided = {eb for r in records if r["decisions"] for eb, _ in r["decisions"]}
        # min_compress_bytes from config(): every payload below it, so every decision exact
        assert decided == {0.0}, (state_policy, decided)
        records.clear()
        ddp.zero_grad()
        x, y = batch(2)
        with policy.use_policy(block):
            torch.nn.functional.mse_loss(ddp(x), y).backward()
        decided = {eb for r in records if r["decisions"] for eb, _ in r["decisions"]}
        assert decided == {want}, (state_policy, decided, want)


class Const(torch.nn.Module):
    """Gradient c * scale: values spread over [c, 1.1 c]. Not one constant: a chunk whose values
    all have the same bits is stored exactly (a constant chunk), which would hide the bias."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(128, 256))
        self.register_buffer("scale", torch.linspace(1.0, 1.1, 128 * 256).reshape(128, 256))

    def forward(self, c: float) -> torch.Tensor:
        return (self.w * c * self.scale).sum()


@check
def error_feedback_removes_bias() -> None:
    p = world()
    eb = 1e-3
    c = 0.3 * eb * p  # x = c*scale/p in [0.3, 0.33] eb rounds to 0 on the quantisation grid
    steps = 8
    results = {}
    for ef in (False, True):
        model = Const()
        ddp = DistributedDataParallel(model)
        state = ZcclHookState(policy=Absolute(eb), error_feedback=ef, start_iter=0)
        ddp.register_comm_hook(state, compressed_allreduce_hook)
        total = torch.zeros(128, 256, dtype=torch.float64)
        for _ in range(steps):
            ddp.zero_grad()
            ddp(c).backward()
            total += model.w.grad.double()
        results[ef] = total
    assert float(results[False].abs().max()) == 0.0, "without EF the small gradient is lost"
    err = (results[True] - steps * c * Const().scale.double()).abs().max()
    assert float(err) <= p * eb + 1e-9, float(err)


def train(hooked: bool, steps: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    ddp = DistributedDataParallel(model)
    if hooked:
        state = ZcclHookState(policy=Rules(NormRelative(1e-2)), start_iter=3, model=ddp)
        ddp.register_comm_hook(state, compressed_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    x = torch.randn(256, 32, generator=torch.Generator().manual_seed(100 + rank()))
    y = x @ torch.randn(32, 1, generator=torch.Generator().manual_seed(7))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@check
def ddp_training() -> None:
    with zccl_torch.config(algorithm="mpi"):
        exact = train(False, 25)
    hooked = train(True, 25)
    assert hooked[-1] < 0.5 * hooked[0], hooked
    worst = max(abs(a - b) / a for a, b in zip(exact, hooked, strict=True))
    assert worst <= 0.02, (worst, exact, hooked)
    if rank() == 0:
        print(f"training: loss {hooked[0]:.4f} -> {hooked[-1]:.4f}, max rel diff {worst:.2e}")


@check
def checkpoint_round_trip() -> None:
    model = make_model()
    ddp = DistributedDataParallel(model)
    state = ZcclHookState(
        policy=Rules(NormRelative(1e-2), exempt=("0.*",)), start_iter=1, model=ddp
    )
    ddp.register_comm_hook(state, compressed_allreduce_hook)
    for step in range(3):
        ddp.zero_grad()
        x, y = batch(step)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    restored = torch.load(buf, weights_only=False)
    assert restored.process_group is None and restored.model is None
    assert restored.iter == state.iter == 3 and restored.policy == state.policy
    assert restored.residuals.keys() == state.residuals.keys()
    for k, v in state.residuals.items():
        assert torch.equal(v, restored.residuals[k])
    try:
        ddp2 = DistributedDataParallel(make_model())
        ddp2.register_comm_hook(restored, compressed_allreduce_hook)
        ddp2.zero_grad()
        x, y = batch(0)
        torch.nn.functional.mse_loss(ddp2(x), y).backward()
    except RuntimeError as exc:  # name rules need the model again
        assert "model=" in str(exc), exc
    else:
        raise AssertionError("name rules without a model accepted")
    ddp3 = DistributedDataParallel(make_model())
    restored.model = ddp3
    ddp3.register_comm_hook(restored, compressed_allreduce_hook)
    for step in range(2):
        ddp3.zero_grad()
        x, y = batch(step)
        torch.nn.functional.mse_loss(ddp3(x), y).backward()
    assert restored.iter >= 4


def bias_free_model() -> torch.nn.Module:
    """Two parameters of 1.5 MB each: with bucket_cap_mb=1 each has a bucket of its own both in
    DDP's initial buckets and in the rebuilt ones (in another order), so the payloads
    a resumed run compresses are the uninterrupted run's (a policy's statistics are taken per
    payload; with other bucket contents the bound itself would differ)."""
    torch.manual_seed(3)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 6000, bias=False),
        torch.nn.Tanh(),
        torch.nn.Linear(6000, 64, bias=False),
    )


def resume_setup(
    model: torch.nn.Module, with_names: bool, state: ZcclHookState | None = None
) -> tuple[Any, Any, ZcclHookState]:
    """DDP (one parameter per bucket), SGD with momentum, and the hook with ``state`` (a new one
    when None; ``model=`` only when ``with_names``)."""
    # find_unused_parameters: torch then buckets the initial assignment by bucket_cap_mb too
    # (otherwise the first iteration runs with every parameter in one bucket).
    ddp = DistributedDataParallel(model, bucket_cap_mb=1, find_unused_parameters=True)
    if state is None:
        state = ZcclHookState(start_iter=1, model=ddp if with_names else None)
    elif with_names:
        state.model = ddp
    ddp.register_comm_hook(state, compressed_allreduce_hook)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9), state


def resume_step(ddp: Any, opt: Any, k: int) -> None:
    x, y = batch(k)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x).mean(1, keepdim=True), y).backward()
    opt.step()


@check
def checkpoint_resume_equals_uninterrupted() -> None:
    """Error-feedback residuals survive save/load into a fresh DDP: the first step after resuming
    gives bit-identical parameters to the uninterrupted run's step (with and without model=).
    DDP's construction broadcast of the loaded weights must be exact for this to hold too."""
    for with_names in (True, False):
        ddp, opt, state = resume_setup(bias_free_model(), with_names)
        for k in range(4):
            resume_step(ddp, opt, k)
        assert any(float(r.abs().max()) > 0 for r in state.residuals.values()), "no residual"
        saved = io.BytesIO()
        ckpt = {"model": ddp.module.state_dict(), "opt": opt.state_dict(), "hook": state}
        torch.save(ckpt, saved)
        resume_step(ddp, opt, 4)
        uninterrupted = [q.detach().clone() for q in ddp.parameters()]

        saved.seek(0)
        ckpt = torch.load(saved, weights_only=False)
        model = bias_free_model()
        model.load_state_dict(ckpt["model"])
        ddp2, opt2, _ = resume_setup(model, with_names, ckpt["hook"])
        opt2.load_state_dict(ckpt["opt"])
        resume_step(ddp2, opt2, 4)
        for i, (a, b) in enumerate(zip(uninterrupted, ddp2.parameters(), strict=True)):
            assert torch.equal(a, b.detach()), f"parameter {i} (names={with_names}) differs"


def main(argv: list[str]) -> int:
    options = zccl_torch.Options(min_compress_bytes=0)
    return run_checks(CHECKS, argv, options, timeout_s=60, scoped=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
