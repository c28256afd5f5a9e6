"""Collectives on CUDA tensors, several ranks sharing one GPU: zccl's device path against the host
path, Gloo and NCCL.

Run (every rank uses GPU ``local_rank % device_count``, i.e. cuda:0 on a one-GPU machine)::

    mpirun -np 4 python3 benchmarks/gpu_collectives.py --out gpu_p4.json

Contenders, each on the same CUDA tensors:

- ``zccl_gpu``: the "zccl" backend on the CUDA tensor itself (its device path: GPU compression);
- ``zccl_host``: what a user can do without it: copy the tensor into a (pinned) host buffer, run
  the zccl collective on that CPU tensor (the same zccl group serves both device types), copy the
  result back to the GPU; the time includes both copies;
- ``gloo``: a Gloo group (``dist.new_group(backend="gloo")``) on the CUDA tensors; an op Gloo
  refuses for CUDA tensors is recorded with its error message instead of a time;
- ``nccl``: one NCCL group and all_reduce, tried last, in one child process per rank (plain
  ``torch.distributed`` env:// rendezvous, no MPI) killed after ``--nccl-timeout-s``: NCCL
  usually refuses several ranks on one GPU ("Duplicate GPU detected"), and a hang must not stop
  the run. Its error, or its times if it ran, are recorded.

Sizes follow nccl-tests and ``benchmarks/collectives_rank.py``: the largest buffer of the
collective (all_reduce/broadcast: the tensor; scatter: the root's input of p blocks of
size/p each). Data: the benchmark wavefield of ``benchmarks/bench_data.py`` (rank r: seed r),
moved to the GPU. The error bound is REL ``--rel`` (1e-4) on the zccl group, as in the CPU
benchmarks.

Timing: before every iteration the reset (refill of an in-place buffer, untimed),
``torch.cuda.synchronize()`` and an MPI barrier; then each rank's wall clock from the call to the
end of a second ``torch.cuda.synchronize()``. An iteration's time is the slowest rank's; a row's
headline is the median over ``--iters`` iterations after ``--warmup`` untimed ones. Accuracy is
checked on the last output against an exact float64 reference (built on the host from every
rank's cached field, as in collectives_rank.py), as max |error| over all ranks and that divided
by the bound zccl documents for the eb it used (README, "Accuracy contract": all_reduce SUM on
the ring ``p*eb``, broadcast and scatter ``eb``).

``--device cpu`` runs the same program on CPU tensors (``zccl_gpu`` is then zccl's CPU path and
``zccl_host`` the same plus two host copies; ``nccl`` is skipped): a smoke test for machines
without a GPU.

Writes one JSON document to ``--out`` (rank 0): the machine, torch version, rank count and one
row per (collective, contender, size); prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    import collectives_rank
    from mpi4py import MPI

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all_reduce", "broadcast", "scatter")
CONTENDERS = ("zccl_gpu", "zccl_host", "gloo", "nccl")
NCCL_MARK = "NCCL_CHILD_RESULT "  # prefix of the child's one-line JSON result on stdout

Call = tuple[Callable[[], None], Callable[[], None]]  # (untimed reset, timed call)


def short_error(exc: BaseException, limit: int = 600) -> str:
    """The exception's type and message on one line, without a C++ backtrace."""
    lines: list[str] = []
    for line in str(exc).splitlines():
        if line.startswith(("Exception raised from", "frame #")):
            break
        if line.strip():
            lines.append(line.strip())
    return f"{type(exc).__name__}: {' | '.join(lines)}"[:limit]


def make_case(
    collective: str, numel: int, kind: str, comm: MPI.Comm, device: torch.device
) -> collectives_rank.Case:
    """collectives_rank's case (this rank's wavefield, seed = rank; the exact float64 output
    built on the host from every rank's cached field; root 0), its buffers moved to ``device``."""
    import collectives_rank

    case = collectives_rank.make_case(collective, numel, kind, comm)
    case.inp, case.out = case.inp.to(device), case.out.to(device)
    return case


def case_bytes(case: collectives_rank.Case) -> int:
    """nccl-tests size: the largest buffer of the collective (every rank's input here)."""
    return case.inp.numel() * case.inp.element_size()


