"""DDP training on the zccl backend: uncompressed vs the zccl compression hook vs fp16.

Trains a small CNN on generated 16x16 glyph images (ten shape classes drawn at random size,
position and intensity over Gaussian pixel noise; deterministic by seed, no downloads) with
``DistributedDataParallel`` over the ``"zccl"`` backend, three times in one job from the same
initial weights and the same data order:

``uncompressed``
    plain DDP all-reduce through MPI (a zccl group with ``algorithm="mpi"``): the reference.
``zccl``
    ``zccl_torch.hooks.compressed_allreduce_hook`` at its default policy (error-bounded lossy
    compression of every gradient bucket, with the hook's default error feedback and warm-up).
``fp16``
    torch's ``fp16_compress_hook`` (cast to float16, all-reduce through MPI, cast back).

Per run it reports the final train loss (mean of the last ``--tail`` steps' global mini-batch
loss: every run sees the same batches, so the average removes most of the batch-to-batch noise
while the differences between runs remain), held-out accuracy, median step time on rank 0 and
bytes sent per step per rank (mean over all steps, and the median of the last ``--tail``). For
zccl the compressed payload's bytes are the backend's own counter
(``zccl_torch.last_stats()["bytes_sent"]``, read as each bucket's all-reduce completes); what the
hook sends exactly (the warm-up steps, 1-D parameters such as biases) is counted like the
uncompressed run. For the uncompressed and fp16 runs the bytes are computed from the gradient
bytes: a ring all-reduce sends ``2 * (p - 1) / p`` times the payload per rank.

Acceptance check (exit status 1 when it fails): the zccl run's final loss is within 2 % of the
uncompressed run's. Note that any perturbation of the gradients (fp16 included) sends SGD down a
slightly different trajectory, so the three final losses also differ by the run-to-run spread of
this short training (0-1.1 % for seeds 0-2 at the default size; without the gradient clipping a
loss spike in one run and not another made it up to 13 %); the ``rel`` column of the fp16 run
shows that spread next to zccl's. Writes ``ddp_train_loss.png`` (the three loss
curves) and ``ddp_train.json`` to ``--out``.

Run under a launcher, ``mpirun -np 2 python examples/ddp_train.py`` or ``torchrun
--nproc-per-node 2 examples/ddp_train.py``; started without one it launches itself under
``mpirun`` on ``--np`` ranks (default 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

import zccl_torch  # noqa: E402  (registers the "zccl" backend)

NUM_CLASSES = 10
IMAGE = 16
TOLERANCE = 0.02  # zccl final loss within 2 % of the uncompressed run's
RUNS = ("uncompressed", "zccl", "fp16")


# --------------------------------------------------------------------------------------------
# Data: procedurally drawn glyphs
# --------------------------------------------------------------------------------------------


def make_glyphs(n: int, seed: int, noise: float = 0.45) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy 16x16 glyph images (float32, ``[n, 1, 16, 16]``) and their labels (int64).

    Classes: 0 horizontal bar, 1 vertical bar, 2 diagonal, 3 anti-diagonal, 4 hollow square,
    5 filled square, 6 plus, 7 X, 8 ring, 9 disk. Each glyph has a random size (5-11 pixels),
    position (fully inside the image), stroke intensity (0.6-1.2) and random sign of the
    background offset, plus Gaussian pixel noise of standard deviation ``noise``. Everything is
    drawn from a generator seeded with ``seed``, so every rank and every run gets the same data.
    """
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    size = torch.randint(5, 12, (n,), generator=gen).float()
    x0 = torch.floor(torch.rand(n, generator=gen) * (IMAGE - size + 1))
    y0 = torch.floor(torch.rand(n, generator=gen) * (IMAGE - size + 1))
    amp = 0.6 + 0.6 * torch.rand(n, generator=gen)
    offset = 0.2 * (torch.rand(n, generator=gen) - 0.5)
    pix = torch.arange(IMAGE, dtype=torch.float32)
    # Coordinates relative to the glyph's box, scaled to [-1, 1].
    half = (size - 1) / 2
    u = (pix.view(1, 1, IMAGE) - (x0 + half).view(n, 1, 1)) / half.view(n, 1, 1)
    v = (pix.view(1, IMAGE, 1) - (y0 + half).view(n, 1, 1)) / half.view(n, 1, 1)
    inside = (u.abs() <= 1) & (v.abs() <= 1)
    width = (1.0 / half).view(n, 1, 1)  # one pixel in box units
    radius = torch.sqrt(u * u + v * v)
    shapes = torch.stack(
        [
            inside & (v.abs() <= width),  # horizontal bar
            inside & (u.abs() <= width),  # vertical bar
            inside & ((u - v).abs() <= width),  # diagonal
            inside & ((u + v).abs() <= width),  # anti-diagonal
            inside & ((u.abs() >= 1 - width) | (v.abs() >= 1 - width)),  # hollow square
            inside & (u.abs() <= 0.75) & (v.abs() <= 0.75),  # filled square
            inside & ((u.abs() <= width) | (v.abs() <= width)),  # plus
            inside & (((u - v).abs() <= width) | ((u + v).abs() <= width)),  # X
            ((radius - 0.8).abs() <= width),  # ring
            radius <= 0.7,  # disk
        ],
        dim=1,
    )
    mask = shapes[torch.arange(n), labels].float()
    images = amp.view(n, 1, 1) * mask + offset.view(n, 1, 1)
    images = images + noise * torch.randn(n, IMAGE, IMAGE, generator=gen)
    return images.unsqueeze(1).contiguous(), labels


