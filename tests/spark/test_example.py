"""examples/spark_pipeline.py with ``--bootstrap-server``, run in the suite's shared Spark
session against a broker the test starts: the totals it prints are the sums of the events
it produced, recomputed here from the ``events`` topic itself."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from tests.interop._broker import REPO, start_broker

pytestmark = pytest.mark.timeout(600)

EXAMPLE = REPO / "examples" / "spark_pipeline.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _events(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record of ``topic`` (3 partitions), read back with a plain consumer."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "test-example",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(3)])
        out: list[dict[str, Any]] = []
        at_end: set[int] = set()
        while len(at_end) < 3:
            msg = c.poll(30)
            assert msg is not None, f"no record from {topic} within 30 s"
            err = msg.error()
            if err is not None:
                assert err.code() == ck.KafkaError._PARTITION_EOF, err
                at_end.add(msg.partition())
                continue
            out.append(json.loads(msg.value()))
        return out
    finally:
        c.close()


def test_the_example_against_a_running_broker(spark: Any, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    example = _example()
    with start_broker(tmp_path) as broker:
        example.main(["--bootstrap-server", broker.bootstrap], spark=spark)
        out = capsys.readouterr().out
        head = re.search(r"^broker (\S+): topics (events-\w+), (totals-\w+)$", out, re.M)
        assert head and head[1] == broker.bootstrap, out
        events = _events(broker.bootstrap, head[2])
    assert len(events) == 1000 + 700  # the two rounds
    want: dict[str, tuple[float, int]] = {}
    for e in events:
        total, count = want.get(e["user"], (0.0, 0))
        want[e["user"]] = (total + e["amount"], count + 1)
    printed = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\w+)  (\{.*\})$", line)
        if m:
            row = json.loads(m[2])
            assert row["user"] == m[1]
            printed[row["user"]] = (row["total"], row["purchases"])
    assert set(printed) == set(want), (printed, want)
    for user, (total, count) in want.items():
        assert printed[user][1] == count, (user, printed[user], count)
        assert printed[user][0] == pytest.approx(total, abs=0.01), (user, printed[user], total)
    assert "totals match the events produced" in out
