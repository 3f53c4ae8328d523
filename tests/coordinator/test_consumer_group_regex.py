"""KIP-848's regular-expression subscriptions (``SubscribedTopicRegex``), sans-I/O: the
state machine of :mod:`odradek.coordinator.consumer_group` driven by hand, resolutions
made by :func:`odradek.coordinator.consumer_regex.resolve` (RE2, as the coordinator's
worker process runs it), and the records of a group with expressions replayed."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest

from odradek.coordinator.consumer_group import (
    REGEX_BATCH_REFRESH_INTERVAL_MS,
    ConsumerGroup,
    HeartbeatRequest,
    HeartbeatResult,
    TopicMetadata,
)
from odradek.coordinator.consumer_group_persistence import (
    records_for_heartbeat,
    records_for_resolution,
    restore,
    snapshot_of,
)
from odradek.coordinator.consumer_group_records import ConsumerGroupRegularExpressionKey
from odradek.coordinator.consumer_group_replay import replay
from odradek.coordinator.consumer_regex import regex_error, resolve
from odradek.protocol.errors import ErrorCode

INTERVAL = REGEX_BATCH_REFRESH_INTERVAL_MS


def cluster(**sizes: int) -> dict[str, TopicMetadata]:
    return {name.replace("_", "-"): TopicMetadata(
        uuid.uuid5(uuid.NAMESPACE_DNS, name), name.replace("_", "-"), n)
        for name, n in sizes.items()}


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name.replace("-", "_"))


def join(member_id: str, regex: str | None = None, *names: str) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, 0, rebalance_timeout_ms=30_000,
                            subscribed_topic_names=names, subscribed_topic_regex=regex,
                            owned={})


def beat(member_id: str, epoch: int, owned: Mapping[uuid.UUID, frozenset[int]] | None = None,
         regex: str | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, epoch, owned=owned, subscribed_topic_regex=regex)


def topic_names(result: HeartbeatResult, topics: Mapping[str, TopicMetadata]) -> set[str]:
    assert result.assignment is not None
    by_id = {t.topic_id: t.name for t in topics.values()}
    return {by_id[t] for t, ps in result.assignment.items() if ps}


def refresh(group: ConsumerGroup, topics: Mapping[str, TopicMetadata], now_ms: int,
            version: int = 0, allowed: set[str] | None = None) -> bool | None:
    """What the coordinator does after a heartbeat: a due refresh resolved (by RE2) and
    applied. None when none was due."""
    regexes = group.regex_refresh_due(now_ms, version)
    if regexes is None:
        return None
    matched = resolve(regexes, list(topics))
    resolved: dict[str, set[str]] = {r: {t for t in ts if allowed is None or t in allowed}
                for r, ts in matched.items()}
    return group.apply_resolved(resolved, topics, version, now_ms)


# ------------------------------------------------------------------ dialect
@pytest.mark.parametrize(("regex", "description"), [
    ("orders-[", "missing closing ]"),
    ("(orders", "missing closing )"),
    (r"(a)\1", "invalid escape sequence"),  # backreferences: RE2 has none
    ("(?=orders)", "invalid or unsupported Perl syntax"),  # nor lookarounds
    ("(?<!x)orders", "invalid or unsupported Perl syntax"),
    ("a++", "invalid nested repetition operator"),  # nor possessive quantifiers
    ("*orders", "missing argument to repetition operator"),
    ("a{1001}", "invalid repeat count"),
])
def test_what_re2_refuses_is_kafkas_invalid_regular_expression(regex: str,
                                                              description: str) -> None:
    assert regex_error(regex) == (
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}.")


def test_a_regex_matches_whole_names_internal_topics_included() -> None:
    names = ["orders-eu", "orders-us", "old-orders-eu", "orders", "__consumer_offsets"]
    assert resolve(["orders-.*", "^orders-e.$", "ORDERS.*", "__.*", "(?i)ORDERS"], names) == {
        "orders-.*": ["orders-eu", "orders-us"], "^orders-e.$": ["orders-eu"],
        "ORDERS.*": [], "__.*": ["__consumer_offsets"], "(?i)ORDERS": ["orders"]}


def test_many_distinct_regexes_are_resolved_in_sets() -> None:
    names = [f"t-{i}" for i in range(2_000)]
    regexes = [f"t-{i}" for i in range(1_000)] + ["t-1.*"]
    resolved = resolve(regexes, names)
    assert all(resolved[f"t-{i}"] == [f"t-{i}"] for i in range(1_000))
    assert len(resolved["t-1.*"]) == 1 + 10 + 100 + 1_000


# ------------------------------------------------------------------ subscriptions
def test_a_regex_member_gets_the_matching_topics_once_they_are_resolved() -> None:
    topics = cluster(orders_eu=2, orders_us=2, payments=2)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    # not resolved yet: the member joins subscribed to nothing
    assert first.error == ErrorCode.none and first.assignment == {}
    assert group.regex_refresh_due(0, 0) == frozenset({"orders-.*"})
    assert refresh(group, topics, 0) is True  # the epoch moves
    assert group.subscribed_topics() == {"orders-eu", "orders-us"}
    second = group.heartbeat(beat("m", first.member_epoch, {}), topics, 10)
    assert second.member_epoch == group.group_epoch
    assert topic_names(second, topics) == {"orders-eu", "orders-us"}


def test_names_and_a_regex_together_are_a_union() -> None:
    topics = cluster(orders_eu=1, payments=1, audit=1)
    group = ConsumerGroup("g")
    group.heartbeat(join("m", "orders-.*", "audit"), topics, 0)
    refresh(group, topics, 0)
    answer = group.heartbeat(beat("m", 1, {}), topics, 1)
    assert topic_names(answer, topics) == {"orders-eu", "audit"}


def test_one_resolution_per_distinct_regex_shared_by_its_members() -> None:
    topics = cluster(orders_eu=2, orders_us=2)
    group = ConsumerGroup("g")
    group.heartbeat(join("m1", "orders-.*"), topics, 0)
    refresh(group, topics, 0)
    epoch = group.group_epoch
    # a second member with the same expression: already resolved, no refresh; the group
    # epoch moves for it at once (Kafka: bumpGroupEpoch when it is resolved)
    group.heartbeat(join("m2", "orders-.*"), topics, 1)
    assert group.group_epoch == epoch + 1
    assert group.regex_refresh_due(INTERVAL + 1, 0) is None
    assert list(group.resolved_regexes) == ["orders-.*"]
    assert group.subscribed_regexes() == {"orders-.*": 2}
    owned = {m: sorted(t for t, ps in group.target[m].items() for _ in ps) for m in group.members}
    assert sum(len(v) for v in owned.values()) == 4 and all(owned.values())


def test_a_new_matching_topic_is_picked_up_at_the_next_due_refresh() -> None:
    topics = cluster(orders_eu=1, payments=1)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    refresh(group, topics, 0, version=3)
    answer = group.heartbeat(beat("m", first.member_epoch, {}), topics, 1)
    owned = dict(answer.assignment or {})
    # orders-us is created (the coordinator's topics version moves) ...
    topics = cluster(orders_eu=1, payments=1, orders_us=1)
    # ... no refresh before 10 s since the last one (Kafka's batch interval)
    assert group.regex_refresh_due(INTERVAL, 4) is None
    # ... nor when the topics did not change
    assert group.regex_refresh_due(INTERVAL + 1, 3) is None
    assert refresh(group, topics, INTERVAL + 1, version=4) is True
    answer = group.heartbeat(beat("m", answer.member_epoch, owned), topics, INTERVAL + 2)
    assert topic_names(answer, topics) == {"orders-eu", "orders-us"}
    # a refresh that finds the same topics keeps the epoch
    epoch = group.group_epoch
    assert refresh(group, topics, 3 * INTERVAL, version=5) is False
    assert group.group_epoch == epoch


def test_a_deleted_matching_topic_leaves_at_the_next_heartbeat() -> None:
    topics = cluster(orders_eu=1, orders_us=1)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    refresh(group, topics, 0)
    answer = group.heartbeat(beat("m", first.member_epoch, {}), topics, 1)
    owned = dict(answer.assignment or {})
    del topics["orders-us"]
    answer = group.heartbeat(beat("m", answer.member_epoch, owned), topics, 2)
    assert topic_names(answer, topics) == {"orders-eu"}


def test_a_resolution_is_filtered_by_what_the_member_may_describe() -> None:
    topics = cluster(orders_eu=1, orders_us=1)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    refresh(group, topics, 0, allowed={"orders-eu"})
    answer = group.heartbeat(beat("m", first.member_epoch, {}), topics, 1)
    assert topic_names(answer, topics) == {"orders-eu"}


def test_changing_or_dropping_a_regex() -> None:
    topics = cluster(orders_eu=1, payments_eu=1)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    refresh(group, topics, 0)
    answer = group.heartbeat(beat("m", first.member_epoch, {}), topics, 1)
    # another expression: the old one's resolution goes with its last subscriber
    answer = group.heartbeat(beat("m", answer.member_epoch, answer.assignment,
                                  regex="payments-.*"), topics, 2)
    assert list(group.resolved_regexes) == []
    assert group.regex_refresh_due(INTERVAL + 1, 0) == frozenset({"payments-.*"})
    refresh(group, topics, INTERVAL + 1)
    answer = group.heartbeat(beat("m", answer.member_epoch, {}), topics, INTERVAL + 2)
    assert topic_names(answer, topics) == {"payments-eu"}
    # "" is no expression: the member is subscribed to nothing
    answer = group.heartbeat(beat("m", answer.member_epoch, answer.assignment, regex=""),
                             topics, INTERVAL + 3)
    assert group.resolved_regexes == {} and group.subscribed_topics() == frozenset()
    assert group.target["m"] == {}


def test_a_leaving_member_takes_its_regexes_resolution_when_last() -> None:
    topics = cluster(orders_eu=2)
    group = ConsumerGroup("g")
    group.heartbeat(join("m1", "orders-.*"), topics, 0)
    group.heartbeat(join("m2", "orders-.*"), topics, 0)
    refresh(group, topics, 0)
    group.heartbeat(beat("m1", -1), topics, 1)
    assert list(group.resolved_regexes) == ["orders-.*"]
    group.remove_member("m2")
    assert group.resolved_regexes == {}


def test_a_resolution_for_a_regex_no_one_subscribes_to_any_more_is_skipped() -> None:
    topics = cluster(orders_eu=1)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    due = group.regex_refresh_due(0, 0)
    assert due is not None
    group.heartbeat(beat("m", first.member_epoch, {}, regex="other"), topics, 1)
    late = {r: set(ts) for r, ts in resolve(due, list(topics)).items()}
    group.apply_resolved(late, topics, 0, 0)
    assert "orders-.*" not in group.resolved_regexes


def test_a_heartbeat_costs_no_resolution() -> None:
    # the resolutions are the group's, made when due: heartbeats of members with an
    # expression resolved already do not match anything
    topics = cluster(orders_eu=4)
    group = ConsumerGroup("g")
    for i in range(50):
        group.heartbeat(join(f"m{i}", f"orders-.*|x{i}"), topics, 0)
    assert group.regex_refresh_due(0, 0) == frozenset(f"orders-.*|x{i}" for i in range(50))
    refresh(group, topics, 0)
    assert group.regex_refresh_due(1, 0) is None
    assert len(group.resolved_regexes) == 50


# ------------------------------------------------------------------ records
def test_the_records_carry_the_regex_and_its_resolution_and_reload() -> None:
    topics = cluster(orders_eu=2, orders_us=2)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    before = snapshot_of(group)
    refresh(group, topics, 5, version=2)
    group.heartbeat(beat("m", first.member_epoch, {}), topics, 6)
    records = records_for_heartbeat(before, snapshot_of(group))
    assert [k for k, _ in records if isinstance(k, ConsumerGroupRegularExpressionKey)] == [
        ConsumerGroupRegularExpressionKey("g", "orders-.*")]
    loaded = replay(records_for_heartbeat(None, snapshot_of(group)))["g"]
    assert loaded.members["m"].subscribed_topic_regex == "orders-.*"
    value = loaded.resolved_regular_expressions["orders-.*"]
    assert (set(value.topics), value.version, value.timestamp) == (
        {"orders-eu", "orders-us"}, 2, 5)
    restored = restore(loaded, group.config, 100)
    assert restored.subscribed_topics() == group.subscribed_topics()
    assert restored.target == group.target
    # the failed-over coordinator carries on: the member's next heartbeat is answered
    # at its epoch, with no rebalance
    epoch = restored.group_epoch
    answer = restored.heartbeat(beat("m", group.members["m"].member_epoch,
                                     group.members["m"].assigned), topics, 200)
    assert answer.error == ErrorCode.none and restored.group_epoch == epoch
    # the last subscriber leaving: the resolution is tombstoned
    before = snapshot_of(restored)
    restored.heartbeat(beat("m", -1), topics, 300)
    records = records_for_heartbeat(before, snapshot_of(restored))
    assert (ConsumerGroupRegularExpressionKey("g", "orders-.*"), None) in records


@pytest.mark.parametrize("created", [False, True])
def test_the_records_of_a_refresh_without_walking_the_members(created: bool) -> None:
    """The coordinator writes a refresh with records_for_resolution (the members are not
    compared): the same records as the whole group's diff, and the same snapshot."""
    topics = cluster(orders_eu=2, audit=1)
    group = ConsumerGroup("g")
    for i in range(3):
        group.heartbeat(join(f"m{i}", "orders-.*" if i else "orders-e.", "audit"), topics, 0)
    refresh(group, topics, 0, version=1)
    before = snapshot_of(group)
    if created:
        topics = cluster(orders_eu=2, audit=1, orders_us=3)
    assert refresh(group, topics, INTERVAL + 1, version=2) is created
    records, after = records_for_resolution(before, group)
    assert records == records_for_heartbeat(before, snapshot_of(group))
    assert after == snapshot_of(group)


