"""kill -9 under acks=1 produce load, then restart: every acknowledged record is consumed
exactly once, in order, at the offset it was acknowledged with."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from tests._deadlines import describe, expired
from tests.interop._broker import start_broker

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CYCLES = 3


def _consume_all(bootstrap: str, topic: str, expected_end: int) -> list[tuple[int, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    started = time.monotonic()
    while not expired(started, 30):
        msg = consumer.poll(0.2)
        if msg is None:
            if got and got[-1][0] + 1 >= expected_end:
                break
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.value()))
    consumer.close()
    return got


def test_kill9_under_acks1_load_loses_no_acknowledged_record(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    rng = random.Random(7)
    topic = "crash"
    acked: dict[int, bytes] = {}
    data_dir = tmp_path / "data"
    broker = start_broker(tmp_path, data_dir=data_dir, overrides={"log.segment.bytes": 200_000})
    port = broker.port
    sequence = 0
    lock = threading.Lock()
    try:
        for cycle in range(CYCLES):
            producer = Producer({
                "bootstrap.servers": broker.bootstrap, "acks": 1, "retries": 0,
                "enable.idempotence": False, "linger.ms": 2, "batch.num.messages": 50,
                "message.timeout.ms": 5000, "socket.timeout.ms": 2000,
            })

            def report(err: object, msg: object) -> None:
                if err is None:
                    with lock:
                        acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

            def acked_in_cycle(prefix: bytes = f"c{cycle}-".encode()) -> bool:
                with lock:
                    return any(v.startswith(prefix) for v in acked.values())

            # Produce until this cycle has an acknowledgement (a busy machine may take a
            # while to connect), then for a random time more, and kill the broker.
            kill_after = rng.uniform(0.3, 1.2)
            producing = time.monotonic()
            started: float | None = None
            while started is None or time.monotonic() - started < kill_after:
                sequence += 1
                try:
                    producer.produce(topic, value=f"c{cycle}-{sequence:08d}".encode(),
                                     partition=0, on_delivery=report)
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.05)
                producer.poll(0)
                if started is None and acked_in_cycle():
                    started = time.monotonic()
                assert started is not None or not expired(producing, 30), \
                    f"no acknowledgement in {describe(producing, 30)}"
            broker.kill9()
            producer.flush(10)  # outstanding messages fail: the broker is gone
            broker = start_broker(tmp_path, data_dir=data_dir, port=port,
                                  overrides={"log.segment.bytes": 200_000})
            with lock:
                snapshot = dict(acked)
            assert snapshot, "nothing was acknowledged before the kill"
            got = _consume_all(broker.bootstrap, topic, max(snapshot) + 1)
            offsets = [o for o, _ in got]
            assert offsets == sorted(set(offsets)), "offsets out of order or duplicated"
            by_offset = dict(got)
            for offset, value in snapshot.items():
                assert by_offset.get(offset) == value, f"acknowledged offset {offset} lost"
            values = [v for _, v in got]
            assert len(values) == len(set(values)), "a record appears twice"
    finally:
        broker.stop()
