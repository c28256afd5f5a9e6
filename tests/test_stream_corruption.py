"""Malformed streams: every truncation, extension, byte mutation and random byte string raises
zccl_torch.CorruptStreamError (a ValueError) - never a crash, never a silent wrong decode.

The format carries checksums over the header, the chunk table and every chunk, so no single-byte
mutation may decode. Multi-byte mutations get past a 32-bit checksum with probability ~2**-32,
which no test here will ever see.

The fixtures are format version 3 streams (what the encoder writes): encoded and direct chunks in
the bitmap layout, raw, constant, repeat and (codec 1, zstd) lossless chunks, float32/float64/
float16/bfloat16. Version-1 and version-2 streams made by the old encoders are tested in
test_format_versions.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from helpers_compress import (
    MODE_CONSTANT,
    MODE_DIRECT,
    MODE_ENCODED,
    MODE_LOSSLESS,
    MODE_RAW,
    ZSTD_EMPTY_FRAME,
    ZSTD_SKIPPABLE_FRAME,
    Stream,
    assert_bitwise_equal,
    assert_within_bound,
    byte_planes,
    crc32c,
    examples,
    make_data,
    zstd_blocks,
    zstd_frame,
)
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch

CorruptStreamError = zccl_torch.CorruptStreamError
HAVE_ZSTD = zccl_torch.lossless_codec() == "zstd"
needs_zstd = pytest.mark.skipif(not HAVE_ZSTD, reason="extension built without zstd: no codec 1")


def _small_f32():
    x = make_data("sin", 100, torch.float32, seed=1)
    x[3], x[10], x[11], x[50] = float("nan"), float("inf"), -float("inf"), 1e30  # outliers
    return x, 1e-3, 32


def _small_f64():
    x = make_data("cumsum", 70, torch.float64, seed=2)
    x[0], x[69] = -1e300, float("nan")
    return x.reshape(7, 10), 1e-6, 32


def _small_raw_f32():
    # random bits at eb=0: every chunk incompressible, stored raw (in a codec-1 stream)
    return make_data("random_bits", 40, torch.float32, seed=3), 0.0, 32


def _small_raw_f64():
    # mostly outliers; the last chunk (1 value) is a constant chunk
    return make_data("random_bits", 33, torch.float64, seed=4), 1e-12, 32


def _small_constant():
    return torch.full((64,), 2.5, dtype=torch.float32), 1e-2, 32  # a constant chunk + a repeat


def _empty():
    return torch.zeros(0, dtype=torch.float64), 1e-3, 5120


def _single():
    return torch.tensor([3.0], dtype=torch.float32), 1e-3, 5120  # a constant chunk of 1 value


def _small_lossless_f32():
    """mode="lossless" on smooth data: codec-1 (zstd) chunks, with a NaN, a NaN payload, -0.0 and
    a denormal among the values."""
    x = make_data("sin", 256, torch.float32, seed=31)
    x[3], x[4], x[9] = float("nan"), -0.0, 1e-42
    x.view(torch.int32)[200] = 0x7FA00001
    return x, None, 128


def _small_lossless_mixed_f64():
    """A codec-1 stream of every lossless chunk kind: zstd | raw | constant | repeat | zstd."""
    x = torch.cat(
        [
            torch.arange(64, dtype=torch.float64) * 0.25,
            make_data("random_bits", 64, torch.float64, seed=32),
            torch.zeros(128, dtype=torch.float64),
            torch.arange(40, dtype=torch.float64) * -0.5,
        ]
    )
    return x, None, 64


def _small_f16():
    """float16: encoded chunks with outliers (NaN, +-Inf, a NaN payload), raw chunks, 65504,
    a denormal and -0.0."""
    x = (2 * torch.sin(torch.linspace(0, 3, 100))).to(torch.float16)
    x[64:96] = make_data("random_bits", 32, torch.float16, seed=33)
    x[2], x[20], x[21], x[60], x[61], x[70] = (
        float("nan"),
        float("inf"),
        -float("inf"),
        2**-24,
        -0.0,
        65504.0,
    )
    x.view(torch.int16)[40] = -0x0201  # 0xFDFF: a negative NaN with a payload
    return x, 1e-2, 32


def _small_bf16_2d():
    """bfloat16, 2-D: encoded chunks with outliers (NaN, -Inf, 3e38, a denormal), a raw chunk."""
    x = make_data("cumsum", 120, torch.bfloat16, seed=34)
    x[0], x[33], x[70], x[119] = float("nan"), float("-inf"), 3e38, 1e-39
    return x.reshape(4, 30), 5e-2, 32


def _small_const_runs():
    """Runs of constant chunks: constant | repeat | repeat | encoded | constant (7.0) | repeat |
    constant (-0.0, other bits than 0.0) | repeat (a partial chunk of 10 values)."""
    x = torch.cat(
        [
            torch.zeros(96),
            make_data("sin", 32, torch.float32, seed=35),
            torch.full((64,), 7.0),
            torch.full((42,), -0.0),
        ]
    )
    return x, 1e-2, 32


def _noise(n: int, seed: int) -> torch.Tensor:
    return 2.0 * torch.randn(n, generator=torch.Generator().manual_seed(seed))


def _small_direct():
    """float32 noise (gradient-like): direct chunks with outliers (NaN, -Inf, 1e30) and a
    partial last block."""
    x = _noise(300, 42)
    x[7], x[130], x[299] = float("nan"), -float("inf"), 1e30
    return x, 1e-3, 128


def _small_direct_f16_2d():
    """float16 noise, 2-D: direct chunks with outliers (NaN, +Inf, 6e4 beyond the grid) and a
    raw chunk of random bits."""
    x = _noise(320, 43).to(torch.float16)
    x[200:264] = make_data("random_bits", 64, torch.float16, seed=44)
    x[3], x[70], x[100] = float("nan"), float("inf"), 6e4
    return x.reshape(10, 32), 1e-2, 64


def _big_f32():
    x = make_data("cumsum", 20_000, torch.float32, seed=5, nonfinite=0.01)
    x[100:140] = make_data("random_bits", 40, torch.float32, seed=6)
    x[7000:7100] = 1e30
    return x, 1e-3, 5120


def _big_f64_mixed():
    x = torch.cat(
        [
            make_data("sin", 3000, torch.float64, seed=7),
            make_data("random_bits", 2000, torch.float64, seed=8),
            make_data("huge", 2200, torch.float64, seed=10),  # all outliers: raw chunks
            make_data("mixed", 3000, torch.float64, seed=9),
            torch.zeros(2000, dtype=torch.float64),  # a constant chunk and a repeat
        ]
    )
    return x, 1e-4, 1024


def _big_lossless_f32():
    return make_data("sin", 20_000, torch.float32, seed=36, nonfinite=0.001), None, 5120


def _big_f16():
    x = make_data("sin", 20_000, torch.float16, seed=37, nonfinite=0.01)
    x[5000:5100] = make_data("random_bits", 100, torch.float16, seed=38)
    x[9000:9040] = 6e4
    return x, 4e-3, 2048


def _big_bf16():
    x = make_data("cumsum", 12_000, torch.bfloat16, seed=39, nonfinite=0.01, scale=0.1)
    x[3000:3100] = make_data("random_bits", 100, torch.bfloat16, seed=40)
    x[6144:10240] = 0.0  # a constant chunk and three repeats
    return x, 2e-2, 1024


SMALL = {
    "small_f32": _small_f32,
    "small_f64_2d": _small_f64,
    "small_raw_f32": _small_raw_f32,
    "small_raw_f64": _small_raw_f64,
    "small_constant": _small_constant,
    "empty": _empty,
    "single": _single,
    "small_lossless_f32": _small_lossless_f32,
    "small_lossless_mixed_f64": _small_lossless_mixed_f64,
    "small_f16": _small_f16,
    "small_bf16_2d": _small_bf16_2d,
    "small_const_runs": _small_const_runs,
    "small_direct": _small_direct,
    "small_direct_f16_2d": _small_direct_f16_2d,
}
BIG = {
    "big_f32": _big_f32,
    "big_f64_mixed": _big_f64_mixed,
    "big_lossless_f32": _big_lossless_f32,
    "big_f16": _big_f16,
    "big_bf16": _big_bf16,
}

_CACHE: dict[str, tuple] = {}


def valid(name):
    """(original tensor, stream bytes as numpy, reference decode) for a named stream."""
    if name not in _CACHE:
        x, eb, cs = {**SMALL, **BIG}[name]()
        if eb is None:
            stream = zccl_torch.compress(x, mode="lossless", chunk_size=cs)
        else:
            stream = zccl_torch.compress(x, eb, chunk_size=cs)
        ref = zccl_torch.decompress(stream)
        _CACHE[name] = (x, stream.numpy().copy(), ref)
    return _CACHE[name]


def _t(buf: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(buf, dtype=np.uint8, copy=True))


def assert_rejected(buf: np.ndarray, what: str, threads: int | None = None) -> None:
    """decompress raises CorruptStreamError. The exhaustive loops pass threads=1 (an OpenMP
    region per call is slow on a busy 2-core box); the sampled ones keep the multi-threaded
    decoder, whose chunk errors are raised from inside its parallel region."""
    try:
        y = zccl_torch.decompress(_t(buf), threads=threads)
    except CorruptStreamError:
        return
    except Exception as exc:
        raise AssertionError(
            f"{what}: raised {type(exc).__name__}: {exc} (not CorruptStreamError)"
        ) from exc
    raise AssertionError(f"{what}: decoded silently to {y.dtype} tensor of shape {tuple(y.shape)}")


def assert_chunk_rejected_or_exact(
    buf: np.ndarray, ref: torch.Tensor, chunk_size: int, nchunks: int, what: str
) -> None:
    """Random access on a mutated stream: a chunk is either refused or exactly the original."""
    flat = ref.reshape(-1)
    for i in range(nchunks):
        try:
            c = zccl_torch.decompress_chunk(_t(buf), i)
        except CorruptStreamError:
            continue
        except Exception as exc:
            raise AssertionError(
                f"{what}: decompress_chunk({i}) raised {type(exc).__name__}: {exc}"
            ) from exc
        assert_bitwise_equal(
            flat[i * chunk_size : (i + 1) * chunk_size],
            c,
            f"{what}: decompress_chunk({i}) silently wrong",
        )


def assert_info_rejected_or_same(buf: np.ndarray, info, what: str) -> None:
    try:
        got = zccl_torch.stream_info(_t(buf))
    except CorruptStreamError:
        return
    except Exception as exc:
        raise AssertionError(f"{what}: stream_info raised {type(exc).__name__}: {exc}") from exc
    assert got == info, f"{what}: stream_info silently changed: {got} vs {info}"


# --------------------------------------------------------------------------------------------
# Sanity: the fixtures are valid and cover what they claim
# --------------------------------------------------------------------------------------------

# What each fixture must contain (chunk kinds; "outliers" / "direct outliers": an encoded / a
# direct chunk with outliers), so every truncation, mutation and splice test below covers it.
# Without zstd, "lossless" chunks are raw ones. Direct chunks appear where codes are cheaper than
# their Lorenzo deltas by more than q_start's 4 bytes: noise.
REQUIRED = {
    "small_f32": {"encoded", "raw", "outliers"},
    "small_f64_2d": {"encoded", "raw", "outliers"},
    "small_raw_f32": {"raw"},
    "small_raw_f64": {"encoded", "constant", "outliers"},
    "small_constant": {"constant", "repeat"},
    "empty": set(),
    "single": {"constant"},
    "small_lossless_f32": {"lossless"},
    "small_lossless_mixed_f64": {"lossless", "raw", "constant", "repeat"},
    "small_f16": {"encoded", "raw", "outliers"},
    "small_bf16_2d": {"encoded", "raw", "outliers"},
    "small_direct": {"direct", "direct outliers"},
    "small_direct_f16_2d": {"direct", "direct outliers", "raw"},
    "small_const_runs": {"constant", "repeat", "direct"},
    "big_f32": {"encoded", "outliers"},
    "big_f64_mixed": {"encoded", "direct", "raw", "constant", "repeat", "outliers"},
    "big_lossless_f32": {"lossless"},
    "big_f16": {"encoded", "outliers"},
    "big_bf16": {"encoded", "constant", "repeat", "outliers"},
}


def _contents(st_: Stream) -> set:
    found = set(st_.kinds())
    for c, k in enumerate(st_.kinds()):
        if k in ("encoded", "direct") and st_.encoded(c).n_out > 0:
            found.add("outliers" if k == "encoded" else "direct outliers")
    return found


@pytest.mark.parametrize("name", [*SMALL, *BIG])
def test_fixture_streams_are_valid(name):
    x, buf, ref = valid(name)
    lossless = {**SMALL, **BIG}[name]()[1] in (None, 0.0)
    info = zccl_torch.stream_info(_t(buf))
    assert info.version == 3 == zccl_torch.FORMAT_VERSION
    assert info.dtype == x.dtype
    assert info.total_bytes == buf.size
    assert info.lossless_codec == (zccl_torch.lossless_codec() if lossless else "none")
    assert ref.shape == x.shape
    if lossless:
        assert_bitwise_equal(x, ref, name)
    else:
        assert_within_bound(x, ref, info.error_bound, name)
    st_ = Stream(buf)
    want = {k if HAVE_ZSTD or k != "lossless" else "raw" for k in REQUIRED[name]}
    missing = want - _contents(st_)
    assert not missing, f"{name} lacks {missing}: chunks {st_.kinds()}"
    if name in BIG or name.startswith("small_"):
        assert info.num_chunks > 1


# --------------------------------------------------------------------------------------------
# Truncation and extension
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SMALL))
def test_every_truncation_small(name):
    _, buf, _ = valid(name)
    for length in range(buf.size):
        assert_rejected(buf[:length], f"{name} truncated to {length}/{buf.size} bytes", threads=1)


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
    assert_rejected(
        np.concatenate([buf, np.frombuffer(extra, dtype=np.uint8)]),
        f"{name} + {len(extra)} trailing bytes",
    )


@pytest.mark.parametrize(
    "name", ["small_f32", "empty", "big_f32", "small_const_runs", "small_lossless_f32"]
)
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
            assert_rejected(mut, what, threads=1)
            assert_info_rejected_or_same(mut, info, what)
            assert_chunk_rejected_or_exact(mut, ref, info.chunk_size, info.num_chunks, what)


@pytest.mark.parametrize("name", list(BIG))
def test_single_byte_mutation_sample_big(name):
    _, buf, _ = valid(name)
    info = zccl_torch.stream_info(_t(buf))
    rng = random.Random(name)
    positions = set(range(min(info.header_bytes + 16, buf.size)))
    positions |= set(range(buf.size - 16, buf.size))
    positions |= {rng.randrange(buf.size) for _ in range(400)}
    for pos in sorted(positions):
        mut = buf.copy()
        mut[pos] ^= rng.randrange(1, 256)
        assert_rejected(
            mut,
            f"{name}: byte {pos}/{buf.size} ^= {int(mut[pos] ^ buf[pos]):#04x}",
            threads=rng.choice((None, 1, 2, 3)),
        )


@pytest.mark.parametrize("name", list(BIG))
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
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8
    ),
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


@pytest.mark.parametrize(
    "pair",
    [
        ("small_f32", "small_raw_f32"),
        ("small_f16", "small_bf16_2d"),
        ("small_const_runs", "small_constant"),
        ("small_lossless_f32", "small_lossless_mixed_f64"),
    ],
)
def test_streams_of_other_fixtures_cross_spliced(pair):
    """A header from one stream with the body of another is rejected."""
    na, nb = pair
    _, a, _ = valid(na)
    _, b, _ = valid(nb)
    for cut in range(1, min(a.size, b.size)):
        mut = np.concatenate([a[:cut], b[cut:]])
        if np.array_equal(mut, a) or np.array_equal(mut, b):
            continue
        assert_rejected(mut, f"{na}[:{cut}] + {nb}[{cut}:]", threads=1)


# --------------------------------------------------------------------------------------------
# Random byte strings
# --------------------------------------------------------------------------------------------


def test_random_byte_strings_many_lengths():
    rng = np.random.default_rng(123)
    for length in [*range(300), 511, 512, 1000, 4096, 65537, 1 << 20]:
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


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.int8, torch.int32, torch.bool, torch.float16]
)
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


@pytest.mark.parametrize(
    "obj", [b"ZCCL", bytearray(10), np.zeros(10, dtype=np.uint8), None, [1, 2]]
)
def test_non_tensor_stream_is_type_error(obj):
    with pytest.raises(TypeError):
        zccl_torch.decompress(obj)
    with pytest.raises(TypeError):
        zccl_torch.stream_info(obj)


# --------------------------------------------------------------------------------------------
# Crafted streams with VALID checksums (format version 2, csrc/compress/fzlight_format.h).
# A buggy encoder or a hostile peer can produce internally inconsistent streams whose CRCs
# match; the decoder must still validate every field and length before touching memory.
# These tests know the layout (helpers_compress.Stream); update them with the format version.
# --------------------------------------------------------------------------------------------

DTYPES4 = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
# Bounds at which sin data in [-4, 4] is mostly quantisable in each type.
_ENC_EB = {torch.float32: 1e-3, torch.float64: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}
_ENCODED: dict = {}


def _encoded_stream(dtype=torch.float32, direct=False):
    """A stream of 250 values in 2 chunks (128 + 122: the last block partial), every chunk
    encoded (``direct``: every chunk direct): chunk 0 has outliers at 5, 10, 11 and a zero block
    (block 2, values 64..95: smooth data repeating the code of value 63, or, direct, noise that is
    0 there), so its bitmap is 0b1011; chunk 1 has 4 blocks, all nonzero."""
    key = (dtype, direct)
    if key not in _ENCODED:
        if direct:  # noise: its codes are cheaper than their Lorenzo deltas (the seed gives
            # direct chunks in every dtype; the asserts below say so)
            x = _noise(250, 24).to(dtype)
            x[64:96] = 0.0
        else:
            x = make_data("sin", 250, torch.float64, seed=21).to(dtype)
            x[40:96] = x[40].item()
        x[5], x[10], x[11] = float("nan"), 1e30, -float("inf")
        s = zccl_torch.compress(x, _ENC_EB[dtype], chunk_size=128)
        st_ = Stream(s)
        kind = "direct" if direct else "encoded"
        assert st_.kinds() == [kind, kind], f"{dtype}: {st_.kinds()}; pick other data"
        lay = st_.encoded(0)
        assert lay.lens[2] == 0 and all(lay.lens[b] for b in (0, 1, 3)), lay.lens
        assert lay.n_out >= 3 and st_.u8(lay.bitmap) == 0b1011
        assert all(st_.encoded(1).lens) and st_.encoded(1).nblocks == 4
        _ENCODED[key] = (x, st_.array())
    x, buf = _ENCODED[key]
    return x, Stream(buf)


KINDS2 = ["encoded", "direct"]  # the two lossy chunk kinds (modes 0 and 4)


def _rejected_everywhere(st_: Stream, what: str, chunks=None) -> None:
    """decompress (1 and 2 threads) and decompress_chunk of ``chunks`` (default: all) raise
    CorruptStreamError."""
    buf = st_.array()
    assert_rejected(buf, what, threads=1)
    assert_rejected(buf, what, threads=2)
    for c in range(st_.nchunks) if chunks is None else chunks:
        try:
            zccl_torch.decompress_chunk(_t(buf), c)
        except CorruptStreamError:
            continue
        except Exception as exc:
            raise AssertionError(f"{what}: decompress_chunk({c}) raised {exc!r}") from exc
        raise AssertionError(f"{what}: decompress_chunk({c}) accepted it")


def _others_exact(st_: Stream, ref: torch.Tensor, bad: set, what: str) -> None:
    """Chunks outside ``bad`` still decode exactly through decompress_chunk."""
    flat, cl = ref.reshape(-1), st_.chunk_len
    for c in range(st_.nchunks):
        if c not in bad:
            got = zccl_torch.decompress_chunk(st_.tensor(), c)
            assert_bitwise_equal(flat[c * cl : (c + 1) * cl], got, f"{what}: chunk {c}")


def _v2_features(st_: Stream) -> bool:
    """Whether reading the stream as version 1 must fail: a version-2 dtype, codec or chunk kind,
    or an encoded chunk with a nonzero block (whose bitmap + lengths cannot read as v1 lengths)."""
    if st_.dtype_code > 2 or st_.codec != 0:
        return True
    kinds = st_.kinds()
    if {"constant", "repeat", "lossless", "direct"} & set(kinds):
        return True
    return any(k == "encoded" and any(st_.encoded(c).lens) for c, k in enumerate(kinds))


def test_resealing_unchanged_stream_still_decodes():
    """Checks the test's own CRC-32C and layout knowledge against the real encoder."""
    for name in [*SMALL, *BIG]:
        _, buf, _ref = valid(name)
        st_ = Stream(buf)
        assert st_.u64(40) == buf.size
        assert st_.version == 3
        resealed = Stream(buf).seal().array()
        assert np.array_equal(resealed, buf), f"{name}: re-sealing changed the stream"
        # rebuilding the stream from its chunk bodies (repeats as None) gives it back
        bodies = [
            None if st_.kind(c) == "repeat" else st_.chunk_bytes(c) for c in range(st_.nchunks)
        ]
        assert np.array_equal(st_.with_chunks(bodies).array(), buf), name
        for c, k in enumerate(st_.kinds()):
            if k in ("encoded", "direct"):  # the layout adds up exactly as the test reads it
                lay = st_.encoded(c)
                assert lay.outliers + lay.n_out * (2 + st_.elem) == lay.off + lay.size, (name, c)
            if k == "repeat":
                assert st_.kind(c - 1) in ("constant", "repeat"), (name, c)
                assert st_.chunk_bytes(c)[0] == MODE_CONSTANT
    for dtype in DTYPES4.values():
        for direct in (False, True):
            _, st_ = _encoded_stream(dtype, direct)
            assert np.array_equal(Stream(st_.array()).seal().array(), st_.array())


