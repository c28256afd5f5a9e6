"""Alpha-beta model of every collective, fed with a run's calibration, next to its measurements.

Parameters come from ``benchmarks/cluster/calibrate.py`` as stored in the results of
``benchmarks/collectives.py``: a = one-way latency, B = achieved link rate (bytes/s, all links
busy), C / D = fZ-light compression / decompression rate per rank with every rank busy (so an
oversubscribed host's sharing of cores is included), R = compression ratio on the benchmark
data; G = elementwise reduction rate (memory-bound, taken equal to D). n = the collective's size
(nccl-tests convention, as in the benchmark), p = ranks, L = ceil(log2 p).

Uncompressed MPI, the best of the algorithms Open MPI can be forced to:
  all_reduce      min(ring 2(p-1)a + 2(p-1)/p n/B + (p-1)/p n/G,  RD L(a + n/B + n/G))
  reduce_scatter  (p-1)a + (p-1)/p n (1/B + 1/G)            all_gather  (p-1)a + (p-1)/p n/B
  broadcast       min(binomial L(a + n/B), scatter+allgather (L+p-1)a + 2(p-1)/p n/B,
                      pipelined chain n/B + (p-2)a + 2 sqrt((p-2) a n/B))
  scatter         (p-1)a + (p-1)/p n/B                       (the root's link carries it all)
zccl (terms add up: the model assumes no overlap of compression and wire, except where noted):
  all_reduce ring     segmented cut-through pipeline (s = min(1 MiB, n/p) per segment):
                      max(2(p-1)/p n/(BR), n/(pC) + n/(pD) + (p-1)/p n (1/C + 2/D + 1/G))
                      + 2(p-1)(a + s/(BR)) + s/C + s/D
  all_reduce RD       L(a + n/(BR) + n/C + 2n/D + n/G)           (power-of-two p)
  all_reduce cprp2p   2(p-1)a + 2(p-1)/p n/(BR) + n/C + 2(p-1)/p n/D + (p-1)/p n/G
                      + (p-1)/p n (1/C + 1/D) - n/(pC)  (store and forward; recompresses per hop)
  reduce_scatter      segmented: max((p-1)/p n/(BR), (p-1)/p n (1/C + 1/D + 1/G))
                      + (p-1)(a + s/(BR)) + s/C + s/D
  all_gather          (p-1)a + n/(pC) + (p-1)/p n (1/(BR) + 1/D)
  broadcast           pipelined chain of S compressed segments:
                      max(n/C, n/(BR), n/D) + (p-2 + 2)(a + n/(S BR)) with S = max(p, n / 1 MiB)
  scatter             pipelined: max((p-1)/p n/C, (p-1)/p n/(BR)) + n/(pD) + (p-1)a
Run: ``python benchmarks/model.py [benchmarks/results/collectives.json]``; prints predicted vs
measured times and speedups, and the sizes above which the model says compression pays.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIB = float(1 << 20)


@dataclass(frozen=True)
class Params:
    """One calibrated network + codec (units: seconds, bytes/s)."""

    a: float
    B: float
    C: float
    D: float
    R: float

    @property
    def G(self) -> float:  # noqa: N802 (the model's symbol)
        return self.D

    @classmethod
    def from_calibration(cls, cal: dict) -> Params:
        return cls(
            a=cal["latency_s"],
            B=cal["link_Bps"],
            C=cal["compress_Bps"],
            D=cal["decompress_Bps"],
            R=cal["ratio"],
        )


def mpi_time(coll: str, n: float, p: int, m: Params) -> float:
    """Best uncompressed MPI algorithm's predicted time."""
    f, lg = (p - 1) / p, math.ceil(math.log2(p))
    if coll == "all_reduce":
        ring = 2 * (p - 1) * m.a + 2 * f * n / m.B + f * n / m.G
        return min(ring, lg * (m.a + n / m.B + n / m.G))
    if coll == "reduce_scatter":
        return (p - 1) * m.a + f * n * (1 / m.B + 1 / m.G)
    if coll in ("all_gather", "scatter"):
        return (p - 1) * m.a + f * n / m.B
    if coll == "broadcast":
        chain = n / m.B + (p - 2) * m.a + 2 * math.sqrt(max(p - 2, 0) * m.a * n / m.B)
        return min(lg * (m.a + n / m.B), (lg + p - 1) * m.a + 2 * f * n / m.B, chain)
    raise ValueError(f"unknown collective {coll!r}")


