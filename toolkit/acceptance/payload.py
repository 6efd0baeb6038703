"""What gpunode ships to a node to run there: the acceptance runner (one file, standard
library only) and this machine's pip as a zip. Imported by acceptance (which copies them over
SSH) and by images (which bakes the runner into the training image and runs it there), so it
imports neither: it is the one place both read the payload from.
"""

from __future__ import annotations

import io
import zipfile
from functools import lru_cache
from importlib import resources
from pathlib import Path


def runner_source() -> bytes:
    """The node-side runner, as shipped."""
    return resources.files("toolkit.acceptance").joinpath("node_runner.py").read_bytes()


@lru_cache(maxsize=1)
def pip_zip() -> bytes:
    """This machine's pip as a zip that a node runs as ``python pip.zip/pip`` (no pip there).

    Debian and Ubuntu ship Python without pip and ensurepip; pip runs from a zip of itself.
    """
    import pip

    root = Path(pip.__file__).parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("pip") / path.relative_to(root))
    return buffer.getvalue()
