"""Seismic image stacking (RTM-style) with an error-bounded compressed all_reduce.

Run: ``mpirun --oversubscribe -np 4 python examples/image_stacking.py [--rel 1e-4] [--quick]``
(as root also ``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``; or just run
``scripts/demo_image_stacking.sh``).

Each rank migrates its own shots with a 2-D reverse-time-migration recipe built on
``benchmarks/sample_fields.py`` (finite differences, Ricker wavelet, layered model):

1. observed data: model the shot in the true (layered, sharp-interface) velocity and record
   every surface receiver;
2. source wavefield: model the same shot in the migration velocity (the true model smoothed, so
   it reflects almost nothing), keep a snapshot every few steps and record it too: subtracting
   these records from the observed ones removes the direct arrival, leaving the reflections;
3. receiver wavefield: inject the reflection records, time-reversed, at the receivers and
   propagate in the migration velocity; the cross-correlation imaging condition
   ``image += source(t) * receiver(t)`` (summed over the kept snapshots) builds the shot image.

The partial image of a rank is the sum of its shot images (Laplacian-filtered, top muted); the
final image is the all_reduce SUM over ranks. It is computed with the backend's exact
all_reduce (``zccl_torch.config(algorithm="mpi")``) and with the compressed zccl all_reduce
at ``--rel`` (``--mode``), and under mpirun timed once more as Open MPI's own blocking
``MPI_Allreduce`` (mpi4py), the baseline of the speed-up; rank 0 prints timings, wire bytes
and quality figures, checks the documented error bound on every pixel and writes a PNG of the
exact image, the zccl image and their difference to ``--out`` (exit status 1 if the bound is
violated).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 (the conventional alias)
from tqdm import tqdm

import zccl_torch
from zccl_torch import metrics

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import sample_fields  # the modelling kit lives with the benchmarks

DX = 10.0  # grid spacing, m
F0 = 15.0  # Ricker peak frequency, Hz
SPONGE = 16  # absorbing border width, cells
SNAPSHOT_EVERY = 4  # imaging-condition time decimation (well under the wavelet's Nyquist step)
SMOOTHING = 6.0  # migration velocity: true model smoothed by a Gaussian of this std, cells
ILLUMINATION_FLOOR = 1e-3  # of the peak source illumination
# --quick forces a compressed algorithm: "auto" sends so small an image through plain MPI.
QUICK = {"nz": 96, "nx": 128, "shots_per_rank": 1, "reps": 2, "algorithm": "ring"}
DEFAULTS = {"nz": 240, "nx": 400, "shots_per_rank": 2, "reps": 5, "algorithm": "auto"}
COMPRESSED = ("ring", "recursive_doubling", "cprp2p")


# --------------------------------------------------------------------------------------------
# Migration
# --------------------------------------------------------------------------------------------


def gaussian_smooth(field: torch.Tensor, sigma: float) -> torch.Tensor:
    """2-D Gaussian smoothing (std ``sigma`` cells) with edge replication; same shape and dtype."""
    radius = max(1, math.ceil(3 * sigma))
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    kernel = (kernel / kernel.sum()).to(field.dtype)
    x = F.pad(field[None, None], (radius, radius, radius, radius), mode="replicate")
    x = F.conv2d(x, kernel.reshape(1, 1, -1, 1))
    x = F.conv2d(x, kernel.reshape(1, 1, 1, -1))
    return x[0, 0].contiguous()


def laplacian_filter(image: torch.Tensor) -> torch.Tensor:
    """``-lap(image)`` (5-point, zero outside): the usual RTM filter against low-wavenumber
    backscatter; it also turns the cross-correlation's wavelet-squared into a zero-phase pulse."""
    out = 4.0 * image
    out[1:] -= image[:-1]
    out[:-1] -= image[1:]
    out[:, 1:] -= image[:, :-1]
    out[:, :-1] -= image[:, 1:]
    return out


def default_steps(migration: torch.Tensor, dt: float, depth_index: int) -> int:
    """Steps for the vertical two-way time down to the image's deepest row, plus the wavelet."""
    slowness = 1.0 / migration.double().mean(dim=1)
    two_way = 2.0 * float(slowness[depth_index:].sum()) * DX
    return math.ceil((two_way + 2.0 / F0) / dt)


