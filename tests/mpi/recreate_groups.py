"""Re-creating zccl groups in one process: init_process_group / new_group / destroy three times,
one rank arriving late each time. Launched by tests/test_transport_tcp.py under torchrun (whose
store outlives the groups, so a re-created group finds the keys of the one before it: the third
creation hung until the timeout) and under mpirun over both transports.

Prints ``recreate ok rank R of P`` once every round passed.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist

import zccl_torch

ROUNDS = 3


def main() -> None:
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    for i in range(ROUNDS):
        if rank == 1:
            time.sleep(1.0)  # the others must wait for this rank, not read the last round's keys
        options = zccl_torch.Options(error_bound=1e-3, mode="abs", algorithm="ring")
        dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=60), pg_options=options)
        p = dist.get_world_size()
        sub = dist.new_group(list(range(p)), pg_options=options)
        x = torch.linspace(0.0, 1.0, 1 << 17)
        for group in (None, sub):
            t = x + float(dist.get_rank() + i)
            dist.all_reduce(t, group=group)
            want = p * x.double() + p * (p - 1) / 2 + p * i
            assert float((t.double() - want).abs().max()) <= p * 1e-3 + 1e-4, (i, group)
            assert p == 1 or zccl_torch.last_stats(group)["bytes_compressed"] > 0
        dist.destroy_process_group()
    print(f"recreate ok rank {rank} of {p}", flush=True)


if __name__ == "__main__":
    main()
