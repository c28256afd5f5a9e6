"""DDP on CUDA with every rank on one GPU: exact Gloo, fp16 and the zccl hook, side by side.

Launch (one GPU shared by both ranks; every rank uses ``cuda:0``)::

    mpirun --bind-to none -np 2 python3 benchmarks/gpu_ddp.py --out gpu_ddp.json

Each contender trains a fresh ``ddp_workload.WideMLP`` (default dims: 26.2M parameters) from the
same initial weights on the same batches of the seeded teacher task
(``benchmarks/ddp_workload.py``); only the gradient all-reduce differs:

============  =================================================  ===============================
contender     gradient all-reduce                                bytes per step (per rank)
============  =================================================  ===============================
uncompressed  DDP on a Gloo group (NCCL refuses two ranks on     ring formula 2(p-1)/p of the
              one GPU), CUDA gradients                           float32 gradient bytes
fp16          the Gloo group with torch's ``fp16_compress_hook``  the same on the float16 payload
zccl          the default zccl group with                        backend's ``bytes_sent`` per
              ``compressed_allreduce_hook``, default policy,     lossy payload (``last_stats`` of
              no error feedback, ``--start-iter`` exact steps    the payload's device); exact
                                                                 payloads by the ring formula
zccl_ef       the same with error feedback                       the same
============  =================================================  ===============================

At 2 ranks the ring formula is the raw payload: 105 MB (float32) and 52 MB (float16) per step at
the default dims. The hook's small exact all-reduce agreeing on gradient norms is not counted.

The hook's error feedback quantises with :func:`zccl_torch.quantize` (on a CUDA payload: on the
GPU, in elementwise torch operations; timed as part of the step). Payloads
the hook gathers from several parameter slices go through its (CPU) staging buffers and are
compressed by the CPU side of the backend; the row's ``lossy_payload_devices`` says where the
compressed payloads were (at the default dims every lossy payload is one weight matrix, a view
of the CUDA bucket, so ``["cuda"]``).

The zccl rows also give ``hook_ms_median``: the step's time on the backward's thread inside the
hook (statistics, the exact agreement on them, staging, issuing the all-reduces), and
``agree_ms_median``, the part of it in the agreement (a blocking exchange per bucket): where the
zccl step is slower than Gloo's although it sends fewer bytes, these say whether the hook's
synchronous work is why.

A step is timed from ``zero_grad`` to the end of ``optimizer.step()`` between
``torch.cuda.synchronize()`` calls (slowest rank per step, median over the steps after
``--warmup``). Rank 0 writes every contender's row to ``--out`` (one JSON document) and prints a
table; MPI (mpi4py) carries this bookkeeping outside the timed region. ``--device cpu`` runs the
same program on CPU tensors (a smoke test: small ``--dims``, few steps).
"""

# No `from __future__ import annotations`: DDP compares a comm hook's annotations with the real
# classes at register_comm_hook time, so they must be objects, not strings.
import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI  # first: mpi4py initialises MPI (THREAD_MULTIPLE), zccl reuses it

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch.distributed as dist
from ddp_cluster_rank import evaluate, reduce_array
from ddp_comm import ring_bytes
from ddp_workload import DEFAULT_DIMS, Task, WideMLP, batch_indices, lr_at, parameter_count
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import zccl_torch
from zccl_torch import hooks
from zccl_torch.backend import devices as backend_devices

CONTENDERS = ("uncompressed", "fp16", "zccl", "zccl_ef")
REFERENCE = "uncompressed"


# ----------------------------------------------------------------------------------------------
# Byte accounting of the zccl hook


