"""zccl_torch.estimate_ratio: the sample of a tensor's compression ratio that algorithm="auto"
codes before choosing (csrc/compress/ratio_sample.cpp).

A whole tensor (no more values than the sample) gives exactly the ratio of its stream's chunks;
a sample of windows follows the whole stream's ratio on data alike along the buffer and sees
every part of data that is not; its size and cost stay within max_values.
"""

from __future__ import annotations

import pytest
import torch
from helpers_compress import DATA_KINDS, DTYPES, datasets, examples, make_data, positive_bounds
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch
from zccl_torch import _C

HALVES = (torch.float16, torch.bfloat16)
CODE = {torch.float32: 1, torch.float64: 2, torch.float16: 3, torch.bfloat16: 4}


def chunk_ratio(x: torch.Tensor, eb: float, chunk_size: int) -> float:
    """Bytes of x against its stream's chunks plus 8 table bytes per chunk_size values."""
    stream = zccl_torch.compress(x, eb, "abs", chunk_size=chunk_size)
    info = zccl_torch.stream_info(stream)
    chunks = stream.numel() - info.header_bytes
    return x.nbytes / (chunks + 8 * x.numel() / chunk_size)


@examples(120)
@given(data=datasets(), error_bound=positive_bounds, chunk_size=st.sampled_from((32, 1024, 5120)))
def test_a_whole_tensor_gives_its_streams_ratio(data, error_bound, chunk_size):
    x, desc = data
    if x.numel() == 0:
        assert zccl_torch.estimate_ratio(x, error_bound) == 0.0
        return
    got = zccl_torch.estimate_ratio(
        x, error_bound, chunk_size=chunk_size, max_values=max(1, x.numel())
    )
    assert got == chunk_ratio(x, error_bound, chunk_size), desc


@pytest.mark.parametrize("dtype", DTYPES + HALVES, ids=str)
@pytest.mark.parametrize(
    ("kind", "within"), [("noise", 0.05), ("uniform", 0.05), ("sin", 0.35), ("cumsum", 0.35)]
)
@pytest.mark.parametrize("eb", (1e-6, 1e-3, 1e-1))
def test_windows_follow_the_whole_stream(dtype, kind, within, eb):
    """8 windows of 8192 values (6 % of 1M) against the ratio of the whole stream's chunks:
    within 5 % on data alike along the buffer (noise); within 35 % where the windows catch
    different phases of 10 sine periods or stretches of a random walk (measured: up to 31 %)."""
    x = make_data(kind, 1 << 20, dtype, seed=3)
    estimate = zccl_torch.estimate_ratio(x, eb, "rel")
    whole = chunk_ratio(x, zccl_torch.resolve_error_bound(x, eb, "rel"), 5120)
    assert abs(estimate / whole - 1) < within, (estimate, whole)


def test_windows_see_every_part_of_the_buffer():
    """Zeros then noise: a sample of the start alone would call it constant; the windows, spread
    from start to end, give a ratio between the two halves' (each taken whole)."""
    n = 1 << 20
    zeros = torch.zeros(n // 2)
    noisy = torch.randn(n // 2, generator=torch.Generator().manual_seed(5))
    x = torch.cat([zeros, noisy])
    eb = 1e-3
    estimate = zccl_torch.estimate_ratio(x, eb)
    quiet = zccl_torch.estimate_ratio(zeros, eb, max_values=n)
    loud = zccl_torch.estimate_ratio(noisy, eb, max_values=n)
    assert loud < estimate < quiet, (loud, estimate, quiet)
    # the harmonic mean of the halves is the whole buffer's ratio; the sample lands near it
    whole = 2 / (1 / quiet + 1 / loud)
    assert abs(estimate / whole - 1) < 0.10, (estimate, whole)
    start_only = zccl_torch.estimate_ratio(x[:65536], eb, max_values=65536)
    assert start_only > 10 * estimate


@pytest.mark.parametrize(
    ("numel", "max_values", "windows", "per_window"),
    [
        (10_000, 10_000, 1, 10_000),  # whole
        (10_000, 9_999, 8, 1248),  # 9999 / 8 rounded down to a block
        (100_000, 4096, 4, 1024),  # at least 1024 values per window
        (100_000, 1500, 1, 1472),
        (100_000, 5, 1, 32),  # at least one block
        (1 << 22, 65536, 8, 8192),
    ],
)
def test_sample_size(numel, max_values, windows, per_window):
    x = make_data("noise", numel, torch.float32, seed=1)
    raw, _, values = _C.sample_ratio(x, CODE[torch.float32], 1e-3, 5120, max_values)
    assert values == windows * per_window
    assert raw == 4 * values


@pytest.mark.parametrize("dtype", DTYPES + HALVES, ids=str)
def test_what_does_not_compress_is_below_one_and_constants_far_above(dtype):
    # A bound below the values' spacing: every chunk is stored raw.
    noise = make_data("noise", 50_000, dtype, seed=2)
    assert zccl_torch.estimate_ratio(noise, 1e-12) < 1.0
    assert zccl_torch.estimate_ratio(torch.full((50_000,), 3.0, dtype=dtype), 1e-3) > 100


@pytest.mark.parametrize("kind", DATA_KINDS)
def test_rel_and_lossless_resolve_on_the_whole_tensor(kind):
    x = make_data(kind, 30_000, torch.float32, seed=4)
    eb = zccl_torch.resolve_error_bound(x, 1e-3, "rel")
    assert zccl_torch.estimate_ratio(x, 1e-3, "rel") == zccl_torch.estimate_ratio(x, eb)
    assert zccl_torch.estimate_ratio(x, mode="lossless") == zccl_torch.estimate_ratio(x, 0.0)


def test_shape_and_strides_do_not_matter():
    x = make_data("sin", 64 * 1024, torch.float64, seed=0).reshape(256, 256)
    flat = zccl_torch.estimate_ratio(x.reshape(-1).contiguous(), 1e-4, max_values=5000)
    assert zccl_torch.estimate_ratio(x, 1e-4, max_values=5000) == flat
    assert zccl_torch.estimate_ratio(x.t().contiguous().t(), 1e-4, max_values=5000) == flat


@pytest.mark.parametrize(
    ("call", "error", "needle"),
    [
        (lambda x: zccl_torch.estimate_ratio(x, 1e-3, max_values=0), ValueError, "max_values"),
        (lambda x: zccl_torch.estimate_ratio(x, 1e-3, max_values=True), ValueError, "max_values"),
        (lambda x: zccl_torch.estimate_ratio(x.int(), 1e-3), TypeError, "float32"),
        (lambda x: zccl_torch.estimate_ratio(x, -1.0), ValueError, "error_bound"),
        (lambda x: zccl_torch.estimate_ratio(x, 1e-3, "relative"), ValueError, "mode"),
        (lambda x: zccl_torch.estimate_ratio(x, 1e-3, chunk_size=33), ValueError, "chunk_size"),
        (lambda x: zccl_torch.estimate_ratio(x.numpy(), 1e-3), TypeError, "torch.Tensor"),
        (lambda x: zccl_torch.estimate_ratio(x.to_sparse(), 1e-3), TypeError, "dense"),
    ],
)
def test_bad_arguments_raise(call, error, needle):
    with pytest.raises(error, match=needle):
        call(torch.randn(100))
