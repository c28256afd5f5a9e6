"""Multi-rank checks of the dtypes beyond the classic ones: unsigned 16/32/64-bit integers reduce
with wrapping arithmetic, float8 and other dtypes without arithmetic move through every
data-movement collective bit for bit, and reductions or moves that cannot be done raise on every
rank, naming the dtype. (Gloo refuses all of these dtypes, so the references are numpy's
arithmetic and every rank's own rebuilt input, not Gloo.)

``mpirun -np P python tests/mpi/dtype_checks.py [check ...]``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from check_common import rank, run_checks, world

import zccl_torch

CHECKS: dict[str, Callable[[], None]] = {}
UNSIGNED = {torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64}
# Reduced over their whole range: uint8 too, whose MIN/MAX MPICH 4.0 took for signed (200 < 5).
UNSIGNED_REDUCED = {torch.uint8: np.uint8, **UNSIGNED}
# Dtypes the exact path has no arithmetic for: moved as their bytes.
WITHOUT_ARITHMETIC = (
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
    torch.float4_e2m1fn_x2,
    torch.bits8,
    torch.bits16,
)
MOVED = (*WITHOUT_ARITHMETIC, *UNSIGNED)
REDUCTIONS: dict[Any, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    dist.ReduceOp.SUM: np.add,
    dist.ReduceOp.PRODUCT: np.multiply,
    dist.ReduceOp.MIN: np.minimum,
    dist.ReduceOp.MAX: np.maximum,
    dist.ReduceOp.BAND: np.bitwise_and,
    dist.ReduceOp.BOR: np.bitwise_or,
    dist.ReduceOp.BXOR: np.bitwise_xor,
}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def counts() -> list[int]:
    """0, 1, p-1, p+1, primes."""
    p = world()
    return sorted({0, 1, max(p - 1, 0), p + 1, 1009, 30_011})


def moved_input(r: int, n: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank r's n values of ``dtype``: random bytes (NaN and Inf patterns included), which every
    rank can rebuild."""
    size = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator().manual_seed(100_003 * r + 7 * n + salt)
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    return raw.view(dtype)


def unsigned_input(r: int, n: int, dtype: torch.dtype, op: Any) -> np.ndarray:
    """Rank r's values over the whole range, so that sums and products wrap."""
    np_type = UNSIGNED_REDUCED[dtype]
    rng = np.random.default_rng([12_345, r, n, int(op)])
    return rng.integers(0, np.iinfo(np_type).max, size=n, dtype=np_type, endpoint=True)


def unsigned_reference(n: int, dtype: torch.dtype, op: Any) -> np.ndarray:
    """numpy's fold over the ranks in rank order (unsigned arithmetic wraps in numpy too)."""
    parts = [unsigned_input(r, n, dtype, op) for r in range(world())]
    return functools.reduce(REDUCTIONS[op], parts[1:], parts[0].copy())


def cat(parts: list[torch.Tensor]) -> torch.Tensor:
    """torch.cat for any dtype (torch has no cat kernel for several of these)."""
    dtype = parts[0].dtype
    return torch.cat([t.reshape(-1).view(torch.uint8) for t in parts]).view(dtype)


def same_bytes(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
    a, b = got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)
    if not torch.equal(a, b):
        i = int((a != b).nonzero()[0])
        raise AssertionError(f"{name}: byte {i} is {int(a[i])}, expected {int(b[i])}")


def raises_here(name: str, fn: Callable[[], Any], *needles: str) -> str:
    """fn() raises ValueError on this rank naming every needle (returned: the message); then
    the ranks are still in step (a barrier passes)."""
    try:
        fn()
    except ValueError as exc:
        text = str(exc)
    else:
        raise AssertionError(f"{name}: no error on rank {rank()}")
    for needle in needles:
        assert needle in text, f"{name}: {needle!r} not in {text!r}"
    dist.barrier()
    return text


