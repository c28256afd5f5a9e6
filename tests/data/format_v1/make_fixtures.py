"""Regenerates the version-1 stream fixtures of this directory (see README.txt).

    python3 tests/data/format_v1/make_fixtures.py /path/to/v1tool

``v1tool`` (v1tool.cpp here) is a small program linked against the version-1 encoder:
csrc/compress of commit SOURCE_COMMIT, the last with format version 1; README.txt says how to
build it. For every fixture this script

* generates the input values with numpy (fixed seeds, below) and writes them to NAME.input.bin,
* runs ``v1tool NAME.input.bin DTYPE EB CHUNK NAME.v1.zcfz NAME.v1dec.bin [shape...]``, which
  writes the version-1 stream and the version-1 decoder's output,
* records everything in manifest.json (with SHA-256 digests, so a stale file is noticed).

All files are raw little-endian arrays; nothing here needs torch.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE_COMMIT = "ca0506a7f2c16558f1db68570dec3b972efa41ef"


def _f32_outliers():
    """Smooth float32, 3 chunks (the last with a partial block), NaN (two payloads), +-Inf and
    values too large to quantise: encoded chunks with outliers."""
    rng = np.random.default_rng(101)
    t = np.linspace(0.0, 30.0, 3000)
    x = (10.0 * np.sin(t) + 1e-4 * rng.standard_normal(3000)).astype(np.float32)
    u = x.view(np.uint32)
    u[7] = 0x7FC00000  # quiet NaN
    u[1500] = 0xFFC12345  # negative NaN with a payload
    x[100], x[101], x[2999] = np.inf, -np.inf, np.inf
    x[2048], x[2500] = np.float32(1e30), np.float32(-3e37)
    return x, None, 1e-3, 1024


def _f64_2d():
    """A 2-D float64 random walk (shape 40 x 37) at a tight bound: long codes, outliers."""
    rng = np.random.default_rng(102)
    x = np.cumsum(0.01 * rng.standard_normal(40 * 37)).astype(np.float64)
    x[0], x[700], x[1479] = np.nan, -np.inf, 1e300
    return x, (40, 37), 1e-6, 512


def _f32_mixed():
    """float32, chunk 256: smooth | random bits (raw) | constant 2.5 and zeros (every block of
    code length 0) | a partial chunk of steps."""
    rng = np.random.default_rng(103)
    smooth = (np.sin(np.linspace(0.0, 6.0, 256)) * 3.0).astype(np.float32)
    bits = rng.integers(0, 2**32, size=256, dtype=np.uint64).astype(np.uint32).view(np.float32)
    const = np.full(256, 2.5, dtype=np.float32)
    zeros = np.zeros(256, dtype=np.float32)
    steps = np.repeat(rng.standard_normal(4) * 100.0, 25).astype(np.float32)  # 100 values
    x = np.concatenate([smooth, bits, const, zeros, steps]).astype(np.float32)
    return x, None, 1e-2, 256


def _f64_mixed():
    """float64, chunk 128: smooth | 1e30-scale values (all outliers: raw fallback) | zeros |
    smooth with zero runs | partial noise chunk."""
    rng = np.random.default_rng(104)
    smooth = np.cos(np.linspace(0.0, 4.0, 128)) * 50.0
    huge = 1e30 * rng.standard_normal(128)
    zeros = np.zeros(128)
    runs = np.where(np.arange(128) < 64, 0.0, np.linspace(0.0, 1.0, 128))
    noise = rng.standard_normal(88)
    x = np.concatenate([smooth, huge, zeros, runs, noise]).astype(np.float64)
    return x, None, 1e-4, 128


def _f64_lossless():
    """float64 at eb = 0 (raw chunks in version 1): random bit patterns, NaN payloads, -0.0,
    denormals, +-Inf, float64 max."""
    rng = np.random.default_rng(105)
    u = rng.integers(0, 2**64 - 1, size=300, dtype=np.uint64, endpoint=True)
    u[0:4] = [0x7FF8000000000001, 0xFFF0000000000ABC, 0x8000000000000000, 0x0000000000000001]
    u[4:8] = [0x000FFFFFFFFFFFFF, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FEFFFFFFFFFFFFF]
    return u.view(np.float64), None, 0.0, 128


def _f32_below_min_eb():
    """float32 at eb = 1e-40 (below the smallest normal float32): stored exactly, bin 0."""
    rng = np.random.default_rng(106)
    return rng.standard_normal(70).astype(np.float32), None, 1e-40, 32


def _f32_scalar():
    """A 0-d float32 tensor (ndim 0, one chunk of one value)."""
    return np.array([-2.718281828], dtype=np.float32), (), 1e-3, 5120


FIXTURES = {
    "f32_outliers": _f32_outliers,
    "f64_2d": _f64_2d,
    "f32_mixed": _f32_mixed,
    "f64_mixed": _f64_mixed,
    "f64_lossless": _f64_lossless,
    "f32_below_min_eb": _f32_below_min_eb,
    "f32_scalar": _f32_scalar,
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(tool: str) -> None:
    manifest = {"source": SOURCE_COMMIT, "fixtures": {}}
    for name, make in FIXTURES.items():
        x, shape, eb, chunk = make()
        dtype = "f32" if x.dtype == np.float32 else "f64"
        inp = HERE / f"{name}.input.bin"
        stream = HERE / f"{name}.v1.zcfz"
        dec = HERE / f"{name}.v1dec.bin"
        inp.write_bytes(np.ascontiguousarray(x).tobytes())
        cmd = [tool, str(inp), dtype, repr(eb), str(chunk), str(stream), str(dec)]
        if shape is not None:
            cmd += [str(d) for d in shape]
            if not shape:
                cmd.append("--0d")
        subprocess.run(cmd, check=True)
        manifest["fixtures"][name] = {
            "doc": " ".join(make.__doc__.split()),
            "dtype": {"f32": "float32", "f64": "float64"}[dtype],
            "shape": list(shape) if shape is not None else [int(x.size)],
            "error_bound": eb,
            "chunk_size": chunk,
            "sha256": {f.name: _sha(f) for f in (inp, stream, dec)},
        }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
