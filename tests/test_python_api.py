"""Argument validation and documented behaviour of the Python compressor API."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers_compress import assert_bitwise_equal, assert_within_bound, make_data

import zccl_torch


@pytest.fixture
def x32():
    return make_data("sin", 1000, torch.float32, seed=0)


# --------------------------------------------------------------------------------------------
# Exports
# --------------------------------------------------------------------------------------------


def test_public_names():
    for name in zccl_torch.__all__:
        assert hasattr(zccl_torch, name), name
    assert zccl_torch.DEFAULT_CHUNK_SIZE == 5120
    assert issubclass(zccl_torch.CorruptStreamError, ValueError)


def test_stream_info_fields(x32):
    s = zccl_torch.compress(x32.reshape(10, 100), 1e-3, chunk_size=64)
    info = zccl_torch.stream_info(s)
    assert isinstance(info, zccl_torch.StreamInfo)
    assert info.dtype == torch.float32
    assert info.numel == 1000
    assert info.shape == (10, 100)
    assert info.error_bound == 1e-3
    assert info.chunk_size == 64
    assert info.num_chunks == 16
    assert info.total_bytes == s.numel()
    assert 0 < info.header_bytes < s.numel()


def test_stream_is_flat_contiguous_uint8(x32):
    s = zccl_torch.compress(x32, 1e-3)
    assert s.dtype == torch.uint8 and s.dim() == 1 and s.is_contiguous() and s.device.type == "cpu"


# --------------------------------------------------------------------------------------------
# dtype, device, layout, type of the input
# --------------------------------------------------------------------------------------------

BAD_DTYPES = [
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
]


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=str)
def test_unsupported_dtype_is_type_error_naming_it(dtype):
    t = torch.zeros(10, dtype=dtype)
    with pytest.raises(TypeError) as info:
        zccl_torch.compress(t, 1e-3)
    assert str(dtype).replace("torch.", "") in str(info.value)
    with pytest.raises(TypeError) as info:
        zccl_torch.max_compressed_size(dtype, 10)
    assert str(dtype).replace("torch.", "") in str(info.value)


@pytest.mark.parametrize("obj", [[1.0, 2.0], np.zeros(4, dtype=np.float32), 3.0, None, "x"])
def test_non_tensor_is_type_error(obj):
    with pytest.raises(TypeError):
        zccl_torch.compress(obj, 1e-3)


def test_meta_device_is_value_error():
    with pytest.raises(ValueError):
        zccl_torch.compress(torch.empty(10, device="meta"), 1e-3)


def test_sparse_is_type_error():
    with pytest.raises(TypeError):
        zccl_torch.compress(torch.zeros(10).to_sparse(), 1e-3)


# --------------------------------------------------------------------------------------------
# error_bound and mode
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eb", [-1e-3, -0.0 - 1e-300, float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("mode", ["abs", "rel"])
def test_bad_bound_is_value_error(x32, eb, mode):
    with pytest.raises(ValueError):
        zccl_torch.compress(x32, eb, mode)
    with pytest.raises(ValueError):
        zccl_torch.resolve_error_bound(x32, eb, mode)


@pytest.mark.parametrize("eb", ["1e-3", None, True, torch.tensor(1e-3), [1e-3], 1j])
def test_non_number_bound_is_type_error(x32, eb):
    with pytest.raises(TypeError):
        zccl_torch.compress(x32, eb)


def test_numeric_bound_types_accepted(x32):
    ref = zccl_torch.compress(x32, 1.0)
    assert torch.equal(zccl_torch.compress(x32, 1), ref)
    assert torch.equal(zccl_torch.compress(x32, np.float64(1.0)), ref)


def test_negative_zero_bound_is_lossless(x32):
    s = zccl_torch.compress(x32, -0.0)
    assert_bitwise_equal(x32, zccl_torch.decompress(s))


@pytest.mark.parametrize("mode", ["ABS", "Rel", "relative", "", None, "pw_rel", 1])
def test_bad_mode_is_value_error(x32, mode):
    with pytest.raises(ValueError):
        zccl_torch.compress(x32, 1e-3, mode)


def test_resolve_error_bound_matches_numpy():
    x = make_data("cumsum", 5000, torch.float32, seed=1, nonfinite=0.02)
    a = x.numpy().astype(np.float64)
    a = a[np.isfinite(a)]
    assert zccl_torch.resolve_error_bound(x, 1e-3, "rel") == 1e-3 * float(a.max() - a.min())
    assert zccl_torch.resolve_error_bound(x, 1e-3, "abs") == 1e-3
    assert zccl_torch.resolve_error_bound(x, 1e-3) == 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(
    "values",
    [
        [2.5] * 100,
        [float("nan")] * 50,
        [float("inf"), -float("inf"), float("nan")] * 20,
        [7.0, float("nan"), float("inf"), 7.0],
        [-0.0, 0.0] * 40,
        [1e30] * 33,
    ],
    ids=["constant", "all-nan", "all-nonfinite", "one-finite-value", "signed-zeros", "huge-const"],
)
def test_rel_mode_zero_range_is_lossless(dtype, values):
    x = torch.tensor(values, dtype=dtype)
    assert zccl_torch.resolve_error_bound(x, 0.1, "rel") == 0.0
    s = zccl_torch.compress(x, 0.1, "rel")
    assert zccl_torch.stream_info(s).error_bound == 0.0
    assert_bitwise_equal(x, zccl_torch.decompress(s), "rel mode, zero range")


def test_rel_mode_zero_bound_infinite_range_is_lossless():
    """float64 data spanning -max..max: the range overflows to inf in double, and 0 * inf is NaN;
    a zero relative bound must still mean lossless, not a NaN bound."""
    fi = torch.finfo(torch.float64)
    x = torch.tensor([fi.max, -fi.max, 1.0, 0.5] * 10, dtype=torch.float64)
    assert zccl_torch.resolve_error_bound(x, 0.0, "rel") == 0.0
    s = zccl_torch.compress(x, 0.0, "rel")
    assert zccl_torch.stream_info(s).error_bound == 0.0
    assert_bitwise_equal(x, zccl_torch.decompress(s), "rel 0 on an infinite range")


def test_rel_mode_empty_tensor():
    x = torch.zeros(0, dtype=torch.float64)
    assert zccl_torch.resolve_error_bound(x, 0.1, "rel") == 0.0
    y = zccl_torch.decompress(zccl_torch.compress(x, 0.1, "rel"))
    assert y.shape == (0,) and y.dtype == torch.float64


def test_rel_mode_bound_holds(x32):
    eb = zccl_torch.resolve_error_bound(x32, 1e-3, "rel")
    assert_within_bound(x32, zccl_torch.decompress(zccl_torch.compress(x32, 1e-3, "rel")), eb)


# --------------------------------------------------------------------------------------------
# chunk_size and threads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cs",
    [
        0,
        -32,
        1,
        16,
        31,
        33,
        100,
        5121,
        65537,
        65568,
        2**20,
        2**40,
        5120.0,
        "5120",
        None,
        True,
        32.5,
    ],
)
def test_bad_chunk_size_is_value_error(x32, cs):
    with pytest.raises(ValueError):
        zccl_torch.compress(x32, 1e-3, chunk_size=cs)
    with pytest.raises(ValueError):
        zccl_torch.max_compressed_size(torch.float32, 100, chunk_size=cs)


@pytest.mark.parametrize("cs", [32, 64, 96, 4096, 5120, 65504, 65536])
def test_good_chunk_sizes(x32, cs):
    s = zccl_torch.compress(x32, 1e-3, chunk_size=cs)
    assert zccl_torch.stream_info(s).chunk_size == cs
    assert_within_bound(x32, zccl_torch.decompress(s), 1e-3)


@pytest.mark.parametrize("threads", [0, -1, -8, 1.0, 2.5, "2", True, False])
def test_bad_threads_is_value_error(x32, threads):
    with pytest.raises(ValueError):
        zccl_torch.compress(x32, 1e-3, threads=threads)
    s = zccl_torch.compress(x32, 1e-3)
    with pytest.raises(ValueError):
        zccl_torch.decompress(s, threads=threads)


def test_many_threads_ok(x32):
    s = zccl_torch.compress(x32, 1e-3, threads=64, chunk_size=32)
    assert torch.equal(s, zccl_torch.compress(x32, 1e-3, threads=1, chunk_size=32))
    assert_within_bound(x32, zccl_torch.decompress(s, threads=64), 1e-3)


@pytest.mark.parametrize("progress", [1, "cb", object()])
def test_non_callable_progress_is_type_error(x32, progress):
    with pytest.raises(TypeError):
        zccl_torch.compress(x32, 1e-3, progress=progress)
    s = zccl_torch.compress(x32, 1e-3)
    with pytest.raises(TypeError):
        zccl_torch.decompress(s, progress=progress)


def test_keyword_only_options(x32):
    with pytest.raises(TypeError):
        zccl_torch.compress(x32, 1e-3, "abs", 64)  # chunk_size is keyword-only


# compress(out=...): a reused stream buffer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_compress_into_out_is_the_same_stream(dtype, threads):
    x = make_data("sin", 70007, dtype, seed=3).reshape(7, 10001)
    need = zccl_torch.max_compressed_size(dtype, x.numel(), ndim=2)
    buf = torch.full((need + 17,), 0xAB, dtype=torch.uint8)  # stale bytes must not leak in
    s = zccl_torch.compress(x, 1e-3, threads=threads, out=buf)
    assert s.data_ptr() == buf.data_ptr() and s.dtype == torch.uint8 and s.dim() == 1
    assert torch.equal(s, zccl_torch.compress(x, 1e-3, threads=threads))
    assert_within_bound(x, zccl_torch.decompress(s), 1e-3)
    # Reuse for other data and a lossless stream: each call's stream stands alone.
    y = make_data("noise", 70007, dtype, seed=4).reshape(7, 10001)
    s2 = zccl_torch.compress(y, mode="lossless", threads=threads, out=buf)
    assert_bitwise_equal(y, zccl_torch.decompress(s2))


def test_compress_into_out_empty_tensor():
    x = torch.empty(0)
    buf = torch.empty(zccl_torch.max_compressed_size(torch.float32, 0), dtype=torch.uint8)
    s = zccl_torch.compress(x, 1e-3, out=buf)
    assert zccl_torch.decompress(s).numel() == 0


def test_compress_out_validation(x32):
    need = zccl_torch.max_compressed_size(torch.float32, x32.numel())
    buf = torch.empty(need, dtype=torch.uint8)
    with pytest.raises(ValueError, match="may need"):
        zccl_torch.compress(x32, 1e-3, out=buf[:-1])
    with pytest.raises(TypeError, match="uint8"):
        zccl_torch.compress(x32, 1e-3, out=torch.empty(need, dtype=torch.int8))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        zccl_torch.compress(x32, 1e-3, out=bytearray(need))
    with pytest.raises(ValueError, match="contiguous 1-D"):
        zccl_torch.compress(x32, 1e-3, out=torch.empty(2, need, dtype=torch.uint8))
    with pytest.raises(ValueError, match="contiguous 1-D"):
        zccl_torch.compress(x32, 1e-3, out=torch.empty(2 * need, dtype=torch.uint8)[::2])
    # A buffer sharing memory with the input would corrupt it while it is read.
    raw = torch.zeros(need + x32.numel() * 4, dtype=torch.uint8)
    x = raw[: x32.numel() * 4].view(torch.float32)
    x.copy_(x32)
    with pytest.raises(ValueError, match="overlaps"):
        zccl_torch.compress(x, 1e-3, out=raw[8:])
    assert torch.equal(x, x32)  # refused before any byte was written
    # A non-contiguous input is compressed from a copy, but out would still overwrite it.
    strided = raw[: x32.numel() * 8].view(torch.float32)[::2]
    with pytest.raises(ValueError, match="overlaps"):
        zccl_torch.compress(strided, 1e-3, out=raw[x32.numel() * 4 - 8 :])


def test_decompress_chunk_index_type(x32):
    s = zccl_torch.compress(x32, 1e-3, chunk_size=64)
    for bad in (0.0, "0", None, True):
        with pytest.raises(TypeError):
            zccl_torch.decompress_chunk(s, bad)


# --------------------------------------------------------------------------------------------
# max_compressed_size
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("numel", [-1, 1.5, "10", None, True, 10.0])
def test_max_compressed_size_bad_numel(numel):
    with pytest.raises(ValueError):
        zccl_torch.max_compressed_size(torch.float32, numel)


@pytest.mark.parametrize("ndim", [-1, 65, 1000, 1.0, "1", None])
def test_max_compressed_size_bad_ndim(ndim):
    with pytest.raises(ValueError):
        zccl_torch.max_compressed_size(torch.float32, 10, ndim=ndim)


@pytest.mark.parametrize("dtype", ["float32", np.float32, float, None], ids=str)
def test_max_compressed_size_bad_dtype(dtype):
    with pytest.raises(TypeError):
        zccl_torch.max_compressed_size(dtype, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_max_compressed_size_values(dtype):
    item = torch.empty(0, dtype=dtype).element_size()
    prev = 0
    for n in [0, 1, 31, 32, 33, 5119, 5120, 5121, 10**6, 10**7 + 3]:
        for cs in (32, 5120, 65536):
            m = zccl_torch.max_compressed_size(dtype, n, chunk_size=cs)
            assert isinstance(m, int)
            # eb=0 on random bits is incompressible: the worst case holds at least the raw data
            assert m >= n * item, (n, cs, m)
        m = zccl_torch.max_compressed_size(dtype, n)
        assert m >= prev, "max_compressed_size should not shrink as numel grows"
        prev = m
    # more dims carry more shape metadata, never less room
    assert zccl_torch.max_compressed_size(dtype, 10, ndim=64) >= zccl_torch.max_compressed_size(
        dtype, 10, ndim=0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("numel", [2**50, 2**58, 2**61, 2**62, 2**63, 2**64 - 1])
def test_max_compressed_size_huge_counts_do_not_wrap(dtype, numel):
    """A huge count gives a true upper bound or a clean error, never a wrapped-around size."""
    item = torch.empty(0, dtype=dtype).element_size()
    try:
        m = zccl_torch.max_compressed_size(dtype, numel)
    except (ValueError, OverflowError):
        return
    assert m >= numel * item, (
        f"max_compressed_size({dtype}, {numel}) = {m} < raw size {numel * item}"
    )


@pytest.mark.parametrize("numel", [2**64, 2**70])
def test_max_compressed_size_beyond_uint64_is_value_error(numel):
    with pytest.raises((ValueError, OverflowError)):
        zccl_torch.max_compressed_size(torch.float32, numel)


def test_max_compressed_size_default_chunk_keyword():
    assert zccl_torch.max_compressed_size(torch.float32, 1000) == zccl_torch.max_compressed_size(
        torch.float32, 1000, chunk_size=5120, ndim=1
    )


# --------------------------------------------------------------------------------------------
# Output properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_decompress_output(dtype):
    x = make_data("noise", 777, dtype, seed=1).reshape(7, 111)
    y = zccl_torch.decompress(zccl_torch.compress(x, 1e-4))
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    assert y.device.type == "cpu" and not y.requires_grad
    c = zccl_torch.decompress_chunk(zccl_torch.compress(x, 1e-4, chunk_size=64), 0)
    assert c.dtype == dtype and c.dim() == 1 and c.numel() == 64


def test_decompress_result_is_independent_of_stream(x32):
    s = zccl_torch.compress(x32, 1e-3)
    y = zccl_torch.decompress(s)
    before = y.clone()
    s.zero_()
    assert_bitwise_equal(before, y, "decompress output aliases the stream buffer")
    assert math.isfinite(float(y.sum()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_decompress_into_out(dtype):
    x = make_data("noise", 777, dtype, seed=2)
    s = zccl_torch.compress(x, 1e-3)
    out = torch.full((7, 111), float("nan"), dtype=dtype)
    y = zccl_torch.decompress(s, out=out)
    assert y is out or y.data_ptr() == out.data_ptr()
    assert_bitwise_equal(zccl_torch.decompress(s).reshape(7, 111), out, "decode into out differs")


@pytest.mark.parametrize(
    "out, exc, words",
    [
        (torch.empty(777, dtype=torch.float64), TypeError, "dtype"),
        (torch.empty(776), ValueError, "776"),
        (torch.empty(777 * 2)[::2], ValueError, "contiguous"),
        ([0.0] * 777, TypeError, "torch.Tensor"),
    ],
    ids=["dtype", "count", "strided", "list"],
)
@pytest.mark.parametrize("kwarg", ["out", "add"])
def test_decompress_bad_out(out, exc, words, kwarg):
    """out= and add= take the same tensors and refuse the same ones, naming themselves."""
    s = zccl_torch.compress(make_data("noise", 777, torch.float32, seed=3), 1e-3)
    with pytest.raises(exc, match=words) as caught:
        zccl_torch.decompress(s, **{kwarg: out})
    assert str(caught.value).startswith(kwarg), caught.value


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_decompress_add_is_decode_then_add(dtype, threads):
    """add=: bit for bit the decoded values plus the addend (NaN where that sum is NaN), into
    a new tensor, into out, and in place (out=add); raw, constant and encoded chunks."""
    x = torch.cat(
        [
            make_data("noise", 12_000, dtype, seed=4),
            torch.full((6000,), 2.5, dtype=dtype),  # constant chunks
            torch.randn(6000, dtype=torch.float64).to(dtype) * 1e30,  # raw (incompressible)
        ]
    )
    x[::997] = float("nan")
    s = zccl_torch.compress(x, 1e-3)
    addend = make_data("sin", x.numel(), dtype, seed=5) * 100
    addend[5] = float("inf")
    addend[6] = float("-inf")
    addend[7] = float("nan")
    want = addend + zccl_torch.decompress(s)
    nan = torch.isnan(want)

    def check(got: torch.Tensor, what: str) -> None:
        assert torch.equal(torch.isnan(got), nan), what
        assert_bitwise_equal(got[~nan], want[~nan], what)

    check(zccl_torch.decompress(s, add=addend, threads=threads), "new tensor")
    out = torch.empty_like(addend)
    assert zccl_torch.decompress(s, add=addend, out=out, threads=threads) is out
    check(out, "into out")
    acc = addend.clone()
    zccl_torch.decompress(s, add=acc, out=acc, threads=threads)
    check(acc, "in place")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_decompress_add_refuses_half_streams(dtype):
    s = zccl_torch.compress(make_data("noise", 100, dtype, seed=3), 1e-3)
    with pytest.raises(TypeError, match="float32 and float64"):
        zccl_torch.decompress(s, add=torch.zeros(100, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("eb", [1e-3, 0.0], ids=["lossy", "lossless"])
def test_recompress_add_is_compress_of_the_sum(dtype, threads, eb):
    """recompress_add: byte for byte compress(decompress(s, add=a)) with the stream's chunk size
    and the addend's shape, into a new tensor and into out; encoded, constant (and repeated:
    the sum is 0 where the addend is -x'), raw and non-finite chunks."""
    x = torch.cat(
        [
            make_data("noise", 12_000, dtype, seed=6),
            torch.randn(6000, dtype=torch.float64).to(dtype) * 1e30,  # raw (incompressible)
            make_data("sin", 12_000, dtype, seed=7),
        ]
    )
    x[::991] = float("nan")
    s = zccl_torch.compress(x, 1e-3, chunk_size=1024)
    decoded = zccl_torch.decompress(s)
    addend = (make_data("sin", x.numel(), dtype, seed=8) * 100).reshape(6, -1)
    addend.view(-1)[12_000:20_000] = -decoded[12_000:20_000]  # constant chunks of +0
    addend.view(-1)[3] = float("inf")
    want = zccl_torch.compress(
        zccl_torch.decompress(s, add=addend.view(-1)).reshape(6, -1), eb, chunk_size=1024
    )
    got = zccl_torch.recompress_add(s, addend, eb, threads=threads)
    assert torch.equal(got, want)
    assert zccl_torch.stream_info(got).shape == (6, x.numel() // 6)
    out = torch.empty(
        zccl_torch.max_compressed_size(dtype, x.numel(), chunk_size=1024, ndim=2), dtype=torch.uint8
    )
    into = zccl_torch.recompress_add(s, addend, eb, threads=threads, out=out)
    assert into.data_ptr() == out.data_ptr()
    assert torch.equal(into, want)


def test_recompress_add_refuses_bad_arguments():
    """Each bad argument raises, naming it; a corrupt stream raises CorruptStreamError."""
    x = make_data("noise", 777, torch.float32, seed=9)
    s = zccl_torch.compress(x, 1e-3)
    ok = torch.zeros(777)
    with pytest.raises(TypeError, match="add has dtype"):
        zccl_torch.recompress_add(s, ok.double(), 1e-3)
    with pytest.raises(ValueError, match="add has 776 values"):
        zccl_torch.recompress_add(s, ok[:776], 1e-3)
    with pytest.raises(ValueError, match="error_bound must be finite"):
        zccl_torch.recompress_add(s, ok, -1.0)
    with pytest.raises(TypeError, match="error_bound must be a real number"):
        zccl_torch.recompress_add(s, ok, "1e-3")
    with pytest.raises(ValueError, match="out holds"):
        zccl_torch.recompress_add(s, ok, 1e-3, out=torch.empty(10, dtype=torch.uint8))
    both = torch.zeros(
        zccl_torch.max_compressed_size(torch.float32, 777) + s.numel(), dtype=torch.uint8
    )
    both[: s.numel()] = s
    with pytest.raises(ValueError, match="overlaps"):
        zccl_torch.recompress_add(both[: s.numel()], ok, 1e-3, out=both)
    half = zccl_torch.compress(x.half(), 1e-3)
    with pytest.raises(TypeError, match="float32 and float64"):
        zccl_torch.recompress_add(half, ok.half(), 1e-3)
    bad = s.clone()
    bad[-1] ^= 0x5A
    with pytest.raises(zccl_torch.CorruptStreamError):
        zccl_torch.recompress_add(bad, ok, 1e-3, threads=2)


# --------------------------------------------------------------------------------------------
# Half precision, lossless mode, format version
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_streams_are_native(dtype):
    """A half tensor keeps its dtype in the stream: raw chunks hold 2-byte values, so a stream
    of incompressible halves is about half the size of the same values widened to float32."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(50_000, generator=g).to(dtype)
    s = zccl_torch.compress(x, 1e-9)  # far below the half resolution: stored exactly
    info = zccl_torch.stream_info(s)
    assert info.dtype == dtype and info.version == zccl_torch.FORMAT_VERSION == 3
    assert s.numel() <= zccl_torch.max_compressed_size(dtype, x.numel())
    assert s.numel() < 0.55 * zccl_torch.compress(x.float(), 1e-9).numel()
    assert torch.equal(zccl_torch.decompress(s).view(torch.int16), x.view(torch.int16))


def test_lossless_mode_arguments():
    x = torch.randn(1000)
    assert zccl_torch.resolve_error_bound(x, None, "lossless") == 0.0
    assert zccl_torch.resolve_error_bound(x, 0, "lossless") == 0.0
    with pytest.raises(ValueError, match="lossless"):
        zccl_torch.compress(x, 1e-3, mode="lossless")
    with pytest.raises(TypeError, match="needs an error_bound"):
        zccl_torch.compress(x)
    with pytest.raises(TypeError, match="needs an error_bound"):
        zccl_torch.compress(x, mode="rel")
    with pytest.raises(ValueError, match="mode must be one of"):
        zccl_torch.compress(x, 1e-3, mode="lossy")
    s = zccl_torch.compress(x, mode="lossless")
    info = zccl_torch.stream_info(s)
    assert info.error_bound == 0.0 and info.lossless_codec == zccl_torch.lossless_codec()
    assert zccl_torch.lossless_codec() in ("zstd", "none")


def test_lossy_streams_report_no_lossless_codec():
    s = zccl_torch.compress(torch.randn(1000), 1e-3)
    assert zccl_torch.stream_info(s).lossless_codec == "none"


def test_backend_options_accept_lossless_mode():
    opts = zccl_torch.Options(mode="lossless")
    assert opts.to_native()["mode"] == "lossless"
    with pytest.raises(ValueError, match="mode must be one of"):
        zccl_torch.Options(mode="exact")
