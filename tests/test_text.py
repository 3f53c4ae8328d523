"""odradek.text: plurals, and the filter that thins librdkafka's repeated log lines."""

from __future__ import annotations

import logging

import pytest

from odradek.text import RepeatFilter, plural


def test_plural() -> None:
    assert plural(1, "partition") == "1 partition"
    assert plural(0, "partition") == "0 partitions"
    assert plural(1200, "index", "indexes") == "1,200 indexes"


def test_a_repeated_line_passes_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("odradek.text.time.monotonic", lambda: clock[0])
    seen: list[str] = []
    logger = logging.getLogger("tests.text.repeat")
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.addFilter(RepeatFilter(seconds=30.0, keep=2))
    for _ in range(20):  # librdkafka's reconnect loop: the same line, 20 a second
        logger.error("%s [%s] %s", "FAIL", "rdkafka#producer-1", "Connection refused")
        clock[0] += 0.05
    logger.error("other news")
    assert seen == ["FAIL [rdkafka#producer-1] Connection refused", "other news"]
    clock[0] += 30.0
    logger.error("%s [%s] %s", "FAIL", "rdkafka#producer-1", "Connection refused")
    assert seen[-1] == "FAIL [rdkafka#producer-1] Connection refused" and len(seen) == 3
    for i in range(3):  # past ``keep`` distinct lines the memory starts afresh: bounded
        logger.error("line %d", i)
    assert len(seen) == 6
