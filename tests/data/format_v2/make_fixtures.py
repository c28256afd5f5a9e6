"""Regenerates the version-2 stream fixtures of this directory (see README.txt).

    python3 tests/data/format_v2/make_fixtures.py /path/to/v2tool

``v2tool`` (v2tool.cpp here) is a small program linked against the version-2 encoder:
csrc/compress of commit SOURCE_COMMIT, the last with format version 2; README.txt says how to
build it. For every fixture this script

* generates the input values with numpy (fixed seeds, below) and writes them to NAME.input.bin,
* runs ``v2tool NAME.input.bin DTYPE EB CHUNK CODEC NAME.v2.zcfz NAME.v2dec.bin [shape...]``,
  which writes the version-2 stream and the version-2 decoder's output,
* records everything in manifest.json (with SHA-256 digests, so a stale file is noticed).

All files are raw little-endian arrays (bfloat16 as its 16-bit patterns); nothing here needs
torch.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE_COMMIT = "6113997cb7bb0108d559a1021dac03ed87d463ec"


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even; NaN stays NaN with
    its top payload bits (and the quiet bit set, so no payload rounds to Inf)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def _f32_outliers():
    """float32, 1500 values, chunk 512 (3 chunks, the last with a partial block): 10*sin plus
    1e-4 noise, eb 1e-3, a flat stretch (zero blocks), NaN (quiet, and a negative one with a
    payload), +-Inf, 1e30, -3e37: encoded chunks with outliers."""
    rng = np.random.default_rng(201)
    t = np.linspace(0.0, 15.0, 1500)
    x = (10.0 * np.sin(t) + 1e-4 * rng.standard_normal(1500)).astype(np.float32)
    x[600:700] = np.float32(1.25)  # whole blocks of code delta 0 inside chunk 1
    u = x.view(np.uint32)
    u[7] = 0x7FC00000  # quiet NaN
    u[900] = 0xFFC12345  # negative NaN with a payload
    x[100], x[101], x[1499] = np.inf, -np.inf, np.inf
    x[1100], x[1300] = np.float32(1e30), np.float32(-3e37)
    return x, "f32", None, 1e-3, 512, "none"


def _f64_2d():
    """A 2-D float64 random walk (shape 24 x 30) at a tight bound (long codes), chunk 256;
    NaN, -Inf and 1e300 as outliers."""
    rng = np.random.default_rng(202)
    x = np.cumsum(0.01 * rng.standard_normal(24 * 30)).astype(np.float64)
    x[0], x[300], x[719] = np.nan, -np.inf, 1e300
    return x, "f64", (24, 30), 1e-6, 256, "none"


def _f16_mixed():
    """float16, chunk 128, eb 1e-2: smooth | random 16-bit patterns (raw) | constant 1.5 twice
    (a constant chunk and a repeat) | zeros three times (a constant chunk, two repeats) | a
    partial chunk of 70 smooth values with NaN and +-Inf (outliers, a partial block)."""
    rng = np.random.default_rng(203)
    smooth = (np.sin(np.linspace(0.0, 6.0, 128)) * 3.0).astype(np.float16)
    bits = rng.integers(0, 2**16, size=128, dtype=np.uint32).astype(np.uint16).view(np.float16)
    const = np.full(256, 1.5, dtype=np.float16)
    zeros = np.zeros(384, dtype=np.float16)
    tail = (2.0 * np.cos(np.linspace(0.0, 3.0, 70))).astype(np.float16)
    tail[3], tail[40], tail[69] = np.nan, np.inf, -np.inf
    x = np.concatenate([smooth, bits, const, zeros, tail])
    return x, "f16", None, 1e-2, 128, "none"


def _bf16_mixed():
    """bfloat16 (as uint16 bit patterns), chunk 64, eb 1e-3: noise with NaN, -Inf and 1e30
    (outliers) | zeros twice (constant, repeat) | 4.0 with one NaN (an encoded chunk of zero
    blocks only) | a partial chunk of 40 smooth values."""
    rng = np.random.default_rng(204)
    noise = rng.standard_normal(64).astype(np.float32)
    noise[5], noise[17], noise[60] = np.nan, -np.inf, 1e30
    zeros = np.zeros(128, dtype=np.float32)
    fours = np.full(64, 4.0, dtype=np.float32)
    fours[9] = np.nan
    smooth = np.cos(np.linspace(0.0, 2.0, 40)).astype(np.float32)
    x = _bf16(np.concatenate([noise, zeros, fours, smooth]))
    return x, "bf16", None, 1e-3, 64, "none"


def _f32_runs():
    """float32, chunk 64, eb 1e-3: zeros x3 (constant, repeat, repeat) | -7.25 x2 (constant,
    repeat) | zeros (a constant again: not a repeat of -7.25) | 4.0 with a NaN (an encoded chunk
    of zero blocks only) | random bits (raw) | a ramp after 40 zeros (zero blocks), partial."""
    rng = np.random.default_rng(205)
    fours = np.full(64, 4.0, dtype=np.float32)
    fours[33] = np.nan
    bits = rng.integers(0, 2**32, size=64, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ramp = np.where(np.arange(100) < 40, 0.0, np.linspace(0.0, 3.0, 100)).astype(np.float32)
    parts = [np.zeros(192), np.full(128, -7.25), np.zeros(64), fours, bits, ramp]
    x = np.concatenate([np.asarray(p, dtype=np.float32) for p in parts])
    return x, "f32", None, 1e-3, 64, "none"


def _f64_zstd():
    """float64 at eb 0 with the lossless codec 1 (byte-shuffle + zstd), chunk 128: a smooth
    ramp of multiples of 1/4 (a lossless chunk) | random bit patterns (raw: zstd does not
    shrink them) | zeros twice (constant, repeat) | a partial chunk of 100 small integers with
    NaN payloads, -0.0, a denormal and +-Inf (lossless)."""
    rng = np.random.default_rng(206)
    ramp = np.arange(128, dtype=np.float64) * 0.25
    bits = rng.integers(0, 2**64 - 1, size=128, dtype=np.uint64, endpoint=True).view(np.float64)
    zeros = np.zeros(256)
    ints = rng.integers(-8, 8, size=100).astype(np.float64)
    u = ints.view(np.uint64)
    u[0:4] = [0x7FF8000000000001, 0xFFF0000000000ABC, 0x8000000000000000, 0x0000000000000001]
    u[4:6] = [0x7FF0000000000000, 0xFFF0000000000000]
    x = np.concatenate([ramp, bits, zeros, ints])
    return x, "f64", None, 0.0, 128, "zstd"


def _f16_zstd():
    """float16 at eb 0 with codec 1, chunk 64: values from a small set (lossless chunks), a NaN
    with a payload, -0.0 and a subnormal; 150 values (a partial last chunk)."""
    rng = np.random.default_rng(207)
    x = rng.choice(np.array([0.5, 1.0, -2.0, 3.25], dtype=np.float16), size=150)
    u = x.view(np.uint16)
    u[10], u[20], u[30] = 0x7E01, 0x8000, 0x0001
    return x, "f16", None, 0.0, 64, "zstd"


def _f32_lossless_raw():
    """float32 at eb 0 with codec 0 (version 2 without the codec): N(0,1) (raw chunks) | 2.0
    twice (constant, repeat); 100 values, chunk 32 (a partial last chunk)."""
    rng = np.random.default_rng(208)
    x = np.concatenate([rng.standard_normal(32), np.full(64, 2.0), rng.standard_normal(4)])
    return x.astype(np.float32), "f32", None, 0.0, 32, "none"


def _bf16_scalar():
    """A 0-d bfloat16 tensor (ndim 0, one chunk of one value)."""
    return _bf16(np.array([-2.718281828], dtype=np.float32)), "bf16", (), 1e-3, 5120, "none"


FIXTURES = {
    "f32_outliers": _f32_outliers,
    "f64_2d": _f64_2d,
    "f16_mixed": _f16_mixed,
    "bf16_mixed": _bf16_mixed,
    "f32_runs": _f32_runs,
    "f64_zstd": _f64_zstd,
    "f16_zstd": _f16_zstd,
    "f32_lossless_raw": _f32_lossless_raw,
    "bf16_scalar": _bf16_scalar,
}
DTYPE_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(tool: str) -> None:
    manifest = {"source": SOURCE_COMMIT, "fixtures": {}}
    for name, make in FIXTURES.items():
        x, dtype, shape, eb, chunk, codec = make()
        inp = HERE / f"{name}.input.bin"
        stream = HERE / f"{name}.v2.zcfz"
        dec = HERE / f"{name}.v2dec.bin"
        inp.write_bytes(np.ascontiguousarray(x).tobytes())
        cmd = [tool, str(inp), dtype, repr(eb), str(chunk), codec, str(stream), str(dec)]
        if shape is not None:
            cmd += [str(d) for d in shape]
            if not shape:
                cmd.append("--0d")
        subprocess.run(cmd, check=True)
        manifest["fixtures"][name] = {
            "doc": " ".join(make.__doc__.split()),
            "dtype": DTYPE_NAMES[dtype],
            "shape": list(shape) if shape is not None else [int(x.size)],
            "error_bound": eb,
            "chunk_size": chunk,
            "lossless_codec": codec,
            "sha256": {f.name: _sha(f) for f in (inp, stream, dec)},
        }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