@dataclass
class ZcclBytes:
    """Counts what the zccl hook sends: warm-up buckets and exact payloads by the ring formula,
    lossy payloads by the backend's ``bytes_sent`` (``last_stats`` of the group on the payload's
    device, read when that all-reduce completes and checked against the payload's size)."""

    world: int
    group: Any = None
    sent: float = 0.0  # since the last take()
    mismatches: int = 0  # lossy payloads whose backend record did not match (not counted)
    lossy_payloads: int = 0
    devices: set[str] = field(default_factory=set)
    # Seconds the backward's thread spent inside the hook, and inside its exact agreement on the
    # payloads' statistics (part of the former), since the last take_times().
    hook_s: float = 0.0
    agree_s: float = 0.0
    # The counts are updated on the main thread (exact payloads) and on the backend's threads
    # (completed lossy payloads): a += is not atomic across threads.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, nbytes: float) -> None:
        """Counts ``nbytes`` sent (any thread)."""
        with self.lock:
            self.sent += nbytes

    def take(self) -> float:
        """Bytes sent since the last call (the step's), then zero."""
        with self.lock:
            value, self.sent = self.sent, 0.0
        return value

    def take_times(self) -> tuple[float, float]:
        """(hook, agreement) seconds since the last call, then zero (the backward's thread)."""
        times, self.hook_s, self.agree_s = (self.hook_s, self.agree_s), 0.0, 0.0
        return times

    def hook(
        self, state: hooks.ZcclHookState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        """``compressed_allreduce_hook``, counting the exact warm-up buckets and timing it."""
        if state.iter < state.start_iter or not bucket.buffer().is_floating_point():
            buf = bucket.buffer()
            self.add(ring_bytes(buf.numel() * buf.element_size(), self.world))
        t0 = time.perf_counter()
        fut = hooks.compressed_allreduce_hook(state, bucket)
        self.hook_s += time.perf_counter() - t0
        return fut

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Wraps the name ``zccl_torch.hooks._issue`` (looked up at call time) so that every
        payload the hook all-reduces after its warm-up is counted; restored on exit."""
        original = hooks._issue

        def issue(payload: torch.Tensor, d: Any, base: Any, group: Any) -> torch.futures.Future:
            fut = original(payload, d, base, group)
            nbytes = payload.numel() * payload.element_size()
            if d.exact:
                self.add(ring_bytes(nbytes, self.world))
                return fut
            device = payload.device.type
            self.devices.add(device)

            def count(done: torch.futures.Future) -> torch.Tensor:
                # Runs on the thread completing the all_reduce, before the backend starts the
                # next queued collective on this device; checked, never assumed.
                stats = zccl_torch.last_stats(self.group, device)
                with self.lock:
                    if stats.get("op") != "all_reduce" or stats.get("bytes_in") != nbytes:
                        self.mismatches += 1
                    else:
                        self.sent += float(stats["bytes_sent"])
                        self.lossy_payloads += 1
                return done.value()

            return fut.then(count)

        original_agree = hooks._agree

        def agree(*args: Any, **kwargs: Any) -> tuple[float, ...]:
            t0 = time.perf_counter()
            try:
                return original_agree(*args, **kwargs)
            finally:
                self.agree_s += time.perf_counter() - t0

        hooks._issue = issue
        hooks._agree = agree
        try:
            yield
        finally:
            hooks._issue = original
            hooks._agree = original_agree


# ----------------------------------------------------------------------------------------------
# Training


@dataclass
class Setup:
    """What every contender shares: groups, device, data."""

    comm: MPI.Comm
    gloo: Any
    device: torch.device
    data: dict[str, torch.Tensor]


def sync(device: torch.device) -> None:
    """Waits for the device's queued work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wrap(
    name: str, model: nn.Module, setup: Setup, args: argparse.Namespace
) -> tuple[nn.Module, Callable[[], float], ZcclBytes | None]:
    """DDP of ``model`` for contender ``name``: (ddp, bytes of the last step, zccl counter)."""
    world = setup.comm.Get_size()
    device_ids = [setup.device.index] if setup.device.type == "cuda" else None
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if name in ("uncompressed", "fp16"):
        ddp = DistributedDataParallel(
            model, device_ids=device_ids, process_group=setup.gloo, bucket_cap_mb=args.bucket_mb
        )
        if name == "fp16":
            ddp.register_comm_hook(setup.gloo, default_hooks.fp16_compress_hook)
        payload = grad_bytes / 2 if name == "fp16" else grad_bytes
        return ddp, lambda: ring_bytes(payload, world), None
    if name not in ("zccl", "zccl_ef"):
        raise ValueError(f"unknown contender {name!r}; expected one of {CONTENDERS}")
    # DDP broadcasts rank 0's weights at construction; on the zccl group that broadcast would
    # be compressed (lossy), so it runs exactly (MPI).
    with zccl_torch.config(algorithm="mpi"):
        ddp = DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=args.bucket_mb)
    state = hooks.ZcclHookState(
        model=ddp, start_iter=args.start_iter, error_feedback=name == "zccl_ef"
    )
    counter = ZcclBytes(world)
    ddp.register_comm_hook(state, counter.hook)
    return ddp, counter.take, counter


