"""The lab network: one Docker bridge per lab with fixed addresses.

Addresses are fixed so that the inventory, ``known_hosts`` and the repository URL stay
valid across restarts: ``.1`` is the host (bridge gateway), ``.2`` the package server and
``.10 + i`` node ``i``.
"""

from __future__ import annotations

import ipaddress
import socket
import time

import docker
import docker.errors
import docker.types

from toolkit.errors import LabError
from toolkit.lab import paths
from toolkit.lab.spec import name_tag

# A /16 rarely used by Docker's default pools (172.17-31/16, 192.168/16) or by sites.
LAB_SUPERNET = ipaddress.ip_network("10.213.0.0/16")
SERVER_HOST = 2
APT_CACHE_HOST = 3  # the shared Debian package cache (toolkit/lab/apt_cache.py)
FIRST_NODE_HOST = 10


def network_name(lab_name: str) -> str:
    """The Docker network of a lab."""
    return f"{lab_name}-net"


def candidate_subnets(lab_name: str) -> list[ipaddress.IPv4Network]:
    """The /24s a lab tries, starting at one derived from its name (labs rarely collide)."""
    subnets = list(LAB_SUPERNET.subnets(new_prefix=24))
    start = int(name_tag(lab_name), 16) % len(subnets)
    ordered = subnets[start:] + subnets[:start]
    return [s for s in ordered if isinstance(s, ipaddress.IPv4Network)]


def host_address(subnet: str, host: int) -> str:
    """The address ``host`` (1-254) inside ``subnet``."""
    network = ipaddress.ip_network(subnet)
    return str(network.network_address + host)


def node_address(subnet: str, index: int) -> str:
    """Node ``index``'s address (index from 1)."""
    return host_address(subnet, FIRST_NODE_HOST + index)


def ensure_network(client: docker.DockerClient, lab_name: str) -> tuple[str, str, str]:
    """Create the lab's bridge unless it exists.

    Returns:
        (network name, subnet, gateway).

    Raises:
        LabError: No free subnet, or Docker refused.
    """
    name = network_name(lab_name)
    existing = client.networks.list(names=[name])
    for network in existing:
        if network.name == name:
            if (network.attrs.get("Labels") or {}).get(paths.LABEL) != lab_name:
                raise LabError(
                    f"a Docker network named {name} exists but was not made by lab {lab_name}; "
                    "remove it or choose another lab name"
                )
            config = network.attrs["IPAM"]["Config"][0]
            return name, config["Subnet"], config["Gateway"]
    last_error: Exception | None = None
    for subnet in candidate_subnets(lab_name)[:32]:
        gateway = str(subnet.network_address + 1)
        ipam = docker.types.IPAMConfig(
            pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)]
        )
        try:
            client.networks.create(
                name,
                driver="bridge",
                ipam=ipam,
                labels={paths.LABEL: lab_name},
                check_duplicate=True,
            )
        except docker.errors.APIError as err:
            if "overlap" in str(err).lower():
                last_error = err
                continue
            raise LabError(f"cannot create the lab network {name}: {err}") from err
        return name, str(subnet), gateway
    raise LabError(f"no free /24 in {LAB_SUPERNET} for the lab network {name}: {last_error}")


def remove_networks(client: docker.DockerClient, lab_name: str) -> list[str]:
    """Remove every network labelled with this lab; returns their names."""
    removed = []
    for network in client.networks.list(filters={"label": f"{paths.LABEL}={lab_name}"}):
        try:
            network.remove()
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as err:
            raise LabError(f"cannot remove network {network.name}: {err}") from err
        removed.append(str(network.name))
    return removed


def wait_for_banner(
    ip: str, port: int, expect: bytes, what: str, deadline: float, send: bytes = b""
) -> None:
    """Wait until a TCP service on the lab network answers with its banner.

    Args:
        ip: The service's address.
        port: Its port.
        expect: What the first bytes of its answer start with (``b"SSH-"``, ``b"HTTP/"``).
        what: The service, for the error message.
        deadline: A ``time.monotonic()`` value.
        send: Bytes to send first (a request), for services that speak only when asked.

    Raises:
        LabError: The service did not answer by the deadline.
    """
    while True:
        try:
            with socket.create_connection((ip, port), timeout=2) as sock:
                if send:
                    sock.sendall(send)
                if sock.recv(64).startswith(expect):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise LabError(f"{what} at {ip}:{port} does not answer")
        time.sleep(0.3)


def port_open(ip: str, port: int) -> bool:
    """Whether a TCP service on the lab network accepts a connection now."""
    try:
        with socket.create_connection((ip, port), timeout=1):
            return True
    except OSError:
        return False
