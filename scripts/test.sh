#!/usr/bin/env bash
# Sets up what is missing, then runs every check: ruff (lint and format), and the whole pytest suite (unit,
# property, sanitizer-built C++ tests, multi-rank tests under mpirun, example/benchmark smoke tests).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# MPICH beside Open MPI: tests/test_mpich.py builds and runs zccl against it too.
ZCCL_SETUP_EXTRA_APT="mpich libmpich-dev" scripts/setup.sh
echo "[test] ruff"
"$PYTHON" -m ruff check .
"$PYTHON" -m ruff format --check .
echo "[test] pytest"
# --durations: the slowest tests at the end of every run, so that the suite's time (budget: 25
# minutes on 2 cores) can be watched and trimmed where it goes.
exec "$PYTHON" -m pytest -q --timeout=900 --durations=20 "$@"
