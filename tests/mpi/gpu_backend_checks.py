"""Multi-rank checks of the zccl backend on CUDA tensors; run under mpirun by
tests/test_gpu_backend.py (``mpirun -np P python tests/mpi/gpu_backend_checks.py [check ...]``).

Several ranks may share one GPU (rank r uses device local_rank % device_count). Every rank runs
the same checks against float64 references computed locally from per-rank seeds (or gathered
exactly with algorithm="mpi") and exits 1 if any check failed on this rank; exit code 3 (no
check run) when CUDA or the extension's CUDA path is missing, with the reason on stdout.

``--cpu-dry-run`` runs every check that needs no CUDA stream or CUDA-only behaviour on CPU
tensors instead (CI does, through tests/test_gpu_backend.py): GPU time is scarce, and a bug in a
check should not be found there.
"""

import math
import os
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from check_common import assert_within, exact_gather, rank, rounding, run_checks, world

import zccl_torch
from zccl_torch import _C
from zccl_torch.hooks import ZcclHookState, compressed_allreduce_hook
from zccl_torch.policy import Absolute

CHECKS: dict[str, Callable[[], None]] = {}
EB = 1e-3
ALGS = ("ring", "recursive_doubling")
OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def counts() -> list[int]:
    """0, 1, p-1, p+1, primes around the 64 KiB block, and a large prime (multi-chunk)."""
    p = world()
    return sorted({0, 1, max(p - 1, 1), p + 1, 16_411, 262_147})


def data(r: int, n: int, dtype: torch.dtype = torch.float32, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * r + 17 * salt + n)
    smooth = torch.randn(n, generator=g, dtype=torch.float64).cumsum(0) / math.sqrt(max(n, 1))
    return (smooth + r).to(dtype)


def assert_identical_replicas(name: str, t: torch.Tensor) -> None:
    mine = t.cpu()
    for r, other in enumerate(exact_gather(t)):
        if not torch.equal(other.cpu().view(torch.uint8), mine.view(torch.uint8)):
            raise AssertionError(f"{name}: rank {r}'s result differs from rank {rank()}'s")


# ------------------------------------------------------------------------------------------
# all_reduce


@check
def all_reduce_bounds_and_replicas() -> None:
    p = world()
    for alg in ALGS:
        for name, op in OPS.items():
            for dtype in (torch.float32, torch.float64):
                for n in counts():
                    terms = [data(r, n, dtype) for r in range(p)]
                    t = terms[rank()].to(dev(), copy=True)
                    with zccl_torch.config(algorithm=alg):
                        dist.all_reduce(t, op=op)
                    stack = torch.stack([x.double() for x in terms]) if n else None
                    if n == 0:
                        assert t.numel() == 0
                        continue
                    if name in ("sum", "avg"):
                        ref = stack.sum(0) / (p if name == "avg" else 1)
                    else:
                        ref = stack.min(0).values if name == "min" else stack.max(0).values
                    bound = _C.output_error_bound(alg, name, p, EB, True)
                    slack = rounding(terms, bound, dtype) if name in ("sum", "avg") else 0.0
                    label = f"all_reduce {alg} {name} {dtype} n={n}"
                    # Read before the replica check, whose exact all_gather replaces them.
                    stats = zccl_torch.last_stats(device=dev().type)
                    assert_within(label, t, ref, bound + slack)
                    assert_identical_replicas(label, t)
                    if p > 1 and n >= p:
                        # The GPU runs MIN/MAX by recursive doubling only; the CPU
                        # (--cpu-dry-run) also by its ring.
                        gpu_minmax = name in ("min", "max") and dev().type == "cuda"
                        want = "recursive_doubling" if gpu_minmax else alg
                        assert stats["algorithm"] == want, (label, stats)


@check
def all_reduce_half_types() -> None:
    p = world()
    n = 16_411
    for dtype in (torch.float16, torch.bfloat16):
        terms = [data(r, n, dtype) for r in range(p)]
        t = terms[rank()].to(dev(), copy=True)
        dist.all_reduce(t)
        ref = torch.stack([x.double() for x in terms]).sum(0)
        bound = _C.output_error_bound("ring", "sum", p, EB, True)
        # The widened float32 sum, then one rounding to the half type.
        slack = rounding(terms, bound, torch.float32) + torch.finfo(dtype).eps * (ref.abs() + bound)
        assert_within(f"all_reduce {dtype}", t, ref, bound + slack)


