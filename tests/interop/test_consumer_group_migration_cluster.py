"""Online migration on a three-broker cluster whose group coordinator is killed with
SIGKILL: a kafka-python (classic) member and a confluent-kafka (``group.protocol=consumer``)
member share an upgraded group; the coordinator dies; the new one loads a consumer group
with its classic member (its ClassicMemberMetadata in ``__consumer_offsets``) and both
members carry on; the consumer-protocol member leaves and the new coordinator downgrades
the group to a classic one, the kafka-python member taking every partition. One ownership
table kept by both clients' rebalance callbacks; every record read; committed offsets
hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.test_consumer_group_migration import (
    ClassicMember,
    all_owned,
    commit,
    read_to_end,
    values,
    wait_until,
)
from tests.interop.test_consumer_group_protocol import Member
from tests.interop.test_consumer_group_protocol_cluster import describe, find_coordinator

from ._cluster import Cluster, running_cluster

pytestmark = pytest.mark.interop

PARTITIONS = 6  # as test_consumer_group_migration's helpers count
PER_PARTITION = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("migration-cluster")), overrides={
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 6,
        "group.initial.rebalance.delay.ms": 0,
        "group.consumer.heartbeat.interval.ms": 300,
        "group.consumer.min.heartbeat.interval.ms": 100,
        "group.consumer.session.timeout.ms": 3000,
        "group.consumer.min.session.timeout.ms": 1000,
    }) as c:
        yield c


def batch(first: int) -> set[str]:
    return {f"{p}:{i}" for p in range(PARTITIONS) for i in range(first, first + PER_PARTITION)}


def test_a_migrating_group_survives_its_coordinators_kill9(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    bootstrap = ",".join(cluster.address(i) for i in (1, 2, 3))
    topic = f"migrate-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(60)
    group, coordinator = next(
        (g, c) for g in (f"m-{uuid.uuid4().hex[:8]}" for _ in range(50))
        if (c := find_coordinator(cluster.address(1), g)) != 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce(start: int) -> None:
        for p in range(PARTITIONS):
            for i in range(start, start + PER_PARTITION):
                producer.produce(topic, value=f"{p}:{i}".encode(), partition=p)
        assert producer.flush(60) == 0

    owners: dict[Any, str] = {}
    members: list[Any] = []
    try:
        produce(0)
        classic = ClassicMember(bootstrap, group, topic, "kp", owners)
        members.append(classic)
        wait_until(lambda: batch(0) <= values(members) and all_owned(members)(), 90,
                   "the classic member to read batch 1", members)
        commit(classic)

        modern = Member(bootstrap, group, topic, "ck", owners)  # upgrades the group
        members.append(modern)
        produce(PER_PARTITION)
        wait_until(lambda: batch(PER_PARTITION) <= values(members)
                   and all_owned(members)(), 90, "the two members sharing", members)
        for m in members:
            commit(m)
        described = describe(cluster.address(1), group)
        assert described is not None
        assert sorted(bool(m.upgraded) for m in described.members) == [False, True]

        cluster.kill9(coordinator)
        produce(2 * PER_PARTITION)
        wait_until(lambda: batch(2 * PER_PARTITION) <= values(members)
                   and all_owned(members)(), 120, "both members after the kill", members)
        for m in members:
            commit(m)
        assert find_coordinator(cluster.address(1), group) != coordinator
        described = describe(cluster.address(1), group)
        assert described is not None  # loaded as a consumer group, its classic member too
        assert sorted(bool(m.upgraded) for m in described.members) == [False, True]

        # the consumer-protocol member leaves: the new coordinator downgrades the group
        modern.close()
        members.remove(modern)
        produce(3 * PER_PARTITION)
        wait_until(lambda: all_owned(members)()
                   and read_to_end(members, 4 * PER_PARTITION)(), 120,
                   "the classic member to take everything", members)
        commit(classic)
        assert describe(cluster.address(1), group) is None  # not a consumer group now
        assert batch(0) | batch(PER_PARTITION) | batch(2 * PER_PARTITION) | batch(
            3 * PER_PARTITION) <= values([classic, modern])
        classic.close()
        members.clear()
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            committed = reader.committed(
                [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        finally:
            reader.close()
        assert {tp.partition: tp.offset for tp in committed} == {
            p: 4 * PER_PARTITION for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.close()
        cluster.restore()
