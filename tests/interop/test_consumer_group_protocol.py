"""The consumer group protocol of KIP-848 with real clients over loopback:
confluent-kafka (librdkafka) and the Java client (kafka-clients 3.9.1), both with
``group.protocol=consumer``.

Members subscribe, consume and commit; a second member joins and the partitions are
split without any partition owned by two members at once (each member's assign and
revoke callbacks run on this thread, so the ownership table they keep is exact); a member
that closes hands its partitions over; a member killed with SIGKILL is fenced by the
session timeout and its partitions move; every record is read and the committed offsets
hold. The broker's heartbeat interval and session timeout are shortened so each test
takes seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired
from tests.interop._broker import JavaRunner, java_client

pytestmark = pytest.mark.interop

SESSION_MS = 2000
BROKER_OVERRIDES = {
    "num.partitions": "1",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides=BROKER_OVERRIDES) as broker:
        yield broker


def new_topic(rb: RunningBroker, partitions: int) -> str:
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, {})
    return name


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int,
            start: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(start, start + per_partition):
            producer.produce(topic, value=f"{p}:{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               tick: Callable[[], None] = lambda: None) -> None:
    started = time.monotonic()
    while not expired(started, timeout):
        tick()
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Member:
    """A confluent-kafka consumer with ``group.protocol=consumer`` whose rebalance
    callbacks record which partitions it owns in a table shared by the members of a test
    (polled on this thread: no two callbacks run at once)."""

    def __init__(self, bootstrap: str, group: str, topic: str | list[str], name: str,
                 owners: dict[Any, str], **config: Any) -> None:
        from confluent_kafka import Consumer

        self.name = name
        self.owners = owners
        self.owned: set[int] = set()  # its partitions (of a one-topic subscription)
        self.records: list[tuple[int, int, str]] = []  # (partition, offset, value)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "group.protocol": "consumer", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "client.id": name, **config,
        })
        self.topics: set[tuple[str, int]] = set()  # what it owns
        self.tolerated: set[int] = set()  # error codes a test expects
        self.consumer.subscribe([topic] if isinstance(topic, str) else topic,
                                on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)

    def _assigned(self, _consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            holder = self.owners.get(key)
            assert holder is None, f"{key} given to {self.name} while {holder} owns it"
            self.owners[key] = self.name
            self.topics.add(key)
            self.owned.add(tp.partition)

    def _revoked(self, _consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            self._release((tp.topic, tp.partition))

    def _release(self, key: tuple[str, int]) -> None:
        if self.owners.get(key) == self.name:
            del self.owners[key]
        self.topics.discard(key)
        self.owned = {p for _, p in self.topics}

    def poll(self, timeout: float = 0.05) -> None:
        message = self.consumer.poll(timeout)
        if message is None:
            return
        error = message.error()
        if error is not None and error.code() in self.tolerated:
            return
        assert error is None, error
        partition, offset, value = message.partition(), message.offset(), message.value()
        assert partition is not None and offset is not None and value is not None
        assert partition in self.owned, (
            f"{self.name} read partition {partition} it does not own")
        self.records.append((partition, offset, value.decode()))

    def commit(self) -> None:
        self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        self.consumer.close()
        for key in list(self.topics):
            self._release(key)


def poll_all(members: list[Member]) -> Callable[[], None]:
    def tick() -> None:
        for m in members:
            m.poll()
    return tick


def test_subscribe_consume_commit(rb: RunningBroker) -> None:
    topic = new_topic(rb, 4)
    produce(rb.bootstrap, topic, 4, 10)
    owners: dict[Any, str] = {}
    member = Member(rb.bootstrap, f"g-{topic}", topic, "m1", owners)
    started = time.monotonic()
    wait_until(lambda: member.owned == {0, 1, 2, 3}, 10, "the first assignment",
               poll_all([member]))
    first_assignment_s = time.monotonic() - started
    wait_until(lambda: len(member.records) == 40, 20, "40 records", poll_all([member]))
    member.commit()
    committed = member.consumer.committed(member.consumer.assignment(), timeout=10)
    assert sorted((tp.partition, tp.offset) for tp in committed) == [
        (p, 10) for p in range(4)]
    member.close()
    group = rb.broker.group_coordinator.consumer_group(f"g-{topic}")
    assert group is not None and group.is_empty()
    print(f"first assignment after {first_assignment_s * 1000:.0f} ms")


def test_a_member_joins_and_one_leaves(rb: RunningBroker) -> None:
    topic = new_topic(rb, 6)
    group = f"g-{topic}"
    produce(rb.bootstrap, topic, 6, 20)
    owners: dict[Any, str] = {}
    m1 = Member(rb.bootstrap, group, topic, "m1", owners)
    wait_until(lambda: len(m1.records) == 120, 20, "m1 reads everything", poll_all([m1]))
    m1.commit()

    m2 = Member(rb.bootstrap, group, topic, "m2", owners)
    both = [m1, m2]
    wait_until(lambda: len(m1.owned) == 3 and len(m2.owned) == 3, 20,
               "the partitions split between two members", poll_all(both))
    assert m1.owned.isdisjoint(m2.owned)
    coordinator_group = rb.broker.group_coordinator.consumer_group(group)
    assert coordinator_group is not None
    wait_until(lambda: coordinator_group.state.value == "Stable", 10, "a stable group",
               poll_all(both))

    produce(rb.bootstrap, topic, 6, 10, start=20)
    wait_until(lambda: len(m1.records) + len(m2.records) == 180, 20,
               "the new records read by their owners", poll_all(both))
    new_by_m2 = {r[0] for r in m2.records}
    assert new_by_m2 == m2.owned
    m1.commit()
    m2.commit()

    m2.close()
    wait_until(lambda: m1.owned == set(range(6)), 20, "m1 takes m2's partitions back",
               poll_all([m1]))
    produce(rb.bootstrap, topic, 6, 5, start=30)
    wait_until(lambda: len(m1.records) + len(m2.records) == 210, 20, "the last records",
               poll_all([m1]))
    values = sorted(r[2] for r in m1.records + m2.records)
    assert len(values) == len(set(values)) == 210  # nothing lost, nothing read twice
    m1.commit()
    m1.close()


def test_a_static_member_restarts_without_a_rebalance(rb: RunningBroker) -> None:
    """A static member (group.instance.id) that closes leaves with epoch -2; a new
    instance with the same id gets the same partitions back, and the group epoch does not
    move: the other member is not disturbed."""
    topic = new_topic(rb, 4)
    group = f"g-{topic}"
    owners: dict[Any, str] = {}
    other = Member(rb.bootstrap, group, topic, "other", owners, **{"group.instance.id": "o"})
    static = Member(rb.bootstrap, group, topic, "static-1", owners,
                    **{"group.instance.id": "s"})
    both = [other, static]
    wait_until(lambda: len(other.owned) == 2 and len(static.owned) == 2, 20,
               "two members with two partitions each", poll_all(both))
    coordinator_group = rb.broker.group_coordinator.consumer_group(group)
    assert coordinator_group is not None
    wait_until(lambda: coordinator_group.state.value == "Stable", 10, "a stable group",
               poll_all(both))
    epoch, before = coordinator_group.group_epoch, set(static.owned)
    static.close()
    assert coordinator_group.members[coordinator_group.static_members["s"]].member_epoch == -2
    restarted = Member(rb.bootstrap, group, topic, "static-2", owners,
                       **{"group.instance.id": "s"})
    wait_until(lambda: restarted.owned == before, 20, "the same partitions back",
               poll_all([other, restarted]))
    assert coordinator_group.group_epoch == epoch
    assert len(other.owned) == 2
    restarted.close()
    other.close()


def test_new_partitions_are_assigned(rb: RunningBroker) -> None:
    topic = new_topic(rb, 2)
    owners: dict[Any, str] = {}
    member = Member(rb.bootstrap, f"g-{topic}", topic, "m1", owners,
                    **{"topic.metadata.refresh.interval.ms": 500})
    wait_until(lambda: member.owned == {0, 1}, 10, "the first assignment", poll_all([member]))
    rb.call(rb.broker.metadata.create_partitions, topic, 3)
    produce(rb.bootstrap, topic, 3, 1)
    wait_until(lambda: member.owned == {0, 1, 2}, 20, "the new partition",
               poll_all([member]))
    wait_until(lambda: {r[0] for r in member.records} == {0, 1, 2}, 20,
               "a record of the new partition", poll_all([member]))
    member.close()


def test_a_coordinator_elected_again_loads_the_group_and_the_member_carries_on(
        rb: RunningBroker) -> None:
    """A coordinator that resigns and is elected again (as after a failover) loads the
    group from ``__consumer_offsets``: the member, told NOT_COORDINATOR meanwhile, carries
    on at its epoch with its partitions, and reads nothing twice."""
    topic = new_topic(rb, 2)
    group = f"g-{topic}"
    produce(rb.bootstrap, topic, 2, 10)
    owners: dict[Any, str] = {}
    member = Member(rb.bootstrap, group, topic, "m1", owners)
    wait_until(lambda: len(member.records) == 20, 20, "the first records", poll_all([member]))
    member.commit()
    coordinator = rb.broker.group_coordinator
    before = coordinator.consumer_group(group)
    assert before is not None
    epochs = (before.group_epoch, {m: x.member_epoch for m, x in before.members.items()})
    partition = coordinator.partition_for(group)
    rb.call(coordinator.on_resigned, partition)
    assert coordinator.consumer_group(group) is None
    rb.call(coordinator.on_elected, partition)
    loaded = coordinator.consumer_group(group)
    assert loaded is not None and loaded is not before
    assert (loaded.group_epoch, {m: x.member_epoch for m, x in loaded.members.items()}) == (
        epochs)
    produce(rb.bootstrap, topic, 2, 10, start=10)
    wait_until(lambda: len({r[2] for r in member.records}) == 40, 30,
               "the records after the load", poll_all([member]))
    after = coordinator.consumer_group(group)
    assert after is not None and set(after.members) == {member.consumer.memberid()}
    assert after.group_epoch == epochs[0]  # no rejoin
    positions = [(partition, offset) for partition, offset, _ in member.records]
    assert len(positions) == len(set(positions)) == 40
    member.close()


def test_a_deleted_topic_is_revoked(rb: RunningBroker) -> None:
    from confluent_kafka.admin import AdminClient

    keep, doomed = new_topic(rb, 1), new_topic(rb, 1)
    owners: dict[Any, str] = {}
    member = Member(rb.bootstrap, f"g-{keep}", [keep, doomed], "m1", owners,
                    **{"topic.metadata.refresh.interval.ms": 500})
    wait_until(lambda: member.topics == {(keep, 0), (doomed, 0)}, 10, "both topics",
               poll_all([member]))
    from confluent_kafka import KafkaError
    member.tolerated.add(KafkaError.UNKNOWN_TOPIC_OR_PART)  # the client says it once
    admin = AdminClient({"bootstrap.servers": rb.bootstrap})
    for future in admin.delete_topics([doomed]).values():
        future.result(30)
    group = rb.broker.group_coordinator.consumer_group(f"g-{keep}")
    assert group is not None
    wait_until(lambda: member.topics == {(keep, 0)} and group.state.value == "Stable", 20,
               "the deleted topic revoked", poll_all([member]))
    member.close()


CHILD = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    bootstrap, group, topic = sys.argv[1:4]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "client.id": "doomed"})
    assigned = []
    c.subscribe([topic], on_assign=lambda _c, ps: assigned.extend(ps))
    announced = False
    while True:
        c.poll(0.05)
        if assigned and not announced:
            print("assigned", len(assigned), flush=True)
            announced = True
""")


