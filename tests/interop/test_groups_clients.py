"""Consumer groups with real clients over loopback: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat -G.

The life cycle: members join and get disjoint assignments covering every partition; a
member that closes (LeaveGroup) or is killed with SIGKILL (session timeout) has its
partitions taken over; consumption resumes from committed offsets with nothing lost;
committed offsets survive a broker kill -9; seed 001's range example (5 partitions, 2
consumers -> [p0, p1, p2] and [p3, p4]); static membership (KIP-345) without rebalance.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired
from tests.interop._broker import kcat, start_broker

pytestmark = pytest.mark.interop

# Session timeouts are shortened (Kafka's floor is 6 s) so expiry tests take seconds.
BROKER_OVERRIDES = {"group.min.session.timeout.ms": "1000", "num.partitions": "1"}
SESSION_MS = 3000
FAST = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300}


@pytest.fixture(scope="module")
def rb() -> Any:
    with running_broker(overrides=BROKER_OVERRIDES) as broker:
        yield broker


def new_topic(rb: RunningBroker, partitions: int) -> str:
    name = f"groups-{uuid.uuid4().hex[:8]}"
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


def group_state(rb: RunningBroker, group: str) -> tuple[str, int, int]:
    def read() -> tuple[str, int, int]:
        coordinator = rb.broker.group_coordinator
        assert coordinator is not None
        g = coordinator.groups.get(group)
        return ("Dead", -1, 0) if g is None else (g.state.value, g.generation_id, len(g.members))

    result: tuple[str, int, int] = rb.call(read)
    return result


class Tracker:
    """confluent-kafka consumers polled round-robin; every record is committed
    synchronously after it is seen, and (partition, offset) pairs are remembered."""

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        self.bootstrap, self.group, self.topic, self.extra = bootstrap, group, topic, extra
        self.consumers: list[Any] = []
        self.seen: list[tuple[int, int]] = []

    def add(self, **conf: Any) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **FAST,
            **self.extra, **conf,
        })
        consumer.subscribe([self.topic])
        self.consumers.append(consumer)
        return consumer

    def poll_all(self) -> None:
        for consumer in self.consumers:
            msg = consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            self.seen.append((msg.partition(), msg.offset()))
            consumer.commit(message=msg, asynchronous=False)

    def assignments(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def until(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        started = time.monotonic()
        while not expired(started, timeout):
            self.poll_all()
            if predicate():
                return time.monotonic() - started
        raise AssertionError(f"timed out after {describe(started, timeout)} waiting for {what}; "
                             f"assignments {self.assignments()}")

    def balanced(self, partitions: int) -> Callable[[], bool]:
        def check() -> bool:
            sets = self.assignments()
            union: set[int] = set().union(*sets) if sets else set()
            return (all(sets) and sum(len(s) for s in sets) == partitions
                    and union == set(range(partitions)))
        return check

    def close(self, consumer: Any) -> None:
        consumer.close()
        self.consumers.remove(consumer)

    def close_all(self) -> None:
        for consumer in list(self.consumers):
            self.close(consumer)


def covered(seen: Iterable[tuple[int, int]], partitions: int, per_partition: int) -> bool:
    got = set(seen)
    return all((p, o) in got for p in range(partitions) for o in range(per_partition))


# -- confluent-kafka ---------------------------------------------------------------------------
def test_confluent_three_consumers_leave_and_takeover(rb: RunningBroker) -> None:
    topic = new_topic(rb, 6)
    group = f"ck-{uuid.uuid4().hex[:6]}"
    produce(rb.bootstrap, topic, 6, 50)
    tracker = Tracker(rb.bootstrap, group, topic)
    for _ in range(3):
        tracker.add()
    tracker.until(tracker.balanced(6), 60, "3 consumers to share 6 partitions")
    assert [len(s) for s in tracker.assignments()] == [2, 2, 2]
    state, generation, members = group_state(rb, group)
    assert (state, members) == ("Stable", 3)
    leaving = tracker.consumers[1]
    tracker.close(leaving)
    tracker.until(tracker.balanced(6), 30, "2 consumers to take over after a leave")
    assert group_state(rb, group)[1] > generation
    produce(rb.bootstrap, topic, 6, 50, start=50)
    tracker.until(lambda: covered(tracker.seen, 6, 100), 60, "every record")
    assert len(tracker.seen) == len(set(tracker.seen)), "no record seen twice after clean handover"
    tracker.close_all()
    assert group_state(rb, group)[0] == "Empty"


CHILD = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    bootstrap, group, topic = sys.argv[1:4]
    SESSION_MS = int(sys.argv[4])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300})
    c.subscribe([topic])
    while True:
        m = c.poll(0.1)
        if m is None or m.error():
            if c.assignment():
                print("ASSIGNED", ",".join(str(tp.partition) for tp in c.assignment()), flush=True)
            continue
        # seen before committed: a kill that lands while the commit is in flight may
        # leave it committed, so a record committed but never reported would be lost
        # to the test's count (its whole run of stop 57 failed so)
        print("SEEN", m.partition(), m.offset(), flush=True)
        c.commit(message=m, asynchronous=False)
""")


