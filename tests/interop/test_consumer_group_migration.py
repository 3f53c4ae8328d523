"""Online migration between classic and consumer groups (KIP-848,
``group.consumer.migration.policy``) with real clients over loopback: kafka-python
(the classic protocol only, eager range assignment) and confluent-kafka with
``group.protocol=consumer`` in one group.

Upgrade: kafka-python members consume; confluent-kafka members join (the classic group
becomes a consumer group, the kafka-python members are served inside it); the
kafka-python members leave. Downgrade: the reverse, ending in a classic group when the
last consumer-protocol member leaves. Throughout, every client's rebalance callbacks keep
one ownership table (all polled on this thread): a partition given to a member while
another owns it fails the test, as does a record read from a partition its reader does
not own; every record produced is read; the committed offsets hold.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired
from tests._zygote import run as run_odradek
from tests.interop._broker import odradek_executable
from tests.interop.test_consumer_group_protocol import (
    BROKER_OVERRIDES,
    Member,
    new_topic,
    produce,
)

pytestmark = pytest.mark.interop

PARTITIONS = 6
PER_PARTITION = 20


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    overrides = {**BROKER_OVERRIDES, "group.initial.rebalance.delay.ms": "0",
                 "group.consumer.migration.policy": "bidirectional"}
    with running_broker(overrides=overrides) as broker:
        yield broker


class ClassicMember:
    """A kafka-python consumer (classic protocol, eager) sharing the ownership table."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str,
                 owners: dict[Any, str]) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        self.name = name
        self.owners = owners
        self.owned: set[int] = set()
        self.records: list[tuple[int, int, str]] = []
        self.violations: list[str] = []
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                for tp in revoked:
                    if member.owners.get((tp.topic, tp.partition)) == member.name:
                        del member.owners[(tp.topic, tp.partition)]
                    member.owned.discard(tp.partition)

            def on_partitions_assigned(self, assigned: Any) -> None:
                for tp in assigned:
                    holder = member.owners.get((tp.topic, tp.partition))
                    if holder is not None:
                        # kafka-python logs and swallows a listener's exception: kept
                        # for the test to fail on
                        member.violations.append(
                            f"partition {tp.partition} given to {member.name} while "
                            f"{holder} owns it")
                    member.owners[(tp.topic, tp.partition)] = member.name
                    member.owned.add(tp.partition)

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=name,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=300,
            max_poll_interval_ms=15000, request_timeout_ms=20000)
        self.consumer.subscribe([topic], listener=Listener())

        self._stop = threading.Event()
        self._commit = threading.Event()
        self._committed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Poll on its own thread, as an application does: kafka-python 3.0 drops a
        JoinGroup/SyncGroup round that completes between two polls (its join task is
        replaced when found done), so members polled in turn by one thread can rebalance
        forever; each polling continuously completes its rounds."""
        try:
            self.await_topic_metadata()
            while not self._stop.is_set():
                for tp, batch in self._poll().items():
                    if tp.partition not in self.owned:
                        self.violations.append(
                            f"{self.name} read partition {tp.partition} it does not own")
                    self.records += [(tp.partition, r.offset, r.value.decode())
                                     for r in batch]
                if self._commit.is_set():
                    self._commit.clear()
                    if self.owned:
                        self.consumer.commit()
                    self._committed.set()
        except BaseException as exc:
            self.violations.append(f"{self.name}'s poll loop failed: {exc!r}")
            raise

    def _poll(self) -> dict[Any, Any]:
        """One ``poll()`` of the loop (200 ms)."""
        polled: dict[Any, Any] = self.consumer.poll(timeout_ms=200)
        return polled

    def await_topic_metadata(self) -> None:
        """Before the first poll, fetch metadata until the new topic's partitions are in
        it, as an application does after creating a topic: kafka-python 3.0.12 rejoins on
        its own when a topic's partitions appear in its metadata during a rebalance,
        without marking the rejoin needed, and abandons that round if it outlasts the poll
        that started it, so the member sits rebalancing without heartbeats until its
        session expires (whole run Q54; docs/testing.md)."""
        [topic] = self.consumer.subscription()
        started = time.monotonic()
        self.consumer.topics()  # a metadata refresh (of every topic), waited for
        while len(self.consumer.partitions_for_topic(topic) or ()) < PARTITIONS:
            assert not expired(started, 60), \
                f"{topic} not in kafka-python's metadata after {describe(started, 60)}"
            time.sleep(0.1)
            self.consumer.topics()

    def poll(self) -> None:
        """Called by the test's waits: fails on what the polling thread saw."""
        assert not self.violations, self.violations
        time.sleep(0.01)

    def commit(self) -> None:
        self._committed.clear()
        self._commit.set()
        assert self._committed.wait(30), f"{self.name} did not commit within 30 s"
        assert not self.violations, self.violations

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.name}'s poll loop did not stop"
        assert not self.violations, self.violations
        self.consumer.close()  # LeaveGroup
        for key, holder in list(self.owners.items()):
            if holder == self.name:
                del self.owners[key]
        self.owned.clear()


