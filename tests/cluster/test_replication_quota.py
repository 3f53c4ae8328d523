"""Replication throttles' measurement (odradek.cluster.replication_quota, KIP-73); the
throttled copy itself is timed against real brokers in tests/interop/test_replication.py."""

from __future__ import annotations

from odradek.cluster.replication_quota import UNLIMITED, WINDOWS, ReplicationQuota, is_throttled


def test_throttled_replicas_lists() -> None:
    assert is_throttled(("0:1", "1:2"), 0, 1)
    assert not is_throttled(("0:1", "1:2"), 0, 2)
    assert is_throttled(("*",), 7, 3)
    assert not is_throttled((), 0, 1)


def test_rate_over_the_window_and_its_expiry() -> None:
    rate = [1000]
    quota = ReplicationQuota(lambda: rate[0])
    quota.record(500, now=100.2)
    assert not quota.exceeded(100.5)  # 500 B over the first second
    quota.record(1000, now=100.7)
    assert quota.exceeded(100.8)  # 1,500 B in one second
    assert quota.measured(103.0) == 1500 / 3.0  # spread over the seconds since
    assert not quota.exceeded(103.0)
    assert quota.measured(100.0 + WINDOWS + 1) == 0.0  # aged out
    rate[0] = UNLIMITED
    quota.record(10**9, now=200.0)
    assert not quota.exceeded(200.1)  # no cap
