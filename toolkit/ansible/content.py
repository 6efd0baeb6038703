"""Where gpunode's Ansible content (playbooks, roles, plugins, ansible.cfg) is found.

In a source checkout the content sits next to the ``toolkit/`` package: ``playbooks/``,
``roles/`` and ``ansible.cfg`` at the repository root; an installation may carry them under
``<prefix>/share/gpunode/``. The plugins always ship inside the
package (``toolkit/plugins/``, beside this engine, not in it). ``GPUNODE_CONTENT_DIR`` overrides
the search, for an installation that keeps playbooks and roles elsewhere.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ConfigError

# A path, not an import: the plugins import the domains, which sit above this engine.
PLUGINS_DIR = Path(__file__).resolve().parents[1] / "plugins"


@dataclass(frozen=True)
class Content:
    """The directories Ansible is pointed at for every gpunode run."""

    root: Path
    playbooks: Path
    roles: Path
    action_plugins: Path
    modules: Path
    filter_plugins: Path
    config: Path | None

    def playbook(self, name: str) -> Path:
        """The path of one playbook, by file name (``provision.yml``) or stem (``provision``).

        Raises:
            ConfigError: No such playbook; the message lists the ones there are.
        """
        file_name = name if name.endswith((".yml", ".yaml")) else f"{name}.yml"
        path = self.playbooks / file_name
        if not path.is_file():
            known = sorted(p.name for p in self.playbooks.glob("*.yml"))
            raise ConfigError(
                f"playbook {file_name!r} not found in {self.playbooks}; known: {known}"
            )
        return path


def find_content(start: Path | None = None) -> Content:
    """Find the playbooks and roles: ``$GPUNODE_CONTENT_DIR`` or the checkout around ``toolkit``.

    Args:
        start: A directory to use instead of the search (tests).

    Raises:
        ConfigError: No directory holding both ``playbooks/`` and ``roles/`` was found.
    """
    candidates: list[Path] = []
    if start is not None:
        candidates.append(start)
    else:
        env = os.environ.get("GPUNODE_CONTENT_DIR")
        if env:
            candidates.append(Path(env))
        # The source checkout: toolkit/ansible/content.py -> repository root.
        candidates.append(Path(__file__).resolve().parents[2])
        # An installed wheel that ships the content as data files (share/gpunode/).
        candidates.append(Path(sys.prefix) / "share" / "gpunode")
    for root in candidates:
        if (root / "playbooks").is_dir() and (root / "roles").is_dir():
            config = root / "ansible.cfg"
            return Content(
                root=root,
                playbooks=root / "playbooks",
                roles=root / "roles",
                action_plugins=PLUGINS_DIR / "action",
                modules=PLUGINS_DIR / "modules",
                filter_plugins=PLUGINS_DIR / "filter",
                config=config if config.is_file() else None,
            )
    searched = ", ".join(str(c) for c in candidates)
    raise ConfigError(
        f"gpunode's Ansible content (playbooks/ and roles/) was not found in: {searched}; "
        "set GPUNODE_CONTENT_DIR to the directory holding them"
    )
