"""Online migration between classic and consumer groups (KIP-848; Kafka's
``GroupMetadataManager`` conversions and classic members in a consumer group): the
sans-I/O rules of ``consumer_group_migration``, then the coordinator driven directly over
the in-memory ``__consumer_offsets`` (upgrade, classic members, downgrade, reload)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import cast

import pytest

from odradek.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    MemberState,
    TopicMetadata,
)
from odradek.coordinator.consumer_group_migration import (
    ClassicJoin,
    MigrationPolicy,
    classic_group_from_consumer,
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_sync,
    consumer_group_from_classic,
    downgrade_refusal,
    upgrade_refusal,
)
from odradek.coordinator.group_coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    consumer_group_config,
)
from odradek.coordinator.group_metadata import GroupMetadata, MemberMetadata
from odradek.coordinator.group_protocol import decode_assignment, encode_assignment
from odradek.coordinator.group_state import LOAD_PATHS, GroupState
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.protocol.errors import ErrorCode
from tests.coordinator._offsets_topic import Clock, FakeOffsetsTopic

TOPIC = TopicMetadata(uuid.UUID(int=7), "t", 4)
TOPICS = {"t": TOPIC}
T = TOPIC.topic_id


def subscription(*topics: str, owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription: v0 (eager, what kafka-python sends), v1 with the
    owned partitions when given."""
    out = struct.pack(">hi", 1 if owned is not None else 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    if owned is not None:
        out += struct.pack(">i", len(owned))
        for t, ps in owned.items():
            out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
            out += b"".join(struct.pack(">i", p) for p in ps)
    return out


def stable_classic(assignments: dict[str, list[int]], generation: int = 3) -> GroupMetadata:
    group = GroupMetadata("g", generation_id=generation)
    for member_id, partitions in assignments.items():
        group.add(MemberMetadata(member_id, None, "kafka-python", "/127.0.0.1", 20_000, 10_000,
                                 "consumer", [("range", subscription("t"))],
                                 encode_assignment({"t": partitions})))
    group.protocol_name = "range"
    for state in LOAD_PATHS[GroupState.STABLE]:
        group.transition_to(state, 0)
    return group


def classic_join_request(member_id: str, owned: dict[str, list[int]] | None = None
                         ) -> ClassicJoin:
    return ClassicJoin(member_id, None, True, "kafka-python", "/127.0.0.1", 20_000, 10_000,
                       "consumer", (("range", subscription("t", owned=owned)),))


def consumer_join(member_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, 0, rebalance_timeout_ms=5000,
                            subscribed_topic_names=("t",), owned={})


def assert_no_partition_held_twice(group: ConsumerGroup) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member in group.members.values():
        for key in member.held():
            assert key not in seen, f"{key} held by {seen[key]} and {member.member_id}"
            seen[key] = member.member_id


# ==================================================================== the rules
def test_the_policy_parses_as_kafka_and_says_which_way() -> None:
    assert MigrationPolicy.parse("BiDirectional") is MigrationPolicy.BIDIRECTIONAL
    assert [(p.upgrade_enabled, p.downgrade_enabled) for p in MigrationPolicy] == [
        (False, False), (True, False), (False, True), (True, True)]
    with pytest.raises(ValueError, match="must be one of"):
        MigrationPolicy.parse("sideways")
    assert consumer_group_config({}).migration_policy == "bidirectional"
    assert consumer_group_config(
        {"group.consumer.migration.policy": "Upgrade"}).migration_policy == "upgrade"


def test_upgrade_conditions() -> None:
    classic = stable_classic({"a": [0, 1], "b": [2, 3]})
    assert upgrade_refusal(classic, MigrationPolicy.BIDIRECTIONAL, 10) is None
    assert upgrade_refusal(classic, MigrationPolicy.DOWNGRADE, 10) == (
        "the online upgrade is disabled")
    assert upgrade_refusal(classic, MigrationPolicy.UPGRADE, 1) == (
        "the group size exceeds the consumer group maximum size")
    classic.protocol_type = "connect"
    assert upgrade_refusal(classic, MigrationPolicy.UPGRADE, 10) == (
        "the group does not use the consumer embedded protocol")


def test_a_classic_group_converts_with_its_members_assignments_and_metadata() -> None:
    classic = stable_classic({"a": [0, 1], "b": [2, 3]}, generation=5)
    group = consumer_group_from_classic(classic, ConsumerGroup("g"), TOPICS, now_ms=100)
    assert (group.group_epoch, group.assignment_epoch) == (5, 5)
    a = group.members["a"]
    assert (a.member_epoch, a.previous_member_epoch, a.state) == (5, 5, MemberState.STABLE)
    assert a.assigned == {T: frozenset({0, 1})} and group.target["a"] == a.assigned
    assert a.subscribed_topic_names == {"t"}
    assert a.classic is not None and a.classic.session_timeout_ms == 10_000
    assert [p.name for p in a.classic.supported_protocols] == ["range"]
    assert a.session_deadline_ms == 100 + 10_000
    assert group.owner_of(T, 2) == "b"


def test_upgrade_then_reconciliation_never_gives_a_partition_before_its_release() -> None:
    group = consumer_group_from_classic(stable_classic({"a": [0, 1], "b": [2, 3]}),
                                        ConsumerGroup("g"), TOPICS, now_ms=0)
    # the consumer-protocol member joins: everything is held by the classic members
    joined = group.heartbeat(consumer_join("c"), TOPICS, 0)
    assert joined.error == ErrorCode.none and joined.assignment == {}
    assert group.group_epoch == 4
    assert_no_partition_held_twice(group)
    # the classic members are told to rejoin; generation = their member epoch (3)
    assert classic_heartbeat(group, "a", None, 3, 1)[0] == ErrorCode.rebalance_in_progress
    assert classic_heartbeat(group, "a", None, 4, 1)[0] == ErrorCode.illegal_generation
    assert group.members["a"].classic_deadline_ms == 1 + 20_000  # rejoin within
    # a SyncGroup before rejoining is answered the same
    assert classic_sync(group, "a", None, 3, "consumer", "range", 1).error == (
        ErrorCode.rebalance_in_progress)
    # a (eager) rejoins having revoked everything: it keeps its target only
    rejoin = classic_join(group, classic_join_request("a"), TOPICS, 2)
    assert (rejoin.error, rejoin.generation_id, rejoin.protocol_name) == (
        ErrorCode.none, 4, "range")
    assert_no_partition_held_twice(group)
    kept = group.members["a"].assigned
    synced = classic_sync(group, "a", None, 4, "consumer", "range", 3)
    assert synced.error == ErrorCode.none
    assert {t: frozenset(ps) for t, ps in decode_assignment(synced.assignment)
            .partitions.items()} == {"t": kept[T]}
    assert group.members["a"].classic_deadline_ms is None
    b_rejoin = classic_join(group, classic_join_request("b"), TOPICS, 4)
    assert b_rejoin.error == ErrorCode.none
    assert_no_partition_held_twice(group)
    # what a and b gave up reaches c, and only now
    beat = group.heartbeat(HeartbeatRequest("c", 4, owned={}), TOPICS, 5)
    assert beat.error == ErrorCode.none
    assert sum(len(ps) for ps in group.members["c"].assigned.values()) >= 1
    assert_no_partition_held_twice(group)
    held = sum(len(ps) for m in group.members.values() for ps in m.assigned.values())
    assert held == 4


def test_a_cooperative_classic_member_keeps_its_partitions_until_it_revokes() -> None:
    group = consumer_group_from_classic(stable_classic({"a": [0, 1, 2, 3]}),
                                        ConsumerGroup("g"), TOPICS, now_ms=0)
    group.heartbeat(consumer_join("c"), TOPICS, 0)
    # a rejoins declaring it still owns everything (v1 subscription, cooperative)
    owned = {"t": [0, 1, 2, 3]}
    rejoin = classic_join(group, classic_join_request("a", owned), TOPICS, 1)
    a = group.members["a"]
    assert a.state == MemberState.UNREVOKED_PARTITIONS and rejoin.generation_id == 3
    assert a.pending_revocation  # still its own: c gets nothing yet
    assert group.heartbeat(HeartbeatRequest("c", 4, owned={}), TOPICS, 2).assignment in (
        None, {})
    assert classic_heartbeat(group, "a", None, 3, 2)[0] == ErrorCode.rebalance_in_progress
    # the sync (still revoking) answers what it keeps
    assert classic_sync(group, "a", None, 3, None, None, 2).error == ErrorCode.none
    kept = {t: list(ps) for t, ps in a.assigned.items()}
    classic_join(group, classic_join_request("a", {"t": sorted(kept[T])}), TOPICS, 3)
    assert a.state == MemberState.STABLE and a.member_epoch == 4
    beat = group.heartbeat(HeartbeatRequest("c", 4, owned={}), TOPICS, 4)
    assert beat.assignment and beat.assignment[T]
    assert_no_partition_held_twice(group)


def test_classic_join_checks() -> None:
    group = ConsumerGroup("g")
    group.heartbeat(consumer_join("c"), TOPICS, 0)
    needs_id = classic_join(group, classic_join_request(""), TOPICS, 0)
    assert needs_id.error == ErrorCode.member_id_required and needs_id.member_id
    bad_type = ClassicJoin("x", None, False, "", "", 1, 1, "connect", (("range", b""),))
    assert classic_join(group, bad_type, TOPICS, 0).error == (
        ErrorCode.inconsistent_group_protocol)
    malformed = ClassicJoin("x", None, False, "", "", 1, 1, "consumer", (("range", b"\x00"),))
    assert classic_join(group, malformed, TOPICS, 0).error == (
        ErrorCode.inconsistent_group_protocol)
    # a consumer-protocol member cannot be driven by the classic APIs
    assert classic_heartbeat(group, "c", None, 1, 0)[0] == ErrorCode.unknown_member_id
    assert classic_leave(group, [("c", None)]) == [(ErrorCode.unknown_member_id, "c")]
    classic_join(group, classic_join_request("k"), TOPICS, 0)
    assert classic_join(group, ClassicJoin(
        "z", None, False, "", "", 1, 1, "consumer", (("roundrobin", subscription("t")),)),
        TOPICS, 0).error == ErrorCode.inconsistent_group_protocol
    assert classic_leave(group, [("k", None)]) == [(ErrorCode.none, "k")]
    assert "k" not in group.members



def test_a_classic_member_whose_session_expired_is_unknown_until_it_joins_again() -> None:
    """Kafka's answers to a classic member its session timeout fenced out of a consumer
    group: UNKNOWN_MEMBER_ID to its Heartbeat and SyncGroup (kafka-python then rejoins
    with an empty member id), and a JoinGroup with its old id makes it a member again
    (``getOrMaybeCreateMember``, creating)."""
    group = ConsumerGroup("g")
    group.heartbeat(consumer_join("c"), TOPICS, 0)
    assert classic_join(group, classic_join_request("k"), TOPICS, 0).error == ErrorCode.none
    epoch = group.members["k"].member_epoch
    assert classic_sync(group, "k", None, epoch, "consumer", "range", 0).error == (
        ErrorCode.none)
    assert classic_heartbeat(group, "k", None, epoch, 9_000)[0] in (
        ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert group.expire(18_999) == []  # its session (10 s) runs from its heartbeat
    assert group.expire(19_000) == [("k", "session timeout")]
    assert classic_heartbeat(group, "k", None, epoch, 19_001)[0] == ErrorCode.unknown_member_id
    assert classic_sync(group, "k", None, epoch, "consumer", "range", 19_001).error == (
        ErrorCode.unknown_member_id)
    again = classic_join(group, classic_join_request("k"), TOPICS, 19_001)
    assert again.error == ErrorCode.none and again.member_id == "k" and "k" in group.members

def test_downgrade_conditions_and_the_classic_group_built() -> None:
    group = consumer_group_from_classic(stable_classic({"a": [0, 1], "b": [2, 3]}),
                                        ConsumerGroup("g"), TOPICS, now_ms=0)
    group.heartbeat(consumer_join("c"), TOPICS, 0)
    policy = MigrationPolicy.BIDIRECTIONAL
    assert downgrade_refusal(group, {"a"}, policy, 10) == (
        "a member uses the consumer protocol")
    assert downgrade_refusal(group, {"c"}, policy, 10) is None
    assert downgrade_refusal(group, {"c"}, MigrationPolicy.UPGRADE, 10) == (
        "the online downgrade is disabled")
    assert downgrade_refusal(group, {"c"}, policy, 1) == (
        "its group size is greater than the classic group max size")
    assert downgrade_refusal(group, {"a", "b", "c"}, policy, 10) == "it is empty"
    classic = classic_group_from_consumer(group, {"c"}, now_ms=7)
    assert (classic.generation_id, classic.protocol_type, classic.protocol_name) == (
        group.group_epoch, "consumer", "range")
    assert set(classic.members) == {"a", "b"} and classic.is_in(GroupState.STABLE)
    assert classic.members["a"].session_timeout_ms == 10_000
    targets = {m: decode_assignment(classic.members[m].assignment).partitions
               for m in ("a", "b")}
    assert targets == {m: {"t": tuple(sorted(group.target[m][T]))} for m in ("a", "b")}


# ==================================================================== the coordinator
def run(body: Callable[[GroupCoordinator, FakeOffsetsTopic, Clock], Awaitable[None]],
        policy: str = "bidirectional") -> None:
    async def main() -> None:
        topic = FakeOffsetsTopic()
        clock = Clock()
        config = CoordinatorConfig(min_session_timeout_ms=1, consumer=ConsumerGroupConfig(
            migration_policy=policy))
        coordinator = GroupCoordinator(cast(OffsetsTopic, topic), config, time_ms=clock)
        coordinator.startup()
        try:
            await body(coordinator, topic, clock)
        finally:
            coordinator.shutdown()

    asyncio.run(asyncio.wait_for(main(), 20))


async def classic_member(c: GroupCoordinator) -> str:
    """One kafka-python-like member in a Stable classic group "g" owning t-0..3."""
    joined = await c.join_group("g", "", None, False, "kp", "/h", 20_000, 10_000,
                                "consumer", [("range", subscription("t"))])
    assert joined.error == ErrorCode.none and joined.leader_id == joined.member_id
    synced = await c.sync_group("g", joined.generation_id, joined.member_id, None,
                                "consumer", "range",
                                {joined.member_id: encode_assignment({"t": [0, 1, 2, 3]})})
    assert synced.error == ErrorCode.none
    return joined.member_id


def test_the_coordinator_upgrades_serves_classic_members_and_downgrades() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        kp = await classic_member(c)
        c.commit_offsets("g", kp, None, 1, {("t", 0): (5, -1, None)})
        # upgrade: the consumer-protocol member joins the classic group
        first = await c.consumer_group_heartbeat("g", consumer_join("c"), 1, TOPICS)
        assert first.error == ErrorCode.none and first.assignment == {}
        group = c.consumer_group("g")
        assert group is not None and group.members[kp].classic is not None
        assert c.groups["g"].members == {}  # the classic group is only its offsets
        assert c.manager.get_offsets("g", [("t", 0)])[("t", 0)] is not None
        # the classic member is served by the consumer group
        assert c.heartbeat("g", 1, kp, None) == ErrorCode.rebalance_in_progress
        rejoined = await c.join_group("g", kp, None, True, "kp", "/h", 20_000, 10_000,
                                      "consumer", [("range", subscription("t"))], TOPICS)
        assert (rejoined.error, rejoined.generation_id, rejoined.leader_id) == (
            ErrorCode.none, 2, "")
        synced = await c.sync_group("g", 2, kp, None, "consumer", "range", {})
        mine = set(decode_assignment(synced.assignment).partitions["t"])
        assert c.heartbeat("g", 2, kp, None) == ErrorCode.none
        assert c.commit_offsets("g", kp, None, 2, {("t", 0): (6, -1, None)}) == {
            ("t", 0): ErrorCode.none}
        assert c.commit_offsets("g", kp, None, 1, {("t", 0): (6, -1, None)}) == {
            ("t", 0): ErrorCode.illegal_generation}
        beat = await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("c", 2, owned={}), 1, TOPICS)
        theirs = set(beat.assignment[T]) if beat.assignment else set()
        assert theirs and not theirs & mine and theirs | mine == {0, 1, 2, 3}
        # a failover reloads a consumer group with its classic member
        partition = c.partition_for("g")
        c.on_resigned(partition)
        c.on_elected(partition)
        reloaded = c.consumer_group("g")
        assert reloaded is not None and reloaded.members[kp].classic is not None
        assert "g" not in c.groups or not c.groups["g"].members
        # downgrade: the consumer-protocol member leaves
        left = await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("c", -1), 1, TOPICS)
        assert left.error == ErrorCode.none
        assert c.consumer_group("g") is None
        classic = c.groups["g"]
        assert set(classic.members) == {kp} and classic.is_in(GroupState.PREPARING_REBALANCE)
        assert classic.offsets[("t", 0)].offset == 6
        assert c.heartbeat("g", 2, kp, None) == ErrorCode.rebalance_in_progress
        again = await c.join_group("g", kp, None, True, "kp", "/h", 20_000, 10_000,
                                   "consumer", [("range", subscription("t"))], TOPICS)
        assert again.error == ErrorCode.none and again.leader_id == kp
        # and a failover reloads the classic group
        c.on_resigned(partition)
        c.on_elected(partition)
        assert c.consumer_group("g") is None and set(c.groups["g"].members) == {kp}

    run(body)


