"""Lossless per-chunk codec candidates for a bit-exact mode of the chunked compressor.

The planned lossless mode keeps the compressor's layout: the tensor is cut into chunks of 5120
values (20 KiB of float32, 40 KiB of float64, 10 KiB of float16 / bfloat16) that are coded
independently (parallel over chunks, random access, a CRC per chunk). This script measures how
well-kept libraries do in exactly that setting, one thread, on fields and gradients:

* zstd levels 1 and 3 (``zstandard``), raw and after a byte shuffle (each chunk's bytes regrouped
  by byte position: numpy view as uint8, reshaped ``(n, elem_size)`` and transposed);
* LZ4 block format (``lz4.block``), raw and after the same byte shuffle;
* C-Blosc2 (``blosc2``) with its SHUFFLE / BITSHUFFLE filters and the LZ4, ZSTD (clevel 1) and
  BLOSCLZ codecs, plus SHUFFLE+BYTEDELTA (its recommended float pipeline), typesize = element
  size, nthreads = 1;
* a size-only estimate (nothing timed) of a scheme simple enough to write ourselves, also on GPU:
  each float's bits mapped to an order-preserving integer (sign set: flip all bits, else flip the
  sign bit), wrapping deltas between consecutive values of the chunk (the first value predicted
  by +0.0), zig-zag or sign+magnitude, and per block of 32 values one byte for the bit length L
  then 32*L bits (+32 sign bits for sign+magnitude when L > 0). XOR with the previous value's bits
  is estimated too, for comparison.

Sizes: the per-chunk outputs are summed plus 4 bytes per chunk for a length field (for every
codec, blosc2 included, even though a blosc2 chunk also stores its own sizes); ratio = raw
bytes / that total. Throughput is *uncompressed* bytes per second (GB = 1e9), the median of
``--reps`` repetitions after one warm-up, each repetition coding the whole input chunk by chunk.
zstd and LZ4 are driven by a Python loop over chunks (about 1 us of call overhead per chunk,
shown by the "copy, per-chunk loop" row); blosc2 by an ``SChunk`` whose chunk size is the chunk
size, so its loop runs in C with one reused context, as a C++ core would use it (a Python call of
``blosc2.compress2`` per chunk costs 15-50 us of parameter handling, more than the coding).
Decompression returns one contiguous buffer (joining the chunks is included in the time).
Byte-shuffle rows include the numpy shuffle / unshuffle (about 2 GB/s, far slower than the SIMD
shuffle a C core would use); the figure in brackets is the codec alone on pre-shuffled bytes.
A whole-buffer numpy copy of the same bytes is timed as the ceiling.

Every codec is checked bit-exact on every input (decoded bytes compared as unsigned integers),
and also on pattern tensors of each dtype that mix NaNs with many payloads (quiet and signalling,
both signs), -0.0, +/-inf, subnormals, extreme normals, random bit patterns and runs; so is the
custom scheme's (invertible) transform. Exit status 1 if anything is not bit-exact.

Usage::

    OMP_NUM_THREADS=1 python3 benchmarks/lossless_candidates.py  # -> results/*.json
    python3 benchmarks/lossless_candidates.py --quick            # smoke test, temp dir
    python3 benchmarks/lossless_candidates.py --reps 7 --size 128 --out /tmp/lc

Needs ``pip install zstandard lz4 blosc2`` besides torch and numpy.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import blosc2
import lz4
import lz4.block
import numpy as np
import sample_fields  # benchmarks/sample_fields.py
import torch
import zstandard

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
CHUNK_VALUES = 5120
LENGTH_FIELD_BYTES = 4
BLOCK_VALUES = 32
GB = 1e9

Row = dict[str, Any]
U8 = np.ndarray  # uint8 byte buffers (numpy's typing of dtypes is too loose to be worth it)

# (exponent bits, mantissa bits) of each float format, by element size and name.
FLOAT_FORMATS: dict[str, tuple[int, int, int]] = {
    # name: (bytes, exponent bits, mantissa bits)
    "float32": (4, 8, 23),
    "float64": (8, 11, 52),
    "float16": (2, 5, 10),
    "bfloat16": (2, 8, 7),
}
UINT_OF_SIZE: dict[int, type[np.unsignedinteger[Any]]] = {
    2: np.uint16,
    4: np.uint32,
    8: np.uint64,
}
INT_OF_SIZE: dict[int, type[np.signedinteger[Any]]] = {2: np.int16, 4: np.int32, 8: np.int64}


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------


@dataclass
class Input:
    """One tensor's raw bytes (little-endian, contiguous) and what they are."""

    name: str
    dtype: str
    data: U8
    description: str

    @property
    def elem_size(self) -> int:
        return FLOAT_FORMATS[self.dtype][0]

    @property
    def numel(self) -> int:
        return self.data.size // self.elem_size

    @property
    def chunk_bytes(self) -> int:
        return CHUNK_VALUES * self.elem_size

    def uint_view(self) -> np.ndarray:
        return self.data.view(UINT_OF_SIZE[self.elem_size])