def divergence(model: nn.Module, comm: MPI.Comm) -> float:
    """Max |w_r - w_0| over ranks r and all weights (0: every rank holds the same model)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().cpu()
    mine = flat.numpy()
    ref = mine.copy() if comm.Get_rank() == 0 else np.empty_like(mine)
    comm.Bcast(ref, root=0)
    return comm.allreduce(float(np.abs(mine - ref).max()) if mine.size else 0.0, op=MPI.MAX)


def train(name: str, args: argparse.Namespace, setup: Setup) -> dict[str, Any] | None:
    """Trains contender ``name``; rank 0's row (None on other ranks)."""
    comm, device, data = setup.comm, setup.device, setup.data
    rank, world = comm.Get_rank(), comm.Get_size()
    started = time.perf_counter()
    torch.manual_seed(args.seed)  # same initial weights on every rank and in every contender
    model = WideMLP(tuple(args.dims)).to(device)
    ddp, step_bytes, counter = wrap(name, model, setup, args)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    losses = torch.empty(args.steps, dtype=torch.float64)
    step_s = np.empty(args.steps)
    sent = np.empty(args.steps)
    hook_s = np.zeros(args.steps)
    agree_s = np.zeros(args.steps)
    with ExitStack() as stack:
        if counter is not None:
            stack.enter_context(counter.counting())
        comm.Barrier()
        for step in range(args.steps):
            idx = batch_indices(step, rank, world, args.batch, data["order"]).to(device)
            xb, yb = data["x"][idx], data["y"][idx]
            for group in opt.param_groups:
                group["lr"] = lr_at(step, args.steps, args.lr, args.lr_warmup)
            sync(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xb), yb)
            loss.backward()  # DDP returns once every bucket's all-reduce has completed
            opt.step()
            sync(device)
            step_s[step] = time.perf_counter() - t0
            losses[step] = loss.detach().double().cpu()
            sent[step] = step_bytes()
            if counter is not None:
                hook_s[step], agree_s[step] = counter.take_times()
    ddp.eval()
    eval_loss, eval_acc = evaluate(model, data["x_eval"], data["y_eval"])
    spread = divergence(model, comm)
    loss_mean = reduce_array(comm, losses.numpy(), MPI.SUM) / world
    step_max = reduce_array(comm, step_s, MPI.MAX)
    sent_mean = reduce_array(comm, sent, MPI.SUM) / world
    hook_max = reduce_array(comm, hook_s, MPI.MAX)
    agree_max = reduce_array(comm, agree_s, MPI.MAX)
    finite = comm.allreduce(bool(np.isfinite(losses.numpy()).all()), op=MPI.LAND)
    zccl_info = None
    if counter is not None:
        devices = comm.allgather(sorted(counter.devices))
        zccl_info = {
            "mismatches": comm.allreduce(counter.mismatches, op=MPI.SUM),
            "lossy_payloads": comm.allreduce(counter.lossy_payloads, op=MPI.SUM),
            "devices": sorted({d for ds in devices for d in ds}),
        }
    evals = comm.gather((eval_loss, eval_acc), root=0)
    wall = comm.allreduce(time.perf_counter() - started, op=MPI.MAX)
    if rank != 0:
        return None
    assert evals is not None
    timed = slice(min(args.warmup, args.steps - 1), args.steps)
    tail = min(args.tail, args.steps)
    row: dict[str, Any] = {
        "contender": name,
        "device": str(device),
        "ranks": world,
        "steps": args.steps,
        "warmup": args.warmup,
        "tail": tail,
        "batch_per_rank": args.batch,
        "params": parameter_count(tuple(args.dims)),
        "final_loss": float(statistics.fmean(loss_mean[-tail:])),
        "losses_finite": finite,
        "eval_loss": evals[0][0],
        "eval_acc": evals[0][1],
        "step_ms_median": 1e3 * float(np.median(step_max[timed])),
        "step_ms_p10": 1e3 * float(np.percentile(step_max[timed], 10)),
        "step_ms_p90": 1e3 * float(np.percentile(step_max[timed], 90)),
        "bytes_per_step_median": float(np.median(sent_mean[timed])),
        "bytes_per_step_mean_all_steps": float(sent_mean.mean()),
        "grad_bytes": 4 * parameter_count(tuple(args.dims)),
        "max_param_diff_across_ranks": spread,
        "wall_s": wall,
        "losses": loss_mean.tolist(),
        "step_ms": (1e3 * step_max).tolist(),
        "bytes_per_step": sent_mean.tolist(),
    }
    if zccl_info is not None:
        row.update(
            start_iter=args.start_iter,
            zccl_unmatched_payloads=zccl_info["mismatches"],
            zccl_lossy_payloads_all_ranks=zccl_info["lossy_payloads"],
            lossy_payload_devices=zccl_info["devices"],
            # The step's time inside the hook on the backward's thread (slowest rank), and the
            # part of it in the exact agreement on the payloads' statistics.
            hook_ms_median=1e3 * float(np.median(hook_max[timed])),
            agree_ms_median=1e3 * float(np.median(agree_max[timed])),
        )
    return row


