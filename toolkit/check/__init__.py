"""Passive checks (``gpunode check``): the cheap, read-only signals of a node between
acceptance runs. ``probe`` runs on the node (standard library only), ``rules`` judges what
acceptance does not already judge, the step ``toolkit.steps.check``
reads, judges and writes the node state."""
