"""SSH identities of a lab: one client key per lab, one host key per node, known_hosts.

Host keys are generated on the control machine and copied into each node before its
first start, so the lab can write ``known_hosts`` without ever trusting a key it first saw
over the network: host key checking stays on everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from toolkit.lab.proc import run

CLIENT_KEY = "id_ed25519"
KNOWN_HOSTS = "known_hosts"
HOST_KEYS_DIR = "host-keys"


def ensure_key(path: Path, comment: str) -> Path:
    """Create an ed25519 key pair at ``path`` (and ``path.pub``) unless it exists."""
    if not path.exists() or not path.with_suffix(".pub").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.with_suffix(".pub").unlink(missing_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    path.chmod(0o600)
    return path


def client_key(lab_dir: Path, lab_name: str) -> Path:
    """The lab's client key (private key path)."""
    return ensure_key(lab_dir / CLIENT_KEY, f"gpunode-lab-{lab_name}")


def host_key(lab_dir: Path, node: str) -> Path:
    """A node's host key (private key path), generated once."""
    return ensure_key(lab_dir / HOST_KEYS_DIR / f"{node}_ed25519", f"root@{node}")


def known_hosts_line(names: Iterable[str], public_key: str) -> str:
    """One known_hosts line: comma-separated names, key type and key (comment dropped)."""
    key_type, key = public_key.split()[:2]
    return f"{','.join(names)} {key_type} {key}"


def write_known_hosts(path: Path, entries: Iterable[tuple[list[str], str]]) -> Path:
    """Write known_hosts from (names, public key text) pairs."""
    lines = [known_hosts_line(names, key) for names, key in entries]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def ssh_options(known_hosts: Path, batch: bool = True) -> list[str]:
    """The ``-o`` options of a lab connection: strict checking against the lab's file.

    Args:
        known_hosts: The lab's known_hosts file.
        batch: Never prompt (for commands); an interactive login leaves it off.
    """
    options = [
        f"UserKnownHostsFile={known_hosts}",
        "StrictHostKeyChecking=yes",
        "IdentitiesOnly=yes",
        "ConnectTimeout=10",
    ]
    if batch:
        options.append("BatchMode=yes")
    return [arg for option in options for arg in ("-o", option)]
