"""SIGTERM is a graceful shutdown: in-flight work finishes, logs are flushed, checkpoints
and the clean-shutdown marker are written, and the next start skips recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage import files

from ._broker import start_broker

pytestmark = pytest.mark.interop


def test_sigterm_writes_clean_shutdown_marker_and_keeps_data(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = start_broker(tmp_path)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for i in range(500):
        producer.produce("graceful", value=f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    assert broker.stop(timeout=30) == 0
    data = broker.data_dir
    assert (data / files.CLEAN_SHUTDOWN_FILE).exists()
    recovery = (data / files.RECOVERY_POINT_CHECKPOINT).read_text().splitlines()
    assert "graceful 0 500" in recovery
    restarted = start_broker(tmp_path, data_dir=data, port=broker.port)
    try:
        assert "clean shutdown" in restarted.stderr() or "(clean" in restarted.stderr()
        consumer = Consumer({"bootstrap.servers": restarted.bootstrap, "group.id": "g",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("graceful", 0, 0)])
        got = []
        while len(got) < 500:
            msg = consumer.poll(5)
            assert msg is not None, f"only {len(got)} records after restart"
            assert msg.error() is None
            got.append(msg.value())
        assert got == [f"v{i}".encode() for i in range(500)]
        consumer.close()
    finally:
        restarted.stop()
