"""What gpunode ships to a node to run there: the acceptance runner (a zipapp, standard library
only) and this machine's pip as a zip. Imported by acceptance (which copies them over SSH) and
by images (which bakes the runner into the training image and runs it there), so it imports
neither: it is the one place both read the payload from.

The runner's zipapp holds the package ``toolkit.acceptance.node_runner`` at its own path
(``toolkit/acceptance/node_runner/*.py``) and a ``__main__.py`` that runs it, so its modules
import each other by the same names in the source tree and on the node. The archive is built
byte for byte the same from the same sources (names in sorted order, one fixed time stamp and
mode per entry, stored uncompressed so no zlib version can change the bytes): the training
image that bakes it in stays reproducible.

To ship a small module of another package with the runner (say a ``toolkit/facts/dpkg.py``
parser the runner should use too), add its dotted name to ``SHIPPED_MODULES``: the archive then
holds ``toolkit/facts/dpkg.py`` and an empty ``toolkit/facts/__init__.py`` (a parent package's
real ``__init__`` is never shipped, so it may import anything), and the runner imports it as
``from toolkit.facts import dpkg`` in both places. The module must use the standard library
only; ``tests/unit/acceptance/test_payload.py`` checks that of every shipped module.
"""

from __future__ import annotations

import io
import json
import zipfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

from toolkit.acceptance.node_runner.common import ARCHIVE

__all__ = ["ARCHIVE", "SHIPPED_MODULES", "pip_zip", "runner_files", "runner_zipapp"]

# The runner's package (every module in it) and the single modules shipped with it.
RUNNER_PACKAGE = "toolkit.acceptance.node_runner"
# The facts' parsers of packages and of the loaded driver, as the control machine reads them.
SHIPPED_MODULES: tuple[str, ...] = (
    "toolkit.facts.dpkg",
    "toolkit.facts.nvidia",
    "toolkit.facts.probe",
)
# What the zipapp runs: the package's own command line.
ZIPAPP_MAIN = (
    f'"""Runs {RUNNER_PACKAGE} (built by toolkit.acceptance.payload)."""\n'
    "import runpy\n\n"
    f'runpy.run_module("{RUNNER_PACKAGE}", run_name="__main__", alter_sys=True)\n'
)
# zip entries carry a DOS time stamp; its earliest value, the same for every entry.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
ZIP_MODE = 0o644


def runner_files(shipped: tuple[str, ...] = SHIPPED_MODULES) -> dict[str, bytes]:
    """Every file of the runner's zipapp by its name in the archive (``shipped``: the single
    modules of other packages that go with it)."""
    files: dict[str, bytes] = {"__main__.py": ZIPAPP_MAIN.encode()}
    package = resources.files(RUNNER_PACKAGE)
    folder = RUNNER_PACKAGE.replace(".", "/")
    for entry in package.iterdir():
        if entry.name.endswith(".py") and entry.is_file():
            files[f"{folder}/{entry.name}"] = entry.read_bytes()
    for dotted in shipped:
        parent, _, name = dotted.rpartition(".")
        files[f"{dotted.replace('.', '/')}.py"] = (
            resources.files(parent).joinpath(f"{name}.py").read_bytes()
        )
    # Every parent package that is not shipped itself gets an empty __init__.py.
    for path in list(files):
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            files.setdefault("/".join([*parts[:depth], "__init__.py"]), b"")
    return files


@lru_cache(maxsize=1)
def runner_zipapp() -> bytes:
    """The node-side runner as shipped: ``python3 node_runner.pyz <subcommand> ...``."""
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in sorted(runner_files().items()):
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.external_attr = ZIP_MODE << 16
            info.create_system = 3  # Unix, so the mode above is read as one
            archive.writestr(info, data)
    return buffer.getvalue()


# How a program read from stdin (``python3 -``, one SSH round trip) carries the runner: its
# files in a dict, imported from memory by a finder placed first on ``sys.meta_path``.
_INLINE_IMPORTER = """import importlib.abc, importlib.util, json, sys
class _Shipped(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def _key(self, name):
        base = name.replace(".", "/")
        for key in (base + "/__init__.py", base + ".py"):
            if key in FILES:
                return key
    def find_spec(self, name, path=None, target=None):
        key = self._key(name)
        if key is None:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=key.endswith("__init__.py"))
    def exec_module(self, module):
        key = self._key(module.__name__)
        exec(compile(FILES[key], key, "exec"), module.__dict__)
sys.meta_path.insert(0, _Shipped())
"""


def inline_program(main: str, shipped: tuple[str, ...] = ()) -> bytes:
    """A program for ``python3 -`` that holds the runner's files (with ``shipped``, more
    stdlib-only modules) and then runs ``main``, Python source that imports from them."""
    files = {name: data.decode() for name, data in runner_files(SHIPPED_MODULES + shipped).items()}
    text = json.dumps(files, sort_keys=True)
    return (f"import json\nFILES = json.loads({text!r})\n" + _INLINE_IMPORTER + main).encode()


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
