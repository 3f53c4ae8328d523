"""Small helpers for what people read: counts with their noun in the right number, and log
lines that repeat without news let through once in a while."""

from __future__ import annotations

import logging
import time

__all__ = ["RepeatFilter", "plural"]


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 partition``, ``3 partitions``, ``0 partitions`` (``plural_form`` for irregular
    nouns, e.g. ``plural(n, "index", "indexes")``)."""
    word = noun if count == 1 else plural_form or f"{noun}s"
    return f"{count:,} {word}"


class RepeatFilter(logging.Filter):
    """Drop a log line identical to one let through less than ``seconds`` ago.

    librdkafka logs the same ``FAIL ... Connect to ... failed: Connection refused`` line on
    every reconnect attempt, about 20 a second while a broker is down; one every
    ``seconds`` says as much. At most ``keep`` distinct lines are remembered (then the
    memory starts afresh)."""

    def __init__(self, seconds: float = 30.0, keep: int = 1024) -> None:
        super().__init__()
        self.seconds = seconds
        self.keep = keep
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        now = time.monotonic()
        last = self._last.get(text)
        if last is not None and now - last < self.seconds:
            return False
        if len(self._last) >= self.keep:
            self._last.clear()
        self._last[text] = now
        return True
