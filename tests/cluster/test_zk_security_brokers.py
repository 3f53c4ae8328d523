"""Brokers with ``zookeeper.set.acl=true`` on a SASL ZooKeeper: they start, elect, serve
and replicate, every znode they write carries Kafka's ACLs, a broker that cannot
authenticate (no credentials, a wrong password) refuses to start at once, saying why, and
a three-broker cluster fails over after its controller is killed -9 and enforces on every
broker an ACL created through one.

Real ``odradek serve`` processes (credentials from ``KAFKA_OPTS``'s
``-Djava.security.auth.login.config``, as Kafka's start scripts pass them), a real Debian
ZooKeeper with a DIGEST-MD5 user, confluent-kafka as the client, a kazoo client without
credentials as the world."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from odradek.cluster.local_zookeeper import start_zookeeper
from tests.cluster._zookeeper import ZooKeeperServer, running_zookeeper, wait_for
from tests.cluster.test_zk_security import BROKER, BROKER_PASSWORD, client_jaas
from tests.interop._broker import BrokerProcess, BrokerStartError, start_broker
from tests.interop._cluster import MAX_SESSION_TIMEOUT_MS, ZK_TICK_MS, running_cluster
from tests.interop.test_acls import ANON, OPEN, _produce, acls


@pytest.fixture(scope="module")
def sasl_zookeeper() -> Iterator[ZooKeeperServer]:
    with running_zookeeper(sasl_users={BROKER: BROKER_PASSWORD}) as server:
        yield server


def test_secured_brokers_start_serve_and_lock_their_znodes(
        sasl_zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    chroot = f"/secured-{uuid.uuid4().hex[:8]}"
    jaas = client_jaas(tmp_path / "zk_jaas.conf")
    env = {"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}
    brokers: list[BrokerProcess] = []
    world = KazooClient(hosts=sasl_zookeeper.connect_string(chroot), timeout=5.0)
    try:
        for broker_id in (1, 2):
            brokers.append(start_broker(
                tmp_path / f"b{broker_id}", env=env, overrides={
                    "broker.id": broker_id,
                    "zookeeper.connect": sasl_zookeeper.connect_string(chroot),
                    "zookeeper.session.timeout.ms": 6000,
                    "zookeeper.set.acl": "true",
                }))
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
        world.start(timeout=10)
        wait_for(lambda: world.exists("/brokers/ids/2") and world.exists("/controller"),
                 30, "both brokers registered and a controller")

        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = "secured"
        admin.create_topics([NewTopic(topic, 1, 2, config={"retention.ms": "3600000"})])[
            topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce(topic, b"through a locked ZooKeeper")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            values: list[bytes | None] = []

            def consumed() -> bool:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(message.value())
                return bool(values)

            wait_for(consumed, 30, "the record consumed")
            assert values == [b"through a locked ZooKeeper"]
        finally:
            consumer.close()

        # The world reads what Kafka lets it read and writes nothing.
        assert world.get(f"/brokers/topics/{topic}")[0]
        assert world.get(f"/config/topics/{topic}")[0]
        acls, _ = world.get_acls("/brokers/ids/1")
        assert acls == [ACL(Permissions.ALL, Id("sasl", BROKER)),
                        ACL(Permissions.READ, Id("world", "anyone"))]
        for attempt in (lambda: world.set(f"/config/topics/{topic}", b"{}"),
                        lambda: world.delete("/controller"),
                        lambda: world.create("/config/users", b"{}"),  # the parent of credentials
                        lambda: world.set("/controller_epoch", b"99"),
                        lambda: world.create("/kafka-acl", b"")):  # the chroot's root
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        world.stop()
        world.close()
        for broker in brokers:
            broker.stop()


def test_a_broker_with_set_acl_and_no_credentials_refuses_to_start(
        sasl_zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError) as refused:
        start_broker(tmp_path, env={"KAFKA_OPTS": ""}, timeout=30, overrides={
            "broker.id": 1,
            "zookeeper.connect": sasl_zookeeper.connect_string("/refused"),
            "zookeeper.set.acl": "true",
        })
    assert "zookeeper.set.acl is true, but the broker has no way to authenticate" in str(
        refused.value)


def test_a_wrong_zookeeper_password_refuses_to_start_at_once(
        sasl_zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    jaas = client_jaas(tmp_path / "zk_jaas.conf", password="not-" + BROKER_PASSWORD)
    began = time.monotonic()
    with pytest.raises(BrokerStartError) as refused:
        start_broker(tmp_path, timeout=30, env={
            "KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}, overrides={
            "broker.id": 1,
            "zookeeper.connect": sasl_zookeeper.connect_string("/wrong-password"),
            "zookeeper.session.timeout.ms": 30000,
        })
    took = time.monotonic() - began
    message = str(refused.value)
    assert "broker exited during startup" in message
    assert (f"ZooKeeper refused the SASL DIGEST-MD5 authentication of user '{BROKER}'"
            in message), message
    assert str(jaas) in message
    assert "not-" + BROKER_PASSWORD not in message
    assert took < 15, f"refused after {took:.1f} s"


def test_three_secured_brokers_fail_over_and_share_acls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of the controller, also the partition's leader: a new controller, a new
    leader, nothing acknowledged lost; an ACL added through one broker is enforced by
    another, and once removed through a third, no longer."""
    jaas = client_jaas(tmp_path / "zk_jaas.conf")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    # the brokers' sessions may be as long as the cluster helper asks (6 s)
    server = start_zookeeper(tmp_path / "zookeeper", tick_ms=ZK_TICK_MS, force_sync=False,
                             max_session_timeout_ms=MAX_SESSION_TIMEOUT_MS,
                             sasl_users={BROKER: BROKER_PASSWORD})
    try:
        with running_cluster(tmp_path / "cluster", size=3, zookeeper=server,
                             overrides={**OPEN, "zookeeper.set.acl": "true"}) as cluster:
            controller, epoch = cluster.wait_controller(30)
            others = [b for b in (1, 2, 3) if b != controller]
            topic = f"failover-{uuid.uuid4().hex[:8]}"
            cluster.create_topic(topic, replica_assignment=[[controller, *others]])
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
            for i in range(5):
                producer.produce(topic, f"before-{i}".encode())
            assert producer.flush(30) == 0

            cluster.kill9(controller)
            killed = time.monotonic()
            cluster.wait_for(lambda: cluster.controller()[0] in others
                             and (cluster.controller()[1] or 0) > epoch, 30,
                             "a new controller")
            print(f"new controller {time.monotonic() - killed:.1f} s after kill -9")
            for i in range(5):
                producer.produce(topic, f"after-{i}".encode())
            assert producer.flush(60) == 0
            leader = json.loads(cluster.zk_get(
                f"/brokers/topics/{topic}/partitions/0/state") or b"{}")["leader"]
            assert leader in others
            consumer = Consumer({"bootstrap.servers": ",".join(
                cluster.address(b) for b in others), "group.id": "after-failover",
                "auto.offset.reset": "earliest"})
            try:
                consumer.subscribe([topic])
                got: list[bytes] = []

                def consumed() -> bool:
                    message = consumer.poll(0.5)
                    if message is not None and message.error() is None:
                        got.append(message.value() or b"")
                    return len(got) >= 10

                cluster.wait_for(consumed, 30, "ten records consumed")
                assert sorted(got) == sorted([f"before-{i}".encode() for i in range(5)]
                                             + [f"after-{i}".encode() for i in range(5)])
            finally:
                consumer.close()

            # An ACL through one live broker, enforced by the other; world-readable,
            # writable only by the brokers' SASL user.
            first, second = others
            assert _produce(cluster.address(second), topic) is None
            added = acls(cluster.address(first), "--add", "--deny-principal", ANON,
                         "--operation", "Write", "--topic", topic)
            assert added.returncode == 0, added.stderr

            def refused_by_second() -> bool:
                error = _produce(cluster.address(second), topic)
                return error is not None and (
                    error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)

            cluster.wait_for(refused_by_second, 15, f"broker {second} to refuse the produce")
            world_acls, _ = cluster.zk.get_acls(f"/kafka-acl/Topic/{topic}")
            assert world_acls == [ACL(Permissions.ALL, Id("sasl", BROKER)),
                                  ACL(Permissions.READ, Id("world", "anyone"))]
            with pytest.raises(NoAuthError):
                cluster.zk.delete(f"/kafka-acl/Topic/{topic}")
            removed = acls(cluster.address(second), "--remove", "--force", "--topic", topic)
            assert removed.returncode == 0, removed.stderr
            cluster.wait_for(lambda: _produce(cluster.address(first), topic) is None, 15,
                             f"broker {first} to accept the produce again")
    finally:
        server.stop()