def test_a_disabled_policy_keeps_the_group_classic() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        await classic_member(c)
        refused = await c.consumer_group_heartbeat("g", consumer_join("c"), 1, TOPICS)
        assert (refused.error, refused.message) == (
            ErrorCode.group_id_not_found, "Group g is not a consumer group.")
        assert c.consumer_group("g") is None

    run(body, policy="disabled")


def test_session_expiry_of_the_last_consumer_member_downgrades() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, clock: Clock) -> None:
        kp = await classic_member(c)
        await c.consumer_group_heartbeat("g", consumer_join("c"), 1, TOPICS)
        group = c.consumer_group("g")
        assert group is not None
        group.members[kp].session_deadline_ms = clock.now + 10**9  # only c expires
        group.members["c"].session_deadline_ms = clock.now + 30
        c._schedule_consumer_expiry(group)
        deadline = asyncio.get_running_loop().time() + 5
        clock.now += 100
        while c.consumer_group("g") is not None:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        assert set(c.groups["g"].members) == {kp}
        assert c.groups["g"].is_in(GroupState.PREPARING_REBALANCE)

    run(body)


def test_an_empty_classic_group_gives_way_and_its_record_is_tombstoned() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        kp = await classic_member(c)
        c.commit_offsets("g", kp, None, 1, {("t", 0): (5, -1, None)})
        assert c.leave_group("g", [(kp, None)]) == (ErrorCode.none, [ErrorCode.none])
        deadline = asyncio.get_running_loop().time() + 5
        while not c.groups["g"].is_in(GroupState.EMPTY):  # the join phase of none ends
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert c.groups["g"].generation_id == 2
        joined = await c.consumer_group_heartbeat("g", consumer_join("c"), 1, TOPICS)
        assert joined.error == ErrorCode.none
        assert (c.groups["g"].generation_id, c.groups["g"].protocol_type) == (0, None)
        partition = c.partition_for("g")
        c.on_resigned(partition)
        c.on_elected(partition)
        # reloaded: the consumer group, and the classic group's offsets only
        assert c.consumer_group("g") is not None
        holder = c.groups["g"]
        assert (holder.generation_id, holder.protocol_type) == (0, None)
        assert holder.offsets[("t", 0)].offset == 5

    run(body)


