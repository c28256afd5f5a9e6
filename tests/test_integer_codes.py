"""Properties of the integer code segments the ring all_reduce adds at every hop
(csrc/compress/fzcodes.h, through ``_C.codes_combine`` / ``_C.codes_decode``).

The contract: a chain of p combines (one per rank, as the ring runs them) decodes to the sum of
the p inputs within p * eb, checked against the correctly rounded float64 sum (``math.fsum``)
with only the documented rounding on top (one conversion to float32; float64 partials at
outlier indices); NaN and +-Inf come out as the float64 sum gives them; decoding is
deterministic; a damaged segment raises ``CorruptStreamError``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zccl_torch import _C


def chain(inputs: list[torch.Tensor], eb: float) -> torch.Tensor:
    seg = None
    for x in inputs:
        seg = _C.codes_combine(seg, x, eb, len(inputs))
    return seg


def check_sum(inputs: list[torch.Tensor], out: torch.Tensor, eb: float) -> None:
    p = len(inputs)
    unit = 2.0**-24 if out.dtype == torch.float32 else 0.0
    cols = torch.stack([x.double() for x in inputs]).T.tolist()
    for i, (values, o) in enumerate(zip(cols, out.double().tolist(), strict=True)):
        if any(math.isnan(v) for v in values) or (
            any(v == math.inf for v in values) and any(v == -math.inf for v in values)
        ):
            assert math.isnan(o), (i, values, o)
            continue
        if any(math.isinf(v) for v in values):
            assert o == sum(values), (i, values, o)
            continue
        exact = math.fsum(values)
        if out.dtype == torch.float32 and abs(exact) > torch.finfo(torch.float32).max:
            assert o == math.copysign(math.inf, exact), (i, values, o)  # float32 overflow
            continue
        abs_sum = math.fsum(abs(v) for v in values)
        tol = p * eb + unit * abs(o) + (p + 2) * 2.0**-53 * abs_sum
        assert abs(o - exact) <= tol, (i, values, o, exact, abs(o - exact), tol)


values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=150, deadline=None)
@given(
    p=st.integers(1, 9),
    n=st.integers(0, 200),
    eb=st.sampled_from([1e-7, 1e-3, 0.25, 1e3]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31),
    specials=st.lists(st.tuples(st.integers(0, 199), st.integers(0, 8), values), max_size=6),
)
def test_chain_sums_within_p_eb(p, n, eb, dtype, seed, specials):
    g = torch.Generator().manual_seed(seed)
    inputs = [
        (torch.randn(n, generator=g, dtype=torch.float64).cumsum(0) * (k + 1)).to(dtype)
        for k in range(p)
    ]
    for index, rank, v in specials:  # any value anywhere: NaN, Inf, huge, subnormal, ...
        if index < n and rank < p:
            inputs[rank][index] = v
    seg = chain(inputs, eb)
    out = _C.codes_decode(seg, eb, p)
    assert out.dtype == dtype and out.numel() == n
    check_sum(inputs, out, eb)
    assert torch.equal(out.view(torch.uint8), _C.codes_decode(seg.clone(), eb, p).view(torch.uint8))


def test_float32_overflow_becomes_inf():
    big = torch.full((40,), 3e38)
    out = _C.codes_decode(chain([big, big], 1e-3), 1e-3, 2)
    assert torch.isinf(out).all() and (out > 0).all()


def test_partial_sums_stay_small():
    """Smooth data: the segment of 8 ranks' sum is at most ~2x one rank's (a few more bits per
    delta), and far below raw."""
    g = torch.Generator().manual_seed(3)
    n = 1 << 18
    inputs = [torch.randn(n, generator=g).cumsum(0) / 50 for _ in range(8)]
    one = _C.codes_combine(None, inputs[0], 1e-2, 8)
    eight = chain(inputs, 1e-2)
    assert one.numel() < n * 4 / 4, one.numel()
    assert eight.numel() < 2 * one.numel(), (eight.numel(), one.numel())


def test_damage_is_reported():
    x = torch.randn(5000).cumsum(0)
    seg = _C.codes_combine(None, x, 1e-3, 2)
    for at in (0, 9, 17, 33, 48, seg.numel() // 2, seg.numel() - 1):
        bad = seg.clone()
        bad[at] ^= 0x10
        with pytest.raises(_C.CorruptStreamError):
            _C.codes_decode(bad, 1e-3, 2)
    with pytest.raises(_C.CorruptStreamError):
        _C.codes_decode(seg[:-3].clone(), 1e-3, 2)
    with pytest.raises(_C.CorruptStreamError, match="error bound"):
        _C.codes_combine(seg, x, 2e-3, 2)  # another grid: ranks disagree on the bound
    with pytest.raises(_C.CorruptStreamError, match="values, expected"):
        _C.codes_combine(seg, x[:-1].contiguous(), 1e-3, 2)
    with pytest.raises(ValueError, match="no integer grid"):
        _C.codes_combine(None, x, 0.0, 2)
    with pytest.raises(TypeError, match="float32 or float64"):
        _C.codes_combine(None, x.half(), 1e-3, 2)
