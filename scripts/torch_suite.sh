#!/usr/bin/env bash
# torch's own distributed test suite (_DistTestBase) against the "zccl" backend, at 3 and 4 ranks,
# in the default (lossy), exact and compressed (lossless codec on every float payload) configs;
# prints a passed/failed/skipped table and exits non-zero on any failure. Details:
# tests/torch_suite/driver.py (results under $OUT, default /tmp/zccl_torch_suite: summary.json per
# rank count and config, rank logs per job).
#
#   scripts/torch_suite.sh                    # everything (long: tens of minutes on 2 cores)
#   NPS="3" CONFIGS="exact" scripts/torch_suite.sh -k all_reduce   # extra args go to driver.py
#
# ZCCL_SUITE_PKG_DIR=<dir holding a zccl_torch copy> tests that copy instead of the checkout's.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
NPS=${NPS:-"3 4"}
CONFIGS=${CONFIGS:-"default exact compressed"}
OUT=${OUT:-/tmp/zccl_torch_suite}
# Hard limit of the whole run (each test also has its own watchdog, each mpirun job its own).
SUITE_TIMEOUT=${SUITE_TIMEOUT:-14400}

# torch.testing imports expecttest; the pin lives in requirements-dev.txt.
if ! "$PYTHON" -c "import expecttest" 2>/dev/null; then
  pin=$(grep -E '^expecttest==' requirements-dev.txt)
  echo "[torch_suite] pip install $pin"
  "$PYTHON" -m pip install -q "$pin"
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks outnumber cores: they must yield while polling; one OpenMP thread each.
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
# driver.py launches "mpirun --oversubscribe --bind-to none" (tests/mpi_launch.py).
# shellcheck disable=SC2086 # NPS and CONFIGS are word lists
exec timeout --signal=TERM --kill-after=60 "$SUITE_TIMEOUT" \
  "$PYTHON" tests/torch_suite/driver.py --np $NPS --config $CONFIGS --out "$OUT" "$@"
