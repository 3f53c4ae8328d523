"""What the transaction interop tests share: a confluent-kafka transactional producer
with its producer id, and reading a topic to its end with a read_committed or
read_uncommitted consumer."""

from __future__ import annotations

import time
import uuid
from typing import Any


def txn_producer(bootstrap: str, txn_id: str, deadline_s: float = 60.0,
                 **extra: object) -> Any:
    """A transactional producer of ``txn_id`` past ``init_transactions``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5, **extra})
    producer.init_transactions(deadline_s)
    return producer


def read_to_end(bootstrap: str, topic: str, isolation: str, partitions: int = 3,
                deadline_s: float = 60.0) -> dict[int, list[bytes]]:
    """Every record a consumer of ``isolation`` reads, per partition, up to the end (the
    last stable offset read_committed, the high watermark read_uncommitted)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
        "isolation.level": isolation, "enable.partition.eof": True,
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + deadline_s
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {out}, at end {at_end}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return out
