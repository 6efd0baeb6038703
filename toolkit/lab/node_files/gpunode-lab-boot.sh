#!/bin/sh
# gpunode lab: what a lab node does at every boot, and how the lab applies faults live.
#
#   gpunode-lab-boot boot   at boot (gpunode-lab-boot.service): a new boot id, the link
#                           speed fault, and the kernel events a broken GPU logs at boot
#   gpunode-lab-boot net    apply or clear the link speed fault now
#
# Lab nodes share the host's kernel: its boot id never changes when a node restarts and
# its kernel log is not theirs. So the lab keeps a boot id of its own under /run (a tmpfs
# that starts empty at every container start) and writes kernel events into the node's
# journal with the identifier "kernel".
set -eu

STATE=/var/lib/gpunode-lab
IFACE=eth0

apply_net() {
  # A real slow link, not a label: a token bucket on the node's egress interface.
  if [ -s "$STATE/egress-rate" ]; then
    rate=$(cat "$STATE/egress-rate")
    tc qdisc replace dev "$IFACE" root tbf rate "$rate" burst 256kb latency 100ms
  else
    tc qdisc del dev "$IFACE" root 2>/dev/null || true
  fi
}

case "${1:-boot}" in
  boot)
    mkdir -p /run/gpunode-lab
    cat /proc/sys/kernel/random/uuid >/run/gpunode-lab/boot_id
    apply_net
    if [ -s "$STATE/kernel-events" ]; then
      while IFS= read -r line; do
        [ -n "$line" ] && logger -t kernel -p kern.err -- "$line"
      done <"$STATE/kernel-events"
    fi
    ;;
  net) apply_net ;;
  *)
    echo "usage: gpunode-lab-boot [boot|net]" >&2
    exit 2
    ;;
esac
