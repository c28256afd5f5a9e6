"""Single-process unit tests of zccl_torch.policy (no process group needed)."""

from __future__ import annotations

import io
import math

import pytest
import torch

from zccl_torch import _C, policy
from zccl_torch.hooks import ZcclHookState
from zccl_torch.policy import (
    Absolute,
    CallContext,
    EndToEnd,
    Exact,
    NormRelative,
    Relative,
    Rules,
)


def ebound(t: torch.Tensor, pol: policy.Policy, **kw: object) -> float:
    return policy.effective_error_bound(t, policy=pol, **kw)  # type: ignore[arg-type]


def test_absolute_relative_norm() -> None:
    t = torch.linspace(-2.0, 6.0, 1000)
    assert ebound(t, Absolute(1e-3), world_size=4) == 1e-3
    assert math.isclose(ebound(t, Relative(1e-3), world_size=4), 8e-3)
    rms = float(t.double().pow(2).mean().sqrt())
    # The norm is taken in the tensor's own precision (float32 here): close, not bit-equal.
    assert math.isclose(ebound(t, NormRelative(1e-2), world_size=4), 1e-2 * rms, rel_tol=1e-6)
    l2 = float(t.double().norm())
    assert math.isclose(ebound(t, NormRelative(1e-2, "l2"), world_size=4), 1e-2 * l2, rel_tol=1e-6)
    huge = torch.full((4,), 3e38)  # float32 norm overflows: redone in float64
    got = ebound(huge, NormRelative(1e-2, "l2"), world_size=2)
    assert math.isclose(got, 1e-2 * 6e38, rel_tol=1e-6)
    assert ebound(torch.full((8,), float("nan")), NormRelative(1e-2), world_size=2) == 0.0
    assert ebound(t.half(), NormRelative(1e-2), world_size=2) > 0


@pytest.mark.parametrize(
    "alg", ["ring", "recursive_doubling", "halving_doubling", "cprp2p", "auto"]
)
@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("op", ["sum", "avg", "min", "max"])
def test_end_to_end_divides_by_hop_factor(alg: str, p: int, op: str) -> None:
    t = torch.randn(100)
    algs = ["ring", "recursive_doubling", "halving_doubling"] if alg == "auto" else [alg]
    factor = max(_C.output_error_bound(a, op, p, 1.0, True) for a in algs)
    eb = ebound(t, EndToEnd(0.5, algorithm=alg), world_size=p, op=op)
    assert math.isclose(eb, 0.5 / factor)
    assert eb * _C.output_error_bound(alg, op, p, 1.0, True) <= 0.5 * (1 + 1e-12)
    stat = ebound(t, EndToEnd(0.5, statistical=True, algorithm=alg), world_size=p, op=op)
    assert stat >= eb
    rs = ebound(t, EndToEnd(0.5, algorithm="ring"), world_size=p, collective="reduce_scatter")
    assert math.isclose(rs, 0.5 / _C.output_error_bound("ring", "sum", p, 1.0, False))
    assert ebound(t, EndToEnd(0.5), world_size=p, collective="broadcast") == 0.5


