"""confluent-kafka, kafka-python and aiokafka against a real broker over loopback.

Each client: create a topic with its admin API, produce keyed records with headers in each
compression codec, consume them back with assign + seek, list offsets (earliest, latest,
by timestamp), describe the topic's configs, delete the topic.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.testing import RunningBroker

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 20


def _expected(base_ts: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    out = []
    for c, codec in enumerate(CODECS):
        for i in range(PER_CODEC):
            n = c * PER_CODEC + i
            out.append((f"key-{n}".encode(), f"{codec}-value-{n}".encode(),
                        [("codec", codec.encode()), ("n", str(n).encode())], base_ts + n))
    return out


def test_confluent_kafka(shared_broker: RunningBroker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic = f"ck-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": shared_broker.bootstrap}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "86400000"})])[
        topic
    ].result(10)
    base_ts = int(time.time() * 1000) - 10_000
    expected = _expected(base_ts)
    for c, codec in enumerate(CODECS):
        producer = Producer({**conf, "compression.type": codec, "linger.ms": 5})
        for key, value, headers, ts in expected[c * PER_CODEC : (c + 1) * PER_CODEC]:
            producer.produce(topic, value=value, key=key, headers=headers, partition=0,
                             timestamp=ts)
        assert producer.flush(10) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 20
    while len(got) < len(expected) and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.key(), msg.value(), list(msg.headers() or []), msg.timestamp()[1],
                    msg.offset()))
    assert [(k, v, h, ts) for k, v, h, ts, _ in got] == [
        (k, v, h, ts) for k, v, h, ts in expected
    ]
    assert [o for *_, o in got] == list(range(len(expected)))
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
    assert (low, high) == (0, len(expected))
    (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, base_ts + 42)], timeout=5)
    assert found.offset == 42
    consumer.close()
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "86400000"
    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=5).topics


def test_kafka_python(shared_broker: RunningBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    topic = f"kp-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"segment.bytes": "1048576"})])
    base_ts = int(time.time() * 1000) - 10_000
    expected = _expected(base_ts)
    for c, codec in enumerate(CODECS):
        producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                 compression_type=None if codec == "none" else codec)
        for key, value, headers, ts in expected[c * PER_CODEC : (c + 1) * PER_CODEC]:
            producer.send(topic, value=value, key=key, headers=headers, partition=0,
                          timestamp_ms=ts)
        producer.flush(10)
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = []
    for msg in consumer:
        got.append((msg.key, msg.value, [(k, v) for k, v in msg.headers], msg.timestamp,
                    msg.offset))
        if len(got) == len(expected):
            break
    assert [(k, v, h, ts) for k, v, h, ts, _ in got] == [
        (k, v, h, ts) for k, v, h, ts in expected
    ]
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == len(expected)
    found = consumer.offsets_for_times({tp: base_ts + 42})[tp]
    assert found is not None and found.offset == 42
    consumer.close()
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    # kafka-python 3.x answers {"topic": {name: {config: {"value": ...}}}}
    assert result["topic"][topic]["segment.bytes"]["value"] == "1048576"
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()
    admin.close()


def test_aiokafka(shared_broker: RunningBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = f"ak-{uuid.uuid4().hex[:8]}"
    base_ts = int(time.time() * 1000) - 10_000
    expected = _expected(base_ts)

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1,
                                            topic_configs={"cleanup.policy": "delete"})])
        for c, codec in enumerate(CODECS):
            producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                        compression_type=None if codec == "none" else codec)
            await producer.start()
            for key, value, headers, ts in expected[c * PER_CODEC : (c + 1) * PER_CODEC]:
                await producer.send(topic, value=value, key=key, headers=headers, partition=0,
                                    timestamp_ms=ts)
            await producer.flush()
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        async with asyncio.timeout(20):
            while len(got) < len(expected):
                batch = await consumer.getmany(timeout_ms=500)
                for msgs in batch.values():
                    got.extend((m.key, m.value, list(m.headers), m.timestamp, m.offset)
                               for m in msgs)
        assert [(k, v, h, ts) for k, v, h, ts, _ in got] == [
            (k, v, h, ts) for k, v, h, ts in expected
        ]
        assert (await consumer.beginning_offsets([tp]))[tp] == 0
        assert (await consumer.end_offsets([tp]))[tp] == len(expected)
        found = (await consumer.offsets_for_times({tp: base_ts + 42}))[tp]
        assert found is not None and found.offset == 42
        await consumer.stop()
        result = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = {e[0]: e[1] for e in result[0].resources[0][4]}
        assert entries["cleanup.policy"] == "delete"
        await admin.delete_topics([topic])
        assert topic not in await admin.list_topics()
        await admin.close()

    asyncio.run(main())
