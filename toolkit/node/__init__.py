"""A node as gpunode keeps and reads it: its state file, its converge stamps, its facts.

``nodestate`` owns the state file (``/etc/gpunode/state.json``: schema, transitions, the one
readiness rule) and ``nodefile`` how it is replaced on the node (whole, under its lock;
standard library only, shipped with the health check); ``converge`` the converge stamps and
the plan; ``nodefacts`` the fact ``gpunode_node`` read in one probe, with ``drift`` (pinned
against installed, held and loaded) and ``aptpins`` (pins against the repositories, and a
driver found on the node). Nothing is re-exported here: import the submodule that owns a name
(the node-side programs ship single modules of this package with an empty ``__init__``).
"""
