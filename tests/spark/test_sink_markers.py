"""The streaming sink's replay fence, against a real broker (no Spark needed)."""

from __future__ import annotations

import json
import uuid

import confluent_kafka as ck

from odradek.spark.options import parse_write_options
from odradek.spark.sink import ensure_commit_topic, read_markers
from odradek.testing import RunningBroker


def test_markers_found_backwards_until_last_commit(shared_broker: RunningBroker) -> None:
    topic = f"markers-{uuid.uuid4().hex[:8]}"
    opts = parse_write_options(
        {
            "kafka.bootstrap.servers": shared_broker.bootstrap,
            "topic": "x",
            "odradek.sinkCommitTopic": topic,
        }
    )
    ensure_commit_topic(opts)
    ensure_commit_topic(opts)  # idempotent
    assert read_markers(opts, "q1", 0) == (-1, set())
    p = ck.Producer({"bootstrap.servers": shared_broker.bootstrap})

    def marker(key: str, value: object) -> None:
        p.produce(topic, json.dumps(value).encode(), key.encode(), 0)

    marker("q1/0/0", {"rows": 1})
    marker("q1/0/1", {"rows": 1})
    marker("q1", {"batch": 0})
    marker("q1/1/1", {"rows": 1})  # batch 1: task 1 finished, then a crash
    for i in range(50):  # another query's markers interleaved
        marker(f"q2/{i}/0", {"rows": 1})
        marker("q2", {"batch": i})
    assert p.flush(30) == 0
    assert read_markers(opts, "q1", 1, window=7) == (0, {1})
    assert read_markers(opts, "q1", 0, window=7)[0] == 0  # already committed: skip
    assert read_markers(opts, "q2", 50) == (49, set())
    assert read_markers(opts, "q3", 0) == (-1, set())


def test_read_committed_markers(shared_broker: RunningBroker) -> None:
    """The transactional sink's read: a marker of an aborted transaction does not count,
    and a transaction still open on the marker partition is waited for (here past the
    timeout, which fails the read), never read around."""
    import pytest

    from odradek.spark.client import OdradekSparkError

    topic = f"markers-{uuid.uuid4().hex[:8]}"
    opts = parse_write_options({"kafka.bootstrap.servers": shared_broker.bootstrap,
                                "kafka.default.api.timeout.ms": "3000", "topic": "x",
                                "odradek.sinkCommitTopic": topic})
    ensure_commit_topic(opts)
    p = ck.Producer({"bootstrap.servers": shared_broker.bootstrap,
                     "transactional.id": f"markers-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)

    def in_txn(key: str) -> None:
        p.begin_transaction()
        p.produce(topic, json.dumps({"rows": 1}).encode(), key.encode(), 0)
        assert p.flush(30) == 0

    in_txn("q1/0/0")
    p.commit_transaction(30)
    in_txn("q1/0/1")
    p.abort_transaction(30)
    assert read_markers(opts, "q1", 0, read_committed=True) == (-1, {0})
    assert read_markers(opts, "q1", 0) == (-1, {0, 1})
    in_txn("q1/0/2")
    with pytest.raises(OdradekSparkError, match=r"behind an open transaction"):
        read_markers(opts, "q1", 0, read_committed=True)
    p.commit_transaction(30)
    assert read_markers(opts, "q1", 0, read_committed=True) == (-1, {0, 2})
