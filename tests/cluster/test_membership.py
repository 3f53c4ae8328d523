"""Broker registration in /brokers/ids (odradek.cluster.membership) on a real ZooKeeper."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from odradek.cluster.membership import (
    BrokerChangeWatcher,
    BrokerIdInUseError,
    BrokerInfo,
    BrokerRegistration,
    EndPoint,
    live_brokers,
    wait_out_previous_registration,
)
from odradek.cluster.store import MetadataStore, SessionExpiredError
from tests.cluster._zookeeper import ZooKeeperServer, expire_session, wait_for
from tests.cluster.conftest import Backend


def _registration(store: MetadataStore, broker_id: int, port: int = 9092) -> BrokerRegistration:
    endpoints = [
        EndPoint("PLAINTEXT", "127.0.0.1", port), EndPoint("SSL", "127.0.0.1", port + 1, "SSL")
    ]
    return BrokerRegistration(store, broker_id, endpoints, rack=f"rack-{broker_id % 2}")


class Changes:
    def __init__(self) -> None:
        self.seen: list[set[int]] = []
        self._lock = threading.Lock()

    def __call__(self, brokers: dict[int, BrokerInfo]) -> None:
        with self._lock:
            self.seen.append(set(brokers))

    def last(self) -> set[int] | None:
        with self._lock:
            return self.seen[-1] if self.seen else None


def test_registration_json_is_kafkas(backend: Backend) -> None:
    store = backend.open()
    _registration(store, 3).register()
    found = store.get_json("/brokers/ids/3")
    assert found is not None
    doc, _ = found
    assert isinstance(doc, dict)
    assert doc["version"] == 5
    assert (doc["host"], doc["port"]) == ("127.0.0.1", 9092)
    assert doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "SSL://127.0.0.1:9093"]
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert doc["jmx_port"] == -1 and doc["rack"] == "rack-1" and doc["features"] == {}
    assert doc["timestamp"].isdigit()
    node = store.get("/brokers/ids/3")
    assert node is not None and node.ephemeral


def test_kafka_written_registration_decodes() -> None:
    raw = json.dumps({
        "listener_security_protocol_map": {"CLIENT": "SASL_SSL", "REPL": "PLAINTEXT"},
        "endpoints": ["CLIENT://h1:9094", "REPL://h1:9092"], "jmx_port": -1,
        "features": {}, "host": "h1", "timestamp": "1700000000000", "port": 9092, "version": 5,
    }).encode()
    info = BrokerInfo.decode(7, raw)
    assert info.rack is None
    assert info.endpoints == (
        EndPoint("CLIENT", "h1", 9094, "SASL_SSL"), EndPoint("REPL", "h1", 9092, "PLAINTEXT")
    )
    assert info.to_json()["host"] == "h1"  # first PLAINTEXT endpoint


def test_list_live_brokers(zookeeper: ZooKeeperServer, zk_chroot: str,
                           zk_stores: list[MetadataStore]) -> None:
    for broker_id in (1, 2, 3):
        store = zookeeper.store(zk_chroot)
        zk_stores.append(store)
        _registration(store, broker_id, 9000 + 10 * broker_id).register()
    observer = zookeeper.store(zk_chroot)
    zk_stores.append(observer)
    brokers = live_brokers(observer)
    assert sorted(brokers) == [1, 2, 3]
    assert brokers[2].endpoint("PLAINTEXT") == EndPoint("PLAINTEXT", "127.0.0.1", 9020)
    assert brokers[2].rack == "rack-0"


def test_duplicate_id_refused(zookeeper: ZooKeeperServer, zk_chroot: str,
                              zk_stores: list[MetadataStore]) -> None:
    first, second = zookeeper.store(zk_chroot), zookeeper.store(zk_chroot)
    zk_stores += [first, second]
    _registration(first, 1, 9092).register()
    with pytest.raises(BrokerIdInUseError) as info:
        _registration(second, 1, 9192).register()
    assert "broker.id 1 is already registered by a live broker at 127.0.0.1:9092" in str(
        info.value
    )


def test_register_twice_in_one_session_is_idempotent(store: MetadataStore) -> None:
    _registration(store, 4).register()
    _registration(store, 4).register()  # the node is ours: a retried create


def test_watcher_sees_join_close_and_expiry(zookeeper: ZooKeeperServer, zk_chroot: str,
                                            zk_stores: list[MetadataStore]) -> None:
    observer = zookeeper.store(zk_chroot)
    a, b = zookeeper.store(zk_chroot), zookeeper.store(zk_chroot)
    zk_stores += [observer, a, b]
    changes = Changes()
    watcher = BrokerChangeWatcher(observer, changes)
    assert watcher.start() == {}
    reg_a = _registration(a, 1)
    reg_a.register()
    _registration(b, 2, 9192).register()
    wait_for(lambda: changes.last() == {1, 2}, what="both brokers")
    b.close()  # a closed session removes its node
    wait_for(lambda: changes.last() == {1}, what="broker 2 gone")
    # An expired session removes the node; the broker registers again in its new session.
    expire_session(a, zookeeper)
    # the registration says so once its create has been answered and the node read back
    # (its broker epoch): the observer may see the node a moment before (Q79)
    wait_for(lambda: changes.last() == {1} and len(changes.seen) >= 4 and reg_a.registered,
             what="1 back")
    assert {1} in changes.seen[2:] and set() in changes.seen[2:]
    node = observer.get("/brokers/ids/1")
    assert node is not None and node.ephemeral_owner == a.session_id
    watcher.close()


def test_reregistration_after_expiry(backend: Backend) -> None:
    store = backend.open()
    registration = _registration(store, 5)
    registration.register()
    old = store.session_id
    backend.expire(store)
    wait_for(lambda: (n := store.get("/brokers/ids/5")) is not None
             and n.ephemeral_owner == store.session_id != old, what="re-registration")
    registration.unregister()
    assert store.get("/brokers/ids/5") is None


def test_a_registration_rides_out_its_session_expiring_while_it_runs(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[MetadataStore],
) -> None:
    """The session expires between the registration's create and its read (a broker paused
    right there, past its session timeout, as a whole run saw): the broker registers on
    the new session instead of failing its start."""
    store = zookeeper.store(zk_chroot)
    zk_stores.append(store)
    real_get = store.get
    lost: list[int] = []

    def get(path: str, watch: Any = None) -> Any:
        if path == "/brokers/ids/6" and not lost:
            lost.append(store.session_id)
            expire_session(store, zookeeper)  # type: ignore[arg-type]
            raise SessionExpiredError(f"{path}: SessionExpiredError")
        return real_get(path, watch)

    store.get = get  # type: ignore[method-assign]
    registration = _registration(store, 6)
    registration.register()
    assert lost and store.session_id != lost[0]
    node = real_get("/brokers/ids/6")
    assert node is not None and node.ephemeral_owner == store.session_id
    assert registration.registered


# -- a restart within the session timeout (wait_out_previous_registration) ----------------------
ENDPOINTS = [EndPoint("PLAINTEXT", "127.0.0.1", 9092)]


def _left_by_a_killed_run(zookeeper: ZooKeeperServer, zk_chroot: str,
                          zk_stores: list[MetadataStore]) -> tuple[MetadataStore, MetadataStore]:
    """A registration whose session lives on (the run was killed -9), and the session of
    the broker started again."""
    old, new = zookeeper.store(zk_chroot), zookeeper.store(zk_chroot)
    zk_stores += [old, new]
    info = BrokerInfo(1, tuple(ENDPOINTS))
    old.create(info.path, info.encode(), ephemeral=True)
    return old, new


def test_a_restart_waits_out_its_own_previous_registration(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[MetadataStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    old, new = _left_by_a_killed_run(zookeeper, zk_chroot, zk_stores)
    caplog.set_level(logging.INFO, "odradek.cluster.membership")
    outcome: list[BaseException | None] = []

    def restart() -> None:
        try:
            wait_out_previous_registration(new, 1, ENDPOINTS, 30.0)
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    waiter = threading.Thread(target=restart)
    waiter.start()
    wait_for(lambda: "waiting up to" in caplog.text, what="the log line saying why")
    assert not outcome  # still waiting
    expire_session(old, zookeeper)  # ZooKeeper expires the killed run's session
    waiter.join(10)
    assert outcome == [None]
    assert "this broker's own endpoints" in caplog.text
    _registration(new, 1).register()  # then it registers


def test_a_registration_with_other_endpoints_is_refused_at_once(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[MetadataStore],
) -> None:
    _old, new = _left_by_a_killed_run(zookeeper, zk_chroot, zk_stores)
    with pytest.raises(BrokerIdInUseError, match="already registered by a live broker"):
        wait_out_previous_registration(new, 1, [EndPoint("PLAINTEXT", "127.0.0.1", 9192)],
                                       30.0)


def test_a_registration_still_live_after_the_session_timeout_is_refused(
    zookeeper: ZooKeeperServer, zk_chroot: str, zk_stores: list[MetadataStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same endpoints but alive: another broker configured alike (a mistake), not a
    restart. Refused once the session timeout has passed."""
    _old, new = _left_by_a_killed_run(zookeeper, zk_chroot, zk_stores)
    monkeypatch.setattr("odradek.cluster.membership.EXPIRY_MARGIN_S", 0.0)
    with pytest.raises(BrokerIdInUseError, match="still registered"):
        wait_out_previous_registration(new, 1, ENDPOINTS, 0.3)
