"""Properties of the fZ-light compressor through its Python API (zccl_torch.compress & co).

The contract: every finite x decodes to x' with abs(x.double() - x'.double()) <= eb, checked with
the real arithmetic and no tolerance; NaN stays NaN, +-Inf survive; eb == 0 is bit-exact; the
stream never exceeds max_compressed_size; the format is deterministic whatever the thread count.
"""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np
import pytest
import torch
from helpers_compress import (
    CHUNK_SIZES,
    DATA_KINDS,
    DTYPES,
    HALF_DTYPES,
    SPECIAL_SIZES,
    assert_bitwise_equal,
    assert_within_bound,
    bounds,
    check_stream_size,
    datasets,
    examples,
    independent_abs_bound,
    make_data,
    num_chunks,
    small_multi_chunk_sizes,
)
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch


def roundtrip(x, error_bound, mode="abs", *, chunk_size=5120, threads=None, what=""):
    """Compresses, checks the stream header and size, decompresses and checks the bound."""
    eb = independent_abs_bound(x, error_bound, mode)
    assert zccl_torch.resolve_error_bound(x, error_bound, mode) == eb, what
    if not math.isfinite(eb):
        # rel mode on a float64 range that overflows double: refusing is acceptable; accepting
        # must still give finite values back (assert_within_bound checks that)
        try:
            stream = zccl_torch.compress(x, error_bound, mode, chunk_size=chunk_size)
        except ValueError:
            return None, None, eb
        y = zccl_torch.decompress(stream)
        assert_within_bound(x, y, eb, what)
        return stream, y, eb
    stream = zccl_torch.compress(x, error_bound, mode, chunk_size=chunk_size, threads=threads)
    check_stream_size(stream, x.dtype, x.numel(), chunk_size, x.dim(), what)
    info = zccl_torch.stream_info(stream)
    assert info.dtype == x.dtype, what
    assert info.numel == x.numel(), what
    assert info.shape == tuple(x.shape), what
    assert info.error_bound == eb, what
    assert info.chunk_size == chunk_size, what
    assert info.num_chunks == num_chunks(x.numel(), chunk_size), what
    assert info.total_bytes == stream.numel(), what
    assert 0 < info.header_bytes <= stream.numel(), what
    y = zccl_torch.decompress(stream, threads=threads)
    assert_within_bound(x, y, eb, what)
    return stream, y, eb


# --------------------------------------------------------------------------------------------
# The bound, over data kinds x sizes x bounds x dtypes x chunk sizes x modes
# --------------------------------------------------------------------------------------------


@examples(300)
@given(
    data=datasets(),
    error_bound=bounds,
    mode=st.sampled_from(("abs", "rel")),
    chunk_size=st.sampled_from(CHUNK_SIZES),
)
def test_roundtrip_within_bound(data, error_bound, mode, chunk_size):
    x, desc = data
    roundtrip(
        x,
        error_bound,
        mode,
        chunk_size=chunk_size,
        what=f"{desc} eb={error_bound!r} mode={mode} chunk_size={chunk_size}",
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SPECIAL_SIZES)
@pytest.mark.parametrize("kind", ("sin", "noise", "mixed"))
def test_special_sizes(dtype, n, kind):
    x = make_data(kind, n, dtype, seed=n, nonfinite=0.01)
    for eb in (0.0, 1e-12, 1e-3, 1e6):
        roundtrip(x, eb, what=f"{kind} n={n} {dtype} eb={eb}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", DATA_KINDS)
@pytest.mark.parametrize("eb", (1e-12, 1e-6, 1e-2, 1.0, 1e6))
def test_every_kind_every_bound(dtype, kind, eb):
    x = make_data(kind, 4099, dtype, seed=7, scale=1e3, nonfinite=0.01)
    roundtrip(x, eb, chunk_size=1024, what=f"{kind} {dtype} eb={eb}")


