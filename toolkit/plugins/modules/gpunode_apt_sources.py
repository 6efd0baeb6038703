#!/usr/bin/python
"""Disable every other apt source of one repository, in either of apt's two formats.

Runs on the node (the standard library and Ansible's module API only). Two sources of one
repository with different ``signed-by`` make every ``apt update`` fail ("Conflicting values
set for option Signed-By", NVIDIA/cuda-repo-management#4), and cloud and OEM images often
carry NVIDIA's repositories already (cuda-keyring's ``cuda-<distro>-<arch>.list``). So the
role that writes gpunode's own source first disables every other source of the same URL:

- one-line-style files (``/etc/apt/sources.list``, ``sources.list.d/*.list``): the line is
  commented out, with a note naming the file that configures the repository now;
- deb822-style files (``sources.list.d/*.sources``, the format Ubuntu 24.04 and Debian 13
  write their own sources in): a stanza whose ``URIs`` are all this repository gets
  ``Enabled: no``; a stanza that also lists other URIs loses only this one (sources.list(5),
  "DEB822-STYLE FORMAT": ``Enabled`` and multi-value ``URIs``).

A source is this repository when its URI, after apt's own substitution of ``$(ARCH)`` (the
node's dpkg architecture: sources.list(5)), is the URL: NVIDIA's published container-toolkit
list writes ``.../libnvidia-container/stable/deb/$(ARCH) /`` (NVIDIA/libnvidia-container
``stable/deb/nvidia-container-toolkit.list``), and the install guide tees it, with a
``signed-by`` added, into ``sources.list.d/nvidia-container-toolkit.list``.

Nothing else in the files changes, and gpunode's own file is never touched.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
---
module: gpunode_apt_sources
short_description: Disable every other apt source of one repository (.list and deb822 .sources)
description:
  - Finds the sources of O(url) in /etc/apt/sources.list and sources.list.d (*.list and
    *.sources), other than O(keep), and disables them so that one source with one signed-by
    remains.
  - One-line entries are commented out; deb822 stanzas get C(Enabled: no), or lose only this
    URI when they list others too.
  - Supports check mode (reports what it would disable).
options:
  url:
    description: The repository's URL (a trailing slash does not matter).
    type: str
    required: true
  keep:
    description: gpunode's own sources file for this repository (never changed).
    type: path
    required: true
  apt_dir:
    description: apt's configuration directory.
    type: path
    default: /etc/apt
  architecture:
    description: What C($(ARCH)) in a source stands for (default the node's
      C(dpkg --print-architecture)).
    type: str
attributes:
  check_mode:
    support: full
author:
  - gpunode
"""

EXAMPLES = r"""
- name: Disable the other sources of this repository
  gpunode_apt_sources:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/
    keep: /etc/apt/sources.list.d/gpunode-nvidia-cuda.list
"""

RETURN = r"""
disabled:
  description: The files changed (or that would be), each with what was disabled.
  returned: always
  type: list
  elements: dict
"""

MARK = "disabled by gpunode"
# sources.list(5): `deb [ option=value ... ] uri suite [component ...]`
_LIST_LINE = re.compile(r"^(?P<lead>\s*)(?P<type>deb|deb-src)\s+(?:\[[^\]]*\]\s+)?(?P<uri>\S+)")
_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*):\s*(?P<value>.*)$")


def same_repository(uri: str, url: str, arch: str) -> bool:
    """Whether a source's URI is this repository, as apt reads it: ``$(ARCH)`` substituted,
    trailing slashes not counted."""
    return uri.replace("$(ARCH)", arch).rstrip("/") == url.rstrip("/")


def disable_list(text: str, url: str, keep: str, arch: str) -> tuple[str, list[str]]:
    """A one-line-style file with every entry of ``url`` commented out.

    Returns:
        The new text and the entries disabled.
    """
    out, disabled = [], []
    for line in text.splitlines(keepends=True):
        match = _LIST_LINE.match(line)
        if match and same_repository(match.group("uri"), url, arch):
            body = line.rstrip("\n")
            disabled.append(body.strip())
            note = f"{MARK}: {keep} configures this repository"
            line = f"{match.group('lead')}# {body.strip()}  # {note}\n"
        out.append(line)
    return "".join(out), disabled


