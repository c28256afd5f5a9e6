"""zccl_torch.quantize: the compressor's reconstruction without the stream.

Its promise: the bound of compress() (checked in float64, no tolerance), NaN/Inf unchanged, and
bit-identity with decompress(compress(x)) in every chunk the encoder quantises; chunks it keeps
raw or constant decode to x itself. ``residual=True`` adds x - x' as torch computes it.
"""

from __future__ import annotations

import pytest
import torch
from helpers_compress import (
    DTYPES,
    HALF_DTYPES,
    SPECIAL_SIZES,
    Stream,
    assert_bitwise_equal,
    assert_within_bound,
    bounds,
    datasets,
    examples,
    make_data,
)
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch

ALL_DTYPES = DTYPES + HALF_DTYPES


def check_against_round_trip(x: torch.Tensor, eb: float, chunk_size: int, what: str) -> None:
    """quantize(x) equals the real round trip chunk by chunk (raw/constant chunks: x itself)."""
    grid = zccl_torch.quantize(x, eb)
    assert_within_bound(x, grid, eb, what)
    stream = zccl_torch.compress(x, eb, chunk_size=chunk_size)
    decoded = zccl_torch.decompress(stream).reshape(-1)
    parsed = Stream(stream)
    flat, gflat = x.reshape(-1), grid.reshape(-1)
    for c in range(parsed.nchunks):
        lo = c * chunk_size
        hi = min(lo + chunk_size, x.numel())
        kind = parsed.kind(c)
        if kind in ("encoded", "direct"):  # quantised: the grid, whichever predictor coded it
            assert_bitwise_equal(gflat[lo:hi], decoded[lo:hi], f"{what}: chunk {c} ({kind})")
        else:  # raw, constant (or a repeat of one), lossless (eb 0): the input itself
            assert kind in ("raw", "constant", "repeat", "lossless"), f"{what}: chunk {c}: {kind}"
            assert_bitwise_equal(flat[lo:hi], decoded[lo:hi], f"{what}: chunk {c} ({kind})")


@examples(60)
@given(data=datasets(dtypes=ALL_DTYPES), error_bound=bounds, chunk_size=st.sampled_from((32, 5120)))
def test_within_bound_and_equal_to_the_round_trip(data, error_bound, chunk_size):
    x, desc = data
    eb = zccl_torch.resolve_error_bound(x, error_bound, "abs")
    check_against_round_trip(x, eb, chunk_size, desc)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("n", SPECIAL_SIZES)
def test_special_sizes_smooth_data(dtype, n):
    """Smooth data: every chunk is quantised (encoded or direct), so quantize is the round trip
    exactly."""
    x = make_data("sin", n, dtype, seed=n, scale=10.0)
    check_against_round_trip(x, 1e-3, 5120, f"{dtype} n={n}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_residual_is_x_minus_grid_and_nonfinite_survive(dtype):
    x = make_data("noise", 10007, dtype, seed=3, scale=1.0, nonfinite=0.05)
    grid, residual = zccl_torch.quantize(x, 1e-2, residual=True)
    assert_within_bound(x, grid, 1e-2, str(dtype))
    finite = torch.isfinite(x)
    assert_bitwise_equal(x[~finite], grid[~finite], "non-finite values unchanged")
    assert_bitwise_equal(residual[finite], (x - grid)[finite], "residual = x - x'")
    assert bool((residual[~finite] == 0).all()), "non-finite values leave no residual"
    assert bool((grid[finite] != x[finite]).any()), "nothing was quantised"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_zero_bound_and_lossless_mode_copy(dtype):
    x = make_data("random_bits", 4099, dtype, seed=1)
    for grid in (zccl_torch.quantize(x, 0.0), zccl_torch.quantize(x, mode="lossless")):
        assert_bitwise_equal(x, grid, "eb = 0")
        assert grid.data_ptr() != x.data_ptr()
    grid, residual = zccl_torch.quantize(x, 0.0, residual=True)
    assert bool((residual == 0).all())


def test_rel_mode_and_shape():
    x = make_data("sin", 3 * 5 * 7 * 11, torch.float32, seed=2, scale=100.0).reshape(3, 5, 77)
    eb = zccl_torch.resolve_error_bound(x, 1e-4, "rel")
    grid = zccl_torch.quantize(x, 1e-4, "rel")
    assert grid.shape == x.shape and grid.dtype == x.dtype
    assert_bitwise_equal(grid, zccl_torch.quantize(x, eb), "rel = abs of the resolved bound")
    assert_within_bound(x, grid, eb)


def test_thread_counts_agree_and_input_untouched():
    x = make_data("noise", 300_001, torch.float32, seed=4)
    before = x.clone()
    one = zccl_torch.quantize(x, 1e-3, threads=1)
    two = zccl_torch.quantize(x, 1e-3, threads=2)
    assert_bitwise_equal(one, two, "threads 1 vs 2")
    assert_bitwise_equal(x, before, "input unchanged")


def test_non_contiguous_input():
    x = make_data("sin", 2 * 4096, torch.float64, seed=5).reshape(2, 4096).t()
    grid = zccl_torch.quantize(x, 1e-5)
    assert grid.shape == x.shape
    assert_bitwise_equal(grid, zccl_torch.quantize(x.contiguous(), 1e-5), "strided input")


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((torch.arange(8, dtype=torch.int32), 1e-3), {}, TypeError, "float32, float64"),
        ((torch.zeros(8), -1.0), {}, ValueError, "finite and >= 0"),
        ((torch.zeros(8), float("nan")), {}, ValueError, "finite and >= 0"),
        ((torch.zeros(8), 1e-3), {"mode": "bogus"}, ValueError, "mode must be"),
        ((torch.zeros(8), 1e-3), {"threads": 0}, ValueError, "threads"),
        (([1.0, 2.0], 1e-3), {}, TypeError, "torch.Tensor"),
        ((torch.zeros(8).to_sparse(), 1e-3), {}, TypeError, "dense"),
    ],
)
def test_bad_arguments_raise(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        zccl_torch.quantize(*args, **kwargs)


def test_into_given_tensors_and_in_place():
    x = make_data("noise", 70_001, torch.float32, seed=6)
    want, want_rest = zccl_torch.quantize(x, 1e-3, residual=True)
    out, rest = torch.empty_like(x), torch.full_like(x, 7.0)
    got, got_rest = zccl_torch.quantize(x, 1e-3, residual=rest, out=out)
    assert got.data_ptr() == out.data_ptr() and got_rest.data_ptr() == rest.data_ptr()
    assert_bitwise_equal(got, want, "into out")
    assert_bitwise_equal(got_rest, want_rest, "into residual")
    y = x.clone()
    in_place, rest2 = zccl_torch.quantize(y, 1e-3, residual=True, out=y)
    assert in_place.data_ptr() == y.data_ptr()
    assert_bitwise_equal(y, want, "in place")
    assert_bitwise_equal(rest2, want_rest, "residual of the in-place call")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"out": torch.empty(5)}, "out must be a torch.float32 tensor of 8 values on cpu"),
        ({"out": torch.empty(8, dtype=torch.float64)}, "out must be a torch.float32 tensor"),
        ({"out": torch.empty(16)[::2]}, "out must be contiguous"),
        ({"residual": torch.empty(9)}, "residual must be a torch.float32 tensor of 8 values"),
    ],
)
def test_bad_destinations_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        zccl_torch.quantize(torch.zeros(8), 1e-3, **kwargs)


