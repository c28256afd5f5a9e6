#!/usr/bin/env bash
# The main job: sets up what is missing, then stacks RTM shot images over 4 MPI ranks with the
# exact MPI all_reduce and the compressed zccl one, checks the error bound and writes a PNG
# (examples/output/image_stacking.png). Extra arguments go to examples/image_stacking.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Oversubscribed ranks must yield the CPU while polling; one thread per rank on 2 cores.
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec timeout "${ZCCL_DEMO_TIMEOUT:-600}" mpirun --oversubscribe --bind-to none -np "${NP:-4}" \
  "$PYTHON" examples/image_stacking.py "$@"
