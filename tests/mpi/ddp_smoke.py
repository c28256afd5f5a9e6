"""DDP on the zccl backend: a few steps of a small model on 2 ranks; replicas stay identical and
the loss goes down. Run under mpirun by tests/test_backend_mpi.py."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import zccl_torch


def main() -> None:
    dist.init_process_group(
        "zccl",
        timeout=datetime.timedelta(seconds=60),
        pg_options=zccl_torch.Options(error_bound=1e-4, mode="rel", min_compress_bytes=0),
    )
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(256, 32, generator=g)
    w = torch.randn(32, 1, generator=torch.Generator().manual_seed(7))
    y = x @ w
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    with zccl_torch.config(algorithm="mpi"):
        dist.all_gather(copies, flat)
    # DDP syncs the initial parameters with a (compressed) broadcast, so replicas start within the
    # broadcast's bound of rank 0; gradients are all-reduced to bit-identical values on every
    # rank, so the replicas never drift further apart than that.
    spread = max(float((c - copies[0]).abs().max()) for c in copies)
    bound = 1e-4 * float(flat.max() - flat.min()) * 2
    assert spread <= bound, f"replicas diverged: {spread} > {bound}"
    assert losses[-1] < 0.5 * losses[0], losses
    if rank == 0:
        print(f"DDP OK: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
