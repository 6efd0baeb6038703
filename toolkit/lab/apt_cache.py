"""The lab's Debian package cache: one apt-cacher-ng shared by every lab on this machine.

Lab nodes install Debian's own packages at converge time (Docker's, from Debian's archive, as
a real Debian 12 server does). Without a cache every new lab downloads them again, node by
node. One cache container serves them all: it runs Debian's ``apt-cacher-ng`` (installed in
the node image, its unit masked there) from the node image, keeps its files in the lab cache
(``<lab home>/_cache/apt-cache``), so it outlives every lab, and joins each lab's network at a
fixed address. A node reaches Debian's archive through it by apt's per-host proxy setting
(apt.conf(5), ``Acquire::http::Proxy::<host>``), exactly as a site with a package proxy
configures its servers; every other repository (the lab's signed NVIDIA stand-ins) stays
direct. ``scripts/forget`` removes the container and its files, so CI starts with an empty
cache.

apt-cacher-ng's transfer log (``apt-cacher.log`` in its LogDir; with VerboseLog, its default,
each entry names the client, and UnbufferLogs writes every line at once: Debian's
/etc/apt-cacher-ng/acng.conf, apt-cacher-ng 3.7.4) has one line per transfer,
``<time>|<I or O>|<bytes>|<client>|<path>``: ``I`` for bytes it fetched from outside the
machine, ``O`` for bytes it served to a node. A package served from the cache has an ``O``
line and no ``I`` line (as this lab's nodes showed: tests/unit/lab/test_apt_cache.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.models.containers import Container

from toolkit.errors import LabError
from toolkit.lab import image, nodes, paths
from toolkit.lab import network as lab_network

PORT = 3142
# The hosts whose packages go through the cache: those of the node image's apt sources.
PROXIED_HOSTS: tuple[str, ...] = tuple(
    sorted({str(urlsplit(url).hostname) for url in (image.MIRROR, image.SECURITY_MIRROR)})
)
CONF_FILE = "/etc/apt/apt.conf.d/01gpunode-lab-apt-cache"
LOG_NAME = "apt-cacher.log"
# The label value that marks the shared cache (`forget` removes every container labelled
# paths.LABEL); a lab name cannot start with "_" (paths.labs_root keeps "_cache" beside labs).
SHARED = "_shared"
# The label that records what the running cache was made of (``ensure``).
SPEC_LABEL = f"{paths.LABEL}.spec"


def cache_root() -> Path:
    """Where the cache keeps its packages (``files``) and its log (``log``)."""
    return paths.cache_dir() / "apt-cache"


def container_name() -> str:
    """One cache per lab home: its name carries a hash of the cache's folder."""
    digest = hashlib.sha256(str(cache_root()).encode()).hexdigest()[:8]
    return f"gpunode-lab-apt-cache-{digest}"


def proxy_conf(ip: str) -> bytes:
    """The apt configuration a lab node gets: Debian's archive through the cache at ``ip``."""
    lines = [
        "// gpunode lab: Debian's archive through the lab's shared package cache",
        "// (toolkit/lab/apt_cache.py). Other repositories stay direct.",
        *(f'Acquire::http::Proxy::{host} "http://{ip}:{PORT}/";' for host in PROXIED_HOSTS),
    ]
    return ("\n".join(lines) + "\n").encode()


def ensure(client: docker.DockerClient, image: str) -> Container:
    """Start the shared cache from ``image`` unless it runs as this would start it already.

    It starts on Docker's default bridge (its way out to Debian's archive) and joins lab
    networks with ``attach``. A cache made otherwise (an older node image, command line or
    cache folder) is replaced; its files stay.

    Raises:
        LabError: Docker refused.
    """
    root = cache_root()
    files, log = root / "files", root / "log"
    for folder in (files, log):
        folder.mkdir(parents=True, exist_ok=True)
    command = [
        "/usr/sbin/apt-cacher-ng",
        "-c",
        "/etc/apt-cacher-ng",
        "ForeGround=1",
        f"Port={PORT}",
        "BindAddress=0.0.0.0",
        "CacheDir=/srv/apt-cache/files",
        "LogDir=/srv/apt-cache/log",
        "UnbufferLogs=1",  # the log is read while the cache runs
        # No statistics page or other administration from the lab networks.
        "ReportPage=",
    ]
    binds = {str(root): {"bind": "/srv/apt-cache", "mode": "rw"}}
    # What the container is made of, as a label: one made otherwise (another node image, an
    # older command line, another cache folder) is replaced.
    spec = hashlib.sha256(repr((image, command, sorted(binds.items()))).encode()).hexdigest()
    name = container_name()
    container = nodes.get_container(client, name)
    if container is not None:
        if container.labels.get(SPEC_LABEL) == spec:
            if container.status != "running":
                container.start()
            return container
        nodes.remove_container(container)
    try:
        created = client.api.create_container(
            image=image,
            name=name,
            hostname="apt-cache",
            command=command,
            labels={paths.LABEL: SHARED, f"{paths.LABEL}.role": "apt-cache", SPEC_LABEL: spec},
            host_config=client.api.create_host_config(
                binds=binds,
                restart_policy={"Name": "unless-stopped"},
                init=True,
            ),
        )
        container = client.containers.get(created["Id"])
        container.start()
    except docker.errors.APIError as err:
        if getattr(err, "status_code", None) == 409:  # another lab up started it just now
            found = nodes.get_container(client, name)
            if found is not None:
                return found
        raise LabError(f"cannot start the lab's package cache {name}: {err}") from err
    return container