def test_a_classic_instance_replacing_the_last_consumer_static_member_downgrades() -> None:
    """Kafka's validateOnlineDowngradeWithReplacedMemberId: the group becomes classic
    without a rebalance; the new instance syncs the replaced member's assignment."""
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        kp = await classic_member(c)
        static = HeartbeatRequest("c", 0, instance_id="i1", rebalance_timeout_ms=5000,
                                  subscribed_topic_names=("t",), owned={})
        assert (await c.consumer_group_heartbeat("g", static, 1, TOPICS)).error == (
            ErrorCode.none)
        group = c.consumer_group("g")
        assert group is not None
        # kp rejoins (eager) so c gets its share
        await c.join_group("g", kp, None, True, "kp", "/h", 20_000, 10_000, "consumer",
                           [("range", subscription("t"))], TOPICS)
        await c.consumer_group_heartbeat("g", HeartbeatRequest("c", 2, owned={}), 1, TOPICS)
        theirs = dict(group.target["c"])
        assert theirs
        joined = await c.join_group("g", "", "i1", True, "new", "/h", 20_000, 10_000,
                                    "consumer", [("range", subscription("t"))], TOPICS)
        assert joined.error == ErrorCode.none and joined.leader_id == ""
        assert c.consumer_group("g") is None
        classic = c.groups["g"]
        assert classic.is_in(GroupState.STABLE)
        assert set(classic.members) == {kp, joined.member_id}
        assert joined.generation_id == classic.generation_id
        synced = await c.sync_group("g", joined.generation_id, joined.member_id, "i1",
                                    "consumer", joined.protocol_name, {})
        assert synced.error == ErrorCode.none
        assert set(decode_assignment(synced.assignment).partitions["t"]) == set(theirs[T])

    run(body)


