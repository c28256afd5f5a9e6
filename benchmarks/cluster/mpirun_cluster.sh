#!/usr/bin/env bash
# mpirun across the emulated cluster made by cluster.sh: rank r runs in host namespace r mod N,
# MPI traffic is forced onto TCP over the shaped links, and mpirun itself runs in the control
# namespace. Usage: mpirun_cluster.sh -np P program [args...]  (P defaults to the host count).
#
# Why this shape (Debian's Open MPI 4.1.4): the PMIx server inside mpirun listens on loopback by
# default, which ranks in other namespaces cannot reach ("Unreachable" in MPI_Init). Letting it
# accept remote connections on the cluster subnet, with mpirun inside a namespace on that subnet,
# fixes that without per-namespace daemons.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/launch_args.sh"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include="$ZC_SUBNET"
# torch's rendezvous store (zccl/gloo) lives on rank 0, i.e. host 0; gloo must use the shaped NIC.
export MASTER_ADDR="$ZC_HOST0_ADDR" MASTER_PORT=${MASTER_PORT:-29531} GLOO_SOCKET_IFNAME=eth0
# Oversubscribed ranks (several per core) must not spin: OpenMP threads sleep at barriers.
export ZC_HOSTS OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export PYTHONPATH=${PYTHONPATH:-}

exec ip netns exec "$ZC_CTL_NS" mpirun --oversubscribe --bind-to none -np "$np" \
  --mca btl tcp,self --mca btl_tcp_if_include "$ZC_SUBNET" --mca oob_tcp_if_include "$ZC_SUBNET" \
  -x OMPI_MCA_mpi_yield_when_idle -x MASTER_ADDR -x MASTER_PORT -x GLOO_SOCKET_IFNAME \
  -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x PYTHONPATH -x ZC_HOSTS \
  "$HERE/in_host_ns.sh" "$@"