def test_confluent_killed_consumer_expires_and_partitions_move(rb: RunningBroker,
                                                               tmp_path: Path) -> None:
    topic = new_topic(rb, 6)
    group = f"ck-kill-{uuid.uuid4().hex[:6]}"
    produce(rb.bootstrap, topic, 6, 30)
    tracker = Tracker(rb.bootstrap, group, topic)
    tracker.add()
    tracker.add()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "child.out"
    with open(out, "w") as sink:
        child = subprocess.Popen([sys.executable, str(script), rb.bootstrap, group, topic,
                                  str(SESSION_MS)],
                                 stdout=sink, stderr=subprocess.DEVNULL)
    try:
        tracker.until(lambda: group_state(rb, group)[2] == 3
                      and group_state(rb, group)[0] == "Stable"
                      and "ASSIGNED" in out.read_text() and all(tracker.assignments()),
                      60, "the child to join the group")
        generation = group_state(rb, group)[1]
        time.sleep(0.5)  # let the child consume and commit part of its partitions
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        took = tracker.until(tracker.balanced(6), 30, "takeover after SIGKILL")
        assert group_state(rb, group)[1] > generation
        assert took < SESSION_MS / 1000 + 10
    finally:
        if child.poll() is None:
            child.kill()
    child_seen = [(int(p), int(o)) for line in out.read_text().splitlines()
                  if line.startswith("SEEN") for _, p, o in [line.split()]]
    produce(rb.bootstrap, topic, 6, 20, start=30)
    tracker.until(lambda: covered(tracker.seen + child_seen, 6, 50), 60, "every record")
    # what the child committed is not consumed again; at most its last in-flight record is
    duplicates = set(child_seen) & set(tracker.seen)
    assert len(duplicates) <= 6
    tracker.close_all()


def test_confluent_range_assignor_matches_seed_001(rb: RunningBroker) -> None:
    topic = new_topic(rb, 5)
    tracker = Tracker(rb.bootstrap, f"ck-range-{uuid.uuid4().hex[:6]}", topic,
                      **{"partition.assignment.strategy": "range"})
    tracker.add()
    tracker.add()
    tracker.until(tracker.balanced(5), 60, "range assignment")
    assert sorted(sorted(s) for s in tracker.assignments()) == [[0, 1, 2], [3, 4]]
    tracker.close_all()


def test_confluent_static_member_restart_keeps_partitions_without_rebalance(
        rb: RunningBroker) -> None:
    topic = new_topic(rb, 4)
    group = f"ck-static-{uuid.uuid4().hex[:6]}"
    tracker = Tracker(rb.bootstrap, group, topic, **{"session.timeout.ms": 10000})
    a = tracker.add(**{"group.instance.id": "instance-a"})
    b = tracker.add(**{"group.instance.id": "instance-b"})
    tracker.until(tracker.balanced(4), 60, "two static members")
    _, generation, _ = group_state(rb, group)
    before_a = {tp.partition for tp in a.assignment()}
    before_b = {tp.partition for tp in b.assignment()}
    tracker.close(b)  # a static member leaves no LeaveGroup behind
    assert group_state(rb, group) == ("Stable", generation, 2)
    b2 = tracker.add(**{"group.instance.id": "instance-b"})
    tracker.until(lambda: bool(b2.assignment()), 30, "the restarted static member")
    assert {tp.partition for tp in b2.assignment()} == before_b
    assert {tp.partition for tp in a.assignment()} == before_a
    assert group_state(rb, group) == ("Stable", generation, 2)
    tracker.close_all()


