"""The consumer group protocol of KIP-848 with the Java client (kafka-clients 3.9.1,
``group.protocol=consumer``) on a three-broker cluster: the coordinator is killed with
SIGKILL while a second member joins and the first has not revoked yet. Both members live
in one JVM (java/GroupMembers.java, compiled once and cached like the other Java drivers)
and are driven command by command, so the test decides which member polls: the first is
not polled while the second joins, so its rebalance callback cannot run and the
revocation stays open across the kill. The new coordinator loads the group from
``__consumer_offsets``; every record is read, no partition is held by two members at
once, the committed offsets hold, nobody is fenced.

kafka-clients 3.9.1 does not look for a new coordinator when its heartbeats cannot
reach the old one (KAFKA-17293, fixed in 4.0): only a failed OffsetCommit or OffsetFetch
sends it to FindCoordinator. So the members commit after each poll, as an application
committing synchronously does, and the second member subscribes to a topic of its own
too, so it holds a partition with a position to commit while it waits for the first to
revoke; without that it would heartbeat the dead broker until its session expires."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from odradek.client.groups import ConsumerGroupDescription
from tests._deadlines import expired

from ._broker import compile_java_client
from ._cluster import Cluster, running_cluster
from .test_consumer_group_protocol_cluster import PARTITIONS, describe, find_coordinator

pytestmark = pytest.mark.interop

GROUP_MEMBERS_SOURCE = Path(__file__).resolve().parent / "java" / "GroupMembers.java"
#: an answer from the JVM: a poll is bounded by its own timeout, a commit by 30 s
ANSWER_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # a session timeout that covers the Java client's way back to a coordinator: up to
    # a second of back-off per failed attempt, from a commit failing at the dead one
    with running_cluster(Path(tmp_path_factory.mktemp("kip848-java")), overrides={
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 6,
        "group.consumer.heartbeat.interval.ms": 300,
        "group.consumer.min.heartbeat.interval.ms": 100,
        "group.consumer.session.timeout.ms": 10000,
        "group.consumer.min.session.timeout.ms": 1000,
    }) as c:
        yield c


class JavaMembers:
    """One JVM running GroupMembers: ``ask(command)`` writes a line, returns the JSON
    answer (an ``{"error": ...}`` answer fails the test)."""

    def __init__(self, bootstrap: str, props: dict[str, str], log: Path) -> None:
        classes, jars = compile_java_client(source=GROUP_MEMBERS_SOURCE)
        java = shutil.which("java")
        assert java is not None, "java not found on PATH (run scripts/install-java-client)"
        self.log = log
        self._stderr = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
             os.pathsep.join([str(classes), *(str(j) for j in jars)]), "GroupMembers",
             bootstrap, *(f"-X{k}={v}" for k, v in props.items())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            self._answers.put(line)
        self._answers.put(None)

    def ask(self, command: str, timeout: float = ANSWER_TIMEOUT,
            retriable: str | None = None) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer to {command!r} in {timeout} s:\n"
                                 f"{self.log.read_text(errors='replace')[-4000:]}") from None
        assert line is not None, (
            f"the JVM ended: {self.log.read_text(errors='replace')[-4000:]}")
        answer: dict[str, Any] = json.loads(line)
        if retriable is not None and retriable in answer.get("error", ""):
            return answer  # the caller retries
        assert "error" not in answer, (command, answer)
        return answer

    def close(self) -> None:
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            self.proc.wait(60)  # each member's close is bounded by 30 s
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        finally:
            self._stderr.close()


def test_java_members_and_a_coordinator_killed_mid_revocation(
        cluster: Cluster, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    bootstrap = ",".join(cluster.address(i) for i in (1, 2, 3))
    topic = f"kip848-java-{uuid.uuid4().hex[:8]}"
    extra = f"{topic}-x"  # a second subscription moves the group epoch past 2
    own = f"{topic}-c2"  # c2's alone: it holds a partition at once (module docstring)
    for name, count in ((topic, PARTITIONS), (extra, 1), (own, 1)):
        cluster.create_topic(name, count, 3)  # retried while a broker is not yet live (CI-84)
    group, coordinator = next(
        (g, c) for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(50))
        if (c := find_coordinator(cluster.address(1), g)) != 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(60) == 0

    owner: dict[int, str] = {}  # partition of topic -> the member holding it now
    overlaps: list[str] = []
    lost: list[str] = []
    seen: list[str] = []
    history: list[tuple[Any, ...]] = []  # every listener call, for a failure's message
    java = JavaMembers(bootstrap, {"group.protocol": "consumer"}, tmp_path / "jvm.log")

    def poll(name: str, commit: bool = False) -> None:
        answer = java.ask(f"poll {name} 100")
        try:
            record(name, answer)
        finally:
            if commit:
                commit_sync(name)

    def commit_sync(name: str) -> None:
        """commitSync as an application does it: a STALE_MEMBER_EPOCH (the group's epoch
        moved since the member's last heartbeat, e.g. the subscribed topics' metadata
        changed) is retried once a poll has brought the new epoch, as the error says
        (whole run Q47: c1's first commit met one)."""
        started = time.monotonic()
        while "error" in java.ask(f"commit {name}", retriable="stale member epoch"):
            assert not expired(started, 60), \
                f"{name}'s commit stale for {time.monotonic() - started:.0f} s"
            record(name, java.ask(f"poll {name} 100"))

    def record(name: str, answer: dict[str, Any]) -> None:
        history.extend((name, *e) for e in answer["events"])
        for kind, t, p in answer["events"]:
            if t != topic:
                continue
            if kind == "assigned":
                holder = owner.setdefault(p, name)
                if holder != name:
                    overlaps.append(f"{name} got {p} held by {holder}")
            else:
                if kind == "lost":
                    lost.append(f"{name} lost {p}")
                if owner.get(p) == name:
                    del owner[p]
        for t, p, _offset, value in answer["records"]:
            if t != topic:
                continue
            if owner.get(p) != name:
                overlaps.append(f"{name} read partition {p} it does not hold")
            seen.append(value)

    def epoch(at_least: int) -> ConsumerGroupDescription | None:
        d = describe(cluster.address(1), group)
        return d if d is not None and d.group_epoch >= at_least else None

    try:
        java.ask(f"new c1 {group} {topic}")
        produce(0, 40)
        started = time.monotonic()
        while len(set(seen)) < 40 and not expired(started, 90):
            poll("c1")
        assert len(set(seen)) == 40
        commit_sync("c1")
        read_before = len(seen)
        # c1 subscribes to one more topic: the group epoch moves to 2, past where a group
        # created again would be after c2 joins
        java.ask(f"subscribe c1 {topic},{extra}")

        def resubscribed() -> ConsumerGroupDescription | None:
            poll("c1")
            return epoch(2)

        cluster.wait_for(resubscribed, 30, "c1's new subscription")
        # c2 joins; c1 is not polled, so it cannot revoke: the rebalance stays open
        producer.produce(own, value=b"w0")
        assert producer.flush(60) == 0
        java.ask(f"new c2 {group} {topic},{extra},{own}")

        def revoking() -> ConsumerGroupDescription | None:
            poll("c2")
            d = describe(cluster.address(1), group)
            if d is None or len(d.members) != 2:
                return None
            held = sum(len(m.assignment.get(topic, ())) for m in d.members)
            return d if held < PARTITIONS else None

        before = cluster.wait_for(revoking, 60, "c1 revoking for c2")
        assert before.state == "Reconciling" and before.group_epoch >= 3
        cluster.kill9(coordinator)
        produce(40, 40)
        started = time.monotonic()
        while len(set(seen)) < 80 and not expired(started, 120):
            poll("c1", commit=True)
            poll("c2", commit=True)
        assert len(set(seen)) == 80, f"read {len(set(seen))} of 80"
        assert not overlaps, overlaps
        assert not lost, lost  # nobody was fenced: no rejoin

        def stable() -> ConsumerGroupDescription | None:
            poll("c1")
            poll("c2")
            d = describe(cluster.address(1), group)
            return d if d is not None and d.state == "Stable" else None

        after = cluster.wait_for(stable, 60, "the group stable at its new coordinator")
        assert after.group_epoch == before.group_epoch, (before, after, history)
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert all(m.member_epoch == before.group_epoch for m in after.members), after
        assert sorted(p for m in after.members for p in m.assignment.get(topic, ())) == (
            list(range(PARTITIONS)))
        assert find_coordinator(cluster.address(1), group) != coordinator
        # read twice only what was read after the commit
        assert all(int(v[1:]) >= 40 for v in seen[read_before:] if seen.count(v) > 1)
        commit_sync("c1")
        commit_sync("c2")
        committed = java.ask(f"committed c1 {topic} {PARTITIONS}")["offsets"]
        assert sum(committed) == 80, committed
    finally:
        java.close()
        cluster.restore()
