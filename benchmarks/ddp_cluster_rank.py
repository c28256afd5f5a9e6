"""DDP training runs on every rank, one per contender (started by ``benchmarks/ddp_cluster.py``).

Every contender trains a fresh ``WideMLP`` from the same initial weights on the same batches
(``benchmarks/ddp_workload.py``); only the gradient all-reduce differs (``benchmarks/ddp_comm.py``).
A step is timed on each rank from ``zero_grad`` to the end of ``optimizer.step()`` (forward,
backward with DDP's all-reduce, update), with no barrier: ranks stay in lockstep through the
all-reduce, as in real training. Steps before ``--warmup`` are not timed (TCP connections, DDP's
bucket rebuild after the first step, and the zccl hook's exact warm-up iterations).

Rank 0 appends one JSON object per contender to ``--out``: per-step global losses (mean over
ranks of each rank's mini-batch loss), per-step times (slowest rank), bytes per step, the
held-out loss of the final model, and for zccl the hook's time breakdown. MPI (mpi4py) carries
this bookkeeping, outside the timed region, so it never shares a transport with a contender's
timed traffic.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI  # first: mpi4py initialises MPI (THREAD_MULTIPLE), zccl reuses it
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddp_comm
import ddp_workload

import zccl_torch


def link_rate(comm: MPI.Comm, nbytes: int) -> float:
    """Achieved bytes/s per link with every rank sending to its right neighbour at once (as in
    a ring), slowest rank, after one warm-up exchange; 0 on one rank."""
    rank, p = comm.Get_rank(), comm.Get_size()
    if p == 1:
        return 0.0
    send = np.ones(nbytes, dtype=np.uint8)
    recv = np.empty_like(send)
    elapsed = 0.0
    for _ in range(2):  # the first pays for connection setup and TCP slow start
        comm.Barrier()
        start = time.perf_counter()
        comm.Sendrecv(send, (rank + 1) % p, 11, recv, (rank - 1) % p, 11)
        elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return nbytes / elapsed


def warm_connections(groups: ddp_comm.Groups) -> None:
    """One collective on every transport a contender may use (all connect lazily): a compressed
    zccl all_reduce (its point-to-point ring), MPI_Allreduce and Gloo."""
    t = torch.randn(1 << 16)
    torch.distributed.all_reduce(t.clone())
    torch.distributed.all_reduce(t.clone(), group=groups.mpi)
    torch.distributed.all_reduce(t.clone(), group=groups.gloo)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on a held-out set, in chunks."""
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for xs, ys in zip(x.split(1024), y.split(1024), strict=True):
            logits = model(xs)
            loss_sum += float(nn.functional.cross_entropy(logits, ys, reduction="sum"))
            correct += int((logits.argmax(1) == ys).sum())
    return loss_sum / y.numel(), correct / y.numel()


