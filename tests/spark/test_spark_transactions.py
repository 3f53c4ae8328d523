"""The connector over Kafka transactions, with the shared Spark session and a real broker:
``kafka.isolation.level=read_committed`` on the native reader (batch and streaming, an
open transaction holding the stream back until its commit), and the transactional sink
(``kafka.transactional.id``) whose retried task leaves no duplicate for read_committed
readers. Transactions are made with confluent-kafka's transactional producer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired

pytestmark = pytest.mark.timeout(900)

DEADLINE_S = 300.0


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as rb:
        yield rb


def _topic(rb: RunningBroker, prefix: str, partitions: int = 2) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, topic, partitions, 1)
    return topic


def _txn_producer(rb: RunningBroker) -> Any:
    # open transactions stay open however slow the machine (never aborted by the timeout)
    p = ck.Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 5,
                     "transaction.timeout.ms": 900_000,
                     "transactional.id": f"test-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(DEADLINE_S)
    return p


def _plain(rb: RunningBroker, topic: str, values: list[str], partitions: int = 2) -> None:
    p = ck.Producer({"bootstrap.servers": rb.bootstrap})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(DEADLINE_S) == 0


def _in_txn(p: Any, topic: str, values: list[str], partitions: int = 2) -> None:
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(DEADLINE_S) == 0


def _read(spark: Any, rb: RunningBroker, topic: str, isolation: str) -> list[tuple[int, int, str]]:
    rows = (spark.read.format("odradek").option("kafka.bootstrap.servers", rb.bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", isolation)
            .load().collect())
    return sorted((r.partition, r.offset, r.value.decode()) for r in rows)


def _values(rows: list[tuple[int, int, str]]) -> list[str]:
    return sorted(v for _, _, v in rows)


def test_batch_read_committed_skips_aborted_and_stops_at_the_open_transaction(
        spark: Any, broker: RunningBroker) -> None:
    topic = _topic(broker, "rc-batch")
    p = _txn_producer(broker)
    _plain(broker, topic, ["plain-0", "plain-1"])
    _in_txn(p, topic, [f"committed-{i}" for i in range(6)])
    p.commit_transaction(DEADLINE_S)
    _in_txn(p, topic, [f"aborted-{i}" for i in range(6)])
    p.abort_transaction(DEADLINE_S)
    _plain(broker, topic, ["plain-2", "plain-3"])
    _in_txn(p, topic, [f"open-{i}" for i in range(4)])  # left open
    _plain(broker, topic, ["plain-4", "plain-5"])  # after the open transaction's start

    committed = _read(spark, broker, topic, "read_committed")
    assert _values(committed) == sorted(
        ["plain-0", "plain-1", "plain-2", "plain-3"] + [f"committed-{i}" for i in range(6)])
    everything = _read(spark, broker, topic, "read_uncommitted")
    assert _values(everything) == sorted(
        [f"plain-{i}" for i in range(6)] + [f"committed-{i}" for i in range(6)]
        + [f"aborted-{i}" for i in range(6)] + [f"open-{i}" for i in range(4)])
    # the same records have the same offsets either way; no control record is a row
    assert set(committed) <= set(everything)
    markers = {(part, off) for part in range(2) for off in range(30)} - {
        (part, off) for part, off, _ in everything}
    assert all((part, off) not in markers for part, off, _ in committed)

    p.commit_transaction(DEADLINE_S)
    assert _values(_read(spark, broker, topic, "read_committed")) == sorted(
        [f"plain-{i}" for i in range(6)] + [f"committed-{i}" for i in range(6)]
        + [f"open-{i}" for i in range(4)])


def _wait(what: str, cond: Any, deadline_s: float = DEADLINE_S, state: Any = None,
          query: Any = None) -> None:
    """Wait for ``cond``; a ``query`` that has stopped fails the wait at once."""
    started = time.monotonic()
    while not cond():
        if query is not None and not query.isActive:
            raise AssertionError(f"the query stopped while waiting for {what}: "
                                 f"{query.exception()}")
        assert not expired(started, deadline_s), (
            f"timed out waiting for {what} after {describe(started, deadline_s)}"
            + (f": {state()}" if state else ""))
        time.sleep(0.2)


def test_streaming_read_committed_is_held_back_by_an_open_transaction(
        spark: Any, broker: RunningBroker) -> None:
    topic = _topic(broker, "rc-stream")
    name = f"rc_{uuid.uuid4().hex[:8]}"
    p = _txn_producer(broker)
    _plain(broker, topic, ["before-0", "before-1"])
    q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("kafka.isolation.level", "read_committed").load()
         .selectExpr("partition", "offset", "cast(value as string) as value")
         .writeStream.format("memory").queryName(name).trigger(processingTime="500 milliseconds")
         .start())
    try:
        def seen() -> list[str]:
            return sorted(r.value for r in spark.sql(f"select value from {name}").collect())

        _wait("the records before any transaction", lambda: seen() == ["before-0", "before-1"],
              query=q)
        _in_txn(p, topic, ["aborted-0", "aborted-1"])
        p.abort_transaction(DEADLINE_S)
        _in_txn(p, topic, ["open-0", "open-1"])
        _plain(broker, topic, ["held-0", "held-1"])  # behind the open transaction
        # the stream moves on to the last stable offset of both partitions and no further
        lso = {0: 0, 1: 0}
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed"})
        try:
            for part in lso:
                lso[part] = c.get_watermark_offsets(ck.TopicPartition(topic, part), 30)[1]
        finally:
            c.close()

        def ends() -> list[Any]:
            return [json.loads(p["sources"][0]["endOffset"]) for p in q.recentProgress]

        def at_lso() -> bool:
            return {topic: {"0": lso[0], "1": lso[1]}} in ends()

        # a micro-batch planned up to the last stable offsets (not the high watermarks,
        # which are 2 further) and ran: the aborted records and the markers read as none
        _wait("a micro-batch up to the last stable offsets", at_lso,
              state=lambda: (lso, ends()), query=q)
        assert seen() == ["before-0", "before-1"]
        p.commit_transaction(DEADLINE_S)
        _wait("the committed transaction and the records behind it",
              lambda: seen() == sorted(["before-0", "before-1", "open-0", "open-1",
                                        "held-0", "held-1"]), query=q)
    finally:
        q.stop()


def test_transactional_batch_write_fences_a_zombie_attempt(
        spark: Any, broker: RunningBroker) -> None:
    dst = _topic(broker, "txn-sink", partitions=1)
    prefix = f"sink-{uuid.uuid4().hex[:8]}"
    # what a killed attempt of task 0 leaves: its transaction open, some rows in the log
    zombie = ck.Producer({"bootstrap.servers": broker.bootstrap,
                          "transaction.timeout.ms": 900_000,
                          "transactional.id": f"{prefix}-0"})
    zombie.init_transactions(DEADLINE_S)
    _in_txn(zombie, dst, [f"zombie-{i}" for i in range(5)], partitions=1)
    (spark.range(100).selectExpr("cast(concat('row-', id) as string) as value").coalesce(1)
     .write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", dst).option("kafka.transactional.id", prefix).mode("append").save())
    assert _values(_read(spark, broker, dst, "read_committed")) == sorted(
        f"row-{i}" for i in range(100))
    # read_uncommitted readers also see what the fenced attempt had written
    assert len(_read(spark, broker, dst, "read_uncommitted")) == 105
    zombie.produce(dst, b"late", partition=0)
    with pytest.raises(ck.KafkaException):
        zombie.commit_transaction(DEADLINE_S)  # fenced by the task's new attempt


def test_streaming_task_failed_mid_write_leaves_no_duplicate(
        spark: Any, broker: RunningBroker, tmp_path: Any) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import BinaryType

    src, dst = _topic(broker, "txn-src"), _topic(broker, "txn-dst")
    _plain(broker, src, [f"v{i}" for i in range(600)])  # v0, v2, ... in partition 0
    boot, flag = broker.bootstrap, tmp_path / "fail"
    markers = f"markers-{uuid.uuid4().hex[:8]}"
    flag.touch()

    def fail_once(value: bytes) -> bytes:
        if value == b"v400" and flag.exists():  # partition 0, offset 200: mid-task
            raise RuntimeError("task killed mid-write (test)")
        return value

    check = udf(fail_once, BinaryType(), useArrow=False)

    def run() -> Any:
        return (
            spark.readStream.format("odradek").option("kafka.bootstrap.servers", boot)
            .option("subscribe", src).option("startingOffsets", "earliest").load()
            .select(check("value").alias("value"), "partition")
            .writeStream.format("odradek").option("kafka.bootstrap.servers", boot)
            .option("topic", dst).option("kafka.transactional.id", "pipeline")
            .option("odradek.sinkCommitTopic", markers)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True).start()
        )

    q = run()
    _wait("the first run to fail", lambda: not q.isActive)
    assert "task killed mid-write" in str(q.exception())
    flag.unlink()
    q = run()  # the same micro-batch again, from the checkpoint: the same transactional.ids
    _wait("the second run to end", lambda: not q.isActive)
    assert q.exception() is None
    # every row exactly once for read_committed readers, whatever the failed run left
    assert _values(_read(spark, broker, dst, "read_committed")) == sorted(
        f"v{i}" for i in range(600))
    assert len(_read(spark, broker, dst, "read_uncommitted")) >= 600