# Header edits that must be rejected (header CRC re-sealed). `only`: "lossy" / "lossless" limits
# an edit to the fixtures where it changes the meaning of the stream.
_DTYPE_WIDTH_SWAP = {1: 2, 2: 1, 3: 1, 4: 2}  # changes the value size of every dtype
_DTYPE_HALF_SWAP = {1: 3, 3: 1, 2: 4, 4: 2}
HEADER_EDITS = {
    "version 4": (lambda s: s.u8(4, 4), None),
    "version 0": (lambda s: s.u8(4, 0), None),
    "version 255": (lambda s: s.u8(4, 255), None),
    "version 1": (lambda s: s.u8(4, 1), None),  # every fixture below has version-2 features
    "dtype 0": (lambda s: s.u8(5, 0), None),
    "dtype 5": (lambda s: s.u8(5, 5), None),
    "dtype 255": (lambda s: s.u8(5, 255), None),
    "dtype width swap": (lambda s: s.u8(5, _DTYPE_WIDTH_SWAP[s.u8(5)]), None),
    "dtype half<->full": (lambda s: s.u8(5, _DTYPE_HALF_SWAP[s.u8(5)]), None),
    "block length 16": (lambda s: s.u8(6, 16), None),
    "block length 64": (lambda s: s.u8(6, 64), None),
    "count + 1": (lambda s: s.u64(8, s.count + 1), None),
    "count - 1": (lambda s: s.u64(8, s.count - 1), None),
    "count 2**63": (lambda s: s.u64(8, 2**63), None),
    "count 2**64-1": (lambda s: s.u64(8, 2**64 - 1), None),
    "eb NaN": (lambda s: s.f64(16, float("nan")), None),
    "eb -1": (lambda s: s.f64(16, -1.0), None),
    "eb inf": (lambda s: s.f64(16, float("inf")), None),
    "bin NaN": (lambda s: s.f64(24, float("nan")), None),
    "bin -bin": (lambda s: s.f64(24, -s.f64(24)), "lossy"),
    "bin inf": (lambda s: s.f64(24, float("inf")), None),
    "bin > 2 eb": (lambda s: s.f64(24, 2.5 * s.f64(16)), "lossy"),
    "bin 2**-10 (lossless)": (lambda s: s.f64(24, 2.0**-10), "lossless"),
    "chunk_len 0": (lambda s: s.u32(32, 0), None),
    "chunk_len 31": (lambda s: s.u32(32, 31), None),
    "chunk_len 65568": (lambda s: s.u32(32, 65568), None),
    "chunk_len 2**32-32": (lambda s: s.u32(32, 2**32 - 32), None),
    "codec 1 (lossy)": (lambda s: s.u32(36, 1), "lossy"),
    "codec 0 (zstd chunks)": (lambda s: s.u32(36, 0), "lossless"),
    "codec 2": (lambda s: s.u32(36, 2), None),
    "codec 255": (lambda s: s.u32(36, 255), None),
    "codec 2**32-1": (lambda s: s.u32(36, 2**32 - 1), None),
    "shape[0] + 1": (lambda s: s.u64(48, s.u64(48) + 1), None),
    "shape[0] 2**63": (lambda s: s.u64(48, 2**63), None),
}
HEADER_FIXTURES = {
    "small_f32": "lossy",
    "small_f64_2d": "lossy",
    "small_raw_f64": "lossy",
    "small_f16": "lossy",
    "small_bf16_2d": "lossy",
    "small_const_runs": "lossy",
    "small_direct_f16_2d": "lossy",
    "small_lossless_f32": "lossless",
}


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        (name, edit)
        for name, kind in HEADER_FIXTURES.items()
        for edit, (_, only) in HEADER_EDITS.items()
        if only in (None, kind)
    ],
)
def test_crafted_header_fields_rejected(name, edit):
    _, buf, _ = valid(name)
    if HEADER_FIXTURES[name] == "lossless" and not HAVE_ZSTD:
        pytest.skip("no zstd: the lossless fixture has raw chunks only")
    st_ = Stream(buf)
    assert _v2_features(st_), name
    HEADER_EDITS[edit][0](st_)
    # re-seal header CRC only (a count change moves the table; only the header CRC is rewritten)
    hb = st_.header_bytes
    if hb > len(st_.b) or hb < 52:
        assert_rejected(st_.array(), f"{name}: {edit} (unsealed)")
        return
    st_.u32(hb - 4, crc32c(bytes(st_.b[: hb - 4])))
    assert_rejected(st_.array(), f"{name}: {edit} (valid header CRC)")