@examples(60)
@given(data=datasets(kinds=("random_bits", "mixed", "denormal")), error_bound=bounds)
def test_arbitrary_bit_patterns(data, error_bound):
    """NaN payloads, +-Inf, subnormals, finfo.max: stored exactly or within the bound."""
    x, desc = data
    roundtrip(x, error_bound, chunk_size=64, what=f"{desc} eb={error_bound!r}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lossless_is_bit_exact(dtype):
    x = make_data("random_bits", 20_000, dtype, seed=3)
    x[:4] = torch.tensor([0.0, -0.0, float("nan"), -float("nan")], dtype=dtype)
    _, y, _ = roundtrip(x, 0.0)
    assert_bitwise_equal(x, y, "eb=0")
    # relative mode with bound 0 is lossless too
    _, y2, eb = roundtrip(x, 0.0, "rel")
    assert eb == 0.0
    assert_bitwise_equal(x, y2, "rel eb=0")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonfinite_preserved(dtype):
    n = 1000
    x = make_data("sin", n, dtype, seed=1)
    x[::7] = float("nan")
    x[3::11] = float("inf")
    x[5::13] = -float("inf")
    x[-1] = float("nan")
    x[0] = float("inf")
    for eb in (1e-6, 0.5, 1e6):
        _, y, _ = roundtrip(x, eb, chunk_size=32)
        assert torch.equal(torch.isnan(x), torch.isnan(y))
        inf = torch.isinf(x)
        assert torch.equal(x[inf], y[inf])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eb", (1e-12, 1e-3, 1.0, 1e6, 1e30, 1e300))
def test_extreme_magnitudes(dtype, eb):
    """Values whose quantisation code would overflow, and values near finfo.max where the
    reconstruction itself could overflow, must come back exactly or within the bound."""
    fi = torch.finfo(dtype)
    vals = [
        fi.max,
        -fi.max,
        fi.max * 0.999,
        fi.tiny,
        -fi.tiny,
        fi.tiny / 4,
        1e30,
        -1e30,
        0.0,
        -0.0,
        1.0,
        fi.max / 2,
        -fi.max / 3,
    ]
    x = torch.tensor(vals * 40, dtype=dtype)
    roundtrip(x, eb, chunk_size=32, what=f"{dtype} eb={eb}")
    # the same values in a smooth neighbourhood (prediction from a huge neighbour)
    y = torch.linspace(-fi.max, fi.max, 1000, dtype=dtype)
    roundtrip(y, eb, chunk_size=64, what=f"linspace(-max,max) {dtype} eb={eb}")


def test_rel_mode_with_infinite_range():
    """float64 data spanning -max..max has an infinite range in double; rel mode must still
    either work within its (infinite) bound with finite values back, or refuse with ValueError."""
    fi = torch.finfo(torch.float64)
    x = torch.tensor([fi.max, -fi.max, 1.0, 0.0] * 16, dtype=torch.float64)
    try:
        stream = zccl_torch.compress(x, 1e-3, "rel")
    except ValueError:
        return
    y = zccl_torch.decompress(stream)
    assert torch.isfinite(y).all(), y


def test_values_beyond_quantisation_range_tiny_bound():
    """1e30-scale values at eb=1e-12 give codes far beyond any integer type."""
    for dtype in DTYPES:
        x = make_data("huge", 3001, dtype, seed=5)
        x[100:200] = 1.0  # a smooth stretch next to unquantisable values
        roundtrip(x, 1e-12, chunk_size=64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eb", (0.5, 1e-3, 3.0))
def test_codes_near_the_integer_limit(dtype, eb):
    """Codes near +-2**30 (the Lorenzo deltas then need 31 bits), alternating and smooth."""
    bin_ = 2 * eb
    for k in (2**30 - 65, 2**30 - 64, 2**30 - 63, 2**30, 2**31, 2**24 + 1, 2**24 - 1):
        alt = torch.tensor([k * bin_, -k * bin_] * 48 + [k * bin_] * 7, dtype=dtype)
        roundtrip(alt, eb, chunk_size=32, what=f"alternating +-{k}*bin eb={eb}")
        ramp = (k * bin_ + torch.arange(-300, 300, dtype=torch.float64) * eb * 0.77).to(dtype)
        roundtrip(ramp, eb, chunk_size=64, what=f"ramp around {k}*bin eb={eb}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tiny_bounds_at_the_normal_limit(dtype):
    """Bounds around the smallest normal number of the dtype, with data on the same scale."""
    tiny = torch.finfo(dtype).tiny
    bounds_ = (
        tiny * 0.5,
        tiny * (1 - 2**-20),
        tiny,
        tiny * 1.5,
        tiny * 1e3,
        2 * tiny,
        5e-324,
        1e-300,
    )
    for eb in bounds_:
        for kind in ("denormal", "noise", "sin"):
            x = make_data(kind, 999, dtype, seed=3, scale=tiny * 100)
            x[::50] = 1.0
            roundtrip(x, eb, chunk_size=64, what=f"{kind} eb={eb!r}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_outliers_at_chunk_and_block_edges(dtype):
    cs = 65536
    x = make_data("sin", 2 * cs + 5, dtype, seed=1)
    for i in (0, 31, 32, cs - 33, cs - 32, cs - 1, cs, cs + 1, 2 * cs - 1, 2 * cs, 2 * cs + 4):
        x[i] = float("nan") if i % 2 else 1e30
    for chunk in (32, 64, cs):
        roundtrip(x, 1e-4, chunk_size=chunk, what=f"chunk_size={chunk}")
    # every value of a full 65536 chunk an outlier
    y = torch.full((cs + 3,), float("nan"), dtype=dtype)
    y[::3] = float("inf")
    roundtrip(y, 1e-4, chunk_size=cs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flush_denormal_mode(dtype):
    """With the FPU flushing subnormals (torch.set_flush_denormal), the bound still holds and
    a stream decodes to the same values as without flushing."""
    x = make_data("mixed", 5000, dtype, seed=2, nonfinite=0.01)
    x[:1000] = make_data("denormal", 1000, dtype, seed=3)
    tiny = torch.finfo(dtype).tiny
    plain = {eb: zccl_torch.compress(x, eb, chunk_size=64, threads=1) for eb in (tiny, 1e-3)}
    if not torch.set_flush_denormal(True):
        pytest.skip("flush-denormal mode not supported on this CPU")
    try:
        out = {}
        for eb in (tiny, 1e-3):
            s = zccl_torch.compress(x, eb, chunk_size=64, threads=1)
            out[eb] = (
                zccl_torch.decompress(s, threads=1),
                zccl_torch.decompress(plain[eb], threads=1),
            )
    finally:
        torch.set_flush_denormal(False)
    for eb, (y, y_plain) in out.items():
        assert_within_bound(x, y, eb, f"eb={eb!r}: compressed and decompressed with flush-denormal")
        assert_within_bound(x, y_plain, eb, f"eb={eb!r}: decompressed with flush-denormal")


def test_concurrent_calls_from_python_threads():
    """compress/decompress release the GIL; concurrent calls must not share state."""
    from concurrent.futures import ThreadPoolExecutor

    inputs = [
        make_data(k, 20_000 + i, DTYPES[i % 2], seed=i, nonfinite=0.01)
        for i, k in enumerate(("sin", "noise", "mixed", "cumsum", "random_bits", "steps"))
    ]
    serial = [zccl_torch.compress(x, 1e-3, chunk_size=1024) for x in inputs]

    def work(i):
        s = zccl_torch.compress(inputs[i], 1e-3, chunk_size=1024, threads=2)
        return s, zccl_torch.decompress(s, threads=2)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, list(range(len(inputs))) * 3))
    for k, (s, y) in enumerate(results):
        i = k % len(inputs)
        assert torch.equal(s, serial[i]), f"input {i}: concurrent stream differs"
        assert_within_bound(inputs[i], y, 1e-3, f"input {i}")


def test_progress_callback_may_reenter():
    """A progress hook that itself compresses and decompresses (e.g. a nested collective)."""
    x = make_data("sin", 320, torch.float32, seed=1)
    inner = make_data("noise", 100, torch.float64, seed=2)
    seen = []

    def progress(done, total):
        assert isinstance(done, int) and isinstance(total, int)
        y = zccl_torch.decompress(
            zccl_torch.compress(inner, 1e-6, chunk_size=32, progress=lambda d, t: None)
        )
        assert_within_bound(inner, y, 1e-6, "nested")
        seen.append(done)

    s = zccl_torch.compress(x, 1e-3, chunk_size=32, progress=progress)
    assert seen == list(range(1, 11))
    assert torch.equal(s, zccl_torch.compress(x, 1e-3, chunk_size=32))


# --------------------------------------------------------------------------------------------
# Threads: deterministic format, any thread count decodes any stream
# --------------------------------------------------------------------------------------------


@examples(40)
@given(
    data=datasets(size_strategy=small_multi_chunk_sizes),
    error_bound=bounds,
    chunk_size=st.sampled_from((32, 64, 5120)),
)
def test_thread_counts_deterministic_and_interchangeable(data, error_bound, chunk_size):
    x, desc = data
    what = f"{desc} eb={error_bound!r} chunk_size={chunk_size}"
    streams = {
        t: zccl_torch.compress(x, error_bound, chunk_size=chunk_size, threads=t)
        for t in (1, 2, 3, None)
    }
    for t in (2, 3, None):
        assert torch.equal(streams[t], streams[1]), (
            f"{what}: stream compressed with threads={t} differs from threads=1 "
            f"({streams[t].numel()} vs {streams[1].numel()} bytes)"
        )
    reference = zccl_torch.decompress(streams[1], threads=1)
    assert_within_bound(x, reference, error_bound, what)
    for tc in (1, 3):
        for td in (1, 2, 3, None):
            y = zccl_torch.decompress(streams[tc], threads=td)
            assert_bitwise_equal(
                reference, y, f"{what}: compress threads={tc}, decompress threads={td}"
            )


def test_threads_many_chunks():
    x = make_data("cumsum", 200_003, torch.float32, seed=11, nonfinite=0.001)
    s1 = zccl_torch.compress(x, 1e-3, threads=1, chunk_size=1024)
    s3 = zccl_torch.compress(x, 1e-3, threads=3, chunk_size=1024)
    assert torch.equal(s1, s3)
    y1 = zccl_torch.decompress(s3, threads=1)
    y3 = zccl_torch.decompress(s1, threads=3)
    assert_bitwise_equal(y1, y3)
    assert_within_bound(x, y1, 1e-3)


# --------------------------------------------------------------------------------------------
# Pipelined mode (progress callback)
# --------------------------------------------------------------------------------------------


def _check_progress_calls(calls, expected_chunks, what):
    if expected_chunks == 0:
        assert all(total == 0 for _, total in calls), f"{what}: {calls}"
        return
    assert calls, f"{what}: progress never called for {expected_chunks} chunks"
    totals = {total for _, total in calls}
    assert totals == {expected_chunks}, f"{what}: totals {totals}, expected {expected_chunks}"
    done = [d for d, _ in calls]
    assert all(a < b for a, b in itertools.pairwise(done)), f"{what}: done not increasing: {done}"
    assert 0 <= done[0] and done[-1] == expected_chunks, f"{what}: done = {done}"


@examples(40)
@given(
    data=datasets(size_strategy=small_multi_chunk_sizes),
    error_bound=bounds,
    chunk_size=st.sampled_from((32, 64, 5120)),
)
def test_progress_pipeline_matches_plain(data, error_bound, chunk_size):
    x, desc = data
    what = f"{desc} eb={error_bound!r} chunk_size={chunk_size}"
    plain = zccl_torch.compress(x, error_bound, chunk_size=chunk_size)
    calls = []
    piped = zccl_torch.compress(
        x, error_bound, chunk_size=chunk_size, progress=lambda d, t: calls.append((d, t))
    )
    nch = num_chunks(x.numel(), chunk_size)
    _check_progress_calls(calls, nch, what + " (compress)")
    assert torch.equal(plain, piped), f"{what}: pipelined stream differs from the plain one"

    ref = zccl_torch.decompress(plain)
    dcalls = []
    y = zccl_torch.decompress(plain, progress=lambda d, t: dcalls.append((d, t)))
    _check_progress_calls(dcalls, nch, what + " (decompress)")
    assert_bitwise_equal(ref, y, f"{what}: pipelined decompress")
    assert_within_bound(x, y, error_bound, what)


class _StopError(Exception):
    pass


@pytest.mark.parametrize("threads", (2, 3))
@pytest.mark.parametrize("n", (0, 31, 32 * 7 + 5, 5120 * 9 + 1))
def test_threaded_pipeline_matches_plain_and_polls_from_the_caller(threads, n):
    """threads > 1 with progress: chunks coded in parallel, the calling thread alone runs the
    hook (the collectives poll MPI there), and the stream is the plain one."""
    x = make_data("noise", n, torch.float32, seed=n)
    chunk = 32 if n < 5120 else 5120
    plain = zccl_torch.compress(x, 1e-3, chunk_size=chunk, threads=1)
    caller = threading.get_ident()
    for direction in ("compress", "decompress"):
        calls = []

        def progress(done, total, calls=calls):
            calls.append((done, total, threading.get_ident()))

        if direction == "compress":
            got = zccl_torch.compress(x, 1e-3, chunk_size=chunk, threads=threads, progress=progress)
            assert torch.equal(got, plain), f"threads={threads}: stream differs"
        else:
            y = zccl_torch.decompress(plain, threads=threads, progress=progress)
            assert_bitwise_equal(y, zccl_torch.decompress(plain, threads=1), "threaded decode")
        nch = num_chunks(n, chunk)
        assert all(t == caller for *_, t in calls), "progress ran on another thread"
        assert all(total == nch for _, total, _ in calls), calls
        done = [d for d, _, _ in calls]
        assert done == sorted(done) and all(0 < d <= nch for d in done), done
        if nch >= threads:
            assert calls, f"{direction}: progress never called"
            # The calling thread coded only its share: the other threads did the rest.
            assert len(calls) < nch, f"{direction}: {len(calls)} calls for {nch} chunks"


@pytest.mark.parametrize("direction", ("compress", "decompress"))
def test_threaded_pipeline_exception_propagates(direction):
    x = make_data("sin", 32 * 64, torch.float64, seed=2)
    stream = zccl_torch.compress(x, 1e-4, chunk_size=32)

    def progress(done, total):
        raise _StopError("stop")

    with pytest.raises(_StopError, match="stop"):
        if direction == "compress":
            zccl_torch.compress(x, 1e-4, chunk_size=32, threads=2, progress=progress)
        else:
            zccl_torch.decompress(stream, threads=2, progress=progress)
    assert torch.equal(zccl_torch.compress(x, 1e-4, chunk_size=32, threads=2), stream)


@pytest.mark.parametrize("fail_at", (1, 2, 5))
@pytest.mark.parametrize("direction", ("compress", "decompress"))
def test_progress_exception_propagates(fail_at, direction):
    x = make_data("sin", 32 * 10, torch.float64, seed=2)
    stream = zccl_torch.compress(x, 1e-4, chunk_size=32)
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == fail_at:
            raise _StopError(f"stop at call {fail_at}")

    with pytest.raises(_StopError, match=f"stop at call {fail_at}"):
        if direction == "compress":
            zccl_torch.compress(x, 1e-4, chunk_size=32, progress=progress)
        else:
            zccl_torch.decompress(stream, progress=progress)
    assert len(calls) == fail_at, "progress called again after it raised"
    # the library is still usable afterwards and gives the same result
    assert torch.equal(zccl_torch.compress(x, 1e-4, chunk_size=32), stream)
    assert_within_bound(x, zccl_torch.decompress(stream), 1e-4)


def test_progress_exception_types_preserved():
    x = make_data("noise", 200, torch.float32, seed=2)
    for exc in (KeyError("k"), ZeroDivisionError("z"), RuntimeError("r"), ValueError("v")):

        def progress(done, total, exc=exc):
            raise exc

        with pytest.raises(type(exc)) as info:
            zccl_torch.compress(x, 1e-3, chunk_size=32, progress=progress)
        assert info.value is exc or str(exc) in str(info.value)


# --------------------------------------------------------------------------------------------
# Random access: decompress_chunk
# --------------------------------------------------------------------------------------------


@examples(40)
@given(
    data=datasets(size_strategy=small_multi_chunk_sizes),
    error_bound=bounds,
    chunk_size=st.sampled_from((32, 64, 5120)),
)
def test_decompress_chunk_matches_full(data, error_bound, chunk_size):
    x, desc = data
    what = f"{desc} eb={error_bound!r} chunk_size={chunk_size}"
    stream = zccl_torch.compress(x, error_bound, chunk_size=chunk_size)
    full = zccl_torch.decompress(stream).reshape(-1)
    nch = zccl_torch.stream_info(stream).num_chunks
    assert nch == num_chunks(x.numel(), chunk_size)
    pieces = []
    for i in range(nch):
        c = zccl_torch.decompress_chunk(stream, i)
        assert c.dim() == 1, what
        assert_bitwise_equal(full[i * chunk_size : (i + 1) * chunk_size], c, f"{what}: chunk {i}")
        pieces.append(c)
    if pieces:
        assert_bitwise_equal(full, torch.cat(pieces), what)


@pytest.mark.parametrize("n", (0, 1, 100, 5121))
@pytest.mark.parametrize("offset", (0, 1, 1000))
def test_decompress_chunk_out_of_range(n, offset):
    stream = zccl_torch.compress(make_data("noise", n, torch.float32), 1e-3, chunk_size=64)
    nch = num_chunks(n, 64)
    with pytest.raises((IndexError, ValueError)):
        zccl_torch.decompress_chunk(stream, nch + offset)


@pytest.mark.parametrize("bad", (-1, -(2**63), 2**40, 2**63, 2**64, 2**70))
def test_decompress_chunk_extreme_index(bad):
    stream = zccl_torch.compress(make_data("noise", 200, torch.float32), 1e-3, chunk_size=64)
    with pytest.raises((IndexError, ValueError)):
        zccl_torch.decompress_chunk(stream, bad)


# --------------------------------------------------------------------------------------------
# Shapes and layouts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_dim_scalar(dtype):
    x = torch.tensor(1.25, dtype=dtype)
    try:
        stream = zccl_torch.compress(x, 1e-3)
    except (ValueError, TypeError):
        pytest.skip("0-d tensors are refused with a clean error")
    assert zccl_torch.stream_info(stream).shape == ()
    y = zccl_torch.decompress(stream)
    assert y.shape == torch.Size([]), f"0-d tensor came back with shape {tuple(y.shape)}"
    assert_within_bound(x, y, 1e-3)
    check_stream_size(stream, dtype, 1, 5120, 0)


@pytest.mark.parametrize(
    "shape",
    [
        (0,),
        (5, 0),
        (0, 3, 4),
        (2, 3),
        (3, 1, 7),
        (1, 1, 1, 1),
        (33, 31),
        (2, 3, 4, 5, 6),
        (70, 80),
        (1,) * 64,
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_shapes_restored(shape, dtype):
    n = math.prod(shape)
    x = make_data("sin", n, dtype, seed=n).reshape(shape)
    for eb in (0.0, 1e-4):
        _, y, _ = roundtrip(x, eb, chunk_size=64, what=f"shape={shape}")
        assert y.shape == x.shape


def test_too_many_dims():
    x = torch.zeros([1] * 65)
    try:
        stream = zccl_torch.compress(x, 1e-3)
    except ValueError:
        return
    assert zccl_torch.decompress(stream).shape == x.shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_inputs(dtype):
    base = make_data("cumsum", 60 * 70, dtype, seed=4, nonfinite=0.01).reshape(60, 70)
    views = {
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "flipped": base.flip(0),
        "expanded": base[0:1, :].expand(5, 70),
        "storage offset": base.reshape(-1)[13:4013],
        "row slice": base[7:9],
        "permuted3d": base.reshape(6, 10, 70).permute(2, 0, 1),
    }
    for name, v in views.items():
        for eb in (0.0, 1e-3):
            s_view = zccl_torch.compress(v, eb, chunk_size=64)
            s_contig = zccl_torch.compress(v.contiguous(), eb, chunk_size=64)
            assert torch.equal(s_view, s_contig), f"{name}: stream differs from contiguous copy"
            y = zccl_torch.decompress(s_view)
            assert y.is_contiguous()
            assert_within_bound(v, y, eb, name)


def test_input_not_modified():
    x = make_data("mixed", 5000, torch.float32, seed=9, nonfinite=0.05)
    before = x.clone()
    stream = zccl_torch.compress(x, 1e-2, chunk_size=64, threads=2)
    assert_bitwise_equal(before, x, "compress modified its input")
    sbefore = stream.clone()
    zccl_torch.decompress(stream)
    zccl_torch.decompress_chunk(stream, 0)
    zccl_torch.stream_info(stream)
    assert torch.equal(sbefore, stream), "decompress modified its stream"


def test_requires_grad_input():
    x = torch.linspace(0, 1, 1000, dtype=torch.float64, requires_grad=True)
    y = zccl_torch.decompress(zccl_torch.compress(x, 1e-6))
    assert not y.requires_grad
    assert_within_bound(x.detach(), y, 1e-6)


def test_deterministic_repeat():
    x = make_data("noise", 30_000, torch.float64, seed=12, nonfinite=0.01)
    a = zccl_torch.compress(x, 1e-5, "rel")
    b = zccl_torch.compress(x.clone(), 1e-5, "rel")
    assert torch.equal(a, b)


def test_stream_accepted_as_view():
    """A stream that is a view (slice of a bigger buffer, 2-D) decodes like the original."""
    x = make_data("sin", 3000, torch.float32, seed=1)
    s = zccl_torch.compress(x, 1e-4, chunk_size=64)
    buf = torch.zeros(s.numel() + 10, dtype=torch.uint8)
    buf[5 : 5 + s.numel()] = s
    view = buf[5 : 5 + s.numel()]
    assert_bitwise_equal(zccl_torch.decompress(s), zccl_torch.decompress(view))
    strided = torch.zeros(2 * s.numel(), dtype=torch.uint8)
    strided[::2] = s
    assert_bitwise_equal(zccl_torch.decompress(s), zccl_torch.decompress(strided[::2]))


# --------------------------------------------------------------------------------------------
# The stream actually compresses (the product's purpose; loose sanity floors)
# --------------------------------------------------------------------------------------------


def test_compresses_compressible_data():
    n = 100_000
    z = torch.zeros(n, dtype=torch.float32)
    s = zccl_torch.compress(z, 1e-3)
    assert z.numel() * 4 / s.numel() > 20, f"zeros: {s.numel()} bytes for {n} float32"
    smooth = make_data("sin", n, torch.float32, seed=1)
    s = zccl_torch.compress(smooth, 1e-2, "rel")
    assert smooth.numel() * 4 / s.numel() > 2, f"smooth: {s.numel()} bytes for {n} float32"


def test_incompressible_within_max_size():
    for dtype in DTYPES:
        for cs in CHUNK_SIZES:
            x = make_data("random_bits", 70_001, dtype, seed=cs)
            for eb in (0.0, 1e-12, 1e6):
                roundtrip(x, eb, chunk_size=cs, what=f"{dtype} cs={cs} eb={eb}")


# --------------------------------------------------------------------------------------------
# One large case (10**7 + 3 float32), once
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_large_float32():
    n = 10**7 + 3
    t = torch.arange(n, dtype=torch.float64)
    x = (torch.sin(t * 1e-4) * 100 + torch.cos(t * 3e-3)).to(torch.float32)
    x[::1_000_003] = float("nan")
    x[17::2_000_003] = float("inf")
    x[5_000_000:5_000_100] = 1e30
    eb = 1e-3
    stream = zccl_torch.compress(x, eb, threads=2)
    check_stream_size(stream, x.dtype, n, 5120, 1, "large")
    assert zccl_torch.stream_info(stream).num_chunks == num_chunks(n, 5120)
    y = zccl_torch.decompress(stream, threads=2)
    assert_within_bound(x, y, eb, "large")
    assert x.numel() * 4 / stream.numel() > 2
    last = zccl_torch.decompress_chunk(stream, num_chunks(n, 5120) - 1)
    assert last.numel() == n - (num_chunks(n, 5120) - 1) * 5120
    assert_bitwise_equal(y[-last.numel() :], last)


# Hypothesis generates floats itself here (not from a seed), so it can shrink to a minimal value.
@examples(100)
@given(
    values=st.lists(
        st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=80
    ),
    error_bound=bounds,
    mode=st.sampled_from(("abs", "rel")),
)
def test_float32_values_shrinkable(values, error_bound, mode):
    x = torch.tensor(values, dtype=torch.float32)
    roundtrip(x, error_bound, mode, chunk_size=32, what=f"values={values!r} eb={error_bound!r}")


@examples(100)
@given(
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=80),
    error_bound=bounds,
    mode=st.sampled_from(("abs", "rel")),
)
def test_float64_values_shrinkable(values, error_bound, mode):
    x = torch.tensor(values, dtype=torch.float64)
    roundtrip(x, error_bound, mode, chunk_size=32, what=f"values={values!r} eb={error_bound!r}")


def test_stream_info_rel_bound_matches_numpy():
    """stream_info agrees with the independent numpy bound for rel mode."""
    x = make_data("cumsum", 4000, torch.float32, seed=3, nonfinite=0.05)
    a = x.numpy().astype(np.float64)
    a = a[np.isfinite(a)]
    eb = 1e-4 * float(a.max() - a.min())
    s = zccl_torch.compress(x, 1e-4, "rel")
    assert zccl_torch.stream_info(s).error_bound == eb


# --------------------------------------------------------------------------------------------
# Half precision (native float16/bfloat16 streams), lossless mode, constant chunks and repeats
# --------------------------------------------------------------------------------------------

ALL_DTYPES = (*DTYPES, *HALF_DTYPES)


@examples(200)
@given(
    data=datasets(dtypes=HALF_DTYPES),
    error_bound=bounds,
    mode=st.sampled_from(("abs", "rel")),
    chunk_size=st.sampled_from(CHUNK_SIZES),
)
def test_half_roundtrip_within_bound(data, error_bound, mode, chunk_size):
    """The bound holds in float64 against the half input, for the half values decoded."""
    x, desc = data
    roundtrip(
        x,
        error_bound,
        mode,
        chunk_size=chunk_size,
        what=f"{desc} eb={error_bound!r} mode={mode} chunk_size={chunk_size}",
    )


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("n", SPECIAL_SIZES)
def test_half_special_sizes(dtype, n):
    x = make_data("sin", n, dtype, seed=n, nonfinite=0.01)
    for eb in (0.0, 1e-9, 1e-3, 1.0, 1e6):
        roundtrip(x, eb, what=f"half n={n} {dtype} eb={eb}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_lossless_mode_bit_exact_for_every_pattern(dtype):
    x = make_data("random_bits", 20_000, dtype, seed=11)
    x[:4] = torch.tensor([0.0, -0.0, float("nan"), -float("nan")], dtype=dtype)
    smooth = make_data("sin", 20_000, dtype, seed=12)
    for t in (x, smooth, torch.cat([smooth, x, smooth])):
        for threads in (1, 2):
            s = zccl_torch.compress(t, mode="lossless", threads=threads, chunk_size=1024)
            assert_bitwise_equal(t, zccl_torch.decompress(s), f"lossless {dtype}")
            check_stream_size(s, dtype, t.numel(), 1024, 1, f"lossless {dtype}")
    if zccl_torch.lossless_codec() == "zstd":
        s = zccl_torch.compress(smooth, mode="lossless")
        assert s.numel() < smooth.numel() * smooth.element_size(), "zstd gained nothing"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("value", [0.0, -0.0, 0.3, float("nan"), -float("inf")])
def test_constant_tensors_compress_past_1000x(dtype, value):
    """An all-zero or constant tensor (any value, NaN included) costs a few bytes per chunk:
    at least 1000x in every mode, decoded bit for bit."""
    t = torch.full((1 << 20,), value, dtype=dtype)
    nbytes = t.numel() * t.element_size()
    for kwargs in (
        {"error_bound": 1e-3},
        {"error_bound": 1e-3, "mode": "rel"},
        {"mode": "lossless"},
    ):
        s = zccl_torch.compress(t, **kwargs)
        assert_bitwise_equal(t, zccl_torch.decompress(s), f"constant {value} {kwargs}")
        assert nbytes / s.numel() >= 1000, (dtype, value, kwargs, nbytes / s.numel())


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_constant_runs_byte_identical_for_any_thread_count(dtype):
    """Repeat entries are decided from the values alone: a run of constant chunks split across
    OpenMP threads at any point gives the same bytes as one thread, and decodes exactly."""
    cs = 64
    smooth = make_data("sin", 5 * cs, dtype, seed=3)
    parts = [
        smooth,
        torch.zeros(7 * cs, dtype=dtype),
        smooth[:cs],
        torch.full((3 * cs,), 2.5, dtype=dtype),
        torch.full((2 * cs,), 2.5, dtype=dtype),
        torch.zeros(cs // 2, dtype=dtype),
    ]
    x = torch.cat(parts)
    ref = zccl_torch.compress(x, 1e-3, chunk_size=cs, threads=1)
    for threads in (2, 3, 5, 8, 19):
        s = zccl_torch.compress(x, 1e-3, chunk_size=cs, threads=threads)
        assert torch.equal(s, ref), f"{threads} threads changed the stream"
    y = zccl_torch.decompress(ref, threads=3)
    assert_within_bound(x, y, 1e-3, "constant runs")
    for c in range(zccl_torch.stream_info(ref).num_chunks):
        assert_bitwise_equal(
            y[c * cs : (c + 1) * cs], zccl_torch.decompress_chunk(ref, c), f"chunk {c}"
        )
    # The zero run (7 chunks) costs its first chunk plus 8 table bytes per repeat.
    all_zero = zccl_torch.compress(torch.zeros(7 * cs, dtype=dtype), 1e-3, chunk_size=cs)
    info = zccl_torch.stream_info(all_zero)
    assert all_zero.numel() == info.header_bytes + 1 + x.element_size(), all_zero.numel()
