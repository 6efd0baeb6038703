#!/usr/bin/python
"""Documentation of the ``gpunode_data_disks`` action (the work is done by the action plugin).

Ansible and ansible-lint read the module's interface from here; the action plugin of the same
name (toolkit/plugins/action/gpunode_data_disks.py) runs on the controller and never
executes this file on a node.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpunode_data_disks
short_description: Plan and apply a node's data-disk layout safely
description:
  - Names data disks by serial through /dev/disk/by-id, probes them (lsblk, blkid -p,
    wipefs -n, mdadm --examine, mounts, swaps) and plans the layout with toolkit.disks.
  - Refuses, listing every reason, any disk behind /, /boot, /boot/efi or swap, mounted, a
    RAID, LVM or crypt member, carrying a signature not allowed to be wiped, absent, or of
    another size or model than the profile says.
  - Creates the filesystem (single XFS or ext4, md RAID0 named data plus XFS, or btrfs RAID0),
    mounts it by UUID through a systemd mount unit ordered before the container runtimes,
    and creates the directory tree. Already done is recognised by filesystem UUID or array
    name; nothing is formatted twice.
  - Supports check mode (returns the plan, changes nothing) and diff (the plan as before/after).
options:
  spec:
    description: The hardware profile's data_disks mapping (toolkit.disks.spec.DataDisksSpec).
    type: dict
    required: true
  settle_command:
    description: The command that waits for udev to publish new /dev/disk links.
    type: str
    default: udevadm settle
  runtime_services:
    description:
      - Container runtime services ordered after the mount (drop-ins with RequiresMountsFor).
    type: list
    elements: str
    default: [docker.service, containerd.service]
  report_only:
    description: Plan only and return the plan even when refused, without failing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - gpunode
"""

EXAMPLES = r"""
- name: Converge the data disks to the planned layout
  gpunode_data_disks:
    spec: "{{ hardware.data_disks }}"
"""

RETURN = r"""
plan:
  description: The plan (disks found, actions, refusal reasons) as Plan.to_dict gives it.
  returned: always
  type: dict
done:
  description: Summaries of the actions applied, in order.
  returned: when applied
  type: list
  elements: str
"""


def main() -> None:
    """Refuse to run on a node: this module is implemented by its action plugin."""
    import json
    import sys

    print(json.dumps({"failed": True, "msg": "gpunode_data_disks runs as an action plugin"}))
    sys.exit(1)


if __name__ == "__main__":
    main()