@check
def all_reduce_non_float_exact() -> None:
    p = world()
    for dtype in (torch.int32, torch.int64, torch.uint8, torch.int8):
        for n in (1, p + 1, 70_001):
            terms = [(torch.arange(n, dtype=torch.int64) * (r + 1) % 7).to(dtype) for r in range(p)]
            t = terms[rank()].to(dev(), copy=True)
            dist.all_reduce(t)
            ref = torch.stack([x.to(torch.int64) for x in terms]).sum(0).to(dtype)
            assert torch.equal(t.cpu(), ref), f"all_reduce {dtype} n={n} is not exact"
            m = terms[rank()].to(dev(), copy=True)
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
            assert torch.equal(m.cpu(), torch.stack(terms).max(0).values), f"MAX {dtype}"


@check
def float8_moves_and_unsigned_wraps() -> None:
    """float8 CUDA tensors (torch hands them over as float8 on sm90+) move bit for bit through
    broadcast and all_gather; uint32 sums wrap, as on the CPU (tests/mpi/dtype_checks.py)."""
    p = world()

    def raw(r: int, n: int, dtype: torch.dtype) -> torch.Tensor:
        g = torch.Generator().manual_seed(7 * r + n)
        return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).view(dtype)

    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for n in counts():
            for root in range(p):
                t = raw(rank(), n, dtype).to(dev(), copy=True)
                dist.broadcast(t, src=root)
                want = raw(root, n, dtype).view(torch.uint8)
                assert torch.equal(t.cpu().view(torch.uint8), want), f"broadcast {dtype} n={n}"
            flat = torch.empty(p * n, dtype=dtype, device=dev())
            dist.all_gather_into_tensor(flat, raw(rank(), n, dtype).to(dev(), copy=True))
            want = torch.cat([raw(r, n, dtype).view(torch.uint8) for r in range(p)])
            assert torch.equal(flat.cpu().view(torch.uint8), want), f"all_gather {dtype} n={n}"
    top = 2**32 - 1
    for n in counts():
        terms = [
            (torch.arange(n, dtype=torch.int64) * 7919 * (r + 1) + top - r) % 2**32
            for r in range(p)
        ]
        t = terms[rank()].to(torch.uint32).to(dev(), copy=True)
        dist.all_reduce(t)
        want = (sum(terms, torch.zeros(n, dtype=torch.int64)) % 2**32).to(torch.uint32)
        assert torch.equal(t.cpu().view(torch.int32), want.view(torch.int32)), f"uint32 n={n}"


@check
def non_finite_preserved() -> None:
    n = 16_411
    for alg in ALGS:
        for name in ("sum", "max"):
            x = data(rank(), n)
            x[5] = float("nan") if rank() == 0 else 1.0
            x[7] = float("inf")
            t = x.to(dev(), copy=True)
            with zccl_torch.config(algorithm=alg):
                dist.all_reduce(t, op=OPS[name])
            got = t.cpu()
            assert math.isnan(float(got[5])), f"{alg} {name}: NaN lost: {float(got[5])}"
            assert float(got[7]) == float("inf"), f"{alg} {name}: Inf lost: {float(got[7])}"
            assert_identical_replicas(f"non-finite {alg} {name}", t)


# ------------------------------------------------------------------------------------------
# data movement


@check
def all_gather_list_and_into_tensor() -> None:
    p = world()
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64):
        for n in counts():
            mine = data(rank(), n, dtype) if dtype.is_floating_point else torch.arange(n) * rank()
            t = mine.to(dev(), copy=True)
            outs = [torch.empty_like(t) for _ in range(p)]
            dist.all_gather(outs, t)
            flat = torch.empty(p * n, dtype=dtype, device=dev())
            dist.all_gather_into_tensor(flat, t)
            for r in range(p):
                want = data(r, n, dtype) if dtype.is_floating_point else torch.arange(n) * r
                for got in (outs[r], flat[r * n : (r + 1) * n]):
                    label = f"all_gather {dtype} n={n} block {r}"
                    # The own block is decoded from its stream too (p > 1), as on the CPU.
                    if not dtype.is_floating_point or (r == rank() and p == 1):
                        assert torch.equal(got.cpu(), want), label
                    else:
                        assert_within(label, got, want, EB)
            assert_identical_replicas(f"all_gather {dtype} n={n}", flat)
            # owner_exact: the own block is copied exactly instead.
            with zccl_torch.config(owner_exact=True):
                dist.all_gather_into_tensor(flat, t)
            own = flat[rank() * n : (rank() + 1) * n].cpu()
            assert torch.equal(own, mine), f"all_gather owner_exact {dtype} n={n}"