def commit(member: Any) -> None:
    """Commit what the member read; a confluent-kafka member with nothing new since its
    last commit says _NO_OFFSET, which is no failure."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(member, ClassicMember):
        member.commit()
        return
    try:
        member.commit()
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               members: list[Any]) -> None:
    started = time.monotonic()
    while not expired(started, timeout):
        for m in members:
            m.poll()
        if condition():
            return
    owned = {m.name: sorted(m.owned) for m in members}
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; owned {owned}")


def read_to_end(members: list[Any], end: int) -> Callable[[], bool]:
    """Every partition's current owner has read it up to offset ``end`` - 1 (what it will
    commit)."""
    def check() -> bool:
        for p in range(PARTITIONS):
            owner = [m for m in members if p in m.owned]
            if len(owner) != 1 or max(
                    (o for q, o, _ in owner[0].records if q == p), default=-1) < end - 1:
                return False
        return True
    return check


def values(members: list[Any]) -> set[str]:
    return {v for m in members for _, _, v in m.records}


def batch(first: int) -> set[str]:
    return {f"{p}:{i}" for p in range(PARTITIONS) for i in range(first, first + PER_PARTITION)}


def all_owned(members: list[Any], each: bool = True) -> Callable[[], bool]:
    def check() -> bool:
        owned = [p for m in members for p in m.owned]
        return sorted(owned) == list(range(PARTITIONS)) and (
            not each or all(m.owned for m in members))
    return check


def group_type(rb: RunningBroker, group: str) -> tuple[str, dict[str, bool]]:
    """("consumer" or "classic", member id -> whether it speaks the classic protocol)."""
    def read() -> tuple[str, dict[str, bool]]:
        coordinator = rb.broker.group_coordinator
        consumer = coordinator.consumer_group(group)
        if consumer is not None:
            return "consumer", {m.member_id: m.uses_classic_protocol
                                for m in consumer.members.values()}
        classic = coordinator.groups.get(group)
        return "classic", {m: True for m in (classic.members if classic else {})}
    result: tuple[str, dict[str, bool]] = rb.call(read)
    return result


def cli_protocols(rb: RunningBroker, group: str) -> list[str]:
    """The PROTOCOL column of ``odradek groups describe``'s members."""
    out = run_odradek([str(odradek_executable()), "groups", "describe", "--group", group,
                          "-b", rb.bootstrap],
                         timeout=60, check=True).stdout
    lines = out.splitlines()
    (head,) = [i for i, line in enumerate(lines) if line.split()[:1] == ["CONSUMER-ID"]]
    column = lines[head].split().index("PROTOCOL")
    return sorted(line.split()[column] for line in lines[head + 1:] if line.strip())


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                               timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        reader.close()


