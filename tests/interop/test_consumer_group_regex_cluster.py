"""KIP-848's regular-expression subscriptions on a three-broker cluster whose group
coordinator is killed with SIGKILL mid-rebalance.

Two confluent-kafka consumers (``group.protocol=consumer``) subscribe with ``^...``, which
librdkafka sends as ConsumerGroupHeartbeat's ``SubscribedTopicRegex``. The first reads
what the matching topics hold and commits; the second joins and the coordinator is
killed -9 while the first has not revoked yet (its rebalance callback is not served
until it polls). ``__consumer_offsets`` is replicated three times, so the new
coordinator loads the group, the resolution of its expression (type-16 records)
included: both members carry on at the epoch of the rebalance in progress, each still
subscribed to its expression, without a rebalance of their own (had the resolution been
lost, the members' topics would have left the assignment and come back, two epochs
more). A matching topic created then is picked up by the new coordinator's refresh
(Kafka's 10 s between two refreshes of a group's expressions, plus heartbeats): one
epoch more. A topic that does not match is never assigned. Every record is read, no
partition is held by two members at once (the clients' assign, revoke and lost
callbacks keep one ownership table, all run on this thread), the offsets committed
before the kill hold, and those committed at the end are the topics' ends.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client.groups import ConsumerGroupDescription
from odradek.coordinator.consumer_group import REGEX_BATCH_REFRESH_INTERVAL_MS
from tests._deadlines import expired

from ._cluster import Cluster, running_cluster
from .test_consumer_group_protocol_cluster import describe, find_coordinator

pytestmark = pytest.mark.interop

PER_PARTITION = 5  # records of a batch, per partition
# the new matching topic is picked up at the first heartbeat 10 s after the new
# coordinator's first refresh, then assigned over a few heartbeats (300 ms apart)
PICKUP_S = REGEX_BATCH_REFRESH_INTERVAL_MS / 1000 + 50


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("kip848-regex-cluster")), overrides={
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 6,
        "group.consumer.heartbeat.interval.ms": 300,
        "group.consumer.min.heartbeat.interval.ms": 100,
        "group.consumer.session.timeout.ms": 3000,
        "group.consumer.min.session.timeout.ms": 1000,
    }) as c:
        yield c


def test_a_coordinator_killed_mid_rebalance_of_a_regex_subscription(
        cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    started = time.monotonic()
    bootstrap = ",".join(cluster.address(i) for i in (1, 2, 3))
    uid = uuid.uuid4().hex[:6]
    regex = f"^rx-{uid}-.*"
    partitions = {f"rx-{uid}-a": 4, f"rx-{uid}-b": 2}  # matching, from the start
    later = f"rx-{uid}-later"  # matching, created after the failover
    other = f"x-rx-{uid}-a"  # matches only in part: a full match is needed
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, count in (*partitions.items(), (other, 1)):
        admin.create_topics([NewTopic(name, count, 3)])[name].result(60)
    group, coordinator = next(
        (g, c) for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(50))
        if (c := find_coordinator(cluster.address(1), g)) != 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    produced: dict[tuple[str, int], int] = {}  # (topic, partition) -> records in it

    def produce(topics: dict[str, int]) -> None:
        for name, count in topics.items():
            for p in range(count):
                start = produced.get((name, p), 0)
                for i in range(start, start + PER_PARTITION):
                    producer.produce(name, value=f"{name}:{p}:{i}".encode(), partition=p)
                produced[(name, p)] = start + PER_PARTITION
        assert producer.flush(60) == 0

    owner: dict[tuple[str, int], str] = {}  # the consumer holding a partition now
    overlaps: list[str] = []  # a partition given, or read, while another member holds it
    strays: list[str] = []  # a topic not matching the expression assigned
    lost: list[str] = []
    seen: list[str] = []
    positions: dict[str, dict[tuple[str, int], int]] = {"c1": {}, "c2": {}}

    def member(name: str) -> Any:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "group.protocol": "consumer", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "client.id": name})

        def on_assign(_c: Any, assigned: list[Any]) -> None:
            for tp in assigned:
                key = (tp.topic, tp.partition)
                if not re.fullmatch(regex, tp.topic):
                    strays.append(f"{name} got {key}")
                holder = owner.setdefault(key, name)
                if holder != name:
                    overlaps.append(f"{name} got {key} held by {holder}")

        def on_revoke(c: Any, revoked: list[Any]) -> None:
            at = positions[name]
            done = [TopicPartition(tp.topic, tp.partition, at[(tp.topic, tp.partition)])
                    for tp in revoked if (tp.topic, tp.partition) in at]
            if done:  # what it read is committed before the partition moves
                c.commit(offsets=done, asynchronous=False)
            for tp in revoked:
                if owner.get((tp.topic, tp.partition)) == name:
                    del owner[(tp.topic, tp.partition)]

        def on_lost(_c: Any, gone: list[Any]) -> None:
            lost.append(f"{name} lost {[(tp.topic, tp.partition) for tp in gone]}")
            for tp in gone:
                if owner.get((tp.topic, tp.partition)) == name:
                    del owner[(tp.topic, tp.partition)]

        consumer.subscribe([regex], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_lost)
        return consumer

    def poll(name: str, consumer: Any) -> None:
        msg = consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            return
        key = (msg.topic(), msg.partition())
        if owner.get(key) != name:
            overlaps.append(f"{name} read {key} it does not hold ({owner.get(key)} does)")
        seen.append((msg.value() or b"").decode())
        positions[name][key] = msg.offset() + 1

    def read_all(polled: list[tuple[str, Any]], timeout: float, what: str) -> None:
        want = {f"{t}:{p}:{i}" for (t, p), n in produced.items() if t != other
                for i in range(n)}
        began = time.monotonic()
        while not want <= set(seen) and not expired(began, timeout):
            for name, consumer in polled:
                poll(name, consumer)
        assert want <= set(seen), f"{what}: {len(want - set(seen))} of {len(want)} unread"

    def wait_described(condition: Callable[[ConsumerGroupDescription], bool],
                       polled: list[tuple[str, Any]], timeout: float,
                       what: str) -> ConsumerGroupDescription:
        def check() -> ConsumerGroupDescription | None:
            for name, consumer in polled:
                poll(name, consumer)
            d = describe(cluster.address(1), group)
            return d if d is not None and condition(d) else None

        return cluster.wait_for(check, timeout, what)

    def held(d: ConsumerGroupDescription) -> list[tuple[str, int]]:
        return sorted((t, p) for m in d.members for t, ps in m.assignment.items()
                      for p in ps)

    def every(topics: dict[str, int]) -> list[tuple[str, int]]:
        return sorted((t, p) for t, n in topics.items() for p in range(n))

    c1 = member("c1")
    c2: Any = None
    try:
        produce({**partitions, other: 1})
        read_all([("c1", c1)], 90, "c1 alone")
        c1.commit(asynchronous=False)
        read_before = len(seen)
        # c1 stable on both matching topics: joined (epoch 1), expression resolved (2)
        alone = wait_described(
            lambda d: d.state == "Stable" and held(d) == every(partitions),
            [("c1", c1)], 30, "c1 stable on the matching topics")
        assert alone.group_epoch >= 2, alone
        # c2 joins with the expression the group resolved already (the epoch moves at
        # once); c1 is not polled, so it cannot revoke: the rebalance stays open
        c2 = member("c2")
        before = wait_described(
            lambda d: len(d.members) == 2 and len(held(d)) < len(every(partitions)),
            [("c2", c2)], 60, "c1 revoking for c2")
        assert before.state == "Reconciling" and before.group_epoch > alone.group_epoch
        cluster.kill9(coordinator)
        killed = time.monotonic()
        produce(partitions)
        read_all([("c1", c1), ("c2", c2)], 120, "both members after the kill")
        after = wait_described(
            lambda d: d.state == "Stable" and held(d) == every(partitions),
            [("c1", c1), ("c2", c2)], 60, "the group stable at its new coordinator")
        failover_s = time.monotonic() - killed
        assert find_coordinator(cluster.address(1), group) != coordinator
        # the same members at the epoch of the rebalance in progress at the kill, each
        # subscribed to its expression (librdkafka puts it in parentheses), no names:
        # the expression's resolution was loaded with the group, not lost and redone
        assert after.group_epoch == before.group_epoch, (before, after)
        assert sorted(m.member_id for m in after.members) == sorted(
            m.member_id for m in before.members)
        assert all(m.member_epoch == before.group_epoch for m in after.members), after
        assert all((m.subscribed_topic_regex, m.subscribed_topics) == (f"({regex})", ())
                   for m in after.members), after
        assert not lost, lost  # nobody was fenced: no rejoin
        # the offsets committed before the kill hold at the new coordinator
        committed = c1.committed(
            [TopicPartition(t, p) for t, p in every(partitions)], timeout=30)
        assert all(tp.offset >= PER_PARTITION for tp in committed), committed

        # a matching topic created now (two replicas: one broker of three is down) is
        # picked up by the new coordinator
        cluster.create_topic(later, 2, 2)
        created = time.monotonic()
        produce({later: 2, **partitions})
        read_all([("c1", c1), ("c2", c2)], PICKUP_S, "the new matching topic's records")
        picked_up_s = time.monotonic() - created
        topics = {**partitions, later: 2}
        final = wait_described(
            lambda d: d.state == "Stable" and held(d) == every(topics),
            [("c1", c1), ("c2", c2)], 60, "the group stable on the new topic too")
        # one rebalance for the new topic, none else
        assert final.group_epoch == before.group_epoch + 1, (before, final)
        assert not overlaps, overlaps
        assert not strays, strays
        assert not lost, lost
        # read twice only what was read after the commit that preceded the kill
        first = {f"{t}:{p}:{i}" for t, p in every(partitions) for i in range(PER_PARTITION)}
        twice = {v for v in seen[read_before:] if seen.count(v) > 1}
        assert not twice & first, sorted(twice & first)
        for name, consumer in (("c1", c1), ("c2", c2)):
            mine = [TopicPartition(t, p, o) for (t, p), o in positions[name].items()
                    if owner.get((t, p)) == name]
            if mine:
                consumer.commit(offsets=mine, asynchronous=False)
        committed = c1.committed([TopicPartition(t, p) for t, p in every(topics)],
                                 timeout=30)
        assert {(tp.topic, tp.partition): tp.offset for tp in committed} == {
            key: n for key, n in produced.items() if key[0] != other}
        print(f"regex group on 3 brokers: failover to stable {failover_s:.1f} s, new "
              f"matching topic read {picked_up_s:.1f} s after its creation, "
              f"{len(seen)} reads of {sum(produced.values()) - produced[(other, 0)]} "
              f"records, {time.monotonic() - started:.1f} s in all")
    finally:
        for consumer in (c1, c2):
            if consumer is not None:
                # bounded: librdkafka's close of a member mid-rebalance can wait long
                closing = threading.Thread(target=consumer.close, daemon=True)
                closing.start()
                closing.join(30)
        cluster.restore()