def zccl_time(coll: str, algorithm: str, n: float, p: int, m: Params) -> float:
    """zccl's predicted time; ``algorithm`` is the one that ran (ring/recursive_doubling/...)."""
    f, lg, wire = (p - 1) / p, math.ceil(math.log2(p)), m.B * m.R
    seg = min(MIB, n / p)  # the ring's segment (RingSegments: ~1 MiB)
    fill = seg / m.C + seg / m.D  # the first segment's codec work, before the pipeline is full
    if coll == "all_reduce":
        if algorithm == "recursive_doubling":
            return lg * (m.a + n / wire + n / m.C + 2 * n / m.D + n / m.G)
        if algorithm == "cprp2p":
            store_forward = (
                2 * (p - 1) * m.a + 2 * f * n / wire + n / m.C + 2 * f * n / m.D + f * n / m.G
            )
            return store_forward + f * n * (1 / m.C + 1 / m.D) - n / (p * m.C)
        codec = n / (p * m.C) + n / (p * m.D) + f * n * (1 / m.C + 2 / m.D + 1 / m.G)
        return max(2 * f * n / wire, codec) + 2 * (p - 1) * (m.a + seg / wire) + fill
    if coll == "reduce_scatter":
        codec = f * n * (1 / m.C + 1 / m.D + 1 / m.G)
        return max(f * n / wire, codec) + (p - 1) * (m.a + seg / wire) + fill
    if coll == "all_gather":
        return (p - 1) * m.a + n / (p * m.C) + f * n * (1 / wire + 1 / m.D)
    if coll == "broadcast":
        segments = max(p, n / MIB)
        return max(n / m.C, n / wire, n / m.D) + p * (m.a + n / segments / wire)
    if coll == "scatter":
        return max(f * n / m.C, f * n / wire) + n / (p * m.D) + (p - 1) * m.a
    raise ValueError(f"unknown collective {coll!r}")


def compare(result: dict) -> list[dict]:
    """Model vs measurement for every zccl row of a collectives.py result."""
    out = []
    for s in result["summary"]:
        if not s["contender"].startswith("zccl") or "mpi_best_s" not in s:
            continue
        cal = result["calibration"].get(str(s["ranks"])) or result["calibration"].get(s["ranks"])
        if not cal or "link_Bps" not in cal:
            continue
        m = Params.from_calibration(cal)
        n, p = s["bytes"], s["ranks"]
        alg = s.get("algorithm_ran") or "ring"
        t_z, t_m = zccl_time(s["collective"], alg, n, p, m), mpi_time(s["collective"], n, p, m)
        out.append(
            {
                "ranks": p,
                "collective": s["collective"],
                "size_mb": s["size_mb"],
                "contender": s["contender"],
                "algorithm": alg,
                "measured_s": s["time_s"],
                "predicted_s": t_z,
                "mpi_measured_s": s["mpi_best_s"],
                "mpi_predicted_s": t_m,
                "measured_speedup": s["speedup_vs_mpi_best"],
                "predicted_speedup": t_m / t_z,
            }
        )
    return out


def crossover(coll: str, p: int, m: Params, algorithm: str = "ring") -> float | None:
    """Smallest size (bytes, powers of two from 4 KiB to 4 GiB) where zccl is predicted to win."""
    for k in range(12, 33):
        n = float(1 << k)
        if zccl_time(coll, algorithm, n, p, m) < mpi_time(coll, n, p, m):
            return n
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "result", type=Path, nargs="?", default=HERE / "results" / "collectives.json"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON (default: next to input)")
    args = parser.parse_args()
    result = json.loads(args.result.read_text())
    rows = compare(result)
    print(
        f"{'p':>2} {'collective':>14} {'MB':>5} {'contender':>12} {'meas s':>8} {'model s':>8} "
        f"{'MPI meas':>8} {'MPI model':>9} {'speedup meas':>12} {'model':>6}"
    )
    for r in rows:
        print(
            f"{r['ranks']:>2} {r['collective']:>14} {r['size_mb']:>5g} {r['contender']:>12} "
            f"{r['measured_s']:>8.4f} {r['predicted_s']:>8.4f} {r['mpi_measured_s']:>8.4f} "
            f"{r['mpi_predicted_s']:>9.4f} {r['measured_speedup']:>11.2f}x "
            f"{r['predicted_speedup']:>5.2f}x"
        )
    thresholds = {}
    for p_key, cal in result["calibration"].items():
        if "link_Bps" not in cal:
            continue
        m = Params.from_calibration(cal)
        p = int(p_key)
        thresholds[p] = {
            c: crossover(c, p, m)
            for c in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "scatter")
        }
        pretty = ", ".join(
            f"{c} {v / 1024:.0f} KiB" if v else f"{c} never" for c, v in thresholds[p].items()
        )
        print(f"p={p}: compression predicted to pay from: {pretty}")
    out = args.out or args.result.with_name(args.result.stem + "_model.json")
    out.write_text(
        json.dumps(
            {"source": str(args.result), "rows": rows, "crossover_bytes": thresholds}, indent=1
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