def test_a_killed_member_is_fenced_by_the_session_timeout(rb: RunningBroker) -> None:
    topic = new_topic(rb, 4)
    group = f"g-{topic}"
    owners: dict[Any, str] = {}
    survivor = Member(rb.bootstrap, group, topic, "survivor", owners)
    wait_until(lambda: survivor.owned == {0, 1, 2, 3}, 10, "the first assignment",
               poll_all([survivor]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, rb.bootstrap, group, topic],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # the child gets its share once the survivor has revoked it
        started = time.monotonic()
        line = ""
        while not expired(started, 30) and not line:
            survivor.poll()
            coordinator_group = rb.broker.group_coordinator.consumer_group(group)
            if coordinator_group is not None and len(coordinator_group.members) == 2 and all(
                    m.assigned for m in coordinator_group.members.values()):
                line = "assigned"
        assert line, f"the child got no partitions in {describe(started, 30)}"
        assert len(survivor.owned) == 2
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        killed_at = time.monotonic()
        wait_until(lambda: survivor.owned == {0, 1, 2, 3}, 20,
                   "the killed member's partitions", poll_all([survivor]))
        took = time.monotonic() - killed_at
        assert took >= SESSION_MS / 1000 * 0.5  # it was the session timeout, not a leave
        print(f"partitions of the killed member moved after {took * 1000:.0f} ms")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
    survivor.close()


@pytest.fixture(scope="module")
def java() -> JavaRunner:
    return java_client()


def test_java_client_with_the_consumer_protocol(rb: RunningBroker, java: JavaRunner) -> None:
    topic = new_topic(rb, 3)
    produce(rb.bootstrap, topic, 3, 30)
    group = f"g-{topic}"
    res = java(rb.bootstrap, "group-consume", topic, group, 90,
               "-Xgroup.protocol=consumer")
    assert res.ok, res.describe()
    assert res.summary["committed"] == {"0": 30, "1": 30, "2": 30}
    assert rb.broker.group_coordinator.consumer_group(group) is not None  # not classic
    # a second member of the same group starts at the committed offsets
    res = java(rb.bootstrap, "group-consume", topic, group, 0, "-Xgroup.protocol=consumer")
    assert res.ok, res.describe()
    assert res.summary["count"] == 0


def test_java_admin_describes_a_consumer_group(rb: RunningBroker, java: JavaRunner) -> None:
    """kafka-clients' describeConsumerGroups asks ConsumerGroupDescribe first."""
    topic = new_topic(rb, 2)
    group = f"g-{topic}"
    owners: dict[Any, str] = {}
    member = Member(rb.bootstrap, group, topic, "m1", owners)
    wait_until(lambda: member.owned == {0, 1}, 10, "the first assignment", poll_all([member]))
    coordinator = rb.broker.group_coordinator
    described: list[str] = []
    original = coordinator.consumer_group

    def consumer_group(group_id: str) -> Any:
        described.append(group_id)
        return original(group_id)

    coordinator.consumer_group = consumer_group  # type: ignore[method-assign]
    try:
        res = java(rb.bootstrap, "authorized-operations", topic, group)
        assert res.ok, res.describe()
        assert "READ" in res.summary["group"] and "DESCRIBE" in res.summary["group"]
        assert group in described  # through ConsumerGroupDescribe
    finally:
        del coordinator.consumer_group  # type: ignore[method-assign]
        member.close()