def _stanzas(lines: list[str]) -> list[tuple[int, int]]:
    """The (start, end) line ranges of the deb822 stanzas (paragraphs split by blank lines)."""
    ranges, start = [], None
    for index, line in enumerate(lines):
        if line.strip():
            if start is None:
                start = index
        elif start is not None:
            ranges.append((start, index))
            start = None
    if start is not None:
        ranges.append((start, len(lines)))
    return ranges


def disable_deb822(text: str, url: str, keep: str, arch: str) -> tuple[str, list[str]]:
    """A deb822-style file with every stanza of ``url`` disabled (or this URI removed).

    A stanza already ``Enabled: no`` is left alone. Continuation lines (starting with a
    space) of ``URIs`` are read as more values.

    Returns:
        The new text and a description of each stanza changed.
    """
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    edits: list[tuple[int, int, list[str]]] = []
    disabled = []
    for start, end in _stanzas(lines):
        fields: dict[str, tuple[int, int, str]] = {}  # lowercased name -> (first, last, value)
        current = None
        for index in range(start, end):
            line = lines[index]
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and current is not None:
                first, _last, value = fields[current]
                fields[current] = (first, index, f"{value} {line.strip()}")
                continue
            match = _FIELD.match(line.rstrip("\n"))
            if match:
                current = match.group("name").lower()
                fields[current] = (index, index, match.group("value").strip())
        if "uris" not in fields:
            continue
        if fields.get("enabled", (0, 0, "yes"))[2].lower() == "no":
            continue
        first, last, value = fields["uris"]
        uris = value.split()
        mine = [u for u in uris if same_repository(u, url, arch)]
        if not mine:
            continue
        note = f"# {MARK}: {keep} configures {url}\n"
        rest = [u for u in uris if not same_repository(u, url, arch)]
        if rest:
            replacement = [note, f"URIs: {' '.join(rest)}\n"]
            edits.append((first, last + 1, replacement))
            disabled.append(f"URIs {' '.join(mine)} (stanza at line {start + 1})")
        else:
            replacement = [note, "Enabled: no\n"]
            if "enabled" in fields:
                e_first, e_last, _ = fields["enabled"]
                edits.append((e_first, e_last + 1, replacement))
            else:
                first_field = min(f[0] for f in fields.values())
                edits.append((first_field, first_field, replacement))
            disabled.append(f"stanza at line {start + 1} (URIs: {value})")
    for begin, stop, replacement in sorted(edits, reverse=True):
        lines[begin:stop] = replacement
    return "".join(lines), disabled


def source_files(apt_dir: Path) -> list[Path]:
    """apt's source files: sources.list, then sources.list.d's *.list and *.sources."""
    files = [apt_dir / "sources.list"]
    folder = apt_dir / "sources.list.d"
    if folder.is_dir():
        files += sorted(p for p in folder.iterdir() if p.suffix in (".list", ".sources"))
    return [p for p in files if p.is_file()]


def plan(apt_dir: Path, url: str, keep: Path, arch: str) -> list[dict[str, Any]]:
    """Every file to change: path, format, the new text and what it disables."""
    changes = []
    for path in source_files(apt_dir):
        if path.resolve() == keep.resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if path.suffix == ".sources":
            new, disabled = disable_deb822(text, url, str(keep), arch)
            form = "deb822"
        else:
            new, disabled = disable_list(text, url, str(keep), arch)
            form = "one-line"
        if disabled:
            changes.append({"path": str(path), "format": form, "text": new, "disabled": disabled})
    return changes


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path``'s content in one rename, keeping its mode."""
    mode = path.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="surrogateescape") as stream:
            stream.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "keep": {"type": "path", "required": True},
            "apt_dir": {"type": "path", "default": "/etc/apt"},
            "architecture": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = module.params
    arch = params["architecture"]
    if not arch:
        code, out, err = module.run_command(["dpkg", "--print-architecture"])
        if code != 0 or not out.strip():
            module.fail_json(msg=f"dpkg --print-architecture failed: {err.strip() or code}")
        arch = out.strip()
    try:
        changes = plan(Path(params["apt_dir"]), params["url"], Path(params["keep"]), arch)
        if not module.check_mode:
            for change in changes:
                write_atomic(Path(change["path"]), change["text"])
    except OSError as err:
        module.fail_json(msg=f"could not read or rewrite apt's sources: {err}")
    disabled = [{k: c[k] for k in ("path", "format", "disabled")} for c in changes]
    module.exit_json(changed=bool(changes), disabled=disabled)


if __name__ == "__main__":
    main()
