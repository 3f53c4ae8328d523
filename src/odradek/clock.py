"""The two clocks the broker reads, in milliseconds, as Kafka's ``Time`` gives them.

:func:`now_ms` is wall-clock time since the epoch (Kafka's ``Time.milliseconds()``): what
is stored or compared with stored times (record and segment timestamps, retention,
committed offsets' expiry, group state times). :func:`monotonic_ms` never goes backwards
(Kafka's ``Time.hiResClockMs()``): what only measures intervals on this broker (follower
lag, fetch sessions' idle time).
"""

from __future__ import annotations

import time

__all__ = ["monotonic_ms", "now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