def tensor_bytes(t: torch.Tensor) -> U8:
    """The tensor's bytes as a fresh, contiguous uint8 numpy array (bfloat16 included)."""
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().copy()


def mlp_gradient(hidden: int, steps: int, seed: int = 0) -> torch.Tensor:
    """Flattened float32 gradient of a 2-hidden-layer ReLU MLP after ``steps`` Adam steps.

    Inputs are Gaussian, labels come from a fixed random linear teacher (so the loss falls and the
    gradient is not pure noise); the returned gradient is that of step ``steps + 1``.
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n_in, n_out, n_data, batch = 512, 10, 4096, 128
    model = torch.nn.Sequential(
        torch.nn.Linear(n_in, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, n_out),
    )
    x = torch.randn(n_data, n_in, generator=gen)
    y = (x @ torch.randn(n_in, n_out, generator=gen)).argmax(dim=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(steps + 1):
        idx = torch.randint(0, n_data, (batch,), generator=gen)
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        if step < steps:
            opt.step()
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    return torch.cat(grads).detach().clone()


def make_inputs(edge: int, hidden: int, steps: int) -> list[Input]:
    shape = (edge, edge, edge)
    wave32 = sample_fields.acoustic_wavefield_3d(shape, dtype=torch.float32)
    wave64 = sample_fields.acoustic_wavefield_3d(shape, dtype=torch.float64)
    laplace = sample_fields.laplace_noise(edge**3, scale=1e-3)
    grad = mlp_gradient(hidden, steps)
    where = f"acoustic_wavefield_3d({shape})"
    mlp = f"MLP 512-{hidden}-{hidden}-10 gradient after {steps} Adam steps"
    return [
        Input("wave_f32", "float32", tensor_bytes(wave32), f"{where}, float32"),
        Input("wave_f64", "float64", tensor_bytes(wave64), f"{where}, simulated in float64"),
        Input(
            "wave_f64c",
            "float64",
            tensor_bytes(wave32.double()),
            f"{where}, float32 cast to float64 (29 zero mantissa bits)",
        ),
        Input("wave_bf16", "bfloat16", tensor_bytes(wave32.bfloat16()), f"{where}, bf16 cast"),
        Input("wave_f16", "float16", tensor_bytes(wave32.half()), f"{where}, fp16 cast"),
        Input("laplace_f32", "float32", tensor_bytes(laplace), f"laplace_noise({edge}**3, 1e-3)"),
        Input("grad_f32", "float32", tensor_bytes(grad), f"{mlp}, float32"),
        Input("grad_bf16", "bfloat16", tensor_bytes(grad.bfloat16()), f"{mlp}, bf16 cast"),
    ]


def float_pattern(dtype: str, numel: int, seed: int = 1) -> Input:
    """Normal values mixed with every awkward bit pattern of the format (for exactness only)."""
    size, ebits, mbits = FLOAT_FORMATS[dtype]
    nbits = 8 * size
    utype = UINT_OF_SIZE[size]
    rng = np.random.default_rng(seed)
    sign = 1 << (nbits - 1)
    exp_all = ((1 << ebits) - 1) << mbits
    mant = (1 << mbits) - 1
    quiet = 1 << (mbits - 1)

    def rand_mant(n: int, hi: int) -> np.ndarray:
        return rng.integers(1, hi, size=n, dtype=np.uint64, endpoint=True)

    def signs(n: int) -> np.ndarray:
        return rng.integers(0, 2, size=n, dtype=np.uint64) * np.uint64(sign)

    n = numel // 8
    specials = [
        np.array([0, sign, exp_all, sign | exp_all], dtype=np.uint64),  # +-0, +-inf
        signs(n) | np.uint64(exp_all | quiet) | (rand_mant(n, mant) & np.uint64(quiet - 1)),  # qNaN
        signs(n) | np.uint64(exp_all) | rand_mant(n, quiet - 1),  # signalling NaN, payload != 0
        signs(n) | rand_mant(n, mant),  # subnormals
        np.array([1, mant, 1 << mbits, exp_all - 1, sign | 1, sign | mant], dtype=np.uint64),
    ]
    random_bits = rng.integers(0, (1 << 64) - 1, size=n, dtype=np.uint64, endpoint=True)
    random_bits = random_bits >> np.uint64(64 - nbits)
    normal = rng.standard_normal(numel).astype(np.float32)
    if dtype == "float64":
        normal_bits = normal.astype(np.float64).view(np.uint64)
    elif dtype == "float16":
        normal_bits = normal.astype(np.float16).view(np.uint16).astype(np.uint64)
    elif dtype == "bfloat16":
        normal_bits = (normal.view(np.uint32) >> 16).astype(np.uint64)
    else:
        normal_bits = normal.view(np.uint32).astype(np.uint64)
    mixed = np.concatenate([*specials, random_bits, normal_bits])[:numel]
    mixed = mixed[rng.permutation(mixed.size)]
    # Runs, for the LZ matchers: a constant NaN payload, a run of -0.0, a repeated segment.
    mixed[100:400] = np.uint64(exp_all | quiet | 0x5)
    mixed[500:700] = np.uint64(sign)
    mixed[2000:3000] = mixed[7000:8000]
    bits = mixed.astype(utype)
    assert bits.size == numel
    return Input(f"pattern_{dtype}", dtype, bits.view(np.uint8).copy(), "exactness pattern")


# ------------------------------------------------------------------------------------------------
# Byte shuffle (per chunk) in numpy
# ------------------------------------------------------------------------------------------------


def _split(data: U8, chunk_bytes: int) -> tuple[int, int]:
    full = data.size // chunk_bytes
    return full, data.size - full * chunk_bytes


def byte_shuffle(data: U8, elem: int, chunk_bytes: int) -> U8:
    """Within each chunk, all first bytes of the elements, then all second bytes, ..."""
    full, tail = _split(data, chunk_bytes)
    out = np.empty_like(data)
    head = full * chunk_bytes
    n = chunk_bytes // elem
    out[:head].reshape(full, elem, n)[...] = data[:head].reshape(full, n, elem).transpose(0, 2, 1)
    if tail:
        out[head:].reshape(elem, tail // elem)[...] = data[head:].reshape(-1, elem).T
    return out


def byte_unshuffle(data: U8, elem: int, chunk_bytes: int) -> U8:
    full, tail = _split(data, chunk_bytes)
    out = np.empty_like(data)
    head = full * chunk_bytes
    n = chunk_bytes // elem
    dst = out[:head].reshape(full, n, elem)
    src = data[:head].reshape(full, elem, n)
    for k in range(elem):  # plane by plane: contiguous reads, much faster than one transpose
        dst[:, :, k] = src[:, k, :]
    if tail:
        out[head:].reshape(-1, elem)[...] = data[head:].reshape(elem, -1).T
    return out


# ------------------------------------------------------------------------------------------------
# Codecs
# ------------------------------------------------------------------------------------------------


class Codec(Protocol):
    name: str
    family: str
    params: dict[str, Any]
    numpy_shuffle: bool

    def compress(self, data: U8, elem: int, chunk_bytes: int) -> Any: ...

    def decompress(self, enc: Any, inp_size: int, elem: int, chunk_bytes: int) -> U8: ...

    def chunk_sizes(self, enc: Any) -> list[int]: ...


def chunk_bounds(nbytes: int, chunk_bytes: int) -> list[tuple[int, int]]:
    return [(i, min(i + chunk_bytes, nbytes)) for i in range(0, nbytes, chunk_bytes)]


@dataclass
class LoopCodec:
    """A codec with a per-chunk Python call (zstd, lz4, plain copy); optional numpy shuffle."""

    name: str
    family: str
    params: dict[str, Any]
    numpy_shuffle: bool
    enc_fn: Callable[[memoryview], bytes]
    dec_fn: Callable[[bytes, int], bytes]

    def compress(self, data: U8, elem: int, chunk_bytes: int) -> list[bytes]:
        if self.numpy_shuffle:
            data = byte_shuffle(data, elem, chunk_bytes)
        mv = memoryview(data).cast("B")
        enc = self.enc_fn
        return [enc(mv[a:b]) for a, b in chunk_bounds(data.size, chunk_bytes)]

    def decompress(self, enc: list[bytes], inp_size: int, elem: int, chunk_bytes: int) -> U8:
        dec = self.dec_fn
        bounds = chunk_bounds(inp_size, chunk_bytes)
        parts = [dec(c, b - a) for c, (a, b) in zip(enc, bounds, strict=True)]
        out = np.frombuffer(b"".join(parts), np.uint8)
        if self.numpy_shuffle:
            out = byte_unshuffle(out, elem, chunk_bytes)
        return out

    def chunk_sizes(self, enc: list[bytes]) -> list[int]:
        return [len(c) for c in enc]

    def without_shuffle(self) -> LoopCodec:
        return LoopCodec(self.name, self.family, self.params, False, self.enc_fn, self.dec_fn)


def zstd_codec(level: int, shuffle: bool) -> LoopCodec:
    cctx = zstandard.ZstdCompressor(level=level)  # frame with content size, no checksum
    dctx = zstandard.ZstdDecompressor()

    def dec(c: bytes, n: int) -> bytes:
        return dctx.decompress(c)

    prefix = "byteshuf+" if shuffle else ""
    params = {"level": level, "frame": "content size, no checksum"}
    return LoopCodec(f"{prefix}zstd-{level}", "zstd", params, shuffle, cctx.compress, dec)


def lz4_codec(shuffle: bool) -> LoopCodec:
    def enc(mv: memoryview) -> bytes:
        return lz4.block.compress(mv, mode="default", store_size=False)

    def dec(c: bytes, n: int) -> bytes:
        return lz4.block.decompress(c, uncompressed_size=n)

    prefix = "byteshuf+" if shuffle else ""
    params = {"mode": "default (acceleration 1)", "store_size": False}
    return LoopCodec(f"{prefix}lz4", "lz4", params, shuffle, enc, dec)


def copy_loop_codec() -> LoopCodec:
    def dec(c: bytes, n: int) -> bytes:
        return c

    return LoopCodec("copy, per-chunk loop", "copy", {}, False, bytes, dec)


@dataclass
class Blosc2Codec:
    """C-Blosc2 through an SChunk of one chunk per zccl chunk (C loop, one reused context)."""

    name: str
    codec: blosc2.Codec
    clevel: int
    filters: Sequence[blosc2.Filter]
    family: str = "blosc2"
    numpy_shuffle: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.params = {
            "codec": self.codec.name,
            "clevel": self.clevel,
            "filters": [f.name for f in self.filters],
            "nthreads": 1,
            "blocksize": "auto",
            "splitmode": "AUTO_SPLIT",
        }

    def _cparams(self, elem: int) -> dict[str, Any]:
        return {
            "codec": self.codec,
            "clevel": self.clevel,
            "typesize": elem,
            "nthreads": 1,
            "filters": list(self.filters),
            "filters_meta": [0] * len(self.filters),
        }

    def compress(self, data: U8, elem: int, chunk_bytes: int) -> blosc2.SChunk:
        return blosc2.SChunk(
            chunksize=chunk_bytes,
            data=memoryview(data),
            cparams=self._cparams(elem),
            dparams={"nthreads": 1},
        )

    def decompress(self, enc: blosc2.SChunk, inp_size: int, elem: int, chunk_bytes: int) -> U8:
        return np.frombuffer(enc[:], np.uint8)

    def chunk_sizes(self, enc: blosc2.SChunk) -> list[int]:
        return [len(enc.get_chunk(i)) for i in range(enc.nchunks)]


def all_codecs() -> list[Codec]:
    f = blosc2.Filter
    c = blosc2.Codec
    codecs: list[Codec] = [copy_loop_codec()]
    for shuffle in (False, True):
        codecs += [zstd_codec(1, shuffle), zstd_codec(3, shuffle), lz4_codec(shuffle)]
    for filt in (f.SHUFFLE, f.BITSHUFFLE):
        for codec, clevel in ((c.LZ4, 5), (c.ZSTD, 1), (c.BLOSCLZ, 5)):
            codecs.append(
                Blosc2Codec(f"b2 {filt.name} {codec.name}-{clevel}", codec, clevel, [filt])
            )
    for codec, clevel in ((c.LZ4, 5), (c.ZSTD, 1)):
        name = f"b2 SHUFFLE+BYTEDELTA {codec.name}-{clevel}"
        codecs.append(Blosc2Codec(name, codec, clevel, [f.SHUFFLE, f.BYTEDELTA]))
    return codecs


# ------------------------------------------------------------------------------------------------
# Our own scheme: ordered ints, deltas, zig-zag / sign+magnitude, 32-value bit packing (size only)
# ------------------------------------------------------------------------------------------------


def ordered_bits(u: np.ndarray) -> np.ndarray:
    """Order-preserving map of float bits to unsigned ints: sign set -> ~u, else u ^ sign."""
    nbits = 8 * u.itemsize
    sign = u.dtype.type(1 << (nbits - 1))
    return np.where((u & sign) != 0, ~u, u ^ sign)


def unordered_bits(o: np.ndarray) -> np.ndarray:
    nbits = 8 * o.itemsize
    sign = o.dtype.type(1 << (nbits - 1))
    return np.where((o & sign) != 0, o ^ sign, ~o)


def chunk_rows(u: np.ndarray) -> list[np.ndarray]:
    """The chunks of ``u`` as 2-D arrays: all full chunks at once, then the tail chunk."""
    full = u.size // CHUNK_VALUES
    rows = [u[: full * CHUNK_VALUES].reshape(full, CHUNK_VALUES)] if full else []
    if u.size > full * CHUNK_VALUES:
        rows.append(u[full * CHUNK_VALUES :].reshape(1, -1))
    return rows


def _blocks(a: np.ndarray) -> np.ndarray:
    """``(rows, n)`` -> zero-padded ``(rows, blocks, BLOCK_VALUES)``."""
    rows, n = a.shape
    blocks = -(-n // BLOCK_VALUES)
    padded = np.zeros((rows, blocks * BLOCK_VALUES), a.dtype)
    padded[:, :n] = a
    return padded.reshape(rows, blocks, BLOCK_VALUES)


def zigzag(s: np.ndarray) -> np.ndarray:
    nbits = 8 * s.itemsize
    return ((s << 1) ^ (s >> (nbits - 1))).view(UINT_OF_SIZE[s.itemsize])


def unzigzag(z: np.ndarray) -> np.ndarray:
    one = z.dtype.type(1)
    return ((z >> one) ^ (z.dtype.type(0) - (z & one))).view(INT_OF_SIZE[z.itemsize])


def trailing_zeros(v: np.ndarray) -> np.ndarray:
    """Trailing zero bits of unsigned ints (the width in bits for 0)."""
    lowest = v & (v.dtype.type(0) - v)
    return np.where(v == 0, 8 * v.itemsize, bit_length(lowest) - 1)


def residuals(rows: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-chunk unsigned residuals, and the side data the inverse needs.

    ``zigzag`` / ``signmag``: wrapping deltas of the ordered ints (first value predicted by the
    image of +0.0), zig-zagged or as magnitudes (side data: the negative mask, the sign bits).
    ``xor``: bits XOR the previous value's bits (extra). ``zigzag-tz`` (extra): per block, the
    deltas are first shifted right by their common trailing zero count T (side data, one more
    header byte per block), which pays off when data is stored at more precision than it holds
    (float32 cast to float64).
    """
    if kind == "xor":
        prev = np.zeros_like(rows)
        prev[:, 1:] = rows[:, :-1]
        return rows ^ prev, None
    o = ordered_bits(rows)
    nbits = 8 * rows.itemsize
    prev = np.empty_like(o)
    prev[:, 0] = 1 << (nbits - 1)  # ordered image of +0.0
    prev[:, 1:] = o[:, :-1]
    d = o - prev  # wraps modulo 2**nbits
    s = d.view(INT_OF_SIZE[rows.itemsize])
    if kind == "zigzag":
        return zigzag(s), None
    if kind == "zigzag-tz":
        n = rows.shape[1]
        tz = trailing_zeros(_blocks(d))
        shift = (tz.min(axis=2) % nbits).astype(s.dtype)  # an all-zero block gets T = 0
        shifted = (_blocks(s) >> shift[:, :, None]).reshape(rows.shape[0], -1)[:, :n]
        return zigzag(np.ascontiguousarray(shifted)), shift
    negative = s < 0
    return np.where(negative, d.dtype.type(0) - d, d), negative  # |s|; INT_MIN -> 2**(nbits-1)


