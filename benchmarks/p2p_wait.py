"""``dist.send`` / ``dist.recv`` ping-pong between 2 ranks on one host, over both transports.

Why it exists: zccl's point-to-point operations are driven by a progress thread, which slept
20 us between polls whenever a transfer was pending. Open MPI moves a large message only while
it is polled, so on shared memory a 16 MB exchange paid that sleep for every fragment (about 1 GB/s
where the collectives' path reached several). The thread now yields instead of sleeping while a
posted transfer should still be moving (``transfer_spin_budget``, csrc/transport/backoff.h).

``python3 benchmarks/p2p_wait.py [--reps 8]``: one mpirun per transport (``ZCCL_TRANSPORT``),
uint8 tensors (never compressed), rank 0 sends then receives, rank 1 the reverse; median of
``--reps`` round trips (after two untimed). Writes ``--out`` (JSON). Under mpirun it runs as one
rank (``--rank``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from local_mpirun import driver_arguments, run_per_setting  # noqa: E402

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 24)  # bytes


def rank_main(reps: int) -> None:
    import torch
    import torch.distributed as dist

    import zccl_torch  # noqa: F401  (registers "zccl"; under mpirun, torch's launch variables)

    dist.init_process_group("zccl")
    me = dist.get_rank()
    for n in SIZES:
        out = torch.zeros(n, dtype=torch.uint8)
        back = torch.empty(n, dtype=torch.uint8)
        times = []
        for _ in range(reps + 2):
            dist.barrier()
            start = time.perf_counter()
            if me == 0:
                dist.send(out, 1)
                dist.recv(back, 1)
            else:
                dist.recv(back, 0)
                dist.send(out, 0)
            times.append(time.perf_counter() - start)
        if me == 0:
            ms = statistics.median(times[2:]) * 1e3
            print(json.dumps({"bytes": n, "round_trip_ms": ms}), flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = driver_arguments(__doc__.splitlines()[0], HERE / "results" / "p2p_wait.json")
    args = parser.parse_args()
    if args.rank:
        rank_main(args.reps)
        return
    results = run_per_setting(2, __file__, args.reps, "ZCCL_TRANSPORT", ("mpi", "tcp"))
    print(f"{'bytes':>9} {'mpi ms':>8} {'tcp ms':>8}")
    for mpi, tcp in zip(results["mpi"], results["tcp"], strict=True):
        print(f"{mpi['bytes']:>9} {mpi['round_trip_ms']:8.3f} {tcp['round_trip_ms']:8.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
