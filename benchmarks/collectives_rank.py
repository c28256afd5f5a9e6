"""One run of the collectives benchmark, on every rank (started by ``benchmarks/collectives.py``).

OSU/nccl-tests style: for each collective, size and contender, ``warmup`` untimed iterations,
then ``iters`` timed ones with an MPI barrier before each; each rank averages its own times,
then rank 0 records the average, minimum and maximum of those across ranks, and every rank's
average (``time_per_rank_s``, in rank order: a straggler shows there). The correctness
check (max error, PSNR, documented bound) runs on the last output, outside the timed loop,
against an exact float64 reference.

Sizes follow nccl-tests: the largest buffer of the collective (all_reduce/broadcast: the tensor;
reduce_scatter: the input of p blocks; all_gather: the output; scatter: the root's input).
One JSON object per measurement is appended to ``--out`` (rank 0).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI  # first: mpi4py initialises MPI (THREAD_MULTIPLE), zccl reuses it

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_data

import zccl_torch
from zccl_torch._torch_names import all_gather_single, reduce_scatter_single

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "scatter", "reduce")
ZCCL_ALGORITHMS = {  # contender -> zccl algorithm ("" = the collective's only algorithm)
    "zccl_auto": "auto",
    "zccl_ring": "ring",
    "zccl_rd": "recursive_doubling",
    "zccl_hd": "halving_doubling",
    "zccl_cprp2p": "cprp2p",
    "zccl_ring_int": "ring",
}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
# Whose output is the whole reduced tensor (reduce: on the root, rank 0), bounded as all_reduce.
WHOLE_SUM = ("all_reduce", "reduce")
# Run in place on `out`, which is refilled from the input before every timed call.
IN_PLACE = ("all_reduce", "broadcast", "reduce")
# Where each contender applies (data-movement collectives have one zccl algorithm).
APPLIES = {
    "zccl_auto": COLLECTIVES,
    "zccl_ring": REDUCING,
    "zccl_rd": ("all_reduce",),
    "zccl_hd": ("all_reduce",),
    "zccl_cprp2p": REDUCING,
    "zccl_ring_int": ("all_reduce",),
    "zccl_mt": COLLECTIVES,
    "mpi": COLLECTIVES,
    "gloo": COLLECTIVES,
    "fp16": COLLECTIVES,
}
CONTENDERS = tuple(APPLIES)
# busbw = algbw * factor(p): what each rank's link must carry, as nccl-tests define it.
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "scatter": lambda p: (p - 1) / p,
    "reduce": lambda p: 1.0,
}
# Bytes an uncompressed bandwidth-optimal algorithm puts on the wire, all ranks together, for a
# collective of size n on p ranks: the reference for the wire compression ratio.
WIRE_BYTES: dict[str, Callable[[float, int], float]] = {
    "all_reduce": lambda n, p: 2 * (p - 1) * n,
    "reduce_scatter": lambda n, p: (p - 1) * n,
    "all_gather": lambda n, p: (p - 1) * n,
    "broadcast": lambda n, p: (p - 1) * n,
    "scatter": lambda n, p: (p - 1) * n / p,
    "reduce": lambda n, p: (p - 1) * n + (p - 1) * n / p,  # reduce-scatter + gather (Rabenseifner)
}


@dataclass
class Case:
    """Buffers of one (collective, size) on this rank, and the exact expected output."""

    collective: str
    inp: torch.Tensor  # this rank's input (the root's full input for scatter)
    out: torch.Tensor  # the output buffer
    expected: torch.Tensor  # float64 exact output on this rank
    value_range: float  # of the expected output, over all ranks (for PSNR)
    root: int = 0  # of reduce, broadcast and scatter


def make_case(collective: str, numel: int, kind: str, comm: MPI.Comm, root: int = 0) -> Case:
    """Builds this rank's buffers and the exact float64 output. Every rank's input is a cached
    field (``bench_data``), so the reference is computed locally from all ranks' inputs instead
    of with collectives on the shaped network (which would cost more than the benchmark)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    if collective in ("all_gather", "scatter", "reduce_scatter"):
        numel -= numel % p
    own = numel // p if collective == "all_gather" else numel
    block = numel // p
    x = bench_data.values(kind, seed=rank, numel=own)

    def everyone() -> list[torch.Tensor]:
        return [x if q == rank else bench_data.values(kind, seed=q, numel=own) for q in range(p)]

    if collective in REDUCING:
        total = torch.zeros(own, dtype=torch.float64)
        for xq in everyone():
            total += xq
        ref_all = total
        if collective in WHOLE_SUM:
            ref = total
            out = torch.empty_like(x)
        else:
            ref = total[rank * block : (rank + 1) * block]
            out = torch.empty(block, dtype=torch.float32)
    elif collective == "all_gather":
        ref_all = ref = torch.cat(everyone()).double()
        out = torch.empty(own * p, dtype=torch.float32)
    else:  # broadcast / scatter from `root`
        data = x if rank == root else bench_data.values(kind, seed=root, numel=own)
        ref_all = data.double()
        ref = ref_all if collective == "broadcast" else ref_all[rank * block : (rank + 1) * block]
        out = x.clone() if collective == "broadcast" else torch.empty(block, dtype=torch.float32)
    lo, hi = (float(ref_all.min()), float(ref_all.max())) if ref_all.numel() else (0.0, 0.0)
    return Case(collective, x, out, ref.clone(), hi - lo if hi > lo else 1.0, root)


