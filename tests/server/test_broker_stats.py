"""The request counters' arithmetic: the five parts of a request's time add up to its
total, each in the power-of-two bucket its duration belongs to."""

from __future__ import annotations

import time

from odradek.server.broker_stats import (
    BUCKETS,
    REQUEST_BOUNDS_MS,
    TIME_NAMES,
    RequestStats,
    RequestTiming,
)


def bucket_of(ns: int) -> int:
    """The first bucket whose bound (in ms) is above ``ns``, or the overflow."""
    return next((i for i, bound in enumerate(REQUEST_BOUNDS_MS) if ns / 1e6 < bound), BUCKETS)


def test_parts_land_in_their_buckets_and_add_up_to_the_total() -> None:
    stats = RequestStats()
    received = time.monotonic_ns() - 5_000_000_000  # 5 s ago: a parked request
    timing = RequestTiming()
    timing.started = received + 30_000               # 30 us waiting for earlier requests
    timing.suspended = timing.started + 200_000      # 200 us of local work
    timing.done = timing.suspended + 4_000_000_000   # 4 s in a purgatory
    taken = timing.done + 3_000_000                  # 3 ms behind earlier responses
    timing.error = 15
    stats.record(1, 12, received, timing, taken)
    assert stats.requests == {1 << 16 | 12: 1}
    assert stats.errors == {1 << 16 | 15: 1}
    parts = stats.times[1].snapshot()
    assert len(parts) == len(TIME_NAMES)
    expected = {0: 30_000, 1: 200_000, 2: 4_000_000_000, 3: 3_000_000}
    for index, ns in expected.items():
        counts, sum_ns = parts[index]
        assert len(counts) == BUCKETS + 1
        assert sum_ns == ns
        assert counts[bucket_of(ns)] == 1 and sum(counts) == 1
    send_ns, total_ns = parts[4][1], parts[5][1]
    assert send_ns >= 0
    assert total_ns == sum(expected.values()) + send_ns  # the parts add up, exactly
    assert parts[5][0][bucket_of(total_ns)] == 1


def test_a_request_that_never_waited_has_no_remote_time() -> None:
    stats = RequestStats()
    now = time.monotonic_ns()
    timing = RequestTiming()
    timing.started = now + 1_000
    timing.done = now + 100_000
    stats.record(0, 9, now, timing, now + 101_000)
    parts = stats.times[0].snapshot()
    assert parts[1][1] == 99_000 and parts[2][1] == 0
    assert parts[2][0][0] == 1  # remote 0 ns: the first bucket
    assert stats.errors == {}
