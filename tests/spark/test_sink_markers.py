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
