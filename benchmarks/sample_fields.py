"""Synthetic and bundled scientific fields for the benchmarks and examples (not the library).

Everything here is generated locally and deterministically from a seed (no downloads), except
:func:`real_fields`, which reads the sample data that matplotlib installs with itself.

The acoustic helpers (:func:`ricker`, :func:`layered_velocity`, :func:`stable_dt`,
:func:`point_source`, :func:`propagate`) form a small constant-density finite-difference modelling
kit: second order in time, fourth order in space, with a Cerjan damping sponge at every face. They
are public so that examples (e.g. reverse-time-migration style image stacking) can reuse them.
Scripts in benchmarks/ import it as ``sample_fields``; examples put benchmarks/ on ``sys.path``
first. It needs only torch and numpy (and matplotlib's sample data for :func:`real_fields`).
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "acoustic_wavefield_3d",
    "laplace_noise",
    "layered_velocity",
    "point_source",
    "propagate",
    "real_fields",
    "ricker",
    "smooth_random_field",
    "stable_dt",
]

#: Injects sources into the pressure field at a time step: ``inject(step, field)`` (in place).
Injector = Callable[[int, torch.Tensor], None]

# Fourth-order central second derivative: (-1/12, 4/3, -5/2, 4/3, -1/12) / dx^2.
_STENCIL_CENTER = -5.0 / 2.0
_STENCIL_SIDES = ((1, 4.0 / 3.0), (2, -1.0 / 12.0))
_HALO = 2
# Largest |symbol| of the 1-D stencil above (at the Nyquist wavenumber), times dx^2.
_STENCIL_MAX_SYMBOL = 16.0 / 3.0

Box = tuple[slice, ...]


# --------------------------------------------------------------------------------------------
# Acoustic modelling kit
# --------------------------------------------------------------------------------------------


def ricker(
    f0: float, dt: float, nt: int, *, delay: float | None = None, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Ricker (Mexican-hat) wavelet of peak frequency ``f0`` Hz sampled at ``nt`` steps of ``dt`` s.

    ``delay`` (default ``1.5 / f0``) shifts the peak so that the wavelet starts from ~0 at t=0.
    """
    if f0 <= 0 or dt <= 0 or nt < 0:
        raise ValueError(f"need f0 > 0, dt > 0, nt >= 0; got f0={f0}, dt={dt}, nt={nt}")
    delay = 1.5 / f0 if delay is None else delay
    t = torch.arange(nt, dtype=torch.float64) * dt - delay
    arg = (math.pi * f0 * t) ** 2
    return ((1.0 - 2.0 * arg) * torch.exp(-arg)).to(dtype)


