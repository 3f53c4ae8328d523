"""Replaying consumer group records into a snapshot, and the records of a change."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.coordinator.consumer_group_records import (
    MEMBER_STATE_STABLE,
    MEMBER_STATE_UNRELEASED_PARTITIONS,
    MEMBER_STATE_UNREVOKED_PARTITIONS,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadata,
    TopicPartitions,
)
from odradek.coordinator.consumer_group_replay import (
    ConsumerGroupRecord,
    ConsumerGroupReplayer,
    ConsumerGroupReplayError,
    ConsumerGroupSnapshot,
    MemberSnapshot,
    encode_record,
    records_for_change,
    replay,
)
from odradek.coordinator.group_records import GroupMetadataKey, OffsetCommitKey

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA2)
META = {"foo": TopicMetadata(FOO, "foo", 3), "bar": TopicMetadata(BAR, "bar", 2)}


def _kinds(records: list[ConsumerGroupRecord]) -> list[tuple[str, str, bool]]:
    """(record kind, member id or "", is a tombstone) per record."""
    return [(type(k).__name__.removeprefix("ConsumerGroup").removesuffix("Key"),
             getattr(k, "member_id", ""), v is None) for k, v in records]


def _member(member_id: str, **kw: object) -> MemberSnapshot:
    base: dict[str, object] = dict(client_id="c", client_host="/127.0.0.1",
                                   subscribed_topic_names=("foo", "bar"),
                                   rebalance_timeout_ms=300_000)
    base.update(kw)
    return MemberSnapshot(member_id, **base)  # type: ignore[arg-type]


def _one_member_group() -> ConsumerGroupSnapshot:
    return ConsumerGroupSnapshot(
        "g", group_epoch=1, subscription_metadata=dict(META),
        members={"a": _member("a", member_epoch=1, assigned={FOO: frozenset({0, 1, 2}),
                                                               BAR: frozenset({0, 1})})},
        target_assignment={"a": {FOO: frozenset({0, 1, 2}), BAR: frozenset({0, 1})}},
        assignment_epoch=1,
    )


def _two_members_mid_reconciliation() -> ConsumerGroupSnapshot:
    """b joined at epoch 2: a must revoke foo-2 and bar-1 first (unrevoked), b waits for
    them (unreleased) and has foo-... nothing free yet."""
    return ConsumerGroupSnapshot(
        "g", group_epoch=2, subscription_metadata=dict(META),
        members={
            "a": _member("a", member_epoch=1, previous_member_epoch=0,
                         state=MEMBER_STATE_UNREVOKED_PARTITIONS,
                         assigned={FOO: frozenset({0, 1}), BAR: frozenset({0})},
                         pending_revocation={FOO: frozenset({2}), BAR: frozenset({1})}),
            "b": _member("b", member_epoch=2, previous_member_epoch=0,
                         state=MEMBER_STATE_UNRELEASED_PARTITIONS, instance_id="i-b"),
        },
        target_assignment={"a": {FOO: frozenset({0, 1}), BAR: frozenset({0})},
                           "b": {FOO: frozenset({2}), BAR: frozenset({1})}},
        assignment_epoch=2,
    )


# -- the order of records --------------------------------------------------------------


def test_a_new_group_is_written_in_kafkas_heartbeat_order() -> None:
    records = records_for_change(None, _one_member_group())
    assert _kinds(records) == [
        ("MemberMetadata", "a", False),
        ("PartitionMetadata", "", False),
        ("Metadata", "", False),
        ("TargetAssignmentMember", "a", False),
        ("TargetAssignmentMetadata", "", False),
        ("CurrentMemberAssignment", "a", False),
    ]
    assert records[2][1] == ConsumerGroupMetadataValue(1)
    assert records[3][1] == ConsumerGroupTargetAssignmentMemberValue(
        (TopicPartitions(BAR, (0, 1)), TopicPartitions(FOO, (0, 1, 2)))  # by topic id
    )


def test_a_join_writes_only_what_changed() -> None:
    before = _one_member_group()
    after = _two_members_mid_reconciliation()
    assert _kinds(records_for_change(before, after)) == [
        ("MemberMetadata", "b", False),
        ("Metadata", "", False),  # the group epoch: 1 -> 2 (the topics did not change)
        ("TargetAssignmentMember", "a", False),
        ("TargetAssignmentMember", "b", False),
        ("TargetAssignmentMetadata", "", False),
        ("CurrentMemberAssignment", "a", False),
        ("CurrentMemberAssignment", "b", False),
    ]
    assert records_for_change(after, after) == []


def test_a_leave_writes_the_members_tombstones_first() -> None:
    before = _two_members_mid_reconciliation()
    after = _one_member_group()
    after.group_epoch = after.assignment_epoch = 3
    after.members["a"].member_epoch = 3
    after.members["a"].previous_member_epoch = 1
    assert _kinds(records_for_change(before, after)) == [
        ("CurrentMemberAssignment", "b", True),
        ("TargetAssignmentMember", "b", True),
        ("MemberMetadata", "b", True),
        ("Metadata", "", False),
        ("TargetAssignmentMember", "a", False),
        ("TargetAssignmentMetadata", "", False),
        ("CurrentMemberAssignment", "a", False),
    ]


def test_a_deleted_group_is_kafkas_tombstones() -> None:
    group = _two_members_mid_reconciliation()
    group.resolved_regular_expressions["f.*"] = ConsumerGroupRegularExpressionValue(
        ("foo",), 10, 1000)
    assert _kinds(records_for_change(group, None)) == [
        ("CurrentMemberAssignment", "a", True),
        ("CurrentMemberAssignment", "b", True),
        ("TargetAssignmentMember", "a", True),
        ("TargetAssignmentMember", "b", True),
        ("TargetAssignmentMetadata", "", True),
        ("MemberMetadata", "a", True),
        ("MemberMetadata", "b", True),
        ("RegularExpression", "", True),
        ("PartitionMetadata", "", True),
        ("Metadata", "", True),
    ]
    assert records_for_change(None, None) == []


def test_records_of_two_groups_do_not_mix() -> None:
    with pytest.raises(ValueError, match="from group 'g' to 'h'"):
        records_for_change(ConsumerGroupSnapshot("g"), ConsumerGroupSnapshot("h"))


# -- replay ----------------------------------------------------------------------------


def test_a_group_reloads_in_the_middle_of_a_reconciliation() -> None:
    """A failover between the join of b and a's revocation: the new coordinator has a
    still owing foo-2 and bar-1 and b waiting for them, at the same epochs."""
    first = _one_member_group()
    second = _two_members_mid_reconciliation()
    log = records_for_change(None, first) + records_for_change(first, second)
    groups = replay(log)
    assert groups == {"g": second}
    a, b = groups["g"].members["a"], groups["g"].members["b"]
    assert (a.state, a.member_epoch, a.pending_revocation) == (
        MEMBER_STATE_UNREVOKED_PARTITIONS, 1, {FOO: frozenset({2}), BAR: frozenset({1})})
    assert (b.state, b.member_epoch, b.assigned, b.instance_id) == (
        MEMBER_STATE_UNRELEASED_PARTITIONS, 2, {}, "i-b")


def test_replay_from_bytes_skips_other_records() -> None:
    replayer = ConsumerGroupReplayer()
    assert not replayer.replay_bytes(GroupMetadataKey("classic").encode(), b"\x00\x03")
    assert not replayer.replay_bytes(OffsetCommitKey("g", "foo", 0).encode(), None)
    for record in records_for_change(None, _one_member_group()):
        assert replayer.replay_bytes(*encode_record(record))
    assert replayer.groups == {"g": _one_member_group()}


def test_a_member_tombstone_before_its_assignment_tombstones_is_refused() -> None:
    log = records_for_change(None, _one_member_group())
    with pytest.raises(ConsumerGroupReplayError, match="before the tombstone of its current"):
        replay([*log, (ConsumerGroupMemberMetadataKey("g", "a"), None)])
    with pytest.raises(ConsumerGroupReplayError, match="before the tombstone of its target"):
        replay([*log, (ConsumerGroupCurrentMemberAssignmentKey("g", "a"), None),
                (ConsumerGroupMemberMetadataKey("g", "a"), None)])


def test_a_group_tombstone_with_members_or_targets_is_refused() -> None:
    log = records_for_change(None, _one_member_group())
    with pytest.raises(ConsumerGroupReplayError, match="still has 1 members"):
        replay([*log, (ConsumerGroupMetadataKey("g"), None)])
    with pytest.raises(ConsumerGroupReplayError, match="target assignment of group 'g'"):
        replay([*log, (ConsumerGroupTargetAssignmentMetadataKey("g"), None)])
    without_members = [
        *log,
        (ConsumerGroupCurrentMemberAssignmentKey("g", "a"), None),
        (ConsumerGroupTargetAssignmentMemberKey("g", "a"), None),
        (ConsumerGroupMemberMetadataKey("g", "a"), None),
    ]
    with pytest.raises(ConsumerGroupReplayError, match="before the tombstone of its target "
                                                       "assignment metadata"):
        replay([*without_members, (ConsumerGroupMetadataKey("g"), None)])
    assert replay([*without_members, (ConsumerGroupTargetAssignmentMetadataKey("g"), None),
                   (ConsumerGroupMetadataKey("g"), None)]) == {}


def test_tombstones_of_what_is_absent_are_ignored() -> None:
    assert replay([
        (ConsumerGroupMetadataKey("g"), None),
        (ConsumerGroupMemberMetadataKey("g", "m"), None),
        (ConsumerGroupRegularExpressionKey("g", "x"), None),
    ]) == {}
    groups = replay([(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(4)),
                     (ConsumerGroupMemberMetadataKey("g", "m"), None),
                     (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), None)])
    assert groups == {"g": ConsumerGroupSnapshot("g", group_epoch=4)}


def test_any_record_creates_its_group_and_member() -> None:
    """As Kafka's getOrMaybeCreatePersistedConsumerGroup / getOrMaybeCreateMember: after
    compaction the records of a group come in the order of their last writes."""
    groups = replay([
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
         ConsumerGroupCurrentMemberAssignmentValue(5, 4, MEMBER_STATE_STABLE,
                                                   (TopicPartitions(FOO, (1,)),), ())),
        (ConsumerGroupTargetAssignmentMetadataKey("g"),
         ConsumerGroupTargetAssignmentMetadataValue(5)),
    ])
    assert groups == {"g": ConsumerGroupSnapshot(
        "g", members={"m": MemberSnapshot("m", member_epoch=5, previous_member_epoch=4,
                                          assigned={FOO: frozenset({1})})},
        assignment_epoch=5)}


# -- random changes --------------------------------------------------------------------

_MEMBER_IDS = ("m0", "m1", "m2", "m3", "m4")
_TOPICS = {"foo": FOO, "bar": BAR, "baz": uuid.UUID(int=0xBA3)}


def _random_assignment(rng: random.Random) -> dict[uuid.UUID, frozenset[int]]:
    out = {}
    for topic_id in rng.sample(sorted(_TOPICS.values()), rng.randint(0, 3)):
        partitions = frozenset(rng.sample(range(6), rng.randint(1, 3)))
        out[topic_id] = partitions
    return out


def _random_member(rng: random.Random, member_id: str) -> MemberSnapshot:
    return MemberSnapshot(
        member_id,
        instance_id=rng.choice([None, f"i-{member_id}"]),
        rack_id=rng.choice([None, "r1", "r2"]),
        client_id=rng.choice(["c1", "c2"]),
        client_host=rng.choice(["/10.0.0.1", "/10.0.0.2"]),
        subscribed_topic_names=tuple(rng.sample(sorted(_TOPICS), rng.randint(0, 3))),
        subscribed_topic_regex=rng.choice([None, "ba.*"]),
        rebalance_timeout_ms=rng.choice([-1, 30_000, 300_000]),
        server_assignor=rng.choice([None, "uniform", "range"]),
        member_epoch=rng.randint(-1, 9),
        previous_member_epoch=rng.randint(-1, 9),
        state=rng.choice([0, 1, 2]),
        assigned=_random_assignment(rng),
        pending_revocation=_random_assignment(rng),
    )


def _random_change(rng: random.Random, group: ConsumerGroupSnapshot | None,
                   ) -> ConsumerGroupSnapshot | None:
    if group is not None and rng.random() < 0.05:
        return None
    if group is None:
        group = ConsumerGroupSnapshot("g")
    members = {}
    for member_id in _MEMBER_IDS:
        old = group.members.get(member_id)
        roll = rng.random()
        if (old is None and roll < 0.3) or (old is not None and roll < 0.15):
            members[member_id] = _random_member(rng, member_id)
        elif old is not None and roll < 0.85:
            members[member_id] = old
    targets = {m: (_random_assignment(rng) if rng.random() < 0.3 else
                   group.target_assignment.get(m, {}))
               for m in members if rng.random() < 0.95}
    names = rng.sample(sorted(_TOPICS), rng.randint(0, 3))
    regexes = {r: ConsumerGroupRegularExpressionValue(
        tuple(rng.sample(sorted(_TOPICS), 2)), rng.randint(0, 99), rng.randint(0, 9999))
        for r in ("ba.*", "f.*") if rng.random() < 0.5}
    return ConsumerGroupSnapshot(
        "g",
        group_epoch=group.group_epoch + rng.choice([0, 0, 1]),
        subscription_metadata={n: TopicMetadata(_TOPICS[n], n, rng.choice([2, 3]))
                               for n in names} if rng.random() < 0.3
        else dict(group.subscription_metadata),
        members=members,
        target_assignment=targets,
        assignment_epoch=group.assignment_epoch + rng.choice([0, 1]),
        resolved_regular_expressions=regexes if rng.random() < 0.3
        else dict(group.resolved_regular_expressions),
    )


def _compacted(log: list[ConsumerGroupRecord]) -> list[ConsumerGroupRecord]:
    """What log compaction keeps: the last record of each key, in log order (tombstones
    included: their delete horizon has not passed)."""
    last = {k: i for i, (k, _) in enumerate(log)}
    return [r for i, r in enumerate(log) if last[r[0]] == i]


@pytest.mark.parametrize("seed", range(40))
def test_replaying_every_change_gives_the_last_snapshot(seed: int) -> None:
    rng = random.Random(seed)
    group: ConsumerGroupSnapshot | None = None
    log: list[ConsumerGroupRecord] = []
    for _ in range(30):
        after = _random_change(rng, group)
        log += records_for_change(group, after)
        expected = {} if after is None else {"g": after}
        assert replay(log) == expected
        group = after
    # through the bytes, as a loader reads them
    replayer = ConsumerGroupReplayer()
    for record in log:
        replayer.replay_bytes(*encode_record(record))
    assert replayer.groups == ({} if group is None else {"g": group})
    # and after compaction
    assert replay(_compacted(log)) == ({} if group is None else {"g": group})


def test_a_current_assignment_tombstone_leaves_the_member_empty_at_epoch_minus_1() -> None:
    log = records_for_change(None, _two_members_mid_reconciliation())
    groups = replay([*log, (ConsumerGroupCurrentMemberAssignmentKey("g", "a"), None)])
    a = groups["g"].members["a"]
    assert (a.member_epoch, a.previous_member_epoch, a.assigned, a.pending_revocation) == (
        -1, -1, {}, {})
    assert a.subscribed_topic_names == ("foo", "bar")  # its subscription stays until its own
