"""Compaction over real sockets: confluent-kafka produces to a compacted topic and reads the
compacted result; keyless records are refused; kill -9 during cleaning, 20+ cycles."""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.cli.dump_log import main as dump_log_main
from odradek.records.batch import iter_records
from odradek.storage.config import LogConfig
from odradek.storage.log import PartitionLog
from tests.interop._broker import start_broker

pytestmark = [pytest.mark.interop]

TOPIC_CONFIG = {
    "cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0", "file.delete.delay.ms": "0",
}
BROKER = {"log.cleaner.backoff.ms": 20, "log.cleaner.dedupe.buffer.size": 24 * 4096}


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])
    futures[topic].result(15)


def consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-check",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.time() + 30
    while time.time() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            if consumer.position([TopicPartition(topic, 0)])[0].offset >= high:
                break
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return got


def status(data: Path) -> dict[str, Any]:
    path = data / "cleaner-status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_confluent_kafka_reads_compacted_topic(tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, Producer

    with start_broker(tmp_path, overrides=BROKER) as broker:
        create_topic(broker.bootstrap, "compacted")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "compression.type": "lz4", "batch.num.messages": 20})
        latest: dict[bytes, bytes | None] = {}
        for i in range(3000):
            key = f"user-{i % 60}".encode()
            value = None if i % 97 == 0 else f"address-{i}".encode()
            producer.produce("compacted", key=key, value=value)
            latest[key] = value
            if i % 500 == 0:
                producer.poll(0)
        assert producer.flush(15) == 0
        errors: list[Any] = []
        producer.produce("compacted", value=b"no key",
                         on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(15)
        assert errors and errors[0].code() == KafkaError.INVALID_RECORD, errors
        deadline = time.time() + 30
        while time.time() < deadline and "compacted-0" not in status(broker.data_dir).get(
            "last_cleaned", {}
        ):
            time.sleep(0.1)
        # Cleaning goes on while we read (and must not disturb readers); on a loaded
        # machine it can take a few passes to get under half the records.
        deadline = time.time() + 60
        while True:
            got = consume_all(broker.bootstrap, "compacted")
            if len(got) < 1500 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert len(got) < 1500, "the topic was compacted"
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets))
        last = {k: v for _, k, v in got}
        assert {k: v for k, v in last.items() if v is not None} == {
            k: v for k, v in latest.items() if v is not None
        }
        assert all(k is not None for _, k, _ in got)
        assert status(broker.data_dir)["healthy"] is True


CYCLES = 22
# Records offered a cycle, at most: the log (2 KiB segments) and each restart's recovery
# stay the same size whatever the machine's speed (unbounded, a fast start let a cycle
# write tens of thousands of records, and the test grew past 600 s on a loaded machine).
RECORDS_PER_CYCLE = 1000


def check_partition(dir: Path, acked: dict[int, tuple[bytes, bytes]]) -> int:
    """Open a copy of the partition as recovery would and check every acknowledged latest
    value is there, offsets increase, and each record is one we wrote at that offset."""
    copy = dir.parent.parent / "check" / dir.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    copy.parent.mkdir(parents=True)
    shutil.copytree(dir, copy)
    cfg = LogConfig.build({}, TOPIC_CONFIG)
    plog = PartitionLog(copy, cfg, had_clean_shutdown=False)
    seen: dict[bytes, int] = {}
    previous = -1
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).read()
        pos = 0
        from odradek.records.batch import validate_batch

        while pos < len(data):
            header = validate_batch(data, pos, strict_offsets=False)
            for record in iter_records(data[pos : pos + header.size]):
                assert record.offset > previous
                previous = record.offset
                assert record.key is not None and record.value is not None
                assert record.value.startswith(record.key + b":")
                if record.offset in acked:
                    assert acked[record.offset] == (record.key, record.value)
                seen[record.key] = record.offset
            offset = header.next_offset
            pos += header.size
    latest_acked: dict[bytes, int] = {}
    for off, (key, _) in sorted(acked.items()):
        latest_acked[key] = off
    for key, off in latest_acked.items():
        assert seen.get(key, -1) >= off, f"latest acknowledged value of {key!r} lost"
    for segment in plog.segments:
        segment.sanity_check()
    plog.close()
    return len(plog.segments)


@pytest.mark.slow
def test_kill9_during_cleaning(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    rng = random.Random(5)
    data = tmp_path / "data"
    acked: dict[int, tuple[bytes, bytes]] = {}
    passes_seen = 0
    for cycle in range(CYCLES):
        broker = start_broker(tmp_path, data_dir=data, overrides=BROKER)
        try:
            if cycle == 0:
                create_topic(broker.bootstrap, "crashy")
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2,
                                 "acks": "all", "message.timeout.ms": 5000})

            def on_delivery(err: Any, msg: Any) -> None:
                if err is None:
                    acked[msg.offset()] = (msg.key(), msg.value())

            kill_at = time.time() + rng.uniform(0.3, 1.2)
            i = 0
            while time.time() < kill_at:
                if i >= RECORDS_PER_CYCLE:  # the cleaner goes on until the kill
                    producer.poll(0.01)
                    continue
                key = f"k{rng.randrange(40)}".encode()
                producer.produce("crashy", key=key, value=key + f":{cycle}:{i}".encode(),
                                 on_delivery=on_delivery)
                i += 1
                if i % 50 == 0:
                    producer.poll(0.005)
            producer.poll(0)
            passes_seen = max(passes_seen, status(data).get("passes", 0))
        finally:
            broker.kill9()
        producer.poll(0)
        check_partition(data / "crashy-0", acked)
    assert passes_seen > 0, "the cleaner ran during the cycles"
    # A final clean start and stop, then Kafka's index sanity check on every index.
    broker = start_broker(tmp_path, data_dir=data, overrides=BROKER)
    broker.stop()
    indexes = sorted(str(p) for p in (data / "crashy-0").glob("*.index"))
    indexes += sorted(str(p) for p in (data / "crashy-0").glob("*.timeindex"))
    assert dump_log_main(["--index-sanity-check", "--files", *indexes]) == 0
    check_partition(data / "crashy-0", acked)