class Survey:
    """Models and migrates shots: fixed spread of surface receivers, sources along the surface."""

    def __init__(self, nz: int, nx: int, nt: int | None) -> None:
        self.true_velocity = sample_fields.layered_velocity((nz, nx), seed=0)
        self.migration_velocity = gaussian_smooth(self.true_velocity, SMOOTHING)
        self.dt = sample_fields.stable_dt(DX, float(self.true_velocity.max()), 2)
        self.depth = SPONGE + 2  # sources and receivers, just inside the top sponge
        self.receivers = torch.arange(SPONGE, nx - SPONGE)
        self.nt = default_steps(self.migration_velocity, self.dt, self.depth) if nt is None else nt
        self.wavelet = sample_fields.ricker(F0, self.dt, self.nt)
        # Mute above the acquisition surface plus a wavelength (cosine ramp over 8 cells below),
        # and the side and bottom sponges.
        top = self.depth + 12
        self.mask = torch.zeros(nz, nx)
        self.mask[top : nz - SPONGE, SPONGE : nx - SPONGE] = 1.0
        ramp = 0.5 - 0.5 * torch.cos(torch.arange(1, 9, dtype=torch.float64) * math.pi / 9)
        self.mask[top : top + 8] *= ramp.float()[:, None]

    def source_x(self, shot: int, total: int) -> int:
        """Lateral position of shot ``shot`` of ``total``, evenly over the receiver spread."""
        first, last = int(self.receivers[0]) + 4, int(self.receivers[-1]) - 4
        return round(first + (last - first) * (shot + 0.5) / total)

    def _record(
        self, velocity: torch.Tensor, sx: int, keep: Callable[[int, torch.Tensor], None] | None
    ) -> torch.Tensor:
        """Shot record (nt x receivers) of a source at ``(depth, sx)``; ``keep`` sees each step."""
        origin = (self.depth, sx)
        inject = sample_fields.point_source(origin, self.wavelet)
        record = torch.empty(self.nt, len(self.receivers), dtype=velocity.dtype)
        steps = sample_fields.propagate(
            velocity, DX, self.dt, self.nt, inject, sponge_width=SPONGE, causal_origin=origin
        )
        for step, field in steps:
            record[step] = field[self.depth, self.receivers]
            if keep is not None:
                keep(step, field)
        return record

    def migrate(self, sx: int) -> torch.Tensor:
        """Image of one shot: cross-correlation of source and back-propagated receiver fields."""
        observed = self._record(self.true_velocity, sx, None)
        snapshots: list[torch.Tensor] = []

        def keep(step: int, field: torch.Tensor) -> None:
            if step % SNAPSHOT_EVERY == 0:
                snapshots.append(field.clone())

        direct = self._record(self.migration_velocity, sx, keep)
        reflections = (observed - direct).flip(0)  # time-reversed for back-propagation
        row, cols = self.depth, self.receivers

        def inject(step: int, field: torch.Tensor) -> None:
            field[row, cols] += reflections[step]

        image = torch.zeros_like(self.migration_velocity)
        illumination = torch.zeros_like(self.migration_velocity)
        for snapshot in snapshots:
            illumination.addcmul_(snapshot, snapshot)
        steps = sample_fields.propagate(
            self.migration_velocity, DX, self.dt, self.nt, inject, sponge_width=SPONGE
        )
        for step, receiver_field in steps:
            t = self.nt - 1 - step  # the time the back-propagated field stands for
            if t % SNAPSHOT_EVERY == 0:
                image.addcmul_(snapshots[t // SNAPSHOT_EVERY], receiver_field)
        # Source-normalised imaging condition: balances the strong shallow illumination against
        # the deep one (the stabiliser keeps the barely lit corners from blowing up).
        image /= illumination + ILLUMINATION_FLOOR * float(illumination.max())
        return laplacian_filter(image) * self.mask


# --------------------------------------------------------------------------------------------
# Stacking
# --------------------------------------------------------------------------------------------


def timed_allreduce(
    partial: torch.Tensor, reps: int, options: zccl_torch.Options
) -> tuple[float, torch.Tensor, dict[str, Any]]:
    """Median over ``reps`` (after a warm-up) of the slowest rank's all_reduce SUM time, the
    result, and the backend's stats of the (last) timed all_reduce.

    ``options`` is the full configuration: a bare ``zccl_torch.config(algorithm=...)`` block
    would start from the ``ZCCL_*`` environment defaults, not from the group's ``pg_options``.
    """
    times = []
    out = partial
    for rep in range(reps + 1):
        out = partial.clone()
        dist.barrier()
        start = time.perf_counter()
        with zccl_torch.config(options):
            dist.all_reduce(out)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        stats = zccl_torch.last_stats()  # before the timing all_reduce below replaces them
        with zccl_torch.config(algorithm="mpi"):
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if rep:
            times.append(float(elapsed))
    return statistics.median(times), out, stats


def timed_mpi_allreduce(partial: torch.Tensor, reps: int) -> float | None:
    """Median over ``reps`` (after a warm-up) of the slowest rank's time for Open MPI's own
    blocking ``MPI_Allreduce`` SUM of the image (mpi4py, out of place): the uncompressed baseline,
    with the algorithm Open MPI picks or the one forced through ``OMPI_MCA_coll_tuned_*`` (the
    backend's exact path uses the non-blocking call, which those settings do not reach).

    None when the ranks were not started by mpirun (the Gloo transport) or mpi4py is missing.
    """
    if zccl_torch.backend.transport() != "mpi":
        return None
    try:
        from mpi4py import MPI  # zccl already initialised MPI; mpi4py reuses it
    except ImportError:
        return None
    comm = MPI.COMM_WORLD
    send = partial.contiguous().numpy()
    recv = torch.empty_like(partial).numpy()
    times = []
    for rep in range(reps + 1):
        comm.Barrier()
        start = time.perf_counter()
        comm.Allreduce(send, recv, op=MPI.SUM)
        elapsed: float = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        if rep:
            times.append(elapsed)
    return statistics.median(times)


def exact_sum(t: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> torch.Tensor:
    """Uncompressed all_reduce of a copy of ``t`` (MPI itself)."""
    out = t.clone()
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(out, op=op)
    return out


def gamma(k: int, dtype: torch.dtype) -> float:
    """Higham's gamma_k = k u / (1 - k u): worst relative rounding of k float operations."""
    unit = torch.finfo(dtype).eps / 2
    return k * unit / (1 - k * unit)


def save_figure(path: Path, exact: torch.Tensor, lossy: torch.Tensor, title: str) -> None:
    """Exact image, zccl image and their difference side by side (PNG, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nz, nx = exact.shape
    extent = (0.0, nx * DX / 1e3, nz * DX / 1e3, 0.0)
    clip = float(torch.quantile(exact.abs().flatten()[:: max(1, exact.numel() // 100_000)], 0.99))
    clip = clip if clip > 0 else 1.0
    diff = (lossy.double() - exact.double()).float()
    dclip = float(diff.abs().max()) or 1.0
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), constrained_layout=True)
    panels = (
        (exact, "exact (MPI all_reduce)", clip, "gray"),
        (lossy, "zccl all_reduce", clip, "gray"),
        (diff, f"zccl - exact (colour scale x{clip / dclip:.0f})", dclip, "seismic"),
    )
    for ax, (img, name, lim, cmap) in zip(axes, panels, strict=True):
        shown = ax.imshow(
            img.numpy(),
            cmap=cmap,
            vmin=-lim,
            vmax=lim,
            extent=extent,
            aspect="auto",
            interpolation="nearest",
        )
        ax.set_title(name)
        ax.set_xlabel("x (km)")
        fig.colorbar(shown, ax=ax, shrink=0.85)
    axes[0].set_ylabel("depth (km)")
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nz", type=int, help=f"depth cells (default {DEFAULTS['nz']})")
    parser.add_argument("--nx", type=int, help=f"lateral cells (default {DEFAULTS['nx']})")
    parser.add_argument(
        "--shots-per-rank",
        type=int,
        help=f"shots each rank migrates (default {DEFAULTS['shots_per_rank']})",
    )
    parser.add_argument("--nt", type=int, help="time steps (default: two-way time to the bottom)")
    parser.add_argument("--rel", type=float, default=1e-4, help="zccl error bound (default 1e-4)")
    parser.add_argument(
        "--mode",
        choices=("rel", "abs"),
        default="rel",
        help="'rel': bound x value range of the partial images; 'abs': absolute",
    )
    parser.add_argument(
        "--algorithm",
        choices=("auto", *COMPRESSED),
        help="zccl all_reduce algorithm (default auto; ring with --quick)",
    )
    parser.add_argument("--reps", type=int, help="timed all_reduce repetitions (default 5)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("examples/output"),
        help="folder for image_stacking.png (default examples/output)",
    )
    parser.add_argument(
        "--partials",
        type=Path,
        help="folder caching each rank's partial image: reused when present for the same survey "
        "(so runs that only change how the image is stacked skip the migration)",
    )
    parser.add_argument(
        "--summary", type=Path, help="rank 0 writes the timings and quality figures here (JSON)"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"tiny run for tests: {QUICK} unless given explicitly"
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.nz, args.nx) < 2 * SPONGE + 32:
        parser.error(f"--nz and --nx must be >= {2 * SPONGE + 32}")
    if args.shots_per_rank < 1 or args.reps < 1 or (args.nt is not None and args.nt < 1):
        parser.error("--shots-per-rank, --reps and --nt must be >= 1")
    if not (args.rel >= 0 and math.isfinite(args.rel)):
        parser.error("--rel must be finite and >= 0")
    return args


def threads_per_rank() -> int:
    """OMP_NUM_THREADS if set, else the cores shared evenly among this host's ranks."""
    if os.environ.get("OMP_NUM_THREADS"):
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", 1)))
    return max(1, (os.cpu_count() or 1) // max(local, 1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    threads = threads_per_rank()
    torch.set_num_threads(threads)
    survey = Survey(args.nz, args.nx, args.nt)
    image_bytes = args.nz * args.nx * 4
    options = zccl_torch.Options(
        error_bound=args.rel,
        mode=args.mode,
        threads=threads,
        # A small image must still go through the compressor, or there is nothing to show.
        min_compress_bytes=0 if image_bytes < 65536 else 65536,
    )
    dist.init_process_group("zccl", pg_options=options)
    rank, p = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    total_shots = p * args.shots_per_rank
    say(
        f"image stacking: {p} ranks x {args.shots_per_rank} shots, grid {args.nz} x {args.nx} "
        f"({DX:.0f} m cells, image {image_bytes / 1e6:.2f} MB float32), {survey.nt} steps of "
        f"{survey.dt * 1e3:.2f} ms, {threads} thread(s) per rank"
    )

    # ---- migration: this rank's shots ------------------------------------------------------
    cached = None
    if args.partials is not None:
        survey_id = f"{args.nz}x{args.nx}_nt{survey.nt}_s{args.shots_per_rank}_p{p}"
        cached = args.partials / f"partial_{survey_id}_rank{rank}.pt"
    if cached is not None and cached.exists():
        partial = torch.load(cached)
        say(f"partial images loaded from {args.partials} (migration skipped)")
    else:
        partial = torch.zeros(args.nz, args.nx)
        shots = range(rank * args.shots_per_rank, (rank + 1) * args.shots_per_rank)
        for shot in tqdm(
            shots,
            desc=f"migrating (rank 0 of {p})",
            unit="shot",
            disable=rank != 0,
            file=sys.stdout,
            mininterval=1.0,
        ):
            partial += survey.migrate(survey.source_x(shot, total_shots))
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            torch.save(partial, cached)
        dist.barrier()
        say(f"migration done in {time.perf_counter() - started:.1f} s")

    # ---- stacking: exact and compressed all_reduce -----------------------------------------
    t_exact_path, exact, _ = timed_allreduce(partial, args.reps, replace(options, algorithm="mpi"))
    t_direct = timed_mpi_allreduce(partial, args.reps)
    # The speed-up is taken against the faster of the two exact all_reduces.
    t_mpi = min(t_exact_path, t_direct) if t_direct is not None else t_exact_path
    t_zccl, lossy, stats = timed_allreduce(
        partial, args.reps, replace(options, algorithm=args.algorithm)
    )
    sent = exact_sum(torch.tensor([float(stats["bytes_sent"])], dtype=torch.float64))
    algorithm, eb = str(stats["algorithm"]), float(stats["error_bound"])
    if algorithm not in COMPRESSED or not stats["bytes_in"]:
        # "auto" sent the image through MPI unchanged: nothing was compressed, bound 0.
        say(
            f"note: zccl '{args.algorithm}' chose uncompressed MPI for this size "
            "(pass --algorithm ring to force compression)"
        )
        algorithm, eb, sent = "mpi", 0.0, torch.zeros(1, dtype=torch.float64)

    # ---- the documented bound, per pixel ---------------------------------------------------
    # |zccl - sum| <= B + gamma_p * (sum_i |x_i| + B): B from the contract, the rounding of at
    # most p-1 float32 additions of the decoded terms (each within its bound of the exact term);
    # |mpi - sum| <= gamma_{p-1} * sum_i |x_i|: MPI's own float32 summation, in any order.
    bound = zccl_torch._C.output_error_bound(algorithm, "sum", p, eb, True)
    abs_sum = exact_sum(partial.double().abs())  # float64: exact enough to bound the rounding
    rounding = gamma(p, torch.float32) * (abs_sum + bound) + gamma(p - 1, torch.float32) * abs_sum
    error = (lossy.double() - exact.double()).abs()
    excess = error - (bound + rounding)
    violations = int((excess > 0).sum())
    max_err = metrics.max_abs_error(exact, lossy)

    # ---- report (rank 0) -------------------------------------------------------------------
    raw_wire = 2 * (p - 1) * image_bytes  # bandwidth-optimal uncompressed ring, all ranks
    say(
        f"all_reduce SUM of {image_bytes / 1e6:.2f} MB, median of {args.reps} (slowest rank, "
        "barrier before each):"
    )
    if t_direct is not None:
        say(f"  {'exact MPI_Allreduce':<23}: {t_mpi * 1e3:9.2f} ms   (Open MPI's blocking call)")
    say(
        f"  {'zccl exact path':<23}: {t_exact_path * 1e3:9.2f} ms   "
        "(algorithm='mpi': the backend's uncompressed all_reduce)"
    )
    say(
        f"  {'zccl ' + algorithm:<23}: {t_zccl * 1e3:9.2f} ms   "
        f"speedup x{t_mpi / t_zccl:.2f} over the faster exact one"
    )
    fewer = raw_wire / max(float(sent), 1.0)
    say(
        f"  compressed bytes sent (all ranks): {float(sent) / 1e6:.3f} MB vs "
        f"{raw_wire / 1e6:.3f} MB for an uncompressed ring ({fewer:.1f}x fewer)"
    )
    say(
        f"  rank 0 compress {stats['compress_seconds'] * 1e3:.1f} ms, "
        f"decompress {stats['decompress_seconds'] * 1e3:.1f} ms, "
        f"collective {stats['total_seconds'] * 1e3:.1f} ms (last repetition)"
    )
    say(f"zccl image vs exact ({args.mode} {args.rel:g}, eb = {eb:.4e} per compression):")
    say(f"  PSNR      : {metrics.psnr(exact, lossy):.2f} dB")
    say(f"  NRMSE     : {metrics.nrmse(exact, lossy):.3e}")
    say(
        f"  max error : {max_err:.4e} (documented bound {bound:.4e} = "
        f"output_error_bound({algorithm!r}, 'sum', {p}, eb), + float32 rounding <= "
        f"{float(rounding.max()):.3e}; max error / bound = {max_err / max(bound, 1e-300):.3f})"
    )
    if rank == 0:
        path = args.out / "image_stacking.png"
        save_figure(
            path,
            exact,
            lossy,
            f"RTM stack of {total_shots} shots on {p} ranks; zccl {algorithm}, "
            f"{args.mode} {args.rel:g}: PSNR {metrics.psnr(exact, lossy):.1f} dB",
        )
        print(f"figure: {path}")
    if violations:
        worst = float(excess.max())
        print(
            f"ERROR (rank {rank}): {violations} pixel(s) exceed the documented bound "
            f"(worst by {worst:.3e})",
            flush=True,
        )
    failed = exact_sum(torch.tensor([float(violations > 0)], dtype=torch.float64))
    say(
        "bound check: FAILED"
        if float(failed)
        else "bound check: passed (every pixel within the documented bound)"
    )
    say(f"total {time.perf_counter() - started:.1f} s")
    if rank == 0 and args.summary is not None:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(
            json.dumps(
                {
                    "ranks": p,
                    "image_mb": image_bytes / 1e6,
                    "exact_mpi_ms": (t_direct or t_exact_path) * 1e3,
                    "exact_mpi_is_direct": t_direct is not None,
                    "zccl_exact_path_ms": t_exact_path * 1e3,
                    "zccl_ms": t_zccl * 1e3,
                    "zccl_algorithm": algorithm,
                    "rel": args.rel,
                    "psnr_db": metrics.psnr(exact, lossy),
                    "max_error": max_err,
                    "bound": bound,
                    "bound_check_passed": not float(failed),
                },
                indent=1,
            )
        )
    dist.destroy_process_group()
    return 1 if float(failed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
