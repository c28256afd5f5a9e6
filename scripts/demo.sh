#!/usr/bin/env bash
# The main job: sets up what is missing, then stacks RTM seismic shot images (a 4.2 MB float32
# image: 320 x 3280 cells, a 32.8 km line 3.2 km deep) over 4 ranks, with the exact MPI
# all_reduce and the compressed zccl one, checks the documented error bound on every pixel and
# writes a PNG (examples/output/image_stacking.png). Extra arguments go to
# examples/image_stacking.py.
#
# Where the machine allows it (root, `ip netns`, `tc`), the 4 ranks run on the emulated cluster
# of benchmarks/cluster (4 network namespaces, every link shaped to 1 Gbit/s) and the speed-up
# is reported against exact Open MPI twice: its default algorithm choice, and the best of its
# forced allreduce algorithms (each forced run reuses the migrated partial images). Elsewhere
# (ZCCL_DEMO_LOOPBACK=1 forces it) the ranks run on loopback, which says why no speed-up shows.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Oversubscribed ranks must yield the CPU while polling; one thread per rank on 2 cores.
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
NP=${NP:-4}
TIMEOUT=${ZCCL_DEMO_TIMEOUT:-900}
IMAGE=(--nz 320 --nx 3280 --shots-per-rank 1)
work=$(mktemp -d)
CLUSTER=benchmarks/cluster/cluster.sh

why_not_cluster() {  # prints why the emulated cluster cannot run here; nothing when it can
  [[ -n "${ZCCL_DEMO_LOOPBACK:-}" ]] && { echo "ZCCL_DEMO_LOOPBACK is set"; return; }
  [[ $(id -u) -eq 0 ]] || { echo "not root (network namespaces need root)"; return; }
  command -v ip >/dev/null && command -v tc >/dev/null || { echo "no ip/tc (apt-get install iproute2)"; return; }
  "$CLUSTER" up "$NP" 1gbit >"$work/cluster_up.log" 2>&1 || echo "cluster.sh up failed: $(tail -1 "$work/cluster_up.log")"
}

reason=$(why_not_cluster)
if [[ -n "$reason" ]]; then
  trap 'rm -rf "$work"' EXIT
  echo "[demo] loopback run ($reason)."
  echo "[demo] On loopback the exact all_reduce moves data at several GB/s, faster than any"
  echo "[demo] compressor can shrink it, so no speed-up shows here: zccl is for links that are"
  echo "[demo] slower than compression (1-100 Gbit/s). As root with ip/tc this demo runs on an"
  echo "[demo] emulated 1 Gbit/s cluster instead."
  exec timeout "$TIMEOUT" mpirun --oversubscribe --bind-to none -np "$NP" \
    "$PYTHON" examples/image_stacking.py "${IMAGE[@]}" "$@"
fi

trap '"$CLUSTER" down >/dev/null 2>&1; rm -rf "$work"' EXIT
MPIRUN=benchmarks/cluster/mpirun_cluster.sh
echo "[demo] $NP ranks on the emulated cluster: one network namespace per rank, links shaped to"
echo "[demo] 1 Gbit/s (benchmarks/cluster/cluster.sh)."
timeout "$TIMEOUT" "$MPIRUN" -np "$NP" "$PYTHON" examples/image_stacking.py "${IMAGE[@]}" \
  --partials "$work" --summary "$work/default.json" "$@" 2>&1 | grep -v "hostname of the client socket"
# Open MPI 4.1 coll_tuned allreduce algorithms, forced one run each (the migrated partial images
# are reused, so each run only stacks).
for forced in 3:recursive_doubling 4:ring 5:segmented_ring 6:rabenseifner; do
  echo "[demo] exact MPI with its allreduce forced to ${forced#*:} ..."
  OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=${forced%%:*} \
    timeout "$TIMEOUT" "$MPIRUN" -np "$NP" "$PYTHON" examples/image_stacking.py "${IMAGE[@]}" \
    --partials "$work" --summary "$work/forced_${forced#*:}.json" --out "$work" "$@" \
    >"$work/forced_${forced#*:}.log" 2>&1 || { tail -20 "$work/forced_${forced#*:}.log"; exit 1; }
done
"$PYTHON" examples/demo_summary.py "$work"