def serve(
    client: docker.DockerClient, image: str, network: str, subnet: str
) -> dict[str, nodes.NodeFile]:
    """Run the cache (``ensure``), join it to a lab's network at its fixed address, and
    return the file that lab's nodes get (the apt configuration)."""
    ip = address(subnet)
    ensure(client, image)
    attach(client, network, ip)
    return {CONF_FILE: nodes.NodeFile(proxy_conf(ip))}


def address(subnet: str) -> str:
    """The cache's address on a lab network."""
    return lab_network.host_address(subnet, lab_network.APT_CACHE_HOST)


def describe(client: docker.DockerClient, subnet: str) -> dict[str, str]:
    """The cache as `gpunode lab status` shows it."""
    container = nodes.get_container(client, container_name())
    return {
        "name": container_name(),
        "url": f"http://{address(subnet)}:{PORT}/",
        "container": container.status if container else "missing",
    }


def attach(client: docker.DockerClient, network: str, ip: str) -> None:
    """Join lab network ``network`` at ``ip`` (nothing to do when it is there already)."""
    container = nodes.get_container(client, container_name())
    if container is None:
        raise LabError(f"the lab's package cache {container_name()} is not running")
    joined = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    if network in joined:
        return
    try:
        client.api.connect_container_to_network(container.id, network, ipv4_address=ip)
    except docker.errors.APIError as err:
        raise LabError(f"cannot attach the package cache to {network}: {err}") from err


def detach(client: docker.DockerClient, network: str) -> None:
    """Leave lab network ``network`` before the lab removes it: the cache outlives labs."""
    container = nodes.get_container(client, container_name())
    if container is None:
        return
    joined = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    if network not in joined:
        return
    try:
        client.api.disconnect_container_from_network(container.id, network, force=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as err:
        raise LabError(f"cannot detach the package cache from {network}: {err}") from err


@dataclass(frozen=True)
class Transfer:
    """One line of the cache's transfer log."""

    fetched: bool  # True: bytes from outside the machine (I); False: served to a node (O)
    size: int
    client: str
    path: str

    @property
    def package(self) -> bool:
        return self.path.endswith(".deb")


def read_log(text: str) -> list[Transfer]:
    """The transfers of an apt-cacher-ng log (malformed lines are skipped)."""
    transfers = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 5 or fields[1] not in ("I", "O") or not fields[2].isdigit():
            continue
        transfers.append(
            Transfer(
                fetched=fields[1] == "I",
                size=int(fields[2]),
                client=fields[3],
                path="|".join(fields[4:]),
            )
        )
    return transfers


def log_path() -> Path:
    """The cache's transfer log on this machine."""
    return cache_root() / "log" / LOG_NAME


def log_size() -> int:
    """Where the transfer log ends now (``transfers(since=...)`` reads what comes after)."""
    path = log_path()
    return path.stat().st_size if path.exists() else 0


def transfers(since: int = 0) -> list[Transfer]:
    """The transfers logged after byte ``since`` of the log."""
    path = log_path()
    if not path.exists():
        return []
    with path.open("rb") as log:
        log.seek(since)
        return read_log(log.read().decode(errors="replace"))


def cached_packages() -> set[str]:
    """The packages the cache holds, by the path the log names them with."""
    files = cache_root() / "files"
    if not files.is_dir():
        return set()
    return {str(deb.relative_to(files)) for deb in files.rglob("*.deb")}
