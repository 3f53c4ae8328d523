"""Replication throttles (KIP-73; Kafka's ReplicationQuotaManager), sans-I/O.

How it works: a topic names the replicas to throttle in ``leader.replication.throttled.
replicas`` and ``follower.replication.throttled.replicas`` (``partition:broker`` pairs, or
``*`` for all); the brokers' ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` cap the bytes per second those replicas move. A
:class:`ReplicationQuota` measures the bytes recorded over a sliding window of
:data:`WINDOWS` one-second samples (Kafka's ``replication.quota.window.num`` = 11 and
``.size.seconds`` = 1); while the measured rate is above the cap, :meth:`exceeded` says so:
a follower then leaves throttled partitions out of its next fetch, and a leader answers a
throttled follower's fetch with no records (Kafka's ``shouldFollowerThrottle`` and the
leader's ``isThrottled`` check), so the unthrottled partitions of the same fetches go on at
full speed. Reassignments set the configs (``odradek reassign --throttle``) and remove them
when done.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

__all__ = ["WINDOWS", "ReplicationQuota", "is_throttled"]

WINDOWS = 11
WINDOW_S = 1.0
UNLIMITED = (1 << 63) - 1


def is_throttled(replicas: Sequence[str], partition: int, broker: int) -> bool:
    """Whether ``partition`` of ``broker`` is in a ``*.replication.throttled.replicas``."""
    if not replicas:
        return False
    return "*" in replicas or f"{partition}:{broker}" in replicas


class ReplicationQuota:
    def __init__(self, rate: Callable[[], int]) -> None:
        self.rate = rate  # the cap in bytes/s, read when checked (a dynamic config)
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def record(self, nbytes: int, now: float) -> None:
        start = now - now % WINDOW_S
        if self._samples and self._samples[-1][0] == start:
            self._samples[-1] = (start, self._samples[-1][1] + nbytes)
        else:
            self._samples.append((start, nbytes))
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._samples and self._samples[0][0] <= now - WINDOWS * WINDOW_S:
            self._samples.popleft()

    def measured(self, now: float) -> float:
        """Bytes per second over the samples kept (at least one window's length)."""
        self._expire(now)
        if not self._samples:
            return 0.0
        elapsed = max(WINDOW_S, now - self._samples[0][0])
        return sum(n for _, n in self._samples) / elapsed

    def exceeded(self, now: float) -> bool:
        rate = self.rate()
        return rate < UNLIMITED and self.measured(now) > rate
