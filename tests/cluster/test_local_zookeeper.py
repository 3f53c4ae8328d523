"""The ZooKeeper launcher: finding Debian's install, a clear error when it is missing,
start on a given port with a data dir, readiness, stop (SIGTERM, then SIGKILL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from odradek.cluster.local_zookeeper import (
    ZooKeeperNotInstalled,
    ZooKeeperStartError,
    find_install,
    four_letter,
    free_port,
    start_zookeeper,
)


def test_finds_debians_install() -> None:
    install = find_install()
    assert install.jar.name.startswith("zookeeper")
    assert install.java.is_file()


def test_a_missing_install_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperNotInstalled, match="apt-get install zookeeper"):
        find_install(tmp_path)


def test_a_versioned_jar_is_found_without_the_symlink(tmp_path: Path) -> None:
    for name in ("zookeeper-jute-3.8.0.jar", "zookeeper-3.8.0.jar", "zookeeper-it-3.8.0.jar"):
        (tmp_path / name).write_bytes(b"")
    assert find_install(tmp_path).jar == tmp_path / "zookeeper-3.8.0.jar"


def test_starts_on_the_given_port_and_stops(tmp_path: Path) -> None:
    port = free_port()
    server = start_zookeeper(tmp_path / "zk", port=port, tick_ms=200, force_sync=False)
    try:
        assert server.port == port
        assert four_letter(port, "ruok") == "imok"
        assert "Mode: standalone" in four_letter(port, "srvr")
        assert (tmp_path / "zk" / "zoo.cfg").is_file()
        assert (tmp_path / "zk" / "data").is_dir()
    finally:
        status = server.stop()
    assert status is not None
    assert not server.alive()


def test_a_port_in_use_fails_with_the_log(tmp_path: Path) -> None:
    first = start_zookeeper(tmp_path / "a", tick_ms=200, force_sync=False)
    try:
        with pytest.raises(ZooKeeperStartError, match="in use"):
            start_zookeeper(tmp_path / "b", port=first.port, tick_ms=200, timeout=20)
    finally:
        first.stop()


def test_the_session_timeout_cap_is_configurable(tmp_path: Path) -> None:
    server = start_zookeeper(tmp_path / "zk", tick_ms=200, force_sync=False,
                             max_session_timeout_ms=60_000)
    client = KazooClient(hosts=server.address, timeout=6.0)
    try:
        client.start(timeout=10)
        # what the server granted (it would cap 6 s at 20 ticks = 4 s by default)
        assert "to=6000" in four_letter(server.port, "cons")
    finally:
        client.stop()
        client.close()
        server.stop()
