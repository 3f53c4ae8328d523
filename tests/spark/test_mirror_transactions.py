"""``odradek mirror`` over a transactional source: two brokers on loopback, the mirror as a
subprocess (its own Spark) reading the source read_committed (its default). Committed
transactions and plain records reach the target once, in order; aborted records and the
transaction markers never do; an open transaction holds its partition back until its
commit."""

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
from tests.interop._broker import odradek_executable

pytestmark = pytest.mark.timeout(900)

DEADLINE_S = 400.0


def _wait(cond: Callable[[], bool], what: str, log: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}; the mirror's log ends:\n{tail}")
        time.sleep(0.5)


def _values(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every value of one partition, read_uncommitted, up to its high watermark."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                     "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    try:
        tp = ck.TopicPartition(topic, partition)
        try:
            low, high = c.get_watermark_offsets(tp, timeout=30)
        except ck.KafkaException:
            return []  # not created yet
        out: list[bytes] = []
        if high <= low:
            return out
        c.assign([ck.TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + 60
        last = low - 1
        while last < high - 1:  # the mirror writes no markers: offsets are contiguous
            assert time.monotonic() < deadline, f"reading {topic}-{partition}"
            for m in c.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                last = m.offset() or 0
                if last < high:
                    out.append(m.value() or b"")
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[RunningBroker, RunningBroker]]:
    with running_broker() as source, running_broker() as target:
        yield source, target


def test_mirror_copies_committed_transactions_only(
        clusters: tuple[RunningBroker, RunningBroker], tmp_path: Path) -> None:
    source, target = clusters
    topic = f"tx.{uuid.uuid4().hex[:8]}"
    source.call(source.broker.metadata.create_topic, topic, 2, 1)
    plain = ck.Producer({"bootstrap.servers": source.bootstrap})
    txn = ck.Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 5,
                       "transaction.timeout.ms": 900_000,
                       "transactional.id": f"mirror-src-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(60)
    expected: dict[int, list[bytes]] = {0: [], 1: []}

    def send(producer: ck.Producer, tag: str, n: int, keep: bool) -> None:
        for i in range(n):
            value = f"{tag}-{i}".encode()
            producer.produce(topic, value, partition=i % 2)
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
           "--master", "local[2]", "--sync-interval", "1"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        def mirrored() -> dict[int, list[bytes]]:
            return {p: _values(target.bootstrap, topic, p) for p in (0, 1)}

        _wait(lambda: mirrored() == expected, "the committed records up to the open "
              "transaction", log)
        txn.commit_transaction(60)
        for p in (0, 1):
            expected[p] += [f"open-{i}".encode() for i in range(p, 4, 2)]
            expected[p] += [f"plain-b-{i}".encode() for i in range(p, 2, 2)]
        _wait(lambda: mirrored() == expected, "the transaction once committed", log)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)
