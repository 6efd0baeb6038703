#!/bin/sh
# gpunode lab: the stand-in for udev inside a lab node (no udev runs in a container).
#
# A real node's udev creates /dev/nvmeXnY for every NVMe disk, the persistent links
# /dev/disk/by-id/nvme-<model>_<serial>[-partN] and /dev/disk/by-uuid/<uuid>, and assembles
# md arrays at boot. A lab node's /dev is a tmpfs that starts empty at every boot, so this
# script recreates the same from the file the lab writes (one disk a line):
#
#     <kernel name> <major> <minor> <model> <serial>
#
# The lab's "disks" are loop devices of the host kernel (major 7). Swapping two kernel names
# in that file is how the lab makes names move between boots while the by-id links follow
# the serial, exactly what real NVMe disks do. Run it again (as real udev would do on its
# own) after creating partitions, filesystems or arrays: `gpunode-lab-udev`.
#
# Loop device numbers belong to the host and change when it reboots. A second file,
#
#     <kernel name> <backing file of the loop device on the host>
#
# lets this script refuse a device whose loop device now backs another file (another lab's
# disk, say) until the lab has re-attached the disk and rewritten both files.
set -eu

DISKS=/var/lib/gpunode-lab/disks
BACKING=/var/lib/gpunode-lab/disks.backing
BY_ID=/dev/disk/by-id
BY_UUID=/dev/disk/by-uuid
UDEV_DB=/run/udev/data

# Create a block device node unless one with the same numbers is already there.
node_dev() {
  path=$1 major=$2 minor=$3
  if [ -b "$path" ]; then
    have=$(stat -c '%t %T' "$path")
    want=$(printf '%x %x' "$major" "$minor")
    [ "$have" = "$want" ] && return 0
  fi
  rm -f "$path"
  mknod -m 0660 "$path" b "$major" "$minor"
  chgrp disk "$path" 2>/dev/null || true
}

# udev gives a by-uuid link to filesystems (and crypto containers), not to RAID members.
uuid_link() {
  dev=$1
  info=$(blkid -p -o export "$dev" 2>/dev/null) || return 0
  usage=$(printf '%s\n' "$info" | sed -n 's/^USAGE=//p')
  uuid=$(printf '%s\n' "$info" | sed -n 's/^UUID=//p')
  fstype=$(printf '%s\n' "$info" | sed -n 's/^TYPE=//p')
  case "$usage" in filesystem | crypto | other) ;; *) return 0 ;; esac
  # udev's "btrfs ready" step: a multi-device btrfs mounts only once its members are known.
  if [ "$fstype" = btrfs ] && command -v btrfs >/dev/null 2>&1; then
    btrfs device scan "$dev" >/dev/null 2>&1 || true
  fi
  [ -n "$uuid" ] && ln -sfn "../../${dev#/dev/}" "$BY_UUID/$uuid"
  return 0
}

# udev's database entry of a disk, /run/udev/data/b<major>:<minor>, in the format systemd
# writes it (src/libsystemd/sd-device/device-private.c, device_update_db: "S:" links, "I:"
# initialisation time, "E:" properties). lsblk(8) reads MODEL and SERIAL from ID_MODEL and
# ID_SERIAL_SHORT there (util-linux misc-utils/lsblk-properties.c, get_properties_by_udev).
db_entry() {
  major=$1 minor=$2 model=$3 serial=$4
  mkdir -p "$UDEV_DB"
  printf 'S:disk/by-id/nvme-%s_%s\nI:%s\nE:ID_MODEL=%s\nE:ID_SERIAL=%s_%s\nE:ID_SERIAL_SHORT=%s\n' \
    "$model" "$serial" "$(date +%s)000000" "$model" "$model" "$serial" "$serial" \
    >"$UDEV_DB/b$major:$minor"
}

mkdir -p "$BY_ID" "$BY_UUID"
# Only the links this script owns are rebuilt: the lab's NVMe links, md links and by-uuid.
find "$BY_ID" -maxdepth 1 -type l \( -name 'nvme-*' -o -name 'md-*' \) -delete
find "$BY_UUID" -maxdepth 1 -type l -delete

arrays=""
if [ -f "$DISKS" ]; then
  while read -r name major minor model serial; do
    case "$name" in '' | '#'*) continue ;; esac
    rm -f "/dev/${name}p"[0-9]*
    sys=/sys/dev/block/$major:$minor
    if [ -f "$BACKING" ]; then
      want=$(sed -n "s|^$name ||p" "$BACKING")
      have=$(cat "$sys/loop/backing_file" 2>/dev/null || true)
      if [ -n "$want" ] && [ "$have" != "$want" ]; then
        echo "gpunode-lab-udev: $name ($major:$minor) backs '$have', not '$want': left out" >&2
        rm -f "/dev/$name"
        continue
      fi
    fi
    node_dev "/dev/$name" "$major" "$minor"
    ln -sfn "../../$name" "$BY_ID/nvme-${model}_${serial}"
    db_entry "$major" "$minor" "$model" "$serial"
    uuid_link "/dev/$name"
    for part in "$sys"/*/partition; do
      [ -e "$part" ] || continue
      number=$(cat "$part")
      numbers=$(cat "${part%/partition}/dev")
      node_dev "/dev/${name}p$number" "${numbers%:*}" "${numbers#*:}"
      ln -sfn "../../${name}p$number" "$BY_ID/nvme-${model}_${serial}-part$number"
      uuid_link "/dev/${name}p$number"
    done
    # An md array of the host kernel that holds this disk survives a node restart, like an
    # array that a real node assembles again at boot: give it its device node back.
    for holder in "$sys"/holders/md*; do
      [ -e "$holder" ] || continue
      arrays="$arrays ${holder##*/}"
    done
  done <"$DISKS"
fi

for md in $(printf '%s\n' $arrays | sort -u); do
  numbers=$(cat "/sys/block/$md/dev")
  node_dev "/dev/$md" "${numbers%:*}" "${numbers#*:}"
  if command -v mdadm >/dev/null 2>&1; then
    devname=$(mdadm --detail --export "/dev/$md" 2>/dev/null | sed -n 's/^MD_DEVNAME=//p')
    if [ -n "$devname" ]; then
      mkdir -p /dev/md
      ln -sfn "../$md" "/dev/md/$devname"
      ln -sfn "../../$md" "$BY_ID/md-name-$devname"
    fi
  fi
  uuid_link "/dev/$md"
done
