"""The odradek data source with a real local Spark (one session per run) and a real broker."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.testing import RunningBroker
from tests._deadlines import expired

pytestmark = pytest.mark.timeout(240)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker: RunningBroker, topic: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _produce(
    broker: RunningBroker, topic: str, n: int, start: int = 0, **kw: Any
) -> list[tuple[int, int, bytes]]:
    """Produce n records round-robin over 3 partitions; return (partition, offset, value)."""
    acks: list[tuple[int, int, bytes]] = []

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acks.append((msg.partition(), msg.offset(), msg.value()))

    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(
            topic,
            f"v{i}".encode(),
            f"k{i}".encode(),
            i % 3,
            on_delivery=done,
            headers=[("n", str(i).encode())],
            **kw,
        )
    assert p.flush(30) == 0
    return acks


def _reader(spark: Any, broker: RunningBroker, **options: str) -> Any:
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_equals_produced(spark: Any, shared_broker: RunningBroker) -> None:
    topic = _topic("read")
    _create(shared_broker, topic)
    acks = _produce(shared_broker, topic, 90)
    df = _reader(spark, shared_broker, subscribe=topic, includeHeaders="true")
    rows = df.collect()
    got = sorted((r.partition, r.offset, r.value) for r in rows)
    assert got == sorted(acks)
    assert all(r.topic == topic and r.timestampType == 0 for r in rows)
    assert all(r.key == b"k" + r.value[1:] for r in rows)
    assert all([(h.key, h.value) for h in r.headers] == [("n", r.value[1:])] for r in rows)
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]

    # starting/ending offsets as JSON (-2 = earliest, -1 = latest), and minPartitions splits
    df = _reader(
        spark,
        shared_broker,
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":5,"1":-2,"2":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":10,"1":3,"2":-1}}}}',
        minPartitions="7",
    )
    assert df.rdd.getNumPartitions() >= 7
    got2 = sorted((r.partition, r.offset) for r in df.collect())
    assert got2 == sorted(
        [(0, o) for o in range(5, 10)] + [(1, o) for o in range(3)] + [(2, o) for o in range(30)]
    )

    # maxRecordsPerPartition: 30 offsets per partition in pieces of at most 7
    df = _reader(spark, shared_broker, subscribe=topic, maxRecordsPerPartition="7")
    assert df.rdd.getNumPartitions() == 3 * 5
    assert sorted((r.partition, r.offset, r.value) for r in df.collect()) == sorted(acks)

    # assign one partition
    got = (
        _reader(spark, shared_broker, assign=f'{{"{topic}":[1]}}')
        .select("partition")
        .distinct()
        .collect()
    )
    assert [r.partition for r in got] == [1]


def test_batch_read_timestamps(spark: Any, shared_broker: RunningBroker) -> None:
    topic = _topic("ts")
    _create(shared_broker, topic)
    base = 1_700_000_000_000
    p = ck.Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(30):
        p.produce(topic, b"x%d" % i, None, i % 3, timestamp=base + i * 1000)
    assert p.flush(30) == 0
    df = _reader(
        spark,
        shared_broker,
        subscribe=topic,
        startingTimestamp=str(base + 9000),
        endingTimestamp=str(base + 21000),
    )
    assert sorted(r.value for r in df.collect()) == sorted(b"x%d" % i for i in range(9, 21))
    df = _reader(
        spark,
        shared_broker,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{base + 27000}}}}}',
    )
    vals = {r.value for r in df.collect()}
    assert b"x27" in vals and b"x0" not in vals and b"x1" in vals  # p1, p2 from earliest
    first = df.orderBy("timestamp").first()
    assert first is not None and first.timestamp.timestamp() * 1000 == base + 1000
    with pytest.raises(Exception, match=r"startingOffsetsByTimestampStrategy"):
        _reader(
            spark, shared_broker, subscribe=topic, startingTimestamp=str(base + 10**9)
        ).collect()
    n = _reader(
        spark,
        shared_broker,
        subscribe=topic,
        startingTimestamp=str(base + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    ).count()
    assert n == 0


def test_bad_options_fail_fast(spark: Any, shared_broker: RunningBroker) -> None:
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"cannot reach the brokers at kafka.bootstrap.servers"):
        (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", "127.0.0.1:1")
            .option("kafka.default.api.timeout.ms", "3000")
            .option("subscribe", "x")
            .load()
            .collect()
        )
    assert time.monotonic() - t0 < 60
    with pytest.raises(Exception, match=r"do not exist"):
        _reader(spark, shared_broker, subscribe=_topic("missing")).collect()
    with pytest.raises(Exception, match=r"exactly one of the options 'subscribe'"):
        _reader(spark, shared_broker, subscribe="a", assign='{"a":[0]}').collect()
    with pytest.raises(Exception, match=r"exactly one of the options"):
        (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", shared_broker.bootstrap)
            .option("subscribe", "a")
            .option("subscribePattern", "a.*")
            .load()
            .writeStream.format("console")
            .start()
        )
    with pytest.raises(Exception, match=r"needs a 'value' column"):
        spark.range(3).write.format("odradek").option(
            "kafka.bootstrap.servers", shared_broker.bootstrap
        ).option("topic", "x").mode("append").save()


def test_batch_write_then_read_back(spark: Any, shared_broker: RunningBroker) -> None:
    topic = _topic("write")
    _create(shared_broker, topic)
    src = spark.range(1000).selectExpr(
        "cast(id as string) as key",
        "cast(concat('value-', id) as binary) as value",
        "cast(id % 3 as int) as partition",
        "array(named_struct('key', 'id', 'value', cast(cast(id as string) as binary))) as headers",
    )
    src.write.format("odradek").option("kafka.bootstrap.servers", shared_broker.bootstrap).option(
        "topic", topic
    ).mode("append").save()
    rows = _reader(spark, shared_broker, subscribe=topic, includeHeaders="true").collect()
    assert len(rows) == 1000
    assert sorted(int(r.key) for r in rows) == list(range(1000))
    assert all(r.partition == int(r.key) % 3 and r.value == b"value-" + r.key for r in rows)
    assert all(r.headers[0].value == r.key for r in rows)


def _run_available_now(
    spark: Any, broker: RunningBroker, topic: str, out: Path, ck_dir: Path, **opts: str
) -> Any:
    r = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        r = r.option(k, v)
    q = (
        r.load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ck_dir))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert not q.isActive
    return q


def test_streaming_read_restart_no_dups_no_gaps(
    spark: Any, shared_broker: RunningBroker, tmp_path: Path
) -> None:
    topic = _topic("stream")
    _create(shared_broker, topic)
    acks = _produce(shared_broker, topic, 300)
    out, ckp = tmp_path / "out", tmp_path / "ck"
    # first run: processing-time trigger, stopped mid-way after two capped micro-batches
    q = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "70")
        .load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckp))
        .trigger(processingTime="1 second")
        .start()
    )
    started = time.monotonic()
    while (
        not expired(started, 120)
        and len([p for p in q.recentProgress if p["numInputRows"]]) < 2
    ):
        time.sleep(0.5)
    q.stop()
    first = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert first and all(n <= 70 for n in first)
    done = spark.read.parquet(str(out)).count()
    assert 0 < done < 300
    acks += _produce(shared_broker, topic, 150, start=300)  # more data while stopped
    q = _run_available_now(spark, shared_broker, topic, out, ckp, maxOffsetsPerTrigger="100")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes and all(n <= 100 for n in sizes)
    got = sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect())
    assert got == sorted(acks)  # every record exactly once


def test_streaming_new_partitions_and_pattern(
    spark: Any, shared_broker: RunningBroker, tmp_path: Path
) -> None:
    prefix = _topic("pat")
    _create(shared_broker, prefix + "-a")
    _produce(shared_broker, prefix + "-a", 30)
    out, ckp = tmp_path / "out", tmp_path / "ck"
    r = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", shared_broker.bootstrap)
        .option("subscribePattern", prefix + "-.*")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckp))
    )
    r.trigger(availableNow=True).start().awaitTermination(180)
    assert spark.read.parquet(str(out)).count() == 30
    _create(shared_broker, prefix + "-b")  # a new topic matching the pattern: read from earliest
    _produce(shared_broker, prefix + "-b", 30)
    r.trigger(availableNow=True).start().awaitTermination(180)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((x.topic, x.partition, x.offset) for x in rows) == sorted(
        (prefix + s, p, o) for s in ("-a", "-b") for p in range(3) for o in range(10)
    )


def test_streaming_write_replayed_batch_not_duplicated(
    spark: Any, shared_broker: RunningBroker, tmp_path: Path
) -> None:
    src, dst = _topic("sink-src"), _topic("sink-dst")
    _create(shared_broker, src)
    _create(shared_broker, dst)
    _produce(shared_broker, src, 200)
    ckp = tmp_path / "ck"
    # The sink creates its marker topic itself, compacted, as it does for users.
    markers = _topic("markers")

    def run() -> None:
        (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", shared_broker.bootstrap)
            .option("subscribe", src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "80")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("odradek")
            .option("kafka.bootstrap.servers", shared_broker.bootstrap)
            .option("topic", dst)
            .option("odradek.sinkCommitTopic", markers)
            .option("checkpointLocation", str(ckp))
            .trigger(availableNow=True)
            .start()
            .awaitTermination(180)
        )

    run()
    assert _reader(spark, shared_broker, subscribe=dst).count() == 200
    # Crash simulation: Spark wrote the sink output (and our commit marker) but not its own
    # commit log entry, so on restart it replays the last micro-batch.
    commits = sorted((ckp / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) >= 3
    commits[-1].unlink()
    (ckp / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    _produce(shared_broker, src, 30, start=200)
    run()
    values = sorted(r.value for r in _reader(spark, shared_broker, subscribe=dst).collect())
    assert len(values) == 230 and len(set(values)) == 230
    assert shared_broker.broker.metadata.log_config(markers).compact


def test_fail_on_data_loss(spark: Any, shared_broker: RunningBroker) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = _topic("loss")
    _create(shared_broker, topic, 1)
    p = ck.Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(30):
        p.produce(topic, b"x%d" % i, None, 0)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 10)])[TopicPartition(topic, 0, 10)].result(30)
    start = f'{{"{topic}":{{"0":0}}}}'
    with pytest.raises(Exception, match=r"data loss.*failOnDataLoss=false"):
        _reader(spark, shared_broker, subscribe=topic, startingOffsets=start).collect()
    rows = _reader(
        spark, shared_broker, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    ).collect()
    assert sorted(r.offset for r in rows) == list(range(10, 30))
