"""Format versions: real version-1 streams (tests/data/format_v1, written by the version-1
encoder) decode with today's decoder bit-identically to the version-1 decoder's own output,
through every entry point, and stay as hard to corrupt as they were; version-1 streams cannot
carry version-2 features (constant chunks, repeats, the lossless codec, half dtypes).

See tests/data/format_v1/README.txt for how the fixtures were made.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_compress import (
    MODE_CONSTANT,
    MODE_LOSSLESS,
    Stream,
    assert_bitwise_equal,
    assert_within_bound,
    crc32c,
    make_data,
)

import zccl_torch

CorruptStreamError = zccl_torch.CorruptStreamError
DATA = Path(__file__).resolve().parent / "data" / "format_v1"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
FIXTURES = MANIFEST["fixtures"]
_TORCH = {"float32": torch.float32, "float64": torch.float64}
_NUMPY = {"float32": np.float32, "float64": np.float64}

# What each fixture must contain, so the tests below cover it ("zero blocks": an encoded chunk
# with blocks of code length 0; "all-zero chunk": one whose blocks all have length 0).
REQUIRED = {
    "f32_outliers": {"encoded", "outliers", "partial block"},
    "f64_2d": {"encoded", "outliers", "2-D"},
    "f32_mixed": {"encoded", "raw", "all-zero chunk", "partial block"},
    "f64_mixed": {"encoded", "raw", "all-zero chunk", "zero blocks"},
    "f64_lossless": {"raw", "eb 0"},
    "f32_below_min_eb": {"raw", "bin 0"},
    "f32_scalar": {"raw", "0-d"},
}


def _load(name):
    """(input tensor, stream as numpy uint8, v1 decoder output tensor, manifest entry)."""
    f = FIXTURES[name]
    npdt = _NUMPY[f["dtype"]]
    shape = tuple(f["shape"])
    x = torch.from_numpy(np.fromfile(DATA / f"{name}.input.bin", dtype=npdt).reshape(shape))
    ref = torch.from_numpy(np.fromfile(DATA / f"{name}.v1dec.bin", dtype=npdt).reshape(shape))
    stream = np.fromfile(DATA / f"{name}.v1.zcfz", dtype=np.uint8)
    return x, stream, ref, f


def _t(buf) -> torch.Tensor:
    return torch.from_numpy(np.array(buf, dtype=np.uint8, copy=True))


def _rejected(buf, what, threads=1, chunks=()):
    try:
        y = zccl_torch.decompress(_t(buf), threads=threads)
    except CorruptStreamError:
        pass
    except Exception as exc:
        raise AssertionError(f"{what}: raised {exc!r} (not CorruptStreamError)") from exc
    else:
        raise AssertionError(f"{what}: decoded silently to {y.dtype} {tuple(y.shape)}")
    for c in chunks:
        with pytest.raises(CorruptStreamError):
            zccl_torch.decompress_chunk(_t(buf), c)


def test_manifest_lists_the_files():
    assert MANIFEST["source"] == "ca0506a7f2c16558f1db68570dec3b972efa41ef"
    assert set(FIXTURES) == set(REQUIRED)
    total = 0
    for _name, f in FIXTURES.items():
        for fname, digest in f["sha256"].items():
            data = (DATA / fname).read_bytes()
            total += len(data)
            assert hashlib.sha256(data).hexdigest() == digest, f"{fname} changed"
    assert total < 200_000


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_fixture_covers_what_it_claims(name):
    x, buf, _, f = _load(name)
    st_ = Stream(buf)
    assert st_.version == 1 and st_.codec == 0
    found = set(st_.kinds())
    for c, k in enumerate(st_.kinds()):
        if k != "encoded":
            continue
        lay = st_.encoded(c)
        if lay.n_out:
            found.add("outliers")
        if lay.m % 32:
            found.add("partial block")
        if not any(lay.lens):
            found.add("all-zero chunk")
        elif 0 in lay.lens:
            found.add("zero blocks")
    if st_.ndim == 2:
        found.add("2-D")
    if st_.ndim == 0:
        found.add("0-d")
    if f["error_bound"] == 0:
        found.add("eb 0")
    if st_.bin == 0:
        found.add("bin 0")
    missing = REQUIRED[name] - found
    assert not missing, f"{name} lacks {missing}: {st_.kinds()}"
    assert x.numel() == st_.count and x.shape == tuple(f["shape"])


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_decodes_like_the_v1_decoder(name):
    """decompress (any thread count), decompress_chunk and stream_info on a version-1 stream."""
    x, buf, ref, f = _load(name)
    info = zccl_torch.stream_info(_t(buf))
    assert info.version == 1
    assert info.lossless_codec == "none"
    assert info.dtype == _TORCH[f["dtype"]]
    assert info.shape == tuple(f["shape"]) and info.numel == x.numel()
    assert info.error_bound == f["error_bound"]
    assert info.chunk_size == f["chunk_size"]
    assert info.num_chunks == -(-x.numel() // f["chunk_size"])
    assert info.total_bytes == buf.size
    for threads in (1, 2, None):
        y = zccl_torch.decompress(_t(buf), threads=threads)
        assert_bitwise_equal(ref, y, f"{name}: decompress(threads={threads}) vs the v1 decoder")
    flat, cs = ref.reshape(-1), f["chunk_size"]
    for c in range(info.num_chunks):
        got = zccl_torch.decompress_chunk(_t(buf), c)
        assert_bitwise_equal(flat[c * cs : (c + 1) * cs], got, f"{name}: decompress_chunk({c})")
    with pytest.raises(IndexError):
        zccl_torch.decompress_chunk(_t(buf), info.num_chunks)
    # and the old decoder's output kept the bound against the input
    assert_within_bound(x, ref, f["error_bound"], f"{name}: v1 output vs input")


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_reencoded_is_v2_and_decodes_the_same_input(name):
    """Re-compressing the input writes version 2, and it meets the same bound."""
    x, _, _, f = _load(name)
    s = zccl_torch.compress(x, f["error_bound"], chunk_size=f["chunk_size"])
    assert zccl_torch.stream_info(s).version == 2
    assert_within_bound(x, zccl_torch.decompress(s), f["error_bound"], f"{name} as v2")


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_every_truncation_rejected(name):
    _, buf, _, _ = _load(name)
    for length in range(buf.size):
        _rejected(buf[:length], f"{name} truncated to {length}/{buf.size}")
        with pytest.raises(CorruptStreamError):
            zccl_torch.stream_info(_t(buf[:length]))


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_every_single_byte_mutation_rejected(name):
    """Every byte of every version-1 fixture, flipped two ways: decompress refuses it; on every
    third position stream_info reports the same header or refuses, and decompress_chunk refuses
    each chunk or returns exactly the old decoder's values."""
    _, buf, ref, f = _load(name)
    info = zccl_torch.stream_info(_t(buf))
    flat, cs = ref.reshape(-1), f["chunk_size"]
    for pos in range(buf.size):
        for xor in (0x01, 0xFF) if pos % 3 else (0x01, 0x80, 0xFF, 0x5A):
            mut = buf.copy()
            mut[pos] ^= xor
            what = f"{name}: byte {pos}/{buf.size} ^= {xor:#04x}"
            _rejected(mut, what)
            if pos % 3:
                continue
            try:
                assert zccl_torch.stream_info(_t(mut)) == info, what
            except CorruptStreamError:
                pass
            for c in range(info.num_chunks):
                try:
                    got = zccl_torch.decompress_chunk(_t(mut), c)
                except CorruptStreamError:
                    continue
                assert_bitwise_equal(flat[c * cs : (c + 1) * cs], got, f"{what}: chunk {c}")