# ----------------------------------------------------------------------------------------------
# Driver


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument(
        "--dims",
        type=lambda s: [int(v) for v in s.split(",")],
        default=list(DEFAULT_DIMS),
        help="MLP widths, comma-separated",
    )
    parser.add_argument("--batch", type=int, default=256, help="per-rank batch size")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10, help="untimed first steps")
    parser.add_argument("--start-iter", type=int, default=10, help="zccl hook exact warm-up")
    parser.add_argument("--tail", type=int, default=30, help="steps averaged for final loss")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--lr-warmup", type=int, default=20)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-size", type=int, default=65536)
    parser.add_argument("--eval-size", type=int, default=8192)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    parser.add_argument("--out", type=Path, required=True, help="JSON file (overwritten)")
    args = parser.parse_args(argv)
    unknown = [c for c in args.contenders.split(",") if c and c not in CONTENDERS]
    if unknown:
        parser.error(f"unknown contenders {unknown}; choose from {CONTENDERS}")
    if args.steps < 1 or args.tail < 1:
        parser.error("--steps and --tail must be >= 1")
    return args


def make_setup(args: argparse.Namespace, comm: MPI.Comm) -> Setup:
    """Process groups, the device (``cuda:0`` for every rank) and the data on it."""
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gpu_ddp: --device cuda but torch sees no GPU (use --device cpu)")
        if "cuda" not in backend_devices():
            raise SystemExit("gpu_ddp: zccl_torch._C was built without its CUDA path")
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cpu")
    dist.init_process_group("zccl")
    gloo = dist.new_group(list(range(comm.Get_size())), backend="gloo")
    task = Task(in_dim=args.dims[0], classes=args.dims[-1], seed=args.seed)
    x, y = task.samples(args.train_size, split=0)
    x_eval, y_eval = task.samples(args.eval_size, split=1)
    order = torch.randperm(args.train_size, generator=torch.Generator().manual_seed(args.seed))
    data = {
        "x": x.to(device),
        "y": y.to(device),
        "x_eval": x_eval.to(device),
        "y_eval": y_eval.to(device),
        "order": order,
    }
    # Connect every transport before the first timed step (all connect lazily).
    probe = torch.randn(1 << 16, device=device)
    dist.all_reduce(probe.clone())
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(probe.clone())
    dist.all_reduce(probe.clone(), group=gloo)
    sync(device)
    return Setup(comm, gloo, device, data)