def test_a_consumer_instance_takes_over_a_classic_static_member() -> None:
    """A static member whose client switched to the consumer protocol: the new instance
    replaces the classic one at once (no UNRELEASED_INSTANCE_ID) and is a consumer-protocol
    member, keeping the assignment."""
    group = ConsumerGroup("g")
    group.heartbeat(consumer_join("c"), TOPICS, 0)
    static = ClassicJoin("", "i1", True, "kp", "/h", 20_000, 10_000, "consumer",
                         (("range", subscription("t")),))
    joined = classic_join(group, static, TOPICS, 0)
    assert joined.error == ErrorCode.none
    old = group.members[joined.member_id]
    request = HeartbeatRequest("n", 0, instance_id="i1", rebalance_timeout_ms=5000,
                               subscribed_topic_names=("t",), owned={})
    result = group.heartbeat(request, TOPICS, 1)
    assert result.error == ErrorCode.none
    assert joined.member_id not in group.members and group.static_members["i1"] == "n"
    assert group.members["n"].classic is None
    assert group.members["n"].assigned == old.assigned
    assert_no_partition_held_twice(group)


def test_a_classic_instance_replacing_an_unreconciled_static_member_waits_for_a_rebalance(
) -> None:
    """The static replacement's downgrade without a rebalance hands out target
    assignments: while a member still holds partitions of another's target (here kp, an
    eager classic member that has not rejoined since the consumer member came, holding
    all four), the new instance must not be given them. The classic group rebalances and
    the new instance's JoinGroup waits for it, as any classic join does."""
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        kp = await classic_member(c)
        static = HeartbeatRequest("c", 0, instance_id="i1", rebalance_timeout_ms=5000,
                                  subscribed_topic_names=("t",), owned={})
        assert (await c.consumer_group_heartbeat("g", static, 1, TOPICS)).error == (
            ErrorCode.none)
        group = c.consumer_group("g")
        assert group is not None and group.target["c"] and not group.members["c"].assigned
        # c's client restarts as a classic client before kp rejoined: kp still owns t-0..3
        join = asyncio.ensure_future(c.join_group(
            "g", "", "i1", True, "new", "/h", 20_000, 10_000, "consumer",
            [("range", subscription("t"))], TOPICS))
        deadline = asyncio.get_running_loop().time() + 5
        while c.consumer_group("g") is not None and not join.done():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        classic = c.groups["g"]
        # a rebalance: kp is told to rejoin (its generation is behind), nobody has been
        # given a partition kp holds
        assert classic.is_in(GroupState.PREPARING_REBALANCE)
        assert not join.done()
        assert c.heartbeat("g", 1, kp, None) in (ErrorCode.rebalance_in_progress,
                                                 ErrorCode.illegal_generation)
        kp_join = asyncio.ensure_future(c.join_group(
            "g", kp, None, True, "kp", "/h", 20_000, 10_000, "consumer",
            [("range", subscription("t"))], TOPICS))
        joined, kp_joined = await asyncio.gather(join, kp_join)
        assert joined.error == kp_joined.error == ErrorCode.none
        assert joined.generation_id == kp_joined.generation_id == classic.generation_id

    run(body)


