"""The hardware profile: what every node of a group must have, and its acceptance floors.

``hardware`` is the profile (``HardwareProfile``) and the one-file stack; ``floors`` the
schema of ``hardware.acceptance`` and the shipped profiles (``floors.yml`` beside it). Above
``stack.models`` and ``disks.spec``, whose schemas the profile puts together, and below the
inventory reader and ``acceptance/``, which judge against it. Nothing is re-exported here.
"""