def host_call(case: collectives_rank.Case, p: int, rank: int) -> Call:
    """Device -> host buffer, the zccl collective on the CPU tensor, host -> device. The host
    buffers are allocated once (pinned on CUDA, as a tuned user program would) and the copies
    are synchronous (``non_blocking=False``), so both are inside the timed call."""
    x, out = case.inp, case.out
    pinned = out.is_cuda
    if case.collective in ("all_reduce", "broadcast"):
        host = torch.empty(out.shape, dtype=out.dtype, pin_memory=pinned)

        def in_place() -> None:
            if case.collective == "all_reduce":
                host.copy_(out)
                dist.all_reduce(host)
            else:  # only the root's values matter
                if rank == 0:
                    host.copy_(out)
                dist.broadcast(host, src=0)
            out.copy_(host)

        return (lambda: out.copy_(x)), in_place
    host_in = torch.empty(x.shape, dtype=x.dtype, pin_memory=pinned) if rank == 0 else None
    host_out = torch.empty(out.shape, dtype=out.dtype, pin_memory=pinned)
    blocks = list(host_in.chunk(p)) if host_in is not None else None

    def scatter() -> None:
        if host_in is not None:
            host_in.copy_(x)
        dist.scatter(host_out, blocks, src=0)
        out.copy_(host_out)

    return (lambda: None), scatter


def run_contender(
    name: str, case: collectives_rank.Case, comm: MPI.Comm, gloo: Any, args: argparse.Namespace
) -> dict[str, Any] | None:
    """Times one contender on one case; the row on rank 0, None elsewhere. An error on any rank
    (e.g. Gloo refusing CUDA tensors for scatter) becomes the row's ``error``."""
    import collectives_rank
    from mpi4py import MPI

    import zccl_torch

    rank, p = comm.Get_rank(), comm.Get_size()
    device = case.out.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    stats: dict[str, Any] = {}
    error = None
    times: list[float] = []
    try:
        if name == "zccl_gpu":
            call = collectives_rank.torch_call(case, None, half=False)  # the zccl group
            times = collectives_rank.timed(call, comm, args.warmup, args.iters, sync)
            stats = dict(zccl_torch.last_stats(device=device.type))
        elif name == "zccl_host":
            with zccl_torch.config(threads=args.host_threads):
                times = collectives_rank.timed(
                    host_call(case, p, rank), comm, args.warmup, args.iters, sync
                )
            stats = dict(zccl_torch.last_stats(device="cpu"))
        else:  # gloo
            call = collectives_rank.torch_call(case, gloo, half=False)
            times = collectives_rank.timed(call, comm, args.warmup, args.iters, sync)
    except Exception as exc:  # recorded, not fatal: every rank reaches the allgather below
        error = short_error(exc)
    errors = comm.allgather(error)
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        return (
            {"contender": name, "error": f"rank {failed[0][0]}: {failed[0][1]}"}
            if rank == 0
            else None
        )
    per_rank = comm.gather(times, root=0)
    err, psnr = collectives_rank.quality(case, comm)
    counters = {
        k: comm.reduce(int(stats.get(k, 0)), op=MPI.SUM, root=0)
        for k in ("bytes_sent", "bytes_in", "bytes_compressed")
    }
    if rank != 0:
        return None
    slowest = [max(column) for column in zip(*per_rank, strict=True)]
    median = statistics.median(slowest)
    row: dict[str, Any] = {
        "contender": name,
        "median_s": median,
        "iter_times_s": slowest,
        "iter_times_per_rank_s": per_rank,
        "bytes": case_bytes(case),
        "algbw_GBps": case_bytes(case) / median / 1e9 if median > 0 else None,
        "max_abs_error": err,
        "psnr_db": psnr,
    }
    if name.startswith("zccl"):
        bound = collectives_rank.documented_bound(case.collective, stats, p)
        sent = counters["bytes_sent"]
        row.update(
            algorithm_ran=stats.get("algorithm"),
            eb=stats.get("error_bound"),
            bound=bound,
            err_over_bound=err / bound if bound else None,
            # the backend's counters (last_stats): bytes on the wire, payload bytes the ranks
            # contributed, and uncompressed bytes that went through the compressor
            bytes_sent_all_ranks=sent,
            bytes_in_all_ranks=counters["bytes_in"],
            bytes_compressed_all_ranks=counters["bytes_compressed"],
            wire_ratio=(
                collectives_rank.WIRE_BYTES[case.collective](case_bytes(case), p) / sent
                if sent
                else None
            ),
            compress_s_rank0=stats.get("compress_seconds"),
            decompress_s_rank0=stats.get("decompress_seconds"),
        )
        if name == "zccl_host":
            row["host_buffer"] = "pinned" if device.type == "cuda" else "pageable"
            row["host_threads"] = args.host_threads
    return row


# ------------------------------------------------------------------------------------------
# NCCL, in one child process per rank


