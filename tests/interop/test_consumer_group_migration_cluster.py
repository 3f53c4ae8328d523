"""Online migration on a three-broker cluster whose group coordinator is killed with
SIGKILL: a kafka-python (classic) member and a confluent-kafka (``group.protocol=consumer``)
member share an upgraded group; the coordinator dies; the new one loads a consumer group
with its classic member (its ClassicMemberMetadata in ``__consumer_offsets``) and both
members carry on; the consumer-protocol member leaves and the new coordinator downgrades
the group to a classic one, the kafka-python member taking every partition. One ownership
table kept by both clients' rebalance callbacks; every record read; committed offsets
hold."""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
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


class KafkaPythonMember(ClassicMember):
    """The kafka-python member, polling as an application does around two faults of
    kafka-python 3.0.12 met in this test:

    - A rebalance its leader starts because the subscribed topic's partitions changed in
      its metadata (its assignment snapshot differs from its metadata snapshot, with no
      rejoin requested) is abandoned when its JoinGroup/SyncGroup round outlasts the
      ``poll()`` that started it: the leader's assignment makes the two snapshots equal,
      so the next ``poll()`` finds no rejoin needed and never collects the round. The
      member stays rebalancing, with its heartbeats off and no partition, until its
      session expires, and never joins again (whole run Q54: generation 2 synced, the
      session missed 6 s later, nothing more from the client). A member whose first
      metadata lacked the new topic assigns nothing at generation 1 and meets this at
      generation 2. So the poll loop first fetches the cluster's metadata until the
      topic's partitions are in it, as an application waits for a topic it has just
      created, and the first rebalance is assigned from whole metadata.
    - ``poll()`` raises a retriable error (KafkaConnectionError: ECONNREFUSED) while the
      killed coordinator's broker refuses connections: its coordinator lookup asks for a
      metadata refresh and lets the refresh's failure out. An application polls again
      after a retriable error; so does this member. Any other error fails the test."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str,
                 owners: dict[Any, str]) -> None:
        self.retries = 0  # the retriable errors poll() raised, and the last of them
        self.retried: deque[str] = deque(maxlen=3)
        super().__init__(bootstrap, group, topic, name, owners)

    def _poll(self) -> dict[Any, Any]:
        """One ``poll()``; a retriable error is counted and answered with no records (the
        loop polls again), any other fails the loop."""
        from kafka.errors import KafkaError  # type: ignore[import-untyped]

        try:
            return super()._poll()
        except KafkaError as exc:
            if not exc.retriable:
                raise
            self.retries += 1
            self.retried.append(repr(exc))
            time.sleep(0.1)
            return {}

    def state(self) -> str:
        """kafka-python's view of its membership (private fields, for a failure's
        message only)."""
        c = self.consumer._coordinator
        task = getattr(c, "_join_task", None)
        join = "none" if task is None else "done" if task.is_done else "pending"
        return (f"{self.name}: state {getattr(c, 'state', '?')}, "
                f"{getattr(c, '_generation', '?')}, join task {join}, rejoin needed "
                f"{getattr(c, 'rejoin_needed', '?')}, heartbeats "
                f"{getattr(c, '_heartbeat_enabled', '?')}, coordinator "
                f"{getattr(c, 'coordinator_id', '?')}; poll errors retried "
                f"{self.retries}, the last {list(self.retried)}")


def wait(condition: Callable[[], bool], timeout: float, what: str,
         members: list[Any]) -> None:
    """``wait_until``, its failure naming the kafka-python member's view of the group."""
    try:
        wait_until(condition, timeout, what, members)
    except AssertionError as exc:
        states = [m.state() for m in members if isinstance(m, KafkaPythonMember)]
        raise AssertionError(f"{exc}; {'; '.join(states)}") from None


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
        classic = KafkaPythonMember(bootstrap, group, topic, "kp", owners)
        members.append(classic)
        wait(lambda: batch(0) <= values(members) and all_owned(members)(), 90,
                   "the classic member to read batch 1", members)
        commit(classic)

        modern = Member(bootstrap, group, topic, "ck", owners)  # upgrades the group
        members.append(modern)
        produce(PER_PARTITION)
        wait(lambda: batch(PER_PARTITION) <= values(members)
                   and all_owned(members)(), 90, "the two members sharing", members)
        for m in members:
            commit(m)
        described = describe(cluster.address(1), group)
        assert described is not None
        assert sorted(bool(m.upgraded) for m in described.members) == [False, True]

        cluster.kill9(coordinator)
        produce(2 * PER_PARTITION)
        wait(lambda: batch(2 * PER_PARTITION) <= values(members)
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
        wait(lambda: all_owned(members)()
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
