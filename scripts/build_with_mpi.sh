#!/usr/bin/env bash
# Builds zccl_torch against another MPI library into a package folder of its own, without touching
# the checkout's installed build: DIR/site/zccl_torch (put DIR/site first on PYTHONPATH).
#
#   MPICC=mpicc.mpich scripts/build_with_mpi.sh DIR     # Debian's MPICH (the default MPICC here)
#
# The build shares the checkout's build tree: only MPI's five transport files see MPI's headers
# (setup.py, mpi_compile_args), so only they recompile, in seconds. Prints the build's output.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$(realpath -m "${1:?usage: MPICC=... $0 DIR}")
PYTHON=${PYTHON:-python3}
export MPICC=${MPICC:-mpicc.mpich}
"$PYTHON" setup.py build_ext --build-lib "$DIR/lib"
rm -rf "$DIR/site/zccl_torch"
mkdir -p "$DIR/site/zccl_torch"
cp zccl_torch/*.py zccl_torch/*.pyi zccl_torch/py.typed "$DIR/site/zccl_torch/"
cp "$DIR"/lib/zccl_torch/_C*.so "$DIR/site/zccl_torch/"
echo "built against $MPICC: PYTHONPATH=$DIR/site"
