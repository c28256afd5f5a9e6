"""Shared helpers for the compressor tests: data generators, strategies and the bound assertion.

The error bound is the product's promise, so :func:`assert_within_bound` checks it with the real
float64 arithmetic and no tolerance: ``abs(x.double() - x'.double()) <= eb`` for every finite ``x``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import settings
from hypothesis import strategies as st

DTYPES = (torch.float32, torch.float64)
#: The 2-byte types (stream format version 2): quantised in float32, stored in 2 bytes.
HALF_DTYPES = (torch.float16, torch.bfloat16)
BLOCK = 32
DEFAULT_CHUNK = 5120
CHUNK_SIZES = (32, 64, 5120, 65536)

_NP_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}
_INT_VIEW = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}
_HALF_MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7}

# Sizes around the block (32) and default chunk (5120) edges, plus primes.
SPECIAL_SIZES = (
    0,
    1,
    2,
    3,
    31,
    32,
    33,
    63,
    64,
    65,
    97,
    127,
    1021,
    5119,
    5120,
    5121,
    7919,
    10007,
    10240,
    10241,
)

DATA_KINDS = (
    "sin",  # smooth
    "cumsum",  # smooth random walk
    "noise",  # white noise
    "uniform",  # wide uniform
    "constant",
    "zeros",
    "alternating",  # +a, -a, +a, ...
    "steps",  # piecewise constant with large jumps
    "denormal",  # subnormals of the dtype (and zeros, -0.0)
    "huge",  # 1e30 scale
    "mixed",  # huge / tiny / denormal / zero / extreme values interleaved
    "random_bits",  # arbitrary bit patterns: NaN payloads, Inf, subnormals, finfo.max, ...
)

SCALES = (1e-30, 1e-6, 1.0, 1e3, 1e6, 1e30)


# --------------------------------------------------------------------------------------------
# Hypothesis settings
# --------------------------------------------------------------------------------------------


def examples(n_dev: int) -> settings:
    """Settings with ``n_dev`` examples in the dev profile, scaled down in the CI profile.

    Inherits every other option (deadline, derandomize, health checks) from the loaded profile,
    which tests/conftest.py registers and selects.
    """
    base = settings.default
    factor = base.max_examples / 100.0  # dev: 100 -> x1, ci: 30 -> x0.3, stress: 1000 -> x10
    return settings(base, max_examples=max(3, round(n_dev * factor)))


# --------------------------------------------------------------------------------------------
# Data generators
# --------------------------------------------------------------------------------------------


def _random_bits(rng: np.random.Generator, n: int, dtype: torch.dtype) -> np.ndarray:
    if dtype == torch.float32:
        return rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True).view(np.float64)


def _denormals(rng: np.random.Generator, n: int, dtype: torch.dtype) -> np.ndarray:
    if dtype == torch.float32:
        mant = rng.integers(0, 2**23, size=n, dtype=np.uint32)
        sign = rng.integers(0, 2, size=n, dtype=np.uint32) << np.uint32(31)
        return (mant | sign).view(np.float32)
    mant = rng.integers(0, 2**52, size=n, dtype=np.uint64)
    sign = rng.integers(0, 2, size=n, dtype=np.uint64) << np.uint64(63)
    return (mant | sign).view(np.float64)


def make_data(
    kind: str,
    n: int,
    dtype: torch.dtype,
    seed: int = 0,
    scale: float = 1.0,
    nonfinite: float = 0.0,
) -> torch.Tensor:
    """Returns a 1-D CPU tensor of ``n`` values of ``kind`` (see DATA_KINDS).

    ``nonfinite`` is the fraction of positions overwritten with NaN / +Inf / -Inf.

    float16 / bfloat16: the float32 data rounded to the type (values beyond its range become
    +-Inf), except ``random_bits`` and ``denormal``, which are drawn as 16-bit patterns.
    """
    if dtype in HALF_DTYPES:
        return _make_half(kind, n, dtype, seed, scale, nonfinite)
    rng = np.random.default_rng(seed)
    npdt = _NP_DTYPE[dtype]
    fi = np.finfo(npdt)
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "sin":
            t = np.linspace(0.0, 20.0 * math.pi, n)
            x = scale * np.sin(t + rng.uniform(0, 6.3)) + scale * rng.uniform(-3, 3)
        elif kind == "cumsum":
            x = scale * np.cumsum(rng.standard_normal(n))
        elif kind == "noise":
            x = scale * rng.standard_normal(n)
        elif kind == "uniform":
            x = rng.uniform(-scale, scale, size=n)
        elif kind == "constant":
            x = np.full(n, scale * rng.uniform(-10, 10))
        elif kind == "zeros":
            x = np.zeros(n)
        elif kind == "alternating":
            a = scale * rng.uniform(0.5, 2.0)
            x = np.where(np.arange(n) % 2 == 0, a, -a)
        elif kind == "steps":
            levels = scale * rng.standard_normal(max(1, n // 50 + 1)) * 1e3
            x = np.repeat(levels, 50)[:n]
        elif kind == "denormal":
            x = _denormals(rng, n, dtype)
            x[rng.random(n) < 0.1] = 0.0
            x[rng.random(n) < 0.05] = -0.0
        elif kind == "huge":
            x = 1e30 * rng.standard_normal(n)
        elif kind == "mixed":
            choices = np.array(
                [
                    1e30,
                    -1e30,
                    3e-30,
                    -7e-31,
                    0.0,
                    -0.0,
                    1.0,
                    -2.5,
                    float(fi.max),
                    -float(fi.max),
                    float(fi.tiny),
                    1e20,
                    -1e-20,
                ],
                dtype=np.float64,
            )
            x = choices[rng.integers(0, len(choices), size=n)] * rng.uniform(0.5, 1.0, size=n)
            x = x.astype(npdt)
            den = rng.random(n) < 0.1
            x[den] = _denormals(rng, int(den.sum()), dtype)
        elif kind == "random_bits":
            x = _random_bits(rng, n, dtype)
        else:
            raise ValueError(f"unknown data kind {kind!r}")
        x = np.asarray(x).astype(npdt)  # may overflow to +-inf for float32; that is fine
        if nonfinite > 0 and n:
            r = rng.random(n)
            x[r < nonfinite / 3] = np.nan
            x[(r >= nonfinite / 3) & (r < 2 * nonfinite / 3)] = np.inf
            x[(r >= 2 * nonfinite / 3) & (r < nonfinite)] = -np.inf
    return torch.from_numpy(np.ascontiguousarray(x))


def _make_half(kind, n, dtype, seed, scale, nonfinite) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    if kind == "random_bits":
        u = rng.integers(0, 2**16, size=n, dtype=np.uint32).astype(np.uint16)
    elif kind == "denormal":
        mant_bits = _HALF_MANTISSA_BITS[dtype]
        u = rng.integers(0, 2**mant_bits, size=n, dtype=np.uint32).astype(np.uint16)
        u |= rng.integers(0, 2, size=n, dtype=np.uint32).astype(np.uint16) << np.uint16(15)
        u[rng.random(n) < 0.1] = 0
        u[rng.random(n) < 0.05] = 0x8000
    else:
        return make_data(kind, n, torch.float32, seed=seed, scale=scale, nonfinite=nonfinite).to(
            dtype
        )
    t = torch.from_numpy(u.view(np.int16).copy()).view(dtype)
    if nonfinite > 0 and n:
        r = torch.from_numpy(rng.random(n))
        t[r < nonfinite / 3] = float("nan")
        t[(r >= nonfinite / 3) & (r < 2 * nonfinite / 3)] = float("inf")
        t[(r >= 2 * nonfinite / 3) & (r < nonfinite)] = -float("inf")
    return t


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

sizes = st.one_of(st.sampled_from(SPECIAL_SIZES), st.integers(0, 12_000))
small_multi_chunk_sizes = st.one_of(
    st.sampled_from((0, 1, 31, 33, 65, 97, 331)), st.integers(0, 3000)
)

#: Absolute (or relative) bounds from 1e-12 to 1e6, log-uniform, plus exact edge values and 0.
bounds = st.one_of(
    st.sampled_from((0.0, 1e-12, 1e-6, 1e-3, 0.1, 0.5, 1.0, 2.0**-20, 1e6)),
    st.floats(-12.0, 6.0).map(lambda e: 10.0**e),
)
positive_bounds = bounds.filter(lambda b: b > 0)


class Data:
    """A generated tensor that prints as the make_data call that rebuilds it, so a hypothesis
    failure report is a one-line reproducer rather than a tensor dump. Unpacks as (x, desc)."""

    def __init__(self, kind, n, dtype, seed, scale, nonfinite):
        self.args = (kind, n, dtype, seed, scale, nonfinite)
        self.x = make_data(kind, n, dtype, seed=seed, scale=scale, nonfinite=nonfinite)
        self.desc = (
            f"make_data({kind!r}, {n}, {dtype}, seed={seed}, scale={scale!r}, "
            f"nonfinite={nonfinite!r})"
        )

    def __iter__(self):
        return iter((self.x, self.desc))

    def __repr__(self):
        return self.desc


@st.composite
def datasets(draw, size_strategy=sizes, kinds=DATA_KINDS, dtypes=DTYPES):
    """Draws Data (a tensor plus the make_data call that rebuilt it)."""
    dtype = draw(st.sampled_from(dtypes))
    n = draw(size_strategy)
    kind = draw(st.sampled_from(kinds))
    scale = draw(st.sampled_from(SCALES))
    nonfinite = draw(st.sampled_from((0.0, 0.0, 0.01, 0.3)))
    seed = draw(st.integers(0, 2**32 - 1))
    return Data(kind, n, dtype, seed, scale, nonfinite)


# --------------------------------------------------------------------------------------------
# Assertions
# --------------------------------------------------------------------------------------------


def independent_abs_bound(x: torch.Tensor, error_bound: float, mode: str) -> float:
    """The absolute bound computed independently of zccl_torch (numpy, float64)."""
    if mode == "abs" or error_bound == 0:
        return float(error_bound)  # rel mode with bound 0 is lossless, even for an infinite range
    flat = x.detach().reshape(-1)
    a = (flat.double() if flat.element_size() == 2 else flat).numpy()  # halves: exact widening
    a = a[np.isfinite(a)].astype(np.float64)
    if a.size == 0:
        return 0.0
    hi, lo = float(np.max(a)), float(np.min(a))
    with np.errstate(over="ignore"):
        value_range = hi - lo
    if math.isinf(value_range):
        # float64 data spanning more than the float64 range: rel*(hi-lo) in its overflow-free form
        return float(error_bound) * hi - float(error_bound) * lo
    return float(error_bound) * value_range


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of a float tensor (for bit-exact comparisons, NaN payloads included)."""
    t = t.contiguous()
    return t.view(_INT_VIEW[t.dtype])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert tuple(a.shape) == tuple(b.shape), f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    if a.numel() == 0:
        return
    ba, bb = bits(a).reshape(-1), bits(b).reshape(-1)
    diff = (ba != bb).nonzero().reshape(-1)
    if diff.numel():
        i = int(diff[0])
        raise AssertionError(
            f"{what}: {diff.numel()} of {a.numel()} values differ bitwise; "
            f"first at flat index {i}: "
            f"{a.reshape(-1)[i].item()!r} vs {b.reshape(-1)[i].item()!r}"
        )