Call = tuple[Callable[[], None], Callable[[], None]]  # (reset before timing, timed call)


def _no_reset() -> None:
    pass


def zccl_call(case: Case) -> Call:
    """The collective on the default (zccl) group; settings come from the caller's config()."""
    c, x, out, root = case.collective, case.inp, case.out, case.root
    refill = (lambda: out.copy_(x)) if c in IN_PLACE else _no_reset
    if c == "all_reduce":
        return refill, lambda: dist.all_reduce(out)
    if c == "reduce":
        return refill, lambda: dist.reduce(out, dst=root)
    if c == "reduce_scatter":
        return refill, lambda: reduce_scatter_single(out, x)
    if c == "all_gather":
        return refill, lambda: all_gather_single(out, x)
    if c == "broadcast":
        return refill, lambda: dist.broadcast(out, src=root)
    blocks = list(x.chunk(dist.get_world_size())) if dist.get_rank() == root else None
    return refill, lambda: dist.scatter(out, blocks, src=root)


def mpi_call(case: Case, comm: MPI.Comm) -> Call:
    """The same collective with mpi4py on numpy views (Open MPI's own algorithm choice, or the
    one forced through OMPI_MCA_coll_tuned_* by the launcher)."""
    c, x, out, root = case.collective, case.inp.numpy(), case.out.numpy(), case.root
    if c == "all_reduce":
        return _no_reset, lambda: comm.Allreduce(x, out)
    if c == "reduce":
        return _no_reset, lambda: comm.Reduce(x, out, root=root)
    if c == "reduce_scatter":
        return _no_reset, lambda: comm.Reduce_scatter_block(x, out)
    if c == "all_gather":
        return _no_reset, lambda: comm.Allgather(x, out)
    if c == "broadcast":
        return (lambda: np.copyto(out, x)), lambda: comm.Bcast(out, root=root)
    return _no_reset, lambda: comm.Scatter(x if comm.Get_rank() == root else None, out, root=root)