def test_upgrade_kafka_python_group_to_consumer_protocol(rb: RunningBroker) -> None:
    topic = new_topic(rb, PARTITIONS)
    group = f"migrate-up-{uuid.uuid4().hex[:6]}"
    owners: dict[Any, str] = {}
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION)
    classic = [ClassicMember(rb.bootstrap, group, topic, f"kp{i}", owners) for i in range(2)]
    wait_until(lambda: batch(0) <= values(classic) and all_owned(classic)(), 60,
               "the classic members to read batch 1", classic)
    for m in classic:
        commit(m)
    assert group_type(rb, group)[0] == "classic"

    # confluent-kafka members join with the consumer protocol: the group upgrades
    modern = [Member(rb.bootstrap, group, topic, f"ck{i}", owners) for i in range(2)]
    everyone: list[Any] = [*classic, *modern]
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=PER_PARTITION)
    wait_until(lambda: batch(PER_PARTITION) <= values(everyone)
               and all_owned(everyone)(), 90, "four members sharing the partitions",
               everyone)
    kind, members = group_type(rb, group)
    assert kind == "consumer" and sorted(members.values()) == [False, False, True, True]
    assert cli_protocols(rb, group) == ["classic", "classic", "consumer", "consumer"]
    for m in everyone:
        commit(m)

    # the kafka-python members leave: the consumer-protocol members take everything
    for m in classic:
        m.close()
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=2 * PER_PARTITION)
    wait_until(lambda: all_owned(modern)() and read_to_end(modern, 3 * PER_PARTITION)(),
               60, "the consumer members to take over", modern)
    for m in modern:
        commit(m)
    kind, members = group_type(rb, group)
    assert kind == "consumer" and sorted(members.values()) == [False, False]
    assert batch(0) | batch(PER_PARTITION) | batch(2 * PER_PARTITION) <= values(everyone)
    for m in modern:
        m.close()
    assert committed_offsets(rb.bootstrap, group, topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


def test_downgrade_consumer_group_to_kafka_python(rb: RunningBroker) -> None:
    topic = new_topic(rb, PARTITIONS)
    group = f"migrate-down-{uuid.uuid4().hex[:6]}"
    owners: dict[Any, str] = {}
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION)
    modern = [Member(rb.bootstrap, group, topic, f"ck{i}", owners) for i in range(2)]
    wait_until(lambda: batch(0) <= values(modern) and all_owned(modern)(), 60,
               "the consumer members to read batch 1", modern)
    for m in modern:
        commit(m)

    # kafka-python members join the consumer group as classic members
    classic = [ClassicMember(rb.bootstrap, group, topic, f"kp{i}", owners) for i in range(2)]
    everyone: list[Any] = [*modern, *classic]
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=PER_PARTITION)
    wait_until(lambda: batch(PER_PARTITION) <= values(everyone)
               and all_owned(everyone)(), 90, "four members sharing the partitions",
               everyone)
    kind, members = group_type(rb, group)
    assert kind == "consumer" and sorted(members.values()) == [False, False, True, True]
    for m in everyone:
        commit(m)

    # the consumer-protocol members leave: the last one's leave makes it classic again
    modern[0].close()
    rest: list[Any] = [modern[1], *classic]
    wait_until(all_owned(rest), 60, "three members sharing the partitions", rest)
    modern[1].close()
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=2 * PER_PARTITION)
    wait_until(lambda: all_owned(classic)() and read_to_end(classic, 3 * PER_PARTITION)(),
               90, "the classic members to take over", classic)
    kind, members = group_type(rb, group)
    assert kind == "classic" and len(members) == 2
    for m in classic:
        commit(m)
    assert batch(0) | batch(PER_PARTITION) | batch(2 * PER_PARTITION) <= values(everyone)
    for m in classic:
        m.close()
    assert committed_offsets(rb.bootstrap, group, topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


def cooperative_classic(bootstrap: str, group: str, topic: str, name: str,
                        owners: dict[Any, str]) -> Member:
    """A confluent-kafka consumer speaking the classic protocol with the cooperative-sticky
    assignor: it declares its owned partitions in each JoinGroup and revokes only what it
    loses (librdkafka's incremental rebalance), the case eager kafka-python leaves out."""
    return Member(bootstrap, group, topic, name, owners, **{
        "group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})


def test_cooperative_classic_members_beside_consumer_members_both_ways(
        rb: RunningBroker) -> None:
    """Upgrade and downgrade with librdkafka's cooperative classic members: one ownership
    table (a partition assigned while another member owns it raises in the callback),
    every record read, committed offsets hold."""
    topic = new_topic(rb, PARTITIONS)
    group = f"migrate-coop-{uuid.uuid4().hex[:6]}"
    owners: dict[Any, str] = {}
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION)
    classic = [cooperative_classic(rb.bootstrap, group, topic, f"coop{i}", owners)
               for i in range(2)]
    wait_until(lambda: batch(0) <= values(classic) and all_owned(classic)(), 60,
               "the cooperative classic members to read batch 1", classic)
    for m in classic:
        commit(m)
    assert group_type(rb, group)[0] == "classic"

    # a consumer-protocol member joins: the group upgrades, the classic members revoke
    # incrementally what the KIP-848 reconciliation moves to it
    modern = [Member(rb.bootstrap, group, topic, "ck0", owners)]
    everyone: list[Any] = [*classic, *modern]
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=PER_PARTITION)
    wait_until(lambda: batch(PER_PARTITION) <= values(everyone)
               and all_owned(everyone)(), 90, "three members sharing the partitions",
               everyone)
    kind, members = group_type(rb, group)
    assert kind == "consumer" and sorted(members.values()) == [False, True, True]
    for m in everyone:
        commit(m)

    # it leaves: classic again, the cooperative members take its partitions
    modern[0].close()
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=2 * PER_PARTITION)
    wait_until(lambda: all_owned(classic)() and read_to_end(classic, 3 * PER_PARTITION)(),
               90, "the cooperative classic members to take over", classic)
    kind, members = group_type(rb, group)
    assert kind == "classic" and len(members) == 2
    for m in classic:
        commit(m)
    assert batch(0) | batch(PER_PARTITION) | batch(2 * PER_PARTITION) <= values(everyone)
    for m in classic:
        m.close()
    assert committed_offsets(rb.bootstrap, group, topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


class AioMember:
    """An aiokafka consumer (the classic protocol, eager, its default range assignor) on
    its own thread and event loop, sharing the ownership table."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str,
                 owners: dict[Any, str]) -> None:
        self.name = name
        self.owners = owners
        self.owned: set[int] = set()
        self.records: list[tuple[int, int, str]] = []
        self.violations: list[str] = []
        self._args = (bootstrap, group, topic)
        self._stop = threading.Event()
        self._commit = threading.Event()
        self._committed = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        import asyncio

        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        bootstrap, group, topic = self._args
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                for tp in revoked:
                    if member.owners.get((tp.topic, tp.partition)) == member.name:
                        del member.owners[(tp.topic, tp.partition)]
                    member.owned.discard(tp.partition)

            def on_partitions_assigned(self, assigned: Any) -> None:
                for tp in assigned:
                    holder = member.owners.get((tp.topic, tp.partition))
                    if holder is not None:
                        member.violations.append(
                            f"partition {tp.partition} given to {member.name} while "
                            f"{holder} owns it")
                    member.owners[(tp.topic, tp.partition)] = member.name
                    member.owned.add(tp.partition)

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=self.name,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=300,
            max_poll_interval_ms=15000, request_timeout_ms=20000)
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for tp, batch in batches.items():
                    if tp.partition not in self.owned:
                        self.violations.append(
                            f"{self.name} read partition {tp.partition} it does not own")
                    self.records += [(tp.partition, r.offset, r.value.decode())
                                     for r in batch]
                if self._commit.is_set():
                    self._commit.clear()
                    if self.owned:
                        await consumer.commit()
                    self._committed.set()
        except BaseException as exc:
            self.violations.append(f"{self.name}'s poll loop failed: {exc!r}")
            raise
        finally:
            await consumer.stop()  # LeaveGroup

    def poll(self) -> None:
        assert not self.violations, self.violations
        time.sleep(0.01)

    def commit(self) -> None:
        self._committed.clear()
        self._commit.set()
        assert self._committed.wait(30), f"{self.name} did not commit within 30 s"
        assert not self.violations, self.violations

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.name}'s poll loop did not stop"
        assert not self.violations, self.violations
        for key, holder in list(self.owners.items()):
            if holder == self.name:
                del self.owners[key]
        self.owned.clear()


def test_aiokafka_members_beside_consumer_members_both_ways(rb: RunningBroker) -> None:
    """aiokafka (the classic protocol, eager) as classic members of a consumer group: it
    upgrades when a confluent-kafka consumer-protocol member joins, and is classic again
    when that member leaves; one ownership table, every record read, offsets hold."""
    topic = new_topic(rb, PARTITIONS)
    group = f"migrate-aio-{uuid.uuid4().hex[:6]}"
    owners: dict[Any, str] = {}
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION)
    classic = [AioMember(rb.bootstrap, group, topic, f"aio{i}", owners) for i in range(2)]
    wait_until(lambda: batch(0) <= values(classic) and all_owned(classic)(), 60,
               "the aiokafka members to read batch 1", classic)
    for m in classic:
        m.commit()
    assert group_type(rb, group)[0] == "classic"

    modern = Member(rb.bootstrap, group, topic, "ck0", owners)
    everyone: list[Any] = [*classic, modern]
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=PER_PARTITION)
    wait_until(lambda: batch(PER_PARTITION) <= values(everyone)
               and all_owned(everyone)(), 90, "three members sharing the partitions",
               everyone)
    kind, members = group_type(rb, group)
    assert kind == "consumer" and sorted(members.values()) == [False, True, True]
    for m in everyone:
        commit(m)

    modern.close()
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=2 * PER_PARTITION)
    wait_until(lambda: all_owned(classic)() and read_to_end(classic, 3 * PER_PARTITION)(),
               90, "the aiokafka members to take over", classic)
    kind, members = group_type(rb, group)
    assert kind == "classic" and len(members) == 2
    for m in classic:
        m.commit()
    assert batch(0) | batch(PER_PARTITION) | batch(2 * PER_PARTITION) <= values(everyone)
    for m in classic:
        m.close()
    assert committed_offsets(rb.bootstrap, group, topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


class KcatMember:
    """``kcat -G`` (librdkafka 2.0.2, the classic protocol, eager range) as a process:
    what it reads on stdout, its rebalances on stderr (``-v``)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from tests.interop._broker import kcat_path

        exe = kcat_path()
        assert exe is not None, "kcat is not installed (scripts/install-java-client)"
        self.name = "kcat"
        self.records: list[tuple[int, int, str]] = []
        self.owned: set[int] = set()
        self.failures: list[str] = []  # a line its readers could not parse
        self._process = subprocess.Popen(
            [exe, "-b", bootstrap, "-G", group, "-u", "-v", "-X", "auto.offset.reset=earliest",
             "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300",
             "-f", "%p %o %s\\n", topic],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._readers = [threading.Thread(target=self._read_records, daemon=True),
                         threading.Thread(target=self._read_rebalances, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_records(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                partition, offset, value = line.split()
                self.records.append((int(partition), int(offset), value))
            except ValueError:
                self.failures.append(f"kcat printed {line!r}")

    def _read_rebalances(self) -> None:
        # "% Group g rebalanced (memberid m): assigned: t [0], t [1]" (or revoked)
        assert self._process.stderr is not None
        for line in self._process.stderr:
            if " rebalanced " not in line:
                continue
            kind, _, listed = line.strip().partition("): ")[2].partition(": ")
            try:
                partitions = {int(p.split("[")[1].rstrip("]")) for p in listed.split(", ")
                              if "[" in p}
            except ValueError:
                self.failures.append(f"kcat logged {line!r}")
                continue
            self.owned = (self.owned | partitions if kind == "assigned"
                          else self.owned - partitions)

    def poll(self) -> None:
        assert self._process.poll() is None, "kcat exited"
        assert not self.failures, self.failures
        time.sleep(0.01)

    def close(self) -> None:
        self._process.terminate()  # kcat leaves the group on SIGTERM
        self._process.wait(30)
        for reader in self._readers:
            reader.join(10)


def test_kcat_beside_a_consumer_member_both_ways(rb: RunningBroker) -> None:
    """kcat 1.7 (librdkafka 2.0.2) as the classic member: the group upgrades when a
    consumer-protocol member joins, the two split the partitions (disjoint once both
    settled), and it is classic again with kcat owning everything when that member
    leaves; every record is read."""
    topic = new_topic(rb, PARTITIONS)
    group = f"migrate-kcat-{uuid.uuid4().hex[:6]}"
    owners: dict[Any, str] = {}
    produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION)
    kc = KcatMember(rb.bootstrap, group, topic)
    try:
        wait_until(lambda: batch(0) <= values([kc]) and all_owned([kc])(), 60,
                   "kcat to read batch 1", [kc])
        assert group_type(rb, group)[0] == "classic"
        modern = Member(rb.bootstrap, group, topic, "ck0", owners)
        everyone: list[Any] = [kc, modern]
        produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=PER_PARTITION)
        wait_until(lambda: batch(PER_PARTITION) <= values(everyone)
                   and all_owned(everyone)(), 90, "kcat and ck0 sharing the partitions",
                   everyone)
        kind, members = group_type(rb, group)
        assert kind == "consumer" and sorted(members.values()) == [False, True]
        assert not kc.owned & modern.owned
        modern.close()
        produce(rb.bootstrap, topic, PARTITIONS, PER_PARTITION, start=2 * PER_PARTITION)
        wait_until(lambda: all_owned([kc])() and read_to_end([kc], 3 * PER_PARTITION)(),
                   90, "kcat to take over", [kc])
        kind, members = group_type(rb, group)
        assert kind == "classic" and len(members) == 1
        assert batch(0) | batch(PER_PARTITION) | batch(2 * PER_PARTITION) <= values(
            everyone)
    finally:
        kc.close()
