"""The quota arithmetic of odradek.server.client_quotas (Kafka's Rate, QuotaUtils and
TokenBucket), driven with explicit times; the real-client tests are in
tests/interop/test_client_quotas.py."""

from __future__ import annotations

import pytest

from odradek.server.client_quotas import (
    ClientQuotaManager,
    ClientQuotas,
    ControllerMutationQuotaManager,
    QuotaWindow,
    Rate,
)

WINDOW = QuotaWindow(samples=11, size_s=1.0)


def test_a_new_rate_is_measured_over_at_least_samples_minus_one_windows() -> None:
    rate = Rate(WINDOW, 0.0)
    rate.record(1000.0, 0.0)
    assert rate.window_ms(500.0) == 10_500.0  # 0.5 s elapsed + 10 padded windows
    assert rate.measure(500.0) == pytest.approx(1000.0 / 10.5)


def test_samples_older_than_the_whole_window_are_forgotten() -> None:
    rate = Rate(WINDOW, 0.0)
    rate.record(5000.0, 0.0)
    rate.record(100.0, 5_000.0)
    assert rate.measure(10_999.0) > 400.0
    assert rate.measure(11_000.0) == pytest.approx(100.0 / 10.0)  # the first sample expired


def test_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    manager = ClientQuotaManager("producer_byte_rate", WINDOW)
    manager.set_quotas({"app": 100.0}, None)
    assert manager.record("app", 1000.0, 0.0) == 0  # 1000 B over 10 s: at the quota
    throttle = manager.record("app", 1000.0, 0.0)  # 2000 B over 10 s: 200 B/s
    assert throttle == 10_000  # (200 - 100) / 100 x 10 s
    assert manager.record("other", 10**9, 0.0) == 0  # no quota, no default


def test_specific_quota_wins_over_the_default_and_each_client_is_measured_alone() -> None:
    quotas = ClientQuotas(WINDOW)
    quotas.apply({"<default>": {"producer_byte_rate": "100"},
                  "big": {"producer_byte_rate": "1000000"}})
    produce = quotas.produce
    assert produce.active and not quotas.fetch.active
    assert produce.quota("big") == 1_000_000 and produce.quota("anyone") == 100
    assert produce.record("a", 1500.0, 0.0) > 0
    assert produce.record("b", 900.0, 0.0) == 0  # its own rate, not a's
    assert produce.record("big", 10_000.0, 0.0) == 0
    quotas.apply({})
    assert not produce.active and produce.tracked == 0


def test_idle_clients_are_dropped() -> None:
    manager = ClientQuotaManager("producer_byte_rate", WINDOW)
    manager.set_quotas({}, 100.0)
    for i in range(50):
        manager.record(f"client-{i}", 1.0, 0.0)
    assert manager.tracked == 50
    manager.record("late", 1.0, 11_000.0)  # a whole window later: the others are gone
    assert manager.tracked == 1


def test_fetch_asks_for_no_more_than_one_window_of_its_quota() -> None:
    manager = ClientQuotaManager("consumer_byte_rate", WINDOW)
    manager.set_quotas({"c": 1000.0}, None)
    assert manager.max_value_in_window("c") == 10_000.0
    assert manager.max_value_in_window("free") == float("inf")


def test_token_bucket_of_the_mutation_quota() -> None:
    manager = ControllerMutationQuotaManager(WINDOW)
    manager.set_quotas({"admin": 2.0}, None)  # burst: 2 x 11 x 1 s = 22 partitions
    assert manager.throttle_time("admin", 0.0) == 0
    manager.record("admin", 20, 0.0)
    assert manager.throttle_time("admin", 0.0) == 0  # 2 tokens left
    manager.record("admin", 6, 0.0)  # may overdraw: -4
    assert manager.throttle_time("admin", 0.0) == 2000  # 4 / 2 per s
    assert manager.throttle_time("admin", 1500.0) == 500  # refilled by 3
    assert manager.throttle_time("admin", 2000.0) == 0
    manager.set_quotas({"admin": 1.0}, None)
    strict = manager.for_request("admin", strict=True)
    permissive = manager.for_request("admin", strict=False)
    assert not strict.exceeded()
    strict.record(100)  # on the real clock: 89 partitions over, ~89 s to wait
    assert strict.exceeded() and not permissive.exceeded()
    assert 80_000 <= strict.throttle_time() <= 89_000
