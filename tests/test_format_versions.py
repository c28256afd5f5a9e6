"""Format versions: real version-1 and version-2 streams (tests/data/format_v1 and format_v2,
written by the version-1 and version-2 encoders) decode with today's decoder bit-identically to
the old decoders' own output, through every entry point, and stay as hard to corrupt as they
were; version-1 streams cannot carry version-2 features (constant chunks, repeats, the lossless
codec, half dtypes), and neither version can carry version 3's direct chunks (mode 4).

See tests/data/format_v1/README.txt and tests/data/format_v2/README.txt for how the fixtures
were made.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch
from helpers_compress import (
    MODE_CONSTANT,
    MODE_DIRECT,
    MODE_ENCODED,
    MODE_LOSSLESS,
    Stream,
    assert_bitwise_equal,
    assert_within_bound,
    crc32c,
    make_data,
)

import zccl_torch

CorruptStreamError = zccl_torch.CorruptStreamError
HAVE_ZSTD = zccl_torch.lossless_codec() == "zstd"
_DATA = Path(__file__).resolve().parent / "data"
DATA = _DATA / "format_v1"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
FIXTURES = MANIFEST["fixtures"]
DATA2 = _DATA / "format_v2"
MANIFEST2 = json.loads((DATA2 / "manifest.json").read_text())
FIXTURES2 = MANIFEST2["fixtures"]
_DIRS = {1: DATA, 2: DATA2}
_FIXTURES = {1: FIXTURES, 2: FIXTURES2}
_SOURCES = {
    1: "ca0506a7f2c16558f1db68570dec3b972efa41ef",
    2: "6113997cb7bb0108d559a1021dac03ed87d463ec",
}
_TORCH = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# bfloat16 files hold the 16-bit patterns (numpy has no bfloat16): read as int16, viewed.
_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.int16}
_DTYPE_CODES = {1: "float32", 2: "float64", 3: "float16", 4: "bfloat16"}

# Every fixture of both versions, as (version, name), for the tests that treat them alike.
ALL = [(1, n) for n in FIXTURES] + [(2, n) for n in FIXTURES2]
ALL_IDS = [f"v{v}-{n}" for v, n in ALL]

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
# The version-2 fixtures also name their dtype and, at eb 0, their lossless codec.
REQUIRED2 = {
    "f32_outliers": {"float32", "encoded", "outliers", "partial block", "zero blocks"},
    "f64_2d": {"float64", "encoded", "outliers", "2-D"},
    "f16_mixed": {"float16", "encoded", "raw", "constant", "repeat", "outliers", "partial block"},
    "bf16_mixed": {
        "bfloat16",
        "encoded",
        "outliers",
        "constant",
        "repeat",
        "all-zero chunk",
        "partial block",
    },
    "f32_runs": {
        "float32",
        "constant",
        "repeat",
        "encoded",
        "raw",
        "all-zero chunk",
        "zero blocks",
        "partial block",
    },
    "f64_zstd": {"float64", "lossless", "raw", "constant", "repeat", "eb 0", "codec zstd"},
    "f16_zstd": {"float16", "lossless", "eb 0", "codec zstd"},
    "f32_lossless_raw": {"float32", "raw", "constant", "repeat", "eb 0", "codec none"},
    "bf16_scalar": {"bfloat16", "constant", "0-d"},
}
_REQUIRED = {1: REQUIRED, 2: REQUIRED2}


def _array(path: Path, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    t = torch.from_numpy(np.fromfile(path, dtype=_NUMPY[dtype]).reshape(shape))
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def _load(name, version=1):
    """(input tensor, stream as numpy uint8, old decoder's output tensor, manifest entry)."""
    f = _FIXTURES[version][name]
    data = _DIRS[version]
    shape = tuple(f["shape"])
    x = _array(data / f"{name}.input.bin", f["dtype"], shape)
    ref = _array(data / f"{name}.v{version}dec.bin", f["dtype"], shape)
    stream = np.fromfile(data / f"{name}.v{version}.zcfz", dtype=np.uint8)
    return x, stream, ref, f


def _codec(f) -> str:
    return f.get("lossless_codec", "none")  # version 1 has no codec field


def _skip_without_codec(f) -> None:
    if _codec(f) == "zstd" and not HAVE_ZSTD:
        pytest.skip("extension built without zstd: codec-1 streams cannot be read")


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


def _features(st_: Stream, f) -> set[str]:
    """What a fixture's stream holds, in REQUIRED's words."""
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
    if st_.version >= 2:
        found.add(_DTYPE_CODES.get(st_.dtype_code, "dtype ?"))
        if st_.bin == 0:
            found.add({0: "codec none", 1: "codec zstd"}.get(st_.codec, "codec ?"))
    return found


@pytest.mark.parametrize("version", [1, 2])
def test_manifest_lists_the_files(version):
    manifest = json.loads((_DIRS[version] / "manifest.json").read_text())
    assert manifest["source"] == _SOURCES[version]
    assert set(manifest["fixtures"]) == set(_REQUIRED[version])
    listed, total = set(), 0
    for _name, f in manifest["fixtures"].items():
        for fname, digest in f["sha256"].items():
            data = (_DIRS[version] / fname).read_bytes()
            total += len(data)
            listed.add(fname)
            assert hashlib.sha256(data).hexdigest() == digest, f"{fname} changed"
    assert total < 200_000
    # no stray fixture files beside the listed ones
    on_disk = {p.name for p in _DIRS[version].glob("*.bin")}
    on_disk |= {p.name for p in _DIRS[version].glob("*.zcfz")}
    assert on_disk == listed


@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_fixture_covers_what_it_claims(name):
    x, buf, _, f = _load(name)
    st_ = Stream(buf)
    assert st_.version == 1 and st_.codec == 0
    missing = REQUIRED[name] - _features(st_, f)
    assert not missing, f"{name} lacks {missing}: {st_.kinds()}"
    assert x.numel() == st_.count and x.shape == tuple(f["shape"])


@pytest.mark.parametrize("name", list(FIXTURES2))
def test_v2_fixture_covers_what_it_claims(name):
    x, buf, _, f = _load(name, 2)
    st_ = Stream(buf)
    assert st_.version == 2
    assert st_.codec == {"none": 0, "zstd": 1}[f["lossless_codec"]]
    assert _DTYPE_CODES[st_.dtype_code] == f["dtype"]
    missing = REQUIRED2[name] - _features(st_, f)
    assert not missing, f"{name} lacks {missing}: {st_.kinds()}"
    assert x.numel() == st_.count and x.shape == tuple(f["shape"])
    assert x.dtype == _TORCH[f["dtype"]]


def test_v2_fixtures_cover_every_v2_feature():
    """Together the version-2 fixtures hold every chunk kind, dtype and codec of version 2."""
    found = set()
    for name, f in FIXTURES2.items():
        found |= _features(Stream(_load(name, 2)[1]), f)
    want = {"encoded", "raw", "constant", "repeat", "lossless", "outliers", "zero blocks"}
    want |= {"all-zero chunk", "partial block", "2-D", "0-d", "codec none", "codec zstd"}
    want |= set(_TORCH)
    assert want <= found, want - found


@pytest.mark.parametrize(("version", "name"), ALL, ids=ALL_IDS)
def test_decodes_like_the_old_decoder(version, name):
    """decompress (any thread count, into out=, with add=), decompress_chunk and stream_info
    on a version-1 or version-2 stream: exactly the old decoder's values."""
    x, buf, ref, f = _load(name, version)
    _skip_without_codec(f)
    info = zccl_torch.stream_info(_t(buf))
    assert info.version == version
    assert info.lossless_codec == _codec(f)
    assert info.dtype == _TORCH[f["dtype"]]
    assert info.shape == tuple(f["shape"]) and info.numel == x.numel()
    assert info.error_bound == f["error_bound"]
    assert info.chunk_size == f["chunk_size"]
    assert info.num_chunks == -(-x.numel() // f["chunk_size"])
    assert info.total_bytes == buf.size
    what = f"v{version} {name}"
    for threads in (1, 2, None):
        y = zccl_torch.decompress(_t(buf), threads=threads)
        assert_bitwise_equal(ref, y, f"{what}: decompress(threads={threads}) vs the old decoder")
    out = torch.zeros_like(ref)
    zccl_torch.decompress(_t(buf), out=out)
    assert_bitwise_equal(ref, out, f"{what}: decompress(out=)")
    if ref.dtype in (torch.float32, torch.float64):
        addend = torch.linspace(-3.0, 5.0, ref.numel(), dtype=ref.dtype).reshape(ref.shape)
        got = zccl_torch.decompress(_t(buf), add=addend)
        assert_bitwise_equal(addend + ref, got, f"{what}: decompress(add=)")
    flat, cs = ref.reshape(-1), f["chunk_size"]
    for c in range(info.num_chunks):
        got = zccl_torch.decompress_chunk(_t(buf), c)
        assert_bitwise_equal(flat[c * cs : (c + 1) * cs], got, f"{what}: decompress_chunk({c})")
    with pytest.raises(IndexError):
        zccl_torch.decompress_chunk(_t(buf), info.num_chunks)
    # and the old decoder's output kept the bound against the input
    assert_within_bound(x, ref, f["error_bound"], f"{what}: old output vs input")


def test_encoder_writes_version_3():
    assert zccl_torch.FORMAT_VERSION == 3
    s = zccl_torch.compress(torch.ones(10), 1e-3)
    assert zccl_torch.stream_info(s).version == 3 and int(s[4]) == 3


@pytest.mark.parametrize(("version", "name"), ALL, ids=ALL_IDS)
def test_reencoded_is_the_current_version_and_meets_the_bound(version, name):
    """Re-compressing the input writes version 3, and it meets the same bound."""
    x, _, _, f = _load(name, version)
    s = zccl_torch.compress(x, f["error_bound"], chunk_size=f["chunk_size"])
    assert zccl_torch.stream_info(s).version == zccl_torch.FORMAT_VERSION
    assert_within_bound(x, zccl_torch.decompress(s), f["error_bound"], f"v{version} {name} as v3")


@pytest.mark.parametrize(("version", "name"), ALL, ids=ALL_IDS)
def test_every_truncation_rejected(version, name):
    _, buf, _, f = _load(name, version)
    _skip_without_codec(f)
    for length in range(buf.size):
        _rejected(buf[:length], f"v{version} {name} truncated to {length}/{buf.size}")
        with pytest.raises(CorruptStreamError):
            zccl_torch.stream_info(_t(buf[:length]))


@pytest.mark.parametrize(("version", "name"), ALL, ids=ALL_IDS)
def test_every_single_byte_mutation_rejected(version, name):
    """Every byte of every fixture, flipped two ways: decompress refuses it; on every third
    position stream_info reports the same header or refuses, and decompress_chunk refuses
    each chunk or returns exactly the old decoder's values."""
    _, buf, ref, f = _load(name, version)
    _skip_without_codec(f)
    info = zccl_torch.stream_info(_t(buf))
    flat, cs = ref.reshape(-1), f["chunk_size"]
    for pos in range(buf.size):
        for xor in (0x01, 0xFF) if pos % 3 else (0x01, 0x80, 0xFF, 0x5A):
            mut = buf.copy()
            mut[pos] ^= xor
            what = f"v{version} {name}: byte {pos}/{buf.size} ^= {xor:#04x}"
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
    # (version 3 reads an all-raw version-1 stream: see test_v1_relabelled)
    "version 4": lambda s: s.u8(4, 4),
    "version 255": lambda s: s.u8(4, 255),
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


@pytest.mark.parametrize("version", [1, 2])
def test_crafted_outlier_fields_rejected(version):
    _, buf, _, _ = _load("f32_outliers", version)
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
        _rejected(st_.array(), f"v{version} outliers: {what}", chunks=[0])


def test_v1_crafted_constant_chunk_and_repeat_rejected():
    """Constant chunks (mode 2) and repeat entries (table size 0) came with version 2: in a
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
    if not HAVE_ZSTD:
        pytest.skip("extension built without zstd")
    _x, buf, _, _f = _load("f64_lossless")
    smooth = torch.arange(128, dtype=torch.float64) * 0.25
    current = Stream(zccl_torch.compress(smooth, mode="lossless", chunk_size=128))
    assert current.kinds() == ["lossless"]
    chunk = current.chunk_bytes(0)
    assert chunk[0] == MODE_LOSSLESS
    st_ = Stream(buf).replace_chunk(0, chunk)
    _rejected(st_.array(), "v1 with a mode-3 chunk", chunks=[0])
    # with the codec field set as well: version 1 has no codec
    st_.u32(36, 1)
    st_.seal()
    _rejected(st_.array(), "v1 with a mode-3 chunk and codec 1")


@pytest.mark.parametrize("to", [2, 3])
@pytest.mark.parametrize("name", list(FIXTURES))
def test_v1_relabelled(name, to):
    """The version byte of a version-1 stream set to 2 or 3 (header re-sealed): an encoded
    chunk's v1 length bytes do not read as a bitmap + lengths, so streams with encoded chunks
    are refused; raw chunks have the same layout in every version, so all-raw streams decode to
    the same values."""
    _x, buf, ref, _ = _load(name)
    st_ = Stream(buf)
    has_encoded = "encoded" in st_.kinds()
    st_.u8(4, to)
    st_.seal(chunks=False)
    if has_encoded:
        _rejected(st_.array(), f"{name} as version {to}")
    else:
        got = zccl_torch.decompress(st_.tensor())
        assert_bitwise_equal(ref, got, f"{name} as version {to}")


def test_current_stream_relabelled_v1_with_zero_block_chunk():
    """The converse corner: in a chunk of one block the v2 bitmap byte 0 (a zero block, no
    length byte) reads as the v1 length byte 0 - the same chunk in both layouts. A stream of
    such chunks (version 3, no direct chunks: the bitmap layout of version 2) relabelled v1
    decodes to the same values; any chunk with a nonzero block is refused (its length bytes and
    planes shift by the bitmap byte)."""
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


# --------------------------------------------------------------------------------------------
# Crafted version-2 streams (checksums re-sealed)
# --------------------------------------------------------------------------------------------

V2_HEADER_EDITS = {
    "version 0": lambda s: s.u8(4, 0),
    "version 4": lambda s: s.u8(4, 4),
    "version 255": lambda s: s.u8(4, 255),
    "dtype 0": lambda s: s.u8(5, 0),
    "dtype 5": lambda s: s.u8(5, 5),
    "block length 16": lambda s: s.u8(6, 16),
    "count + 1": lambda s: s.u64(8, s.count + 1),
    "count - 1": lambda s: s.u64(8, s.count - 1),
    "eb NaN": lambda s: s.f64(16, float("nan")),
    "eb -1": lambda s: s.f64(16, -1.0),
    "bin NaN": lambda s: s.f64(24, float("nan")),
    "bin -1": lambda s: s.f64(24, -1.0),
    "bin above 2 eb": lambda s: s.f64(24, 4.0 * s.f64(16) + 0.5),
    "chunk_len 31": lambda s: s.u32(32, 31),
    "chunk_len + 32": lambda s: s.u32(32, s.chunk_len + 32),
    # codec 0 <-> 1: a zstd stream's mode-3 chunks unreadable, or a codec in a lossy stream
    "codec ^ 1": lambda s: s.u32(36, s.codec ^ 1),
    "codec 2": lambda s: s.u32(36, 2),
    "codec 2**31": lambda s: s.u32(36, 2**31),
    "ndim + 1": lambda s: s.u8(7, s.ndim + 1),
    "shape[0] + 1": lambda s: s.u64(48, s.u64(48) + 1),
}


@pytest.mark.parametrize("edit", list(V2_HEADER_EDITS))
@pytest.mark.parametrize("name", ["f32_outliers", "f16_mixed", "f64_zstd"])
def test_v2_crafted_header_fields_rejected(name, edit):
    _, buf, _, f = _load(name, 2)
    _skip_without_codec(f)
    st_ = Stream(buf)
    V2_HEADER_EDITS[edit](st_)
    assert bytes(st_.b) != buf.tobytes(), f"{edit} changed nothing"
    hb = st_.header_bytes
    if 52 <= hb <= len(st_.b):
        st_.u32(hb - 4, crc32c(bytes(st_.b[: hb - 4])))
    _rejected(st_.array(), f"v2 {name}: {edit}")


def test_v2_crafted_bitmap_and_code_lengths_rejected():
    """The bitmap layout: a padding bit past the last block, a set bit's length out of range
    (0, 32, 255) or off by one (the sizes no longer add up), a set bit cleared: refused."""
    _, buf, ref, f = _load("f32_outliers", 2)
    st0 = Stream(buf)
    flat, cs = ref.reshape(-1), f["chunk_size"]
    lay = st0.encoded(2)  # 15 blocks: the bitmap's last bit is padding
    assert lay.nblocks == 15 and lay.bitmap_bytes == 2
    edits = {"padding bit": lambda s: s.u8(lay.bitmap + 1, s.u8(lay.bitmap + 1) | 0x80)}
    for blk in (0, 14):
        pos = lay.len_pos[blk]
        for new in (0, 32, 255, lay.lens[blk] + 1):
            edits[f"block {blk} length {new}"] = lambda s, pos=pos, new=new: s.u8(pos, new)
        edits[f"block {blk} bit cleared"] = lambda s, blk=blk: s.u8(
            lay.bitmap + blk // 8, s.u8(lay.bitmap + blk // 8) & ~(1 << (blk % 8))
        )
    for what, fn in edits.items():
        st_ = st0.copy()
        fn(st_)
        st_.seal()
        _rejected(st_.array(), f"v2 chunk 2: {what}", chunks=[2])
        for c in (0, 1):  # the other chunks still decode exactly
            got = zccl_torch.decompress_chunk(st_.tensor(), c)
            assert_bitwise_equal(flat[c * cs : (c + 1) * cs], got, f"{what}: chunk {c}")


def test_v2_crafted_constant_chunks_and_repeats():
    """A repeat as the first chunk or after a non-constant chunk, a constant chunk of the wrong
    size, a repeated chunk relabelled raw: refused. A constant chunk's value changed (resealed)
    decodes, and so do its repeats, as the new value."""
    _, buf, ref, f = _load("f32_runs", 2)
    st0 = Stream(buf)
    flat, cs = ref.reshape(-1), f["chunk_size"]
    assert st0.kinds()[:3] == ["constant", "repeat", "repeat"]
    const = st0.chunk_bytes(0)
    _rejected(st0.replace_chunk(0, None).array(), "repeat as chunk 0", chunks=[0, 1, 2])
    for body in (const + b"\0", const[:-1]):
        st_ = st0.replace_chunk(0, body)
        _rejected(st_.array(), f"constant of {len(body)} bytes", chunks=[0])
    st_ = st0.replace_chunk(0, bytes([1]) + const[1:])  # raw, 5 bytes: too short for 64 values
    _rejected(st_.array(), "repeated chunk relabelled raw", chunks=[0, 1, 2])
    # control: a new value for chunk 0 is a new value for its two repeats
    st_ = st0.replace_chunk(0, bytes([MODE_CONSTANT]) + np.float32(3.5).tobytes())
    want = flat.clone()
    want[: 3 * cs] = 3.5
    assert_bitwise_equal(want.reshape(ref.shape), zccl_torch.decompress(st_.tensor()), "3.5")
    # a repeat after a raw chunk: f16_mixed's chunk 2 is a constant after the raw chunk 1
    _, buf16, _, _ = _load("f16_mixed", 2)
    st16 = Stream(buf16)
    assert st16.kinds()[1:4] == ["raw", "constant", "repeat"]
    _rejected(st16.replace_chunk(2, None).array(), "repeat after a raw chunk", chunks=[2, 3])


def test_v2_crafted_chunk_modes_in_the_wrong_stream_rejected():
    """A lossless (zstd) chunk in a lossy stream and an encoded chunk in a lossless one."""
    if not HAVE_ZSTD:
        pytest.skip("extension built without zstd")
    _, buf, _, _ = _load("f32_outliers", 2)
    ramp = torch.arange(512, dtype=torch.float32) * 0.25
    lossless = Stream(zccl_torch.compress(ramp, mode="lossless", chunk_size=512))
    assert lossless.kinds() == ["lossless"]
    st_ = Stream(buf).replace_chunk(0, lossless.chunk_bytes(0))
    _rejected(st_.array(), "v2 lossy stream with a mode-3 chunk", chunks=[0])
    _, buf64, _, _ = _load("f64_zstd", 2)
    smooth = torch.sin(torch.arange(128, dtype=torch.float64) * 0.05)
    lossy = Stream(zccl_torch.compress(smooth, 1e-3, chunk_size=128))
    assert lossy.kinds() == ["encoded"]
    st_ = Stream(buf64).replace_chunk(0, lossy.chunk_bytes(0))
    _rejected(st_.array(), "v2 lossless stream with an encoded chunk", chunks=[0])


@pytest.mark.parametrize("name", list(FIXTURES2))
def test_v2_relabelled_v3_decodes_the_same(name):
    """Version 3 adds only the direct chunk: every version-2 stream read as version 3 (header
    re-sealed) decodes to the same values."""
    _, buf, ref, f = _load(name, 2)
    _skip_without_codec(f)
    st_ = Stream(buf)
    st_.u8(4, 3)
    st_.seal(chunks=False)
    assert zccl_torch.stream_info(st_.tensor()).version == 3
    assert_bitwise_equal(ref, zccl_torch.decompress(st_.tensor(), threads=2), f"{name} as v3")
    flat, cs = ref.reshape(-1), f["chunk_size"]
    for c in range(st_.nchunks):
        got = zccl_torch.decompress_chunk(st_.tensor(), c)
        assert_bitwise_equal(flat[c * cs : (c + 1) * cs], got, f"{name} as v3: chunk {c}")


@pytest.mark.parametrize("name", list(FIXTURES2))
def test_v2_relabelled_v1_rejected(name):
    """Every version-2 fixture holds something version 1 cannot: a half dtype, a codec, a
    constant chunk or repeat, or encoded chunks whose bitmap layout does not read as v1's."""
    _, buf, _, _f = _load(name, 2)
    st_ = Stream(buf)
    assert set(st_.kinds()) != {"raw"} or st_.dtype_code > 2 or st_.codec
    st_.u8(4, 1)
    st_.seal(chunks=False)
    _rejected(st_.array(), f"{name} as version 1")


# --------------------------------------------------------------------------------------------
# Direct chunks (mode 4): version 3 only
# --------------------------------------------------------------------------------------------


class Planes(NamedTuple):
    """The bitmap layout of an encoded (mode 0, version >= 2) or direct (mode 4) chunk."""

    lens: list[int]  # every block's code length (0: a zero block)
    values: np.ndarray  # int64, 32 per block: the signed magnitudes the planes hold
    outliers: list[int]  # outlier indices
    outlier_bytes: bytes  # their exact values
    end: int  # where the layout ends (the chunk's size when well-formed)


def _read_planes(body: bytes, m: int, elem: int) -> Planes:
    """Reads a chunk's bitmap, lengths, sign/magnitude planes and outliers, as
    fzlight_format.h describes them (independently of the library)."""
    mode = body[0]
    assert mode in (MODE_ENCODED, MODE_DIRECT)
    at = 9 if mode == MODE_ENCODED else 5
    n_out = int.from_bytes(body[at - 4 : at], "little")
    nblocks = -(-m // 32)
    bitmap = body[at : at + -(-nblocks // 8)]
    at += len(bitmap)
    lens = []
    for blk in range(nblocks):
        if bitmap[blk // 8] >> (blk % 8) & 1:
            lens.append(body[at])
            at += 1
        else:
            lens.append(0)
    values = np.zeros(32 * nblocks, dtype=np.int64)
    lanes = np.arange(32, dtype=np.int64)
    for blk, n in enumerate(lens):
        if n == 0:
            continue
        words = np.frombuffer(body[at : at + 4 * (n + 1)], dtype="<u4").astype(np.int64)
        at += 4 * (n + 1)
        mag = np.zeros(32, dtype=np.int64)
        for j in range(n):
            mag |= ((words[1 + j] >> lanes) & 1) << j
        values[32 * blk : 32 * blk + 32] = np.where((words[0] >> lanes) & 1, -mag, mag)
    idx = [int.from_bytes(body[at + 2 * k : at + 2 * k + 2], "little") for k in range(n_out)]
    at += 2 * n_out
    return Planes(lens, values, idx, bytes(body[at : at + elem * n_out]), at + elem * n_out)


def _model_f32(codes: np.ndarray, bin_: float, pl: Planes, m: int) -> torch.Tensor:
    """A float32 chunk's values: float32(code) * float32(bin) in float32, outliers patched."""
    v = codes[:m].astype(np.float32) * np.float32(bin_)
    v[pl.outliers] = np.frombuffer(pl.outlier_bytes, dtype=np.float32)
    return torch.from_numpy(v)


def _as_direct(body: bytes, m: int) -> tuple[bytes, Planes]:
    """A version-2 encoded chunk as a direct chunk: the same bitmap, lengths, planes and
    outliers after a 5-byte fixed part (no q_start). Its planes then read as codes rather than
    Lorenzo deltas. The outliers' and padding lanes' deltas are 0 (predicted exactly / repeating
    the last code), so they hold code 0 as direct chunks must: the chunk is well-formed."""
    assert body[0] == MODE_ENCODED
    direct = bytes([MODE_DIRECT]) + body[5:]
    pl = _read_planes(direct, m, 4)
    assert pl.end == len(direct)
    assert not pl.values[pl.outliers].any() and not pl.values[m:].any()
    return direct, pl


def test_planes_model_reproduces_the_v2_decoder():
    """The model used below, on the Lorenzo reading of the version-2 fixture's encoded chunks:
    q_start + running sums of the planes, times bin, outliers patched, is exactly what the
    version-2 decoder wrote."""
    _, buf, ref, f = _load("f32_outliers", 2)
    st0 = Stream(buf)
    flat, cs = ref.reshape(-1), f["chunk_size"]
    for c in range(st0.nchunks):
        body, m = st0.chunk_bytes(c), st0.chunk_values(c)
        pl = _read_planes(body, m, 4)
        assert pl.end == len(body)
        q = int.from_bytes(body[1:5], "little", signed=True) + np.cumsum(pl.values)
        want = _model_f32(q, st0.bin, pl, m)
        assert_bitwise_equal(flat[c * cs : c * cs + m], want, f"model of chunk {c}")


def test_direct_chunk_refused_in_v2_decoded_in_v3():
    """A version-2 fixture's encoded chunk turned into a direct chunk (mode byte 4, q_start
    dropped, checksums re-sealed): in the version-2 stream (and as version 1) it is refused, its
    neighbours still decode; the same bytes labelled version 3 decode to the model's values (the
    planes read as codes: float32(q) * bin, outliers patched) through every entry point."""
    _, buf, ref, f = _load("f32_outliers", 2)
    st0 = Stream(buf)
    flat, cs = ref.reshape(-1), f["chunk_size"]
    expected = flat.clone()
    bodies = []
    for c in range(st0.nchunks):  # chunk 1 has zero blocks, chunk 2 a partial last block
        m = st0.chunk_values(c)
        direct, pl = _as_direct(st0.chunk_bytes(c), m)
        want = _model_f32(pl.values, st0.bin, pl, m)
        # the two readings differ, so a decoder that ignored the mode would be caught
        assert not torch.equal(want, flat[c * cs : c * cs + m])
        expected[c * cs : c * cs + m] = want
        bodies.append(direct)
        v2 = st0.replace_chunk(c, direct)  # version 2, resealed
        _rejected(v2.array(), f"v2 with a direct chunk {c}", chunks=[c])
        for o in set(range(st0.nchunks)) - {c}:
            got = zccl_torch.decompress_chunk(v2.tensor(), o)
            assert_bitwise_equal(flat[o * cs : (o + 1) * cs], got, f"v2, direct {c}: chunk {o}")
        v1 = v2.copy()
        v1.u8(4, 1)
        v1.seal(chunks=False)
        _rejected(v1.array(), f"v1 with a direct chunk {c}", chunks=[c])
        v3 = v2.copy()
        v3.u8(4, 3)
        v3.seal(chunks=False)
        assert zccl_torch.stream_info(v3.tensor()).version == 3
        assert_bitwise_equal(want, zccl_torch.decompress_chunk(v3.tensor(), c), f"v3 chunk {c}")
        got = zccl_torch.decompress(v3.tensor()).reshape(-1)
        assert_bitwise_equal(flat[: c * cs], got[: c * cs], f"v3, direct {c}: before it")
        assert_bitwise_equal(want, got[c * cs : c * cs + m], f"v3, direct {c}")
        assert_bitwise_equal(flat[c * cs + m :], got[c * cs + m :], f"v3, direct {c}: after it")
    # every chunk direct, decoded with any thread count, into out=, with add=
    v3 = st0.with_chunks(bodies)
    v3.u8(4, 3)
    v3.seal(chunks=False)
    want = expected.reshape(ref.shape)
    for threads in (1, 2, None):
        got = zccl_torch.decompress(v3.tensor(), threads=threads)
        assert_bitwise_equal(want, got, f"all direct, threads={threads}")
    out = torch.zeros_like(ref)
    zccl_torch.decompress(v3.tensor(), out=out)
    assert_bitwise_equal(want, out, "all direct, out=")
    addend = torch.linspace(-1.0, 1.0, ref.numel()).reshape(ref.shape)
    got = zccl_torch.decompress(v3.tensor(), add=addend)
    assert_bitwise_equal(addend + want, got, "all direct, add=")
    v2 = v3.copy()
    v2.u8(4, 2)
    v2.seal(chunks=False)
    _rejected(v2.array(), "all direct as v2", threads=2, chunks=range(st0.nchunks))


def _noise_stream() -> tuple[torch.Tensor, float, Stream]:
    """Current encoder output with direct chunks: smooth | noise with NaN and +-Inf (direct,
    outliers) | zeros (constant) | 1000 noise values (direct, a partial last block)."""
    noise = make_data("noise", 2024, torch.float32, seed=11)
    noise[5], noise[77], noise[1500] = float("nan"), float("inf"), -float("inf")
    smooth = make_data("sin", 1024, torch.float32, seed=12)
    x = torch.cat([smooth, noise[:1024], torch.zeros(1024), noise[1024:]])
    eb = 1e-2
    return x, eb, Stream(zccl_torch.compress(x, eb, chunk_size=1024))


def test_current_encoder_writes_direct_chunks_the_model_decodes():
    """White noise has no correlation between neighbours: the encoder codes it directly. Its
    direct chunks decode (whole stream and chunk by chunk) to the model's values, with code 0
    for outliers and padding lanes as the format says, and meet the bound."""
    x, eb, st_ = _noise_stream()
    assert st_.version == 3
    assert st_.kinds() == ["encoded", "direct", "constant", "direct"]
    y = zccl_torch.decompress(st_.tensor())
    assert_within_bound(x, y, eb, "noise stream")
    for c in (1, 3):
        m = st_.chunk_values(c)
        pl = _read_planes(st_.chunk_bytes(c), m, 4)
        assert pl.end == st_.chunk_size(c)
        assert not pl.values[pl.outliers].any() and not pl.values[m:].any()
        if c == 1:
            assert {5, 77} <= set(pl.outliers)
        else:
            assert m % 32 and 1500 - 1024 in pl.outliers
        want = _model_f32(pl.values, st_.bin, pl, m)
        assert_bitwise_equal(want, y[c * 1024 : c * 1024 + m], f"direct chunk {c}")
        assert_bitwise_equal(want, zccl_torch.decompress_chunk(st_.tensor(), c), f"chunk {c}")


def test_current_stream_with_direct_chunks_relabelled_old_rejected():
    """The encoder's direct chunks in a stream labelled version 2 or 1 (header re-sealed):
    refused; in version 2 the other chunks still decode."""
    _, _, st0 = _noise_stream()
    ref = zccl_torch.decompress(st0.tensor())
    for version in (2, 1):
        st_ = st0.copy()
        st_.u8(4, version)
        st_.seal(chunks=False)
        _rejected(st_.array(), f"direct chunks as v{version}", chunks=[1, 3])
    st_ = st0.copy()
    st_.u8(4, 2)
    st_.seal(chunks=False)
    for c in (0, 2):
        got = zccl_torch.decompress_chunk(st_.tensor(), c)
        assert_bitwise_equal(ref[c * 1024 : (c + 1) * 1024], got, f"as v2: chunk {c}")


def _direct_v3() -> tuple[Stream, Planes]:
    """f32_outliers (version 2) with chunk 2 (15 blocks, 3 outliers) direct, as version 3."""
    _, buf, _, _ = _load("f32_outliers", 2)
    st0 = Stream(buf)
    direct, pl = _as_direct(st0.chunk_bytes(2), st0.chunk_values(2))
    st_ = st0.replace_chunk(2, direct)
    st_.u8(4, 3)
    st_.seal(chunks=False)
    zccl_torch.decompress(st_.tensor())  # well-formed
    return st_, pl


def test_crafted_direct_chunk_defects_rejected():
    """The direct chunk's own fields: outlier count, bitmap padding, code lengths, outlier
    order, size; and a direct chunk in a lossless stream."""
    st0, pl = _direct_v3()
    off, m = st0.chunk_offset(2), st0.chunk_values(2)
    n_out, bitmap = len(pl.outliers), off + 5
    first_len = bitmap + 2
    idx_at = off + pl.end - len(pl.outlier_bytes) - 2 * n_out
    edits = {
        "n_outliers + 1": lambda s: s.u32(off + 1, n_out + 1),
        "n_outliers - 1": lambda s: s.u32(off + 1, n_out - 1),
        "n_outliers m + 1": lambda s: s.u32(off + 1, m + 1),
        "bitmap padding bit": lambda s: s.u8(bitmap + 1, s.u8(bitmap + 1) | 0x80),
        "code length 0": lambda s: s.u8(first_len, 0),
        "code length 32": lambda s: s.u8(first_len, 32),
        "code length + 1": lambda s: s.u8(first_len, s.u8(first_len) + 1),
        "outlier index m": lambda s: s.u16(idx_at + 2 * (n_out - 1), m),
        "outliers out of order": lambda s: s.u16(idx_at, s.u16(idx_at + 2)),
    }
    for what, fn in edits.items():
        st_ = st0.copy()
        fn(st_)
        st_.seal()
        _rejected(st_.array(), f"direct chunk: {what}", chunks=[2])
    body = st0.chunk_bytes(2)
    for wrong in (body + b"\0", body[:-1]):
        _rejected(st0.replace_chunk(2, wrong).array(), f"direct chunk of {len(wrong)} bytes")
    # a direct chunk in a lossless (bin 0) stream
    _, buf64, _, f64 = _load("f64_zstd", 2)
    _skip_without_codec(f64)
    x64 = make_data("noise", 128, torch.float64)
    noise = Stream(zccl_torch.compress(x64, 1e-3, chunk_size=128))
    assert noise.kinds() == ["direct"]
    st_ = Stream(buf64).replace_chunk(0, noise.chunk_bytes(0))
    st_.u8(4, 3)
    st_.seal(chunks=False)
    _rejected(st_.array(), "direct chunk in a lossless stream", chunks=[0])


def test_direct_chunk_every_single_byte_mutation_rejected():
    st0, _ = _direct_v3()
    buf = st0.array()
    for pos in range(buf.size):
        for xor in (0x01, 0xFF):
            mut = buf.copy()
            mut[pos] ^= xor
            _rejected(mut, f"v3 with a direct chunk: byte {pos}/{buf.size} ^= {xor:#04x}")