def test_committed_offsets_survive_broker_kill9(tmp_path: Path) -> None:
    """A member stays in its group across a broker kill -9 (the group is reloaded from
    __consumer_offsets: same generation, so its heartbeats are accepted and it resumes from
    its committed offsets), and a new member later starts where the group left off."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = start_broker(tmp_path, overrides=BROKER_OVERRIDES)
    topic, group = "durable", "g-durable"
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
        produce(broker.bootstrap, topic, 2, 40)
        tracker = Tracker(broker.bootstrap, group, topic, **{"session.timeout.ms": 10000})
        consumer = tracker.add()
        tracker.until(lambda: covered(tracker.seen, 2, 40), 60, "the first 80 records")
        assert [tp.offset for tp in consumer.committed(tps, timeout=10)] == [40, 40]
        broker.kill9()
        broker = start_broker(tmp_path, port=broker.port, data_dir=broker.data_dir,
                              overrides=BROKER_OVERRIDES)
        produce(broker.bootstrap, topic, 2, 10, start=40)
        tracker.until(lambda: covered(tracker.seen, 2, 50), 60, "the records after restart")
        assert sorted(tracker.seen) == [(p, o) for p in range(2) for o in range(50)]
        assert [tp.offset for tp in consumer.committed(tps, timeout=10)] == [50, 50]
        tracker.close_all()
        broker.kill9()
        broker = start_broker(tmp_path, port=broker.port, data_dir=broker.data_dir,
                              overrides=BROKER_OVERRIDES)
        produce(broker.bootstrap, topic, 2, 5, start=50)
        again = Tracker(broker.bootstrap, group, topic)
        fresh = again.add()
        again.until(lambda: len(again.seen) >= 10, 60, "the 10 newest records")
        assert sorted(again.seen) == [(p, o) for p in range(2) for o in range(50, 55)]
        assert [tp.offset for tp in fresh.committed(tps, timeout=10)] == [55, 55]
        again.close_all()
    finally:
        broker.kill9()


# -- kafka-python ------------------------------------------------------------------------------
def test_kafka_python_range_assignor_and_leave(rb: RunningBroker) -> None:
    """Each consumer polls in its own thread: kafka-python's poll blocks while it rejoins,
    so one thread polling both would starve the other member's rejoin."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    topic = new_topic(rb, 5)
    group = f"kp-{uuid.uuid4().hex[:6]}"
    produce(rb.bootstrap, topic, 5, 10)
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()

    class Member(threading.Thread):
        def __init__(self) -> None:
            super().__init__(daemon=True)
            self.stop = threading.Event()
            self.partitions: list[int] = []
            self.error: BaseException | None = None

        def run(self) -> None:
            try:
                c = KafkaConsumer(bootstrap_servers=rb.bootstrap, group_id=group,
                                  auto_offset_reset="earliest", enable_auto_commit=False,
                                  partition_assignment_strategy=[RangePartitionAssignor],
                                  session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300)
                c.subscribe([topic])
                # Have the topic's metadata before the first poll (which joins the group).
                # kafka-python does not wait for it: a leader that joins first assigns
                # nothing ("No partition metadata for topic") and rejoins when the metadata
                # arrives, and kafka-python (3.0.12) can lose that rejoin: its assignment
                # resets the snapshot that need_rejoin() checks, so when poll(timeout_ms=50)
                # returns while that JoinGroup/SyncGroup is in flight, no later poll resumes
                # it; the member stays REBALANCING without heartbeats, the broker expires it
                # and the other member takes all partitions. Must follow subscribe(): the
                # snapshot is taken of the subscribed topics when the metadata arrives.
                asked = time.monotonic()
                while c.partitions_for_topic(topic) != set(range(5)):
                    assert not expired(asked, 30), \
                        f"no metadata for {topic} in {describe(asked, 30)}"
                    time.sleep(0.05)
                while not self.stop.is_set():
                    batch = c.poll(timeout_ms=50)
                    with lock:
                        for records in batch.values():
                            seen.update((r.partition, r.offset) for r in records)
                    if batch:
                        c.commit()
                    self.partitions = sorted(tp.partition for tp in c.assignment())
                c.close()  # LeaveGroup
            except BaseException as exc:  # reported by the test thread
                self.error = exc

    def wait(until: Callable[[], bool], timeout: float) -> None:
        started = time.monotonic()
        while not until():
            assert all(m.error is None for m in members), [m.error for m in members]
            if expired(started, timeout):
                raise AssertionError(f"timed out after {describe(started, timeout)}; "
                                     f"assignments {[m.partitions for m in members]}")
            time.sleep(0.05)

    members = [Member(), Member()]
    for m in members:
        m.start()
    wait(lambda: sorted(m.partitions for m in members) == [[0, 1, 2], [3, 4]]
         and group_state(rb, group)[0] == "Stable", 60)
    leaving = members.pop()
    leaving.stop.set()
    leaving.join(30)
    wait(lambda: members[0].partitions == [0, 1, 2, 3, 4] and covered(seen, 5, 10), 60)
    members[0].stop.set()
    members[0].join(30)
    assert members[0].error is None and leaving.error is None
    assert group_state(rb, group)[0] == "Empty"


