"""Names ``toolkit/acceptance/orchestrate.py`` still imports from here (its ``_os_id``).

The node facts now live in ``toolkit.facts`` (parsers), ``toolkit.nodefacts`` (the fact
``gpunode_node``), ``toolkit.drift`` and ``toolkit.aptpins``. orchestrate.py is being split
on another branch; delete this module once it imports ``toolkit.facts.system`` and
``toolkit.stack.systems`` itself.
"""

from __future__ import annotations

from toolkit.facts.system import DISTRIBUTIONS, parse_os_release
from toolkit.stack.systems import UnsupportedOS, os_id

__all__ = ["DISTRIBUTIONS", "UnsupportedOS", "os_id", "parse_os_release"]
