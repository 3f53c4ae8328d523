"""The mirror's replay fence (odradek.spark.mirror.write_range) without Spark: a task
replayed after an attempt that wrote part of its range writes only the rest."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka as ck
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from odradek.spark.client import arrow_schema
from odradek.spark.mirror import MirrorError, write_range
from odradek.testing import RunningBroker, running_broker


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(t, 2, 1) for t in ("x.f.a", "x.f.b")]).values():
            f.result(30)
        yield b


def source_rows(topic: str, partition: int, offsets: list[int]) -> list[pa.RecordBatch]:
    """Rows as the source reader gives them, cut into batches of 4."""
    rows = [
        {"key": f"k{o}".encode(), "value": f"v{o}".encode(), "topic": topic,
         "partition": partition, "offset": o, "timestamp": 1_700_000_000_000_000 + o * 1000,
         "timestampType": 0,
         "headers": [{"key": "h", "value": str(o).encode()}] if o % 2 else None}
        for o in offsets
    ]
    schema = arrow_schema(True)
    return [pa.RecordBatch.from_pylist(rows[i : i + 4], schema=schema)
            for i in range(0, len(rows), 4)]


def target(b: RunningBroker, topic: str, partition: int) -> list[tuple[bytes, bytes, int]]:
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t",
                     "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    out = []
    while True:
        m = c.poll(10)
        assert m is not None
        if m.error() is not None:
            assert m.error().code() == ck.KafkaError._PARTITION_EOF
            break
        out.append((m.key(), m.value(), m.timestamp()[1]))
    c.close()
    return out


def conf(b: RunningBroker) -> dict[str, str]:
    return {"bootstrap.servers": b.bootstrap}


def test_replay_writes_only_what_is_missing(broker: RunningBroker) -> None:
    offsets = [0, 1, 2, 5, 6, 9, 10, 11, 12, 20]  # gaps, as compaction leaves
    # a first attempt that died after 3 records (they are a prefix: idempotent producer)
    p = ck.Producer(conf(broker))
    for o in offsets[:3]:
        p.produce("x.f.a", f"v{o}".encode(), f"k{o}".encode(), 1,
                  timestamp=1_700_000_000_000 + o)
    assert p.flush(30) == 0
    res = write_range(conf(broker), "x.", 30_000, {("f.a", 1): 0},
                      iter(source_rows("f.a", 1, offsets)))
    assert res is not None
    assert (res.records, res.written) == (10, 7)
    assert res.runs == [(0, 0, 3), (5, 3, 2), (9, 5, 4), (20, 9, 1)]
    got = target(broker, "x.f.a", 1)
    assert got == [(f"k{o}".encode(), f"v{o}".encode(), 1_700_000_000_000 + o) for o in offsets]
    # a replay of a micro-batch that had completed writes nothing
    again = write_range(conf(broker), "x.", 30_000, {("f.a", 1): 0},
                        iter(source_rows("f.a", 1, offsets)))
    assert again is not None and again.written == 0
    assert len(target(broker, "x.f.a", 1)) == 10


def test_foreign_records_in_the_target_fail_the_task(broker: RunningBroker) -> None:
    p = ck.Producer(conf(broker))
    for _ in range(5):
        p.produce("x.f.b", b"foreign", None, 0)
    assert p.flush(30) == 0
    with pytest.raises(MirrorError, match="another producer writes to it"):
        write_range(conf(broker), "x.", 30_000, {("f.b", 0): 0},
                    iter(source_rows("f.b", 0, [0, 1, 2])))
    with pytest.raises(MirrorError, match="before 9 where this micro-batch began"):
        write_range(conf(broker), "x.", 30_000, {("f.b", 0): 9},
                    iter(source_rows("f.b", 0, [0, 1, 2])))


def test_empty_range_writes_nothing(broker: RunningBroker) -> None:
    assert write_range(conf(broker), "x.", 30_000, {}, iter([])) is None
