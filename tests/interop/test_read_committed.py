"""read_committed consumers of real clients (librdkafka via confluent-kafka, kafka-python,
aiokafka, the Java client) over transactions written with raw Produce and WriteTxnMarkers
requests: aborted records never seen, committed ones once and in order, an open
transaction holding every later record back; read_uncommitted consumers see everything.
Then kill -9 with a transaction open: after the restart the last stable offset still
holds at its first offset.

The transactions are written without a transaction coordinator, so the brokers here run
with ``transaction.partition.verification.enable=false`` (Kafka's switch for KIP-890's
verification, which would refuse batches the coordinator never added to a transaction)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired
from tests.interop._broker import java_client, start_broker
from tests.server._raw_client import TXN_ID, TxnClient, txn_batch

pytestmark = pytest.mark.interop

CONSUME_TIMEOUT = 30.0
NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}


def _write_transactions(port: int, topic: str) -> tuple[list[bytes], list[bytes], int]:
    """Interleaved transactions of two producers plus plain records; returns (the values a
    read_committed consumer must see, in order; every value; the open transaction's first
    offset)."""
    c = TxnClient(port)
    try:
        p1, e1 = c.init_producer_id()
        p2, e2 = c.init_producer_id()
        p3, e3 = c.init_producer_id()
        seq = {p1: 0, p2: 0, p3: 0}
        committed: list[bytes] = []
        everything: list[bytes] = []

        def send(pid: int, epoch: int, tag: str, count: int, keep: bool) -> int:
            values = [f"{tag}-{seq[pid] + i}".encode() for i in range(count)]
            response = c.produce(topic, txn_batch(pid, epoch, seq[pid], count, tag=tag),
                                 transactional_id=TXN_ID)
            assert response.error_code == 0
            seq[pid] += count
            everything.extend(values)
            if keep:
                committed.extend(values)
            return int(response.base_offset)

        def plain(value: str) -> None:
            assert c.produce(topic, txn_batch(-1, -1, -1, 1, tag=value)).error_code == 0
            everything.append(f"{value}--1".encode())
            committed.append(f"{value}--1".encode())

        plain("plain-a")
        for round_ in range(3):
            send(p1, e1, f"c{round_}", 3, keep=True)
            send(p2, e2, f"a{round_}", 2, keep=False)
            plain(f"plain-{round_}")
            send(p1, e1, f"c{round_}b", 2, keep=True)
            send(p2, e2, f"a{round_}b", 4, keep=False)
            assert c.markers(topic, p2, e2, commit=False) == 0
            assert c.markers(topic, p1, e1, commit=True) == 0
        open_first = send(p3, e3, "open", 2, keep=False)
        plain("after-open")  # held back from read_committed by the open transaction
        committed.pop()
        return committed, everything, open_first
    finally:
        c.close()


@pytest.fixture(scope="module")
def rc_broker() -> Iterator[RunningBroker]:
    with running_broker(overrides=NO_VERIFICATION) as broker:
        yield broker


@pytest.fixture(scope="module")
def transactions(rc_broker: RunningBroker) -> tuple[str, list[bytes], list[bytes], int]:
    topic = f"rc-{uuid.uuid4().hex[:8]}"
    rc_broker.call(rc_broker.broker.metadata.create_topic, topic, 1, 1)
    return (topic, *_write_transactions(rc_broker.port, topic))


def _confluent(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    started = time.monotonic()
    try:
        while not expired(started, CONSUME_TIMEOUT) and len(got) < expected:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            got.append(msg.value())
        # anything more would be an aborted or held-back record: poll a little longer
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_confluent_kafka(rc_broker: RunningBroker, isolation: str,
                         transactions: tuple[str, list[bytes], list[bytes], int]) -> None:
    topic, committed, everything, _ = transactions
    expected = committed if isolation == "read_committed" else everything
    assert _confluent(rc_broker.bootstrap, topic, isolation, len(expected)) == expected


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_kafka_python(rc_broker: RunningBroker, isolation: str,
                      transactions: tuple[str, list[bytes], list[bytes], int]) -> None:
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    topic, committed, everything, open_first = transactions
    expected = committed if isolation == "read_committed" else everything
    consumer = KafkaConsumer(bootstrap_servers=rc_broker.bootstrap,
                             isolation_level=isolation, enable_auto_commit=False,
                             fetch_max_wait_ms=50)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: list[bytes] = []
    started = time.monotonic()
    try:
        while not expired(started, CONSUME_TIMEOUT) and len(got) < len(expected):
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
        end = consumer.end_offsets([tp])[tp]
        if isolation == "read_committed":
            assert end == open_first  # the last stable offset
    finally:
        consumer.close()
    assert got == expected


def test_aiokafka(rc_broker: RunningBroker,
                  transactions: tuple[str, list[bytes], list[bytes], int]) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]

    topic, committed, _, _ = transactions

    async def main() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=rc_broker.bootstrap,
                                    isolation_level="read_committed",
                                    enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        got: list[bytes] = []
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            started = time.monotonic()
            while not expired(started, CONSUME_TIMEOUT) and len(got) < len(committed):
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    got.extend(r.value for r in records)
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(main()) == committed


def test_java_client(rc_broker: RunningBroker,
                     transactions: tuple[str, list[bytes], list[bytes], int]) -> None:
    topic, committed, _, _ = transactions
    java = java_client()
    result = java(rc_broker.bootstrap, "consume-count", topic, len(committed),
                  props={"isolation.level": "read_committed"})
    assert result.ok, result.describe()


@pytest.mark.slow
def test_kill9_with_an_open_transaction_keeps_the_last_stable_offset(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = start_broker(tmp_path, data_dir=data_dir, overrides=NO_VERIFICATION)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(timeout=20)
        c = TxnClient(broker.port)
        started = time.monotonic()
        while c.produce("t", txn_batch(-1, -1, -1)).error_code != 0:
            assert not expired(started, 10), \
                f"the topic did not become writable in {describe(started, 10)}"
            time.sleep(0.05)
        pid, epoch = c.init_producer_id()
        assert c.produce("t", txn_batch(pid, epoch, 0, 3), transactional_id=TXN_ID).base_offset \
            == 1
        c.produce("t", txn_batch(-1, -1, -1, tag="late"))  # 4
        assert c.fetch("t").last_stable_offset == 1
        c.close()
        port = broker.port
        broker.kill9()
        broker = start_broker(tmp_path, data_dir=data_dir, port=port,
                              overrides=NO_VERIFICATION)
        c = TxnClient(broker.port)
        started = time.monotonic()
        while (answer := c.fetch("t")).error_code != 0:
            assert not expired(started, 10), f"{answer} after {describe(started, 10)}"
            time.sleep(0.05)
        assert answer.last_stable_offset == 1 and answer.high_watermark == 5
        assert c.markers("t", pid, epoch, commit=False) == 0
        c.close()
        got = _confluent(broker.bootstrap, "t", "read_committed", 2)
        assert got == [b"v--1", b"late--1"]
    finally:
        broker.stop()
