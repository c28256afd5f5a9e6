#!/usr/bin/env bash
# The two examples on the emulated cluster: RTM image stacking on 4 ranks and DDP training on 2,
# every rank in its own namespace behind a shaped link (default 1gbit; RATE=100mbit ...).
# Output goes to benchmarks/results/apps_cluster_<rate>.log; the cluster is always taken down.
# Run as root: benchmarks/apps_cluster.sh [extra image_stacking.py args]
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-1gbit}
LOG=benchmarks/results/apps_cluster_${RATE}.log
CLUSTER=benchmarks/cluster/cluster.sh
MPIRUN=benchmarks/cluster/mpirun_cluster.sh
trap '"$CLUSTER" down >/dev/null' EXIT
export PYTHONPATH=$PWD
{
  echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, links shaped to $RATE"
  "$CLUSTER" up 4 "$RATE"
  echo "\$ $MPIRUN -np 4 python examples/image_stacking.py $*"
  timeout 900 "$MPIRUN" -np 4 python examples/image_stacking.py --out /tmp/zccl-apps "$@"
  "$CLUSTER" up 2 "$RATE"
  echo "\$ $MPIRUN -np 2 python examples/ddp_train.py --no-progress"
  timeout 1800 "$MPIRUN" -np 2 python examples/ddp_train.py --no-progress --out /tmp/zccl-apps
} 2>&1 | grep -v -e "hostname of the client socket" -e FutureWarning -e "return func" | tee "$LOG"