def assert_within_bound(orig: torch.Tensor, recon: torch.Tensor, eb: float, what: str = "") -> None:
    """The error-bound contract, checked exactly in float64.

    * dtype and shape restored;
    * NaN exactly where the original has NaN; +Inf / -Inf reproduced exactly;
    * every finite x: abs(x.double() - x'.double()) <= eb (so x' is finite too);
    * eb == 0: bit-exact (NaN payloads and -0.0 included).
    """
    assert isinstance(recon, torch.Tensor), f"{what}: decompress returned {type(recon)}"
    assert recon.dtype == orig.dtype, f"{what}: dtype {recon.dtype}, expected {orig.dtype}"
    assert tuple(recon.shape) == tuple(orig.shape), (
        f"{what}: shape {tuple(recon.shape)}, expected {tuple(orig.shape)}"
    )
    if eb == 0.0:
        assert_bitwise_equal(orig, recon, f"{what} (eb=0 must be lossless)")
        return
    o = orig.detach().reshape(-1)
    r = recon.detach().reshape(-1)
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    if not torch.equal(nan_o, nan_r):
        i = int((nan_o != nan_r).nonzero()[0])
        raise AssertionError(f"{what}: NaN mismatch at {i}: {o[i].item()!r} -> {r[i].item()!r}")
    inf_o = torch.isinf(o)
    if not torch.equal(o[inf_o], r[inf_o]):
        idx = inf_o.nonzero().reshape(-1)
        j = int(idx[(o[inf_o] != r[inf_o]).nonzero()[0]])
        raise AssertionError(
            f"{what}: Inf not preserved at {j}: {o[j].item()!r} -> {r[j].item()!r}"
        )
    fin = torch.isfinite(o)
    if not bool(torch.isfinite(r[fin]).all()):
        i = int((fin & ~torch.isfinite(r)).nonzero()[0])
        raise AssertionError(
            f"{what}: finite value at {i} decoded as non-finite: {o[i].item()!r} -> {r[i].item()!r}"
        )
    err = (o[fin].double() - r[fin].double()).abs()
    ok = err <= eb  # NaN / Inf errors compare False, so a finite x decoding to non-finite fails
    if not bool(ok.all()):
        idx = fin.nonzero().reshape(-1)
        bad = (~ok).nonzero().reshape(-1)
        k = int(bad[0])
        i = int(idx[k])
        raise AssertionError(
            f"{what}: {bad.numel()} finite values exceed eb={eb!r}; first at flat index {i}: "
            f"x={o[i].item()!r} x'={r[i].item()!r} |x-x'|={err[k].item()!r}"
        )