def divergence(model: nn.Module, comm: MPI.Comm) -> float:
    """Max |w_r - w_0| over ranks r and all weights: 0 when every rank holds the same model.
    A cheap checksum first; the full comparison (a broadcast of the weights) only if it differs."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    checksum = (float(flat.sum()), float((flat * flat).sum()))
    if len(set(comm.allgather(checksum))) == 1:
        return 0.0
    ref = flat.numpy().copy() if comm.Get_rank() == 0 else np.empty(flat.numel())
    comm.Bcast(ref, root=0)
    return comm.allreduce(float(np.abs(flat.numpy() - ref).max()), op=MPI.MAX)


def train(
    name: str,
    args: argparse.Namespace,
    groups: ddp_comm.Groups,
    comm: MPI.Comm,
    data: dict[str, torch.Tensor],
) -> dict[str, Any] | None:
    """Trains contender ``name``; returns rank 0's JSON row (None on other ranks)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    dims = tuple(args.dims)
    torch.manual_seed(args.seed)  # same initial weights on every rank and in every contender
    model = ddp_workload.WideMLP(dims)
    steps = args.compute_steps if name == "compute" else args.steps
    rel = args.tuned_rel if name == "zccl_tuned" else args.zccl_rel
    wrapped = ddp_comm.wrap(name, model, groups, args.start_iter, args.bucket_mb, rel)
    acct = wrapped.accounting
    opt = torch.optim.SGD(wrapped.model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    per_step: dict[str, list[float]] = {
        k: [] for k in ("loss", "step_s", "fwd_s", "bwd_s", "opt_s", "bytes")
    }
    zccl_steps: list[dict[str, float]] = []
    timing = ddp_comm.timed_hook_internals(acct.counters) if acct else contextlib.nullcontext()
    comm.Barrier()
    with timing:
        for step in range(steps):
            idx = ddp_workload.batch_indices(step, rank, world, args.batch, data["order"])
            xb, yb = data["x"][idx], data["y"][idx]
            for group in opt.param_groups:
                group["lr"] = ddp_workload.lr_at(step, args.steps, args.lr, args.lr_warmup)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(wrapped.model(xb), yb)
            t1 = time.perf_counter()
            loss.backward()  # DDP returns once every bucket's all-reduce has completed
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            for key, value in (
                ("loss", loss.item()),
                ("step_s", t3 - t0),
                ("fwd_s", t1 - t0),
                ("bwd_s", t2 - t1),
                ("opt_s", t3 - t2),
                ("bytes", wrapped.bytes_per_step()),
            ):
                per_step[key].append(value)
            if acct is not None:
                zccl_steps.append(acct.counters.take())
    eval_loss, eval_acc = evaluate(model, data["x_eval"], data["y_eval"])
    # Without DDP ("compute") the ranks' models differ by design; nothing to compare.
    spread = None if name == "compute" else divergence(model, comm)
    row = summarize(name, args, comm, per_step, zccl_steps, steps)
    evals = comm.gather((eval_loss, eval_acc), root=0)
    if acct is not None:
        buckets = comm.reduce(acct.compressed_buckets, op=MPI.SUM, root=0)
    if rank != 0:
        return None
    assert row is not None and evals is not None
    row.update(
        eval_loss=evals[0][0],
        eval_acc=evals[0][1],
        eval_loss_ranks=[e[0] for e in evals],
        weights_max_divergence=spread,
        params=ddp_workload.parameter_count(dims),
        grad_bytes=4 * ddp_workload.parameter_count(dims),
    )
    if acct is not None:
        row["compressed_buckets_all_ranks"] = buckets
    return row


def reduce_array(comm: MPI.Comm, values: np.ndarray, op: MPI.Op) -> np.ndarray:
    """Element-wise reduction of a float64 array over all ranks (every rank gets the result)."""
    out = np.empty_like(values)
    comm.Allreduce(np.ascontiguousarray(values), out, op=op)
    return out


def summarize(
    name: str,
    args: argparse.Namespace,
    comm: MPI.Comm,
    per_step: dict[str, list[float]],
    zccl_steps: list[dict[str, float]],
    steps: int,
) -> dict[str, Any] | None:
    """Combines every rank's per-step records into rank 0's row (None on other ranks)."""
    world = comm.Get_size()
    local = {k: np.asarray(v, dtype=np.float64) for k, v in per_step.items()}
    loss = reduce_array(comm, local["loss"], MPI.SUM) / world
    step_max = reduce_array(comm, local["step_s"], MPI.MAX)
    phases = {k: reduce_array(comm, local[k], MPI.SUM) / world for k in ("fwd_s", "bwd_s", "opt_s")}
    sent = reduce_array(comm, local["bytes"], MPI.SUM) / world  # mean over ranks
    zccl: dict[str, np.ndarray] = {}
    for key in zccl_steps[0] if zccl_steps else ():
        mine = np.asarray([s[key] for s in zccl_steps], dtype=np.float64)
        zccl[key] = reduce_array(comm, mine, MPI.SUM) / world
    if comm.Get_rank() != 0:
        return None
    timed = slice(min(args.warmup, steps - 1), steps)
    tail = min(args.tail, steps)

    def med_ms(values: np.ndarray) -> float:
        return 1e3 * float(np.median(values[timed]))

    row: dict[str, Any] = {
        "contender": name,
        "ranks": world,
        "steps": steps,
        "warmup": args.warmup,
        "timed_steps": len(loss[timed]),
        "tail": tail,
        "step_ms_median": med_ms(step_max),
        "step_ms_mean": 1e3 * float(step_max[timed].mean()),
        "step_ms_p10": 1e3 * float(np.percentile(step_max[timed], 10)),
        "step_ms_p90": 1e3 * float(np.percentile(step_max[timed], 90)),
        "forward_ms_median": med_ms(phases["fwd_s"]),
        "backward_ms_median": med_ms(phases["bwd_s"]),
        "optimizer_ms_median": med_ms(phases["opt_s"]),
        "bytes_per_step_median": float(np.median(sent[timed])),
        "bytes_per_step_mean_all_steps": float(sent.mean()),
        "final_loss": float(statistics.fmean(loss[-tail:])),
        "losses": loss.tolist(),
        "step_ms": (1e3 * step_max).tolist(),
        "bytes_per_step": sent.tolist(),
    }
    if zccl:
        row["zccl_ms_median"] = {
            k[:-2] + "_ms": med_ms(v) for k, v in zccl.items() if k.endswith("_s")
        }
        row["zccl_lossy_payload_bytes_median"] = float(
            np.median(zccl["lossy_payload_bytes"][timed])
        )
        row["zccl_unmatched_payloads"] = int(zccl["mismatches"].sum() * world)
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line (the driver passes every field explicitly)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contenders", default=",".join(ddp_comm.CONTENDERS))
    parser.add_argument(
        "--dims",
        type=lambda s: [int(v) for v in s.split(",")],
        default=list(ddp_workload.DEFAULT_DIMS),
    )
    parser.add_argument("--batch", type=int, default=16, help="per-rank batch size")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--compute-steps", type=int, default=40, help="steps of 'compute'")
    parser.add_argument("--warmup", type=int, default=10, help="untimed first steps")
    parser.add_argument("--start-iter", type=int, default=10, help="zccl hook exact warm-up")
    parser.add_argument(
        "--zccl-rel",
        type=float,
        default=None,
        help="zccl hook policy Rules(NormRelative(REL, 'rms')); default: the "
        "hook's default policy (REL 1e-3)",
    )
    parser.add_argument(
        "--tuned-rel",
        type=float,
        default=0.1,
        help="zccl_tuned's hook policy Rules(NormRelative(REL, 'rms'))",
    )
    parser.add_argument("--tail", type=int, default=30, help="steps averaged for final loss")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--lr-warmup", type=int, default=20)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-size", type=int, default=32768)
    parser.add_argument("--eval-size", type=int, default=4096)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    parser.add_argument("--link-mb", type=float, default=32.0, help="link probe size, 0: none")
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines file (appended)")
    return parser.parse_args(argv)


