"""The consumer group protocol of KIP-848 on a three-broker cluster: the broker
coordinating a group is killed with SIGKILL. Consumer groups are not stored in
``__consumer_offsets`` yet, so the new coordinator does not know the group: the member
is told UNKNOWN_MEMBER_ID, joins again and goes on from its committed offsets, which are
replicated as for classic groups. Every record is read; the committed offsets hold."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.groups import GroupsClient

from ._cluster import Cluster, running_cluster, wait_for

pytestmark = pytest.mark.interop

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("kip848-cluster")), overrides={
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 6,
        "group.consumer.heartbeat.interval.ms": 300,
        "group.consumer.min.heartbeat.interval.ms": 100,
        "group.consumer.session.timeout.ms": 3000,
        "group.consumer.min.session.timeout.ms": 1000,
    }) as c:
        yield c


def find_coordinator(bootstrap: str, group: str) -> int:
    async def ask() -> int:
        async with await BrokerConnection.open(bootstrap) as conn:
            node_id, _, _ = await GroupsClient(conn).find_coordinator(group)
            return node_id

    def attempt() -> int | None:
        try:
            return asyncio.run(ask())
        except ClientError:  # COORDINATOR_NOT_AVAILABLE while __consumer_offsets is created
            return None

    return wait_for(attempt, 30, f"a coordinator for {group}")


def test_a_killed_coordinator_and_the_member_rejoins(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    bootstrap = ",".join(cluster.address(i) for i in (1, 2, 3))
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(60)
    group, coordinator = next(
        (g, c) for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(50))
        if (c := find_coordinator(cluster.address(1), g)) != 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(60) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[str] = []

    def consume_until(count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while len(set(seen)) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            seen.append((msg.value() or b"").decode())
        assert len(set(seen)) == count, f"read {len(set(seen))} of {count}"

    try:
        produce(0, 40)
        consume_until(40)
        consumer.commit(asynchronous=False)
        read_before = len(seen)
        cluster.kill9(coordinator)
        produce(40, 40)
        consume_until(80)
        # what was read twice had been read after the commit (at least once: the
        # member went back to the committed offsets when it joined again)
        assert all(int(v[1:]) >= 40 for v in seen[read_before:] if seen.count(v) > 1)
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert sum(tp.offset for tp in committed) == 80, committed
        assert find_coordinator(cluster.address(1), group) != coordinator
    finally:
        consumer.close()
        cluster.restore()