def check_stream_size(
    stream: torch.Tensor, dtype: torch.dtype, numel: int, chunk_size: int, ndim: int, what: str = ""
) -> None:
    from zccl_torch import max_compressed_size

    assert isinstance(stream, torch.Tensor), f"{what}: compress returned {type(stream)}"
    assert stream.dtype == torch.uint8, f"{what}: stream dtype {stream.dtype}"
    assert stream.dim() == 1, f"{what}: stream has shape {tuple(stream.shape)}"
    cap = max_compressed_size(dtype, numel, chunk_size=chunk_size, ndim=ndim)
    assert stream.numel() <= cap, (
        f"{what}: stream of {stream.numel()} bytes exceeds max_compressed_size={cap} "
        f"(dtype={dtype}, numel={numel}, chunk_size={chunk_size}, ndim={ndim})"
    )


def num_chunks(numel: int, chunk_size: int) -> int:
    return -(-numel // chunk_size)


# --------------------------------------------------------------------------------------------
# The stream layout, for tests that craft streams with valid checksums
# (csrc/compress/fzlight_format.h, versions 1, 2 and 3; written independently of the library)
# --------------------------------------------------------------------------------------------

ELEM_BYTES = {1: 4, 2: 8, 3: 2, 4: 2}  # dtype code -> bytes per stored value
MODE_ENCODED, MODE_RAW, MODE_CONSTANT, MODE_LOSSLESS, MODE_DIRECT = 0, 1, 2, 3, 4
_MODE_NAMES = {
    MODE_ENCODED: "encoded",
    MODE_RAW: "raw",
    MODE_CONSTANT: "constant",
    MODE_LOSSLESS: "lossless",
    MODE_DIRECT: "direct",
}


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
    """CRC-32C (Castagnoli), as the stream format uses it."""
    c = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class EncodedChunk(NamedTuple):
    """Where the fields of an encoded (mode 0) or direct (mode 4, version 3) chunk are, as
    absolute offsets in the stream."""

    off: int  # the mode byte
    size: int
    m: int  # values in the chunk
    nblocks: int
    lens: list  # code length of every block (0 for a zero block)
    len_pos: dict  # block -> offset of its code-length byte (v1: every block; v2: L > 0)
    bitmap: int | None  # offset of the block bitmap (version 2), else None
    bitmap_bytes: int
    planes: int  # offset of the first plane
    outliers: int  # offset of the outlier index array
    n_out: int
    n_out_at: int  # offset of the n_outliers field
    direct: bool  # a direct chunk: the planes hold the codes (no q_start, no prediction)


class Stream:
    """A mutable view of a version-1, 2 or 3 stream that can re-seal its checksums.

    ``chunk_offset(c)`` is where chunk c's own bytes start; a repeat entry (version >= 2, table
    size 0) has none, so its offset is where the next chunk's bytes start, and the bytes it
    stands for (``chunk_span``) are the 1 + elem bytes of the constant chunk that end there.
    """

    def __init__(self, buf):
        if isinstance(buf, torch.Tensor):
            buf = buf.numpy()
        self.b = bytearray(np.asarray(buf, dtype=np.uint8).tobytes())

    def copy(self) -> Stream:
        return Stream(self.array())

    # raw fields
    def u8(self, off, v=None):
        if v is None:
            return self.b[off]
        self.b[off] = v & 0xFF

    def u16(self, off, v=None):
        if v is None:
            return int.from_bytes(self.b[off : off + 2], "little")
        self.b[off : off + 2] = (v & 0xFFFF).to_bytes(2, "little")

    def u32(self, off, v=None):
        if v is None:
            return int.from_bytes(self.b[off : off + 4], "little")
        self.b[off : off + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")

    def u64(self, off, v=None):
        if v is None:
            return int.from_bytes(self.b[off : off + 8], "little")
        self.b[off : off + 8] = (v & (2**64 - 1)).to_bytes(8, "little")

    def f64(self, off, v=None):
        if v is None:
            return np.frombuffer(bytes(self.b[off : off + 8]), dtype=np.float64)[0]
        self.b[off : off + 8] = np.float64(v).tobytes()

    # header
    @property
    def version(self):
        return self.b[4]

    @property
    def dtype_code(self):
        return self.b[5]

    @property
    def elem(self):
        return ELEM_BYTES.get(self.b[5], 4)

    @property
    def ndim(self):
        return self.b[7]

    @property
    def count(self):
        return self.u64(8)

    @property
    def bin(self):
        return float(self.f64(24))

    @property
    def chunk_len(self):
        return self.u32(32)

    @property
    def codec(self):
        return self.u32(36)

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

    # chunks
    def chunk_values(self, c):
        return min(self.chunk_len, self.count - c * self.chunk_len)

    def chunk_size(self, c):
        return self.u32(self.table + 8 * c)

    def chunk_crc(self, c, v=None):
        return self.u32(self.table + 8 * c + 4, v)

    def chunk_offset(self, c):
        return self.header_bytes + sum(self.chunk_size(i) for i in range(c))

    def chunk_span(self, c):
        """(offset, size) of the bytes chunk c stands for (a repeat: the constant before it)."""
        off, size = self.chunk_offset(c), self.chunk_size(c)
        if size == 0:
            return off - (1 + self.elem), 1 + self.elem
        return off, size

    def chunk_bytes(self, c) -> bytes:
        off, size = self.chunk_span(c)
        return bytes(self.b[off : off + size])

    def kind(self, c) -> str:
        if self.chunk_size(c) == 0:
            return "repeat"
        mode = self.b[self.chunk_offset(c)]
        return _MODE_NAMES.get(mode, f"mode {mode}")

    def kinds(self) -> list[str]:
        return [self.kind(c) for c in range(self.nchunks)]

    def encoded(self, c) -> EncodedChunk:
        """The layout of encoded or direct chunk c (version 1 layout or the bitmap one, by the
        header's version byte)."""
        off, size = self.chunk_offset(c), self.chunk_size(c)
        direct = self.b[off] == MODE_DIRECT
        assert self.b[off] == MODE_ENCODED or direct, f"chunk {c} is {self.kind(c)}, not encoded"
        m = self.chunk_values(c)
        nblocks = -(-m // 32)
        n_out_at = off + 1 if direct else off + 5
        at = n_out_at + 4
        if self.version == 1:
            lens = list(self.b[at : at + nblocks])
            len_pos = {blk: at + blk for blk in range(nblocks)}
            bitmap, bm_bytes = None, 0
            at += nblocks
        else:
            bitmap, bm_bytes = at, -(-nblocks // 8)
            at += bm_bytes
            lens, len_pos = [], {}
            for blk in range(nblocks):
                if (self.b[bitmap + blk // 8] >> (blk % 8)) & 1:
                    len_pos[blk] = at
                    lens.append(self.b[at])
                    at += 1
                else:
                    lens.append(0)
        planes = at
        payload = sum(0 if n == 0 else 4 * (n + 1) for n in lens)
        return EncodedChunk(
            off,
            size,
            m,
            nblocks,
            lens,
            len_pos,
            bitmap,
            bm_bytes,
            planes,
            planes + payload,
            self.u32(n_out_at),
            n_out_at,
            direct,
        )

    def codes(self, c) -> np.ndarray:
        """The m integer codes of encoded or direct chunk c, read as the format says: sign and
        magnitude planes per block; Lorenzo deltas prefix-summed from q_start (int32 wrap) in an
        encoded chunk, the codes themselves in a direct one. Outliers' codes are included as
        stored (the decoder replaces those values)."""
        lay = self.encoded(c)
        codes = np.zeros(32 * lay.nblocks, dtype=np.int64)
        at = lay.planes
        for blk, n in enumerate(lay.lens):
            if n == 0:
                continue
            words = [self.u32(at + 4 * j) for j in range(n + 1)]
            for i in range(32):
                mag = sum(((words[1 + j] >> i) & 1) << j for j in range(n))
                codes[32 * blk + i] = -mag if (words[0] >> i) & 1 else mag
            at += 4 * (n + 1)
        if not lay.direct:
            q_start = int(np.array([self.u32(lay.off + 1)], dtype=np.uint32).view(np.int32)[0])
            codes = np.cumsum(codes) + q_start
            codes = ((codes + 2**31) % 2**32) - 2**31
        return codes[: lay.m].astype(np.int32)

    # editing
    def seal(self, chunks=True, total=True) -> Stream:
        """Recomputes the chunk CRCs (a repeat's: its constant chunk's), the total and the header
        CRC."""
        if chunks:
            for c in range(self.nchunks):
                off, size = self.chunk_span(c)
                if off >= 0 and off + size <= len(self.b):
                    self.chunk_crc(c, crc32c(bytes(self.b[off : off + size])))
        if total:
            self.u64(40, len(self.b))
        hb = self.header_bytes
        self.u32(hb - 4, crc32c(bytes(self.b[: hb - 4])))
        return self

    def with_chunks(self, bodies, crcs=None) -> Stream:
        """A stream with this header and the given chunk bodies (``None``: a repeat entry),
        sealed; ``crcs`` {chunk: value} overrides table CRCs after sealing (then the header CRC
        is sealed again)."""
        assert len(bodies) == self.nchunks
        hb = self.header_bytes
        out = Stream(np.frombuffer(bytes(self.b[:hb]), dtype=np.uint8))
        for c, body in enumerate(bodies):
            out.u32(out.table + 8 * c, 0 if body is None else len(body))
            if body is not None:
                out.b += body
        out.seal()
        if crcs:
            for c, v in crcs.items():
                out.chunk_crc(c, v)
            out.seal(chunks=False)
        return out

    def replace_chunk(self, c, body) -> Stream:
        """This stream with chunk c's own bytes replaced by ``body`` (None: a repeat), sealed."""
        bodies = [
            None
            if self.chunk_size(i) == 0
            else bytes(self.b[self.chunk_offset(i) : self.chunk_offset(i) + self.chunk_size(i)])
            for i in range(self.nchunks)
        ]
        bodies[c] = body
        return self.with_chunks(bodies)

    def array(self) -> np.ndarray:
        return np.frombuffer(bytes(self.b), dtype=np.uint8).copy()

    def tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.array())


def byte_planes(values: bytes, elem: int) -> bytes:
    """Lossless codec 1's shuffle: byte k of every value, k = 0.. in order."""
    a = np.frombuffer(values, dtype=np.uint8).reshape(-1, elem)
    return a.T.tobytes()


def zstd_frame(blocks, content_size: int | None, checksum: bytes = b"") -> bytes:
    """A zstd frame (RFC 8878) written by hand, so the tests need no zstd binding.

    ``blocks``: a list of ``bytes`` (a raw block) or ``(byte, n)`` (an RLE block: ``byte``
    n times); the last one is marked last. ``content_size``: the frame content size to record
    (single-segment frame), or None to record none (a window descriptor instead).
    ``checksum``: 4 bytes appended with the content-checksum flag set (the tests never compute
    XXH64, so any checksum here is a wrong one)."""
    flags = 0x04 if checksum else 0
    if content_size is None:
        n = sum(len(b) if isinstance(b, bytes) else b[1] for b in blocks)
        window_log = max(10, (max(n, 1) - 1).bit_length())
        header = bytes([flags, (window_log - 10) << 3])
    elif content_size < 256:
        header = bytes([0x20 | flags, content_size])
    elif content_size < 65536 + 256:
        header = bytes([0x60 | flags]) + (content_size - 256).to_bytes(2, "little")
    else:
        header = bytes([0xA0 | flags]) + content_size.to_bytes(4, "little")
    out = bytearray(b"\x28\xb5\x2f\xfd" + header)
    for k, blk in enumerate(blocks or [b""]):
        last = 1 if k == max(len(blocks), 1) - 1 else 0
        if isinstance(blk, bytes):
            out += (last | (len(blk) << 3)).to_bytes(3, "little") + blk  # block type 0: raw
        else:
            byte, n = blk
            out += (last | (1 << 1) | (n << 3)).to_bytes(3, "little") + bytes([byte])  # RLE
    return bytes(out + checksum)


def zstd_blocks(data: bytes, min_run: int = 8) -> list:
    """``data`` as zstd blocks: runs of at least ``min_run`` equal bytes as RLE blocks, the rest
    as raw blocks (each at most 128 KiB)."""
    blocks, i, lit = [], 0, bytearray()
    while i < len(data):
        j = i
        while j < len(data) and data[j] == data[i] and j - i < 128 * 1024:
            j += 1
        if j - i >= min_run:
            if lit:
                blocks.append(bytes(lit))
                lit = bytearray()
            blocks.append((data[i], j - i))
        else:
            lit += data[i:j]
            if len(lit) >= 128 * 1024:
                blocks.append(bytes(lit[: 128 * 1024]))
                lit = lit[128 * 1024 :]
        i = j
    if lit:
        blocks.append(bytes(lit))
    return blocks


def zstd_raw_frame(data: bytes, content_size: int | str | None = "len") -> bytes:
    """``data`` in one zstd frame of raw/RLE blocks; ``content_size`` "len" records len(data)."""
    return zstd_frame(zstd_blocks(data), len(data) if content_size == "len" else content_size)


ZSTD_EMPTY_FRAME = zstd_raw_frame(b"")
ZSTD_SKIPPABLE_FRAME = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