def test_a_syncgroup_does_not_lift_the_deadline_to_rejoin() -> None:
    """Kafka keeps a classic member's join timeout (scheduled when a Heartbeat answers
    REBALANCE_IN_PROGRESS) until it rejoins; a SyncGroup cancels only the sync timeout. A
    member that syncs instead of rejoining is fenced at that deadline, so the partitions
    it waits for do not stay unconsumed for good."""
    group = consumer_group_from_classic(stable_classic({"a": [0, 1, 2, 3]}),
                                        ConsumerGroup("g"), TOPICS, now_ms=0)
    group.heartbeat(consumer_join("c"), TOPICS, 0)
    classic_join(group, classic_join_request("a"), TOPICS, 1)
    assert group.heartbeat(HeartbeatRequest("c", 4, owned={}), TOPICS, 2).assignment == {
        T: frozenset({2, 3})}
    # b joins at epoch 5: its target (3) is still c's, so it waits for it
    joined = classic_join(group, ClassicJoin(
        "b", None, False, "kp", "/h", 20_000, 10_000, "consumer",
        (("range", subscription("t")),)), TOPICS, 3)
    assert joined.generation_id == 5
    assert classic_sync(group, "b", None, 5, None, None, 4).error == ErrorCode.none
    b = group.members["b"]
    assert b.state == MemberState.UNRELEASED_PARTITIONS and b.classic_deadline_ms is None
    # c gives 3 up: b is told to rejoin for it, by 10 + its rebalance timeout
    group.heartbeat(HeartbeatRequest("c", 4, owned={T: frozenset({2, 3})}), TOPICS, 5)
    group.heartbeat(HeartbeatRequest("c", 4, owned={T: frozenset({2})}), TOPICS, 6)
    assert group.owner_of(T, 3) is None
    assert classic_heartbeat(group, "b", None, 5, 10)[0] == ErrorCode.rebalance_in_progress
    assert b.classic_deadline_ms == 10 + 20_000
    # it syncs instead: the deadline stands, and it is fenced at it
    assert classic_sync(group, "b", None, 5, None, None, 11).error == ErrorCode.none
    assert b.classic_deadline_ms == 10 + 20_000
    assert classic_heartbeat(group, "b", None, 5, 12)[0] == ErrorCode.rebalance_in_progress
    b.session_deadline_ms = 10**9  # only the rejoin deadline is at stake
    assert ("b", "the classic member failed to join within the rebalance timeout") in (
        group.expire(10 + 20_000))


