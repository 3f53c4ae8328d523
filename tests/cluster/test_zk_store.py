"""ZooKeeperStore specifics (odradek.cluster.zk_store): connect strings, timeouts, chroots,
sessions over a real ZooKeeper. The shared contract is in test_store.py."""

from __future__ import annotations

import re
import threading
import time

import pytest

from odradek.cluster.store import SessionEvent, StoreConnectionError, StoreError
from odradek.cluster.zk_store import ZooKeeperSettings, ZooKeeperStore, split_connect
from tests.cluster._zookeeper import ZooKeeperServer, wait_for
from tests.interop._broker import refusing_address


def test_split_connect() -> None:
    assert split_connect("h1:2181,h2:2181/odradek") == ("h1:2181,h2:2181", "/odradek")
    assert split_connect("h1:2181/a/b/") == ("h1:2181", "/a/b")
    assert split_connect("h1:2181") == ("h1:2181", "")
    assert split_connect("h1:2181/") == ("h1:2181", "")
    with pytest.raises(StoreError):
        split_connect("/only-a-chroot")


def test_settings_from_properties() -> None:
    s = ZooKeeperSettings.from_properties({"zookeeper.connect": "zk:2181/k"})
    assert (s.session_timeout_ms, s.effective_connection_timeout_ms) == (18000, 18000)
    s = ZooKeeperSettings.from_properties({
        "zookeeper.connect": "zk:2181", "zookeeper.session.timeout.ms": "6000",
        "zookeeper.connection.timeout.ms": "2000",
    })
    assert (s.session_timeout_ms, s.effective_connection_timeout_ms) == (6000, 2000)
    with pytest.raises(StoreError, match=r"zookeeper\.connect"):
        ZooKeeperSettings.from_properties({})


def test_unreachable_server_names_the_address() -> None:
    with refusing_address() as address:  # a port nobody listens on, nor can take
        started = time.monotonic()
        with pytest.raises(StoreConnectionError, match=rf"{re.escape(address)} within 500 ms"):
            ZooKeeperStore(f"{address}/odradek", 4000, 500)
    assert time.monotonic() - started < 5


def test_chroot_is_created_and_isolates(zookeeper: ZooKeeperServer, zk_chroot: str) -> None:
    store = ZooKeeperStore(zookeeper.connect_string(zk_chroot + "/odradek"), 4000, 5000)
    other = zookeeper.store(zookeeper.fresh_chroot())
    root = ZooKeeperStore(zookeeper.connect_string(), 4000, 5000)
    try:
        store.create("/brokers/ids/1", b"x", ephemeral=True)
        assert root.get(zk_chroot + "/odradek/brokers/ids/1") is not None
        assert other.get("/brokers/ids/1") is None
        assert store.settings.session_timeout_ms == 4000
        assert root.client._session_timeout == 4000
    finally:
        for s in (store, other, root):
            s.close()


def test_suspended_then_reconnected_refires_watches(
    zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    """A server pause shorter than the session: SUSPENDED, then RECONNECTED with the same
    session and ephemerals, and a change made meanwhile still reaches the watcher."""
    store = ZooKeeperStore(zookeeper.connect_string(zk_chroot), 6000, 5000)
    writer = zookeeper.store(zk_chroot)
    events: list[SessionEvent] = []
    fired = threading.Event()
    try:
        store.add_session_listener(events.append)
        store.create("/eph", b"", ephemeral=True)
        store.create("/watched", b"0")
        store.get("/watched", watch=lambda _p: fired.set())
        session = store.session_id
        with zookeeper.paused():
            wait_for(lambda: SessionEvent.SUSPENDED in events, 10, "SUSPENDED")
        wait_for(lambda: SessionEvent.RECONNECTED in events, 10, "RECONNECTED")
        assert SessionEvent.EXPIRED not in events
        assert store.session_id == session
        assert store.get("/eph") is not None
        writer.set("/watched", b"1")
        wait_for(fired.is_set, 10, "the watch set before the outage")
    finally:
        store.close()
        writer.close()
