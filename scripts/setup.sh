#!/usr/bin/env bash
# Idempotent setup on a Debian machine: apt packages, pinned pip packages, the extension build.
# Fast when everything is already there (a few seconds): each step checks before it installs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_PIN=${ZCCL_TORCH_PIN:-torch==2.13.0}

# 1. System packages: Open MPI (library, headers, mpirun) and a C++ toolchain; ZCCL_SETUP_EXTRA_APT
#    names more (scripts/test.sh: MPICH, which the suite builds zccl against too; Debian keeps Open
#    MPI the default mpicc/mpirun beside it).
# shellcheck disable=SC2206  # a space-separated list, split on purpose
apt_packages=(libopenmpi-dev openmpi-bin g++ make libzstd-dev ${ZCCL_SETUP_EXTRA_APT:-})
missing=()
for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "[setup] apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q "${missing[@]}" >/dev/null ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "${missing[@]}" >/dev/null; }
fi

# 2. Python packages. torch only if absent (CPU wheel pinned; an installed torch is kept, so a
#    CUDA build of torch stays the one the extension compiles against).
torch_version=$("$PYTHON" -c "from importlib import metadata as m; print(m.version('torch'))" 2>/dev/null || true)
if [ -z "$torch_version" ]; then
  echo "[setup] pip install $TORCH_PIN"
  "$PYTHON" -m pip install -q "$TORCH_PIN"
  torch_version=$("$PYTHON" -c "from importlib import metadata as m; print(m.version('torch'))")
fi
if ! "$PYTHON" scripts/check_requirements.py requirements-dev.txt; then
  echo "[setup] pip install -r requirements-dev.txt"
  "$PYTHON" -m pip install -q -r requirements-dev.txt
fi

# 3. The extension, rebuilt only when its sources, build files or torch changed, or when the
#    installed (editable) package points at another checkout, e.g. after a clone elsewhere.
stamp_file=.zccl_build_stamp
stamp=$( { cat setup.py pyproject.toml; find csrc -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z | xargs -0 cat; echo "$torch_version"; } | sha256sum | cut -d' ' -f1)
installed_at=$(cd / && "$PYTHON" -c "import zccl_torch, os; print(os.path.dirname(os.path.dirname(os.path.realpath(zccl_torch.__file__))))" 2>/dev/null || true)
if [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ] || ! compgen -G "zccl_torch/_C*.so" >/dev/null ||
  [ ! -f zccl_torch/_build_target.py ] || [ "$installed_at" != "$(pwd -P)" ]; then
  echo "[setup] building the zccl_torch extension (a couple of minutes on 2 cores)"
  MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PYTHON" -m pip install -q --no-build-isolation -e . 2>&1 |
    grep -v -e "^WARNING: Running pip as the 'root'" -e "^WARNING: Location" || true
  "$PYTHON" -c "import zccl_torch._C" # fail loudly if the build did not produce a module
  echo "$stamp" > "$stamp_file"
fi
