"""A compacted topic written transactionally by a real client (confluent-kafka) while the
broker's cleaner makes many passes (issue 46, item 1, end to end): unique keys, so the
cleaner may drop aborted records and markers but never a committed record; afterwards a
read_committed consumer reads back every committed record and none of the aborted ones.

Short ``segment.ms`` and ``delete.retention.ms`` and a 50 ms cleaner backoff make abort
markers go (horizon set, horizon passed) while the producer keeps writing, which is what
turned the stale ``.txnindex`` entries of the old cleaner into deleted committed data."""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck

from odradek.testing import running_broker
from tests._deadlines import describe, expired

PRODUCE_S = 8.0  # long enough for abort markers to pass their horizon several times
MIN_PASSES = 20
DEADLINE_S = 60.0


def test_committed_records_survive_many_cleaner_passes() -> None:
    with running_broker({"log.cleaner.backoff.ms": "50"}) as rb:
        topic = f"compacted-txn-{uuid.uuid4().hex[:6]}"
        rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {
            "cleanup.policy": "compact", "segment.ms": "150", "delete.retention.ms": "200",
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
        })
        cleaner = rb.broker.log_cleaner
        assert cleaner is not None
        producer = ck.Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 0,
                                "transactional.id": f"compact-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(30)
        committed: set[bytes] = set()
        aborted: set[bytes] = set()
        passes_before = cleaner.passes
        n = 0
        deadline = time.monotonic() + PRODUCE_S
        while time.monotonic() < deadline:
            abort = n % 3 == 1
            values = [b"%d-%d" % (n, i) for i in range(1 + n % 2)]
            producer.begin_transaction()
            for value in values:
                producer.produce(topic, value, key=value, partition=0)
            producer.flush(30)
            if abort:
                producer.abort_transaction(30)
                aborted.update(values)
            else:
                producer.commit_transaction(30)
                committed.update(values)
            n += 1
            time.sleep(0.02)  # a few transactions per segment
        # the last writes rolled no segment: one more transaction rolls the one before
        time.sleep(0.2)
        producer.begin_transaction()
        producer.produce(topic, b"last", key=b"last", partition=0)
        producer.commit_transaction(30)
        committed.add(b"last")
        del producer  # librdkafka's threads stop before the broker does
        started = time.monotonic()
        while cleaner.passes - passes_before < MIN_PASSES:
            assert not expired(started, DEADLINE_S), (
                f"only {cleaner.passes - passes_before} cleaner passes in "
                f"{describe(started, DEADLINE_S)}")
            time.sleep(0.05)

        consumer = ck.Consumer({"bootstrap.servers": rb.bootstrap,
                                "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                "isolation.level": "read_committed",
                                "auto.offset.reset": "earliest",
                                "enable.auto.commit": False})
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        seen: set[bytes] = set()
        started = time.monotonic()
        try:
            while b"last" not in seen:
                assert not expired(started, DEADLINE_S), (
                    f"read {len(seen)} records in {describe(started, DEADLINE_S)}, missing "
                    f"{sorted(committed - seen)[:10]}")
                message = consumer.poll(0.5)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                record = message.value()
                assert record is not None
                seen.add(record)
        finally:
            consumer.close()
        assert not seen & aborted, sorted(seen & aborted)[:10]
        assert seen == committed, (
            f"{len(committed - seen)} committed records lost, e.g. "
            f"{sorted(committed - seen)[:10]}")
        assert aborted  # the run had aborted transactions for the cleaner to drop
