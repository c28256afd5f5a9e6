#!/usr/bin/env bash
# torchrun across the emulated cluster made by cluster.sh, the way a user launches on several
# machines: one torchrun per host namespace (--nnodes P, one process per node), joined by
# torchrun's c10d rendezvous on host 0. No MPI launcher: zccl groups take the TCP transport.
# Usage: torchrun_cluster.sh [-np P] program [args...]  (P defaults to the host count; at most
# one rank per host). Exits non-zero when any node fails.
# Timing: torchrun starts each worker in a session of its own, which the kernel's autogroup
# scheduling (kernel.sched_autogroup_enabled) makes a CPU group of its own; the emulated hosts
# share this machine's cores, so that changes how they share the CPU (mpirun's ranks share one
# session). benchmarks/launch_compare.py turns autogroup off while it compares the launchers.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/launch_args.sh"
(( np <= ZC_HOSTS )) || { echo "torchrun_cluster.sh: $np ranks > $ZC_HOSTS hosts" >&2; exit 2; }

# Oversubscribed ranks (several per core) must not spin: OpenMP threads sleep at barriers, and
# zccl's waits sleep too. Each torchrun reports one rank on its host (LOCAL_WORLD_SIZE=1), so
# wait="auto" would poll without sleeping, but the emulated hosts share this machine's cores
# (mpirun_cluster.sh needs no such line: its single mpirun counts every rank as local).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ZCCL_WAIT=${ZCCL_WAIT:-sleep}
export PYTHONPATH=${PYTHONPATH:-} ZC_HOSTS
port=${ZC_RDZV_PORT:-29541}
pids=()
for ((h = 0; h < np; h++)); do
  # The namespaces share one host name, so torchrun cannot tell by name which node serves the
  # rendezvous store nor which address is a node's own: say both (is_host, --local-addr), as on
  # any machine whose host name does not resolve to the address the others reach.
  addr=${ZC_HOST0_ADDR%.*}.$(( ${ZC_HOST0_ADDR##*.} + h ))
  ip netns exec "$ZC_PREFIX-h$h" "${PYTHON:-python3}" -m torch.distributed.run \
    --nnodes "$np" --nproc-per-node 1 --rdzv-backend c10d --local-addr "$addr" \
    --rdzv-endpoint "$ZC_HOST0_ADDR:$port" --rdzv-id "zccl-$$" \
    --rdzv-conf "is_host=$([[ $h == 0 ]] && echo 1 || echo 0)" "$@" &
  pids+=($!)
  (( h == 0 )) && sleep 1  # host 0 serves the rendezvous: let it listen first
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
exit $rc
