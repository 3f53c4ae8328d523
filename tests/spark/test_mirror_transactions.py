"""``odradek mirror --transactional-id`` over a transactional source: two brokers on
loopback, the mirror as a subprocess (its own Spark) reading the source read_committed (its
default) and writing each task's range in a target transaction. A read_committed consumer
of the target sees committed source transactions and plain records once, in order; aborted
records and the source's markers never; an open source transaction holds its partition
back until its commit. Then the mirror is killed with SIGKILL while a target transaction is
open and started again on the same checkpoint: the read_committed view of the target is
still every record once, in order, and no transaction stays open."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired
from tests.interop._broker import odradek_executable
from tests.spark.test_mirror import kill_group

pytestmark = pytest.mark.timeout(900)

DEADLINE_S = 400.0
GROUP = "odradek-mirror"


def _wait(cond: Callable[[], bool], what: str, log: Path, timeout: float = DEADLINE_S) -> None:
    started = time.monotonic()
    while not cond():
        if expired(started, timeout):
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}; the mirror's log ends:\n{tail}")
        time.sleep(0.5)


def _values(bootstrap: str, topic: str, partition: int, isolation: str) -> list[bytes]:
    """Every value of one partition a consumer at ``isolation`` sees, up to the end it has
    (the last stable offset for read_committed, the high watermark otherwise)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                     "isolation.level": isolation, "enable.auto.commit": False,
                     "enable.partition.eof": True})
    try:
        tp = ck.TopicPartition(topic, partition)
        try:
            low, high = c.get_watermark_offsets(tp, timeout=30)
        except ck.KafkaException:
            return []  # not created yet
        if high <= low:
            return []
        c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        started = time.monotonic()
        out: list[bytes] = []
        while True:
            assert not expired(started, 60), (
                f"reading {topic}-{partition}: no end after {len(out)} records in "
                f"{describe(started, 60)}")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                return out
            out.append(m.value() or b"")
    finally:
        c.close()


def _end(bootstrap: str, topic: str, partition: int, isolation: str) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                     "isolation.level": isolation})
    try:
        return int(c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=30)[1])
    finally:
        c.close()