def nccl_child(args: argparse.Namespace) -> None:
    """Child mode (``--nccl-child``; RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment):
    an NCCL group and all_reduce (SUM) of each size, timed like the main run if NCCL accepts
    the ranks. Prints one line ``NCCL_CHILD_RESULT {json}`` and exits without tearing NCCL down
    (whose shutdown can hang after an error)."""
    result: dict[str, Any] = {"times": {}}
    try:
        device = torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1)
        )
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=20))
        flag = torch.ones(1, device=device)
        for mb in sizes(args):
            t = torch.full((int(mb * (1 << 20) / 4),), float(dist.get_rank()), device=device)
            times: list[float] = []
            for i in range(args.warmup + args.iters):
                dist.all_reduce(flag)  # a barrier on the GPU
                torch.cuda.synchronize()
                start = time.perf_counter()
                dist.all_reduce(t)
                torch.cuda.synchronize()
                if i >= args.warmup:
                    times.append(time.perf_counter() - start)
            result["times"][str(mb)] = times
    except Exception as exc:
        result["error"] = short_error(exc, limit=1000)
    print(NCCL_MARK + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nccl_rows(comm: MPI.Comm, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Starts this rank's NCCL child (killed after ``--nccl-timeout-s``) and, on rank 0, turns
    every rank's result into one all_reduce row per size (times, or the first error)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    port = comm.bcast(free_port() if rank == 0 else None, root=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(p),
        LOCAL_RANK=os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NCCL_DEBUG=env.get("NCCL_DEBUG", "WARN"),
    )
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--nccl-child",
        "--sizes-mb",
        args.sizes_mb,
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
    ]
    result: dict[str, Any]
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=args.nccl_timeout_s
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(NCCL_MARK)]
        if lines:
            result = json.loads(lines[-1][len(NCCL_MARK) :])
        else:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            result = {"error": f"child exited {done.returncode} without a result: {tail}"[:1000]}
        warns = [ln.strip() for ln in done.stderr.splitlines() if "NCCL WARN" in ln]
        if warns and "error" in result:
            result["nccl_warn"] = warns[0][:500]
    except subprocess.TimeoutExpired:
        result = {"error": f"no result within {args.nccl_timeout_s} s (NCCL hung; killed)"}
    results = comm.gather(result, root=0)
    if rank != 0:
        return []
    rows = []
    failed = [(r, res) for r, res in enumerate(results) if "error" in res]
    for mb in sizes(args):
        row: dict[str, Any] = {"collective": "all_reduce", "contender": "nccl", "size_mb": mb}
        if failed:
            r, res = failed[0]
            row["error"] = f"rank {r}: {res['error']}"
            if "nccl_warn" in res:
                row["nccl_warn"] = res["nccl_warn"]
        else:
            per_rank = [res["times"][str(mb)] for res in results]
            slowest = [max(column) for column in zip(*per_rank, strict=True)]
            nbytes = int(mb * (1 << 20) / 4) * 4
            median = statistics.median(slowest)
            row.update(
                median_s=median,
                iter_times_s=slowest,
                iter_times_per_rank_s=per_rank,
                bytes=nbytes,
                algbw_GBps=nbytes / median / 1e9 if median > 0 else None,
            )
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------


