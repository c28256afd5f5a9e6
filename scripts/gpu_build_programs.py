"""Builds the GPU test programs outside pytest, into one folder, for a short GPU session.

``tests/cuda/test_cuszp.cu`` (the codec program of tests/test_cuda_gpu.py) and
``tests/cuda/test_gpu_collectives.cu`` (the MPI program of tests/test_gpu_backend.py) need no torch
and no Python at run time, so they can be built ahead on a machine without a GPU (nvcc compiles
there) and carried to the GPU machine, where device time is short. Same flags as the tests: the
compile flags of tests/test_cuda_compile.py (-Werror all-warnings) and, for the codec program,
tests/test_cuda_gpu.py's (-lineinfo, so compute-sanitizer reports name source lines).

    python3 scripts/gpu_build_programs.py OUTDIR   # OUTDIR/test_cuszp, OUTDIR/test_gpu_collectives

MPI comes from the ``mpicc`` on PATH (its library path is baked in as an rpath).
"""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tests.test_cuda_compile import (  # noqa: E402
    GPU_COLL_CU,
    compile_cu,
    link_gpu_collectives_program,
    nvcc_flags,
)
from tests.test_cuda_gpu import build as build_codec_program  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ZCCL_NVCC_NICE", "0")
    with ThreadPoolExecutor(max_workers=int(os.environ.get("ZCCL_NVCC_JOBS", "8"))) as pool:
        codec = pool.submit(build_codec_program)
        flags = nvcc_flags()
        for src, proc in pool.map(lambda s: compile_cu(s, out, flags), GPU_COLL_CU):
            if proc.returncode != 0 or (proc.stdout + proc.stderr).strip():
                print(f"{src}: nvcc failed or warned\n{proc.stdout}{proc.stderr}", file=sys.stderr)
                return 1
        exe = link_gpu_collectives_program(out)
        shutil.copy2(codec.result(), out / "test_cuszp")
    print(f"built {out / 'test_cuszp'} and {exe}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
