"""The lab's shared Debian package cache: what nodes are told, and how its log is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.lab import apt_cache, image, paths

# Lines of apt-cacher-ng 3.7.4's apt-cacher.log written while two lab nodes installed Docker's
# packages (a cold cache: one node's request is fetched and served, the other's only served),
# and two lines that are not transfers.
LOG = """\
1796643889|I|151287|10.213.221.11|debrep/dists/bookworm/InRelease
1796643889|O|151293|10.213.221.11|debrep/dists/bookworm/InRelease
1796644084|I|40968|10.213.221.12|debrep/pool/main/libn/libnetfilter-conntrack/libnetfilter-conntrack3_1.0.9-3_amd64.deb
1796644084|O|40976|10.213.221.12|debrep/pool/main/libn/libnetfilter-conntrack/libnetfilter-conntrack3_1.0.9-3_amd64.deb
1796644084|O|40976|10.213.221.11|debrep/pool/main/libn/libnetfilter-conntrack/libnetfilter-conntrack3_1.0.9-3_amd64.deb
not a transfer line
1796643962|X|12|10.213.221.11|debrep/pool/odd.deb
"""


def test_nodes_reach_only_debians_archive_through_the_cache() -> None:
    conf = apt_cache.proxy_conf("10.213.9.3").decode()
    proxies = [line for line in conf.splitlines() if line.startswith("Acquire::")]
    # Every host of the node image's sources, and nothing else (the lab's own repository,
    # and NVIDIA's where a site has it, stay direct).
    assert apt_cache.PROXIED_HOSTS == ("deb.debian.org",)
    assert image.MIRROR.startswith("http://deb.debian.org/")
    assert image.SECURITY_MIRROR.startswith("http://deb.debian.org/")
    assert proxies == ['Acquire::http::Proxy::deb.debian.org "http://10.213.9.3:3142/";']
    assert "Acquire::http::Proxy " not in conf  # never a proxy for every host


def test_the_node_image_carries_the_cache_but_never_runs_it() -> None:
    assert "apt-cacher-ng" in image.PACKAGES
    assert "apt-cacher-ng.service" in image.MASKED_UNITS


def test_the_log_tells_fetched_from_served() -> None:
    moved = apt_cache.read_log(LOG)
    assert len(moved) == 5  # the malformed and unknown-direction lines are skipped
    packages = [t for t in moved if t.package]
    assert [(t.fetched, t.client) for t in packages] == [
        (True, "10.213.221.12"),
        (False, "10.213.221.12"),
        (False, "10.213.221.11"),
    ]
    assert packages[0].path.endswith("/libnetfilter-conntrack3_1.0.9-3_amd64.deb")
    assert packages[0].size == 40968


def test_transfers_since_an_offset_and_cached_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path))
    assert apt_cache.transfers() == [] and apt_cache.log_size() == 0
    assert apt_cache.cached_packages() == set()
    log = apt_cache.log_path()
    log.parent.mkdir(parents=True)
    first, rest = LOG.split("\n", 2)[:2], LOG.split("\n", 2)[2]
    log.write_text("\n".join(first) + "\n")
    start = apt_cache.log_size()
    with log.open("a") as handle:
        handle.write(rest)
    assert [t.fetched for t in apt_cache.transfers(start)] == [True, False, False]
    deb = apt_cache.cache_root() / "files" / "debrep/pool/main/l/libnet/libnet1_1_amd64.deb"
    deb.parent.mkdir(parents=True)
    deb.write_bytes(b"!<arch>\n")
    assert apt_cache.cached_packages() == {"debrep/pool/main/l/libnet/libnet1_1_amd64.deb"}


def test_one_cache_per_lab_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path / "a"))
    first = apt_cache.container_name()
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path / "b"))
    assert apt_cache.container_name() != first
    assert first.startswith("gpunode-lab-apt-cache-")