@check
def unsigned_reductions_wrap() -> None:
    """all_reduce, reduce at every root and reduce_scatter_tensor on uint8/16/32/64 for every op
    torch has for integers, against numpy's wrapping arithmetic (MIN/MAX over values with the
    top bit set: MPICH 4.0's own MPI_MIN/MPI_MAX compare them as signed)."""
    p = world()
    for dtype in UNSIGNED_REDUCED:
        for op in REDUCTIONS:
            for n in counts():
                want = unsigned_reference(n, dtype, op)
                t = torch.from_numpy(unsigned_input(rank(), n, dtype, op))
                dist.all_reduce(t, op=op)
                assert np.array_equal(t.numpy(), want), f"all_reduce {dtype} {op} n={n}"
            n = 1009
            want = unsigned_reference(n, dtype, op)
            for root in range(p):
                t = torch.from_numpy(unsigned_input(rank(), n, dtype, op))
                dist.reduce(t, dst=root, op=op)
                if rank() == root:
                    assert np.array_equal(t.numpy(), want), f"reduce {dtype} {op} root={root}"
            block = 257
            full = unsigned_reference(block * p, dtype, op)
            out = torch.empty(block, dtype=dtype)
            dist.reduce_scatter_tensor(
                out, torch.from_numpy(unsigned_input(rank(), block * p, dtype, op)), op=op
            )
            mine = full[rank() * block : (rank() + 1) * block]
            assert np.array_equal(out.numpy(), mine), f"reduce_scatter_tensor {dtype} {op}"
        raises_here(
            f"AVG on {dtype}",
            lambda dtype=dtype: dist.all_reduce(torch.zeros(4, dtype=dtype), op=dist.ReduceOp.AVG),
            "AVG needs a floating-point dtype",
        )


@check
def broadcast_every_root() -> None:
    for dtype in MOVED:
        for n in counts():
            for root in range(world()):
                t = moved_input(rank(), n, dtype, salt=root)
                dist.broadcast(t, src=root)
                same_bytes(
                    f"broadcast {dtype} n={n} root={root}", t, moved_input(root, n, dtype, root)
                )


@check
def gathers() -> None:
    """all_gather (list and into one tensor) and gather at every root."""
    p = world()
    for dtype in MOVED:
        for n in counts():
            want = [moved_input(r, n, dtype) for r in range(p)]
            x = moved_input(rank(), n, dtype)
            outs = [torch.empty(n, dtype=dtype) for _ in range(p)]
            dist.all_gather(outs, x)
            for r in range(p):
                same_bytes(f"all_gather {dtype} n={n} from {r}", outs[r], want[r])
            flat = torch.empty(n * p, dtype=dtype)
            dist.all_gather_into_tensor(flat, x)
            same_bytes(f"all_gather_into_tensor {dtype} n={n}", flat, cat(want))
            for root in range(p):
                outs = [torch.empty(n, dtype=dtype) for _ in range(p)] if rank() == root else None
                dist.gather(x, gather_list=outs, dst=root)
                for r in range(p) if outs is not None else ():
                    same_bytes(f"gather {dtype} n={n} root={root} from {r}", outs[r], want[r])


@check
def scatter_every_root() -> None:
    p = world()
    for dtype in MOVED:
        for n in counts():
            for root in range(p):
                parts = [moved_input(root, n, dtype, salt=q) for q in range(p)]
                out = torch.empty(n, dtype=dtype)
                dist.scatter(out, scatter_list=parts if rank() == root else None, src=root)
                same_bytes(
                    f"scatter {dtype} n={n} root={root}", out, moved_input(root, n, dtype, rank())
                )