def test_premul_sum_counts_as_a_sum() -> None:
    """ReduceOp.PREMUL_SUM(f) is summed like SUM: EndToEnd divides by the SUM's growth (as
    "other" it took 1, and the output could miss its target by p times)."""
    import torch.distributed as dist

    for op in (dist.ReduceOp.PREMUL_SUM(0.5), dist._make_nccl_premul_sum(torch.tensor([2.0]))):
        assert policy.op_name(op) == "sum"
        t = torch.randn(100)
        got = ebound(t, EndToEnd(0.5, algorithm="ring"), world_size=4, op=op)
        want = ebound(t, EndToEnd(0.5, algorithm="ring"), world_size=4, op="sum")
        assert got == want < 0.5
    assert policy.op_name(dist.ReduceOp.PRODUCT) == "other"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Absolute(-1.0), "Absolute.eb"),
        (lambda: Absolute(float("nan")), "Absolute.eb"),
        (lambda: Relative(float("inf")), "Relative.rel"),
        (lambda: NormRelative(-1e-3), "NormRelative.rel"),
        (lambda: NormRelative(1e-3, norm="linf"), "NormRelative.norm"),
        (lambda: EndToEnd("x"), "EndToEnd.target"),
        (lambda: EndToEnd(1.0, algorithm="tree"), "EndToEnd.algorithm"),
        (lambda: Rules(Absolute(1.0), min_numel=-1), "Rules.min_numel"),
        (lambda: Rules("abs"), "Rules.default"),
        (lambda: Rules(Absolute(1.0), overrides={"a*": 3}), "Rules.overrides"),
        (lambda: ZcclHookState(start_iter=-1), "ZcclHookState.start_iter"),
        (lambda: ZcclHookState(policy=1e-3), "ZcclHookState.policy"),
    ],
)
def test_validation_names_the_field(make: object, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        make()  # type: ignore[operator]


def test_rules_exemptions_and_overrides() -> None:
    rules = Rules(
        Absolute(1e-3),
        min_numel=100,
        exempt=("embed.*",),
        overrides={"head.*": Absolute(1e-5), "*.bias": NormRelative(1e-2)},
    )
    assert rules.needs_names
    assert isinstance(rules.select("embed.weight", 10_000, 2), Exact)
    assert rules.select("head.weight", 10_000, 2) == Absolute(1e-5)
    assert rules.select("fc.bias", 10_000, 1) == NormRelative(1e-2)  # override beats 1-D
    assert isinstance(rules.select("norm.weight", 10_000, 1), Exact)  # 1-D parameter
    assert isinstance(rules.select("fc.weight", 50, 2), Exact)  # below min_numel
    assert rules.select("fc.weight", 10_000, 2) == Absolute(1e-3)
    assert rules.select(None, 10_000, None) == Absolute(1e-3)  # unnamed flat tensor: lossy
    nested = Rules(Absolute(1.0), overrides=(("a.*", rules),))
    assert isinstance(nested.select("a.embed.weight", 10_000, 2), Absolute)
    ctx = CallContext(name="fc.bias", numel=10, param_ndim=1, world_size=2)
    assert Rules(Absolute(1.0)).decide(ctx, ()).exact
    assert ebound(torch.ones(1000), rules, name="x.bias", world_size=2) > 0
    assert ebound(torch.ones(1000), Rules(Absolute(1.0)), name="x.bias", world_size=2) == 0.0


def test_context_nesting_and_group_default() -> None:
    assert policy.current_policy() is None
    policy.set_policy(Absolute(3.0))
    try:
        assert policy.get_policy() == Absolute(3.0)
        assert policy.current_policy() == Absolute(3.0)
        with policy.use_policy(Absolute(1.0)):
            assert policy.current_policy() == Absolute(1.0)
            with policy.use_policy(Absolute(2.0)):
                assert policy.current_policy() == Absolute(2.0)
                assert policy.current_policy(policy=Absolute(4.0)) == Absolute(4.0)
                assert ebound(torch.ones(4), None, world_size=2) == 2.0  # type: ignore[arg-type]
            assert policy.current_policy() == Absolute(1.0)
        assert policy.current_policy() == Absolute(3.0)
    finally:
        policy.set_policy(None)
    assert policy.get_policy() is None
    with pytest.raises(ValueError, match="policy"):
        policy.set_policy(1e-3)  # type: ignore[arg-type]


def test_decision_options() -> None:
    base = policy.current_options()
    assert policy.EXACT.options(base).effective_algorithm == "mpi"
    opt = policy.Decision(error_bound=1e-3, algorithm="ring").options(base)
    assert (opt.error_bound, opt.mode, opt.effective_algorithm) == (1e-3, "abs", "ring")


def test_hook_state_pickles_without_group_and_model() -> None:
    model = torch.nn.Linear(4, 4)
    state = ZcclHookState(policy=Rules(Absolute(1e-3)), start_iter=3, model=model)
    state.iter = 7
    state.residuals[0] = torch.arange(5.0)
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert back.model is None and back.process_group is None
    assert back.iter == 7 and back.start_iter == 3 and back.policy == state.policy
    assert torch.equal(back.residuals[0], torch.arange(5.0))
