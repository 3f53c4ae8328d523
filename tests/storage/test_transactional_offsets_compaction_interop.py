"""Transactional offset commits on ``__consumer_offsets`` while the cleaner compacts it
many times, then a coordinator reload (issue 46, item 1, end to end for TxnOffsetCommit).

A consume-transform-produce loop (confluent-kafka: a read_committed consumer in a group, a
transactional producer that sends the consumer's position with
``send_offsets_to_transaction``) commits most transactions and aborts some. The offsets
topic has one partition, 2 KiB segments, ``segment.ms`` and ``delete.retention.ms`` of a
fraction of a second (broker defaults ``log.roll.ms`` and
``log.cleaner.delete.retention.ms``, which ``__consumer_offsets`` takes as any topic) and
a 50 ms cleaner backoff, so abort markers pass their horizon and go while the loop runs.
After the last commit only aborted transactions follow, each with a later offset, until
the cleaner has cleaned past that commit several times. The broker is then restarted on
the same data directory: the group coordinator replays the compacted partition, and the
group's committed offset must be the last committed transaction's, not an aborted one's
(a later offset) nor an older one (the commit's record dropped by a stale ``.txnindex``
entry of the old cleaner)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient

from odradek.storage.manager import TopicPartition
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired

OVERRIDES = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "2048",
    "transaction.state.log.num.partitions": "1",
    "log.roll.ms": "150",
    "log.cleaner.delete.retention.ms": "200",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.backoff.ms": "50",
}
INPUT_RECORDS = 3000
LOOP_S = 6.0  # long enough for several cleaner passes over __consumer_offsets
PASSES_AFTER_LAST_COMMIT = 4
HORIZON_S = 1.0  # five times delete.retention.ms
DEADLINE_S = 30.0
OFFSETS = TopicPartition("__consumer_offsets", 0)


def _offsets_checkpoint(rb: RunningBroker) -> int:
    """Where the cleaner's checkpoint of ``__consumer_offsets-0`` stands (-1: never
    cleaned)."""
    def read() -> int:
        cleaner = rb.broker.log_cleaner
        partition_log = rb.broker.log_manager.logs.get(OFFSETS)
        if cleaner is None or partition_log is None:
            return -1
        return cleaner.manager.checkpoints(partition_log.log_dir).get(OFFSETS, -1)

    result: int = rb.call(read)
    return result


def _offsets_log_end(rb: RunningBroker) -> int:
    def read() -> int:
        return rb.broker.log_manager.logs[OFFSETS].log_end_offset

    result: int = rb.call(read)
    return result


def _transform(consumer: ck.Consumer, producer: ck.Producer, source: str, sink: str,
               commit: bool) -> int | None:
    """One transaction transforming the next input record; the position it sends (None:
    no record yet)."""
    message = consumer.poll(0.5)
    if message is None:
        return None
    assert message.error() is None, message.error()
    value = message.value()
    offset = message.offset()
    assert value is not None and offset is not None
    producer.begin_transaction()
    producer.produce(sink, b"f(" + value + b")", partition=0)
    position = offset + 1
    producer.send_offsets_to_transaction(
        [ck.TopicPartition(source, 0, position)], consumer.consumer_group_metadata(),
        DEADLINE_S)
    if commit:
        producer.commit_transaction(DEADLINE_S)
    else:
        producer.abort_transaction(DEADLINE_S)
    return position


def test_transactional_offset_commits_survive_compaction_and_reload(tmp_path: Path) -> None:
    group = f"eos-{uuid.uuid4().hex[:6]}"
    source, sink = "eos-in", "eos-out"
    with running_broker(OVERRIDES, data_dir=tmp_path) as rb:
        for topic in (source, sink):
            rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {})
        plain = ck.Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 5})
        for i in range(INPUT_RECORDS):
            plain.produce(source, b"%d" % i, partition=0)
        assert plain.flush(DEADLINE_S) == 0
        del plain
        consumer = ck.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": group,
                                "enable.auto.commit": False,
                                "auto.offset.reset": "earliest",
                                "isolation.level": "read_committed"})
        consumer.subscribe([source])
        producer = ck.Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 0,
                                "transactional.id": f"eos-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(DEADLINE_S)

        try:
            last_committed = -1
            aborted: set[int] = set()
            n = 0
            # the loop runs LOOP_S (its work, not a deadline); the waits after it have
            # DEADLINE_S more
            started = time.monotonic()
            loop_end = started + LOOP_S
            until = LOOP_S + DEADLINE_S
            while time.monotonic() < loop_end or last_committed < 0:
                assert not expired(started, until), (
                    f"no transaction committed in {describe(started, until)}")
                commit = n % 4 != 2
                position = _transform(consumer, producer, source, sink, commit)
                if position is None:
                    continue
                n += 1
                if commit:
                    last_committed = position
                else:
                    aborted.add(position)
            # The last commit right after an abort: once the cleaner has removed that
            # abort's marker, a stale index entry would make it drop the commit.
            for commit in (False, True):
                while (position := _transform(consumer, producer, source, sink, commit)) is None:
                    assert not expired(started, until), (
                        f"no record to transform in {describe(started, until)}")
                if commit:
                    last_committed = position
                else:
                    aborted.add(position)
            # From here on only aborted transactions, at later offsets, until the cleaner
            # has cleaned past the last commit (its marker included) several times and
            # the abort markers around it had time to pass their horizon.
            passed = _offsets_log_end(rb)
            horizon = time.monotonic() + HORIZON_S
            checkpoints: set[int] = set()
            while len(checkpoints) < PASSES_AFTER_LAST_COMMIT or time.monotonic() < horizon:
                assert not expired(started, until), (
                    f"the cleaner passed the last commit {len(checkpoints)} times in "
                    f"{describe(started, until)}")
                position = _transform(consumer, producer, source, sink, False)
                if position is not None:
                    aborted.add(position)
                checkpoint = _offsets_checkpoint(rb)
                if checkpoint >= passed:
                    checkpoints.add(checkpoint)
        finally:
            consumer.close()
            del producer  # librdkafka's threads stop before the broker does
        assert aborted and max(aborted) > last_committed
        assert last_committed not in aborted

    # The group coordinator reloads the compacted partition.
    with running_broker(OVERRIDES, data_dir=tmp_path) as rb:
        reader = ck.Consumer({"bootstrap.servers": rb.bootstrap, "group.id": group,
                              "enable.auto.commit": False,
                              "isolation.level": "read_committed"})
        try:
            committed = reader.committed([ck.TopicPartition(source, 0)], DEADLINE_S)
        finally:
            reader.close()
        assert [tp.offset for tp in committed] == [last_committed]
        admin = AdminClient({"bootstrap.servers": rb.bootstrap})
        request = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(source, 0)])
        listed = admin.list_consumer_group_offsets([request],
                                                   require_stable=True)[group].result(DEADLINE_S)
        assert [tp.offset for tp in listed.topic_partitions] == [last_committed]