def test_a_downgraded_group_reloaded_before_its_rebalance_completes_rebalances() -> None:
    """The downgrade's classic record gives each member its target assignment, and the
    group rebalances before anyone syncs it. A coordinator that fails over in between
    must not load it Stable: a member rejoining would sync its target while another (here
    kp, eager, not rejoined since the upgrade) still owns those partitions."""
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        kp = await classic_member(c)
        await c.consumer_group_heartbeat("g", consumer_join("c"), 1, TOPICS)
        kr = await c.join_group("g", "", None, False, "kr", "/h", 20_000, 10_000,
                                "consumer", [("range", subscription("t"))], TOPICS)
        assert kr.error == ErrorCode.none
        group = c.consumer_group("g")
        assert group is not None and group.members[kp].member_epoch == 1  # holds t-0..3
        assert group.target[kr.member_id]  # a partition kp holds
        left = await c.consumer_group_heartbeat("g", HeartbeatRequest("c", -1), 1, TOPICS)
        assert left.error == ErrorCode.none
        assert c.groups["g"].is_in(GroupState.PREPARING_REBALANCE)
        partition = c.partition_for("g")
        c.on_resigned(partition)
        c.on_elected(partition)
        reloaded = c.groups["g"]
        assert set(reloaded.members) == {kp, kr.member_id}
        assert reloaded.is_in(GroupState.PREPARING_REBALANCE)
        # kr's rejoin waits for kp's: nobody syncs a partition kp owns meanwhile
        assert c.heartbeat("g", 3, kr.member_id, None) == ErrorCode.rebalance_in_progress
        assert (await c.sync_group("g", 3, kr.member_id, None, "consumer", "range",
                                   {})).error == ErrorCode.rebalance_in_progress
        kr_join = asyncio.ensure_future(c.join_group(
            "g", kr.member_id, None, True, "kr", "/h", 20_000, 10_000, "consumer",
            [("range", subscription("t"))], TOPICS))
        await asyncio.sleep(0)
        assert not kr_join.done()
        kp_join = await c.join_group("g", kp, None, True, "kp", "/h", 20_000, 10_000,
                                     "consumer", [("range", subscription("t"))], TOPICS)
        assert kp_join.error == (await kr_join).error == ErrorCode.none
        assert kp_join.generation_id == 4

    run(body)


