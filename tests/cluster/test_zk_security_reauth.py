"""A ZooKeeper that stops accepting the broker's SASL credentials while the broker runs.

kazoo gives up for good on an AUTH_FAILED; Kafka's ZooKeeperClient logs an ERROR and
reinitializes the session after a backoff. The store must do the same: an ERROR naming
the user and the reason on every refusal, retries with a bounded backoff, and, once
ZooKeeper accepts the credentials again, a new session announced to its listeners, on
which znodes are created with the secure ACLs as before.

A real Debian ZooKeeper, restarted on the same port and data with the broker user's
password changed on the server (its ``Server`` JAAS section), then changed back."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions

from odradek.cluster.local_zookeeper import LocalZooKeeper, ServerTls, start_zookeeper
from odradek.cluster.store import SessionEvent
from odradek.cluster.zk_security import ZkClientSecurity
from odradek.cluster.zk_store import ZooKeeperStore
from odradek.server.config import BrokerConfig
from tests.cluster._zk_tls import make_tls_files
from tests.cluster._zookeeper import TICK_MS, wait_for
from tests.cluster.test_zk_security import BROKER, BROKER_PASSWORD, client_jaas
from tests.interop._broker import start_broker

REFUSAL = f"ZooKeeper refused the SASL DIGEST-MD5 authentication of user '{BROKER}'"


class RestartableZooKeeper:
    """One data directory and port, restarted with other SASL users."""

    def __init__(self, workdir: Path, tls: ServerTls | None = None) -> None:
        self.workdir = workdir
        self.tls = tls
        self.server: LocalZooKeeper | None = None
        self.port: int | None = None

    def start(self, password: str) -> None:
        self.server = start_zookeeper(self.workdir, port=self.port, tick_ms=TICK_MS,
                                      force_sync=False, sasl_users={BROKER: password},
                                      tls=self.tls)
        self.port = self.server.port

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture
def zookeeper() -> Iterator[RestartableZooKeeper]:
    workdir = Path(tempfile.mkdtemp(prefix="odradek-zk-reauth-"))
    server = RestartableZooKeeper(workdir)
    try:
        server.start(BROKER_PASSWORD)
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_refused_reauthentication_is_logged_retried_and_recovers(
        zookeeper: RestartableZooKeeper, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="odradek.cluster.zk_store")
    jaas = client_jaas(tmp_path / "zk_jaas.conf")
    security = ZkClientSecurity.from_jvm_properties(
        {"java.security.auth.login.config": str(jaas)}, set_acl=True)
    assert zookeeper.server is not None
    store = ZooKeeperStore(zookeeper.server.connect_string("/reauth"), 4000, 5000,
                           security=security)
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    try:
        store.create("/brokers/ids/1", b"{}", ephemeral=True)
        zookeeper.stop()
        zookeeper.start("changed-" + BROKER_PASSWORD)

        def refusals() -> list[logging.LogRecord]:
            return [r for r in caplog.records
                    if r.levelno == logging.ERROR and REFUSAL in r.getMessage()]

        # refused, said at ERROR with the reason, and tried again (not given up)
        wait_for(lambda: len(refusals()) >= 2, 30, "two refusals logged at ERROR")
        assert all(BROKER_PASSWORD not in r.getMessage() for r in caplog.records)
        assert SessionEvent.NEW_SESSION not in events

        zookeeper.stop()
        zookeeper.start(BROKER_PASSWORD)
        wait_for(lambda: SessionEvent.NEW_SESSION in events, 30, "a new session")
        assert events.count(SessionEvent.EXPIRED) == 1, events  # told once, not per retry
        # the refused session is closed, its ephemeral node with it (not left to time out)
        assert store.get("/brokers/ids/1") is None
        store.create("/brokers/ids/2", b"{}", ephemeral=True)
        acls, _ = store.client.get_acls("/brokers/ids/2")
        assert ACL(Permissions.ALL, Id("sasl", BROKER)) in acls
        assert ACL(Permissions.ALL, Id("world", "anyone")) not in acls
        assert any("authenticated to ZooKeeper again" in r.getMessage()
                   for r in caplog.records)
    finally:
        store.close()


def test_a_broker_refused_by_zookeeper_says_so_and_rejoins(
        zookeeper: RestartableZooKeeper, tmp_path: Path) -> None:
    """A real broker: an ERROR naming the reason on each refusal, then its registration
    back and a topic created afterwards locked as before."""
    jaas = client_jaas(tmp_path / "zk_jaas.conf")
    assert zookeeper.server is not None
    connect = zookeeper.server.connect_string("/rejoin")
    broker = start_broker(tmp_path / "b1", env={
        "KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}, overrides={
        "broker.id": 1, "zookeeper.connect": connect, "zookeeper.set.acl": "true",
        "zookeeper.session.timeout.ms": 6000})
    world: KazooClient | None = None
    try:
        zookeeper.stop()
        zookeeper.start("changed-" + BROKER_PASSWORD)
        wait_for(lambda: broker.stderr().count(REFUSAL) >= 2, 40,
                 "the broker's ERROR, twice (retrying)")
        assert "ERROR" in next(line for line in broker.stderr().splitlines()
                               if REFUSAL in line)
        assert BROKER_PASSWORD not in broker.stderr()

        zookeeper.stop()
        zookeeper.start(BROKER_PASSWORD)
        world = KazooClient(hosts=zookeeper.server.connect_string("/rejoin"), timeout=5.0)
        world.start(timeout=10)
        client = world
        wait_for(lambda: client.exists("/brokers/ids/1") is not None
                 and client.exists("/controller") is not None, 40,
                 "the broker registered again and controlling")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        wait_for(lambda: admin.list_topics(timeout=5).controller_id == 1, 30,
                 "the broker naming itself the controller")
        admin.create_topics([NewTopic("after-rejoin", 1, 1)])["after-rejoin"].result(30)
        acls, _ = world.get_acls("/brokers/topics/after-rejoin")
        assert ACL(Permissions.ALL, Id("sasl", BROKER)) in acls
        assert ACL(Permissions.ALL, Id("world", "anyone")) not in acls
    finally:
        if world is not None:
            world.stop()
            world.close()
        broker.stop()


def test_over_tls_a_restart_keeps_the_session_and_sasl_and_acls_follow_a_new_one(
        tmp_path: Path) -> None:
    """TLS and SASL together: ZooKeeper restarted, the client reconnects over TLS to the
    same session (its ephemeral node kept) and authenticates again; after an expiry, a new
    session over TLS; znodes created after either carry the secure ACLs."""
    files = make_tls_files(tmp_path / "tls")
    server = RestartableZooKeeper(tmp_path / "zk", tls=files.server())
    server.start(BROKER_PASSWORD)
    jaas = client_jaas(tmp_path / "zk_jaas.conf")
    config = BrokerConfig.from_raw({**files.broker_overrides(), "zookeeper.set.acl": "true"})
    security = ZkClientSecurity.for_broker(config.values, config.raw, {
        "KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"})
    assert security.tls is not None and security.sasl is not None
    store: ZooKeeperStore | None = None
    try:
        assert server.server is not None
        store = ZooKeeperStore(server.server.connect_string("/tls-reauth"), 4000, 5000,
                               security=security)
        events: list[SessionEvent] = []
        store.add_session_listener(events.append)
        store.create("/brokers/ids/1", b"{}", ephemeral=True)
        session = store.session_id
        server.stop()
        server.start(BROKER_PASSWORD)
        live = store
        wait_for(lambda: SessionEvent.RECONNECTED in events, 30, "reconnected over TLS")
        assert store.session_id == session
        node = store.get("/brokers/ids/1")
        assert node is not None and node.ephemeral_owner == session
        store.create("/config/users/after-restart", b"{}")
        acls, _ = store.client.get_acls("/config/users/after-restart")
        assert ACL(Permissions.ALL, Id("sasl", BROKER)) in acls
        assert {acl.id.scheme for acl in acls} == {"sasl", "x509"}  # both creators, no world

        # the session expires (a twin over TLS closes it): a new one, over TLS again
        twin = KazooClient(hosts=server.server.connect_string(), client_id=store.client.client_id,
                           timeout=4.0, **security.kazoo_options())
        twin.start(timeout=10)
        twin.stop()
        twin.close()
        wait_for(lambda: SessionEvent.NEW_SESSION in events, 30, "a new session over TLS")
        assert live.session_id != session
        assert store.get("/brokers/ids/1") is None
        store.create("/config/users/after-expiry", b"{}")
        acls, _ = store.client.get_acls("/config/users/after-expiry")
        assert {acl.id.scheme for acl in acls} == {"sasl", "x509"}
    finally:
        if store is not None:
            store.close()
        server.stop()