# -- aiokafka ----------------------------------------------------------------------------------
def test_aiokafka_group_life_cycle(rb: RunningBroker) -> None:
    from aiokafka import AIOKafkaConsumer

    topic = new_topic(rb, 4)
    group = f"aio-{uuid.uuid4().hex[:6]}"
    produce(rb.bootstrap, topic, 4, 10)

    async def main() -> None:
        def consumer() -> Any:
            return AIOKafkaConsumer(topic, bootstrap_servers=rb.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300)

        a, b = consumer(), consumer()
        await a.start()
        await b.start()
        seen: set[tuple[int, int]] = set()
        started = time.monotonic()

        async def drain(c: Any) -> None:
            batch = await c.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    seen.add((r.partition, r.offset))
            if batch:
                await c.commit()

        while not expired(started, 60):
            await drain(a)
            await drain(b)
            pa = {tp.partition for tp in a.assignment()}
            pb = {tp.partition for tp in b.assignment()}
            if pa and pb and pa | pb == set(range(4)) and not pa & pb:
                break
        else:
            raise AssertionError("aiokafka consumers never shared the partitions")
        await b.stop()
        while not expired(started, 60):
            await drain(a)
            if {tp.partition for tp in a.assignment()} == set(range(4)) and covered(seen, 4, 10):
                break
        else:
            raise AssertionError("aiokafka consumer never took over")
        await a.stop()

    asyncio.run(main())
    assert group_state(rb, group)[0] == "Empty"


# -- kcat ----------------------------------------------------------------------------------------
def test_kcat_balanced_consumer_commits_and_resumes(rb: RunningBroker) -> None:
    topic = new_topic(rb, 3)
    group = f"kcat-{uuid.uuid4().hex[:6]}"
    produce(rb.bootstrap, topic, 3, 10)
    first = kcat("-b", rb.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
                 "-c", "30", "-f", "%p %o\\n", topic)
    got = {tuple(map(int, line.split())) for line in first.stdout.splitlines() if line.strip()}
    assert got == {(p, o) for p in range(3) for o in range(10)}

    def committed() -> dict[int, int]:
        coordinator = rb.broker.group_coordinator
        assert coordinator is not None
        _, offsets = coordinator.fetch_offsets(group, None, False)
        return {tp[1]: o.offset for tp, o in offsets.items() if o is not None}

    assert rb.call(committed) == {0: 10, 1: 10, 2: 10}  # kcat commits when it closes
    produce(rb.bootstrap, topic, 3, 2, start=10)
    second = kcat("-b", rb.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
                  "-c", "6", "-f", "%p %o\\n", topic)
    got = {tuple(map(int, line.split())) for line in second.stdout.splitlines() if line.strip()}
    assert got == {(p, o) for p in range(3) for o in (10, 11)}
