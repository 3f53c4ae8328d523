"""Transactional producers of real clients (librdkafka via confluent-kafka, aiokafka)
against a broker over loopback: commits and aborts over several partitions, read by
read_committed and read_uncommitted consumers; a consume-transform-produce loop with its
offsets in the transaction; a zombie producer fenced by a new incarnation; a transaction
past its timeout aborted by the coordinator. The Java client's are in
``test_java_client.py``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest

from odradek.coordinator.transaction_state import TransactionState
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired

from ._transactions import read_to_end, txn_producer

pytestmark = pytest.mark.interop

DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }) as broker:
        yield broker


def new_topic(rb: RunningBroker, prefix: str, partitions: int = 3) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, topic, partitions, 1)
    return topic


def test_confluent_kafka_commits_and_aborts_over_several_partitions(
        rb: RunningBroker) -> None:
    topic = new_topic(rb, "txn-ck")
    producer = txn_producer(rb.bootstrap, f"ck-{uuid.uuid4().hex[:6]}")
    expected: dict[int, list[bytes]] = {p: [] for p in range(3)}
    everything: dict[int, list[bytes]] = {p: [] for p in range(3)}
    for round_ in range(4):
        commit = round_ % 2 == 0
        producer.begin_transaction()
        for i in range(30):
            value = f"{'commit' if commit else 'abort'}-{round_}-{i}".encode()
            producer.produce(topic, value=value, partition=i % 3)
            everything[i % 3].append(value)
            if commit:
                expected[i % 3].append(value)
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.flush(DEADLINE_S)
            producer.abort_transaction(DEADLINE_S)
    assert read_to_end(rb.bootstrap, topic, "read_committed") == expected
    assert read_to_end(rb.bootstrap, topic, "read_uncommitted") == everything


def test_confluent_kafka_consume_transform_produce(rb: RunningBroker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    source, sink = new_topic(rb, "ctp-in", 2), new_topic(rb, "ctp-out", 2)
    plain = Producer({"bootstrap.servers": rb.bootstrap})
    for i in range(40):
        plain.produce(source, value=str(i).encode(), partition=i % 2)
    plain.flush(DEADLINE_S)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": rb.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = txn_producer(rb.bootstrap, f"ctp-{uuid.uuid4().hex[:6]}")
    done = 0
    aborted_once = False
    started = time.monotonic()
    try:
        while done < 40:
            assert not expired(started, DEADLINE_S), \
                f"transformed {done} of 40 in {describe(started, DEADLINE_S)}"
            batch = consumer.consume(10, 0.5)
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, value=b"f(" + msg.value() + b")",
                                 partition=msg.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), DEADLINE_S)
            if not aborted_once:
                # the first batch is aborted: rewind and do it again
                producer.abort_transaction(DEADLINE_S)
                aborted_once = True
                for msg in batch:
                    consumer.seek(TopicPartition(source, msg.partition(), msg.offset()))
                    break
                committed = consumer.committed(consumer.assignment(), DEADLINE_S)
                for tp in committed:
                    consumer.seek(TopicPartition(source, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(DEADLINE_S)
            done += len(batch)
        committed = consumer.committed([TopicPartition(source, p) for p in range(2)],
                                       DEADLINE_S)
        assert sorted(tp.offset for tp in committed) == [20, 20]
    finally:
        consumer.close()
    out = read_to_end(rb.bootstrap, sink, "read_committed", 2)
    for p in range(2):
        assert out[p] == [f"f({i})".encode() for i in range(p, 40, 2)]


def test_aiokafka_transactional_producer(rb: RunningBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = new_topic(rb, "txn-aio")

    async def go() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=rb.bootstrap,
                                    transactional_id=f"aio-{uuid.uuid4().hex[:6]}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(9):
                    await producer.send(topic, f"c{i}".encode(), partition=i % 3)
            await producer.begin_transaction()
            for i in range(9):
                await producer.send(topic, f"a{i}".encode(), partition=i % 3)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, b"last", partition=0)
        finally:
            await producer.stop()
        seen = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(bootstrap_servers=rb.bootstrap,
                                        isolation_level=isolation,
                                        enable_auto_commit=False)
            await consumer.start()
            try:
                tps = [TopicPartition(topic, p) for p in range(3)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                values: list[bytes] = []
                wanted = 10 if isolation == "read_committed" else 19
                started = time.monotonic()
                while len(values) < wanted and not expired(started, DEADLINE_S):
                    got = await consumer.getmany(timeout_ms=200)
                    values += [m.value for msgs in got.values() for m in msgs]
                seen[isolation] = values
            finally:
                await consumer.stop()
        return seen["read_committed"], seen["read_uncommitted"]

    committed, uncommitted = asyncio.run(go())
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(9)] + [b"last"])
    assert len(uncommitted) == 19 and all(not v.startswith(b"a") for v in committed)


def test_a_zombie_producer_is_fenced_and_writes_nothing_visible(rb: RunningBroker) -> None:
    from confluent_kafka import KafkaException

    topic = new_topic(rb, "txn-zombie")
    txn_id = f"zombie-{uuid.uuid4().hex[:6]}"
    zombie = txn_producer(rb.bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(DEADLINE_S)
    successor = txn_producer(rb.bootstrap, txn_id)  # fences the zombie, aborts its transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=1)
    successor.commit_transaction(DEADLINE_S)
    with pytest.raises(KafkaException) as failure:
        zombie.commit_transaction(DEADLINE_S)
    assert failure.value.args[0].fatal() or "fenced" in str(failure.value).lower()
    assert read_to_end(rb.bootstrap, topic, "read_committed") == {0: [], 1: [b"successor"], 2: []}


def test_a_transaction_past_its_timeout_is_aborted_and_its_commit_fails(
        rb: RunningBroker) -> None:
    from confluent_kafka import KafkaException

    topic = new_topic(rb, "txn-timeout")
    txn_id = f"slow-{uuid.uuid4().hex[:6]}"
    producer = txn_producer(rb.bootstrap, txn_id, **{"transaction.timeout.ms": 1000})
    producer.begin_transaction()
    producer.produce(topic, value=b"late", partition=0)
    producer.flush(DEADLINE_S)
    coordinator = rb.broker.transaction_coordinator
    started = time.monotonic()
    while rb.call(lambda: coordinator.txns[txn_id].state) is not (
            TransactionState.COMPLETE_ABORT):
        assert not expired(started, DEADLINE_S), \
            f"the coordinator did not abort the transaction in {describe(started, DEADLINE_S)}"
        time.sleep(0.05)
    with pytest.raises(KafkaException):
        producer.commit_transaction(DEADLINE_S)
    assert read_to_end(rb.bootstrap, topic, "read_committed") == {0: [], 1: [], 2: []}
    assert read_to_end(rb.bootstrap, topic, "read_uncommitted")[0] == [b"late"]
