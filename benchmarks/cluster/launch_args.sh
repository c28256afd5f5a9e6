# Sourced by the cluster's launchers (mpirun_cluster.sh, torchrun_cluster.sh): loads the cluster's
# variables (cluster.sh env) and takes the optional "-np P" off the arguments into $np (default:
# the host count); fails with the launcher's usage when no program is left.
cluster_env=$("$HERE/cluster.sh" env) || exit 1
eval "$cluster_env"
np=$ZC_HOSTS
if [[ "${1:-}" == "-np" ]]; then np=$2; shift 2; fi
[[ $# -ge 1 ]] || { echo "usage: $(basename "$0") [-np P] program [args...]" >&2; exit 2; }
