#!/bin/sh
# gpunode lab stand-in for modprobe(8), for the kernel modules of the node's emulated stack.
#
#     gpunode-lab-modprobe MODULE        "load" MODULE now
#     gpunode-lab-modprobe --modules-load   at boot: what /etc/modules-load.d asks for
#
# A lab node shares the host's kernel and may not load modules into it; its /sys/module is the
# host's. A loaded module shows itself here as a directory under /run/gpunode-lab/module (a
# tmpfs: it goes with the node's boot, as a loaded module does), with sysfs' `initstate`; the
# roles read it through their module-directory variable (fabric_manager_module_dir). Only the
# modules listed in /var/lib/gpunode-lab/modules exist; any other fails as modprobe does for
# a module the kernel does not have (toolkit/lab/kmods.py says which and why).
set -eu

root="${GPUNODE_LAB_ROOT:-/}"
root="${root%/}"
DIR="$root/run/gpunode-lab/module"
KNOWN="$root/var/lib/gpunode-lab/modules"

load() {
  name=$(printf '%s' "$1" | tr - _)
  if [ -f "$KNOWN" ] && grep -qx "$name" "$KNOWN"; then
    mkdir -p "$DIR/$name"
    printf 'live\n' >"$DIR/$name/initstate"
    return 0
  fi
  echo "modprobe: FATAL: Module $1 not found in directory /lib/modules/$(uname -r)" >&2
  return 1
}

if [ "${1:-}" = --modules-load ]; then
  for conf in "$root"/etc/modules-load.d/*.conf; do
    [ -f "$conf" ] || continue
    sed -e 's/[#;].*//' "$conf" | while read -r module; do
      [ -n "$module" ] || continue
      load "$module" || true
    done
  done
  exit 0
fi
if [ $# -ne 1 ]; then
  echo "usage: $0 MODULE | --modules-load" >&2
  exit 2
fi
load "$1"
