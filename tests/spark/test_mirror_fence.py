"""The mirror's replay fence (odradek.spark.mirror.write_range) without Spark: a task
replayed after an attempt that wrote part of its range writes only the rest. And its
transactional mode (write_range_transactionally): a task resumes from the source offset
committed in the target transaction, and an earlier attempt left running is fenced and
its records never become visible to a read_committed consumer."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka as ck
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from odradek.spark.client import arrow_schema
from odradek.spark.mirror import (
    MirrorError,
    transactional_id_of,
    write_range,
    write_range_transactionally,
)
from odradek.testing import RunningBroker, running_broker


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topics = ("x.f.a", "x.f.b", "x.t.a", "x.t.b")
        for f in admin.create_topics([NewTopic(t, 2, 1) for t in topics]).values():
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


def target(b: RunningBroker, topic: str, partition: int,
           isolation: str = "read_uncommitted") -> list[tuple[bytes, bytes, int]]:
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t",
                     "enable.partition.eof": True, "isolation.level": isolation})
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


def expected(offsets: list[int]) -> list[tuple[bytes, bytes, int]]:
    return [(f"k{o}".encode(), f"v{o}".encode(), 1_700_000_000_000 + o) for o in offsets]


def committed(b: RunningBroker, group: str, topic: str, partition: int) -> tuple[int, str]:
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                     "isolation.level": "read_committed"})
    try:
        got = c.committed([ck.TopicPartition(topic, partition)], timeout=30)[0]
        return got.offset, got.metadata or ""
    finally:
        c.close()


def test_transactional_task_resumes_from_its_committed_offset(broker: RunningBroker) -> None:
    first, second = [0, 1, 2, 5, 6, 9], [10, 11, 12, 20]
    res = write_range_transactionally(conf(broker), "x.", 30_000, "mm", "g1",
                                      iter(source_rows("t.a", 0, first)))
    assert res is not None
    assert (res.records, res.written) == (6, 6)
    assert res.runs == [(0, 0, 3), (5, 3, 2), (9, 5, 1)]
    assert committed(broker, "g1", "x.t.a", 0)[0] == 10
    # a replay of the same range (the micro-batch had not completed) writes nothing and
    # reports the same offset syncs, from the metadata committed with the offset
    again = write_range_transactionally(conf(broker), "x.", 30_000, "mm", "g1",
                                        iter(source_rows("t.a", 0, first)))
    assert again is not None
    assert (again.records, again.written, again.runs) == (6, 0, res.runs)
    # the next range starts after the commit marker of the first transaction
    nxt = write_range_transactionally(conf(broker), "x.", 30_000, "mm", "g1",
                                      iter(source_rows("t.a", 0, second)))
    assert nxt is not None and nxt.written == 4
    assert nxt.runs == [(10, 7, 3), (20, 10, 1)]
    assert committed(broker, "g1", "x.t.a", 0)[0] == 21
    want = expected(first + second)
    assert target(broker, "x.t.a", 0, "read_committed") == want
    assert target(broker, "x.t.a", 0) == want  # nothing aborted: the same at either level


def test_zombie_attempt_is_fenced_and_invisible(broker: RunningBroker) -> None:
    offsets = list(range(8))
    # an earlier attempt of the task: same transactional.id, half its range written in an
    # open transaction, then it stalls (a zombie)
    zombie = ck.Producer({**conf(broker), "linger.ms": 0,
                          "transactional.id": transactional_id_of("mm", "x.t.b", 1)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for o in offsets[:4]:
        zombie.produce("x.t.b", f"v{o}".encode(), f"k{o}".encode(), 1,
                       timestamp=1_700_000_000_000 + o)
    assert zombie.flush(30) == 0
    # the retried attempt fences it, has its open transaction aborted, writes the range
    res = write_range_transactionally(conf(broker), "x.", 30_000, "mm", "g2",
                                      iter(source_rows("t.b", 1, offsets)))
    assert res is not None and res.written == 8
    assert res.runs == [(0, 5, 8)]  # after the zombie's 4 records and its abort marker
    # the zombie wakes up: whatever it does fails, and none of it becomes visible
    with pytest.raises(ck.KafkaException) as caught:
        zombie.produce("x.t.b", b"late", b"late", 1)
        zombie.flush(30)
        zombie.commit_transaction(30)
    assert caught.value.args[0].fatal() or caught.value.args[0].txn_requires_abort()
    assert target(broker, "x.t.b", 1, "read_committed") == expected(offsets)
    # read_uncommitted shows the aborted attempt's records too (as Kafka documents)
    assert target(broker, "x.t.b", 1) == expected(offsets[:4]) + expected(offsets)
    assert committed(broker, "g2", "x.t.b", 1)[0] == 8
    del caught, zombie


def test_empty_transactional_range_writes_nothing(broker: RunningBroker) -> None:
    assert write_range_transactionally(conf(broker), "x.", 30_000, "mm", "g3",
                                       iter([])) is None