def layered_velocity(
    shape: Sequence[int],
    *,
    velocities: Sequence[float] = (1500.0, 2000.0, 2600.0, 3200.0, 3800.0),
    undulation: float = 0.04,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Layered velocity model in m/s; axis 0 is depth, the other axes are lateral.

    The ``len(velocities) - 1`` interfaces sit at roughly even depths (jittered by ``seed``) and
    undulate laterally with amplitude ``undulation`` times the depth extent, so reflections are
    not all flat.
    """
    shape = _check_shape(shape, min_ndim=1)
    if len(velocities) < 1 or min(velocities) <= 0:
        raise ValueError("velocities must be a non-empty sequence of positive speeds")
    gen = torch.Generator().manual_seed(seed)
    nz = shape[0]
    depth = torch.arange(nz, dtype=torch.float64).reshape((nz,) + (1,) * (len(shape) - 1))
    layer = torch.zeros(shape, dtype=torch.long)
    n_interfaces = len(velocities) - 1
    for i in range(n_interfaces):
        base = (i + 1) / (n_interfaces + 1) + 0.05 * (2 * torch.rand((), generator=gen).item() - 1)
        surface = base * nz + undulation * nz * _lateral_wave(shape[1:], gen)
        layer += (depth >= surface).long()
    table = torch.tensor(list(velocities), dtype=torch.float64)
    return table[layer].to(dtype)


def _lateral_wave(lateral: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    """A smooth unit-amplitude random undulation over the lateral axes (scalar if none)."""
    wave = torch.zeros((), dtype=torch.float64)
    for axis, n in enumerate(lateral):
        cycles = 0.5 + 1.5 * torch.rand((), generator=gen).item()
        phase = 2 * math.pi * torch.rand((), generator=gen).item()
        coord = torch.arange(n, dtype=torch.float64) / max(n, 1)
        view = [1] * len(lateral)
        view[axis] = n
        wave = wave + torch.sin(2 * math.pi * cycles * coord + phase).reshape(view)
    return wave / max(len(lateral), 1)


def stable_dt(dx: float, vmax: float, ndim: int, courant: float = 0.8) -> float:
    """Time step for :func:`propagate`: ``courant`` times the CFL limit of its stencil."""
    if not 0 < courant <= 1:
        raise ValueError(f"courant must be in (0, 1], got {courant}")
    return courant * 2.0 * dx / (vmax * math.sqrt(ndim * _STENCIL_MAX_SYMBOL))


def point_source(position: Sequence[int], wavelet: torch.Tensor, *, sigma: float = 1.0) -> Injector:
    """Injector adding ``wavelet[step]`` times a small Gaussian blob centred at ``position``.

    The blob (width ``sigma`` cells) rather than a single grid point keeps the source free of
    grid-scale (checkerboard) energy that a 4th-order stencil cannot propagate accurately.
    """
    radius = max(1, math.ceil(3 * sigma))
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    bump = torch.exp(-0.5 * (offsets / sigma) ** 2)
    blob = torch.ones((), dtype=torch.float64)
    for _ in position:
        blob = blob.unsqueeze(-1) * bump
    box = tuple(slice(p - radius, p + radius + 1) for p in position)
    amplitudes = wavelet.double().tolist()
    cache: dict[torch.dtype, torch.Tensor] = {}

    def inject(step: int, field: torch.Tensor) -> None:
        if step < len(amplitudes):
            patch = cache.get(field.dtype)
            if patch is None:
                patch = cache[field.dtype] = blob.to(field.dtype)
            field[box].add_(patch, alpha=amplitudes[step])

    return inject


def _sponge(shape: Sequence[int], width: int, dtype: torch.dtype) -> torch.Tensor:
    """Cerjan damping factors: 1 inside, decaying as exp(-(a*d)^2) across ``width`` border cells."""
    strength = 0.015 * 20  # Cerjan et al.'s 0.015 per cell over a 20-cell sponge, rescaled.
    damp = torch.ones((), dtype=torch.float64)
    for n in shape:
        cells = torch.arange(n, dtype=torch.float64)
        depth_in = torch.clamp(width - torch.minimum(cells, n - 1 - cells), min=0) / max(width, 1)
        damp = damp.unsqueeze(-1) * torch.exp(-((strength * depth_in) ** 2))
    return damp.to(dtype)


def _shift(box: Box, axis: int, offset: int) -> Box:
    moved = box[axis]
    return (*box[:axis], slice(moved.start + offset, moved.stop + offset), *box[axis + 1 :])


def _laplacian(field: torch.Tensor, out: torch.Tensor, box: Box) -> None:
    """Writes dx^2 times the 4th-order Laplacian of ``field`` into ``out[box]``.

    ``box`` must keep a 2-cell halo from every face. Vectorised by slicing: one pass per
    stencil arm, no loops over grid points.
    """
    target = out[box]
    torch.mul(field[box], _STENCIL_CENTER * field.dim(), out=target)
    for axis in range(field.dim()):
        for offset, weight in _STENCIL_SIDES:
            target.add_(field[_shift(box, axis, offset)], alpha=weight)
            target.add_(field[_shift(box, axis, -offset)], alpha=weight)


def _active_box(shape: Sequence[int], origin: Sequence[int] | None, radius: int) -> Box:
    """Cells the wave can have reached (within the halo); the full interior without an origin."""
    if origin is None:
        return tuple(slice(_HALO, n - _HALO) for n in shape)
    return tuple(
        slice(max(_HALO, o - radius), min(n - _HALO, o + radius + 1))
        for o, n in zip(origin, shape, strict=True)
    )


def propagate(
    velocity: torch.Tensor,
    dx: float,
    dt: float,
    nt: int,
    inject: Injector,
    *,
    sponge_width: int = 16,
    causal_origin: Sequence[int] | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Steps the constant-density acoustic wave equation ``p_tt = v^2 lap(p)``; yields each step.

    Yields ``(step, pressure)`` after each of the ``nt`` steps; ``pressure`` is the live buffer
    (copy it to keep it). ``inject(step, pressure)`` adds the sources after each update. The
    field's dtype is ``velocity.dtype``. Use ``dt <= stable_dt(dx, vmax, ndim)``.

    ``causal_origin``: where all sources sit, if they do. Only the cells the wave can have reached
    from there (``vmax * t`` plus a margin) are updated, so the region ahead of the front stays
    exactly zero (instead of filling with denormal numerical precursors) and early steps are
    cheap. Leave it ``None`` for distributed sources such as receiver back-propagation.
    """
    if velocity.dim() < 1 or min(velocity.shape) <= 2 * _HALO:
        raise ValueError(f"velocity grid {tuple(velocity.shape)} is too small for the stencil")
    shape = tuple(velocity.shape)
    coef = (velocity * (dt / dx)) ** 2
    damp = _sponge(shape, sponge_width, velocity.dtype)
    prev, cur, lap = (torch.zeros_like(velocity) for _ in range(3))
    cells_per_step = float(velocity.max()) * dt / dx
    margin = 12  # covers the source blob and the wavelet's onset ahead of the nominal front
    for step in range(nt):
        box = _active_box(shape, causal_origin, math.ceil(cells_per_step * (step + 1)) + margin)
        _laplacian(cur, lap, box)
        # Leapfrog update written into prev's storage, which becomes the new field.
        new = prev[box]
        new.mul_(-1.0).add_(cur[box], alpha=2.0).addcmul_(coef[box], lap[box])
        new.mul_(damp[box])
        cur[box].mul_(damp[box])
        prev, cur = cur, prev
        inject(step, cur)
        yield step, cur


# --------------------------------------------------------------------------------------------
# Wavefield snapshots
# --------------------------------------------------------------------------------------------


def _default_steps(velocity: torch.Tensor, dx: float, dt: float, f0: float, reach: float) -> int:
    """Steps until the front, at the mean speed, has crossed ``reach`` of the depth axis."""
    travel = reach * velocity.shape[0] * dx / float(velocity.double().mean())
    return math.ceil((1.5 / f0 + travel) / dt)


def _wavefield(
    shape: Sequence[int],
    steps: int | None,
    seed: int,
    dtype: torch.dtype,
    f0: float,
    dx: float,
    sponge_width: int,
    reach: float = 0.55,
) -> torch.Tensor:
    shape = _check_shape(shape, min_ndim=2)
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    velocity = layered_velocity(shape, seed=seed, dtype=dtype)
    dt = stable_dt(dx, float(velocity.max()), len(shape))
    nt = _default_steps(velocity, dx, dt, f0, reach) if steps is None else steps
    if nt < 0:
        raise ValueError(f"steps must be >= 0, got {nt}")
    gen = torch.Generator().manual_seed(seed + 1)
    depth = min(sponge_width + 4, shape[0] // 4)
    lateral = [
        n // 2 + int((torch.rand((), generator=gen).item() - 0.5) * 0.2 * n) for n in shape[1:]
    ]
    source = (depth, *lateral)
    inject = point_source(source, ricker(f0, dt, nt))
    field = torch.zeros(shape, dtype=dtype)
    for _, live in propagate(
        velocity, dx, dt, nt, inject, sponge_width=sponge_width, causal_origin=source
    ):
        field = live
    peak = float(field.abs().max()) if field.numel() else 0.0
    snapshot = field / peak if peak > 0 else field.clone()
    # The stencil's super-exponentially small precursors just inside the active box would be
    # denormals: physically zero, and slow paths for any arithmetic that touches them.
    return snapshot.masked_fill_(snapshot.abs() < torch.finfo(dtype).tiny, 0.0)


def acoustic_wavefield_3d(
    shape: Sequence[int] = (128, 128, 128),
    steps: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    *,
    f0: float = 15.0,
    dx: float = 10.0,
    sponge_width: int = 16,
    reach: float = 0.55,
) -> torch.Tensor:
    """Pressure snapshot of a 3-D acoustic simulation, like a seismic RTM wavefield.

    A Ricker point source (peak ``f0`` Hz) near the top fires into a layered velocity model
    (1500-3800 m/s, ``dx`` m cells); the snapshot is taken after ``steps`` steps (default: when
    the front has crossed ``reach`` of the depth, 0.55 by default), so it holds smooth
    wavefronts, reflections and exactly-zero quiet regions the front has not reached.
    Early snapshots (small ``reach``) are mostly quiet and compress far better.
    Axis 0 is depth. The simulation runs
    in ``dtype`` and the result is scaled to a peak magnitude of 1. 128^3 with the default steps
    takes a few seconds on two cores.
    """
    if len(shape) != 3:
        raise ValueError(f"shape must have 3 dimensions, got {tuple(shape)}")
    return _wavefield(shape, steps, seed, dtype, f0, dx, sponge_width, reach)


# --------------------------------------------------------------------------------------------
# Statistical fields
# --------------------------------------------------------------------------------------------


def smooth_random_field(
    shape: Sequence[int] = (128, 128, 128),
    correlation_length: float = 8.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Gaussian random field: white noise smoothed by a Gaussian filter, zero mean, unit std.

    ``correlation_length`` is the filter's standard deviation in grid cells. The filter is applied
    in Fourier space, so the field is periodic.
    """
    shape = _check_shape(shape, min_ndim=1)
    if correlation_length < 0:
        raise ValueError(f"correlation_length must be >= 0, got {correlation_length}")
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(shape, generator=gen, dtype=torch.float64)
    freq2 = torch.zeros((), dtype=torch.float64)
    for axis, n in enumerate(shape):
        last = axis == len(shape) - 1
        freq = (
            torch.fft.rfftfreq(n, dtype=torch.float64)
            if last
            else torch.fft.fftfreq(n, dtype=torch.float64)
        )
        freq2 = freq2.unsqueeze(-1) + freq**2
    # Fourier transform of exp(-x^2 / (2 s^2)) is proportional to exp(-2 pi^2 s^2 f^2).
    kernel = torch.exp(-2.0 * math.pi**2 * correlation_length**2 * freq2)
    field: torch.Tensor = torch.fft.irfftn(torch.fft.rfftn(noise) * kernel, s=shape)
    field -= field.mean()
    std = float(field.std()) if field.numel() > 1 else 0.0
    return (field / std if std > 0 else field).to(dtype)


def laplace_noise(
    numel: int = 1 << 22,
    scale: float = 1e-3,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """1-D Laplace(0, ``scale``) samples, the heavy-tailed shape of neural-network gradients."""
    if numel < 0 or scale < 0:
        raise ValueError(f"need numel >= 0 and scale >= 0, got numel={numel}, scale={scale}")
    gen = torch.Generator().manual_seed(seed)
    # Exponential magnitude by inversion; 1 - U lies in (0, 1], so the log stays finite.
    magnitude = -torch.log1p(-torch.rand(numel, generator=gen, dtype=torch.float64))
    sign = torch.randint(0, 2, (numel,), generator=gen, dtype=torch.int8).double() * 2 - 1
    return (scale * sign * magnitude).to(dtype)


# --------------------------------------------------------------------------------------------
# Real data shipped with matplotlib
# --------------------------------------------------------------------------------------------


def _sample_dir() -> Path:
    import matplotlib

    return Path(matplotlib.get_data_path()) / "sample_data"


def _load_dem(path: Path) -> np.ndarray:
    with np.load(path) as data:
        elevation: np.ndarray = data["elevation"]
        return elevation


def _load_topobathy(path: Path) -> np.ndarray:
    with np.load(path) as data:
        topo: np.ndarray = data["topo"]
        return topo


def _load_mri(path: Path) -> np.ndarray:
    # Raw 256x256 big-endian uint16 (read little-endian, every low byte would be zero).
    with gzip.open(path, "rb") as stream:
        return np.frombuffer(stream.read(), dtype=">u2").reshape(256, 256)


def _load_photo(path: Path) -> np.ndarray:
    import matplotlib.image

    gray: np.ndarray = matplotlib.image.imread(path).astype(np.float32).mean(axis=-1)
    return gray


def _load_membrane(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype="<f4")


def _load_eeg(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype="<f8").reshape(800, 4)


_REAL_FIELDS: dict[str, tuple[str, Callable[[Path], np.ndarray]]] = {
    "dem_jacksboro": ("jacksboro_fault_dem.npz", _load_dem),
    "topobathy": ("topobathy.npz", _load_topobathy),
    "mri_s1045": ("s1045.ima.gz", _load_mri),
    "photo_grace_hopper": ("grace_hopper.jpg", _load_photo),
    "membrane": ("membrane.dat", _load_membrane),
    "eeg": ("eeg.dat", _load_eeg),
}


def real_fields() -> dict[str, torch.Tensor]:
    """Real measured fields from matplotlib's bundled sample data, as float32 tensors.

    Keys: ``dem_jacksboro`` (344x403 elevation grid, m), ``topobathy`` (91x120 topography and
    bathymetry, m), ``mri_s1045`` (256x256 MRI slice), ``photo_grace_hopper`` (600x512 grey
    photograph), ``membrane`` (12000-sample signal), ``eeg`` (800x4 EEG traces). Entries whose
    file is missing or unreadable in this installation are left out; no network is used.
    """
    try:
        folder = _sample_dir()
    except ImportError:
        return {}
    fields: dict[str, torch.Tensor] = {}
    for name, (filename, load) in _REAL_FIELDS.items():
        path = folder / filename
        if not path.is_file():
            continue
        try:
            array = load(path)
        except (OSError, ValueError, KeyError):
            continue
        fields[name] = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    return fields


def _check_shape(shape: Sequence[int], min_ndim: int) -> tuple[int, ...]:
    dims = tuple(int(n) for n in shape)
    if len(dims) < min_ndim or any(n < 1 for n in dims):
        raise ValueError(f"shape must have >= {min_ndim} positive dimensions, got {tuple(shape)}")
    return dims
