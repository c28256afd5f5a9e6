#!/usr/bin/env bash
# An emulated cluster on one Linux host: N "hosts" as network namespaces, each joined by a veth
# pair to a bridge in a "switch" namespace, every link shaped with `tc tbf` in both directions.
# A control namespace (unshaped link) runs mpirun, so MPI's launch traffic does not use the
# shaped links. Nothing is added to the root namespace except the veth ends while they move.
#
#   cluster.sh up [N] [RATE]   create (default N=4, RATE=1gbit; any tc rate: 100mbit, 10gbit)
#   cluster.sh down            remove everything this script created (idempotent)
#   cluster.sh status          print namespaces, addresses and qdiscs
#   cluster.sh env             print the shell variables that mpirun_cluster.sh reads
#
# Only addresses inside these namespaces (ZC_SUBNET, default 10.77.0.0/24) are ever used.
# Needs root (ip netns, tc). The kernel here has tbf but no netem, so latency is the veth/TCP
# stack's own (tens of microseconds), not an emulated WAN delay.
set -euo pipefail

PREFIX=${ZC_PREFIX:-zc}
NET=${ZC_NET:-10.77.0}          # first three octets of the /24
STATE_DIR=${ZC_STATE_DIR:-/run/zccl-cluster}
SWITCH="$PREFIX-sw"
CTL="$PREFIX-ctl"
CTL_ADDR="$NET.2"

host_ns() { echo "$PREFIX-h$1"; }
host_addr() { echo "$NET.$((10 + $1))"; }

# tbf needs a bucket of at least one timer tick of traffic and at least one GSO packet (64 KiB);
# 1 ms of line rate keeps bursts short so small messages are not measured on a free bucket.
burst_bytes() {
  local bits_per_s
  bits_per_s=$(rate_bits "$1")
  local b=$((bits_per_s / 8 / 1000))
  ((b < 65536 * 2)) && b=$((65536 * 2))
  echo "$b"
}

rate_bits() {
  local r=${1,,}
  case "$r" in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *) echo "cluster.sh: rate '$1' must end in gbit, mbit or kbit" >&2; exit 2 ;;
  esac
}

shape() {  # shape <netns> <dev> <rate>
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" \
    burst "$(burst_bytes "$3")" latency 50ms
}

link_into_switch() {  # link_into_switch <netns> <addr> <switch-port-name> <rate or "">
  local ns=$1 addr=$2 port=$3 rate=$4
  ip netns add "$ns"
  ip link add "$port" type veth peer name "$port-i"
  ip link set "$port" netns "$SWITCH"
  ip link set "$port-i" netns "$ns"
  ip -n "$ns" link set "$port-i" name eth0
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$SWITCH" link set "$port" master br0
  ip -n "$SWITCH" link set "$port" up
  if [[ -n "$rate" ]]; then
    shape "$ns" eth0 "$rate"          # host -> switch
    shape "$SWITCH" "$port" "$rate"   # switch -> host
  fi
}

cmd_down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ "$ns" == "$PREFIX"-* ]] && ip netns del "$ns"
  done
  rm -rf "$STATE_DIR"
}

cmd_up() {
  local n=${1:-4} rate=${2:-1gbit}
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 64)) || { echo "cluster.sh: N must be 1..64" >&2; exit 2; }
  rate_bits "$rate" >/dev/null
  [[ $(id -u) == 0 ]] || { echo "cluster.sh: needs root (ip netns, tc)" >&2; exit 1; }
  cmd_down
  trap 'echo "cluster.sh: setup failed, cleaning up" >&2; cmd_down' ERR
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  ip -n "$SWITCH" link set lo up
  link_into_switch "$CTL" "$CTL_ADDR" "pctl" ""
  local i
  for ((i = 0; i < n; i++)); do
    link_into_switch "$(host_ns "$i")" "$(host_addr "$i")" "p$i" "$rate"
  done
  mkdir -p "$STATE_DIR"
  {
    echo "ZC_PREFIX=$PREFIX"
    echo "ZC_HOSTS=$n"
    echo "ZC_RATE=$rate"
    echo "ZC_SUBNET=$NET.0/24"
    echo "ZC_CTL_NS=$CTL"
    echo "ZC_CTL_ADDR=$CTL_ADDR"
    echo "ZC_HOST0_ADDR=$(host_addr 0)"
  } >"$STATE_DIR/env"
  trap - ERR
  echo "cluster up: $n hosts at $rate per link direction, subnet $NET.0/24"
}

cmd_status() {
  [[ -f "$STATE_DIR/env" ]] || { echo "cluster down"; return 0; }
  cat "$STATE_DIR/env"
  local ns
  for ns in $(ip netns list | awk '{print $1}' | sort); do
    [[ "$ns" == "$PREFIX"-h* ]] || continue
    echo "$ns: $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')" \
      "$(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
  done
}

cmd_env() {
  [[ -f "$STATE_DIR/env" ]] || { echo "cluster.sh: cluster is down (run: cluster.sh up)" >&2; exit 1; }
  cat "$STATE_DIR/env"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down; echo "cluster down" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
