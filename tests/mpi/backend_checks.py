"""Multi-rank checks of the "zccl" torch.distributed backend; run under mpirun by the tests.

``mpirun -np P python tests/mpi/backend_checks.py [check ...]``: every rank runs the same checks
(each a function below), compares with an exact float64 reference that every rank can compute
(per-rank data comes from a seed), and exits 1 if any check failed on this rank. Uncompressed
paths are compared bit for bit with mpi4py on the same data.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from check_common import assert_within, rank, run_checks, world
from mpi4py import MPI

import zccl_torch

EB = 1e-3  # absolute bound used by the checks (mode="abs", so the bound is known exactly)
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def counts() -> list[int]:
    """Element counts every collective check runs: 0, 1, p-1, p+1, a prime, a large prime."""
    p = world()
    return sorted({0, 1, max(p - 1, 0), p + 1, 1009, 100_003})


def data(r: int, n: int, dtype: torch.dtype = torch.float32, salt: int = 0) -> torch.Tensor:
    """Smooth data distinct per rank, deterministic, so every rank can rebuild every rank's."""
    g = torch.Generator().manual_seed(1000 * r + 17 * salt + n)
    base = torch.randn(n, generator=g, dtype=torch.float64).cumsum(0) / math.sqrt(max(n, 1))
    return (base + r).to(dtype)


