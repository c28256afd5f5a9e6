"""Runs inside the emulated cluster (tests/test_cluster.py): every rank sits in its own
namespace on the cluster subnet, links are shaped, and zccl and Gloo work across namespaces."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import time

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import zccl_torch


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    addr = ipaddress.ip_interface(out[3])
    subnet = ipaddress.ip_network(os.environ["ZC_TEST_SUBNET"])
    assert addr.ip in subnet, f"rank {rank}: {addr} not in {subnet}"
    addrs = comm.allgather(str(addr.ip))
    assert len(set(addrs)) == p, f"ranks share namespaces: {addrs}"

    # Shaping: a ring of concurrent 8 MB transfers cannot beat the tbf rate (10% slack for the
    # bucket and timer granularity).
    rate = float(os.environ["ZC_TEST_RATE_BPS"]) / 8
    buf = np.ones(8 << 20, dtype=np.uint8)
    recv = np.empty_like(buf)
    comm.Sendrecv(buf[: 1 << 20], (rank + 1) % p, 1, recv[: 1 << 20], (rank - 1) % p, 1)
    comm.Barrier()
    start = time.perf_counter()
    comm.Sendrecv(buf, (rank + 1) % p, 2, recv, (rank - 1) % p, 2)
    elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    achieved = buf.nbytes / elapsed
    assert achieved <= 1.1 * rate, f"{achieved:.3g} B/s through a {rate:.3g} B/s link"

    dist.init_process_group(
        "zccl",
        timeout=datetime.timedelta(seconds=120),
        pg_options=zccl_torch.Options(error_bound=1e-3, mode="abs"),
    )
    x = torch.linspace(0, 1, 200_000) + rank
    y = x.clone()
    dist.all_reduce(y)
    exact = sum(torch.linspace(0, 1, 200_000).double() + r for r in range(p))
    err = float((y.double() - exact).abs().max())
    assert err <= p * 1e-3 * (1 + 1e-6), f"zccl all_reduce error {err}"
    gloo = dist.new_group(backend="gloo")
    z = x.clone()
    dist.all_reduce(z, group=gloo)
    assert float((z.double() - exact).abs().max()) < 1e-4
    measured = {t: measured_gbps(t) for t in ("mpi", "tcp")}
    for transport, gbps in measured.items():
        # The shaped rate, within the shaping check's slack above and a generous one below (the
        # probe's 1 MiB also pays the latency and TCP's acknowledgements).
        assert 0.5 * rate * 8 / 1e9 <= gbps <= 1.1 * rate * 8 / 1e9, (transport, gbps, rate)
    dist.destroy_process_group()
    if rank == 0:
        links = ", ".join(f"{t} {g * 1e3:.0f}" for t, g in measured.items())
        print(f"CLUSTER OK {p} ranks, {achieved * 8 / 1e6:.0f} Mbit/s achieved, measured {links}")


def measured_gbps(transport: str) -> float:
    """link_gbps of a zccl group created with ZCCL_MEASURE_LINK=1 over ``transport``."""
    os.environ.update(ZCCL_MEASURE_LINK="1", ZCCL_TRANSPORT=transport)
    try:
        group = dist.new_group(backend="zccl")
    finally:
        for name in ("ZCCL_MEASURE_LINK", "ZCCL_TRANSPORT"):
            os.environ.pop(name)
    return zccl_torch.current_options(group).link_gbps


if __name__ == "__main__":
    main()
