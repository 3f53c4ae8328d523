"""The KIP-848 server-side assignors (odradek.coordinator.consumer_assignors).

Property tests over seeded random groups (each test walks ``CASES`` seeds, so a failure
names its seed and reproduces), plus Kafka's documented range example.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

import pytest

from odradek.coordinator.consumer_assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    RangeAssignor,
    SubscribedTopic,
    UniformAssignor,
)

CASES = 300
UNIFORM = ASSIGNORS["uniform"]
RANGE = ASSIGNORS["range"]

Topics = dict[uuid.UUID, SubscribedTopic]
Members = dict[str, MemberSubscription]


def _topic(topic_id: uuid.UUID, n: int) -> SubscribedTopic:
    return SubscribedTopic(topic_id, f"t-{topic_id.hex[:6]}", n, {})


def _member(
    member_id: str,
    subscribed: frozenset[uuid.UUID],
    assignment: Mapping[uuid.UUID, frozenset[int]] | None = None,
    instance_id: str | None = None,
) -> MemberSubscription:
    return MemberSubscription(member_id, instance_id, None, subscribed, dict(assignment or {}))


def _random_topics(rng: random.Random, max_topics: int = 6, max_partitions: int = 12) -> Topics:
    topics: Topics = {}
    for _ in range(rng.randint(1, max_topics)):
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        topics[topic_id] = _topic(topic_id, rng.randint(1, max_partitions))
    return topics


def _member_ids(rng: random.Random, count: int) -> list[str]:
    return rng.sample([f"member-{i:03d}" for i in range(1000)], count)


def _random_group(rng: random.Random, *, homogeneous: bool) -> tuple[Members, Topics]:
    """A group whose members already hold a random, possibly invalid, current assignment:
    partitions of topics they do not subscribe to, past the end of the topic, owned twice."""
    topics = _random_topics(rng)
    topic_ids = sorted(topics)
    unknown = uuid.UUID(int=rng.getrandbits(128))
    common = frozenset(rng.sample(topic_ids, rng.randint(1, len(topic_ids))))
    if rng.random() < 0.2:
        common |= {unknown}  # a topic not (or no longer) in the metadata: skipped
    members: Members = {}
    for member_id in _member_ids(rng, rng.randint(1, 10)):
        subscribed = (
            common
            if homogeneous
            else frozenset(rng.sample(topic_ids, rng.randint(0, len(topic_ids))))
        )
        current: dict[uuid.UUID, frozenset[int]] = {}
        if rng.random() < 0.6:
            for topic_id in rng.sample(topic_ids, rng.randint(0, len(topic_ids))):
                n = topics[topic_id].num_partitions
                current[topic_id] = frozenset(rng.sample(range(n + 2), rng.randint(0, n)))
        instance_id = f"instance-{rng.randrange(100)}" if rng.random() < 0.3 else None
        members[member_id] = _member(member_id, subscribed, current, instance_id)
    return members, topics


def _check_valid(members: Members, topics: Topics, result: Assignment) -> None:
    """Every member present; every subscribed partition exactly once, to a subscriber."""
    assert set(result) == set(members)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, by_topic in result.items():
        for topic_id, parts in by_topic.items():
            assert parts, f"{member_id} has an empty entry for {topic_id}"
            assert isinstance(parts, frozenset)
            assert topic_id in members[member_id].subscribed_topic_ids
            assert topic_id in topics
            for p in parts:
                assert 0 <= p < topics[topic_id].num_partitions
                assert (topic_id, p) not in owner, (
                    f"{topic_id}-{p} to {owner[topic_id, p]} and {member_id}"
                )
                owner[topic_id, p] = member_id
    subscribed = {t for m in members.values() for t in m.subscribed_topic_ids if t in topics}
    expected = {(t, p) for t in subscribed for p in range(topics[t].num_partitions)}
    assert set(owner) == expected


def _count(assignment: Mapping[uuid.UUID, frozenset[int]]) -> int:
    return sum(len(p) for p in assignment.values())


def _pairs(assignment: Mapping[uuid.UUID, frozenset[int]]) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, parts in assignment.items() for p in parts}


def _with_assignment(members: Members, result: Assignment) -> Members:
    return {
        m: _member(m, s.subscribed_topic_ids, result[m], s.instance_id) for m, s in members.items()
    }


def _shuffled(rng: random.Random, mapping: Mapping[str, MemberSubscription] | Topics) -> dict:  # type: ignore[type-arg]
    items = list(mapping.items())
    rng.shuffle(items)
    return dict(items)


def _max_kept(counts: list[int], total: int) -> int:
    """The most partitions members holding ``counts`` (valid, disjoint) can keep in a
    balanced assignment of ``total``: the extra slots go to the largest holders."""
    quota, extra = divmod(total, len(counts))
    ordered = sorted(counts, reverse=True)
    return sum(min(c, quota + (1 if k < extra else 0)) for k, c in enumerate(ordered))


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
@pytest.mark.parametrize("homogeneous", [True, False], ids=["homogeneous", "heterogeneous"])
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
    assignor, homogeneous: bool
) -> None:
    for seed in range(CASES):
        members, topics = _random_group(random.Random(seed), homogeneous=homogeneous)
        _check_valid(members, topics, assignor.assign(members, topics))


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_output_depends_on_the_input_only_not_on_mapping_order(assignor) -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        members, topics = _random_group(rng, homogeneous=rng.random() < 0.5)
        first = assignor.assign(members, topics)
        again = assignor.assign(_shuffled(rng, members), _shuffled(rng, topics))
        assert again == first, seed


def test_uniform_homogeneous_is_balanced_and_keeps_the_most_it_can() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        topics = _random_topics(rng)
        subscribed = frozenset(topics)
        every = [(t, p) for t in sorted(topics) for p in range(topics[t].num_partitions)]
        # Valid, disjoint current assignments over part of the partitions.
        ids = _member_ids(rng, rng.randint(1, 10))
        holders: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in ids}
        for t, p in every:
            if rng.random() < 0.7:
                holders[rng.choice(ids)].setdefault(t, set()).add(p)
        members = {
            m: _member(m, subscribed, {t: frozenset(s) for t, s in holders[m].items()}) for m in ids
        }
        result = UNIFORM.assign(members, topics)
        _check_valid(members, topics, result)
        counts = [_count(result[m]) for m in ids]
        assert max(counts) - min(counts) <= 1, seed
        kept = sum(len(_pairs(result[m]) & _pairs(members[m].assignment)) for m in ids)
        assert kept == _max_kept([_count(members[m].assignment) for m in ids], len(every)), seed


def test_uniform_a_member_joining_moves_only_what_it_must() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        topics = _random_topics(rng)
        subscribed = frozenset(topics)
        ids = _member_ids(rng, rng.randint(1, 10) + 1)
        newcomer = ids.pop()
        members = {m: _member(m, subscribed) for m in ids}
        before = UNIFORM.assign(members, topics)
        joined = _with_assignment(members, before)
        joined[newcomer] = _member(newcomer, subscribed)
        after = UNIFORM.assign(joined, topics)
        _check_valid(joined, topics, after)
        total = sum(t.num_partitions for t in topics.values())
        # Nobody but the newcomer gains; it gets its share and no more.
        for m in ids:
            assert _pairs(after[m]) <= _pairs(before[m]), seed
        assert _count(after[newcomer]) == total // len(joined), seed
        moved = sum(len(_pairs(before[m]) - _pairs(after[m])) for m in ids)
        assert moved == total - _max_kept([_count(before[m]) for m in ids] + [0], total), seed


def test_uniform_a_member_leaving_moves_only_its_partitions() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        topics = _random_topics(rng)
        subscribed = frozenset(topics)
        ids = _member_ids(rng, rng.randint(2, 10))
        members = {m: _member(m, subscribed) for m in ids}
        before = UNIFORM.assign(members, topics)
        leaver = rng.choice(ids)
        left = {m: s for m, s in _with_assignment(members, before).items() if m != leaver}
        after = UNIFORM.assign(left, topics)
        _check_valid(left, topics, after)
        counts = [_count(after[m]) for m in left]
        assert max(counts) - min(counts) <= 1, seed
        for m in left:
            assert _pairs(after[m]) >= _pairs(before[m]), seed


@pytest.mark.parametrize("homogeneous", [True, False], ids=["homogeneous", "heterogeneous"])
def test_uniform_topics_growing_partitions(homogeneous: bool) -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        members, topics = _random_group(rng, homogeneous=homogeneous)
        members = {
            m: _member(m, s.subscribed_topic_ids, {}, s.instance_id) for m, s in members.items()
        }
        before = UNIFORM.assign(members, topics)
        grown = {
            t: _topic(t, s.num_partitions + (rng.randint(1, 8) if rng.random() < 0.5 else 0))
            for t, s in topics.items()
        }
        current = _with_assignment(members, before)
        after = UNIFORM.assign(current, grown)
        _check_valid(current, grown, after)
        if homogeneous:
            counts = [_count(after[m]) for m in members]
            assert max(counts) - min(counts) <= 1, seed
            # New partitions fill the new room; no existing partition has to move.
            for m in members:
                assert _pairs(after[m]) >= _pairs(before[m]), seed


def _check_topic_balance(members: Members, topics: Topics, result: Assignment) -> None:
    """Kafka's heterogeneous balance: for every topic, no holder of one of its partitions
    has more than one partition more than any other subscriber of the topic."""
    sizes = {m: _count(a) for m, a in result.items()}
    for topic_id in topics:
        subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
        holders = [m for m in subscribers if result[m].get(topic_id)]
        if holders:
            assert max(sizes[m] for m in holders) - min(sizes[m] for m in subscribers) <= 1


def test_uniform_heterogeneous_balances_each_topic_among_its_subscribers() -> None:
    for seed in range(CASES):
        members, topics = _random_group(random.Random(seed), homogeneous=False)
        result = UNIFORM.assign(members, topics)
        _check_valid(members, topics, result)
        _check_topic_balance(members, topics, result)


@pytest.mark.parametrize("homogeneous", [True, False], ids=["homogeneous", "heterogeneous"])
def test_uniform_is_sticky_when_nothing_changes(homogeneous: bool) -> None:
    for seed in range(CASES):
        members, topics = _random_group(random.Random(seed), homogeneous=homogeneous)
        first = UNIFORM.assign(members, topics)
        again = UNIFORM.assign(_with_assignment(members, first), topics)
        assert again == first, seed


def test_uniform_heterogeneous_joining_member_takes_from_the_loaded() -> None:
    # Two topics: A (6 partitions) to everyone, B (4) to m1 only.
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    topics = {a: _topic(a, 6), b: _topic(b, 4)}
    members = {"m1": _member("m1", frozenset({a, b})), "m2": _member("m2", frozenset({a}))}
    before = UNIFORM.assign(members, topics)
    assert before["m1"][b] == frozenset(range(4))
    assert (_count(before["m1"]), _count(before["m2"])) == (5, 5)
    joined = _with_assignment(members, before)
    joined["m3"] = _member("m3", frozenset({a}))
    after = UNIFORM.assign(joined, topics)
    _check_valid(joined, topics, after)
    assert after["m1"][b] == frozenset(range(4))  # only m1 can take B: it stays put
    assert sorted(_count(after[m]) for m in joined) == [3, 3, 4]
    for m in ("m1", "m2"):
        assert _pairs(after[m]) <= _pairs(before[m])


def test_uniform_subscription_to_a_missing_topic_is_skipped() -> None:
    a, gone = uuid.UUID(int=1), uuid.UUID(int=9)
    topics = {a: _topic(a, 4)}
    members = {
        "m1": _member(
            "m1", frozenset({a, gone}), {gone: frozenset({0}), a: frozenset({0, 1, 2, 3})}
        ),
        "m2": _member("m2", frozenset({a})),
        "m3": _member("m3", frozenset()),
    }
    for assignor in (UNIFORM, RANGE):
        result = assignor.assign(members, topics)
        _check_valid(members, topics, result)
        assert result["m3"] == {}
    assert UNIFORM.assign(members, topics)["m1"] == {a: frozenset({0, 1})}
    assert UNIFORM.assign({}, topics) == {} and RANGE.assign({}, topics) == {}


def test_range_kafka_co_partitioning_example() -> None:
    # RangeAssignor's javadoc: M0 and M1 over T1 and T2 of 3 partitions each.
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    topics = {t1: _topic(t1, 3), t2: _topic(t2, 3)}
    both = frozenset({t1, t2})
    members = {"M0": _member("M0", both), "M1": _member("M1", both)}
    assert RANGE.assign(members, topics) == {
        "M0": {t1: frozenset({0, 1}), t2: frozenset({0, 1})},
        "M1": {t1: frozenset({2}), t2: frozenset({2})},
    }
    # After a rolling bounce the member ids change (M0 -> M3, M1 -> M2): dynamic members
    # swap ranges, static members (I0, I1) keep theirs.
    bounced = {"M3": _member("M3", both), "M2": _member("M2", both)}
    assert RANGE.assign(bounced, topics)["M3"] == {t1: frozenset({2}), t2: frozenset({2})}
    static = {
        "M0": _member("M0", both, instance_id="I0"),
        "M1": _member("M1", both, instance_id="I1"),
    }
    static_bounced = {
        "M3": _member("M3", both, instance_id="I0"),
        "M2": _member("M2", both, instance_id="I1"),
    }
    assert RANGE.assign(static, topics)["M0"] == RANGE.assign(static_bounced, topics)["M3"]
    assert RANGE.assign(static_bounced, topics)["M3"] == {
        t1: frozenset({0, 1}),
        t2: frozenset({0, 1}),
    }


def test_range_static_members_come_first() -> None:
    t = uuid.UUID(int=1)
    topics = {t: _topic(t, 5)}
    sub = frozenset({t})
    members = {
        "a": _member("a", sub),
        "b": _member("b", sub, instance_id="z"),
        "c": _member("c", sub, instance_id="y"),
    }
    assert RANGE.assign(members, topics) == {
        "c": {t: frozenset({0, 1})},
        "b": {t: frozenset({2, 3})},
        "a": {t: frozenset({4})},
    }


def test_range_gives_contiguous_balanced_co_partitioned_ranges() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        members, topics = _random_group(rng, homogeneous=rng.random() < 0.5)
        if rng.random() < 0.5:  # equal partition counts: co-partitioning is possible
            n = rng.randint(1, 12)
            topics = {t: _topic(t, n) for t in topics}
        result = RANGE.assign(members, topics)
        _check_valid(members, topics, result)
        for topic_id, topic in topics.items():
            subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
            if not subscribers:
                continue
            counts = [len(result[m].get(topic_id, ())) for m in subscribers]
            assert max(counts) - min(counts) <= 1
            assert sum(counts) == topic.num_partitions
            for m in subscribers:
                parts = sorted(result[m].get(topic_id, ()))
                if parts:
                    assert parts == list(range(parts[0], parts[0] + len(parts))), seed
        # The same subscriptions over topics of one partition count: every member gets the
        # same partition numbers of every topic.
        subscriptions = {s.subscribed_topic_ids & frozenset(topics) for s in members.values()}
        if len(subscriptions) == 1 and len({topics[t].num_partitions for t in topics}) == 1:
            (common,) = subscriptions
            for m in members:
                assert len({result[m].get(t, frozenset()) for t in common}) <= 1, seed


def test_assignors_by_name() -> None:
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert isinstance(ASSIGNORS["uniform"], UniformAssignor)
    assert isinstance(ASSIGNORS["range"], RangeAssignor)
    assert all(a.name == name for name, a in ASSIGNORS.items())


def test_unchanged_partitions_reuse_the_current_sets() -> None:
    # Copy-on-write, as Kafka's builders: a member whose partitions do not change gets
    # its current frozensets back, so the coordinator can compare them cheaply.
    t = uuid.UUID(int=1)
    topics = {t: _topic(t, 4)}
    current = {t: frozenset({0, 1})}
    members = {
        "a": _member("a", frozenset({t}), current),
        "b": _member("b", frozenset({t}), {t: frozenset({2, 3})}),
    }
    assert UNIFORM.assign(members, topics)["a"][t] is current[t]
