#!/usr/bin/env bash
# Started by mpirun for every rank: moves the rank into host namespace (rank mod hosts) of the
# emulated cluster, then runs the program there. The environment (PMIx, MCA, torch) carries over.
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:?in_host_ns.sh must be started by mpirun}
prefix=${ZC_PREFIX:-zc}
exec ip netns exec "$prefix-h$((rank % ${ZC_HOSTS:?ZC_HOSTS unset}))" "$@"