def torch_call(case: Case, group: dist.ProcessGroup, half: bool) -> Call:
    """The collective on a torch Gloo group. ``half``: fp16 on the wire, fp16_compress_hook's
    trick (cast, communicate, cast back; the casts are timed as they are part of the method)."""
    c, x, out, root = case.collective, case.inp, case.out, case.root
    p, rank = dist.get_world_size(group), dist.get_rank(group)
    in_place = c in IN_PLACE
    if not half:
        blocks = list(x.chunk(p)) if rank == root else None
        calls = {
            "all_reduce": lambda: dist.all_reduce(out, group=group),
            "reduce_scatter": lambda: reduce_scatter_single(out, x, group=group),
            "all_gather": lambda: all_gather_single(out, x, group=group),
            "broadcast": lambda: dist.broadcast(out, src=root, group=group),
            "scatter": lambda: dist.scatter(out, blocks, src=root, group=group),
            "reduce": lambda: dist.reduce(out, dst=root, group=group),
        }
        return ((lambda: out.copy_(x)) if in_place else _no_reset), calls[c]

    def run_half() -> None:
        src = x.half()
        dst = src if in_place else torch.empty(out.numel(), dtype=torch.float16)
        if c == "all_reduce":
            dist.all_reduce(src, group=group)
        elif c == "reduce":
            dist.reduce(src, dst=root, group=group)
        elif c == "reduce_scatter":
            reduce_scatter_single(dst, src, group=group)
        elif c == "all_gather":
            all_gather_single(dst, src, group=group)
        elif c == "broadcast":
            dist.broadcast(src, src=root, group=group)
        else:
            blocks = list(src.chunk(p)) if rank == root else None
            dist.scatter(dst, blocks, src=root, group=group)
        out.copy_(dst)

    return _no_reset, run_half


def timed(
    call: Call, comm: MPI.Comm, warmup: int, iters: int, sync: Callable[[], None] = _no_reset
) -> list[float]:
    """This rank's wall-clock seconds of each timed iteration: reset, ``sync`` (a device's queue,
    e.g. torch.cuda.synchronize) and a barrier before, ``sync`` again inside the timing."""
    reset, fn = call
    times = []
    for i in range(warmup + iters):
        reset()
        sync()
        comm.Barrier()
        start = time.perf_counter()
        fn()
        sync()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
    return times


def quality(case: Case, comm: MPI.Comm) -> tuple[float, float]:
    """(max |out - exact| over all ranks, PSNR in dB over all ranks' outputs)."""
    out, expected = case.out, case.expected
    if case.collective == "reduce" and comm.Get_rank() != case.root:
        out, expected = out[:0], expected[:0]  # only the root's output is defined
    diff = out.cpu().double() - expected  # a device's output is compared on the host
    err = comm.allreduce(float(diff.abs().max()) if diff.numel() else 0.0, op=MPI.MAX)
    sq = comm.allreduce(float((diff * diff).sum()), op=MPI.SUM)
    n = comm.allreduce(diff.numel(), op=MPI.SUM)
    mse = sq / max(n, 1)
    psnr = math.inf if mse == 0 else 20 * math.log10(case.value_range) - 10 * math.log10(mse)
    return err, psnr


def documented_bound(collective: str, stats: dict, p: int) -> float:
    """The bound zccl promises for this output, from the eb it actually used."""
    eb = float(stats.get("error_bound", 0.0))
    if collective in REDUCING:
        alg = stats.get("algorithm", "auto")
        # reduce never exceeds its algorithm's all_reduce bound (collectives.h)
        return zccl_torch._C.output_error_bound(alg, "sum", p, eb, collective in WHOLE_SUM)
    return eb


