"""The quota arithmetic of odradek.server.client_quotas (Kafka's Rate, QuotaUtils and
TokenBucket), driven with explicit times; the real-client tests are in
tests/interop/test_client_quotas.py."""

from __future__ import annotations

import pytest

from odradek.server.client_quotas import (
    DEFAULT_ENTITY,
    PRECEDENCE,
    ClientQuotaManager,
    ClientQuotas,
    ControllerMutationQuotaManager,
    QuotaEntity,
    QuotaWindow,
    Rate,
    principal_user,
    resolve_quota,
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
    manager.set_quotas({(None, "app"): 100.0})
    assert manager.record("app", 1000.0, 0.0) == 0  # 1000 B over 10 s: at the quota
    throttle = manager.record("app", 1000.0, 0.0)  # 2000 B over 10 s: 200 B/s
    assert throttle == 10_000  # (200 - 100) / 100 x 10 s
    assert manager.record("other", 10**9, 0.0) == 0  # no quota, no default


def test_specific_quota_wins_over_the_default_and_each_client_is_measured_alone() -> None:
    quotas = ClientQuotas(WINDOW)
    quotas.apply({(None, "<default>"): {"producer_byte_rate": "100"},
                  (None, "big"): {"producer_byte_rate": "1000000"}})
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
    manager.set_quotas({(None, DEFAULT_ENTITY): 100.0})
    for i in range(50):
        manager.record(f"client-{i}", 1.0, 0.0)
    assert manager.tracked == 50
    manager.record("late", 1.0, 11_000.0)  # a whole window later: the others are gone
    assert manager.tracked == 1


def test_fetch_asks_for_no_more_than_one_window_of_its_quota() -> None:
    manager = ClientQuotaManager("consumer_byte_rate", WINDOW)
    manager.set_quotas({(None, "c"): 1000.0})
    assert manager.max_value_in_window("c") == 10_000.0
    assert manager.max_value_in_window("free") == float("inf")


def test_token_bucket_of_the_mutation_quota() -> None:
    manager = ControllerMutationQuotaManager(WINDOW)
    manager.set_quotas({(None, "admin"): 2.0})  # burst: 2 x 11 x 1 s = 22 partitions
    assert manager.throttle_time("admin", 0.0) == 0
    manager.record("admin", 20, 0.0)
    assert manager.throttle_time("admin", 0.0) == 0  # 2 tokens left
    manager.record("admin", 6, 0.0)  # may overdraw: -4
    assert manager.throttle_time("admin", 0.0) == 2000  # 4 / 2 per s
    assert manager.throttle_time("admin", 1500.0) == 500  # refilled by 3
    assert manager.throttle_time("admin", 2000.0) == 0
    manager.set_quotas({(None, "admin"): 1.0})
    strict = manager.for_request("admin", strict=True)
    permissive = manager.for_request("admin", strict=False)
    assert not strict.exceeded()
    strict.record(100)  # on the real clock: 89 partitions over, ~89 s to wait
    assert strict.exceeded() and not permissive.exceeded()
    assert 80_000 <= strict.throttle_time() <= 89_000


# -- KIP-55: users, client ids and both ---------------------------------------------------
D = DEFAULT_ENTITY
# Every level stored, each with its own bound: level n (1-based, KIP-55's order) is n.
ALL_LEVELS: dict[QuotaEntity, float] = {
    ("alice", "app"): 1.0,
    ("alice", D): 2.0,
    ("alice", None): 3.0,
    (D, "app"): 4.0,
    (D, D): 5.0,
    (D, None): 6.0,
    (None, "app"): 7.0,
    (None, D): 8.0,
}
# The level each (user, client id) resolves to once the more specific levels are removed
# one by one, with the entity it is then measured as (Kafka's quota metric tags).
EXPECTED_TAGS: dict[int, QuotaEntity] = {
    1: ("alice", "app"),
    2: ("alice", "app"),
    3: ("alice", None),
    4: ("alice", "app"),
    5: ("alice", "app"),
    6: ("alice", None),
    7: (None, "app"),
    8: (None, "app"),
}


@pytest.mark.parametrize("level", range(1, 9))
def test_the_most_specific_stored_level_wins_and_says_what_is_measured(level: int) -> None:
    quotas = {e: b for e, b in ALL_LEVELS.items() if b >= level}  # levels 1..level-1 removed
    assert resolve_quota(quotas, "alice", "app") == (EXPECTED_TAGS[level], float(level))


def test_the_table_is_kip_55s_order() -> None:
    entities = [lvl.entity("alice", "app") for lvl in PRECEDENCE]
    assert entities == list(ALL_LEVELS)  # the dict above is written in KIP-55's order


def test_other_users_and_client_ids_fall_through_to_the_defaults() -> None:
    assert resolve_quota(ALL_LEVELS, "bob", "app") == (("bob", "app"), 4.0)
    assert resolve_quota(ALL_LEVELS, "alice", "other") == (("alice", "other"), 2.0)
    assert resolve_quota(ALL_LEVELS, "bob", "other") == (("bob", "other"), 5.0)
    user_only = {("alice", None): 3.0, (D, None): 6.0, (None, "app"): 7.0}
    assert resolve_quota(user_only, "bob", "app") == (("bob", None), 6.0)
    assert resolve_quota({("alice", None): 3.0}, "bob", "app") is None
    assert resolve_quota({}, "alice", "app") is None


def test_client_id_levels_alone_skip_the_user_levels() -> None:
    clients = {(None, "app"): 7.0, (None, D): 8.0}
    assert resolve_quota(clients, "alice", "app", user_quotas=False) == ((None, "app"), 7.0)
    assert resolve_quota(clients, "alice", "x", user_quotas=False) == ((None, "x"), 8.0)


def test_the_user_is_the_principals_name() -> None:
    assert principal_user("User:alice") == "alice"
    assert principal_user("User:ANONYMOUS") == "ANONYMOUS"
    assert principal_user("User:CN=broker,O=acme") == "CN=broker,O=acme"


def test_a_user_quota_is_shared_by_the_users_client_ids_and_not_by_other_users() -> None:
    manager = ClientQuotaManager("producer_byte_rate", WINDOW)
    manager.set_quotas({("alice", None): 100.0})
    assert manager.record("p1", 1000.0, 0.0, user="alice") == 0  # 100 B/s: at the quota
    assert manager.record("p2", 1000.0, 0.0, user="alice") == 10_000  # the same rate
    assert manager.record("p1", 10**9, 0.0, user="bob") == 0  # bob has no quota
    assert manager.measured() == [("alice", None)]
    assert manager.quota("p1", "alice") == 100.0 and manager.quota("p1") is None


def test_a_default_user_client_quota_measures_each_pair_alone() -> None:
    quotas = ClientQuotas(WINDOW)
    quotas.apply({(D, D): {"producer_byte_rate": "100"},
                  (None, "app"): {"producer_byte_rate": "1000000"}})
    produce = quotas.produce
    assert produce.record("app", 1500.0, 0.0, user="alice") > 0  # (D, D) beats (-, app)
    assert produce.record("app", 900.0, 0.0, user="bob") == 0  # bob's own pair
    assert produce.record("other", 900.0, 0.0, user="alice") == 0  # another pair
    assert sorted(produce.measured()) == [("alice", "app"), ("alice", "other"),
                                          ("bob", "app")]
    assert quotas.fetch.record("app", 10**9, 0.0, user="alice") == 0  # no fetch quota


def test_mutation_quota_by_user() -> None:
    manager = ControllerMutationQuotaManager(WINDOW)
    manager.set_quotas({("admin", None): 1.0})  # burst 11 partitions
    quota = manager.for_request("any-client", strict=True, user="admin")
    quota.record(20)
    assert quota.exceeded()
    assert manager.throttle_time("any-client", user="other") == 0
    assert manager.for_request("another-client", strict=True, user="admin").exceeded()