def main() -> None:
    """Runs every requested contender in turn; rank 0 appends their rows to ``--out``."""
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    comm = MPI.COMM_WORLD
    groups = ddp_comm.make_groups()
    warm_connections(groups)
    rate = link_rate(comm, int(args.link_mb * 1e6)) if args.link_mb > 0 else 0.0
    task = ddp_workload.Task(in_dim=args.dims[0], classes=args.dims[-1], seed=args.seed)
    x, y = task.samples(args.train_size, split=0)
    x_eval, y_eval = task.samples(args.eval_size, split=1)
    order = torch.randperm(args.train_size, generator=torch.Generator().manual_seed(args.seed))
    data = {"x": x, "y": y, "x_eval": x_eval, "y_eval": y_eval, "order": order}
    for name in [c for c in args.contenders.split(",") if c]:
        started = time.time()
        row = train(name, args, groups, comm, data)
        if row is None:
            continue
        row.update(
            link_Bps=rate,
            wall_s=time.time() - started,
            omp_threads=torch.get_num_threads(),
            zccl_torch_path=zccl_torch.__file__,
        )
        with args.out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(
            f"  {name:>8}: step {row['step_ms_median']:8.1f} ms (median), "
            f"{row['bytes_per_step_median'] / 1e6:8.2f} MB/step, final loss "
            f"{row['final_loss']:.4f}, eval loss {row['eval_loss']:.4f}, "
            f"{row['wall_s']:.0f} s",
            flush=True,
        )
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
