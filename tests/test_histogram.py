"""The plain-int latency histogram behind the request and flush metrics."""

from __future__ import annotations

from odradek.histogram import LATENCY_BOUNDS_MS, Histogram


def test_buckets_are_upper_bounds_in_ms_and_the_sum_in_ns() -> None:
    h = Histogram((1, 10))
    for ms in (0.5, 1, 1.0001, 10, 11, 5000):
        h.record(int(ms * 1_000_000))
    counts, sum_ns = h.snapshot()
    assert counts == [2, 2, 2]  # <= 1 ms, <= 10 ms, above
    assert sum_ns == sum(int(ms * 1_000_000) for ms in (0.5, 1, 1.0001, 10, 11, 5000))
    assert h.count == 6


def test_default_bounds_cover_a_parked_request() -> None:
    h = Histogram()
    h.record(0)
    h.record(30_000 * 1_000_000)
    h.record(31_000 * 1_000_000)
    counts, _ = h.snapshot()
    assert len(counts) == len(LATENCY_BOUNDS_MS) + 1
    assert counts[0] == 1 and counts[-2] == 1 and counts[-1] == 1