@check
def all_to_all_uneven() -> None:
    """all_to_all_single with uneven splits (rank r sends r + q + 1 values to rank q) and the
    list form."""
    p = world()
    for dtype in MOVED:
        send = [rank() + q + 1 for q in range(p)]
        recv = [r + rank() + 1 for r in range(p)]
        x = moved_input(rank(), sum(send), dtype)
        out = torch.empty(sum(recv), dtype=dtype)
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send)
        pieces = []
        for r in range(p):
            theirs = moved_input(r, sum(r + q + 1 for q in range(p)), dtype)
            start = sum(r + q + 1 for q in range(rank()))
            pieces.append(theirs[start : start + r + rank() + 1])
        same_bytes(f"all_to_all_single {dtype}", out, cat(pieces))
        ins = list(torch.split(x, send))
        outs = [torch.empty(c, dtype=dtype) for c in recv]
        dist.all_to_all(outs, ins)
        for r in range(p):
            same_bytes(f"all_to_all {dtype} from {r}", outs[r], pieces[r])


@check
def send_recv_ring() -> None:
    p = world()
    if p == 1:
        return
    for dtype in MOVED:
        for n in counts():
            nxt, prv = (rank() + 1) % p, (rank() - 1) % p
            out = torch.empty(n, dtype=dtype)
            works = [dist.isend(moved_input(rank(), n, dtype), nxt), dist.irecv(out, prv)]
            for w in works:
                w.wait()
            same_bytes(f"send/recv {dtype} n={n}", out, moved_input(prv, n, dtype))


@check
def other_dtypes_move_by_their_bytes() -> None:
    """complex64 reaches the backend as itself through gather (torch's Python views it as float
    pairs only in some functions): its bytes move exactly."""
    p = world()
    want = [moved_input(r, 101, torch.complex64) for r in range(p)]
    outs = [torch.empty(101, dtype=torch.complex64) for _ in range(p)] if rank() == 0 else None
    dist.gather(want[rank()].clone(), gather_list=outs, dst=0)
    for r in range(p) if outs is not None else ():
        same_bytes(f"gather complex64 from {r}", outs[r], want[r])


@check
def impossible_calls_raise_on_every_rank() -> None:
    """Reductions on dtypes without arithmetic, 16-byte elements, sub-byte shell dtypes and
    sparse sums torch cannot add: a ValueError naming the dtype and the reason,
    on every rank, before anything moves."""
    for dtype in WITHOUT_ARITHMETIC:
        name = str(dtype).removeprefix("torch.")
        x = moved_input(rank(), 64, dtype)
        for what, call in (
            ("all_reduce", lambda x=x: dist.all_reduce(x)),
            ("reduce", lambda x=x: dist.reduce(x, dst=0, op=dist.ReduceOp.MAX)),
            (
                "reduce_scatter_tensor",
                lambda x=x: dist.reduce_scatter_tensor(
                    torch.empty(64, dtype=x.dtype), moved_input(rank(), 64 * world(), x.dtype)
                ),
            ),
        ):
            text = raises_here(f"{what} {name}", call, "reductions need", what)
            assert name.lower() in text.lower(), (what, name, text)
    wide = torch.zeros(8, dtype=torch.complex128)
    outs = [torch.empty_like(wide) for _ in range(world())] if rank() == 0 else None
    raises_here(
        "gather complex128",
        lambda: dist.gather(wide, gather_list=outs, dst=0),
        "ComplexDouble",
        "16-byte",
        "view_as_real",
    )
    # The sub-byte shell dtypes: torch itself has no copy kernel for them.
    shell = torch.zeros(8, dtype=torch.uint8).view(torch.uint4)
    raises_here(
        "broadcast uint4", lambda: dist.broadcast(shell, src=0), "UInt4", "view(torch.uint8)"
    )
    idx, vals = torch.tensor([[0, 2]]), torch.tensor([1, 2], dtype=torch.uint32)
    sparse = torch.sparse_coo_tensor(idx, vals, (4,))
    raises_here("sparse uint32", lambda: dist.all_reduce(sparse), "UInt32", "cannot be summed")
    t = torch.ones(4)
    dist.all_reduce(t)  # the group still works
    assert float(t[0]) == world()


def main(argv: list[str]) -> int:
    options = zccl_torch.Options(error_bound=1e-3, mode="abs", min_compress_bytes=0)
    return run_checks(CHECKS, argv, options, timeout_s=60, scoped=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