@check
def broadcast_every_root() -> None:
    p = world()
    for root in range(p):
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
            for n in counts():
                want = (
                    data(root, n, dtype, salt=1)
                    if dtype.is_floating_point
                    else torch.arange(n, dtype=dtype)
                )
                t = (want if rank() == root else torch.zeros(n, dtype=dtype)).to(dev(), copy=True)
                dist.broadcast(t, src=root)
                label = f"broadcast root={root} {dtype} n={n}"
                if not dtype.is_floating_point or p == 1:
                    assert torch.equal(t.cpu(), want), label
                else:
                    assert_within(label, t, want, EB)
                # The root decodes its own stream too: every rank the same bits (as on the CPU).
                assert_identical_replicas(label, t)
                # owner_exact: the root keeps its values, the others still agree.
                t = (want if rank() == root else torch.zeros(n, dtype=dtype)).to(dev(), copy=True)
                with zccl_torch.config(owner_exact=True):
                    dist.broadcast(t, src=root)
                if rank() == root:
                    assert torch.equal(t.cpu(), want), f"{label} owner_exact"
                assert_identical_replicas_except(f"{label} owner_exact", t, root)


def assert_identical_replicas_except(name: str, t: torch.Tensor, skip: int) -> None:
    """Every rank but ``skip`` holds the same bits (every rank must call it: it gathers)."""
    gathered = exact_gather(t)
    if rank() == skip:
        return
    mine = t.cpu()
    for r, other in enumerate(gathered):
        if r != skip and not torch.equal(other.cpu(), mine):
            raise AssertionError(f"{name}: rank {r} decoded differently from rank {rank()}")


@check
def scatter_every_root() -> None:
    p = world()
    for root in range(p):
        for dtype in (torch.float32, torch.float64, torch.float16, torch.int16):
            for n in counts():
                blocks = [
                    data(q, n, dtype, salt=2)
                    if dtype.is_floating_point
                    else torch.full((n,), q, dtype=dtype)
                    for q in range(p)
                ]
                out = torch.zeros(n, dtype=dtype, device=dev())
                ins = [b.to(dev(), copy=True) for b in blocks] if rank() == root else None
                dist.scatter(out, ins, src=root)
                label = f"scatter root={root} {dtype} n={n}"
                if rank() == root or not dtype.is_floating_point:
                    assert torch.equal(out.cpu(), blocks[rank()]), label
                else:
                    assert_within(label, out, blocks[rank()], EB)


# ------------------------------------------------------------------------------------------
# stream semantics


@check
def stream_semantics() -> None:
    p = world()
    n = 262_147
    want = p * (p + 1) / 2
    side = torch.cuda.Stream()
    for caller in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(caller):
            t = torch.zeros(n, device=dev())
            torch.cuda._sleep(50_000_000)  # a long kernel ahead of the fill on this stream
            t.fill_(rank() + 1.0)
            work = dist.all_reduce(t, async_op=True)  # must see the fill
            work.wait()  # the caller's stream now waits for the collective
            y = t * 2  # consumer on the caller's stream
            got = y.cpu()
        bound = 2 * (_C.output_error_bound("ring", "sum", p, EB, True) + 1e-4 * want)
        assert_within("stream semantics (wait)", got, torch.full((n,), 2 * want), bound)

        # Futures: then() runs after the result is on the caller's stream.
        with torch.cuda.stream(caller):
            t = torch.zeros(n, device=dev())
            torch.cuda._sleep(50_000_000)
            t.fill_(rank() + 1.0)
            fut = dist.all_reduce(t, async_op=True).get_future()
            z = fut.then(lambda f: f.value()[0] * 3).wait()
            got = z.cpu()
        assert_within("stream semantics (future)", got, torch.full((n,), 3 * want), 1.5 * bound)


@check
def async_ops_in_flight() -> None:
    """Several async all_reduces issued back to back, waited in reverse order, on a side stream:
    each must equal its own exact sum within bound (no buffer or stream mix-up between ops)."""
    p = world()
    n = 30_011
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensors = [data(rank(), n, salt=k).to(dev(), copy=True) for k in range(4)]
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
        for work in reversed(works):
            work.wait()
        got = [t.cpu() for t in tensors]
    bound = max(_C.output_error_bound(a, "sum", p, EB, True) for a in ALGS)
    for k, value in enumerate(got):
        terms = [data(r, n, salt=k) for r in range(p)]
        ref = torch.stack([x.double() for x in terms]).sum(0)
        slack = rounding(terms, bound, torch.float32)
        assert_within(f"async all_reduce {k}", value, ref, bound + slack)


@check
def subgroups() -> None:
    """all_reduce and broadcast on CUDA tensors inside a group of every other rank."""
    p = world()
    members = list(range(0, p, 2))
    group = dist.new_group(members)
    if rank() in members:
        n = 10_007
        terms = [data(r, n) for r in members]
        t = data(rank(), n).to(dev(), copy=True)
        dist.all_reduce(t, group=group)
        ref = torch.stack([x.double() for x in terms]).sum(0)
        q = len(members)
        bound = max(_C.output_error_bound(a, "sum", q, EB, True) for a in ALGS)
        assert_within("subgroup all_reduce", t, ref, bound + rounding(terms, bound, torch.float32))
        src = members[-1]
        b = (data(src, 333, salt=3) if rank() == src else torch.zeros(333)).to(dev(), copy=True)
        dist.broadcast(b, src=src, group=group)
        # Every member, the root included, holds the root's decoded values (q > 1).
        if q == 1:
            assert torch.equal(b.cpu(), data(src, 333, salt=3)), "subgroup broadcast of one rank"
        else:
            assert_within("subgroup broadcast", b, data(src, 333, salt=3), EB)
    dist.destroy_process_group(group)
    dist.barrier()


