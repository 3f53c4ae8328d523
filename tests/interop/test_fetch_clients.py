"""Real clients reading through the zero-copy Fetch path.

- confluent-kafka (librdkafka) reads a partition of 1M small records with its default
  fetch limits; every Fetch the broker answers is checked against the request's byte
  limits (``max_bytes`` and ``partition_max_bytes``), which only the KIP-74 first batch
  may exceed.
- kafka-python and aiokafka read the same kind of data (neither uses fetch sessions:
  they send session id 0 / epoch -1; librdkafka 2.x does the same). Incremental sessions
  are exercised with raw requests in tests/server/test_fetch.py and by the Java client in
  tests/interop/test_java_client.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

import odradek.server.handlers.fetch as fetch_handler
from odradek.storage.log import FetchDataInfo
from odradek.testing import RunningBroker, running_broker

pytestmark = pytest.mark.interop

N = 1_000_000


class _Limits:
    """Records every Fetch read: (max_bytes, [(partition_max_bytes, size)])."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, list[tuple[int, int]]]] = []
        self.lock = threading.Lock()

    def violations(self) -> list[tuple[int, list[tuple[int, int]]]]:
        bad = []
        for max_bytes, sizes in self.reads:
            nonempty = [(limit, size) for limit, size in sizes if size]
            total = sum(size for _, size in nonempty)
            first_only = len(nonempty) == 1  # KIP-74: one oversized first batch is allowed
            if (total > max_bytes or any(s > lim for lim, s in nonempty)) and not first_only:
                bad.append((max_bytes, sizes))
        return bad


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> _Limits:
    recorded = _Limits()
    original = fetch_handler._read_all

    def spy(replica_manager: Any, parts: Any, max_bytes: int, by_id: bool,
            replica_id: int, refused: Any = None, read_committed: bool = False) -> Any:
        infos, total, errors = original(replica_manager, parts, max_bytes, by_id, replica_id,
                                        refused, read_committed)
        sizes = [(cp.max_bytes, i.size if isinstance(i, FetchDataInfo) else 0)
                 for cp, i in zip(parts, infos, strict=True)]
        with recorded.lock:
            recorded.reads.append((max_bytes, sizes))
        return infos, total, errors

    monkeypatch.setattr(fetch_handler, "_read_all", spy)
    return recorded


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        yield b


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
        "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none",
    })
    value = b"v" * 10
    produce = producer.produce
    for i in range(n):
        produce(topic, value, str(i).encode(), partition=0)
        if i % 200_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_confluent_reads_1m_records_within_limits(broker: RunningBroker, limits: _Limits) -> None:
    topic = f"fetch-1m-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1, {})
    t0 = time.monotonic()
    _produce(broker.bootstrap, topic, N)
    produced_s = time.monotonic() - t0
    limits.reads.clear()

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen = 0
    last = -1
    in_order = True
    t0 = time.monotonic()
    deadline = t0 + 60
    while seen < N and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=100_000, timeout=1.0):
            if msg.error():
                raise AssertionError(msg.error())
            off = msg.offset() or 0
            in_order &= off == last + 1
            last = off
            seen += 1
    consumed_s = time.monotonic() - t0
    consumer.close()
    assert seen == N and in_order and last == N - 1
    assert limits.reads, "no fetch observed"
    assert limits.violations() == []
    print(f"\nproduce {N / produced_s:,.0f} rec/s; consume {N / consumed_s:,.0f} rec/s "
          f"({len(limits.reads)} fetch reads)")


def test_kafka_python_and_aiokafka_read(broker: RunningBroker) -> None:
    import aiokafka  # type: ignore[import-untyped]
    import kafka  # type: ignore[import-untyped]

    topic = f"fetch-py-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, topic, 3, 1, {})
    n = 3000
    _produce(broker.bootstrap, topic, n)  # all on partition 0
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(n):
        producer.produce(topic, b"p%d" % i, partition=1 + i % 2)
    assert producer.flush(30) == 0

    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                   auto_offset_reset="earliest", consumer_timeout_ms=5000,
                                   fetch_max_bytes=64 * 1024, max_partition_fetch_bytes=16 * 1024)
    got = sum(1 for _ in consumer)
    consumer.close()
    assert got == 2 * n

    async def aio() -> int:
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                      auto_offset_reset="earliest",
                                      max_partition_fetch_bytes=16 * 1024)
        await c.start()
        count = 0
        try:
            while count < 2 * n:
                batches = await c.getmany(timeout_ms=5000)
                if not batches:
                    break
                count += sum(len(v) for v in batches.values())
        finally:
            await c.stop()
        return count

    assert asyncio.run(aio()) == 2 * n


def test_java_consumer_uses_incremental_sessions(broker: RunningBroker,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The Java consumer (kafka-clients 3.9) opens a fetch session and then sends
    incremental fetches; it must read everything through them."""
    from odradek.server.fetch_session import ContextKind

    from ._broker import java_client

    java = java_client()  # skips without a JDK / the jars
    cache = broker.broker.services.fetch_sessions
    kinds: list[ContextKind] = []
    original = cache.new_context

    def spy(*args: Any, **kwargs: Any) -> Any:
        ctx = original(*args, **kwargs)
        kinds.append(ctx.kind)
        return ctx

    monkeypatch.setattr(cache, "new_context", spy)
    topic = f"fetch-java-{uuid.uuid4().hex[:8]}"
    broker.call(broker.broker.metadata.create_topic, topic, 3, 1, {})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3000):
        producer.produce(topic, b"j%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    res = java(broker.bootstrap, "consume-count", topic, 3000)
    assert res.ok, res.describe()
    assert res.summary["count"] == 3000
    assert ContextKind.FULL in kinds and ContextKind.INCREMENTAL in kinds, kinds
    assert ContextKind.ERROR not in kinds, kinds
