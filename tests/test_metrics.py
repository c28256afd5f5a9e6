"""zccl_torch.metrics against independent float64 numpy computations.

* max_abs_error = max |x - x'|
* psnr          = 20*log10(range) - 10*log10(mse), range = max - min of the original; inf if equal
* nrmse         = sqrt(mse) / range
* compression_ratio(orig, stream) = original bytes / stream bytes

Errors are taken over the positions where the original is finite and the range over its finite
values; a non-finite original not reproduced exactly (or a finite one decoded as non-finite) is an
infinite error: max_abs_error = nrmse = inf, psnr = -inf.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers_compress import DTYPES, examples, make_data
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch
from zccl_torch import metrics

REL = 1e-12  # summation order differs between numpy and torch; nothing else may


def _np(t):
    return t.detach().reshape(-1).numpy().astype(np.float64)


def _finite_pairs(o, r):
    a, b = _np(o), _np(r)
    keep = np.isfinite(a)
    return a[keep], b[keep]


def ref_max_abs_error(o, r):
    a, b = _finite_pairs(o, r)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def ref_mse(o, r):
    a, b = _finite_pairs(o, r)
    d = a - b
    return float(np.mean(d * d)) if a.size else 0.0


def ref_range(o):
    a = _np(o)
    a = a[np.isfinite(a)]
    return float(np.max(a) - np.min(a)) if a.size else 0.0


def ref_psnr(o, r):
    mse = ref_mse(o, r)
    if mse == 0:
        return math.inf
    return 20 * math.log10(ref_range(o)) - 10 * math.log10(mse)


def ref_nrmse(o, r):
    return math.sqrt(ref_mse(o, r)) / ref_range(o)


@st.composite
def pairs(draw):
    """(orig, recon): a non-constant finite original and a perturbed copy of it."""
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(2, 5000))
    kind = draw(st.sampled_from(("sin", "cumsum", "noise", "uniform", "alternating", "steps")))
    scale = draw(st.sampled_from((1e-6, 1.0, 1e3, 1e20)))
    seed = draw(st.integers(0, 2**32 - 1))
    o = make_data(kind, n, dtype, seed=seed, scale=scale)
    o[0], o[1] = scale, -scale  # never constant
    noise = draw(st.sampled_from((1e-9, 1e-4, 1e-1)))
    rng = np.random.default_rng(seed + 1)
    r = o + torch.from_numpy((rng.standard_normal(n) * scale * noise).astype(o.numpy().dtype))
    if n > 2 and draw(st.booleans()):  # non-finite values in the original, reproduced exactly
        k = rng.integers(2, n, size=max(1, n // 20))
        vals = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
        o[k] = vals[torch.from_numpy(k % 3)]
        r[k] = o[k]
    return o, r


@examples(100)
@given(pair=pairs())
def test_max_abs_error_matches_numpy(pair):
    o, r = pair
    assert float(metrics.max_abs_error(o, r)) == ref_max_abs_error(o, r)


@examples(100)
@given(pair=pairs())
def test_psnr_matches_numpy(pair):
    o, r = pair
    got = float(metrics.psnr(o, r))
    assert math.isclose(got, ref_psnr(o, r), rel_tol=REL, abs_tol=1e-9), (got, ref_psnr(o, r))


@examples(100)
@given(pair=pairs())
def test_nrmse_matches_numpy(pair):
    o, r = pair
    got = float(metrics.nrmse(o, r))
    assert math.isclose(got, ref_nrmse(o, r), rel_tol=REL), (got, ref_nrmse(o, r))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_identical_inputs(dtype):
    o = make_data("sin", 1000, dtype, seed=1)
    assert float(metrics.max_abs_error(o, o.clone())) == 0.0
    assert float(metrics.psnr(o, o.clone())) == math.inf
    assert float(metrics.nrmse(o, o.clone())) == 0.0


def test_float32_differences_computed_in_float64():
    """Differences below float32 resolution of the operands must not be rounded away."""
    o = torch.tensor([1.0, 0.0, 16777216.0, -3.0], dtype=torch.float32)
    r = torch.tensor([1.0000001, 0.0, 16777218.0, -3.0], dtype=torch.float32)
    assert float(metrics.max_abs_error(o, r)) == ref_max_abs_error(o, r) == 2.0
    o = torch.tensor([1e-30, 3e38, -3e38], dtype=torch.float32)
    r = torch.tensor([0.0, -3e38, 3e38], dtype=torch.float32)  # differences overflow float32
    assert float(metrics.max_abs_error(o, r)) == ref_max_abs_error(o, r)
    assert math.isfinite(float(metrics.max_abs_error(o, r)))
    got = float(metrics.psnr(o, r))
    assert math.isclose(got, ref_psnr(o, r), rel_tol=REL), (got, ref_psnr(o, r))


def test_known_values():
    o = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    r = o + torch.tensor([0.1, -0.1, 0.1, -0.1, 0.0], dtype=torch.float64)
    mse = 4 * 0.01 / 5
    assert math.isclose(
        float(metrics.psnr(o, r)), 20 * math.log10(4.0) - 10 * math.log10(mse), rel_tol=1e-12
    )
    assert math.isclose(float(metrics.nrmse(o, r)), math.sqrt(mse) / 4.0, rel_tol=1e-12)
    assert math.isclose(float(metrics.max_abs_error(o, r)), 0.1, rel_tol=1e-12)


def test_metrics_accept_shapes_and_views():
    o = make_data("cumsum", 600, torch.float64, seed=3).reshape(20, 30)
    r = o + 1e-3
    assert math.isclose(float(metrics.psnr(o.t(), r.t())), ref_psnr(o, r), rel_tol=REL)
    assert float(metrics.max_abs_error(o.t(), r.t())) == ref_max_abs_error(o, r)


def test_return_types_are_python_floats():
    o = make_data("sin", 100, torch.float32, seed=1)
    r = o + 1e-3
    for f in (metrics.max_abs_error, metrics.psnr, metrics.nrmse):
        assert isinstance(f(o, r), float), f.__name__
    s = zccl_torch.compress(o, 1e-3)
    assert isinstance(metrics.compression_ratio(o, s), float)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1,), (1000,), (10, 33), (5121,)], ids=str)
def test_compression_ratio(dtype, shape):
    o = make_data("sin", math.prod(shape), dtype, seed=4).reshape(shape)
    s = zccl_torch.compress(o, 1e-3)
    expected = o.numel() * o.element_size() / s.numel()
    assert float(metrics.compression_ratio(o, s)) == expected


def test_metrics_with_real_compression():
    o = make_data("cumsum", 20_000, torch.float32, seed=8)
    eb = zccl_torch.resolve_error_bound(o, 1e-3, "rel")
    y = zccl_torch.decompress(zccl_torch.compress(o, 1e-3, "rel"))
    assert float(metrics.max_abs_error(o, y)) == ref_max_abs_error(o, y) <= eb
    assert math.isclose(float(metrics.psnr(o, y)), ref_psnr(o, y), rel_tol=REL)
    # a uniform error within +-eb on a range R gives PSNR >= 20*log10(R/eb)
    assert float(metrics.psnr(o, y)) >= 20 * math.log10(ref_range(o) / eb) - 1e-9


def test_mismatched_shapes_raise():
    o = torch.zeros(10)
    with pytest.raises((ValueError, RuntimeError, TypeError)):
        metrics.max_abs_error(o, torch.zeros(11))
    with pytest.raises((ValueError, RuntimeError, TypeError)):
        metrics.psnr(o, torch.zeros(5, 2)[:, :1])


def test_value_range_and_summary():
    o = make_data("cumsum", 3000, torch.float64, seed=5, nonfinite=0.05)
    r = o + 1e-3
    assert metrics.value_range(o) == ref_range(o)
    summary = metrics.error_summary(o, r, zccl_torch.compress(o, 1e-2))
    assert summary["max_abs_error"] == metrics.max_abs_error(o, r)
    assert summary["psnr"] == metrics.psnr(o, r)
    assert summary["nrmse"] == metrics.nrmse(o, r)
    assert summary["value_range"] == ref_range(o)
    assert summary["ratio"] == metrics.compression_ratio(o, zccl_torch.compress(o, 1e-2))
    assert "ratio" not in metrics.error_summary(o, r)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonfinite_reproduced_exactly_is_ignored(dtype):
    o = make_data("sin", 500, dtype, seed=6)
    o[::17], o[3::19], o[5::23] = float("nan"), float("inf"), -float("inf")
    r = o.clone()
    fin = torch.isfinite(o)
    r[fin] += 1e-3
    assert float(metrics.max_abs_error(o, r)) == ref_max_abs_error(o, r)
    assert math.isclose(float(metrics.psnr(o, r)), ref_psnr(o, r), rel_tol=REL)
    assert math.isclose(float(metrics.nrmse(o, r)), ref_nrmse(o, r), rel_tol=REL)


@pytest.mark.parametrize(
    "orig, recon",
    [
        ([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0]),  # NaN lost
        ([1.0, float("inf"), 3.0], [1.0, -float("inf"), 3.0]),  # Inf sign flipped
        ([1.0, float("inf"), 3.0], [1.0, 1e300, 3.0]),  # Inf became finite
        ([1.0, 2.0, 3.0], [1.0, float("nan"), 3.0]),  # finite decoded as NaN
        ([1.0, 2.0, 3.0], [1.0, float("inf"), 3.0]),  # finite decoded as Inf
    ],
    ids=["nan-lost", "inf-sign", "inf-finite", "finite-to-nan", "finite-to-inf"],
)
def test_nonfinite_mismatch_is_infinite_error(orig, recon):
    o = torch.tensor(orig, dtype=torch.float64)
    r = torch.tensor(recon, dtype=torch.float64)
    assert metrics.max_abs_error(o, r) == math.inf
    assert metrics.psnr(o, r) == -math.inf
    assert metrics.nrmse(o, r) == math.inf


def test_constant_original_with_error():
    o = torch.full((10,), 3.0, dtype=torch.float64)
    r = o + 0.5
    assert metrics.max_abs_error(o, r) == 0.5
    assert metrics.psnr(o, r) == -math.inf
    assert metrics.nrmse(o, r) == math.inf


def test_empty_and_all_nonfinite():
    e = torch.zeros(0, dtype=torch.float32)
    assert metrics.max_abs_error(e, e) == 0.0
    assert metrics.psnr(e, e) == math.inf
    assert metrics.nrmse(e, e) == 0.0
    n = torch.tensor([float("nan"), float("inf")])
    assert metrics.max_abs_error(n, n.clone()) == 0.0
    assert metrics.psnr(n, n.clone()) == math.inf
    assert metrics.value_range(n) == 0.0


def test_compression_ratio_byte_count_and_errors():
    o = torch.zeros(1000, dtype=torch.float64)
    assert metrics.compression_ratio(o, 800) == 10.0
    for bad in (0, -5):
        with pytest.raises(ValueError):
            metrics.compression_ratio(o, bad)
    with pytest.raises(ValueError):
        metrics.compression_ratio(o, torch.zeros(0, dtype=torch.uint8))
