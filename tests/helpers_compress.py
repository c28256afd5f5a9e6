"""Shared helpers for the compressor tests: data generators, strategies and the bound assertion.

The error bound is the product's promise, so :func:`assert_within_bound` checks it with the real
float64 arithmetic and no tolerance: ``abs(x.double() - x'.double()) <= eb`` for every finite ``x``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import settings
from hypothesis import strategies as st

DTYPES = (torch.float32, torch.float64)
BLOCK = 32
DEFAULT_CHUNK = 5120
CHUNK_SIZES = (32, 64, 5120, 65536)

_NP_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}
_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64}

# Sizes around the block (32) and default chunk (5120) edges, plus primes.
SPECIAL_SIZES = (
    0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 97, 127, 1021,
    5119, 5120, 5121, 7919, 10007, 10240, 10241,
)

DATA_KINDS = (
    "sin",          # smooth
    "cumsum",       # smooth random walk
    "noise",        # white noise
    "uniform",      # wide uniform
    "constant",
    "zeros",
    "alternating",  # +a, -a, +a, ...
    "steps",        # piecewise constant with large jumps
    "denormal",     # subnormals of the dtype (and zeros, -0.0)
    "huge",         # 1e30 scale
    "mixed",        # huge / tiny / denormal / zero / extreme values interleaved
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
    """
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
                [1e30, -1e30, 3e-30, -7e-31, 0.0, -0.0, 1.0, -2.5, float(fi.max), -float(fi.max),
                 float(fi.tiny), 1e20, -1e-20],
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
        self.desc = (f"make_data({kind!r}, {n}, {dtype}, seed={seed}, scale={scale!r}, "
                     f"nonfinite={nonfinite!r})")

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
    a = x.detach().reshape(-1).numpy()
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
        raise AssertionError(f"{what}: finite value at {i} decoded as non-finite: "
                             f"{o[i].item()!r} -> {r[i].item()!r}")
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


def check_stream_size(stream: torch.Tensor, dtype: torch.dtype, numel: int, chunk_size: int,
                      ndim: int, what: str = "") -> None:
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
