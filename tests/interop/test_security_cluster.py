"""A three-broker cluster whose brokers authenticate to each other: the inter-broker
listener is SASL_SSL (SCRAM-SHA-512, the broker's user created through
AlterUserScramCredentials), clients come in on PLAINTEXT. Records produced with acks=all
are replicated to every broker, and survive the leader's kill -9."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests._deadlines import expired

from ._cluster import Cluster, wait_for
from ._security import make_certs

pytestmark = pytest.mark.interop

BROKER_JAAS = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
               'username="broker" password="broker-secret";')


def test_inter_broker_sasl_ssl_replicates_and_survives_a_leader_kill(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "replica.fetch.backoff.ms": 200,
    }
    # both listeners on port 0: each broker registers (advertises) the ports it bound
    overrides["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
    with Cluster(tmp_path / "cluster", 3, overrides) as cluster:
        cluster.start_all()
        ports = {b: (broker.ports["PLAINTEXT"], broker.ports["SASL_SSL"])
                 for b, broker in cluster.brokers.items()}
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                b"broker-secret")]).values():
            future.result(30)
        topic = f"sec-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})

        def isr() -> list[int]:
            metadata = admin.list_topics(topic, timeout=10)
            # a broker that has not applied the new topic yet answers it without partitions
            partition = metadata.topics[topic].partitions.get(0)
            return sorted(partition.isrs) if partition is not None else []

        wait_for(lambda: isr() == [1, 2, 3], 60, "every replica in sync over SASL_SSL")
        # Each client sees its own listener: PLAINTEXT ports only.
        brokers = admin.list_topics(timeout=10).brokers
        assert sorted(b.port for b in brokers.values()) == sorted(p for p, _ in
                                                                  ports.values())
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True})
        for i in range(100):
            producer.produce(topic, f"r{i}".encode())
        assert producer.flush(30) == 0
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        cluster.kill9(leader)
        started = time.monotonic()
        for i in range(100, 200):
            producer.produce(topic, f"r{i}".encode())
        while producer.flush(5) and not expired(started, 60):
            pass
        assert producer.flush(1) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got: set[bytes] = set()
        started = time.monotonic()
        while len(got) < 200 and not expired(started, 60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.add(message.value())
        consumer.close()
        assert got == {f"r{i}".encode() for i in range(200)}
        cluster.start(leader)
        wait_for(lambda: isr() == [1, 2, 3], 60, "the old leader back in sync")