@check
def quantize_on_cuda_matches_cpu() -> None:
    """zccl_torch.quantize (error feedback's x' and x - x') on a CUDA tensor: the CPU's bits."""
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        x = data(rank(), 16_411, dtype)
        x[3] = float("nan")
        want, want_rest = zccl_torch.quantize(x, 1e-3, residual=True)
        got, rest = zccl_torch.quantize(x.to(dev(), copy=True), 1e-3, residual=True)
        assert got.is_cuda and rest.is_cuda, "quantize of a CUDA tensor must stay on the GPU"
        assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8)), f"x' {dtype}"
        assert torch.equal(rest.cpu().view(torch.uint8), want_rest.view(torch.uint8)), dtype
        y = x.to(dev(), copy=True)
        zccl_torch.quantize(y, 1e-3, out=y)  # in place
        assert torch.equal(y.cpu().view(torch.uint8), want.view(torch.uint8)), f"in place {dtype}"


@check
def send_recv_ring_matches_cpu() -> None:
    """isend/irecv around the ring, recv from any source and a non-contiguous receive, on CUDA
    tensors (through host memory, the CPU's codec): the same bits as on CPU tensors, within the
    bound, exact for integers."""
    p = world()
    if p == 1:
        return
    me = rank()
    nxt, prv = (me + 1) % p, (me - 1) % p
    for n, dtype in ((100_003, torch.float32), (7, torch.float64), (50_000, torch.int64)):

        def call(place, n=n, dtype=dtype):
            got = place(torch.zeros(n, dtype=dtype))
            send = dist.isend(place(values(me, n, dtype)), nxt, tag=3)
            recv = dist.irecv(got, prv, tag=3)
            send.wait()
            recv.wait()
            return [got]

        cuda_and_cpu(call, f"isend/irecv {dtype} n={n}")
        got = torch.zeros(n, dtype=dtype).to(dev(), copy=True)
        sent = dist.isend(values(me, n, dtype).to(dev(), copy=True), nxt, tag=4)
        work = dist.irecv(got, None, tag=4)  # any source
        work.wait()
        sent.wait()
        assert work._source_rank() == prv, f"any source: {work._source_rank()} != {prv}"
        want = values(prv, n, dtype)
        if dtype.is_floating_point:
            assert_within(f"recv any source {dtype} n={n}", got, want, EB)
        else:
            assert torch.equal(got.cpu(), want), f"recv any source {dtype} n={n}"
    # A non-contiguous receiving tensor (every other column of a matrix).
    grid = torch.zeros(64, 2).to(dev(), copy=True)
    column = grid[:, 0]
    sent = dist.isend(data(me, 64).to(dev(), copy=True), nxt, tag=5)
    dist.recv(column, prv, tag=5)
    sent.wait()
    assert_within("recv into a strided view", grid[:, 0], data(prv, 64), EB)
    assert torch.equal(grid[:, 1].cpu(), torch.zeros(64)), "recv wrote outside the view"


# ------------------------------------------------------------------------------------------
# reduce, reduce_scatter, gather, all_to_all and the coalesced ops: no GPU algorithm yet, so the
# CUDA device runs the CPU's compressed collectives on host copies. The same call on CPU copies
# of the inputs runs the same code on the same bytes: the results must be the same bits.


def cuda_and_cpu(
    call: Callable[[Callable[[torch.Tensor], torch.Tensor]], list[torch.Tensor]], label: str
) -> None:
    """Runs ``call(place)`` with ``place`` moving tensors to the GPU and then to the CPU, and
    compares the tensors each run returns, bit for bit."""
    on_gpu = call(lambda x: x.to(dev(), copy=True))
    on_cpu = call(lambda x: x.clone())
    for i, (g, c) in enumerate(zip(on_gpu, on_cpu, strict=True)):
        assert g.device == dev(), f"{label}: result {i} left {dev()}"
        if not torch.equal(g.cpu().view(torch.uint8), c.view(torch.uint8)):
            diff = (g.cpu().double() - c.double()).abs().max()
            raise AssertionError(f"{label}: result {i} differs from the CPU's (max |diff| {diff})")


