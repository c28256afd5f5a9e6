"""The same zccl program under either launcher: ``mpirun`` (Open MPI transport) or ``torchrun``
(TCP transport, no MPI launch variables, no extra environment).

Every rank runs the compressed collectives on deterministic data, checks each result against
the documented bound (float64 reference built from every rank's input), and prints
``DIGEST <name> <rank> <sha256 of the output bytes>``. The compressed algorithms are
deterministic, so the digests must be the same under both launchers: tests/test_transport_tcp.py
compares them. It also prints ``TRANSPORT <mpi|tcp>`` and, at the end, ``LAUNCH OK``.
"""

from __future__ import annotations

import hashlib
import math
import sys

import torch
import torch.distributed as dist

import zccl_torch

EB = 1e-3


def data(r: int, n: int, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * r + 17 * salt + n)
    return (torch.randn(n, generator=g, dtype=torch.float64).cumsum(0) / math.sqrt(n) + r).float()


def digest(name: str, t: torch.Tensor) -> None:
    h = hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]
    print(f"DIGEST {name} {dist.get_rank()} {h}", flush=True)


def within(name: str, got: torch.Tensor, ref: torch.Tensor, bound: float) -> None:
    err = float((got.double() - ref).abs().max()) if got.numel() else 0.0
    # float32 rounding of the result comes on top of the compression bound
    largest = float(ref.abs().max()) if ref.numel() else 0.0
    slack = bound + 4 * torch.finfo(torch.float32).eps * largest
    if err > slack:
        raise AssertionError(f"{name}: max error {err} > {slack}")


def main() -> None:
    dist.init_process_group("zccl")
    r, p = dist.get_rank(), dist.get_world_size()
    print(f"TRANSPORT {zccl_torch.backend.transport()}", flush=True)
    n = 200_003  # a prime, compressed (800 KB per rank)
    inputs = [data(q, n) for q in range(p)]
    exact_sum = torch.stack([x.double() for x in inputs]).sum(0)

    with zccl_torch.config(error_bound=EB, mode="abs"):
        for algo in ("ring", "recursive_doubling"):
            t = inputs[r].clone()
            with zccl_torch.config(algorithm=algo):
                dist.all_reduce(t)
            stats = zccl_torch.last_stats()
            if p > 1:
                assert stats["algorithm"] == algo and stats["bytes_compressed"] > 0, stats
            bound = zccl_torch._C.output_error_bound(algo, "sum", p, EB, True)
            within(f"all_reduce {algo}", t, exact_sum, bound)
            digest(f"all_reduce_{algo}", t)

        for root in range(p):
            t = data(root, n, salt=1) if r == root else torch.zeros(n)
            dist.broadcast(t, root)
            within(f"broadcast root {root}", t, data(root, n, salt=1).double(), EB)
            digest(f"broadcast_{root}", t)

        outs = [torch.empty(n) for _ in range(p)]
        dist.all_gather(outs, inputs[r])
        for q in range(p):
            within(f"all_gather block {q}", outs[q], inputs[q].double(), EB)
        digest("all_gather", torch.cat(outs))

        full = [data(q, n * p, salt=2) for q in range(p)]
        out = torch.empty(n)
        dist.reduce_scatter_tensor(out, full[r])
        ref = torch.stack([x.double() for x in full]).sum(0)[r * n : (r + 1) * n]
        within(
            "reduce_scatter",
            out,
            ref,
            zccl_torch._C.output_error_bound("ring", "sum", p, EB, False),
        )
        digest("reduce_scatter", out)

        root = p - 1
        blocks = [data(q, n, salt=3) for q in range(p)]
        out = torch.empty(n)
        dist.scatter(out, blocks if r == root else None, src=root)
        within("scatter", out, blocks[r].double(), EB)
        digest("scatter", out)

        got = torch.arange(p * 5, dtype=torch.int64) * (r + 1)
        dist.all_reduce(got)  # exact
        assert torch.equal(got, torch.arange(p * 5, dtype=torch.int64) * (p * (p + 1) // 2))

        if p > 1:  # point-to-point ring, compressed
            dst, src = (r + 1) % p, (r - 1) % p
            recv = torch.empty(n)
            reqs = [dist.isend(inputs[r], dst), dist.irecv(recv, src)]
            for q in reqs:
                q.wait()
            within("send/recv", recv, inputs[src].double(), EB)
            digest("sendrecv", recv)

    dist.barrier()
    dist.destroy_process_group()
    print("LAUNCH OK", flush=True)


if __name__ == "__main__":
    sys.exit(main())