def test_a_classic_member_that_heartbeats_but_never_rejoins_is_fenced_then_released(
) -> None:
    """kp (eager) owns everything; told to rejoin, it keeps heartbeating instead: its
    partitions stay its own until its rebalance timeout fences it, and only then reach
    the consumer-protocol member; no downgrade (c speaks the consumer protocol)."""
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, clock: Clock) -> None:
        kp = await classic_member(c)
        await c.consumer_group_heartbeat("g", consumer_join("c"), 1, TOPICS)
        group = c.consumer_group("g")
        assert group is not None
        for step in range(4):  # 4 x 5 s of its 20 s rebalance timeout
            assert c.heartbeat("g", 1, kp, None) == ErrorCode.rebalance_in_progress
            beat = await c.consumer_group_heartbeat(
                "g", HeartbeatRequest("c", 2, owned={}), 1, TOPICS)
            assert beat.error == ErrorCode.none and not group.members["c"].assigned, step
            clock.now += 5_000 - 1
        clock.now += 4
        group.members["c"].session_deadline_ms = clock.now + 10**6  # only kp is at stake
        c._schedule_consumer_expiry(group)
        deadline = asyncio.get_running_loop().time() + 5
        while kp in group.members:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert c.heartbeat("g", 1, kp, None) == ErrorCode.unknown_member_id
        beat = await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("c", 2, owned={}), 1, TOPICS)
        assert beat.assignment == {T: frozenset({0, 1, 2, 3})}
        assert c.consumer_group("g") is group

    run(body)


def test_a_classic_instance_replacing_a_regex_member_drops_its_expression() -> None:
    """A classic client subscribes by names only: taking over the instance of a
    consumer-protocol member that subscribed with an expression leaves the group no
    subscriber of that expression (its resolution is then dropped, not refreshed for
    nobody)."""
    group = ConsumerGroup("g")
    joined = group.heartbeat(HeartbeatRequest(
        "c", 0, instance_id="i", rebalance_timeout_ms=5000, subscribed_topic_names=(),
        subscribed_topic_regex="t.*", owned={}), TOPICS, 0)
    assert joined.error == ErrorCode.none
    assert group.subscribed_regexes() == {"t.*": 1}
    join = ClassicJoin("", "i", True, "kafka-python", "/127.0.0.1", 20_000, 10_000,
                       "consumer", (("range", subscription("t")),))
    result = classic_join(group, join, TOPICS, 1)
    assert result.error == ErrorCode.none, result
    assert group.subscribed_regexes() == {}
    assert all(not m.subscribed_topic_regex for m in group.members.values())
    assert group.subscribed_topics() == {"t"}
