"""A fixed-bucket latency histogram of plain ints, cheap enough for the request path.

How it works: Kafka's request and flush timers are Yammer histograms read over JMX; here a
histogram is a list of counts, one per upper bound (in nanoseconds, so that a duration
from ``time.monotonic_ns()`` is bucketed without a division) plus an overflow bucket, a
sum and nothing else. Recording is one ``bisect`` and two integer additions, with no lock:
each histogram is written by one thread (the broker's event loop, or under the flushing
log's lock), and a scrape reads a consistent-enough copy (``snapshot``) between two writes.
The Prometheus side (``odradek.server.metrics``) turns the counts into cumulative
``_bucket`` samples in milliseconds, Kafka's unit.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["LATENCY_BOUNDS_MS", "Histogram"]

#: Upper bounds of the buckets, in milliseconds (Prometheus' ``le``): sub-millisecond
#: requests up to the 30 s a parked Fetch or JoinGroup may wait.
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)


class Histogram:
    __slots__ = ("_bounds_ns", "counts", "sum_ns")

    def __init__(self, bounds_ms: tuple[float, ...] = LATENCY_BOUNDS_MS) -> None:
        self._bounds_ns = [int(b * 1_000_000) for b in bounds_ms]
        self.counts = [0] * (len(bounds_ms) + 1)  # the last one: above every bound
        self.sum_ns = 0

    def record(self, ns: int) -> None:
        # bisect_left: a value equal to a bound falls in that bound's bucket (le).
        self.counts[bisect_left(self._bounds_ns, ns)] += 1
        self.sum_ns += ns

    def snapshot(self) -> tuple[list[int], int]:
        """(counts per bucket, sum in ns), copied."""
        return list(self.counts), self.sum_ns

    @property
    def count(self) -> int:
        return sum(self.counts)