# ------------------------------------------------------------------------------------------
# The elementwise quantiser (what quantize runs on CUDA tensors), on CPU tensors here: bit for
# bit the C++ one, values and residuals, including -0.0, subnormals, NaN/Inf, values at the
# code limit, bounds at the quantiser's floor and 0, and pieces (PIECE made small).


def elementwise(x: torch.Tensor, eb: float, in_place: bool = False):
    from zccl_torch import quantize_elementwise as qe
    from zccl_torch.compressor import _check_dtype

    src = x.contiguous()
    grid = src if in_place else torch.empty_like(src)
    rest = torch.empty_like(src)
    qe.quantize_into(src, _check_dtype(src.dtype), eb, grid, rest)
    return grid, rest


def assert_matches_cpp(x: torch.Tensor, eb: float, what: str) -> None:
    want, want_rest = zccl_torch.quantize(x, eb, residual=True)
    got, rest = elementwise(x, eb)
    assert_bitwise_equal(got.reshape(want.shape), want, f"{what}: x'")
    assert_bitwise_equal(rest.reshape(want.shape), want_rest, f"{what}: residual")
    inplace, _ = elementwise(x.clone(), eb, in_place=True)
    assert_bitwise_equal(inplace.reshape(want.shape), want, f"{what}: in place")


@examples(80)
@given(data=datasets(dtypes=ALL_DTYPES), error_bound=bounds)
def test_elementwise_quantiser_matches_cpp(data, error_bound):
    x, desc = data
    eb = zccl_torch.resolve_error_bound(x, error_bound, "abs")
    assert_matches_cpp(x, eb, desc)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_elementwise_quantiser_edge_values(dtype, monkeypatch):
    from zccl_torch import quantize_elementwise as qe

    info = torch.finfo(dtype)
    compute_tiny = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).tiny
    special = [
        0.0,
        -0.0,
        1e-3,
        -1e-3,
        0.5,
        -0.5,
        1.5,
        -2.5,
        info.tiny,
        -info.tiny,
        info.tiny / 4,
        info.max,
        -info.max,
        float("inf"),
        float("-inf"),
        float("nan"),
    ]
    x = torch.tensor(special, dtype=torch.float64).to(dtype)
    x = torch.cat([x, torch.randn(997, dtype=torch.float64).to(dtype) * 3])
    monkeypatch.setattr(qe, "PIECE", 64)  # several pieces, the last one partial
    for eb in (0.0, compute_tiny / 2, compute_tiny, 1e-6, 1e-3, 0.25, 1.0, 1e4, 1e30):
        if eb > float(info.max):
            continue
        assert_matches_cpp(x, eb, f"{dtype} eb={eb}")
    # Values whose codes reach the limit 2^30 - 64: kept exactly on both sides.
    eb = 1e-6
    big = torch.tensor([2.0**29 * 2 * eb, -(2.0**30) * 2 * eb, 1000.0], dtype=torch.float64)
    assert_matches_cpp(big.to(dtype), eb, f"{dtype} at the code limit")
