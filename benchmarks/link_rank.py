"""One rank of ``benchmarks/link_measure.py``: the network a zccl group measures
(``ZCCL_MEASURE_LINK=1``, set by the driver) and what ``algorithm="auto"`` does with it.

The default group measures its link when it is created; then ``--measures`` more calls of
``zccl_torch.measure_link`` show the spread and what one costs. Each collective is timed
(median over ``--iters`` of the slowest rank's time, as ``launch_rank.py`` does) under auto with
the measured link (the group's defaults) and under auto with the default link (1 Gbit/s, 25 us,
in a ``config()`` block), the two alternating, recording whether each call compressed. Prints
JSON lines (rank 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_rank import call, slowest

import zccl_torch

# The group's own (measured when it was created), and the settings' defaults.
LINKS: dict[str, dict[str, float]] = {
    "measured": {},
    "default": {"link_gbps": 1.0, "link_latency_us": 25.0},
}


def timed_pair(run: Callable[[], object], iters: int) -> dict[str, dict[str, Any]]:
    """Per link (measured, default): median slowest-rank seconds over ``iters`` calls, whether
    the calls compressed, the algorithm that ran. The two alternate, each call after the
    other's, so that drift on a noisy host hits both alike."""
    times: dict[str, list[float]] = {name: [] for name in LINKS}
    ran: dict[str, str] = {}
    compressed: dict[str, bool] = {}
    for i in range(iters + 1):  # the first round warms connections and buffers
        order = list(LINKS) if i % 2 == 0 else list(reversed(LINKS))
        for name in order:
            with zccl_torch.config(**LINKS[name]):  # type: ignore[arg-type]
                before = zccl_torch.total_stats()["compressed_calls"]
                dist.barrier()
                start = time.perf_counter()
                run()
                seconds = time.perf_counter() - start
                compressed[name] = zccl_torch.total_stats()["compressed_calls"] > before
                ran[name] = zccl_torch.last_stats()["algorithm"]  # before slowest()'s own call
            elapsed = slowest(seconds)
            if i > 0:
                times[name].append(elapsed)
    return {
        name: {
            "s": statistics.median(times[name]),
            "compressed": compressed[name],
            "algorithm": ran[name] if compressed[name] else "exact",
        }
        for name in LINKS
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectives", default="all_reduce,broadcast,all_gather,scatter")
    parser.add_argument("--sizes-mb", default="16")
    parser.add_argument("--rel", type=float, default=1e-4)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--measures", type=int, default=5)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    start = time.perf_counter()
    dist.init_process_group("zccl")
    created_s = slowest(time.perf_counter() - start)
    head = {
        "label": args.label,
        "transport": zccl_torch.backend.transport(),
        "ranks": dist.get_world_size(),
    }
    on_create = zccl_torch.current_options()
    again = []
    for _ in range(args.measures):
        start = time.perf_counter()
        est = zccl_torch.measure_link()
        again.append((est.gbps, est.latency_us, slowest(time.perf_counter() - start)))
    if dist.get_rank() == 0:
        row = {
            **head,
            "kind": "measure",
            "init_s": created_s,
            "gbps": on_create.link_gbps,
            "latency_us": on_create.link_latency_us,
            "again_gbps": [g for g, _, _ in again],
            "again_latency_us": [lat for _, lat, _ in again],
            "measure_s": [s for _, _, s in again],
        }
        print(json.dumps(row), flush=True)
    for mb in (float(s) for s in args.sizes_mb.split(",")):
        numel = int(mb * (1 << 20)) // 4
        for collective in args.collectives.split(","):
            _, run = call(collective, numel)
            row = {**head, "kind": "time", "collective": collective, "size_mb": mb}
            with zccl_torch.config(error_bound=args.rel, mode="rel"):
                row.update(timed_pair(run, args.iters))
            if dist.get_rank() == 0:
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
