"""Prints the speed-up summary of ``scripts/demo.sh``: the zccl all_reduce of the stacked image
against exact Open MPI at its default algorithm choice and at the best of its forced algorithms
(summaries written by ``examples/image_stacking.py --summary``). Exit status 1 when a summary
says the documented error bound was violated."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: Path) -> int:
    default = json.loads((folder / "default.json").read_text())
    forced = {
        path.stem.removeprefix("forced_"): json.loads(path.read_text())
        for path in sorted(folder.glob("forced_*.json"))
    }
    zccl = default["zccl_ms"]
    print(f"\n=== summary: all_reduce SUM of the {default['image_mb']:.2f} MB image on "
          f"{default['ranks']} emulated hosts, 1 Gbit/s links ===")
    zccl_name = f"zccl ({default['zccl_algorithm']}, REL {default['rel']:g})"
    print(f"  {zccl_name:<34}: {zccl:9.2f} ms   "
          f"PSNR {default['psnr_db']:.1f} dB, max error / bound "
          f"{default['max_error'] / max(default['bound'], 1e-300):.3f}")
    print(f"  {'exact MPI, default choice':<34}: {default['exact_mpi_ms']:9.2f} ms   "
          f"zccl is x{default['exact_mpi_ms'] / zccl:.2f} faster")
    for name, s in forced.items():
        print(f"  {'exact MPI forced ' + name:<34}: {s['exact_mpi_ms']:9.2f} ms")
    if forced:
        best = min(forced, key=lambda k: forced[k]["exact_mpi_ms"])
        best_ms = forced[best]["exact_mpi_ms"]
        print(f"  {'best exact MPI (' + best + ')':<34}: {best_ms:9.2f} ms   "
              f"zccl is x{best_ms / zccl:.2f} faster")
    ok = all(s["bound_check_passed"] for s in (default, *forced.values()))
    print("  bound check: " + ("passed on every run" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
