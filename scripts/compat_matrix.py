"""Print which API versions each real client uses against Odradek (docs/compatibility.md).

Each client creates a topic, produces, consumes with assign + seek, lists offsets and (where
its admin API can) describes configs and deletes the topic, while the broker records every
(API, version) it serves. Needs what `make test` installs (kcat, the Java client jars).

    .venv/bin/python scripts/compat_matrix.py
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.interop._broker import _java_runner

from odradek.protocol.api_keys import ApiKey
from odradek.testing import running_broker

Seen = dict[str, set[tuple[str, int]]]


class _Recorder:
    """Stands in for the broker's registry and notes each (API, version) per client."""

    def __init__(self, registry: Any, seen: Seen) -> None:
        self._registry = registry
        self._seen = seen
        self.client = "?"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)

    def __contains__(self, key: object) -> bool:
        return key in self._registry

    def lookup(self, api_key: int, version: int) -> Any:
        self._seen[self.client].add((ApiKey(api_key).name, version))
        return self._registry.lookup(api_key, version)


def confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("ck", 1, 1)])["ck"].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("ck", b"v", key=b"k")
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("ck", 0, 0)])
    consumer.poll(3)
    consumer.get_watermark_offsets(TopicPartition("ck", 0))
    consumer.offsets_for_times([TopicPartition("ck", 0, 0)])
    consumer.close()
    resource = ConfigResource(ConfigResource.Type.TOPIC, "ck")
    admin.describe_configs([resource])[resource].result(10)
    admin.delete_topics(["ck"])["ck"].result(10)


def kcat(bootstrap: str) -> None:
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "kc"], input=b"x\n", check=True)
    subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "kc", "-e", "-q"], check=True,
                   capture_output=True)
    subprocess.run(["kcat", "-b", bootstrap, "-Q", "-t", "kc:0:0"], check=True,
                   capture_output=True)


def kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send("kp", b"v", key=b"k")
    producer.flush()
    producer.close()
    tp = TopicPartition("kp", 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=2000)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    list(consumer)
    consumer.end_offsets([tp])
    consumer.close()
    admin.delete_topics(["kp"])
    admin.close()


def aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        await producer.send_and_wait("ak", b"v", key=b"k")
        await producer.stop()
        tp = TopicPartition("ak", 0)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, 0)
        await consumer.getmany(timeout_ms=1000)
        await consumer.end_offsets([tp])
        await consumer.stop()

    asyncio.run(run())


def java(bootstrap: str) -> None:
    result = _java_runner()(bootstrap, "roundtrip", "jv", 5)
    if not result.ok:
        raise RuntimeError(result.describe())


CLIENTS = [
    ("confluent-kafka (librdkafka 2.x)", confluent),
    ("kcat (librdkafka 2.0.2)", kcat),
    ("kafka-python", kafka_python),
    ("aiokafka", aiokafka),
    ("Java kafka-clients 3.9.1", java),
]


def main() -> None:
    seen: Seen = collections.defaultdict(set)
    with running_broker() as broker:
        recorder = _Recorder(broker.broker.registry, seen)
        for server in broker.broker.servers:
            server.registry = recorder  # type: ignore[assignment]
        for name, run in CLIENTS:
            recorder.client = name
            run(broker.bootstrap)
    for name, _ in CLIENTS:
        versions: dict[str, list[int]] = collections.defaultdict(list)
        for api, version in sorted(seen[name]):
            versions[api].append(version)
        print(f"{name}: " + ", ".join(f"{api} {v}" for api, v in sorted(versions.items())))


if __name__ == "__main__":
    main()