def run_contender(
    name: str, case: Case, comm: MPI.Comm, gloo: dist.ProcessGroup, args: argparse.Namespace
) -> dict | None:
    p = comm.Get_size()
    stats: dict = {}
    if name == "mpi":
        call = mpi_call(case, comm)
    elif name in ("gloo", "fp16"):
        call = torch_call(case, gloo, half=name == "fp16")
    else:
        call = zccl_call(case)
    settings = {
        "algorithm": ZCCL_ALGORITHMS.get(name, "auto"),
        "threads": args.mt_threads if name == "zccl_mt" else 1,
    }
    if name == "zccl_ring_int":  # the ring's integer hop (integer_ring=True)
        settings["integer_ring"] = True
    try:
        if name.startswith("zccl"):
            with zccl_torch.config(**settings):
                times = timed(call, comm, args.warmup, args.iters)
            stats = dict(zccl_torch.last_stats())
        else:
            times = timed(call, comm, args.warmup, args.iters)
    except (RuntimeError, ValueError) as exc:  # e.g. a collective Gloo does not implement
        local = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        comm.Barrier()
        return {"contender": name, "unsupported": local} if comm.Get_rank() == 0 else None
    mean = statistics.fmean(times)
    per_rank = comm.gather(mean, root=0)
    err, psnr = quality(case, comm)
    sent = comm.reduce(int(stats.get("bytes_sent", 0)), op=MPI.SUM, root=0)
    if comm.Get_rank() != 0:
        return None
    largest = case.inp if case.collective in ("reduce_scatter", "scatter") else case.out
    nbytes = largest.numel() * 4
    row = {
        "contender": name,
        "time_avg_s": statistics.fmean(per_rank),
        "time_min_s": min(per_rank),
        "time_max_s": max(per_rank),
        "iters": len(times),
        "time_per_rank_s": per_rank,  # rank order: a straggler shows here
        "bytes": nbytes,
        "max_abs_error": err,
        "psnr_db": psnr,
    }
    row["algbw_GBps"] = nbytes / row["time_max_s"] / 1e9
    row["busbw_GBps"] = row["algbw_GBps"] * BUS_FACTOR[case.collective](p)
    if name.startswith("zccl"):
        bound = documented_bound(case.collective, stats, p)
        row.update(
            algorithm_ran=stats.get("algorithm"),
            integer_hop=stats.get("integer_hop"),
            eb=stats.get("error_bound"),
            bound=bound,
            err_over_bound=err / bound if bound else None,
            bytes_sent_all_ranks=sent,
            wire_ratio=WIRE_BYTES[case.collective](nbytes, p) / sent if sent else None,
            compress_s_rank0=stats.get("compress_seconds"),
            decompress_s_rank0=stats.get("decompress_seconds"),
        )
    return row


def warm_connections(comm: MPI.Comm, gloo: dist.ProcessGroup) -> None:
    """Every pair of ranks exchanges once on every transport, so no timed iteration pays for
    TCP connection setup (Open MPI and Gloo connect lazily)."""
    p = comm.Get_size()
    x = np.ones(1 << 16, dtype=np.float32)
    comm.Alltoall(np.ones(p * 1024, np.float32), np.empty(p * 1024, np.float32))
    comm.Allreduce(x, np.empty_like(x))
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    dist.all_to_all_single(torch.empty(p * 64), torch.ones(p * 64))
    for _ in range(2):
        dist.all_reduce(t, group=gloo)
        all_gather_single(torch.empty(p * 64), torch.ones(64), group=gloo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--sizes-mb", default="1,4,16,64")
    parser.add_argument("--rel", type=float, default=1e-4, help="relative error bound")
    parser.add_argument("--data", default="wavefield", choices=bench_data.KINDS)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--mt-threads", type=int, default=2)
    parser.add_argument("--root", type=int, default=0, help="root of reduce, broadcast and scatter")
    parser.add_argument("--label", default="", help="tag copied into every row")
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines file (appended)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    options = zccl_torch.Options(error_bound=args.rel, mode="rel")
    dist.init_process_group("zccl", timeout=datetime.timedelta(minutes=10), pg_options=options)
    gloo = dist.new_group(backend="gloo")
    warm_connections(comm, gloo)
    p = comm.Get_size()
    contenders = [c for c in args.contenders.split(",") if c]
    for name in contenders:
        if name not in APPLIES:
            raise SystemExit(f"unknown contender {name!r}; expected some of {CONTENDERS}")
    for collective in [c for c in args.collectives.split(",") if c]:
        if collective not in COLLECTIVES:
            raise SystemExit(f"unknown collective {collective!r}; expected some of {COLLECTIVES}")
        for mb in [float(s) for s in args.sizes_mb.split(",") if s]:
            case = make_case(collective, int(mb * (1 << 20) / 4), args.data, comm, args.root)
            for name in contenders:
                if collective not in APPLIES[name]:
                    continue
                row = run_contender(name, case, comm, gloo, args)
                if row is None:
                    continue
                row.update(
                    collective=collective,
                    size_mb=mb,
                    ranks=p,
                    data=args.data,
                    rel=args.rel,
                    label=args.label,
                    root=args.root,
                )
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(
                    f"  {collective:>14} {mb:>6g} MB {name:>11}: "
                    + (
                        f"{row['time_max_s']:.4f} s"
                        if "time_max_s" in row
                        else f"unsupported ({row['unsupported']})"
                    ),
                    flush=True,
                )
            del case
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
