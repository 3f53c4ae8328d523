"""Brokers with ``zookeeper.set.acl=true`` on a SASL ZooKeeper: they start, elect, serve
and replicate, every znode they write carries Kafka's ACLs, and a broker that cannot
authenticate refuses to start, saying why.

Real ``odradek serve`` processes (credentials from ``KAFKA_OPTS``'s
``-Djava.security.auth.login.config``, as Kafka's start scripts pass them), a real Debian
ZooKeeper with a DIGEST-MD5 user, confluent-kafka as the client, a kazoo client without
credentials as the world."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from tests.cluster._zookeeper import ZooKeeperServer, running_zookeeper, wait_for
from tests.cluster.test_zk_security import BROKER, BROKER_PASSWORD, client_jaas
from tests.interop._broker import BrokerProcess, BrokerStartError, start_broker


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
