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
from helpers_compress import assert_bitwise_equal, examples, make_data
from hypothesis import given
from hypothesis import strategies as st

import zccl_torch

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
        make_data("random_bits", 2000, torch.float64, seed=8),
        make_data("huge", 2200, torch.float64, seed=10),  # all outliers: raw chunks
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
        except Exception as exc:
            raise AssertionError(
                f"{what}: decompress_chunk({i}) raised {type(exc).__name__}: {exc}"
            ) from exc
        assert_bitwise_equal(flat[i * chunk_size:(i + 1) * chunk_size], c,
                             f"{what}: decompress_chunk({i}) silently wrong")


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

@pytest.mark.parametrize("name", [*SMALL, *BIG])
def test_fixture_streams_are_valid(name):
    x, buf, ref = valid(name)
    info = zccl_torch.stream_info(_t(buf))
    assert info.total_bytes == buf.size
    assert ref.shape == x.shape
    modes = {Stream(buf).b[Stream(buf).chunk_offset(c)] for c in range(info.num_chunks)}
    if name in ("small_f32", "small_f64_2d", "small_raw_f32", "big_f64_mixed", "single"):
        assert 1 in modes, f"{name} should contain a raw chunk: modes {modes}"
    if name in ("small_f32", "small_f64_2d", "small_constant", "big_f32", "big_f64_mixed"):
        assert 0 in modes, f"{name} should contain an encoded chunk: modes {modes}"
    if name in BIG or name.startswith("small_f"):
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
        assert_rejected(mut, f"{name}: byte {pos}/{buf.size} ^= {int(mut[pos] ^ buf[pos]):#04x}",
                        threads=rng.choice((None, 1, 2, 3)))


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


@pytest.mark.parametrize(
    "obj", [b"ZCCL", bytearray(10), np.zeros(10, dtype=np.uint8), None, [1, 2]]
)
def test_non_tensor_stream_is_type_error(obj):
    with pytest.raises(TypeError):
        zccl_torch.decompress(obj)
    with pytest.raises(TypeError):
        zccl_torch.stream_info(obj)


