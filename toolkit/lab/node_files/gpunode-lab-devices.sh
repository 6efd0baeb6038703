#!/bin/sh
# gpunode lab: the character devices of this node's emulated hardware, made at every boot
# (gpunode-lab-devices.service) from the list the lab writes (one device a line):
#
#     <path> <major> <minor> <octal mode>
#
# A real node's NVIDIA driver makes /dev/nvidia<minor> (major 195) for each GPU it found and
# /dev/nvidiactl (195:255), and its RDMA drivers /dev/infiniband/uverbs<n> (231:192+n) and
# rdma_cm; a lab node's /dev is a tmpfs that starts empty at every boot, so this script makes
# the same files (toolkit/lab/devices.py says where the numbers come from). Nothing opens them
# in a lab node: slurmd's GRES plugin needs the GPUs' to exist, and acceptance passes the
# NICs' into the ranks' container (`docker run --device`).
set -eu

LIST=/var/lib/gpunode-lab/char-devices

[ -f "$LIST" ] || exit 0
while read -r path major minor mode; do
  case "$path" in '' | '#'*) continue ;; esac
  if [ -c "$path" ]; then
    have=$(stat -c '%t %T' "$path")
    want=$(printf '%x %x' "$major" "$minor")
    [ "$have" = "$want" ] && continue
  fi
  rm -f "$path"
  mkdir -p "$(dirname "$path")"
  if ! mknod -m "$mode" "$path" c "$major" "$minor"; then
    echo "gpunode-lab-devices: cannot make $path (c $major:$minor): this node was created" \
      "without the device rule for it; recreate the lab (gpunode lab down, then up)" >&2
    exit 1
  fi
done <"$LIST"
