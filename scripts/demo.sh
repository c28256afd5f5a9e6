#!/usr/bin/env bash
# The main job: sets up what is missing, then runs the compressor demo on generated seismic data.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/setup.sh
exec "$PYTHON" examples/compress_demo.py "$@"