# --------------------------------------------------------------------------------------------
# Crafted version-1 streams (checksums re-sealed)
# --------------------------------------------------------------------------------------------

V1_HEADER_EDITS = {
    "version 0": lambda s: s.u8(4, 0),
    "version 3": lambda s: s.u8(4, 3),
    "dtype 0": lambda s: s.u8(5, 0),
    "dtype 3 (float16, v2 only)": lambda s: s.u8(5, 3),
    "dtype 4 (bfloat16, v2 only)": lambda s: s.u8(5, 4),
    "dtype 5": lambda s: s.u8(5, 5),
    "block length 64": lambda s: s.u8(6, 64),
    "count + 1": lambda s: s.u64(8, s.count + 1),
    "count - 1": lambda s: s.u64(8, s.count - 1),
    "eb NaN": lambda s: s.f64(16, float("nan")),
    "eb -1": lambda s: s.f64(16, -1.0),
    "bin NaN": lambda s: s.f64(24, float("nan")),
    "bin inf": lambda s: s.f64(24, float("inf")),
    "chunk_len 31": lambda s: s.u32(32, 31),
    "chunk_len 65568": lambda s: s.u32(32, 65568),
    "reserved (codec) 1": lambda s: s.u32(36, 1),
    "reserved (codec) 2": lambda s: s.u32(36, 2),
    "reserved 2**31": lambda s: s.u32(36, 2**31),
    "shape[0] + 1": lambda s: s.u64(48, s.u64(48) + 1),
}


