"""What the transaction interop tests share: a confluent-kafka transactional producer
with its producer id, reading a topic to its end with a read_committed or
read_uncommitted consumer, and a librdkafka call waited for until a deadline at most."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from tests._deadlines import describe, expired

T = TypeVar("T")


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
    started = time.monotonic()
    try:
        while len(at_end) < partitions:
            assert not expired(started, deadline_s), \
                f"read {out}, at end {at_end} after {describe(started, deadline_s)}"
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


def bounded(call: Callable[[], T], deadline: float, what: str) -> T:
    """``call()`` run in a thread and waited for until ``deadline`` (``time.monotonic()``)
    at most; past it the test fails instead of hanging.

    For librdkafka calls that can block past their own timeout:
    ``send_offsets_to_transaction`` waits for the group coordinator without a bound
    (librdkafka #5456: a coordinator request's timeout is never checked) and, once the
    coordinator it cached has left the metadata, for a connection of another broker to
    come up or go down before it looks the coordinator up again (#5511). A blocked call
    cannot be cancelled: its thread, a daemon, is left behind."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise AssertionError(f"{what} was still blocked at the deadline")
    if failure:
        raise failure[0]
    return outcome[0]
