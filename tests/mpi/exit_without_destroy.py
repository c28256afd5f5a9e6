"""A script that ends without ``destroy_process_group`` (as many training scripts do): runs a
send/recv ring shift and a compressed all_reduce, prints that both were right and returns at
once (the race is with the last op's clean-up).

The backend's threads must never drop a reference to a Python-owned tensor once the interpreter
is finalizing (that takes the GIL, which then ends the thread inside a destructor:
std::terminate, exit code 134, after a correct run). tests/test_transport_tcp.py runs it
several times under torchrun and wants every run to exit cleanly.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import zccl_torch  # noqa: F401  (registers the backend)

dist.init_process_group(backend="zccl")
rank, p = dist.get_rank(), dist.get_world_size()
got = torch.empty(1000)
works = [
    dist.isend(torch.full((1000,), float(rank)), (rank + 1) % p),
    dist.irecv(got, (rank - 1) % p),
]
for w in works:
    w.wait()
assert torch.equal(got, torch.full((1000,), float((rank - 1) % p))), "send/recv"
t = torch.linspace(0, 1, 100_000) + rank
dist.all_reduce(t)
want = torch.linspace(0, 1, 100_000) * p + p * (p - 1) / 2
assert float((t - want).abs().max()) <= 1e-3 * p, "all_reduce out of bound"
print(f"[rank {rank}] exit without destroy: ok", flush=True)