@pytest.mark.parametrize("edit", list(V1_HEADER_EDITS))
@pytest.mark.parametrize("name", ["f32_outliers", "f64_lossless", "f32_below_min_eb"])
def test_v1_crafted_header_fields_rejected(name, edit):
    """Including the version-2 fields: a version-1 header with a half dtype or a nonzero codec
    field (reserved in version 1, even on an eb = 0 stream) is refused."""
    _, buf, _, _ = _load(name)
    st_ = Stream(buf)
    V1_HEADER_EDITS[edit](st_)
    hb = st_.header_bytes
    if 52 <= hb <= len(st_.b):
        st_.u32(hb - 4, crc32c(bytes(st_.b[: hb - 4])))
    _rejected(st_.array(), f"v1 {name}: {edit}")


def test_v1_crafted_code_lengths_rejected():
    """The version-1 layout (one length byte per block): every block's length set out of range
    (32, 33, 200, 255) or to another legal value (sizes no longer add up) is refused."""
    _, buf, _, _ = _load("f32_outliers")
    st0 = Stream(buf)
    for c in (0, 2):  # a full chunk and the one with a partial last block
        lay = st0.encoded(c)
        assert len(lay.len_pos) == lay.nblocks  # v1: a length byte for every block
        for blk, pos in lay.len_pos.items():
            old = st0.u8(pos)
            for new in (32, 33, 200, 255, (old + 1) % 32):
                st_ = st0.copy()
                st_.u8(pos, new)
                st_.seal()
                _rejected(
                    st_.array(), f"v1 chunk {c} block {blk} length {old} -> {new}", chunks=[c]
                )