@pytest.mark.parametrize("seed", range(20))
def test_members_switching_between_names_and_regexes_never_share_a_partition(
        seed: int) -> None:
    """Three members heartbeat in a random order, each now and then switching its
    subscription between names, an expression, both and nothing, mid-reconciliation
    (owning what it was last told), with refreshes applied when due: no partition is
    ever held (assigned or pending revocation) by two members at once, and once they
    stop switching every subscribed partition ends up with exactly one member."""
    import random

    rng = random.Random(seed)
    topics = cluster(orders_eu=3, orders_us=2, payments=2, audit=1)
    subscriptions: list[tuple[tuple[str, ...] | None, str | None]] = [
        (("orders-eu", "payments"), ""), ((), "orders-.*"), (("audit",), "pay.*"),
        ((), ""), (("orders-us",), "(orders|audit).*"), (None, "p.*|audit")]
    group = ConsumerGroup("g")
    owned: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    epochs: dict[str, int] = {}
    now = 0
    for m in ("a", "b", "c"):
        names, regex = subscriptions[rng.randrange(len(subscriptions))]
        result = group.heartbeat(join(m, regex, *(names or ())), topics, now)
        assert result.error == ErrorCode.none
        epochs[m], owned[m] = result.member_epoch, dict(result.assignment or {})

    def check() -> None:
        holders: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for tp in member.held():
                assert tp not in holders, (tp, holders[tp], member.member_id)
                holders[tp] = member.member_id

    for step in range(300):
        now += rng.randrange(1, 4_000)
        m = rng.choice("abc")
        switching = step < 200 and rng.random() < 0.3
        names, regex = (subscriptions[rng.randrange(len(subscriptions))] if switching
                        else (None, None))
        request = HeartbeatRequest(
            m, epochs[m], owned=owned[m], subscribed_topic_regex=regex,
            subscribed_topic_names=names)
        result = group.heartbeat(request, topics, now)
        assert result.error == ErrorCode.none, result
        epochs[m] = result.member_epoch
        if result.assignment is not None:
            owned[m] = dict(result.assignment)
        check()
        refresh(group, topics, now)
        check()
    # settled: every partition some member subscribes to is held by exactly one of them
    wanted = {(t.topic_id, p) for name in group.subscribed_topics()
              for t in [topics[name]] for p in range(t.num_partitions)}
    for _ in range(30):
        for m in "abc":
            now += 100
            result = group.heartbeat(HeartbeatRequest(m, epochs[m], owned=owned[m]),
                                     topics, now)
            epochs[m] = result.member_epoch
            if result.assignment is not None:
                owned[m] = dict(result.assignment)
            check()
    held = {(t, p) for m in "abc" for t, ps in owned[m].items() for p in ps}
    assert held == wanted


def test_a_matching_topic_deleted_and_created_again_under_its_name() -> None:
    """The resolution holds names: a matching topic deleted and created again (a new
    topic id, another partition count) is the new topic at the next heartbeat, the old
    topic's partitions revoked, and the next refresh changes nothing."""
    topics = cluster(orders_eu=2)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m", "orders-.*"), topics, 0)
    refresh(group, topics, 0)
    answer = group.heartbeat(beat("m", first.member_epoch, {}), topics, 1)
    assert answer.assignment == {tid("orders-eu"): frozenset({0, 1})}
    new_id = uuid.uuid4()
    again = {"orders-eu": TopicMetadata(new_id, "orders-eu", 3)}
    answer = group.heartbeat(beat("m", answer.member_epoch, answer.assignment), again, 2)
    assert answer.assignment == {}  # the old topic's partitions revoked first
    answer = group.heartbeat(beat("m", answer.member_epoch, {}), again, 3)
    assert answer.assignment == {new_id: frozenset({0, 1, 2})}
    epoch = group.group_epoch
    assert refresh(group, again, INTERVAL + 3, version=1) is False
    assert group.group_epoch == epoch