class GlyphNet(nn.Module):
    """Two conv blocks and a two-layer classifier head (about 150k parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * (IMAGE // 4) ** 2, 128),
            nn.ReLU(),
            nn.Linear(128, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of ``[N, 1, 16, 16]`` images."""
        logits: torch.Tensor = self.head(self.features(x))
        return logits


# --------------------------------------------------------------------------------------------
# Communication hooks and byte accounting
# --------------------------------------------------------------------------------------------


def ring_allreduce_bytes(payload_bytes: int, world: int) -> float:
    """Bytes one rank sends in a ring all-reduce (reduce-scatter + all-gather) of a payload."""
    return 2.0 * (world - 1) / world * payload_bytes


@dataclass
class ByteCounter:
    """Bytes sent by this rank, accumulated per bucket and read out per step."""

    world: int
    step_bytes: float = 0.0
    compressed_buckets: int = 0
    plain_buckets: int = 0

    def take(self) -> float:
        """The bytes counted since the last call (one training step)."""
        value, self.step_bytes = self.step_bytes, 0.0
        return value


def counting_zccl_hook(counter: ByteCounter, group: Any) -> Callable[[Any, Any], Any]:
    """Wraps ``zccl_torch.hooks.compressed_allreduce_hook`` so each bucket's bytes are counted.

    During the hook's warm-up (``state.iter < state.start_iter``) a bucket is averaged exactly:
    counted as a ring all-reduce of its bytes. Afterwards the hook's per-bucket decisions
    (``state.last_decisions[bucket.index()]``: ``(eb, numel)`` per payload, ``eb == 0`` exact)
    split the bucket: exact payloads (1-D parameters) are counted as ring all-reduces, and the
    lossy payload's bytes are the backend's own counter, ``last_stats(group)["bytes_sent"]``,
    read when the bucket's future completes (the backend runs one group's collectives in order
    and records only compressed ones). The few-double exact all-reduce the hook uses to agree on
    gradient norms is not counted (under 100 bytes).
    """
    from zccl_torch import hooks

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        before = zccl_torch.last_stats(group)
        buf = bucket.buffer()
        item = buf.element_size()
        warm_up = state.iter < state.start_iter
        fut = hooks.compressed_allreduce_hook(state, bucket)
        decisions = None if warm_up else list(state.last_decisions.get(bucket.index(), []))

        def count(done: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            if decisions is None:
                counter.step_bytes += ring_allreduce_bytes(buf.numel() * item, counter.world)
                counter.plain_buckets += 1
                return done.value()
            exact = sum(n for eb, n in decisions if eb == 0.0)
            lossy = [n for eb, n in decisions if eb > 0.0]
            counter.step_bytes += ring_allreduce_bytes(exact * item, counter.world)
            if len(lossy) > 1:
                raise RuntimeError("byte counting supports one lossy payload per bucket")
            if lossy:
                after = zccl_torch.last_stats(group)
                if after == before or after["op"] != "all_reduce":
                    raise RuntimeError("the lossy payload left no compressed all_reduce record")
                counter.step_bytes += float(after["bytes_sent"])
                counter.compressed_buckets += 1
            else:
                counter.plain_buckets += 1
            return done.value()

        return fut.then(count)

    # DDP compares the annotations with the real classes; `from __future__ import annotations`
    # left strings there, so set the objects themselves.
    hook.__annotations__ = {
        "state": Any,
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    return hook


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """Figures of one training run (rank 0's view; losses are global means)."""

    name: str
    losses: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    bytes_per_step: list[float] = field(default_factory=list)
    final_loss: float = math.nan
    test_accuracy: float = math.nan
    median_step_ms: float = math.nan
    mean_bytes_per_step: float = math.nan
    steady_bytes_per_step: float = math.nan


def lr_at(step: int, steps: int, base: float, warmup: int = 30) -> float:
    """Linear warm-up then cosine decay to 5 % of ``base``."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return base * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_one(
    name: str,
    args: argparse.Namespace,
    data: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    mpi_group: Any,
) -> RunResult:
    """Trains a fresh model with the communication scheme ``name``; returns rank 0's figures."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # same initial weights on every rank and in every run
    model = GlyphNet()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    counter = ByteCounter(world)
    bucket_mb = args.bucket_mb

    if name == "zccl":
        # The initial parameter broadcast goes through MPI (exact, like the other runs); the
        # gradients then go through the hook on the default group at the backend's defaults.
        with zccl_torch.config(algorithm="mpi"):
            ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
        from zccl_torch import hooks

        state = hooks.ZcclHookState(model=ddp)
        ddp.register_comm_hook(state, counting_zccl_hook(counter, None))
    else:
        ddp = DistributedDataParallel(model, process_group=mpi_group, bucket_cap_mb=bucket_mb)
        if name == "fp16":
            ddp.register_comm_hook(mpi_group, default_hooks.fp16_compress_hook)

    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    images, labels = data
    order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(args.seed + 1))
    result = RunResult(name)
    global_batch = args.batch * world

    progress = None
    if rank == 0 and not args.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=args.steps, desc=f"{name:>12}", file=sys.stderr, mininterval=1.0)
    for step in range(args.steps):
        start_index = (step * global_batch) % (images.shape[0] - global_batch + 1)
        idx = order[start_index + rank * args.batch : start_index + (rank + 1) * args.batch]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(images[idx]), labels[idx])
        loss.backward()
        # Clipping keeps the steep part of the curve (around step 100) free of loss spikes: an
        # unclipped spike in one run and not in another would dominate the comparison.
        nn.utils.clip_grad_norm_(ddp.parameters(), args.clip)
        optimizer.step()
        elapsed = time.perf_counter() - start
        # Global mean loss for the curve (a tiny exact all-reduce, outside the timed region).
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, group=mpi_group)
        mean_loss /= world
        if name == "zccl":
            sent = counter.take()
        elif name == "fp16":
            sent = ring_allreduce_bytes(grad_bytes // 2, world)
        else:
            sent = ring_allreduce_bytes(grad_bytes, world)
        result.losses.append(float(mean_loss))
        result.step_seconds.append(elapsed)
        result.bytes_per_step.append(sent)
        if progress is not None:
            progress.set_postfix(loss=f"{float(mean_loss):.3f}")
            progress.update(1)
    if progress is not None:
        progress.close()

    # Held-out accuracy of the final model (every rank holds the same weights).
    ddp.eval()
    with torch.no_grad():
        logits = ddp.module(test[0])
    correct = torch.tensor([float((logits.argmax(1) == test[1]).sum())], dtype=torch.float64)
    dist.all_reduce(correct, op=dist.ReduceOp.MAX, group=mpi_group)

    tail = min(args.tail, args.steps)
    result.final_loss = statistics.fmean(result.losses[-tail:])
    result.test_accuracy = float(correct) / test[1].numel()
    result.median_step_ms = 1e3 * statistics.median(result.step_seconds)
    result.mean_bytes_per_step = statistics.fmean(result.bytes_per_step)
    result.steady_bytes_per_step = statistics.median(result.bytes_per_step[-tail:])
    if name == "zccl" and counter.compressed_buckets == 0:
        raise RuntimeError("the zccl run sent no bucket compressed (check the hook and sizes)")
    del ddp, optimizer
    return result


def plot(results: list[RunResult], path: Path, world: int) -> None:
    """Writes the three loss curves (raw and smoothed) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = {"uncompressed": "black", "zccl": "tab:red", "fp16": "tab:blue"}
    window = 10
    for res in results:
        kernel = torch.ones(1, 1, window) / window
        raw = torch.tensor(res.losses).view(1, 1, -1)
        smooth = torch.nn.functional.conv1d(raw, kernel).flatten().tolist()
        color = colors.get(res.name)
        ax.plot(res.losses, color=color, alpha=0.2, linewidth=0.8)
        ax.plot(
            range(window - 1, window - 1 + len(smooth)),
            smooth,
            color=color,
            label=f"{res.name}: final {res.final_loss:.4f}, acc {res.test_accuracy:.3f}",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (global mini-batch mean)")
    ax.set_yscale("log")
    ax.set_title(f"DDP on the zccl backend, {world} ranks: GlyphNet on generated 16x16 glyphs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; ``--quick`` shrinks the run for tests."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="training steps per run")
    parser.add_argument("--batch", type=int, default=None, help="per-rank batch size")
    parser.add_argument("--out", type=Path, default=ROOT / "examples" / "output")
    parser.add_argument("--quick", action="store_true", help="a small run (tests)")
    parser.add_argument("--lr", type=float, default=0.05, help="peak SGD learning rate")
    parser.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tail", type=int, default=None, help="steps averaged for final loss")
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    parser.add_argument("--train-size", type=int, default=None, help="generated train images")
    parser.add_argument("--np", type=int, default=2, help="ranks when launching itself")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    args = parser.parse_args(argv)
    quick = args.quick
    args.steps = args.steps or (80 if quick else 400)
    args.batch = args.batch or (32 if quick else 64)
    args.tail = args.tail or max(5, args.steps // 10)
    args.train_size = args.train_size or (8192 if quick else 32768)
    return args


def launch_self(args: argparse.Namespace) -> int:
    """Re-runs this script under ``mpirun`` on ``args.np`` ranks (when started without a
    launcher)."""
    if shutil.which("mpirun") is None:
        print("mpirun not found: run scripts/setup.sh (installs openmpi-bin)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(args.np)]
    cmd += [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    try:
        return subprocess.run(cmd, env=env, timeout=1800).returncode
    except subprocess.TimeoutExpired:
        print("mpirun timed out after 1800 s", file=sys.stderr)
        return 124


def main(argv: list[str] | None = None) -> int:
    """Runs the three trainings, prints the summary, writes the figure; 1 if the check fails."""
    args = parse_args(argv)
    # Started by a launcher: mpirun sets OMPI_COMM_WORLD_SIZE, torchrun RANK and WORLD_SIZE.
    # (Relaunching under torchrun started one mpirun per worker, all sharing torchrun's store.)
    if "OMPI_COMM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ:
        return launch_self(args)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("zccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    # Exact (uncompressed) group for the reference run, fp16 and loss logging.
    mpi_group = dist.new_group(
        list(range(world)), backend="zccl", pg_options=zccl_torch.Options(algorithm="mpi")
    )
    data = make_glyphs(args.train_size, seed=args.seed)
    test = make_glyphs(2048, seed=args.seed + 1_000_003)
    n_params = sum(p.numel() for p in GlyphNet().parameters())
    if rank == 0:
        print(
            f"ddp_train: {world} ranks, GlyphNet {n_params} parameters "
            f"({4 * n_params} gradient bytes), {args.steps} steps x {args.batch} per rank, "
            f"final loss = mean of the last {args.tail} steps",
            flush=True,
        )
    results = [train_one(name, args, data, test, mpi_group) for name in RUNS]

    status = 0
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        png = args.out / "ddp_train_loss.png"
        plot(results, png, world)
        ref = results[0]
        for res in results:
            rel = (res.final_loss - ref.final_loss) / ref.final_loss
            print(
                f"RESULT {res.name:>12} final_loss={res.final_loss:.5f} rel={rel:+.2%} "
                f"test_acc={res.test_accuracy:.4f} step_ms={res.median_step_ms:.2f} "
                f"bytes_per_step={res.mean_bytes_per_step:.0f} "
                f"steady_bytes_per_step={res.steady_bytes_per_step:.0f} "
                f"reduction={ref.mean_bytes_per_step / res.mean_bytes_per_step:.2f}x"
            )
        zccl = results[1]
        rel = abs(zccl.final_loss - ref.final_loss) / ref.final_loss
        verdict = "PASS" if rel <= TOLERANCE else "FAIL"
        print(
            f"CHECK {verdict}: zccl final loss {zccl.final_loss:.5f} vs uncompressed "
            f"{ref.final_loss:.5f}: {rel:.2%} (tolerance {TOLERANCE:.0%})"
        )
        summary = {
            "world_size": world,
            "parameters": n_params,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "tolerance": TOLERANCE,
            "relative_loss_difference": rel,
            "passed": rel <= TOLERANCE,
            "runs": [asdict(res) for res in results],
        }
        (args.out / "ddp_train.json").write_text(json.dumps(summary, indent=1))
        print(f"wrote {png} and {args.out / 'ddp_train.json'}", flush=True)
        status = 0 if rel <= TOLERANCE else 1
    flag = torch.tensor([status], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=mpi_group)
    dist.destroy_process_group()
    return int(flag)


if __name__ == "__main__":
    sys.exit(main())