def test_crafted_total_bytes_rejected():
    _, buf, _ = valid("small_f32")
    for delta in (-1, 1, 2**40, -len(buf)):
        st_ = Stream(buf)
        st_.u64(40, len(buf) + delta)
        st_.seal(chunks=False, total=False)
        assert_rejected(st_.array(), f"total bytes {delta:+d}")


def test_crafted_ndim_rejected():
    x = torch.zeros(64, dtype=torch.float32).reshape(8, 8)
    buf = zccl_torch.compress(x, 1e-3).numpy()
    for ndim in (1, 3, 65, 255):
        st_ = Stream(buf)
        st_.u8(7, ndim)
        hb = st_.header_bytes
        if hb <= len(st_.b):
            st_.u32(hb - 4, crc32c(bytes(st_.b[: hb - 4])))
        assert_rejected(st_.array(), f"ndim {ndim}")


def test_crafted_shape_product_overflow_rejected():
    """shape (2**32, 2**32, 0... ) style products that wrap around 64 bits."""
    x = torch.zeros(4, dtype=torch.float32).reshape(2, 2)
    buf = zccl_torch.compress(x, 1e-3).numpy()
    for dims in ((2**32, 2**32 + 4), (2**63, 2**1 + 2**63 * 0 + 4 // 2), (4, 1 + 2**64 // 4)):
        st_ = Stream(buf)
        st_.u64(48, dims[0] % 2**64)
        st_.u64(56, dims[1] % 2**64)
        st_.seal()
        assert_rejected(st_.array(), f"shape {dims}")


@pytest.mark.parametrize("name", ["small_f32", "small_f16", "small_bf16_2d"])
def test_crafted_float32_bin_not_representable_rejected(name):
    """float32 is the compute type of float32, float16 and bfloat16 streams."""
    _, buf, _ = valid(name)
    st_ = Stream(buf)
    st_.f64(24, float(st_.f64(24)) * (1 + 2**-40))
    st_.seal()
    assert_rejected(st_.array(), f"{name}: bin not representable in float32")


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_chunk_table_sizes_rejected(dt, kind):
    _, st0 = _encoded_stream(DTYPES4[dt], kind == "direct")
    buf = st0.array()
    n = st0.nchunks
    for c in range(n):
        for new in (0, 1, st0.chunk_size(c) - 1, st0.chunk_size(c) + 1, 1 + st0.elem, 2**32 - 1):
            st_ = Stream(buf)
            st_.u32(st_.table + 8 * c, new)
            st_.seal(chunks=False)
            assert_rejected(st_.array(), f"chunk {c} size {st0.chunk_size(c)} -> {new}")
    # moving bytes between two chunks (sizes still add up, CRCs re-sealed)
    st_ = Stream(buf)
    a, b = st_.chunk_size(0), st_.chunk_size(1)
    st_.u32(st_.table, a + 3)
    st_.u32(st_.table + 8, b - 3)
    st_.seal()
    assert_rejected(st_.array(), "3 bytes moved from chunk 1 to chunk 0")


def test_crafted_chunk_table_of_constant_runs_rejected():
    """Table edits around constant chunks and repeats (sizes 1 + elem and 0)."""
    _, buf, _ = valid("small_const_runs")
    st0 = Stream(buf)
    kinds = st0.kinds()
    for c in range(st0.nchunks):
        for new in (0, 1, 1 + st0.elem, 1 + 2 * st0.elem):
            if new == st0.chunk_size(c):
                continue
            st_ = Stream(buf)
            st_.u32(st_.table + 8 * c, new)
            st_.seal()  # chunk CRCs of the shifted layout, total bytes, header CRC
            assert_rejected(st_.array(), f"const runs: chunk {c} ({kinds[c]}) size -> {new}")
    # a constant and the repeat after it swap table entries (sizes 0 / 5 and their CRCs)
    st_ = Stream(buf)
    t = st_.table
    st_.b[t : t + 16] = st_.b[t + 8 : t + 16] + st_.b[t : t + 8]
    st_.seal(chunks=False)
    assert_rejected(st_.array(), "const runs: chunk 0 and 1 table entries swapped")


def _edit_chunk(st_, c, fn):
    off = st_.chunk_offset(c)
    fn(st_, off, st_.chunk_size(c))
    return st_.seal()


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_chunk_mode_rejected(dt, kind):
    _, st0 = _encoded_stream(DTYPES4[dt], kind == "direct")
    for c in range(st0.nchunks):
        other = MODE_ENCODED if kind == "direct" else MODE_DIRECT
        for mode in (MODE_RAW, MODE_CONSTANT, MODE_LOSSLESS, other, 5, 0x80, 0xFF):
            st_ = _edit_chunk(Stream(st0.array()), c, lambda s, off, size, m=mode: s.u8(off, m))
            _rejected_everywhere(st_, f"{dt}: chunk {c} mode {mode}", chunks=[c])


@pytest.mark.parametrize(
    "name",
    [
        "small_raw_f32",
        "small_f32",
        "small_f64_2d",
        "small_f16",
        "small_bf16_2d",
        "small_lossless_mixed_f64",
        "big_f64_mixed",
    ],
)
def test_crafted_raw_relabelled_rejected(name):
    """A raw chunk relabelled encoded, constant or lossless (CRCs re-sealed) is refused."""
    _, buf, ref = valid(name)
    s0 = Stream(buf)
    raw = [c for c in range(s0.nchunks) if s0.kind(c) == "raw"]
    assert raw, f"{name} has no raw chunk"
    for c in raw:
        for mode in (MODE_ENCODED, MODE_CONSTANT, MODE_LOSSLESS):
            st_ = _edit_chunk(Stream(buf), c, lambda s, off, size, m=mode: s.u8(off, m))
            _rejected_everywhere(st_, f"{name}: raw chunk {c} relabelled {mode}", chunks=[c])
        if name.startswith("small"):
            _others_exact(st_, ref, {c}, f"{name}: raw chunk {c} relabelled")


def test_crafted_single_value_constant_is_raw_layout():
    """The one case where a chunk kind can be relabelled harmlessly: a 1-value constant chunk
    and a 1-value raw chunk are the same bytes after the mode. Either label decodes the value."""
    x, buf, _ = valid("single")
    st_ = _edit_chunk(Stream(buf), 0, lambda s, off, size: s.u8(off, MODE_RAW))
    assert_bitwise_equal(x, zccl_torch.decompress(st_.tensor()), "single relabelled raw")


# -- encoded chunks (version-2 layout: bitmap, then one code length per set bit) -------------


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_code_lengths_rejected(dt, kind):
    """Every nonzero block's code length set to 0 (no longer matching its bitmap bit), out of
    range (32, 33, 200, 255) or to another legal value (the sizes no longer add up)."""
    _, st0 = _encoded_stream(DTYPES4[dt], kind == "direct")
    for c in range(st0.nchunks):
        lay = st0.encoded(c)
        for blk, pos in lay.len_pos.items():
            old = st0.u8(pos)
            for new in (0, 32, 33, 200, 255, old % 31 + 1):
                st_ = Stream(st0.array())
                st_.u8(pos, new)
                st_.seal()
                _rejected_everywhere(
                    st_,
                    f"{dt} {kind}: chunk {c} block {blk} code length {old} -> {new}",
                    chunks=[c],
                )


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_bitmap_bits_rejected(dt, kind):
    """Flipping any block's bitmap bit (a nonzero block declared zero, or a zero block declared
    nonzero) shifts every later length and plane: refused. So are set padding bits."""
    _, st0 = _encoded_stream(DTYPES4[dt], kind == "direct")
    for c in range(st0.nchunks):
        lay = st0.encoded(c)
        for blk in range(lay.nblocks):
            st_ = Stream(st0.array())
            st_.u8(lay.bitmap + blk // 8, st_.u8(lay.bitmap + blk // 8) ^ (1 << (blk % 8)))
            st_.seal()
            _rejected_everywhere(st_, f"{dt}: chunk {c} bitmap bit {blk} flipped", chunks=[c])
        # padding bits past the last block (nblocks = 4 here: bits 4..7 of the only byte)
        assert lay.nblocks % 8 != 0
        for bit in range(lay.nblocks % 8, 8):
            st_ = Stream(st0.array())
            st_.u8(
                lay.bitmap + lay.bitmap_bytes - 1,
                st_.u8(lay.bitmap + lay.bitmap_bytes - 1) | (1 << bit),
            )
            st_.seal()
            _rejected_everywhere(st_, f"{dt}: chunk {c} bitmap padding bit {bit} set", chunks=[c])
        for value in (0x00, 0xFF):
            st_ = Stream(st0.array())
            st_.u8(lay.bitmap, value)
            st_.seal()
            _rejected_everywhere(st_, f"{dt}: chunk {c} bitmap {value:#04x}", chunks=[c])


def test_crafted_bitmap_padding_across_bytes_rejected():
    """A chunk of 9 blocks (bitmap of 2 bytes): bits 1..7 of the second byte are padding."""
    x = make_data("sin", 288, torch.float32, seed=22)
    st0 = Stream(zccl_torch.compress(x, 1e-3, chunk_size=288))
    lay = st0.encoded(0)
    assert lay.nblocks == 9 and lay.bitmap_bytes == 2 and all(lay.lens)
    for bit in range(1, 8):
        st_ = Stream(st0.array())
        st_.u8(lay.bitmap + 1, st_.u8(lay.bitmap + 1) | (1 << bit))
        st_.seal()
        _rejected_everywhere(st_, f"9 blocks: padding bit {8 + bit} set")


def _outlier_layout(st_, c):
    """(offset of n_outliers, n_outliers, offset of the index array, m) of encoded or direct
    chunk c."""
    lay = st_.encoded(c)
    return lay.n_out_at, lay.n_out, lay.outliers, lay.m


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_outlier_fields_rejected(dt, kind):
    _, st0 = _encoded_stream(DTYPES4[dt], kind == "direct")
    # chunk 0 holds the outliers at 5, 10 and 11
    at_n, n_out, at_idx, m = _outlier_layout(st0, 0)
    assert n_out >= 3, n_out
    cases = {
        "n_outliers + 1": lambda s: s.u32(at_n, n_out + 1),
        "n_outliers - 1": lambda s: s.u32(at_n, n_out - 1),
        "n_outliers 2**32-1": lambda s: s.u32(at_n, 2**32 - 1),
        "n_outliers m+1": lambda s: s.u32(at_n, m + 1),
        "index == m": lambda s: s.u16(at_idx + 2 * (n_out - 1), m),
        "index 65535": lambda s: s.u16(at_idx, 65535),
        "indices swapped": lambda s: s.b.__setitem__(
            slice(at_idx, at_idx + 4),
            bytes(s.b[at_idx + 2 : at_idx + 4] + s.b[at_idx : at_idx + 2]),
        ),
        "duplicate index": lambda s: s.b.__setitem__(
            slice(at_idx + 2, at_idx + 4), bytes(s.b[at_idx : at_idx + 2])
        ),
    }
    for what, fn in cases.items():
        st_ = Stream(st0.array())
        fn(st_)
        st_.seal()
        _rejected_everywhere(st_, f"{dt} {kind} outliers: {what}", chunks=[0])


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_encoded_as_raw_rejected(dt, kind):
    """An encoded or direct chunk relabelled raw has the wrong size for a raw chunk."""
    _, st0 = _encoded_stream(DTYPES4[dt], kind == "direct")
    st_ = _edit_chunk(Stream(st0.array()), 0, lambda s, off, size: s.u8(off, MODE_RAW))
    _rejected_everywhere(st_, f"{dt}: {kind} chunk relabelled raw", chunks=[0])


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("codec", [0, 1])
def test_crafted_lossless_stream_with_encoded_chunk_rejected(codec, kind):
    """Setting bin (and eb) to 0 on a lossy stream: encoded chunks cannot be decoded, whatever
    the lossless codec field says."""
    if codec == 1 and not HAVE_ZSTD:
        pytest.skip("no zstd: codec-1 streams are refused before any chunk")
    _, st0 = _encoded_stream(direct=kind == "direct")
    st_ = Stream(st0.array())
    st_.f64(16, 0.0)
    st_.f64(24, 0.0)
    st_.u32(36, codec)
    st_.seal()
    _rejected_everywhere(st_, f"bin 0 with {kind} chunks (codec {codec})")


_TORCH_OF_CODE = {1: torch.float32, 2: torch.float64, 3: torch.float16, 4: torch.bfloat16}
_COMPUTE_OF_CODE = {1: np.float32, 2: np.float64, 3: np.float32, 4: np.float32}


def _format_values(st_: Stream, c: int) -> torch.Tensor:
    """Encoded or direct chunk c decoded the way fzlight_format.h says, independently of the
    library: x' = S(C(q) * C(bin)) (C the compute type, S the storage type), outliers patched."""
    lay = st_.encoded(c)
    ctype = _COMPUTE_OF_CODE[st_.dtype_code]
    prod = st_.codes(c).astype(ctype) * ctype(st_.bin)
    out = torch.from_numpy(np.asarray(prod)).to(_TORCH_OF_CODE[st_.dtype_code])
    elem = st_.elem
    raw = out.view(torch.int16 if elem == 2 else torch.int32 if elem == 4 else torch.int64)
    for k in range(lay.n_out):
        i = st_.u16(lay.outliers + 2 * k)
        at = lay.outliers + 2 * lay.n_out + k * elem
        raw[i] = int.from_bytes(st_.b[at : at + elem], "little", signed=True)
    return out


@pytest.mark.parametrize("kind", KINDS2)
@pytest.mark.parametrize("dt", list(DTYPES4))
def test_encoded_and_direct_chunks_decode_as_the_format_says(dt, kind):
    """The decoder's values are the format's: codes from the planes (prefix sums from q_start in
    an encoded chunk, the codes themselves in a direct one) times bin, outliers patched."""
    x, st_ = _encoded_stream(DTYPES4[dt], kind == "direct")
    got = zccl_torch.decompress(st_.tensor()).reshape(-1)
    for c in range(st_.nchunks):
        want = _format_values(st_, c)
        assert_bitwise_equal(want, got[c * 128 : c * 128 + want.numel()], f"{dt} {kind} chunk {c}")
    assert_within_bound(x, got, zccl_torch.stream_info(st_.tensor()).error_bound, f"{dt} {kind}")


def _chunk_bytes_as(codes: np.ndarray, outlier: np.ndarray, elem: int, direct: bool) -> int:
    """Bytes of a chunk of these codes coded as an encoded (Lorenzo) or a direct chunk: the
    size the encoder compares (fzlight_format.h), from codes read off the stream."""
    m = codes.size
    nblocks = -(-m // 32)
    if direct:
        q = np.where(outlier, 0, codes).astype(np.int64)
        q = np.concatenate([q, np.zeros(32 * nblocks - m, dtype=np.int64)])
        mags = np.abs(q).reshape(nblocks, 32)
    else:  # effective codes: an outlier repeats the previous one (0 before the first value)
        e = np.empty(m, dtype=np.int64)
        prev = 0
        for i in range(m):
            prev = prev if outlier[i] else int(codes[i])
            e[i] = prev
        e = np.concatenate([e, np.full(32 * nblocks - m, e[-1], dtype=np.int64)])
        mags = np.abs(np.diff(np.concatenate([[e[0]], e]))).reshape(nblocks, 32)
    lens = [int(blk.max()).bit_length() for blk in mags]
    fixed = 5 if direct else 9
    n_out = int(outlier.sum())
    return fixed + -(-nblocks // 8) + sum(1 + 4 * (n + 1) for n in lens if n) + n_out * (2 + elem)


def _assert_predictor_rule(st_: Stream, what: str) -> set:
    """Every lossy chunk of the stream follows the format's rule, sizes computed from the codes it
    holds: direct exactly when that is smaller than encoded by more than q_start's 4 bytes.
    Returns the lossy kinds seen."""
    seen = set()
    for c, kind in enumerate(st_.kinds()):
        if kind not in KINDS2:
            continue
        lay = st_.encoded(c)
        codes = st_.codes(c)
        outlier = np.zeros(lay.m, dtype=bool)
        for k in range(lay.n_out):
            outlier[st_.u16(lay.outliers + 2 * k)] = True
        mine = _chunk_bytes_as(codes, outlier, st_.elem, kind == "direct")
        other = _chunk_bytes_as(codes, outlier, st_.elem, kind != "direct")
        assert mine == lay.size, (what, c, kind, mine, lay.size)
        direct, encoded = (mine, other) if kind == "direct" else (other, mine)
        assert (direct + 4 < encoded) == (kind == "direct"), (what, c, kind, direct, encoded)
        seen.add(kind)
    return seen


_LOSSY = [n for n in {**SMALL, **BIG} if n not in ("empty", "single")]


@pytest.mark.parametrize("name", _LOSSY)
def test_encoder_follows_the_predictor_rule(name):
    """The rule of fzlight_format.h, which the GPU encoder must follow byte for byte."""
    _, buf, _ = valid(name)
    st_ = Stream(buf)
    seen = _assert_predictor_rule(st_, name)
    if name in ("small_direct", "big_f64_mixed"):  # both kinds, so the rule is tested both ways
        assert seen == set(KINDS2), (name, st_.kinds())


def test_predictor_choice_independent_of_order_and_threads():
    """Chunks alternate smooth / noise: an encoder thread codes a chunk first the way its
    previous chunk went (fzlight.cpp, encode_chunk), so that guess is wrong at every switch and
    differs with the thread count. The stream is the same bytes for 1, 2 and 3 threads, every
    chunk follows the format's rule, and decodes to the format's values."""
    g = torch.Generator().manual_seed(41)
    # "bits": random bit patterns, raw after either guess (packing stops early, the other kind
    # decides alone)
    pattern = ["smooth", "noise", "noise", "smooth", "smooth", "noise", "bits", "noise", "smooth"]
    pattern += ["bits", "smooth", "noise", "noise"]
    smooth = 5 * torch.sin(torch.linspace(0, 3, 512, dtype=torch.float64)).float()
    parts = {
        "smooth": lambda: smooth,
        "noise": lambda: torch.randn(512, generator=g),
        "bits": lambda: make_data("random_bits", 512, torch.float32, seed=45),
    }
    x = torch.cat([parts[p]() for p in pattern])
    x[600], x[1500] = float("nan"), 1e30  # outliers in a noise chunk and in a smooth one
    streams = [zccl_torch.compress(x, 1e-3, chunk_size=512, threads=t) for t in (1, 2, 3)]
    for t, s in zip((2, 3), streams[1:], strict=True):
        assert torch.equal(s, streams[0]), f"{t} threads wrote other bytes than 1"
    st_ = Stream(streams[0])
    want = {"smooth": "encoded", "noise": "direct", "bits": "raw"}
    assert st_.kinds() == [want[p] for p in pattern]
    _assert_predictor_rule(st_, "alternating")
    got = zccl_torch.decompress(streams[0])
    for c in range(st_.nchunks):
        if st_.kind(c) in KINDS2:
            want_c = _format_values(st_, c)
            assert_bitwise_equal(want_c, got[512 * c : 512 * (c + 1)], f"chunk {c}")
    assert_within_bound(x, got, 1e-3, "alternating")


@pytest.mark.parametrize("version", [1, 2])
def test_direct_chunks_in_older_versions_rejected(version):
    """Mode 4 is version 3's: relabelled version 1 or 2 (header CRC re-sealed), a stream with
    direct chunks is refused."""
    for dtype in DTYPES4.values():
        _, st0 = _encoded_stream(dtype, direct=True)
        st_ = Stream(st0.array())
        st_.u8(4, version)
        st_.seal(chunks=False, total=False)
        _rejected_everywhere(st_, f"{dtype}: direct chunks in a version-{version} stream")


@pytest.mark.parametrize("dt", list(DTYPES4))
def test_encoded_and_direct_relabelled_rejected(dt):
    """An encoded chunk labelled direct, or a direct one labelled encoded: the fixed fields
    differ by q_start's 4 bytes, so the sizes inside the chunk no longer add up."""
    for direct in (False, True):
        _, st0 = _encoded_stream(DTYPES4[dt], direct)
        new = MODE_ENCODED if direct else MODE_DIRECT
        for c in range(st0.nchunks):
            st_ = _edit_chunk(Stream(st0.array()), c, lambda s, off, size, new=new: s.u8(off, new))
            _rejected_everywhere(st_, f"{dt}: chunk {c} relabelled mode {new}", chunks=[c])


# -- constant chunks and repeats -------------------------------------------------------------


def _constant_stream(dtype, value=2.5):
    """[constant, repeat] of 64 values at chunk 32."""
    st_ = Stream(zccl_torch.compress(torch.full((64,), value, dtype=dtype), 1e-2, chunk_size=32))
    assert st_.kinds() == ["constant", "repeat"], st_.kinds()
    return st_


def test_crafted_repeat_as_first_chunk_rejected():
    st0 = _constant_stream(torch.float32)
    const = st0.chunk_bytes(0)
    crc = crc32c(const)
    # chunk 0 a repeat of nothing, chunk 1 the constant; then both chunks repeats
    for bodies in ([None, const], [None, None]):
        _rejected_everywhere(st0.with_chunks(bodies, crcs={0: crc, 1: crc}), f"repeats {bodies}")
    # the one chunk of a one-chunk stream
    _, buf, _ = valid("single")
    s1 = Stream(buf)
    _rejected_everywhere(
        s1.with_chunks([None], crcs={0: crc32c(s1.chunk_bytes(0))}),
        "single: the only chunk a repeat",
    )


@pytest.mark.parametrize(
    ("name", "chunk"),
    [
        ("small_f32", 1),
        ("small_f32", 3),
        ("small_f16", 2),
        ("small_f16", 1),
        ("small_lossless_mixed_f64", 1),
        ("small_lossless_mixed_f64", 2),
        ("small_const_runs", 4),
    ],
)
def test_crafted_repeat_after_non_constant_rejected(name, chunk):
    """A repeat entry after an encoded, direct, raw or lossless chunk (CRC: the 1 + elem bytes
    that end where it starts, as for a genuine repeat) is refused by parse(), so by every entry
    point."""
    _, buf, _ = valid(name)
    st0 = Stream(buf)
    if st0.kind(chunk - 1) == "lossless" and not HAVE_ZSTD:
        pytest.skip("no zstd")
    assert st0.kind(chunk - 1) in ("encoded", "direct", "raw", "lossless"), st0.kinds()
    st_ = st0.replace_chunk(chunk, None)
    _rejected_everywhere(st_, f"{name}: chunk {chunk} a repeat after a {st0.kind(chunk - 1)} chunk")
    with pytest.raises(CorruptStreamError):
        zccl_torch.stream_info(st_.tensor())


@pytest.mark.parametrize("mode", [MODE_ENCODED, MODE_RAW, MODE_LOSSLESS, 0xFF])
def test_crafted_constant_relabelled_before_repeat_rejected(mode):
    """A constant chunk relabelled (CRCs re-sealed, the repeat's included): the constant chunk is
    refused, and so is the repeat (it repeats a chunk that is not constant), alone too."""
    for dtype in DTYPES4.values():
        st0 = _constant_stream(dtype)
        st_ = _edit_chunk(st0.copy(), 0, lambda s, off, size: s.u8(off, mode))
        assert st_.chunk_crc(1) == crc32c(st_.chunk_bytes(0))
        _rejected_everywhere(st_, f"{dtype}: constant relabelled {mode}, then a repeat")


@pytest.mark.parametrize("dt", list(DTYPES4))
def test_crafted_constant_wrong_size_rejected(dt):
    st0 = _constant_stream(DTYPES4[dt])
    const = st0.chunk_bytes(0)
    value = const[1:]
    for body in (
        const + b"\x00",
        const[:-1],
        bytes([MODE_CONSTANT]),
        const + value,
        bytes([MODE_CONSTANT]) + value * 32,
    ):
        # alone (the repeat replaced by a second copy of the chunk) and before the repeat
        for second in (body, None):
            st_ = st0.with_chunks([body, second])
            then = "a repeat" if second is None else "it again"
            _rejected_everywhere(
                st_, f"{dt}: constant chunk of {len(body)} bytes (not {len(const)}), then {then}"
            )


def test_crafted_constant_chunk_tail_rejected():
    """Constant chunks of a run with the wrong size (the repeats after them are refused too)."""
    _, buf, _ = valid("small_const_runs")
    st0 = Stream(buf)
    for c in (0, 4, 6):
        assert st0.kind(c) == "constant"
        body = st0.chunk_bytes(c)
        for bad in (body + b"\x00", body[:-1]):
            st_ = st0.replace_chunk(c, bad)
            assert_rejected(st_.array(), f"const runs: chunk {c} of {len(bad)} bytes", threads=1)
            with pytest.raises(CorruptStreamError):
                zccl_torch.decompress_chunk(st_.tensor(), c)


def test_crafted_repeat_crc_mismatch_rejected():
    """A repeat's CRC must be its constant chunk's: any other value refuses that chunk (and the
    whole stream), while every other chunk still decodes exactly by random access."""
    _, buf, ref = valid("small_const_runs")
    st0 = Stream(buf)
    repeats = [c for c, k in enumerate(st0.kinds()) if k == "repeat"]
    assert repeats == [1, 2, 5, 7], st0.kinds()
    other_value = bytes([MODE_CONSTANT]) + np.float32(3.5).tobytes()
    for c in repeats:
        good = st0.chunk_crc(c)
        for bad in (
            good ^ 1,
            good ^ 0x80000000,
            0,
            crc32c(b""),
            crc32c(other_value),
            crc32c(bytes(st0.b[st0.header_bytes : st0.header_bytes + 4])),
        ):
            if bad == good:
                continue
            st_ = st0.copy()
            st_.chunk_crc(c, bad)
            st_.seal(chunks=False)
            _rejected_everywhere(
                st_, f"const runs: repeat {c} CRC {good:#x} -> {bad:#x}", chunks=[c]
            )
            _others_exact(st_, ref, {c}, f"repeat {c} CRC {bad:#x}")


def test_crafted_repeat_of_other_constant_rejected():
    """A repeat that follows a constant of other bits than its own CRC says: the 7.0 chunk's
    repeat moved after the -0.0 chunk keeps its CRC (of 7.0): refused."""
    _, buf, _ = valid("small_const_runs")
    st0 = Stream(buf)
    st_ = st0.copy()
    st_.chunk_crc(7, st0.chunk_crc(5))
    st_.seal(chunks=False)
    _rejected_everywhere(st_, "repeat of -0.0 with the CRC of 7.0", chunks=[7])


def test_repeats_decode_by_random_access():
    """A repeat chain (constant, repeat, repeat) and a partial repeat (10 values) decode alone."""
    x, buf, _ = valid("small_const_runs")
    for c, n in ((1, 32), (2, 32), (5, 32), (7, 10)):
        got = zccl_torch.decompress_chunk(_t(buf), c)
        assert_bitwise_equal(x[32 * c : 32 * c + n], got, f"chunk {c}")


# -- lossless codec 1 (byte planes + zstd) ---------------------------------------------------


def _lossless_chunks(name):
    _, buf, ref = valid(name)
    st0 = Stream(buf)
    chunks = [c for c, k in enumerate(st0.kinds()) if k == "lossless"]
    assert chunks, st0.kinds()
    return st0, ref, chunks


@needs_zstd
@pytest.mark.parametrize("name", ["small_lossless_f32", "small_lossless_mixed_f64"])
def test_crafted_lossless_chunk_in_codec0_stream_rejected(name):
    """The codec field set to 0 (header re-sealed): the mode-3 chunks are refused, the raw,
    constant and repeat chunks of the stream still decode exactly by random access."""
    st0, ref, chunks = _lossless_chunks(name)
    st_ = st0.copy()
    st_.u32(36, 0)
    st_.seal()
    assert_rejected(st_.array(), f"{name}: codec 0 with mode-3 chunks")
    for c in chunks:
        with pytest.raises(CorruptStreamError):
            zccl_torch.decompress_chunk(st_.tensor(), c)
    _others_exact(st_, ref, set(chunks), f"{name}: codec 0")


@needs_zstd
def test_crafted_lossless_chunk_in_lossy_stream_rejected():
    """A mode-3 chunk (of the right value count and type) inside a lossy stream, and an encoded
    chunk inside a codec-1 stream, are refused."""
    x = make_data("sin", 256, torch.float32, seed=23)
    lossy = Stream(zccl_torch.compress(x, 1e-3, chunk_size=128))
    lossless = Stream(zccl_torch.compress(x, mode="lossless", chunk_size=128))
    assert lossy.kinds() == ["encoded", "encoded"] and lossless.kinds() == ["lossless"] * 2
    for c in range(2):
        st_ = lossy.replace_chunk(c, lossless.chunk_bytes(c))
        _rejected_everywhere(st_, f"mode-3 chunk {c} in a lossy stream", chunks=[c])
        st_ = lossless.replace_chunk(c, lossy.chunk_bytes(c))
        _rejected_everywhere(st_, f"encoded chunk {c} in a codec-1 stream", chunks=[c])


@needs_zstd
@pytest.mark.parametrize("name", ["small_lossless_f32", "small_lossless_mixed_f64"])
def test_crafted_zstd_frame_truncated_rejected(name):
    st0, ref, chunks = _lossless_chunks(name)
    for c in chunks:
        body = st0.chunk_bytes(c)
        for cut in sorted({1, 2, 3, 4, 8, len(body) // 2, len(body) - 2, len(body) - 1}):
            st_ = st0.replace_chunk(c, body[: len(body) - cut])
            _rejected_everywhere(st_, f"{name}: chunk {c} frame minus {cut} bytes", chunks=[c])
        _others_exact(st_, ref, {c}, f"{name}: chunk {c} truncated")


@needs_zstd
@pytest.mark.parametrize("name", ["small_lossless_f32", "small_lossless_mixed_f64"])
def test_crafted_zstd_frame_extra_bytes_rejected(name):
    st0, _, chunks = _lossless_chunks(name)
    for c in chunks:
        body = st0.chunk_bytes(c)
        for extra in (b"\x00", b"\xff" * 3, bytes(range(17)), body[1:], b"\x28\xb5\x2f\xfd"):
            if len(body) + len(extra) > 1 + st0.chunk_values(c) * st0.elem:
                extra = extra[: 1 + st0.chunk_values(c) * st0.elem - len(body)]
                if not extra:
                    continue
            st_ = st0.replace_chunk(c, body + extra)
            _rejected_everywhere(st_, f"{name}: chunk {c} frame + {extra[:8]!r}...", chunks=[c])


@needs_zstd
@pytest.mark.parametrize("extra", ["empty frame", "skippable frame"])
def test_crafted_zstd_trailing_frame_rejected(extra):
    """A mode-3 chunk is exactly one zstd frame: a second (empty or skippable) frame after it is
    refused, although zstd itself would decode the pair."""
    st0, _, chunks = _lossless_chunks("small_lossless_f32")
    c = chunks[0]
    body = st0.chunk_bytes(c)
    tail = ZSTD_EMPTY_FRAME if extra == "empty frame" else ZSTD_SKIPPABLE_FRAME
    _rejected_everywhere(
        st0.replace_chunk(c, body + tail), f"chunk {c} frame + {extra}", chunks=[c]
    )


def _ramp_lossless():
    """A codec-1 stream of 2 chunks of 64 float32 values whose byte planes compress with plain
    RLE blocks, so hand-made frames fit in a chunk (smaller than raw)."""
    x = torch.arange(128, dtype=torch.float32) / 8 + 8
    st_ = Stream(zccl_torch.compress(x, mode="lossless", chunk_size=64))
    assert st_.kinds() == ["lossless", "lossless"], st_.kinds()
    return x, st_


@needs_zstd
def test_crafted_zstd_frame_by_hand_decodes():
    """Control for the tests below: a hand-made frame (raw + RLE blocks) of the chunk's byte
    planes, with its content size, is a valid mode-3 chunk and decodes exactly - so when the
    variants below are refused, it is for the one thing each changes."""
    x, st0 = _ramp_lossless()
    planes = byte_planes(x[64:].numpy().tobytes(), 4)
    frame = zstd_frame(zstd_blocks(planes), len(planes))
    assert 1 + len(frame) < 1 + 64 * 4
    st_ = st0.replace_chunk(1, bytes([MODE_LOSSLESS]) + frame)
    assert_bitwise_equal(x, zccl_torch.decompress(st_.tensor()), "hand-made frame")
    assert_bitwise_equal(x[64:], zccl_torch.decompress_chunk(st_.tensor(), 1), "chunk 1")


@needs_zstd
def test_crafted_zstd_frame_wrong_size_rejected():
    """Frames that decode to fewer or more bytes than the chunk's values, or lie about or omit
    their content size, or carry a wrong checksum, are refused."""
    x, st0 = _ramp_lossless()
    vals = x[64:].numpy().tobytes()
    planes = byte_planes(vals, 4)
    short, long_ = byte_planes(vals[:-4], 4), byte_planes(vals + vals[-4:], 4)
    cases = {
        "one value short": zstd_frame(zstd_blocks(short), len(short)),
        "one value more": zstd_frame(zstd_blocks(long_), len(long_)),
        "one byte short": zstd_frame(zstd_blocks(planes[:-1]), len(planes) - 1),
        "one byte more": zstd_frame(zstd_blocks(planes + b"\x00"), len(planes) + 1),
        "content size says n, holds n - 1": zstd_frame(zstd_blocks(planes[:-1]), len(planes)),
        "content size says n - 1, holds n": zstd_frame(zstd_blocks(planes), len(planes) - 1),
        "content size says n + 1, holds n": zstd_frame(zstd_blocks(planes), len(planes) + 1),
        "no content size": zstd_frame(zstd_blocks(planes), None),
        "empty frame": ZSTD_EMPTY_FRAME,
        "wrong checksum": zstd_frame(
            zstd_blocks(planes), len(planes), checksum=b"\x01\x02\x03\x04"
        ),
        "not a frame": b"\x00" * 40,
    }
    for what, frame in cases.items():
        assert 1 + len(frame) <= 1 + 64 * 4, what  # within the chunk's raw size: parse accepts it
        st_ = st0.replace_chunk(1, bytes([MODE_LOSSLESS]) + frame)
        _rejected_everywhere(st_, f"chunk 1 frame: {what}", chunks=[1])
        _others_exact(st_, x, {1}, what)


def test_crafted_codec1_needs_zstd_or_is_refused_cleanly():
    """A codec-1 stream decodes where the build has zstd; without it, it is refused with
    CorruptStreamError before any chunk (never a crash), even when no chunk uses the codec."""
    x, buf, _ = valid("small_lossless_mixed_f64")
    st_ = Stream(buf)
    if HAVE_ZSTD:
        assert st_.codec == 1
        assert_bitwise_equal(x, zccl_torch.decompress(_t(buf)), "codec 1")
    else:
        assert st_.codec == 0
        st_.u32(36, 1)
        st_.seal()
        _rejected_everywhere(st_, "codec-1 stream without zstd")


# -- half precision ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["small_f16", "small_bf16_2d", "big_f16", "big_bf16"])
def test_half_fixture_outliers_patched_exactly(name):
    """The outliers of a half stream are stored as 2-byte values and decoded bit-exactly."""
    x, buf, ref = valid(name)
    st_ = Stream(buf)
    assert st_.elem == 2
    flat, rflat = x.reshape(-1).view(torch.int16), ref.reshape(-1).view(torch.int16)
    seen = 0
    for c, k in enumerate(st_.kinds()):
        if k != "encoded":
            continue
        lay = st_.encoded(c)
        for j in range(lay.n_out):
            i = c * st_.chunk_len + st_.u16(lay.outliers + 2 * j)
            stored = st_.u16(lay.outliers + 2 * lay.n_out + 2 * j)
            assert stored == int(flat[i]) & 0xFFFF == int(rflat[i]) & 0xFFFF, (name, c, i)
            seen += 1
    assert seen > 0


@pytest.mark.parametrize("name", ["small_f16", "small_bf16_2d"])
def test_crafted_half_outlier_value_changes_decode(name):
    """Sanity of the layout reading: an outlier's stored 2 bytes, changed and re-sealed, show up
    in the decoded tensor at its index (the checksums are the only guard against that)."""
    _x, buf, ref = valid(name)
    st0 = Stream(buf)
    c = next(c for c, k in enumerate(st0.kinds()) if k == "encoded" and st0.encoded(c).n_out)
    lay = st0.encoded(c)
    i = c * st0.chunk_len + st0.u16(lay.outliers)
    st_ = st0.copy()
    st_.u16(lay.outliers + 2 * lay.n_out, 0x3C00)  # 1.0 in float16, 1.875 in bfloat16
    st_.seal()
    y = zccl_torch.decompress(st_.tensor()).reshape(-1)
    assert int(y.view(torch.int16)[i]) == 0x3C00
    mask = torch.ones(y.numel(), dtype=torch.bool)
    mask[i] = False
    assert_bitwise_equal(ref.reshape(-1)[mask], y[mask], name)


def test_crafted_half_dtype_edits_rejected():
    """A half stream (raw chunks, outliers) relabelled float32/float64, and float32/float64
    streams relabelled half, are refused; float16 <-> bfloat16 changes nothing in the layout
    (same value size, same bin type), so only the header CRC guards it."""
    for name, new in (
        ("small_f16", 1),
        ("small_f16", 2),
        ("small_bf16_2d", 1),
        ("small_f32", 3),
        ("small_f32", 4),
        ("small_f64_2d", 3),
        ("small_raw_f64", 4),
    ):
        _, buf, _ = valid(name)
        st_ = Stream(buf)
        st_.u8(5, new)
        st_.seal(chunks=False)
        _rejected_everywhere(
            st_,
            f"{name}: dtype -> {new}",
            chunks=[
                c
                for c, k in enumerate(Stream(buf).kinds())
                if k in ("raw", "constant", "repeat", "lossless")
                or (k == "encoded" and Stream(buf).encoded(c).n_out)
            ],
        )
    # the header CRC alone, unsealed
    _, buf, _ = valid("small_f16")
    st_ = Stream(buf)
    st_.u8(5, 4)
    assert_rejected(st_.array(), "float16 -> bfloat16 without resealing")


@examples(150)
@given(data=st.data())
def test_crafted_random_field_values(data):
    """Random values in any header word (header checksum re-sealed): rejected, or (for the few
    fields whose change keeps the stream self-consistent) decoded - never a crash or another
    exception type."""
    name = data.draw(
        st.sampled_from(
            [
                "small_f32",
                "small_f64_2d",
                "small_constant",
                "small_f16",
                "small_const_runs",
                "small_lossless_f32",
            ]
        )
    )
    _, buf, _ = valid(name)
    st_ = Stream(buf)
    off = data.draw(st.sampled_from([4, 5, 6, 7, 8, 16, 24, 32, 36, 40, 48]))
    width = {4: 1, 5: 1, 6: 1, 7: 1, 32: 4, 36: 4}.get(off, 8)
    value = data.draw(st.integers(0, 2 ** (8 * width) - 1))
    st_.b[off : off + width] = value.to_bytes(width, "little")
    hb = st_.header_bytes if st_.chunk_len else 10**9
    if 52 <= hb <= len(st_.b):
        st_.u32(hb - 4, crc32c(bytes(st_.b[: hb - 4])))
    mut = st_.array()
    if np.array_equal(mut, buf):
        return
    try:
        y = zccl_torch.decompress(_t(mut))
    except CorruptStreamError:
        return
    # Fields whose change can leave a self-consistent stream (no checksum can tell): eb (16),
    # the bin width (24; -0.0 for 0.0 in a lossless stream), the dtype (5) of a stream without
    # outliers, raw or constant chunks (or float16 <-> bfloat16), and the codec (36) of a
    # lossless stream without zstd chunks.
    allowed = {5, 16, 24} | ({36} if not HAVE_ZSTD and name == "small_lossless_f32" else set())
    assert off in allowed, f"{name}: header word at {off} = {value:#x} decoded silently"
    if off == 16:
        assert_bitwise_equal(valid(name)[2], y, "eb-only change")