def invert_residuals(r: np.ndarray, side: np.ndarray | None, kind: str) -> np.ndarray:
    nbits = 8 * r.itemsize
    if kind == "xor":
        return np.bitwise_xor.accumulate(r, axis=1)
    if kind == "zigzag":
        d = unzigzag(r).view(r.dtype)
    elif kind == "zigzag-tz":
        assert side is not None
        n = r.shape[1]
        s = (_blocks(unzigzag(r)) << side[:, :, None]).reshape(r.shape[0], -1)[:, :n]
        d = np.ascontiguousarray(s).view(r.dtype)
    else:
        assert side is not None
        d = np.where(side, r.dtype.type(0) - r, r)
    d = d.copy()
    d[:, 0] += r.dtype.type(1 << (nbits - 1))
    return unordered_bits(np.cumsum(d, axis=1, dtype=r.dtype))


def bit_length(v: np.ndarray) -> np.ndarray:
    """Exact bit length of unsigned ints (0 for 0), any width up to 64."""
    v = v.astype(np.uint64)
    n = np.zeros(v.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        hit = (v >> np.uint64(s)) != 0
        n += s * hit
        v = np.where(hit, v >> np.uint64(s), v)
    return n + (v != 0)


def scheme_chunk_bytes(r: np.ndarray, sign_bits: bool, header_bytes: int) -> np.ndarray:
    """Bytes of each chunk (row): per block, header + count*L bits (+count sign bits if L > 0)."""
    n = r.shape[1]
    blocks = -(-n // BLOCK_VALUES)
    lengths = bit_length(_blocks(r).max(axis=2))  # zero padding never raises a maximum
    counts = np.full(blocks, BLOCK_VALUES, np.int64)
    counts[-1] = n - BLOCK_VALUES * (blocks - 1)
    per_value = lengths + int(sign_bits) * (lengths > 0)
    bits = 8 * header_bytes * blocks + (per_value * counts).sum(axis=1)
    return -(-bits // 8)


SCHEMES = (
    ("own: delta+zigzag, 32-blk pack", "zigzag"),
    ("own: delta+sign-mag, 32-blk pack", "signmag"),
    ("own (extra): xor-prev, 32-blk pack", "xor"),
    ("own (extra): delta+tz-shift+zigzag", "zigzag-tz"),
)


def scheme_estimate(inp: Input, kind: str) -> tuple[int, int, bool]:
    """(total bytes incl. length fields, chunks, transform round trip exact) for one scheme."""
    total = chunks = 0
    exact = True
    header = 2 if kind == "zigzag-tz" else 1  # bit length L (+ shift T)
    for rows in chunk_rows(inp.uint_view()):
        r, side = residuals(rows, kind)
        total += int(scheme_chunk_bytes(r, kind == "signmag", header).sum())
        chunks += rows.shape[0]
        exact &= bool(np.array_equal(invert_residuals(r, side, kind), rows))
    return total + LENGTH_FIELD_BYTES * chunks, chunks, exact


# ------------------------------------------------------------------------------------------------
# Measurement
# ------------------------------------------------------------------------------------------------


def median_time(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """Median wall time over ``reps`` calls after one warm-up call, and the last result."""
    result = fn()
    times = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(times), result


def same_bits(a: U8, b: U8, elem: int) -> bool:
    ut = UINT_OF_SIZE[elem]
    return a.size == b.size and bool(np.array_equal(a.view(ut), b.view(ut)))


def check_exact(codec: Codec, inp: Input) -> bool:
    enc = codec.compress(inp.data, inp.elem_size, inp.chunk_bytes)
    out = codec.decompress(enc, inp.data.size, inp.elem_size, inp.chunk_bytes)
    return same_bits(np.asarray(out, np.uint8), inp.data, inp.elem_size)


def measure_codec(codec: Codec, inp: Input, reps: int) -> Row:
    data, elem, cb = inp.data, inp.elem_size, inp.chunk_bytes
    t_c, enc = median_time(lambda: codec.compress(data, elem, cb), reps)
    t_d, out = median_time(lambda: codec.decompress(enc, data.size, elem, cb), reps)
    sizes = codec.chunk_sizes(enc)
    total = sum(sizes) + LENGTH_FIELD_BYTES * len(sizes)
    row: Row = {
        "input": inp.name,
        "codec": codec.name,
        "family": codec.family,
        "params": codec.params,
        "kind": "timed",
        "chunks": len(sizes),
        "compressed_bytes": total,
        "ratio": data.size / total,
        "compress_gbps": data.size / t_c / GB,
        "decompress_gbps": data.size / t_d / GB,
        "exact": same_bits(np.asarray(out, np.uint8), data, elem),
    }
    if isinstance(codec, LoopCodec) and codec.numpy_shuffle:
        bare = codec.without_shuffle()
        shuffled = byte_shuffle(data, elem, cb)
        t_c2, enc2 = median_time(lambda: bare.compress(shuffled, elem, cb), reps)
        t_d2, _ = median_time(lambda: bare.decompress(enc2, data.size, elem, cb), reps)
        row["compress_codec_only_gbps"] = data.size / t_c2 / GB
        row["decompress_codec_only_gbps"] = data.size / t_d2 / GB
    return row


def measure_copy(inp: Input, reps: int) -> Row:
    dst = np.empty_like(inp.data)
    t, _ = median_time(lambda: np.copyto(dst, inp.data), reps)
    chunks = -(-inp.data.size // inp.chunk_bytes)
    return {
        "input": inp.name,
        "codec": "numpy copy (ceiling)",
        "family": "copy",
        "params": {"whole buffer": True},
        "kind": "ceiling",
        "chunks": chunks,
        "compressed_bytes": inp.data.size,
        "ratio": 1.0,
        "compress_gbps": inp.data.size / t / GB,
        "decompress_gbps": inp.data.size / t / GB,
        "exact": True,
    }


def measure_shuffle(inp: Input, reps: int) -> Row:
    data, elem, cb = inp.data, inp.elem_size, inp.chunk_bytes
    t_s, shuffled = median_time(lambda: byte_shuffle(data, elem, cb), reps)
    t_u, back = median_time(lambda: byte_unshuffle(shuffled, elem, cb), reps)
    return {
        "input": inp.name,
        "codec": "numpy byte shuffle alone",
        "family": "filter",
        "params": {},
        "kind": "filter",
        "chunks": -(-data.size // cb),
        "compressed_bytes": data.size,
        "ratio": 1.0,
        "compress_gbps": data.size / t_s / GB,
        "decompress_gbps": data.size / t_u / GB,
        "exact": same_bits(back, data, elem),
    }


def scheme_rows(inp: Input) -> list[Row]:
    rows = []
    for name, kind in SCHEMES:
        total, chunks, exact = scheme_estimate(inp, kind)
        rows.append(
            {
                "input": inp.name,
                "codec": name,
                "family": "own",
                "params": {
                    "residual": kind,
                    "block": BLOCK_VALUES,
                    "header bytes per block": 2 if kind == "zigzag-tz" else 1,
                },
                "kind": "size-only",
                "chunks": chunks,
                "compressed_bytes": total,
                "ratio": inp.data.size / total,
                "compress_gbps": None,
                "decompress_gbps": None,
                "exact": exact,
            }
        )
    return rows


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------


def fmt(v: float | None, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def pivot(rows: list[Row], inputs: list[Input], metric: str, title: str) -> str:
    names: list[str] = []
    for r in rows:
        if r["codec"] not in names:
            names.append(r["codec"])
    cell = {(r["codec"], r["input"]): r for r in rows}
    head = "| " + title + " | " + " | ".join(i.name for i in inputs) + " |"
    lines = [head, "|---|" + "---:|" * len(inputs)]
    for name in names:
        cells = []
        for inp in inputs:
            r = cell.get((name, inp.name))
            if r is None:
                cells.append("")
                continue
            text = fmt(r.get(metric))
            extra = r.get(metric.replace("_gbps", "_codec_only_gbps"))
            if metric != "ratio" and extra is not None:
                text += f" [{fmt(extra)}]"
            if not r["exact"]:
                text += " NOT EXACT"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versions() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "zstandard": zstandard.__version__,
        "libzstd (in zstandard)": ".".join(map(str, zstandard.ZSTD_VERSION)),
        "lz4 (python)": lz4.__version__,
        "liblz4 (in lz4)": lz4.library_version_string(),
        "blosc2 (python)": blosc2.__version__,
        "c-blosc2": blosc2.VERSION_STRING,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small inputs, 1 rep (smoke test)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 5)")
    parser.add_argument("--size", type=int, default=None, help="wavefield edge (default 96)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default {DEFAULT_OUT}; with --quick a fresh temp folder)",
    )
    args = parser.parse_args(argv)
    args.reps = args.reps or (1 if args.quick else 5)
    args.size = args.size or (32 if args.quick else 96)
    args.hidden = 128 if args.quick else 1024
    args.steps = 3 if args.quick else 20
    if args.reps < 1 or args.size < 16:
        parser.error("--reps must be >= 1 and --size >= 16")
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="zccl-lossless-")) if args.quick else DEFAULT_OUT
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    blosc2.set_nthreads(1)
    load_start = load_average()
    omp = os.environ.get("OMP_NUM_THREADS")
    print(f"load average at start: {load_start}; OMP_NUM_THREADS={omp}", flush=True)
    inputs = make_inputs(args.size, args.hidden, args.steps)
    codecs = all_codecs()

    rows: list[Row] = []
    load_per_input: dict[str, list[float] | None] = {}
    for inp in inputs:
        t0 = time.perf_counter()
        rows.append(measure_copy(inp, args.reps))
        for codec in codecs:
            rows.append(measure_codec(codec, inp, args.reps))
        rows.append(measure_shuffle(inp, args.reps))
        rows += scheme_rows(inp)
        load_per_input[inp.name] = load_average()
        print(
            f"  {inp.name}: {inp.numel} values, {inp.data.size / 1e6:.2f} MB, "
            f"{time.perf_counter() - t0:.1f} s, load {load_per_input[inp.name]}",
            flush=True,
        )

    patterns = [float_pattern(d, 3 * CHUNK_VALUES + 77) for d in FLOAT_FORMATS]
    pattern_checks = []
    for pat in patterns:
        for codec in codecs:
            pattern_checks.append(
                {"input": pat.name, "codec": codec.name, "exact": check_exact(codec, pat)}
            )
        for name, kind in SCHEMES:
            _, _, exact = scheme_estimate(pat, kind)
            pattern_checks.append({"input": pat.name, "codec": name, "exact": exact})

    failures = [f"{r['codec']} on {r['input']}" for r in rows + pattern_checks if not r["exact"]]
    load_end = load_average()
    result = {
        "benchmark": "lossless_candidates",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()},
        "load_average": {"start": load_start, "per_input": load_per_input, "end": load_end},
        "settings": {
            "chunk_values": CHUNK_VALUES,
            "length_field_bytes_per_chunk": LENGTH_FIELD_BYTES,
            "reps": args.reps,
            "statistic": "median after one warm-up",
            "threads": 1,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "gb": GB,
            "throughput": "uncompressed bytes per second",
        },
        "versions": versions(),
        "inputs": [
            {
                "name": i.name,
                "dtype": i.dtype,
                "numel": i.numel,
                "bytes": int(i.data.size),
                "description": i.description,
            }
            for i in inputs
        ],
        "results": rows,
        "pattern_checks": pattern_checks,
        "all_exact": not failures,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "lossless_candidates.json"
    path.write_text(json.dumps(result, indent=1) + "\n")

    print()
    print(pivot(rows, inputs, "ratio", "ratio"))
    print()
    timed = [r for r in rows if r["kind"] != "size-only"]
    print(pivot(timed, inputs, "compress_gbps", "compress GB/s"))
    print()
    print(pivot(timed, inputs, "decompress_gbps", "decompress GB/s"))
    print()
    print("[x] = codec alone on pre-shuffled bytes (numpy shuffle time excluded)")
    checks = len(rows) + len(pattern_checks)
    print(f"bit-exact: {checks - len(failures)}/{checks} checks (inputs + patterns)")
    for f in failures:
        print(f"  NOT EXACT: {f}")
    print(f"load average: start {load_start}, end {load_end}")
    print(f"results: {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
