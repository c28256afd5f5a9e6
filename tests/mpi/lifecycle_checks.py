"""Backend life-cycle checks under mpirun; the first argument picks one.

* ``rank_mismatch``: torch ranks that disagree with MPI's must raise a clear error.
* ``timeout``: a collective that a peer never joins fails with a timeout error naming it.
* ``no_init_on_import``: importing zccl_torch leaves MPI uninitialised; the first group
  initialises it, destroy_process_group shuts the worker down, and a new group works again.
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist

import zccl_torch


def rank_mismatch() -> None:
    p = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    r = int(os.environ["OMPI_COMM_WORLD_RANK"])
    try:
        dist.init_process_group(
            "zccl",
            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
            rank=(r + 1) % p,
            world_size=p,
            timeout=datetime.timedelta(seconds=30),
        )
    except Exception as exc:
        assert "disagree with MPI" in str(exc), str(exc)
        print("MISMATCH RAISED", flush=True)
        return
    raise AssertionError("mismatched ranks were accepted")


def timeout() -> None:
    dist.init_process_group("zccl", timeout=datetime.timedelta(seconds=3))
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        t = torch.ones(10)
        start = datetime.datetime.now()
        try:
            dist.all_reduce(t)
        except Exception as exc:
            elapsed = (datetime.datetime.now() - start).total_seconds()
            text = str(exc).lower()
            assert "timed out" in text or "did not complete" in text, str(exc)
            assert elapsed < 60, elapsed
            print(f"TIMEOUT RAISED after {elapsed:.1f} s: {str(exc).splitlines()[0]}", flush=True)
        else:
            raise AssertionError("all_reduce without peers completed")
        store.set("done", "1")
    else:
        store.wait(["done"], datetime.timedelta(seconds=120))
    # The group is broken now (a collective timed out): finalise MPI and leave without tearing
    # the group down (its communicator still has the abandoned operation).
    zccl_torch._C.finalize_mpi_if_owned()
    sys.stdout.flush()
    os._exit(0)


def no_init_on_import() -> None:
    assert not zccl_torch._C.mpi_is_initialized(), "import initialised MPI"
    dist.init_process_group("zccl")
    assert zccl_torch._C.mpi_is_initialized()
    t = torch.full((1000,), float(dist.get_rank()))
    dist.all_reduce(t)
    p = dist.get_world_size()
    assert bool((t - p * (p - 1) / 2).abs().max() < 1e-2), t[:3]
    dist.destroy_process_group()
    # A second group in the same processes (a fresh store port: the old store may still be
    # closing its connections).
    port = int(os.environ["MASTER_PORT"]) + 1
    dist.init_process_group(
        "zccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )
    dist.barrier()
    dist.destroy_process_group()
    print("LIFECYCLE OK", flush=True)


if __name__ == "__main__":
    {"rank_mismatch": rank_mismatch, "timeout": timeout, "no_init_on_import": no_init_on_import}[
        sys.argv[1]
    ]()