class Ends:
    """A partition's high watermark and last stable offset, asked of the broker each time
    through two long-lived consumers (a few ms a question)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.by = {iso: ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "ends",
                                     "isolation.level": iso})
                   for iso in ("read_uncommitted", "read_committed")}

    def open_transaction(self, partitions: range) -> bool:
        """Whether a partition has records beyond its last stable offset now."""
        for p in partitions:
            tp = ck.TopicPartition(self.topic, p)
            high = self.by["read_uncommitted"].get_watermark_offsets(tp, timeout=30)[1]
            if high > self.by["read_committed"].get_watermark_offsets(tp, timeout=30)[1]:
                return True
        return False

    def close(self) -> None:
        for c in self.by.values():
            c.close()


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the mirror (it stops its query and Spark), SIGKILL to its whole process
    group if it has not exited within two minutes."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    return proc.returncode


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[RunningBroker, RunningBroker]]:
    with running_broker() as source, running_broker() as target:
        yield source, target


def test_transactional_mirror_is_exactly_once_across_kill_9(
        clusters: tuple[RunningBroker, RunningBroker], tmp_path: Path) -> None:
    source, target = clusters
    topic = f"tx.{uuid.uuid4().hex[:8]}"
    parts = range(2)
    source.call(source.broker.metadata.create_topic, topic, 2, 1)
    plain = ck.Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 5})
    txn = ck.Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 5,
                       "transaction.timeout.ms": 900_000,
                       "transactional.id": f"mirror-src-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(60)
    expected: dict[int, list[bytes]] = {0: [], 1: []}

    def send(producer: ck.Producer, tag: str, n: int, keep: bool) -> None:
        for i in range(n):
            value = f"{tag}-{i}".encode()
            while True:
                try:
                    producer.produce(topic, value, partition=i % 2)
                    break
                except BufferError:
                    producer.poll(0.05)
            if keep:
                expected[i % 2].append(value)
        assert producer.flush(60) == 0

    send(plain, "plain-a", 4, keep=True)
    for round_ in range(3):
        txn.begin_transaction()
        send(txn, f"committed{round_}", 6, keep=True)
        txn.commit_transaction(60)
        txn.begin_transaction()
        send(txn, f"aborted{round_}", 6, keep=False)
        txn.abort_transaction(60)
    txn.begin_transaction()
    send(txn, "open", 4, keep=False)  # held back until it commits
    send(plain, "plain-b", 2, keep=False)  # behind the open transaction
    log = tmp_path / "mirror.log"
    cmd = [str(odradek_executable()), "mirror",
           "--source-bootstrap-server", source.bootstrap,
           "--target-bootstrap-server", target.bootstrap,
           "--include", r"tx\..*", "--checkpoint-dir", str(tmp_path / "ckpt"),
           "--master", "local[2]", "--sync-interval", "1",
           "--max-records-per-batch", "20000", "--transactional-id", "mm",
           # small produce requests, sent at once: a task's records reach the target while
           # it still produces, so its transaction is open (records past the last stable
           # offset) for most of the task rather than for the moments before its markers
           "--target-property", "batch.num.messages=20",
           "--target-property", "linger.ms=0"]

    def mirrored(isolation: str = "read_committed") -> dict[int, list[bytes]]:
        return {p: _values(target.bootstrap, topic, p, isolation) for p in parts}

    proc = _start(cmd, log)
    try:
        _wait(lambda: mirrored() == expected, "the committed records up to the open "
              "transaction", log)
        txn.commit_transaction(60)
        for p in parts:
            expected[p] += [f"open-{i}".encode() for i in range(p, 4, 2)]
            expected[p] += [f"plain-b-{i}".encode() for i in range(p, 2, 2)]
        _wait(lambda: mirrored() == expected, "the transaction once committed", log)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        # a backlog in micro-batches of 20,000 records; kill -9 while a task's target
        # transaction is open (its records written, not committed)
        ends = Ends(target.bootstrap, topic)
        try:
            open_at_kill = False
            for chunk in range(20):
                send(plain, f"backlog{chunk}", 20000, keep=True)
                started = time.monotonic()
                while not expired(started, 30) and not open_at_kill:
                    open_at_kill = ends.open_transaction(parts)
                if open_at_kill:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
            assert open_at_kill, "never saw a target transaction open"
            kill_group(proc)
            print("a target transaction open after the kill:", ends.open_transaction(parts))
        finally:
            ends.close()
        send(plain, "after", 10, keep=True)
        proc = _start(cmd, log)
        _wait(lambda: mirrored() == expected, "every record once after the restart", log)
        # the transaction the killed task left open was aborted, none stays open
        ends = Ends(target.bootstrap, topic)
        try:
            _wait(lambda: not ends.open_transaction(parts), "no open transaction on the target",
                  log)
        finally:
            ends.close()
        assert mirrored() == expected
        uncommitted = mirrored("read_uncommitted")
        for p in parts:  # read_uncommitted also sees the killed attempt's records
            assert set(uncommitted[p]) == set(expected[p])
        aborted = sum(len(uncommitted[p]) - len(expected[p]) for p in parts)
        print(f"the kill left {aborted} record(s) in an open transaction, aborted on restart")
        # the source offsets committed with the records, on the target
        c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": GROUP,
                         "isolation.level": "read_committed"})
        try:
            got = c.committed([ck.TopicPartition(topic, p) for p in parts], timeout=30)
        finally:
            c.close()
        for tp in got:
            assert tp.offset == _end(source.bootstrap, topic, tp.partition, "read_committed")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert _stop(proc) == 0
    finally:
        _stop(proc)


def test_an_empty_transactional_id_is_a_usage_error() -> None:
    out = subprocess.run(
        [str(odradek_executable()), "mirror", "--source-bootstrap-server", "127.0.0.1:1",
         "--target-bootstrap-server", "127.0.0.1:2", "--include", "x",
         "--transactional-id", " "],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert "--transactional-id must not be empty" in out.stderr