def float_rounding(terms: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Worst-case rounding of summing `terms` in `dtype` (gamma_{k} * sum |x_i|), in float64."""
    unit = torch.finfo(dtype).eps / 2
    k = len(terms)
    total = sum((t.double().abs() + EB) for t in terms)
    return (k * unit / (1 - k * unit)) * total


def assert_equal(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    if got.shape != ref.shape or got.dtype != ref.dtype:
        raise AssertionError(
            f"{name}: {got.dtype}{tuple(got.shape)} vs {ref.dtype}{tuple(ref.shape)}"
        )
    same = (
        (got == ref) | (torch.isnan(got) & torch.isnan(ref))
        if got.is_floating_point()
        else got == ref
    )
    if not bool(same.all()):
        i = int((~same).nonzero()[0][0]) if got.dim() else 0
        raise AssertionError(
            f"{name}: not bit-exact at {i}: {got.reshape(-1)[i]} vs {ref.reshape(-1)[i]}"
        )


def identical_across_ranks(name: str, t: torch.Tensor) -> None:
    gathered = [torch.empty_like(t) for _ in range(world())]
    with zccl_torch.config(algorithm="mpi"):
        dist.all_gather(gathered, t)
    for r, g in enumerate(gathered):
        assert_equal(f"{name} (rank {r} vs {rank()})", g, t)


def mpi_allreduce(t: torch.Tensor, op: MPI.Op) -> torch.Tensor:
    """mpi4py's reference. The zccl exact path runs MPI_Iallreduce (a deadline can be put on it);
    Open MPI's blocking and non-blocking allreduce may sum floats in different orders, so the
    reference uses the non-blocking call too: then float results must match bit for bit."""
    out = torch.empty_like(t)
    MPI.COMM_WORLD.Iallreduce(t.numpy(), out.numpy(), op=op).Wait()
    return out


def exact_float_reference(t: torch.Tensor) -> torch.Tensor:
    """The exact float SUM the backend's uncompressed path must match bit for bit: MPI's own
    (mpi4py) over the MPI transport; over the TCP transport the documented rank-order fold
    ((x0 + x1) + x2) ... in the tensor's dtype, from every rank's input (gathered by mpi4py)."""
    if zccl_torch.backend.transport() != "tcp":
        return mpi_allreduce(t, MPI.SUM)
    inputs = MPI.COMM_WORLD.allgather(t.numpy().copy())
    out = torch.from_numpy(inputs[0].copy())
    for x in inputs[1:]:
        out = out + torch.from_numpy(x)
    return out


# ----------------------------------------------------------------------------------------------


@check
def allreduce_compressed_within_bound() -> None:
    p = world()
    for dtype in (torch.float32, torch.float64):
        for algo in ("auto", "ring", "recursive_doubling", "halving_doubling", "cprp2p"):
            for op, name in (
                (dist.ReduceOp.SUM, "sum"),
                (dist.ReduceOp.AVG, "avg"),
                (dist.ReduceOp.MIN, "min"),
                (dist.ReduceOp.MAX, "max"),
            ):
                for n in counts():
                    inputs = [data(r, n, dtype) for r in range(p)]
                    t = inputs[rank()].clone()
                    with zccl_torch.config(algorithm=algo):
                        dist.all_reduce(t, op=op)
                    stack = torch.stack([x.double() for x in inputs]) if n else torch.zeros(p, 0)
                    ref = {
                        "sum": stack.sum(0),
                        "avg": stack.mean(0),
                        "min": stack.min(0).values if n else stack.sum(0),
                        "max": stack.max(0).values if n else stack.sum(0),
                    }[name]
                    if n == 0:
                        assert t.numel() == 0
                        continue
                    stats = zccl_torch.last_stats()
                    ran = stats["algorithm"]
                    if p > 1 and algo != "auto":  # the algorithm asked for ran, compressed
                        assert ran == algo and stats["bytes_compressed"] > 0, (algo, stats)
                    elif p > 1:  # auto: MPI itself below its size threshold, else compressed
                        assert ran in ("ring", "recursive_doubling", "halving_doubling", "mpi"), (
                            stats
                        )
                        assert (ran == "mpi") == (stats["bytes_compressed"] == 0), stats
                    bound = zccl_torch._C.output_error_bound(ran, name, p, EB, True)
                    rounding = float_rounding(inputs, dtype)
                    if name == "avg":
                        rounding = rounding / p + torch.finfo(dtype).eps * ref.abs()
                    if name in ("min", "max"):
                        rounding = torch.zeros_like(ref)
                    assert_within(
                        f"all_reduce {name} {dtype} {algo}({ran}) n={n}", t, ref, bound + rounding
                    )
                    identical_across_ranks(f"all_reduce {name} {dtype} {algo} n={n}", t)


@check
def allreduce_exact_dtypes_match_mpi4py() -> None:
    p = world()
    ops = [
        (dist.ReduceOp.SUM, MPI.SUM),
        (dist.ReduceOp.PRODUCT, MPI.PROD),
        (dist.ReduceOp.MIN, MPI.MIN),
        (dist.ReduceOp.MAX, MPI.MAX),
        (dist.ReduceOp.BAND, MPI.BAND),
        (dist.ReduceOp.BOR, MPI.BOR),
        (dist.ReduceOp.BXOR, MPI.BXOR),
    ]
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        for op, mop in ops:
            for n in counts():
                g = torch.Generator().manual_seed(rank() * 7 + n)
                t = torch.randint(-3 if dtype != torch.uint8 else 0, 4, (n,), generator=g).to(dtype)
                ref = mpi_allreduce(t, mop)
                dist.all_reduce(t, op=op)
                assert_equal(f"all_reduce {dtype} {op} n={n}", t, ref)
    b = torch.tensor([rank() % 2 == 0, True, False] * 5)
    ref = mpi_allreduce(b, MPI.LOR)
    dist.all_reduce(b, op=dist.ReduceOp.SUM)
    assert_equal("all_reduce bool", b, ref)
    # Floats below the compression threshold and the 'mpi' baseline are exact, like the transport's
    # own allreduce.
    for dtype in (torch.float32, torch.float64):
        x = data(rank(), 1009, dtype)
        ref = exact_float_reference(x)
        with zccl_torch.config(algorithm="mpi"):
            y = x.clone()
            dist.all_reduce(y)
        assert_equal(f"all_reduce {dtype} mpi baseline", y, ref)
        with zccl_torch.config(min_compress_bytes=1 << 30):
            y = x.clone()
            dist.all_reduce(y)
        assert_equal(f"all_reduce {dtype} below threshold", y, ref)
    _ = p


@check
def half_precision_allreduce() -> None:
    """Half tensors accumulate in float32 and travel as half streams (half the compressed bytes
    of the same values as float32). Bound: the collective's documented bound, plus one rounding
    to the half type per hop that carries a partial or final result (at most p+1 of them, each
    within eps/2 of a value no larger than sum|x_i| + p*EB), plus float32 accumulation."""
    p = world()
    for dtype in (torch.float16, torch.bfloat16):
        inputs = [data(r, 4099, torch.float32).to(dtype) for r in range(p)]
        t = inputs[rank()].clone()
        dist.all_reduce(t)
        stats = zccl_torch.last_stats()
        ref = torch.stack([x.double() for x in inputs]).sum(0)
        bound = zccl_torch._C.output_error_bound(stats["algorithm"], "sum", p, EB, True)
        magnitude = sum(x.double().abs() for x in inputs) + p * EB
        half_roundings = (p + 1) * torch.finfo(dtype).eps / 2 * magnitude
        tol = bound + half_roundings + float_rounding(inputs, torch.float32)
        assert_within(f"all_reduce {dtype}", t, ref, tol)
        if p > 1:
            wide = inputs[rank()].float()
            dist.all_reduce(wide)
            wide_stats = zccl_torch.last_stats()
            assert stats["algorithm"] == wide_stats["algorithm"], (stats, wide_stats)
            assert 2 * stats["bytes_compressed"] == wide_stats["bytes_compressed"], (
                f"{dtype} all_reduce did not send half streams: {stats} vs float32 {wide_stats}"
            )


@check
def half_precision_data_movement() -> None:
    """float16/bfloat16 in the data-movement collectives travel as native half streams: every
    value within EB of the half input (checked in float64, nothing added for rounding), replicas
    bit-identical across ranks, and the compressed bytes counted against 2-byte values."""
    p = world()
    n = 50_021
    for dtype in (torch.float16, torch.bfloat16):
        srcs = [data(400 + r, n, torch.float32).to(dtype) for r in range(p)]
        mine = srcs[rank()]
        for root in range(p):
            t = srcs[root].clone() if rank() == root else torch.zeros(n, dtype=dtype)
            dist.broadcast(t, src=root)
            stats = zccl_torch.last_stats()
            name = f"half broadcast {dtype} root {root}"
            assert_within(name, t, srcs[root], EB)
            identical_across_ranks(name, t)
            if p > 1 and rank() == root:
                assert stats["algorithm"] != "mpi", stats
                assert stats["bytes_compressed"] == n * 2, stats
        out = [torch.empty(n, dtype=dtype) for _ in range(p)]
        dist.all_gather(out, mine)
        for r in range(p):
            assert_within(f"half all_gather {dtype} from {r}", out[r], srcs[r], EB)
        flat = torch.empty(p * n, dtype=dtype)
        dist.all_gather_into_tensor(flat, mine)
        assert_within(f"half all_gather_into_tensor {dtype}", flat, torch.cat(srcs), EB)
        root = p - 1
        got = torch.empty(n, dtype=dtype)
        blocks = [srcs[r] * 2 for r in range(p)] if rank() == root else None
        dist.scatter(got, scatter_list=blocks, src=root)
        assert_within(f"half scatter {dtype}", got, srcs[rank()] * 2, EB)
        recv = torch.empty(p * 1000, dtype=dtype)
        send = torch.cat([srcs[rank()][1000 * r : 1000 * (r + 1)] for r in range(p)])
        with zccl_torch.config(min_compress_bytes=0):
            dist.all_to_all_single(recv, send)
        ref = torch.cat([srcs[r][1000 * rank() : 1000 * (rank() + 1)] for r in range(p)])
        assert_within(f"half all_to_all_single {dtype}", recv, ref, EB)


@check
def lossless_mode() -> None:
    """mode="lossless": compressed (not the exact MPI path), and bit-exact for NaN payloads,
    -0.0, denormals and infinities; all_reduce of integer-valued floats is exact in any order."""
    p = world()
    n = 40_009
    special = torch.tensor(
        [0x7FC01234, 0xFFC00001, 0x80000000, 0x00000001, 0x007FFFFF, 0x7F800000, 0xFF800000],
        dtype=torch.int64,
    ).to(torch.int32)
    with zccl_torch.config(mode="lossless", error_bound=0.5):
        for root in range(p):
            src = data(500 + root, n)
            src.view(torch.int32)[: len(special)] = special
            t = src.clone() if rank() == root else torch.zeros(n)
            dist.broadcast(t, src=root)
            assert torch.equal(t.view(torch.int32), src.view(torch.int32)), f"root {root}"
            stats = zccl_torch.last_stats()
            assert stats["error_bound"] == 0.0, stats
            if p > 1 and rank() == root:
                assert stats["algorithm"] != "mpi" and stats["bytes_compressed"] > 0, stats
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            ints = [(torch.arange(n) % (97 + r) - 40).to(dtype) for r in range(p)]
            # auto keeps reductions on MPI's exact allreduce when lossless (no ratio to gain
            # from in its cost model); the ring runs the lossless codec on every hop.
            for algorithm in ("auto", "ring"):
                t = ints[rank()].clone()
                with zccl_torch.config(algorithm=algorithm):
                    dist.all_reduce(t)
                st = zccl_torch.last_stats()
                exact = sum(x.double() for x in ints).to(dtype)
                assert_equal(f"lossless all_reduce {algorithm} {dtype}", t, exact)
                if algorithm == "ring" and p > 1:
                    assert st["algorithm"] == "ring" and st["bytes_compressed"] > 0, (dtype, st)
            out = [torch.empty(n, dtype=dtype) for _ in range(p)]
            dist.all_gather(out, ints[rank()])
            for r in range(p):
                assert_equal(f"lossless all_gather {dtype} from {r}", out[r], ints[r])


@check
def broadcast_every_root() -> None:
    p = world()
    for dtype in (torch.float32, torch.float64, torch.int32):
        for root in range(p):
            for n in counts():
                src = (
                    data(root, n, dtype)
                    if dtype.is_floating_point
                    else torch.arange(n, dtype=dtype) * (root + 1)
                )
                t = src.clone() if rank() == root else torch.zeros(n, dtype=dtype)
                dist.broadcast(t, src=root)
                name = f"broadcast root {root} n={n} {dtype}"
                stats = zccl_torch.last_stats()
                assert n == 0 or stats["op"] == "broadcast", stats
                if not dtype.is_floating_point:
                    assert_equal(name, t, src)
                    assert n == 0 or (stats["algorithm"], stats["bytes_compressed"]) == ("mpi", 0)
                    continue
                # Replicas: every rank, the root included, holds the same decoded values.
                assert_within(name, t, src, EB)
                identical_across_ranks(name, t)
                if p > 1 and n > 0:
                    assert stats["algorithm"] != "mpi", stats
                    if rank() == root:
                        assert stats["bytes_compressed"] == n * src.element_size(), stats
                # owner_exact: the root keeps its exact values.
                t = src.clone() if rank() == root else torch.zeros(n, dtype=dtype)
                with zccl_torch.config(owner_exact=True):
                    dist.broadcast(t, src=root)
                if rank() == root:
                    assert_equal(name + " owner_exact", t, src)
                else:
                    assert_within(name + " owner_exact", t, src, EB)


@check
def pipelined_broadcast_scatter() -> None:
    """Payloads above 4 MiB, which the automatic plan always splits into ~1 MiB segments (a
    chain for broadcast), both dtypes, NaN/Inf spread over the whole buffer (so across segment
    boundaries); from the first, a middle and the last root (the chain starts at the root)."""
    p = world()
    roots = sorted({0, p // 2, p - 1})
    for dtype, n in ((torch.float32, 1_100_003), (torch.float64, 550_001)):
        special = torch.arange(0, n, 65_521)  # a prime stride: hits many segments and chunks
        values = torch.tensor([math.nan, math.inf, -math.inf], dtype=dtype)
        for root in roots:
            src = data(root, n, dtype, salt=3)
            src[special] = values.repeat(len(special) // 3 + 1)[: len(special)]
            t = src.clone() if rank() == root else torch.zeros(n, dtype=dtype)
            dist.broadcast(t, src=root)
            name = f"pipelined broadcast root {root} {dtype}"
            finite = torch.isfinite(src)
            assert_equal(name + " (non-finite)", t[~finite], src[~finite])
            assert_within(name, t[finite], src[finite], EB)
            identical_across_ranks(name, t)
    m = 1_100_003  # float32 values per block
    for root in roots:
        blocks = [data(200 + r, m, salt=root) for r in range(p)] if rank() == root else None
        out = torch.empty(m)
        dist.scatter(out, scatter_list=blocks, src=root)
        assert_within(f"pipelined scatter root {root}", out, data(200 + rank(), m, salt=root), EB)


@check
def integer_ring_hop() -> None:
    """The ring all_reduce's integer hop (integer_ring=True) and float hop (default): SUM and
    AVG within p*eb (eb for AVG) in float32, float64 and the half types, every rank the same
    bits, the hop asked for the one that ran; MIN/MAX and lossless calls keep the float ring."""
    p = world()
    if p == 1:
        return
    for integer in (True, False):
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg")):
                for n in (p + 1, 1009, 300_007):
                    what = f"all_reduce {name} {dtype} n={n} integer_ring={integer}"
                    inputs = [data(r, n, dtype, salt=31) for r in range(p)]
                    t = inputs[rank()].clone()
                    with zccl_torch.config(
                        algorithm="ring", integer_ring=integer, min_compress_bytes=0, threads=1
                    ):
                        dist.all_reduce(t, op=op)
                    st = zccl_torch.last_stats()
                    assert st["algorithm"] == "ring" and st["bytes_compressed"] > 0, (what, st)
                    assert st["integer_hop"] == integer, (what, st)
                    exact = torch.stack([x.double() for x in inputs]).sum(0)
                    ref = exact / p if name == "avg" else exact
                    bound = zccl_torch._C.output_error_bound("ring", name, p, EB, True)
                    # Rounding on top: float32/64 sums (float hop) or one conversion (integer
                    # hop); half tensors: the float hop's partials travel as half streams
                    # (one rounding to the half type per hop), and the result is rounded too.
                    if dtype in (torch.bfloat16, torch.float16):
                        abs_sum = sum(x.double().abs() for x in inputs)
                        rounding = (p + 1) * torch.finfo(dtype).eps * (abs_sum + bound)
                    else:
                        rounding = float_rounding(inputs, dtype)
                    if name == "avg":
                        rounding = rounding / p + torch.finfo(dtype).eps * ref.abs()
                    assert_within(what, t, ref, bound + rounding)
                    identical_across_ranks(what, t)
    # The integer hop codes `threads` segments of ~1 MiB at a time, one per thread: 1, 2 and 3
    # give the same bits (2.5M values: 2 to 5 segments per block at p = 7 .. 2, ragged windows).
    outs = []
    for threads in (1, 2, 3):
        t = data(rank(), 2_500_003)
        with zccl_torch.config(
            algorithm="ring", integer_ring=True, min_compress_bytes=0, threads=threads
        ):
            dist.all_reduce(t)
        assert zccl_torch.last_stats()["integer_hop"], threads
        outs.append(t)
    for threads, t in zip((2, 3), outs[1:], strict=True):
        assert_equal(f"integer hop threads={threads} vs 1", t, outs[0])
    # MIN/MAX and lossless rings never take the integer hop, even when asked for.
    for op, mode in ((dist.ReduceOp.MAX, "abs"), (dist.ReduceOp.SUM, "lossless")):
        t = data(rank(), 5000)
        with zccl_torch.config(
            algorithm="ring", mode=mode, min_compress_bytes=0, integer_ring=True, threads=1
        ):
            dist.all_reduce(t, op=op)
        st = zccl_torch.last_stats()
        assert st["algorithm"] == "ring" and not st["integer_hop"], (op, mode, st)


@check
def compression_threads_change_no_bit() -> None:
    """threads = 1, 2 and 3 (chunks coded in parallel inside the pipelined ring, broadcast and
    scatter, MPI polled by the calling thread): bit-identical outputs, the streams being the
    same whatever the thread count."""
    p = world()
    n = 1_100_003  # above 4 MiB: the segmented pipelines
    outs: dict[int, list[torch.Tensor]] = {}
    for threads in (1, 2, 3):
        with zccl_torch.config(threads=threads, algorithm="ring"):
            t = data(rank(), n, salt=7)
            dist.all_reduce(t)
            b = data(0, n, salt=8) if rank() == 0 else torch.zeros(n)
            dist.broadcast(b, src=0)
            s = torch.empty(n // p + 1)
            blocks = [data(300 + r, n // p + 1) for r in range(p)] if rank() == p - 1 else None
            dist.scatter(s, scatter_list=blocks, src=p - 1)
        outs[threads] = [t, b, s]
    for threads in (2, 3):
        for name, got, ref in zip(
            ("all_reduce", "broadcast", "scatter"), outs[threads], outs[1], strict=True
        ):
            assert_equal(f"{name} threads={threads} vs 1", got, ref)


@check
def rel_bound_from_the_whole_range() -> None:
    """mode="rel": the bound is REL x (max - min) over every value of every rank (all_reduce)
    or of the root (broadcast, scatter: last_stats() says the root's bound on every rank, the
    receivers reading it in the streams), exactly as staged.h's rel_bound computes it, with the
    value range scanned by 3 threads. Run under OMP_THREAD_LIMIT=1 too (test_backend_mpi.py): a scan
    that split the values by the threads asked for, not the team it got, left slices unread and
    silently widened the range (every value lies in [5, 10], so an unread slice's 0 shows)."""
    p = world()
    rel, n = 1e-3, 1_000_003
    mine = 5.0 + 5.0 * torch.rand(n, generator=torch.Generator().manual_seed(900 + rank()))
    every = [
        5.0 + 5.0 * torch.rand(n, generator=torch.Generator().manual_seed(900 + r))
        for r in range(p)
    ]
    lo = min(float(x.min()) for x in every)
    hi = max(float(x.max()) for x in every)
    with zccl_torch.config(mode="rel", error_bound=rel, threads=3, algorithm="ring"):
        t = mine.clone()
        dist.all_reduce(t)
        st = zccl_torch.last_stats()
        assert st["error_bound"] == rel * (hi - lo), (st["error_bound"], rel * (hi - lo))
        b = mine.clone()
        dist.broadcast(b, src=p - 1)
        st = zccl_torch.last_stats()
        root = every[p - 1]
        expected = rel * (float(root.max()) - float(root.min()))
        # Every rank: the receivers read the root's bound in the streams they decoded.
        assert st["error_bound"] == expected, (st["error_bound"], expected)
        # Scatter: the root's range over all its blocks, on every rank.
        blocks = [every[p - 1][: n // p] + k for k in range(p)]
        got = torch.empty(n // p)
        dist.scatter(got, scatter_list=blocks if rank() == p - 1 else None, src=p - 1)
        hi_all = max(float(blk.max()) for blk in blocks)
        lo_all = min(float(blk.min()) for blk in blocks)
        st = zccl_torch.last_stats()
        assert st["error_bound"] == rel * (hi_all - lo_all), (st["error_bound"], hi_all, lo_all)
        assert_within("rel scatter", got, blocks[rank()].double(), rel * (hi_all - lo_all))
    exact = torch.stack([x.double() for x in every]).sum(0)
    bound = zccl_torch._C.output_error_bound("ring", "sum", p, rel * (hi - lo), True)
    assert_within("rel all_reduce", t, exact, bound + float_rounding(every, torch.float32))
    assert_within("rel broadcast", b, every[p - 1].double(), expected)


@check
def scatter_blocks_read_in_place() -> None:
    """The compressed scatter reads each root block where it lies: non-contiguous (transposed)
    blocks, half-precision blocks, and a REL bound taken over the value range of *all* blocks
    (block r is offset by 10*r, so the range, hence the bound, grows with p)."""
    p = world()
    rel = 1e-4
    for root in sorted({0, p - 1}):
        mats = [data(300 + r, 64 * 37, torch.float64).view(64, 37) + 10 * r for r in range(p)]
        with zccl_torch.config(mode="rel", error_bound=rel):
            for dtype in (torch.float32, torch.float64, torch.bfloat16):
                blocks = [m.to(dtype).t() for m in mats]  # (37, 64) views, not contiguous
                assert not blocks[0].is_contiguous()
                out = torch.empty(37, 64, dtype=dtype)
                dist.scatter(out, scatter_list=blocks if rank() == root else None, src=root)
                name = f"scatter rel root {root} {dtype}"
                lo = min(float(b.double().min()) for b in blocks)
                hi = max(float(b.double().max()) for b in blocks)
                expect = rel * (hi - lo)
                if rank() == root and p > 1:
                    # The root's own range over all blocks defines the bound, exactly so.
                    got_eb = zccl_torch.last_stats()["error_bound"]
                    assert got_eb == expect, (name, got_eb, expect)
                # bfloat16 travels as a native half stream: the bound holds against the
                # bfloat16 input itself, with nothing added for a rounding back.
                assert_within(name, out, blocks[rank()], expect)


@check
def nan_inf_pass_through() -> None:
    x = data(0, 5000)
    x[7] = float("nan")
    x[100] = float("inf")
    x[4000] = -float("inf")
    t = x.clone() if rank() == 0 else torch.zeros_like(x)
    dist.broadcast(t, src=0)
    finite = torch.isfinite(x)
    assert_equal("nan/inf positions", t[~finite], x[~finite])
    assert_within("nan/inf neighbours", t[finite], x[finite], EB)
    out = [torch.empty_like(x) for _ in range(world())]
    dist.all_gather(out, x)
    for o in out:
        assert_equal("all_gather nan/inf", o[~finite], x[~finite])
    s = x.clone()
    dist.all_reduce(s)
    assert bool(torch.isnan(s[7])) and bool(torch.isnan(s[100]) | (s[100] == float("inf")))


@check
def all_gather_variants() -> None:
    p = world()
    for dtype in (torch.float32, torch.float64, torch.int64):
        for n in counts():
            mine = data(rank(), n, dtype) if dtype.is_floating_point else torch.arange(n) + rank()
            expect = [
                data(r, n, dtype) if dtype.is_floating_point else torch.arange(n) + r
                for r in range(p)
            ]
            outs = [torch.empty_like(mine) for _ in range(p)]
            dist.all_gather(outs, mine)
            identical_across_ranks(f"all_gather {dtype} n={n}", torch.cat(outs))
            flat = torch.empty(p * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, mine)
            stats = zccl_torch.last_stats()
            if dtype.is_floating_point and p > 1 and n > 0:
                assert stats["algorithm"] == "ring" and stats["bytes_compressed"] > 0, stats
            identical_across_ranks(f"all_gather_into_tensor {dtype} n={n}", flat)
            if dtype.is_floating_point:  # owner_exact: each rank's own block stays exact
                own = torch.empty(p * n, dtype=dtype)
                with zccl_torch.config(owner_exact=True):
                    dist.all_gather_into_tensor(own, mine)
                mine_out = own[rank() * n : (rank() + 1) * n]
                assert_equal(f"all_gather owner_exact n={n}", mine_out, mine)
            for r in range(p):
                for got in (outs[r], flat[r * n : (r + 1) * n]):
                    if dtype.is_floating_point and r != rank():
                        assert_within(f"all_gather {dtype} n={n} from {r}", got, expect[r], EB)
                    elif dtype.is_floating_point:
                        assert_within(f"all_gather own {dtype} n={n}", got, expect[r], EB)
                    else:
                        assert_equal(f"all_gather {dtype} n={n}", got, expect[r])


@check
def reduce_scatter_variants() -> None:
    p = world()
    for dtype in (torch.float32, torch.float64):
        for n in counts():
            inputs = [data(r, p * n, dtype) for r in range(p)]
            ref = torch.stack([x.double() for x in inputs]).sum(0)[rank() * n : (rank() + 1) * n]
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(out, inputs[rank()].clone())
            if n == 0:
                continue
            stats = zccl_torch.last_stats()
            ran = stats["algorithm"]
            if p > 1:  # auto: MPI itself for tiny blocks, else the compressed ring
                assert ran in ("ring", "mpi"), stats
                assert (ran == "mpi") == (stats["bytes_compressed"] == 0), stats
                assert n < 1009 or ran == "ring", stats
            bound = zccl_torch._C.output_error_bound(ran, "sum", p, EB, False)
            tol = bound + float_rounding([x[rank() * n : (rank() + 1) * n] for x in inputs], dtype)
            assert_within(f"reduce_scatter_tensor {dtype} n={n}", out, ref, tol)
            out2 = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out2, list(inputs[rank()].clone().chunk(p)))
            assert_within(f"reduce_scatter {dtype} n={n}", out2, ref, tol)
    ints = [torch.arange(p * 5) * (r + 1) for r in range(p)]
    out = torch.empty(5, dtype=torch.int64)
    dist.reduce_scatter_tensor(out, ints[rank()])
    assert_equal("reduce_scatter int64", out, sum(ints)[rank() * 5 : (rank() + 1) * 5])


def premul_factor(r: int) -> float:
    """Rank r's PREMUL_SUM factor: different on every rank (NCCL allows that)."""
    return 0.5 + 0.25 * r


@check
def premul_sum() -> None:
    """ReduceOp.PREMUL_SUM(factor) (NCCL's premultiplied sum; Gloo refuses it): all_reduce,
    reduce at every root and both reduce_scatters give the SUM of every rank's input times its
    own factor (a number or a one-element tensor), within the SUM's bound; reduce leaves the
    non-roots' tensors and reduce_scatter its inputs as they were; integer dtypes and ranks that
    disagree on the op raise on every rank, and the group stays usable."""
    p, me = world(), rank()
    f = premul_factor(me)
    ops = {
        "number": lambda: dist.ReduceOp.PREMUL_SUM(f),
        "tensor": lambda: dist._make_nccl_premul_sum(torch.tensor([f], dtype=torch.float64)),
    }
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for kind, make in ops.items():
            for algo in ("auto", "ring", "mpi"):
                for n in (0, 1, p + 1, 1009, 20011):
                    inputs = [data(r, n, dtype) for r in range(p)]
                    # In the dtype the reduction accumulates in: bfloat16 in float32.
                    wide = torch.float64 if dtype == torch.float64 else torch.float32
                    scaled = [inputs[r].to(wide) * premul_factor(r) for r in range(p)]
                    ref = torch.stack([x.double() for x in scaled]).sum(0) if n else None
                    t = inputs[me].clone()
                    with zccl_torch.config(algorithm=algo):
                        dist.all_reduce(t, op=make())
                    if n == 0:
                        continue
                    stats = zccl_torch.last_stats()
                    ran = stats["algorithm"]
                    compressed = stats["bytes_compressed"] > 0
                    assert p == 1 or compressed == (ran != "mpi"), stats
                    assert algo != "ring" or p == 1 or compressed, stats
                    bound = zccl_torch._C.output_error_bound(ran, "sum", p, EB, True)
                    rounding = float_rounding(scaled, wide)
                    if dtype == torch.bfloat16:  # one rounding per hop (half_precision_allreduce)
                        magnitude = sum(x.double().abs() for x in scaled) + p * EB
                        rounding = rounding + (p + 1) * torch.finfo(dtype).eps / 2 * magnitude
                    name = f"all_reduce PREMUL_SUM({kind}) {dtype} {algo}({ran}) n={n}"
                    assert_within(name, t, ref, (bound if compressed else 0.0) + rounding)
                    identical_across_ranks(name, t)
    for root in range(p):
        n = 1009
        inputs = [data(r, n) for r in range(p)]
        t = inputs[me].clone()
        dist.reduce(t, dst=root, op=ops["number"]())
        if me == root:
            scaled = [(x * premul_factor(r)).double() for r, x in enumerate(inputs)]
            ref = torch.stack(scaled).sum(0)
            ran = zccl_torch.last_stats()["algorithm"]
            bound = zccl_torch._C.output_error_bound(ran, "sum", p, EB, True)
            tol = bound + float_rounding([x * 2 for x in inputs], torch.float32)
            assert_within(f"reduce PREMUL_SUM root {root}", t, ref, tol)
        else:
            assert_equal(f"reduce PREMUL_SUM root {root}: non-root tensor", t, inputs[me])
    n = 1009
    inputs = [data(r, p * n) for r in range(p)]
    ref = torch.stack([(x * premul_factor(r)).double() for r, x in enumerate(inputs)]).sum(0)
    ref = ref[me * n : (me + 1) * n]
    mine = inputs[me].clone()
    out = torch.empty(n)
    dist.reduce_scatter_tensor(out, mine, op=ops["tensor"]())
    assert_equal("reduce_scatter_tensor PREMUL_SUM: input", mine, inputs[me])
    ran = zccl_torch.last_stats()["algorithm"]
    bound = zccl_torch._C.output_error_bound(ran, "sum", p, EB, False)
    tol = bound + float_rounding([x[me * n : (me + 1) * n] * 2 for x in inputs], torch.float32)
    assert_within("reduce_scatter_tensor PREMUL_SUM", out, ref, tol)
    chunks = [c.clone() for c in inputs[me].chunk(p)]
    out2 = torch.empty(n)
    dist.reduce_scatter(out2, chunks, op=ops["number"]())
    assert all(torch.equal(c, o) for c, o in zip(chunks, inputs[me].chunk(p), strict=True))
    assert_within("reduce_scatter PREMUL_SUM", out2, ref, tol)
    # Integers: refused on every rank, before anything moves.
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.int64), op=ops["number"]())
    except ValueError as exc:
        assert "PREMUL_SUM needs a floating-point dtype" in str(exc), exc
    else:
        raise AssertionError("PREMUL_SUM on int64 did not raise")
    if p > 1:
        # Rank 0 premultiplies, the others sum; then every rank premultiplies but rank 0 has
        # more values. Every rank raises, naming the problem, and its tensor is as it was (the
        # factor is applied to a copy, after the ranks agreed).
        others = {2: "rank 1", 3: "ranks 1, 2"}.get(p, f"ranks 1-{p - 1}")
        refused = {
            "all_reduce, PREMUL_SUM on rank 0 only": (
                lambda t: dist.all_reduce(t, op=ops["number"]() if me == 0 else dist.ReduceOp.SUM),
                100,
                # Our message, naming each rank's op (torch's own assert on a PREMUL_SUM built
                # without its factor also says "PREMUL_SUM", and once stood in for it).
                f"reduce op: SUM on {others}, PREMUL_SUM on rank 0",
            ),
            "reduce to rank 0, a count that differs": (
                lambda t: dist.reduce(t, dst=0, op=ops["tensor"]()),
                101 if me == 0 else 100,
                "size mismatch across ranks",
            ),
        }
        for name, (call, n, needle) in refused.items():
            t = data(me, n)
            try:
                call(t)
            except (ValueError, RuntimeError) as exc:
                assert needle in str(exc), (name, exc)
            else:
                raise AssertionError(f"{name}: did not raise")
            assert_equal(f"{name}: the refused call's tensor", t, data(me, n))
    t = torch.full((10,), float(me))
    dist.all_reduce(t)
    assert_within("all_reduce after the errors", t, torch.full((10,), p * (p - 1) / 2.0), p * EB)


@check
def premul_sum_half_products_in_float32() -> None:
    """PREMUL_SUM on float16 multiplies in the float32 copy the reduction works on: a product
    beyond float16's range (40000 x 2 = 80000 on rank 0) whose sum is back in range (rank 1
    adds -30000) gives that sum rounded once (50000 -> 49984 or 50016), not the infinity of a
    product rounded to float16, on the exact path and the lossless compressed one (float32
    streams), in all_reduce, reduce at every root and reduce_scatter_tensor."""
    p, me = world(), rank()
    if p == 1:
        return
    n = 33
    value = {0: 40000.0, 1: -30000.0}.get(me, 0.0)
    op = dist.ReduceOp.PREMUL_SUM(2.0 if me == 0 else 1.0)
    want = torch.full((n,), 50000.0).to(torch.float16)
    assert torch.isfinite(want).all()
    settings = {
        "exact": {"algorithm": "mpi"},
        "lossless": {"mode": "lossless", "min_compress_bytes": 0, "algorithm": "ring"},
    }
    for label, cfg in settings.items():
        with zccl_torch.config(**cfg):
            t = torch.full((n,), value, dtype=torch.float16)
            dist.all_reduce(t, op=op)
            assert_equal(f"all_reduce PREMUL_SUM float16 ({label})", t, want)
            for root in range(p):
                t = torch.full((n,), value, dtype=torch.float16)
                dist.reduce(t, dst=root, op=op)
                if me == root:
                    assert_equal(f"reduce PREMUL_SUM float16 root {root} ({label})", t, want)
            out = torch.empty(n, dtype=torch.float16)
            dist.reduce_scatter_tensor(out, torch.full((p * n,), value, dtype=torch.float16), op=op)
            assert_equal(f"reduce_scatter_tensor PREMUL_SUM float16 ({label})", out, want)


@check
def gather_scatter_reduce_every_root() -> None:
    p = world()
    for root in range(p):
        for n in (0, 1, p + 1, 20011):
            mine = data(rank(), n)
            outs = [torch.empty_like(mine) for _ in range(p)] if rank() == root else None
            dist.gather(mine, gather_list=outs, dst=root)
            if rank() == root:
                for r in range(p):
                    assert_within(f"gather root {root} n={n} from {r}", outs[r], data(r, n), EB)
            chunks = [data(100 + r, n) for r in range(p)]
            out = torch.empty(n)
            dist.scatter(
                out, scatter_list=[c.clone() for c in chunks] if rank() == root else None, src=root
            )
            assert_within(f"scatter root {root} n={n}", out, chunks[rank()], EB)
            t = mine.clone()
            dist.reduce(t, dst=root)
            if rank() == root and n:
                ref = torch.stack([data(r, n).double() for r in range(p)]).sum(0)
                ran = zccl_torch.last_stats()["algorithm"]
                bound = zccl_torch._C.output_error_bound(ran, "sum", p, EB, True)
                tol = bound + float_rounding([data(r, n) for r in range(p)], torch.float32)
                assert_within(f"reduce root {root} n={n}", t, ref, tol)


@check
def all_to_all_with_splits() -> None:
    p = world()
    me = rank()
    # Rank r sends (r + d + 1) * 700 rows of 3 values to rank d.
    send_splits = [(me + d + 1) * 700 for d in range(p)]
    recv_splits = [(s + me + 1) * 700 for s in range(p)]
    blocks = [data(me * 31 + d, send_splits[d] * 3).reshape(-1, 3) for d in range(p)]
    inp = torch.cat(blocks)
    out = torch.empty(sum(recv_splits), 3)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    at = 0
    for s in range(p):
        expect = data(s * 31 + me, recv_splits[s] * 3).reshape(-1, 3)
        assert_within(f"all_to_all_single from {s}", out[at : at + recv_splits[s]], expect, EB)
        at += recv_splits[s]
    ins = [torch.full((4,), float(me * p + d)) for d in range(p)]
    outs = [torch.empty(4) for _ in range(p)]
    dist.all_to_all(outs, ins)
    for s in range(p):
        assert_within(f"all_to_all from {s}", outs[s], torch.full((4,), float(s * p + me)), EB)
    ints_in = torch.arange(p * 2, dtype=torch.int32) + 100 * me
    ints_out = torch.empty_like(ints_in)
    dist.all_to_all_single(ints_out, ints_in)
    expect = torch.cat([torch.arange(2, dtype=torch.int32) + 2 * me + 100 * s for s in range(p)])
    assert_equal("all_to_all_single int32", ints_out, expect)


@check
def send_recv_ring_and_async() -> None:
    p = world()
    if p == 1:
        return
    me = rank()
    nxt, prv = (me + 1) % p, (me - 1) % p
    for n, dtype in ((100_003, torch.float32), (7, torch.float32), (50_000, torch.int64)):
        mine = data(me, n) if dtype.is_floating_point else torch.arange(n) * me
        got = torch.empty(n, dtype=dtype)
        send = dist.isend(mine, nxt, tag=3)
        recv = dist.irecv(got, prv, tag=3)
        send.wait()
        recv.wait()
        expect = data(prv, n) if dtype.is_floating_point else torch.arange(n) * prv
        if dtype.is_floating_point:
            assert_within(f"isend/irecv n={n}", got, expect, EB)
        else:
            assert_equal(f"isend/irecv n={n}", got, expect)
    if me % 2 == 0 and me + 1 < p:
        dist.send(torch.ones(10) * me, me + 1)
    elif me % 2 == 1:
        buf = torch.empty(10)
        dist.recv(buf, me - 1)
        assert_within("send/recv", buf, torch.ones(10) * (me - 1), EB)


@check
def async_ops_and_futures() -> None:
    p = world()
    ts = [data(rank(), 30_000, salt=k) for k in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for k, (w, f) in enumerate(zip(works, futs, strict=True)):
        assert w.wait()
        value = f.wait()
        assert isinstance(value, list) and value[0] is not None and value[0].shape == ts[k].shape
        ref = torch.stack([data(r, 30_000, salt=k).double() for r in range(p)]).sum(0)
        bound = zccl_torch._C.output_error_bound("ring", "sum", p, EB, True)
        bound = max(
            bound, zccl_torch._C.output_error_bound("recursive_doubling", "sum", p, EB, True)
        )
        tol = bound + float_rounding([data(r, 30_000, salt=k) for r in range(p)], torch.float32)
        assert_within(f"async all_reduce {k}", value[0], ref, tol)
    dist.barrier()


@check
def subgroups() -> None:
    p = world()
    members = list(range(0, p, 2))  # every other rank: odd-sized for p in {5, 7}
    group = dist.new_group(members)
    if rank() in members:
        t = data(rank(), 10_007)
        dist.all_reduce(t, group=group)
        ref = torch.stack([data(r, 10_007).double() for r in members]).sum(0)
        q = len(members)
        bound = max(
            zccl_torch._C.output_error_bound(a, "sum", q, EB, True)
            for a in ("ring", "recursive_doubling")
        )
        assert_within(
            "subgroup all_reduce",
            t,
            ref,
            bound + float_rounding([data(r, 10_007) for r in members], torch.float32),
        )
        b = data(members[-1], 333) if rank() == members[-1] else torch.zeros(333)
        dist.broadcast(b, src=members[-1], group=group)
        assert_within("subgroup broadcast", b, data(members[-1], 333), EB)
    dist.destroy_process_group(group)
    dist.barrier()


@check
def total_stats_count_every_call() -> None:
    """zccl_torch.total_stats: the running totals equal the sum of each call's last_stats, per
    collective and in all, counted per group; reset=True returns them and starts from zero."""
    p = world()
    group = dist.new_group(list(range(p)))  # totals of its own, from zero
    empty = zccl_torch.total_stats(group)
    assert empty["calls"] == 0 and empty["by_op"] == {}, empty
    default_before = zccl_torch.total_stats()
    want: dict[str, dict[str, int]] = {}

    def note(op: str) -> None:
        st = zccl_torch.last_stats(group)
        assert st["op"] == op, (st, op)
        w = want.setdefault(op, dict.fromkeys(("calls", "compressed", "in", "sent"), 0))
        w["calls"] += 1
        w["compressed"] += st["algorithm"] != "mpi"
        w["in"] += st["bytes_in"]
        w["sent"] += st["bytes_sent"] if st["algorithm"] != "mpi" else 0

    big = data(rank(), 50_000)
    dist.all_reduce(big, group=group)
    note("all_reduce")
    dist.all_reduce(torch.arange(1000), group=group)  # integers: exact, payload counted
    note("all_reduce")
    dist.broadcast(data(0, 20_000).clone(), src=0, group=group)
    note("broadcast")
    with zccl_torch.config(algorithm="mpi"):
        dist.broadcast(data(0, 20_000).clone(), src=0, group=group)  # exact by configuration
    note("broadcast")
    work = dist.all_reduce(data(rank(), 30_000), group=group, async_op=True)
    work.wait()  # counted when it completes
    note("all_reduce")
    totals = zccl_torch.total_stats(group, reset=True)
    for op, w in want.items():
        got = totals["by_op"][op]
        assert (got["calls"], got["compressed_calls"]) == (w["calls"], w["compressed"]), (op, got)
        assert (got["bytes_in"], got["bytes_sent"]) == (w["in"], w["sent"]), (op, got, w)
    assert set(totals["by_op"]) == set(want), totals["by_op"]
    assert totals["calls"] == 5, totals
    assert totals["compressed_calls"] == sum(w["compressed"] for w in want.values()), totals
    assert totals["bytes_in"] == sum(w["in"] for w in want.values()), totals
    assert totals["bytes_sent"] == sum(w["sent"] for w in want.values()), totals
    # all_reduce's payload is every rank's whole tensor, whatever path it took
    assert totals["by_op"]["all_reduce"]["bytes_in"] == 4 * (50_000 + 30_000) + 8 * 1000
    if p > 1:  # one rank sends nothing: nothing is compressed
        assert totals["by_op"]["all_reduce"]["compressed_calls"] == 2, totals
        assert 0 < totals["bytes_sent"] and totals["compress_seconds"] > 0.0, totals
    after_reset = zccl_torch.total_stats(group)
    assert after_reset["calls"] == 0 and after_reset["by_op"] == {}, after_reset
    # The default group's totals are its own: the subgroup's calls did not change them.
    assert zccl_torch.total_stats()["calls"] == default_before["calls"]
    dist.destroy_process_group(group)


@check
def object_collectives() -> None:
    p = world()
    objs = [None] * p
    dist.all_gather_object(objs, {"rank": rank(), "name": f"r{rank()}"})
    assert objs == [{"rank": r, "name": f"r{r}"} for r in range(p)], objs
    lst = [rank() * 10, "x"] if rank() == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [0, "x"], lst


@check
def in_place_and_out_of_place() -> None:
    p = world()
    x = data(rank(), 4096).reshape(64, 64).t()  # non-contiguous view
    before = x.clone()
    dist.all_reduce(x)
    ref = torch.stack([data(r, 4096).reshape(64, 64).t().double() for r in range(p)]).sum(0)
    bound = max(
        zccl_torch._C.output_error_bound(a, "sum", p, EB, True)
        for a in ("ring", "recursive_doubling")
    )
    assert_within(
        "non-contiguous all_reduce",
        x.reshape(-1),
        ref.reshape(-1),
        bound + float_rounding([before.reshape(-1)] * p, torch.float32) * 2,
    )


@check
def size_mismatch_raises() -> None:
    n = 1000 + rank()  # every rank a different size (p >= 2)
    if world() == 1:
        return
    t = torch.ones(n)
    try:
        dist.all_reduce(t)
    except Exception as exc:
        assert "size mismatch" in str(exc), str(exc)
    else:
        raise AssertionError("all_reduce with mismatched sizes did not raise")
    dist.barrier()


@check
def config_blocks_change_only_their_fields() -> None:
    t = data(rank(), 20_000)
    with zccl_torch.config(algorithm="ring"):
        assert zccl_torch.current_options().error_bound == EB  # the group's, not the default
        assert zccl_torch.current_options().min_compress_bytes == 0
        dist.all_reduce(t)
        assert zccl_torch.last_stats()["error_bound"] == EB
        with zccl_torch.config(error_bound=2 * EB):
            dist.all_reduce(t)
            assert zccl_torch.last_stats()["error_bound"] == 2 * EB
            if world() > 1:  # one rank needs no communication: the backend reports "mpi"
                assert zccl_torch.last_stats()["algorithm"] == "ring"  # from the outer block
        dist.all_reduce(t)
        assert zccl_torch.last_stats()["error_bound"] == EB
    with zccl_torch.config(baseline="cprp2p"):
        dist.all_reduce(t)
        assert world() == 1 or zccl_torch.last_stats()["algorithm"] == "cprp2p"


@check
def bad_input_errors() -> None:
    # (complex tensors are fine: torch reduces them as real views)
    for bad, msg in (
        (lambda: dist.all_reduce(torch.ones(3).to(torch.float8_e4m3fn)), "dtype"),
        (lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND), "bitwise"),
        (lambda: dist.broadcast(torch.ones(3), src=world()), "root"),
    ):
        try:
            bad()
        except Exception as exc:
            assert msg in str(exc).lower() or "not" in str(exc).lower(), str(exc)
        else:
            raise AssertionError(f"no error for bad input ({msg})")


def main(argv: list[str]) -> int:
    # Checks run under the group's pg_options (their config() blocks only change fields).
    options = zccl_torch.Options(error_bound=EB, mode="abs", min_compress_bytes=0)
    return run_checks(CHECKS, argv, options, timeout_s=60, scoped=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