def test_v1_crafted_outlier_fields_rejected():
    _, buf, _, _ = _load("f32_outliers")
    st0 = Stream(buf)
    lay = st0.encoded(0)
    at_n, n_out, at_idx, m = lay.off + 5, lay.n_out, lay.outliers, lay.m
    assert n_out >= 3
    cases = {
        "n_outliers + 1": lambda s: s.u32(at_n, n_out + 1),
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
        st_ = st0.copy()
        fn(st_)
        st_.seal()
        _rejected(st_.array(), f"v1 outliers: {what}", chunks=[0])


def test_v1_crafted_constant_chunk_and_repeat_rejected():
    """Constant chunks (mode 2) and repeat entries (table size 0) are version 2 only: in a
    version-1 stream both are refused, while the untouched chunks still decode exactly."""
    _, buf, ref, f = _load("f32_mixed")
    st0 = Stream(buf)
    flat, cs = ref.reshape(-1), f["chunk_size"]
    const = bytes([MODE_CONSTANT]) + np.float32(2.5).tobytes()
    # chunk 2 (all 2.5) as a constant chunk
    st_ = st0.replace_chunk(2, const)
    _rejected(st_.array(), "v1 with a constant chunk", chunks=[2])
    for c in (0, 1, 3, 4):
        got = zccl_torch.decompress_chunk(st_.tensor(), c)
        assert_bitwise_equal(flat[c * cs : (c + 1) * cs], got, f"chunk {c}")
    # chunk 3 a repeat of that constant chunk: the table is refused (a v1 chunk is never empty)
    st_ = st0.replace_chunk(2, const).replace_chunk(3, None)
    assert st_.chunk_crc(3) == crc32c(const)
    _rejected(st_.array(), "v1 with a constant chunk and a repeat", chunks=range(5))
    with pytest.raises(CorruptStreamError):
        zccl_torch.stream_info(st_.tensor())
    # the same bytes as version 2 (control: the edits above are well-formed): the constant and
    # the repeat decode; so does the raw chunk (the encoded ones have the v1 layout)
    st_.u8(4, 2)
    st_.seal()
    twos = torch.full((256,), 2.5)
    for c, want in ((1, flat[cs : 2 * cs]), (2, twos), (3, twos)):
        assert_bitwise_equal(want, zccl_torch.decompress_chunk(st_.tensor(), c), f"v2 chunk {c}")


def test_v1_crafted_lossless_chunk_rejected():
    """A mode-3 (zstd) chunk in a version-1 stream (codec field 0, reserved) is refused."""
    if zccl_torch.lossless_codec() != "zstd":
        pytest.skip("extension built without zstd")
    _x, buf, _, _f = _load("f64_lossless")
    smooth = torch.arange(128, dtype=torch.float64) * 0.25
    v2 = Stream(zccl_torch.compress(smooth, mode="lossless", chunk_size=128))
    assert v2.kinds() == ["lossless"]
    chunk = v2.chunk_bytes(0)
    assert chunk[0] == MODE_LOSSLESS
    st_ = Stream(buf).replace_chunk(0, chunk)
    _rejected(st_.array(), "v1 with a mode-3 chunk", chunks=[0])
    # with the codec field set as well: version 1 has no codec
    st_.u32(36, 1)
    st_.seal()
    _rejected(st_.array(), "v1 with a mode-3 chunk and codec 1")


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_relabelled_v2(name):
    """The version byte of a version-1 stream set to 2 (header re-sealed): an encoded chunk's
    v1 length bytes do not read as a bitmap + lengths, so streams with encoded chunks are
    refused; raw chunks have the same layout in both versions, so all-raw streams decode to
    the same values."""
    _x, buf, ref, _ = _load(name)
    st_ = Stream(buf)
    has_encoded = "encoded" in st_.kinds()
    st_.u8(4, 2)
    st_.seal(chunks=False)
    if has_encoded:
        _rejected(st_.array(), f"{name} as version 2")
    else:
        assert_bitwise_equal(ref, zccl_torch.decompress(st_.tensor()), f"{name} as version 2")


def test_v2_stream_relabelled_v1_with_zero_block_chunk():
    """The converse corner: in a chunk of one block the v2 bitmap byte 0 (a zero block, no
    length byte) reads as the v1 length byte 0 - the same chunk in both layouts. A v2 stream of
    such chunks relabelled v1 decodes to the same values; any chunk with a nonzero block is
    refused (its length bytes and planes shift by the bitmap byte)."""
    x = torch.cat([torch.full((32,), 1.0), torch.full((31,), 1.0), torch.tensor([1.5])])
    x[33] = 1.25  # chunk 1 is not constant: encoded with a nonzero block
    s = zccl_torch.compress(x, 1e-3, chunk_size=32)
    st_ = Stream(s)
    assert st_.kinds() == ["constant", "encoded"]
    st_.u8(4, 1)
    st_.seal(chunks=False)
    _rejected(st_.array(), "v2 relabelled v1", chunks=[0, 1])
    # an encoded chunk that is all zero blocks but not constant: outliers make the difference
    y = make_data("sin", 32, torch.float32, seed=5)
    y[:] = 4.0
    y[7] = float("nan")
    s2 = zccl_torch.compress(y, 1e-3, chunk_size=32)
    st2 = Stream(s2)
    assert st2.kinds() == ["encoded"] and st2.encoded(0).lens == [0]
    st2.u8(4, 1)
    st2.seal(chunks=False)
    assert_bitwise_equal(
        zccl_torch.decompress(s2), zccl_torch.decompress(st2.tensor()), "one zero block as v1"
    )