def print_table(rows: list[dict[str, Any]]) -> None:
    """Rank 0's summary table (relative loss against ``uncompressed`` when it ran)."""
    ref = next((r["final_loss"] for r in rows if r["contender"] == REFERENCE), None)
    print(
        f"{'contender':>12} {'final loss':>10} {'vs uncomp':>9} {'eval acc':>8} "
        f"{'step ms':>8} {'MB/step':>8} {'max |dw|':>9} {'wall s':>7} {'hook ms':>8} "
        f"{'agree ms':>8}"
    )
    for r in rows:
        rel = r.get("loss_vs_uncompressed")
        rel_s = f"{100 * rel:+8.2f}%" if rel is not None else f"{'-':>9}"
        print(
            f"{r['contender']:>12} {r['final_loss']:10.4f} {rel_s} {r['eval_acc']:8.4f} "
            f"{r['step_ms_median']:8.1f} {r['bytes_per_step_median'] / 1e6:8.2f} "
            f"{r['max_param_diff_across_ranks']:9.2e} {r['wall_s']:7.1f} "
            f"{r.get('hook_ms_median', float('nan')):8.2f} "
            f"{r.get('agree_ms_median', float('nan')):8.2f}",
            flush=True,
        )
    if ref is not None:
        within = all(
            r["loss_vs_uncompressed"] is not None and abs(r["loss_vs_uncompressed"]) <= 0.02
            for r in rows
        )
        print(f"final losses within 2% of uncompressed: {'yes' if within else 'NO'}", flush=True)


def write_doc(
    args: argparse.Namespace,
    setup: Setup,
    rows: list[dict[str, Any]],
    elapsed: float,
    complete: bool,
) -> dict[str, Any]:
    """Rank 0: sets each row's loss relative to ``uncompressed`` and (re)writes ``--out``;
    called after every contender, so a run stopped by a time limit keeps what finished."""
    ref = next((r["final_loss"] for r in rows if r["contender"] == REFERENCE), None)
    for r in rows:
        r["loss_vs_uncompressed"] = (
            r["final_loss"] / ref - 1.0 if ref is not None and math.isfinite(ref) and ref else None
        )
    doc = {
        "argv": sys.argv[1:],
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "torch": torch.__version__,
        "world": setup.comm.Get_size(),
        "gpu": torch.cuda.get_device_name(0) if setup.device.type == "cuda" else None,
        "omp_threads": torch.get_num_threads(),
        "total_s": elapsed,
        "complete": complete,
        "rows": rows,
    }
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.out)
    return doc


def main(argv: list[str] | None = None) -> None:
    """Runs every requested contender in turn; rank 0 writes the rows and prints the table."""
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    comm = MPI.COMM_WORLD
    started = time.perf_counter()
    setup = make_setup(args, comm)
    rows: list[dict[str, Any]] = []
    for name in [c for c in args.contenders.split(",") if c]:
        row = train(name, args, setup)
        if row is not None:
            rows.append(row)
            write_doc(args, setup, rows, time.perf_counter() - started, complete=False)
            print(
                f"  {name:>12}: final loss {row['final_loss']:.4f}, step "
                f"{row['step_ms_median']:.1f} ms, {row['wall_s']:.1f} s",
                flush=True,
            )
    if comm.Get_rank() == 0:
        doc = write_doc(args, setup, rows, time.perf_counter() - started, complete=True)
        print_table(rows)
        print(f"wrote {args.out} ({doc['total_s']:.0f} s)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