# --------------------------------------------------------------------------------------------
# Crafted streams with VALID checksums (format version 1, csrc/compress/fzlight_format.h).
# A buggy encoder or a hostile peer can produce internally inconsistent streams whose CRCs
# match; the decoder must still validate every field and length before touching memory.
# These tests know the layout; update them together with the format version.
# --------------------------------------------------------------------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class Stream:
    """A mutable view of a version-1 stream that can re-seal its checksums."""

    def __init__(self, buf: np.ndarray):
        self.b = bytearray(buf.tobytes())

    # header fields
    def u8(self, off, v=None):
        if v is None:
            return self.b[off]
        self.b[off] = v & 0xFF

    def u32(self, off, v=None):
        if v is None:
            return int.from_bytes(self.b[off:off + 4], "little")
        self.b[off:off + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")

    def u64(self, off, v=None):
        if v is None:
            return int.from_bytes(self.b[off:off + 8], "little")
        self.b[off:off + 8] = (v & (2**64 - 1)).to_bytes(8, "little")

    def f64(self, off, v=None):
        if v is None:
            return np.frombuffer(bytes(self.b[off:off + 8]), dtype=np.float64)[0]
        self.b[off:off + 8] = np.float64(v).tobytes()

    @property
    def ndim(self):
        return self.b[7]

    @property
    def count(self):
        return self.u64(8)

    @property
    def chunk_len(self):
        return self.u32(32)

    @property
    def nchunks(self):
        if self.chunk_len == 0:
            return 2**64  # a chunk length of 0 has no consistent layout
        return -(-self.count // self.chunk_len)

    @property
    def table(self):
        return 48 + 8 * self.ndim

    @property
    def header_bytes(self):
        return self.table + 8 * self.nchunks + 4

    def chunk_size(self, c):
        return self.u32(self.table + 8 * c)

    def chunk_offset(self, c):
        return self.header_bytes + sum(self.chunk_size(i) for i in range(c))

    def seal(self, chunks=True, total=True):
        """Recomputes chunk CRCs, the total size and the header CRC."""
        if chunks:
            for c in range(self.nchunks):
                off, size = self.chunk_offset(c), self.chunk_size(c)
                self.u32(self.table + 8 * c + 4, crc32c(bytes(self.b[off:off + size])))
        if total:
            self.u64(40, len(self.b))
        hb = self.header_bytes
        self.u32(hb - 4, crc32c(bytes(self.b[:hb - 4])))
        return self

    def array(self):
        return np.frombuffer(bytes(self.b), dtype=np.uint8).copy()


def _encoded_stream():
    """A float32 stream whose chunks are all encoded (not raw), with outliers."""
    x = make_data("sin", 256, torch.float32, seed=21)
    x[5], x[40], x[41] = float("nan"), 1e30, -float("inf")
    s = zccl_torch.compress(x, 1e-3, chunk_size=64)
    st_ = Stream(s.numpy())
    for c in range(st_.nchunks):
        assert st_.b[st_.chunk_offset(c)] == 0, "fixture chunk is raw; pick smoother data"
    return x, st_


def test_resealing_unchanged_stream_still_decodes():
    """Checks the test's own CRC-32C and layout knowledge against the real encoder."""
    for name in [*SMALL, *BIG][:7]:
        _, buf, _ = valid(name)
        st_ = Stream(buf)
        assert st_.u64(40) == buf.size
        resealed = Stream(buf).seal().array()
        assert np.array_equal(resealed, buf), f"{name}: re-sealing changed the stream"
    _, st_ = _encoded_stream()
    assert np.array_equal(Stream(st_.array()).seal().array(), st_.array())


HEADER_EDITS = {
    "version 2": lambda s: s.u8(4, 2),
    "version 0": lambda s: s.u8(4, 0),
    "dtype 0": lambda s: s.u8(5, 0),
    "dtype 3": lambda s: s.u8(5, 3),
    "dtype f32<->f64": lambda s: s.u8(5, 3 - s.u8(5)),
    "block length 16": lambda s: s.u8(6, 16),
    "block length 64": lambda s: s.u8(6, 64),
    "count + 1": lambda s: s.u64(8, s.count + 1),
    "count - 1": lambda s: s.u64(8, s.count - 1),
    "count 2**63": lambda s: s.u64(8, 2**63),
    "count 2**64-1": lambda s: s.u64(8, 2**64 - 1),
    "eb NaN": lambda s: s.f64(16, float("nan")),
    "eb -1": lambda s: s.f64(16, -1.0),
    "eb inf": lambda s: s.f64(16, float("inf")),
    "bin NaN": lambda s: s.f64(24, float("nan")),
    "bin -bin": lambda s: s.f64(24, -s.f64(24)),
    "bin inf": lambda s: s.f64(24, float("inf")),
    "chunk_len 0": lambda s: s.u32(32, 0),
    "chunk_len 31": lambda s: s.u32(32, 31),
    "chunk_len 65568": lambda s: s.u32(32, 65568),
    "chunk_len 2**32-32": lambda s: s.u32(32, 2**32 - 32),
    "reserved 1": lambda s: s.u32(36, 1),
    "shape[0] + 1": lambda s: s.u64(48, s.u64(48) + 1),
    "shape[0] 2**63": lambda s: s.u64(48, 2**63),
}


@pytest.mark.parametrize("edit", list(HEADER_EDITS))
@pytest.mark.parametrize("name", ["small_f32", "small_f64_2d", "small_raw_f64"])
def test_crafted_header_fields_rejected(name, edit):
    _, buf, _ = valid(name)
    st_ = Stream(buf)
    HEADER_EDITS[edit](st_)
    # re-seal header CRC only (a count change moves the table; only the header CRC is rewritten)
    hb = st_.header_bytes
    if hb > len(st_.b) or hb < 52:
        assert_rejected(st_.array(), f"{name}: {edit} (unsealed)")
        return
    st_.u32(hb - 4, crc32c(bytes(st_.b[:hb - 4])))
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
            st_.u32(hb - 4, crc32c(bytes(st_.b[:hb - 4])))
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


def test_crafted_float32_bin_not_representable_rejected():
    _, buf, _ = valid("small_f32")
    st_ = Stream(buf)
    st_.f64(24, float(st_.f64(24)) * (1 + 2**-40))
    st_.seal()
    assert_rejected(st_.array(), "float32 stream with a bin not representable in float32")


def test_crafted_chunk_table_sizes_rejected():
    _, st0 = _encoded_stream()
    buf = st0.array()
    n = st0.nchunks
    for c in range(n):
        for new in (0, 1, st0.chunk_size(c) - 1, st0.chunk_size(c) + 1, 2**32 - 1):
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


def _edit_chunk(st_, c, fn):
    off = st_.chunk_offset(c)
    fn(st_, off, st_.chunk_size(c))
    return st_.seal()


def test_crafted_chunk_mode_rejected():
    _, st0 = _encoded_stream()
    for mode in (2, 3, 0x80, 0xFF):
        st_ = _edit_chunk(Stream(st0.array()), 1, lambda s, off, size, mode=mode: s.u8(off, mode))
        assert_rejected(st_.array(), f"chunk mode {mode}")


def test_crafted_encoded_as_raw_rejected():
    """An encoded chunk relabelled raw has the wrong size for a raw chunk."""
    _, st0 = _encoded_stream()
    st_ = _edit_chunk(Stream(st0.array()), 0, lambda s, off, size: s.u8(off, 1))
    assert_rejected(st_.array(), "encoded chunk relabelled raw")


@pytest.mark.parametrize("name", ["small_raw_f32", "small_f32", "small_f64_2d", "single",
                                  "big_f64_mixed"])
def test_crafted_raw_as_encoded_rejected(name):
    _, buf, _ = valid(name)
    s0 = Stream(buf)
    raw = [c for c in range(s0.nchunks) if s0.b[s0.chunk_offset(c)] == 1]
    assert raw, f"{name} has no raw chunk"
    for c in raw:
        st_ = _edit_chunk(Stream(buf), c, lambda s, off, size: s.u8(off, 0))
        assert_rejected(st_.array(), f"{name}: raw chunk {c} relabelled encoded")


def test_crafted_code_lengths_rejected():
    _, st0 = _encoded_stream()
    m = st0.chunk_len
    nblocks = m // 32
    for blk in range(nblocks):
        for length in (32, 33, 200, 255):
            st_ = _edit_chunk(Stream(st0.array()), 0,
                              lambda s, off, size, b=blk, v=length: s.u8(off + 9 + b, v))
            assert_rejected(st_.array(), f"block {blk} code length {length}")
        # a different but legal length: the sizes inside the chunk no longer add up
        st_ = Stream(st0.array())
        old = st_.u8(st_.chunk_offset(0) + 9 + blk)
        new = (old + 1) % 32
        st_ = _edit_chunk(st_, 0, lambda s, off, size, b=blk, v=new: s.u8(off + 9 + b, v))
        assert_rejected(st_.array(), f"block {blk} code length {old} -> {(old + 1) % 32}")


def _outlier_layout(st_, c):
    """(offset of n_outliers, n_outliers, offset of the index array) of encoded chunk c."""
    off = st_.chunk_offset(c)
    m = min(st_.chunk_len, st_.count - c * st_.chunk_len)
    nblocks = -(-m // 32)
    lens = st_.b[off + 9:off + 9 + nblocks]
    payload = sum(0 if L == 0 else 4 * (L + 1) for L in lens)
    n_out = st_.u32(off + 5)
    return off + 5, n_out, off + 9 + nblocks + payload, m


def test_crafted_outlier_fields_rejected():
    _, st0 = _encoded_stream()
    # chunk 0 holds the NaN at 5; chunk 0 also holds 40, 41 (chunk_size 64)
    at_n, n_out, at_idx, m = _outlier_layout(st0, 0)
    assert n_out >= 3, n_out
    cases = {
        "n_outliers + 1": lambda s: s.u32(at_n, n_out + 1),
        "n_outliers 2**32-1": lambda s: s.u32(at_n, 2**32 - 1),
        "n_outliers m+1": lambda s: s.u32(at_n, m + 1),
        "index == m": lambda s: s.b.__setitem__(slice(at_idx + 2 * (n_out - 1), at_idx + 2 * n_out),
                                                 m.to_bytes(2, "little")),
        "index 65535": lambda s: s.b.__setitem__(slice(at_idx, at_idx + 2), b"\xff\xff"),
        "indices swapped": lambda s: s.b.__setitem__(
            slice(at_idx, at_idx + 4), bytes(s.b[at_idx + 2:at_idx + 4] + s.b[at_idx:at_idx + 2])),
        "duplicate index": lambda s: s.b.__setitem__(
            slice(at_idx + 2, at_idx + 4), bytes(s.b[at_idx:at_idx + 2])),
    }
    for what, fn in cases.items():
        st_ = Stream(st0.array())
        fn(st_)
        st_.seal()
        assert_rejected(st_.array(), f"outliers: {what}")
        try:
            zccl_torch.decompress_chunk(_t(st_.array()), 0)
        except CorruptStreamError:
            pass
        else:
            raise AssertionError(f"outliers: {what}: decompress_chunk(0) accepted it")


def test_crafted_lossless_stream_with_encoded_chunk_rejected():
    """Setting bin to 0 on a lossy stream: encoded chunks cannot be decoded."""
    _, st0 = _encoded_stream()
    st_ = Stream(st0.array())
    st_.f64(16, 0.0)
    st_.f64(24, 0.0)
    st_.seal()
    assert_rejected(st_.array(), "bin 0 with encoded chunks")


@examples(150)
@given(data=st.data())
def test_crafted_random_field_values(data):
    """Random values in any header word (header checksum re-sealed): rejected, or (for the few
    fields whose change keeps the stream self-consistent) decoded - never a crash or another
    exception type."""
    name = data.draw(st.sampled_from(["small_f32", "small_f64_2d", "small_constant"]))
    _, buf, _ = valid(name)
    st_ = Stream(buf)
    off = data.draw(st.sampled_from([4, 5, 6, 7, 8, 16, 24, 32, 36, 40, 48]))
    width = {4: 1, 5: 1, 6: 1, 7: 1, 32: 4, 36: 4}.get(off, 8)
    value = data.draw(st.integers(0, 2**(8 * width) - 1))
    st_.b[off:off + width] = value.to_bytes(width, "little")
    hb = st_.header_bytes if st_.chunk_len else 10**9
    if 52 <= hb <= len(st_.b):
        st_.u32(hb - 4, crc32c(bytes(st_.b[:hb - 4])))
    mut = st_.array()
    if np.array_equal(mut, buf):
        return
    try:
        y = zccl_torch.decompress(_t(mut))
    except CorruptStreamError:
        return
    # Fields whose change can leave a self-consistent stream (no checksum can tell): eb (16),
    # the bin width (24), and the dtype (5) of a stream without outliers or raw chunks.
    assert off in (5, 16, 24), f"{name}: header word at {off} = {value:#x} decoded silently"
    if off == 16:
        assert_bitwise_equal(valid(name)[2], y, "eb-only change")
