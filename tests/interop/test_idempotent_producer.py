"""Idempotent producers of real clients (librdkafka via confluent-kafka, aiokafka,
kafka-python) against a broker over loopback: InitProducerId, sequenced batches, and a log
with every record exactly once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from odradek.records.batch import iter_batches
from odradek.testing import RunningBroker

pytestmark = pytest.mark.interop


def _new_topic(broker: RunningBroker, prefix: str, partitions: int = 1) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, topic, partitions, 1)
    return topic


def _check_log(broker: RunningBroker, topic: str, partition: int, expected: int) -> int:
    """Every batch sequenced by one producer, sequences contiguous: no duplicate, no gap.
    Returns the producer id."""
    plog = broker.broker.get_log(topic, partition)
    assert plog is not None
    data = plog.read(0, 1 << 30).read()
    headers = list(iter_batches(data))
    assert {h.producer_id for h in headers} == {headers[0].producer_id}
    assert headers[0].producer_id >= 0
    next_seq = 0
    for h in headers:
        assert h.base_sequence == next_seq, (h.base_sequence, next_seq)
        next_seq = h.last_sequence + 1
    assert sum(h.record_count for h in headers) == expected == plog.log_end_offset
    return headers[0].producer_id


def test_confluent_kafka_idempotent_10k(shared_broker: RunningBroker) -> None:
    from confluent_kafka import Producer

    topic = _new_topic(shared_broker, "idem-ck")
    errors: list[object] = []
    producer = Producer({
        "bootstrap.servers": shared_broker.bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 500,
    })

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(10_000):
        producer.produce(topic, value=f"v{i}".encode(), key=str(i).encode(),
                         on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    _check_log(shared_broker, topic, 0, 10_000)


def test_aiokafka_idempotent(shared_broker: RunningBroker) -> None:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    topic = _new_topic(shared_broker, "idem-ak")

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                    enable_idempotence=True, linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(topic, f"v{i}".encode(), partition=0)
                       for i in range(2000)]
            offsets = [(await f).offset for f in futures]
        finally:
            await producer.stop()
        assert offsets == list(range(2000))

    asyncio.run(main())
    _check_log(shared_broker, topic, 0, 2000)


def test_kafka_python_idempotent(shared_broker: RunningBroker) -> None:
    import kafka

    producer = kafka.KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                   enable_idempotence=True, acks="all")
    topic = _new_topic(shared_broker, "idem-kp")
    futures = [producer.send(topic, f"v{i}".encode(), partition=0) for i in range(1000)]
    producer.flush(30)
    assert [f.get(10).offset for f in futures] == list(range(1000))
    producer.close()
    _check_log(shared_broker, topic, 0, 1000)


def test_duplicates_detected_after_kill9(tmp_path: Path) -> None:
    """kill -9 leaves no snapshot: the restarted broker rebuilds producer state from the
    batch headers in the log and still recognises retries."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from odradek.protocol.errors import ErrorCode
    from tests.interop._broker import start_broker
    from tests.server._raw_client import Client, batch

    data_dir = tmp_path / "data"
    broker = start_broker(tmp_path, data_dir=data_dir)
    port = broker.port
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)
        client = Client(port)
        pid, epoch = client.init_producer_id()
        for seq in range(5):
            assert client.produce("t", batch(pid, epoch, seq)).base_offset == seq
        client.close()
        broker.kill9()
        assert not list(data_dir.glob("t-0/*.snapshot"))
        broker = start_broker(tmp_path, data_dir=data_dir, port=port)
        client = Client(port)
        for seq in (4, 1):
            response = client.produce("t", batch(pid, epoch, seq))
            assert (response.error_code, response.base_offset) == (ErrorCode.none, seq)
        assert client.produce("t", batch(pid, epoch, 5)).base_offset == 5
        response = client.produce("t", batch(pid, epoch, 9))
        assert response.error_code == ErrorCode.out_of_order_sequence_number
        assert client.init_producer_id()[0] > pid  # ids are not reused after the crash
        client.close()
    finally:
        broker.stop()
