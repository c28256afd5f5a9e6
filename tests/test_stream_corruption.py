"""Malformed streams: every truncation, extension, byte mutation and random byte string raises
zccl_torch.CorruptStreamError (a ValueError) - never a crash, never a silent wrong decode.

The format carries checksums over the header, the chunk table and every chunk, so no single-byte
mutation may decode. Multi-byte mutations get past a 32-bit checksum with probability ~2**-32,
which no test here will ever see.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch
from helpers_compress import assert_bitwise_equal, examples, make_data

CorruptStreamError = zccl_torch.CorruptStreamError


def _small_f32():
    x = make_data("sin", 100, torch.float32, seed=1)
    x[3], x[10], x[11], x[50] = float("nan"), float("inf"), -float("inf"), 1e30  # outliers
    return x, 1e-3, 32


def _small_f64():
    x = make_data("cumsum", 70, torch.float64, seed=2)
    x[0], x[69] = -1e300, float("nan")
    return x.reshape(7, 10), 1e-6, 32


def _small_raw_f32():
    # random bits at eb=0: every chunk incompressible, stored raw
    return make_data("random_bits", 40, torch.float32, seed=3), 0.0, 32


def _small_raw_f64():
    return make_data("random_bits", 33, torch.float64, seed=4), 1e-12, 32


def _small_constant():
    return torch.full((64,), 2.5, dtype=torch.float32), 1e-2, 32  # all-zero-code blocks


def _empty():
    return torch.zeros(0, dtype=torch.float64), 1e-3, 5120


def _single():
    return torch.tensor([3.0], dtype=torch.float32), 1e-3, 5120


def _big_f32():
    x = make_data("cumsum", 20_000, torch.float32, seed=5, nonfinite=0.01)
    x[100:140] = make_data("random_bits", 40, torch.float32, seed=6)
    x[7000:7100] = 1e30
    return x, 1e-3, 5120


def _big_f64_mixed():
    x = torch.cat([
        make_data("sin", 3000, torch.float64, seed=7),
        make_data("random_bits", 2000, torch.float64, seed=8),  # raw chunks
        make_data("mixed", 3000, torch.float64, seed=9),
        torch.zeros(2000, dtype=torch.float64),
    ])
    return x, 1e-4, 1024


SMALL = {
    "small_f32": _small_f32,
    "small_f64_2d": _small_f64,
    "small_raw_f32": _small_raw_f32,
    "small_raw_f64": _small_raw_f64,
    "small_constant": _small_constant,
    "empty": _empty,
    "single": _single,
}
BIG = {"big_f32": _big_f32, "big_f64_mixed": _big_f64_mixed}

_CACHE: dict[str, tuple] = {}


def valid(name):
    """(original tensor, stream bytes as numpy, reference decode) for a named stream."""
    if name not in _CACHE:
        x, eb, cs = {**SMALL, **BIG}[name]()
        stream = zccl_torch.compress(x, eb, chunk_size=cs)
        ref = zccl_torch.decompress(stream)
        _CACHE[name] = (x, stream.numpy().copy(), ref)
    return _CACHE[name]


def _t(buf: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(buf, dtype=np.uint8, copy=True))


def assert_rejected(buf: np.ndarray, what: str) -> None:
    try:
        y = zccl_torch.decompress(_t(buf))
    except CorruptStreamError:
        return
    except Exception as exc:  # noqa: BLE001 - the point is to name the wrong exception type
        raise AssertionError(f"{what}: raised {type(exc).__name__}: {exc} (not CorruptStreamError)")
    raise AssertionError(
        f"{what}: decoded silently to {y.dtype} tensor of shape {tuple(y.shape)}"
    )


def assert_chunk_rejected_or_exact(buf: np.ndarray, ref: torch.Tensor, chunk_size: int,
                                   nchunks: int, what: str) -> None:
    """Random access on a mutated stream: a chunk is either refused or exactly the original."""
    flat = ref.reshape(-1)
    for i in range(nchunks):
        try:
            c = zccl_torch.decompress_chunk(_t(buf), i)
        except CorruptStreamError:
            continue
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{what}: decompress_chunk({i}) raised {type(exc).__name__}: {exc}")
        assert_bitwise_equal(flat[i * chunk_size:(i + 1) * chunk_size], c,
                             f"{what}: decompress_chunk({i}) silently wrong")


def assert_info_rejected_or_same(buf: np.ndarray, info, what: str) -> None:
    try:
        got = zccl_torch.stream_info(_t(buf))
    except CorruptStreamError:
        return
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{what}: stream_info raised {type(exc).__name__}: {exc}")
    assert got == info, f"{what}: stream_info silently changed: {got} vs {info}"


# --------------------------------------------------------------------------------------------
# Sanity: the fixtures are valid and cover what they claim
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [*SMALL, *BIG])
def test_fixture_streams_are_valid(name):
    x, buf, ref = valid(name)
    info = zccl_torch.stream_info(_t(buf))
    assert info.total_bytes == buf.size
    assert ref.shape == x.shape


# --------------------------------------------------------------------------------------------
# Truncation and extension
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SMALL))
def test_every_truncation_small(name):
    _, buf, _ = valid(name)
    for length in range(buf.size):
        assert_rejected(buf[:length], f"{name} truncated to {length}/{buf.size} bytes")


@pytest.mark.parametrize("name", list(SMALL))
def test_every_truncation_stream_info(name):
    """stream_info validates the totals recorded in the chunk table against the buffer."""
    _, buf, _ = valid(name)
    for length in range(buf.size):
        try:
            zccl_torch.stream_info(_t(buf[:length]))
        except CorruptStreamError:
            continue
        raise AssertionError(f"{name}: stream_info accepted a truncation to {length}/{buf.size}")


@pytest.mark.parametrize("name", list(BIG))
def test_truncation_sample_big(name):
    _, buf, _ = valid(name)
    rng = random.Random(name)
    lengths = set(range(0, 200)) | set(range(buf.size - 64, buf.size))
    lengths |= {rng.randrange(buf.size) for _ in range(300)}
    for length in sorted(lengths):
        assert_rejected(buf[:length], f"{name} truncated to {length}/{buf.size} bytes")


@pytest.mark.parametrize("name", [*SMALL, *BIG])
@pytest.mark.parametrize("extra", [b"\x00", b"\x00" * 7, b"\xff" * 3, bytes(range(100))])
def test_trailing_bytes_rejected(name, extra):
    _, buf, _ = valid(name)
    assert_rejected(np.concatenate([buf, np.frombuffer(extra, dtype=np.uint8)]),
                    f"{name} + {len(extra)} trailing bytes")


@pytest.mark.parametrize("name", ["small_f32", "empty", "big_f32"])
def test_concatenated_streams_rejected(name):
    _, buf, _ = valid(name)
    assert_rejected(np.concatenate([buf, buf]), f"{name} twice")


# --------------------------------------------------------------------------------------------
# Byte mutations
# --------------------------------------------------------------------------------------------

XORS = (0x01, 0x80, 0xFF, 0x5A)


@pytest.mark.parametrize("name", list(SMALL))
def test_every_single_byte_mutation_small(name):
    _, buf, ref = valid(name)
    info = zccl_torch.stream_info(_t(buf))
    for pos in range(buf.size):
        for xor in XORS:
            mut = buf.copy()
            mut[pos] ^= xor
            what = f"{name}: byte {pos}/{buf.size} ^= {xor:#04x}"
            assert_rejected(mut, what)
            assert_info_rejected_or_same(mut, info, what)
            assert_chunk_rejected_or_exact(mut, ref, info.chunk_size, info.num_chunks, what)


@pytest.mark.parametrize("name", list(BIG))
def test_single_byte_mutation_sample_big(name):
    _, buf, ref = valid(name)
    info = zccl_torch.stream_info(_t(buf))
    rng = random.Random(name)
    positions = set(range(min(info.header_bytes + 16, buf.size))) | set(range(buf.size - 16, buf.size))
    positions |= {rng.randrange(buf.size) for _ in range(400)}
    for pos in sorted(positions):
        mut = buf.copy()
        mut[pos] ^= rng.randrange(1, 256)
        assert_rejected(mut, f"{name}: byte {pos}/{buf.size} ^= {int(mut[pos] ^ buf[pos]):#04x}")


@pytest.mark.parametrize("name", ["big_f32", "big_f64_mixed"])
def test_mutated_chunk_random_access(name):
    """A mutation inside one chunk: that chunk is refused, the others decode exactly."""
    _, buf, ref = valid(name)
    info = zccl_torch.stream_info(_t(buf))
    rng = random.Random(name + "ra")
    for _ in range(20):
        pos = rng.randrange(info.header_bytes, buf.size)
        mut = buf.copy()
        mut[pos] ^= 0x10
        what = f"{name}: byte {pos} ^= 0x10"
        assert_rejected(mut, what)
        assert_info_rejected_or_same(mut, info, what)
        assert_chunk_rejected_or_exact(mut, ref, info.chunk_size, info.num_chunks, what)


@examples(100)
@given(
    name=st.sampled_from([*SMALL, *BIG]),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
                   min_size=1, max_size=8),
)
def test_multi_byte_mutations(name, edits):
    _, buf, _ = valid(name)
    if buf.size == 0:
        return
    mut = buf.copy()
    for frac, value in edits:
        mut[int(frac * buf.size)] = value
    if np.array_equal(mut, buf):
        return
    assert_rejected(mut, f"{name}: edits {[(int(f * buf.size), v) for f, v in edits]}")


@examples(60)
@given(name=st.sampled_from([*SMALL, *BIG]), data=st.data())
def test_chunk_reordering_and_splicing(name, data):
    """Swapping two byte ranges, or deleting / duplicating a range, is rejected."""
    _, buf, _ = valid(name)
    n = buf.size
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    op = data.draw(st.sampled_from(("delete", "duplicate", "reverse")))
    if op == "delete":
        mut = np.concatenate([buf[:a], buf[b:]])
    elif op == "duplicate":
        mut = np.concatenate([buf[:b], buf[a:b], buf[b:]])
    else:
        mut = np.concatenate([buf[:a], buf[a:b][::-1], buf[b:]])
    if mut.size == n and np.array_equal(mut, buf):
        return
    assert_rejected(mut, f"{name}: {op} [{a}, {b})")


def test_streams_of_other_fixtures_cross_spliced():
    """A header from one stream with the body of another is rejected."""
    _, a, _ = valid("small_f32")
    _, b, _ = valid("small_raw_f32")
    for cut in range(1, min(a.size, b.size)):
        mut = np.concatenate([a[:cut], b[cut:]])
        if np.array_equal(mut, a) or np.array_equal(mut, b):
            continue
        assert_rejected(mut, f"small_f32[:{cut}] + small_raw_f32[{cut}:]")


# --------------------------------------------------------------------------------------------
# Random byte strings
# --------------------------------------------------------------------------------------------

def test_random_byte_strings_many_lengths():
    rng = np.random.default_rng(123)
    for length in list(range(0, 300)) + [511, 512, 1000, 4096, 65537, 1 << 20]:
        for _ in range(3 if length < 300 else 1):
            buf = rng.integers(0, 256, size=length, dtype=np.uint8)
            assert_rejected(buf, f"random {length} bytes")
    for length in (0, 1, 8, 64, 1000):
        assert_rejected(np.zeros(length, dtype=np.uint8), f"{length} zero bytes")
        assert_rejected(np.full(length, 0xFF, dtype=np.uint8), f"{length} 0xFF bytes")


@examples(200)
@given(raw=st.binary(max_size=600))
def test_arbitrary_binary(raw):
    buf = np.frombuffer(raw, dtype=np.uint8)
    assert_rejected(buf, f"binary {raw!r}")
    with pytest.raises(CorruptStreamError):
        zccl_torch.stream_info(_t(buf))


@examples(200)
@given(name=st.sampled_from(list(SMALL)), keep=st.floats(0, 1), tail=st.binary(max_size=400))
def test_valid_prefix_random_tail(name, keep, tail):
    """A genuine header prefix followed by garbage gets past the magic check and must still be
    rejected by deeper validation."""
    _, buf, _ = valid(name)
    cut = int(keep * buf.size)
    mut = np.concatenate([buf[:cut], np.frombuffer(tail, dtype=np.uint8)])
    if np.array_equal(mut, buf):
        return
    assert_rejected(mut, f"{name}[:{cut}] + {tail!r}")


# --------------------------------------------------------------------------------------------
# Not a stream at all
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8, torch.int32,
                                   torch.bool, torch.float16])
def test_wrong_dtype_stream_is_type_error(dtype):
    _, buf, _ = valid("small_f32")
    bad = _t(buf).to(dtype)
    with pytest.raises(TypeError):
        zccl_torch.decompress(bad)
    with pytest.raises(TypeError):
        zccl_torch.stream_info(bad)
    with pytest.raises(TypeError):
        zccl_torch.decompress_chunk(bad, 0)
    # the float tensor that was compressed is not its own stream either
    x, _, _ = valid("small_f32")
    with pytest.raises(TypeError):
        zccl_torch.decompress(x)


@pytest.mark.parametrize("obj", [b"ZCCL", bytearray(10), np.zeros(10, dtype=np.uint8), None, [1, 2]])
def test_non_tensor_stream_is_type_error(obj):
    with pytest.raises(TypeError):
        zccl_torch.decompress(obj)
    with pytest.raises(TypeError):
        zccl_torch.stream_info(obj)
