#!/bin/sh
# gpunode lab: the `slow-data` fault, a real read throttle on the node's data disks.
#
#   gpunode-lab-data-throttle node       apply (or clear) the throttle for the node and every
#                                        container its Docker engine runs now
#   gpunode-lab-data-throttle pid PID    apply it for the container of PID (the OCI prestart
#                                        hook calls this for every GPU container it starts)
#
# The lab host is on cgroup v1, whose blkio throttling is flat: a limit holds for the
# processes of its own cgroup only, never for child cgroups, and a Docker engine inside a node
# (cgroupns=host) puts its containers' cgroups beside the node's, not under it. So the limit
# is written into each of those cgroups, for the node's own data disks only (their loop
# devices, listed in disks): nobody else reads those devices, so no one else is slowed.
# The limits come from data-throttle ("read_bps_device N" and "read_iops_device N"); an
# empty or missing file clears them (a limit of 0 removes a rule). GPUNODE_LAB_ROOT (default
# "/") relocates every path, as for the lab's stand-ins, so tests run it without a node.
set -eu

root="${GPUNODE_LAB_ROOT:-/}"
STATE="${root%/}/var/lib/gpunode-lab"
LIMITS="$STATE/data-throttle"
BLKIO="${root%/}/sys/fs/cgroup/blkio"
PROC="${root%/}/proc"

limit() {
  value=0
  if [ -s "$LIMITS" ]; then
    value=$(sed -n "s/^$1 \([0-9][0-9]*\)\$/\1/p" "$LIMITS")
  fi
  printf '%s\n' "${value:-0}"
}

blkio_dir() {
  path=$(sed -n 's/^[0-9]*:blkio:\(.*\)$/\1/p' "$PROC/$1/cgroup" 2>/dev/null | head -n 1)
  if [ -n "$path" ] && [ -d "$BLKIO$path" ]; then
    printf '%s\n' "$BLKIO$path"
  fi
}

throttle() {
  [ -n "$1" ] || return 0
  bps=$(limit read_bps_device)
  iops=$(limit read_iops_device)
  grep -v '^#' "$STATE/disks" | while read -r _name major minor _rest; do
    [ -n "$minor" ] || continue
    echo "$major:$minor $bps" >"$1/blkio.throttle.read_bps_device"
    echo "$major:$minor $iops" >"$1/blkio.throttle.read_iops_device"
  done
}

[ -s "$STATE/disks" ] || exit 0
case "${1:-}" in
  node)
    node=$(blkio_dir 1)
    [ -n "$node" ] || exit 0
    find "$node" -type d | while read -r dir; do throttle "$dir"; done
    if command -v docker >/dev/null 2>&1; then
      for id in $(docker ps -q --no-trunc 2>/dev/null || true); do
        pid=$(docker inspect -f '{{.State.Pid}}' "$id" 2>/dev/null || true)
        [ -n "$pid" ] && throttle "$(blkio_dir "$pid")"
      done
    fi
    ;;
  pid)
    [ -s "$LIMITS" ] || exit 0
    throttle "$(blkio_dir "${2:?usage: gpunode-lab-data-throttle pid PID}")"
    ;;
  *)
    echo "usage: gpunode-lab-data-throttle node | pid PID" >&2
    exit 2
    ;;
esac