def values(r: int, n: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    return (
        data(r, n, dtype, salt)
        if dtype.is_floating_point
        else (torch.arange(n) * (r + 1) + salt).to(dtype)
    )


# Half tensors too: the host-staged ops send the CPU's half streams (data movement: eb holds in
# the half type, which float32 streams of a widened half tensor would not; reductions: the same
# half-precision partial results as on CPU tensors).
HOST_DTYPES = (torch.float32, torch.float64, torch.int32, torch.float16, torch.bfloat16)


@check
def reduce_every_root_matches_cpu() -> None:
    p = world()
    for root in range(p):
        for op_name, op in OPS.items():
            for dtype in HOST_DTYPES:
                if op_name == "avg" and not dtype.is_floating_point:
                    continue
                for n in counts():

                    def call(place, root=root, op=op, dtype=dtype, n=n):
                        t = place(values(rank(), n, dtype))
                        dist.reduce(t, dst=root, op=op)
                        # torch defines the result at dst only: the CPU's ring leaves partial
                        # sums in other ranks' tensors, the host-staged CUDA op their input.
                        return [t] if rank() == root else []

                    cuda_and_cpu(call, f"reduce root={root} {op_name} {dtype} n={n}")
    # An independent bound at the root: SUM within p * eb of the exact float64 sum (+ rounding).
    n = 262_147
    t = data(rank(), n).to(dev(), copy=True)
    dist.reduce(t, dst=0)
    if rank() == 0:
        terms = [data(r, n).double() for r in range(p)]
        assert_within("reduce sum bound", t, sum(terms), p * EB + rounding(terms, EB))


@check
def reduce_scatter_matches_cpu() -> None:
    p = world()
    for op_name, op in OPS.items():
        for dtype in HOST_DTYPES:
            if op_name == "avg" and not dtype.is_floating_point:
                continue
            for n in counts():

                def call(place, op=op, dtype=dtype, n=n):
                    ins = [place(values(rank(), n, dtype, salt=q)) for q in range(p)]
                    out = place(torch.zeros(n, dtype=dtype))
                    dist.reduce_scatter(out, ins, op=op)
                    flat = place(torch.cat([values(rank(), n, dtype, salt=q) for q in range(p)]))
                    out2 = place(torch.zeros(n, dtype=dtype))
                    dist.reduce_scatter_tensor(out2, flat, op=op)
                    return [out, out2]

                cuda_and_cpu(call, f"reduce_scatter {op_name} {dtype} n={n}")


@check
def premul_sum_on_cuda() -> None:
    """ReduceOp.PREMUL_SUM (every rank's input times its own factor, then summed), the factor a
    number or a one-element tensor on the device: all_reduce (the GPU's algorithms) within the
    SUM's bound of the premultiplied sum, every replica the same bits; reduce_scatter (staged
    through the host) the CPU's bits, its input left as it was."""
    p = world()
    factor = 0.5 + 0.25 * rank()
    makers = {
        "number": lambda: dist.ReduceOp.PREMUL_SUM(factor),
        "tensor": lambda: dist._make_nccl_premul_sum(torch.tensor([factor], device=dev())),
    }
    for alg in ALGS:
        for kind, make in makers.items():
            for n in counts():
                terms = [data(r, n) * (0.5 + 0.25 * r) for r in range(p)]  # float32, as the op
                t = data(rank(), n).to(dev(), copy=True)
                with zccl_torch.config(algorithm=alg):
                    dist.all_reduce(t, op=make())
                if n == 0:
                    continue
                label = f"all_reduce {alg} PREMUL_SUM({kind}) n={n}"
                bound = _C.output_error_bound(alg, "sum", p, EB, True)
                ref = torch.stack([x.double() for x in terms]).sum(0)
                assert_within(label, t, ref, bound + rounding(terms, bound))
                assert_identical_replicas(label, t)
    for n in counts():

        def call(place, n=n):
            flat = place(torch.cat([data(rank(), n, salt=q) for q in range(p)]))
            out = place(torch.zeros(n))
            dist.reduce_scatter_tensor(out, flat, op=makers["tensor"]())
            return [out, flat]

        cuda_and_cpu(call, f"reduce_scatter_tensor PREMUL_SUM n={n}")
        flat = torch.cat([data(rank(), n, salt=q) for q in range(p)])
        out = torch.zeros(n, device=dev())
        kept = flat.to(dev(), copy=True)
        dist.reduce_scatter_tensor(out, kept, op=makers["number"]())
        assert torch.equal(kept.cpu(), flat), "reduce_scatter_tensor PREMUL_SUM changed its input"


@check
def premul_sum_half_products_in_float32_on_cuda() -> None:
    """PREMUL_SUM on float16 CUDA tensors multiplies in the float32 copy the reduction works
    on: rank 0's 40000 x 2 = 80000 (beyond float16) plus rank 1's -30000 gives 50000, not
    the infinity of a product rounded to float16. Exact (algorithm="mpi": all_reduce, and the
    host-staged reduce / reduce_scatter, pinned so, since `auto` may compress 33 values when
    min_compress_bytes is 0): 50000 rounded once, the CPU's bits; all_reduce on the GPU's
    algorithms (float32 partials): finite and within the SUM's bound plus one float16 rounding
    (16 at 50000). Not that last part in the CPU dry run: a lossy reduction of CPU tensors
    sends half partials, and 80000 is past float16 (README, "What is compressed")."""
    p, me = world(), rank()
    if p == 1:
        return
    n = 33
    value = {0: 40000.0, 1: -30000.0}.get(me, 0.0)
    want = torch.full((n,), 50000.0).to(torch.float16)

    def op() -> dist.ReduceOp:
        return dist.ReduceOp.PREMUL_SUM(2.0 if me == 0 else 1.0)

    def mine(count: int = n) -> torch.Tensor:
        return torch.full((count,), value, dtype=torch.float16)

    def finite(label: str, t: torch.Tensor) -> None:
        assert bool(torch.isfinite(t).all()), f"{label}: {t[:3]}"

    with zccl_torch.config(algorithm="mpi"):
        t = mine().to(dev())
        dist.all_reduce(t, op=op())
        assert torch.equal(t.cpu(), want), f"all_reduce PREMUL_SUM float16 exact: {t[:3]}"
    for alg in ALGS if dev().type == "cuda" else ():
        t = mine().to(dev())
        with zccl_torch.config(algorithm=alg):
            dist.all_reduce(t, op=op())
        label = f"all_reduce {alg} PREMUL_SUM float16"
        finite(label, t)
        bound = _C.output_error_bound(alg, "sum", p, EB, True)
        assert_within(label, t, want.double(), bound + 16.0)
        assert_identical_replicas(label, t)
    for root in range(p):

        def reduce_call(place, root=root):
            t = place(mine())
            with zccl_torch.config(algorithm="mpi"):  # see the docstring: exact, host-staged
                dist.reduce(t, dst=root, op=op())
            if me == root:
                finite(f"reduce PREMUL_SUM float16 root {root} on {t.device}", t)
            return [t]

        cuda_and_cpu(reduce_call, f"reduce PREMUL_SUM float16 root {root}")

    def reduce_scatter_call(place):
        out = place(torch.empty(n, dtype=torch.float16))
        with zccl_torch.config(algorithm="mpi"):
            dist.reduce_scatter_tensor(out, place(mine(p * n)), op=op())
        finite(f"reduce_scatter_tensor PREMUL_SUM float16 on {out.device}", out)
        return [out]

    cuda_and_cpu(reduce_scatter_call, "reduce_scatter_tensor PREMUL_SUM float16")


@check
def recv_smaller_than_the_message_raises_on_cuda() -> None:
    """A CUDA receive smaller than the message fails with the CPU path's ValueError ("recv:
    size mismatch"), exact and compressed payloads alike, and the group goes on working."""
    p, me = world(), rank()
    if p == 1:
        return
    for n, dtype in ((1000, torch.int32), (70_001, torch.float32)):
        if me == 0:
            dist.send(torch.ones(n, dtype=dtype).to(dev(), copy=True), dst=1, tag=22)
        elif me == 1:
            try:
                dist.recv(torch.empty(n // 10, dtype=dtype, device=dev()), src=0, tag=22)
            except ValueError as exc:
                assert "recv: size mismatch" in str(exc), str(exc)
            else:
                raise AssertionError(f"a CUDA receive of {n // 10} values took {n} unchecked")
        dist.barrier()
    t = torch.full((5,), float(me)).to(dev(), copy=True)
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(t)
    assert float(t[0]) == p * (p - 1) / 2, t


@check
def gather_every_root_matches_cpu() -> None:
    p = world()
    for root in range(p):
        for dtype in HOST_DTYPES:
            for n in counts():

                def call(place, root=root, dtype=dtype, n=n):
                    t = place(values(rank(), n, dtype))
                    outs = [place(torch.zeros(n, dtype=dtype)) for _ in range(p)]
                    dist.gather(t, outs if rank() == root else None, dst=root)
                    return outs if rank() == root else [t]

                cuda_and_cpu(call, f"gather root={root} {dtype} n={n}")


@check
def all_to_all_matches_cpu() -> None:
    p = world()

    def split(src: int, dst: int) -> int:  # rows rank src sends to rank dst (uneven)
        return (src + 2 * dst) % 3 + (1 if src != dst else 0)

    for dtype in HOST_DTYPES:
        for row in (1, 4099):

            def call(place, dtype=dtype, row=row):
                send = [split(rank(), q) for q in range(p)]
                recv = [split(q, rank()) for q in range(p)]
                inp = place(values(rank(), sum(send) * row, dtype).view(-1, row))
                out = place(torch.zeros(sum(recv), row, dtype=dtype))
                dist.all_to_all_single(out, inp, recv, send)
                ins = [place(values(rank(), row * (q + 1), dtype, salt=q)) for q in range(p)]
                outs = [place(torch.zeros(row * (rank() + 1), dtype=dtype)) for _ in range(p)]
                dist.all_to_all(outs, ins)
                return [out, *outs]

            cuda_and_cpu(call, f"all_to_all {dtype} row={row}")


@check
def coalesced_ops_match_cpu() -> None:
    p = world()
    for dtype in HOST_DTYPES:

        def call(place, dtype=dtype):
            ins = [place(values(rank(), n, dtype, salt=n)) for n in (5, 16_411)]
            gathered = [place(torch.zeros(p * x.numel(), dtype=dtype)) for x in ins]
            scattered = [place(torch.zeros(x.numel(), dtype=dtype)) for x in ins]
            flats = [
                place(torch.cat([values(rank(), x.numel(), dtype, q) for q in range(p)]))
                for x in ins
            ]
            with dist._coalescing_manager():
                for g, x in zip(gathered, ins, strict=True):
                    dist.all_gather_into_tensor(g, x)
            with dist._coalescing_manager():
                for o, f in zip(scattered, flats, strict=True):
                    dist.reduce_scatter_tensor(o, f)
            lists = [[place(torch.zeros_like(x.cpu())) for x in ins] for _ in range(p)]
            dist.all_gather_coalesced(lists, ins)
            return [*gathered, *scattered, *(t for lst in lists for t in lst)]

        cuda_and_cpu(call, f"coalesced {dtype}")


@check
def host_staged_stream_semantics() -> None:
    """A host-staged op (reduce_scatter_tensor) issued on a side stream right after a long
    kernel and a fill: it must see the fill, and a consumer on that stream after wait() must see
    its result."""
    p = world()
    n = 262_147
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        flat = torch.zeros(p * n, device=dev())
        torch.cuda._sleep(50_000_000)
        flat.fill_(rank() + 1.0)
        out = torch.zeros(n, device=dev())
        dist.reduce_scatter_tensor(out, flat, async_op=True).wait()
        got = (out * 2).cpu()
    want = p * (p + 1) / 2
    assert_within(
        "host-staged stream semantics", got, torch.full((n,), 2 * want), 2 * p * EB + 1e-4 * want
    )
    if p == 1:
        return
    # send/recv: the send sees the fill; the consumer after the receive's wait() sees its values.
    with torch.cuda.stream(side):
        mine = torch.zeros(n, device=dev())
        torch.cuda._sleep(50_000_000)
        mine.fill_(rank() + 1.0)
        sent = dist.isend(mine, (rank() + 1) % p, tag=6)
        got_t = torch.zeros(n, device=dev())
        dist.irecv(got_t, (rank() - 1) % p, tag=6).wait()
        doubled = (got_t * 2).cpu()
        sent.wait()
    prev = (rank() - 1) % p + 1.0
    assert_within("send/recv stream semantics", doubled, torch.full((n,), 2 * prev), 2 * EB)


@check
def sparse_all_reduce_matches_cpu() -> None:
    """SUM of sparse COO tensors on this device (DDP's sparse embedding gradients; CUDA: on a host
    copy): the same bits as on CPU tensors, sparse and coalesced, with the result on the device;
    a rank with no entries and a dense trailing dimension included."""
    g = torch.Generator().manual_seed(rank())
    nnz = 0 if rank() == 0 else 5 + rank()
    idx = torch.randint(0, 20, (1, nnz), generator=g)
    val = torch.randn(nnz, 3, generator=g, dtype=torch.float64).to(torch.float32)

    def call(place: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        t = torch.sparse_coo_tensor(place(idx), place(val), (20, 3), check_invariants=True)
        dist.all_reduce(t)
        assert t.is_sparse and t.is_coalesced(), "sparse all_reduce: not a coalesced sparse result"
        return [t.to_dense()]

    cuda_and_cpu(call, "sparse all_reduce")


@check
def fsdp_trains_like_exact() -> None:
    """fully_shard on a mesh of this device (fsdp_checks.py's model and batches; CUDA: parameter
    all-gathers on the GPU, gradient reduce-scatters on host copies): the loss within 2 % of the
    same training with exact collectives at every step, and different from it (the collectives
    compressed) when there is more than one rank."""
    from fsdp_checks import LOSS_TOLERANCE, fsdp2, train

    world_group = dist.group.WORLD
    with zccl_torch.config(min_compress_bytes=0):
        compressed = train(fsdp2(world_group, dev()), world_group, dev())
    with zccl_torch.config(algorithm="mpi"):
        exact = train(fsdp2(world_group, dev()), world_group, dev())
    for step, (got, want) in enumerate(zip(compressed, exact, strict=True)):
        assert abs(got - want) <= LOSS_TOLERANCE * abs(want), f"FSDP step {step}: {got} vs {want}"
    # One rank moves nothing: its runs are the same. Otherwise the collectives compressed.
    assert (compressed != exact) == (world() > 1), "FSDP: compressed and exact runs"


# ------------------------------------------------------------------------------------------
# DDP


@check
def ddp_hook_on_cuda() -> None:
    p = world()
    torch.manual_seed(0)  # identical initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 8)
    ).to(dev())  # a module: moved, not copied
    ids = [dev().index] if dev().type == "cuda" else None
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    # After DDP's initial broadcast (exact, see state_transfer_exact): this rank's weights.
    reference = [param.detach().clone() for param in model.parameters()]
    state = ZcclHookState(policy=Absolute(EB), start_iter=0)
    ddp.register_comm_hook(state, compressed_allreduce_hook)
    g = torch.Generator().manual_seed(rank())
    x = torch.randn(32, 64, generator=g).to(dev(), copy=True)
    y = torch.randn(32, 8, generator=g).to(dev(), copy=True)
    ddp.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    # Exact reference: each rank's local gradient of the same weights, averaged exactly.
    local = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 8)
    ).to(dev())  # a module: moved, not copied
    with torch.no_grad():
        for dst, src in zip(local.parameters(), reference, strict=True):
            dst.copy_(src)
    torch.nn.functional.mse_loss(local(x), y).backward()
    for name, (mine, ref_param) in enumerate(
        zip(model.parameters(), local.parameters(), strict=True)
    ):
        grads = exact_gather(ref_param.grad.contiguous())
        avg = torch.stack([gr.cpu().double() for gr in grads]).mean(0)
        bound = 2 * p * EB + 1e-5 * (avg.abs() + 1)
        assert_within(f"ddp grad {name}", mine.grad, avg, bound)
        assert_identical_replicas(f"ddp grad {name}", mine.grad.contiguous())


# ------------------------------------------------------------------------------------------
# State transfer (zccl_torch/state_transfer.py)


@check
def state_transfer_exact() -> None:
    """DDP's construction broadcast and DTensor's distribute_tensor (shards of uneven size, and
    replicas) copy rank 0's tensors bit for bit, on the device's mesh; ranks start apart."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    p = world()
    failures = []
    source = (torch.randn(9 * p + 2, 129, generator=torch.Generator().manual_seed(3)) * 4).to(dev())
    mine = source if rank() == 0 else torch.randn(source.shape).to(dev())
    mesh = DeviceMesh.from_group(dist.group.WORLD, dev().type)
    for placement in (Shard(0), Shard(1), Replicate()):
        local = distribute_tensor(mine, mesh, [placement]).to_local()
        want = source if placement.is_replicate() else source.chunk(p, placement.dim)[rank()]
        if not torch.equal(local, want):
            failures.append(f"distribute_tensor {placement}")

    def model(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 8)).to(dev())

    wrapped = model(seed=rank())  # ranks apart; DDP copies rank 0's
    ids = [dev().index] if dev().type == "cuda" else None
    torch.nn.parallel.DistributedDataParallel(wrapped, device_ids=ids)
    for (name, got), want in zip(
        wrapped.named_parameters(), model(seed=0).parameters(), strict=True
    ):
        if not torch.equal(got.detach(), want.detach()):
            failures.append(f"DDP {name}")
    # Every rank learns of every failure before raising: rank 0 (the source) always passes.
    count = torch.tensor([len(failures)])
    with zccl_torch.config(algorithm="mpi"):
        dist.all_reduce(count)
    assert int(count) == 0, f"{int(count)} copies not bit-identical; here: {failures}"


# ------------------------------------------------------------------------------------------


# Checks that only mean something on a GPU (CUDA streams, the GPU's elementwise quantiser): left
# out of --cpu-dry-run.
CUDA_ONLY = {
    "stream_semantics",
    "async_ops_in_flight",
    "quantize_on_cuda_matches_cpu",
    "host_staged_stream_semantics",
}


def main(argv: list[str]) -> int:
    options = zccl_torch.Options(min_compress_bytes=0, mode="abs", error_bound=EB)
    if argv[:1] == ["--cpu-dry-run"]:
        global dev

        def dev() -> torch.device:
            return torch.device("cpu")

        names = argv[1:] or [name for name in CHECKS if name not in CUDA_ONLY]
        return run_checks(CHECKS, names, options, timeout_s=120, scoped=True)
    if not torch.cuda.is_available():
        print("SKIP no CUDA device", flush=True)
        return 3
    if not getattr(_C, "with_cuda", False):
        print("SKIP extension built without CUDA", flush=True)
        return 3
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(local % torch.cuda.device_count())
    return run_checks(CHECKS, argv, options, timeout_s=120, scoped=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