def sizes(args: argparse.Namespace) -> list[float]:
    return [float(s) for s in args.sizes_mb.split(",") if s]


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'collective':>10} {'MB':>6} {'contender':>10} {'median ms':>10} {'vs gloo':>8} "
        f"{'err/bound':>9} {'wire x':>7}  note"
    )
    for row in rows:
        if "median_s" in row:
            speed = row.get("speedup_vs_gloo")
            ratio = row.get("err_over_bound")
            wire = row.get("wire_ratio")
            print(
                f"{row['collective']:>10} {row['size_mb']:>6g} {row['contender']:>10} "
                f"{row['median_s'] * 1e3:>10.2f} "
                f"{f'{speed:.2f}x' if speed else '-':>8} "
                f"{f'{ratio:.3f}' if ratio is not None else '-':>9} "
                f"{f'{wire:.1f}' if wire else '-':>7}  {row.get('algorithm_ran') or ''}"
            )
        else:
            print(
                f"{row['collective']:>10} {row['size_mb']:>6g} {row['contender']:>10} "
                f"{'-':>10} {'-':>8} {'-':>9} {'-':>7}  {row.get('error', '')[:160]}"
            )
    sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file written by rank 0 (required)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--sizes-mb", default="64", help="comma-separated MiB (float32)")
    parser.add_argument("--rel", type=float, default=1e-4, help="relative error bound")
    parser.add_argument("--data", default="wavefield", choices=("wavefield", "smooth"))
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument(
        "--host-threads",
        type=int,
        default=0,
        help="zccl compression threads per rank on the host path (0: this "
        "host's cores divided by the ranks)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60,
        help="timeout of the zccl and Gloo groups (a hung op fails after it)",
    )
    parser.add_argument("--no-nccl", action="store_true", help="skip the NCCL attempt")
    parser.add_argument(
        "--nccl-timeout-s", type=float, default=45, help="hard limit of the NCCL child processes"
    )
    parser.add_argument("--nccl-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.nccl_child and args.out is None:
        parser.error("--out is required")
    return args


def main() -> None:
    args = parse_args()
    if args.nccl_child:
        nccl_child(args)  # never returns
    sys.path.insert(0, str(HERE))
    import collectives_rank  # imports mpi4py first (MPI_Init_thread), then zccl_torch
    from mpi4py import MPI

    import zccl_torch

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    if args.host_threads <= 0:
        args.host_threads = max(1, (os.cpu_count() or 1) // p)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device (use --device cpu for the CPU smoke test)")
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        device_name = torch.cuda.get_device_name(device)
        if not bool(getattr(zccl_torch._C, "with_cuda", False)):
            raise SystemExit("zccl_torch was built without its CUDA path (_C.with_cuda false)")
    else:
        device = torch.device("cpu")
        device_name = platform.processor() or platform.machine()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // p))
    contenders = [c for c in args.contenders.split(",") if c]
    collectives = [c for c in args.collectives.split(",") if c]
    for name in contenders:
        if name not in CONTENDERS:
            raise SystemExit(f"unknown contender {name!r}; expected some of {CONTENDERS}")
    for c in collectives:
        if c not in COLLECTIVES:
            raise SystemExit(f"unknown collective {c!r}; expected some of {COLLECTIVES}")

    timeout = datetime.timedelta(seconds=args.timeout_s)
    options = zccl_torch.Options(error_bound=args.rel, mode="rel")
    dist.init_process_group("zccl", timeout=timeout, pg_options=options)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    collectives_rank.warm_connections(comm, gloo)

    rows: list[dict[str, Any]] = []
    for collective in collectives:
        for mb in sizes(args):
            case = make_case(collective, int(mb * (1 << 20) / 4), args.data, comm, device)
            for name in contenders:
                if name == "nccl":
                    continue
                row = run_contender(name, case, comm, gloo, args)
                if row is None:
                    continue
                row.update(collective=collective, size_mb=mb)
                rows.append(row)
                note = (
                    f"{row['median_s'] * 1e3:.2f} ms" if "median_s" in row else row["error"][:120]
                )
                print(f"  {collective:>10} {mb:>6g} MB {name:>10}: {note}", flush=True)
            del case
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if "nccl" in contenders and "all_reduce" in collectives:
        skipped = (
            "skipped: --device cpu (NCCL needs CUDA)"
            if device.type != "cuda"
            else "skipped: --no-nccl"
            if args.no_nccl
            else None
        )
        if skipped is not None:
            nccl = [
                {"collective": "all_reduce", "contender": "nccl", "size_mb": mb, "error": skipped}
                for mb in sizes(args)
            ]
        else:
            comm.Barrier()
            nccl = nccl_rows(comm, args)
        rows.extend(nccl)
    comm.Barrier()
    dist.destroy_process_group()
    if rank != 0:
        return

    gloo_time = {
        (r["collective"], r["size_mb"]): r["median_s"]
        for r in rows
        if r["contender"] == "gloo" and "median_s" in r
    }
    for row in rows:
        base = gloo_time.get((row["collective"], row["size_mb"]))
        if "median_s" in row and base and row["median_s"] > 0:
            row["speedup_vs_gloo"] = base / row["median_s"]
    rows.sort(
        key=lambda r: (
            COLLECTIVES.index(r["collective"]),
            r["size_mb"],
            CONTENDERS.index(r["contender"]),
        )
    )
    doc = {
        "benchmark": "gpu_collectives",
        "device": args.device,
        "device_name": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "ranks": p,
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "rel": args.rel,
        "data": args.data,
        "field_edge": collectives_rank.bench_data.EDGE,
        "warmup": args.warmup,
        "iters": args.iters,
        "host_threads": args.host_threads,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"\n{p} ranks on {device_name} ({args.device}), torch {torch.__version__}, "
        f"REL {args.rel:g}, median of {args.iters} (slowest rank per iteration)"
    )
    print_table(rows)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
