#!/usr/bin/env bash
# Sets up what is missing, then runs every check: ruff (lint and format), and the whole pytest suite (unit,
# property, sanitizer-built C++ tests, multi-rank tests under mpirun, example/benchmark smoke tests).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/setup.sh
echo "[test] ruff"
"$PYTHON" -m ruff check .
"$PYTHON" -m ruff format --check .
echo "[test] pytest"
exec "$PYTHON" -m pytest -q --timeout=900 "$@"
