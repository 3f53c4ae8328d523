"""The KIP-848 consumer group state machine, sans-I/O: members driven by hand and by a
small client model that behaves as Kafka's consumers do (owned partitions = what it was
last assigned, revocations acknowledged on the next heartbeat)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from odradek.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    TopicMetadata,
    validate_heartbeat,
)
from odradek.protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
SESSION = 45_000


def topics(**sizes: int) -> dict[str, TopicMetadata]:
    ids = {"a": T1, "b": T2}
    return {name: TopicMetadata(ids.get(name) or uuid.uuid5(uuid.NAMESPACE_DNS, name), name, n)
            for name, n in sizes.items()}


def join(member_id: str, *subscribed: str, instance_id: str | None = None,
         assignor: str | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, 0, instance_id=instance_id, rebalance_timeout_ms=30_000,
                            subscribed_topic_names=subscribed or ("a",), server_assignor=assignor,
                            owned={})


def beat(member_id: str, epoch: int, owned: Mapping[uuid.UUID, frozenset[int]] | None,
         instance_id: str | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, epoch, instance_id=instance_id, owned=owned)


def partitions(result: HeartbeatResult) -> set[tuple[uuid.UUID, int]]:
    assert result.assignment is not None
    return {(t, p) for t, ps in result.assignment.items() for p in ps}


def group_state(group: ConsumerGroup) -> ConsumerGroupState:
    return group.state


def state_of(group: ConsumerGroup, member_id: str) -> MemberState:
    return group.members[member_id].state


@dataclass
class Client:
    """A consumer as KIP-848 expects one to behave."""

    member_id: str
    subscribed: tuple[str, ...] = ("a",)
    instance_id: str | None = None
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    joined: bool = False
    full: bool = False  # an answer was lost: the next heartbeat is a full one, as Kafka's
    assignor: str | None = None  # ServerAssignor, sent in a full heartbeat

    def request(self) -> HeartbeatRequest:
        if not self.joined:
            return HeartbeatRequest(
                self.member_id, 0, instance_id=self.instance_id, rebalance_timeout_ms=30_000,
                subscribed_topic_names=self.subscribed, server_assignor=self.assignor,
                owned={})
        if self.full:
            return HeartbeatRequest(
                self.member_id, self.epoch, instance_id=self.instance_id,
                rebalance_timeout_ms=30_000, subscribed_topic_names=self.subscribed,
                server_assignor=self.assignor, owned=dict(self.owned))
        return HeartbeatRequest(self.member_id, self.epoch, instance_id=self.instance_id,
                                owned=dict(self.owned))

    def apply(self, result: HeartbeatResult) -> None:
        if result.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self.owned, self.epoch, self.joined = {}, 0, False
            return
        assert result.error == ErrorCode.none, result
        self.joined, self.full = True, False
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = {t: frozenset(ps) for t, ps in result.assignment.items() if ps}

    def held(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def step(group: ConsumerGroup, client: Client, meta: dict[str, TopicMetadata],
         now: int = 0) -> HeartbeatResult:
    result = group.heartbeat(client.request(), meta, now)
    client.apply(result)
    return result


def assert_exclusive(clients: list[Client]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        for tp in c.held():
            assert tp not in seen, f"{tp} held by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def converge(group: ConsumerGroup, clients: list[Client], meta: dict[str, TopicMetadata],
             rounds: int = 10) -> None:
    for _ in range(rounds):
        for c in clients:
            step(group, c, meta)
            assert_exclusive(clients)
        if group.state == ConsumerGroupState.STABLE and all(
                c.epoch == group.assignment_epoch for c in clients):
            return
    raise AssertionError(f"no convergence: {group.state}")


# ------------------------------------------------------------------ first member
def test_the_first_member_gets_every_partition_at_epoch_one() -> None:
    group = ConsumerGroup("g")
    result = group.heartbeat(join("m1"), topics(a=3), 0)
    assert result.error == ErrorCode.none
    assert result.member_id == "m1" and result.member_epoch == 1
    assert partitions(result) == {(T1, 0), (T1, 1), (T1, 2)}
    assert result.heartbeat_interval_ms == 5_000
    assert group.state == ConsumerGroupState.STABLE
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)


def test_a_topic_created_after_the_subscription_is_assigned() -> None:
    group = ConsumerGroup("g")
    result = group.heartbeat(join("m1", "later"), {}, 0)
    assert result.error == ErrorCode.none and result.assignment == {}
    meta = topics(later=2)
    result = group.heartbeat(beat("m1", result.member_epoch, {}), meta, 1)
    assert result.member_epoch == 2
    assert partitions(result) == {(meta["later"].topic_id, 0), (meta["later"].topic_id, 1)}


def test_an_unchanged_assignment_is_not_sent_again() -> None:
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m1"), topics(a=2), 0)
    again = group.heartbeat(beat("m1", 1, first.assignment), topics(a=2), 1)
    assert again.error == ErrorCode.none and again.assignment is None


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(("request_", "message"), [
    (HeartbeatRequest("m", 0, rebalance_timeout_ms=-1, subscribed_topic_names=("a",), owned={}),
     "RebalanceTimeoutMs must be provided in first request."),
    (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",), owned=None),
     "TopicPartitions must be empty when (re-)joining."),
    (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",),
                      owned={T1: frozenset({0})}),
     "TopicPartitions must be empty when (re-)joining."),
    (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topic_names=None, owned={}),
     "SubscribedTopicNames must be set in first request."),
    (HeartbeatRequest("", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",), owned={}),
     "MemberId can't be empty."),
    (HeartbeatRequest("", 3), "MemberId can't be empty."),
    (HeartbeatRequest("m", -2), "InstanceId can't be null."),
    (HeartbeatRequest("m", -3), "MemberEpoch is invalid."),
    (HeartbeatRequest("m", 1, instance_id=""), "InstanceId can't be empty."),
    (HeartbeatRequest("m", 1, rack_id=""), "RackId can't be empty."),
    (HeartbeatRequest("m", 0, rebalance_timeout_ms=1, subscribed_topic_regex="a.*", owned={}),
     "SubscribedTopicRegex is not supported yet."),
])
def test_a_bad_heartbeat_is_an_invalid_request(request_: HeartbeatRequest, message: str) -> None:
    assert validate_heartbeat(request_, "g", 1, ["uniform"]) == (ErrorCode.invalid_request,
                                                                  message)


def test_validation_of_the_group_id_and_of_v0_member_ids() -> None:
    assert validate_heartbeat(join("m"), "", 1, ["uniform"]) == (
        ErrorCode.invalid_request, "GroupId can't be empty.")
    # v0: the coordinator may make the member id of a joining member
    assert validate_heartbeat(join(""), "g", 0, ["uniform"]) is None
    assert validate_heartbeat(join("m"), "g", 1, ["uniform", "range"]) is None


def test_an_unknown_server_assignor_is_unsupported_assignor() -> None:
    error = validate_heartbeat(join("m", assignor="sticky"), "g", 1, ["uniform", "range"])
    assert error == (ErrorCode.unsupported_assignor,
                     "ServerAssignor sticky is not supported. Supported assignors: "
                     "uniform, range.")


# ------------------------------------------------------------------ epochs
def test_an_unknown_member_is_unknown_member_id() -> None:
    group = ConsumerGroup("g")
    group.heartbeat(join("m1"), topics(a=1), 0)
    assert group.heartbeat(beat("ghost", 1, {}), topics(a=1), 0).error == (
        ErrorCode.unknown_member_id)
    assert group.heartbeat(HeartbeatRequest("ghost", -1), topics(a=1), 0).error == (
        ErrorCode.unknown_member_id)


def test_a_greater_epoch_is_fenced() -> None:
    group = ConsumerGroup("g")
    group.heartbeat(join("m1"), topics(a=1), 0)
    result = group.heartbeat(beat("m1", 2, {}), topics(a=1), 0)
    assert result.error == ErrorCode.fenced_member_epoch
    assert "greater member epoch (2)" in (result.message or "")


def test_the_previous_epoch_with_a_subset_of_the_assignment_is_accepted() -> None:
    """The answer that bumped the epoch may have been lost."""
    meta = topics(a=4)
    group = ConsumerGroup("g")
    m1 = Client("m1")
    step(group, m1, meta)
    m2 = Client("m2")
    step(group, m2, meta)
    converge(group, [m1, m2], meta)
    assert group.members["m1"].previous_member_epoch == 1
    epoch = group.members["m1"].member_epoch
    # m1 lost the answer at the new epoch: it still says epoch 1 with its current subset
    stale = beat("m1", 1, dict(m1.owned))
    assert group.heartbeat(stale, meta, 0).member_epoch == epoch
    # an old epoch with partitions it no longer has is fenced
    fenced = group.heartbeat(beat("m1", 1, {T1: frozenset(range(4))}), meta, 0)
    assert fenced.error == ErrorCode.fenced_member_epoch
    assert "smaller member epoch (1)" in (fenced.message or "")
    # and so is an epoch older than the previous one
    assert group.heartbeat(beat("m1", 0 if epoch > 2 else -5, {}), meta, 0).error in (
        ErrorCode.fenced_member_epoch,)


def test_a_fenced_member_rejoins_with_epoch_zero_and_the_same_id() -> None:
    meta = topics(a=2)
    group = ConsumerGroup("g")
    group.heartbeat(join("m1"), meta, 0)
    assert group.heartbeat(beat("m1", 7, {}), meta, 0).error == ErrorCode.fenced_member_epoch
    result = group.heartbeat(join("m1"), meta, 1)
    assert result.error == ErrorCode.none and result.member_epoch == 1
    assert partitions(result) == {(T1, 0), (T1, 1)}
    assert group.group_epoch == 1  # same subscription: no rebalance


# ------------------------------------------------------------------ reconciliation
def test_a_second_member_waits_for_the_first_to_revoke() -> None:
    meta = topics(a=4)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m1"), meta, 0)
    assert partitions(first) == {(T1, p) for p in range(4)}

    second = group.heartbeat(join("m2"), meta, 1)
    assert group.group_epoch == 2 and group.assignment_epoch == 2
    # m2 is at the new epoch but what it is to get is still m1's
    assert second.member_epoch == 2 and second.assignment == {}
    assert state_of(group, "m2") == MemberState.UNRELEASED_PARTITIONS
    target_m2 = group.target["m2"][T1]
    assert len(target_m2) == 2

    # m1 still owns everything: it keeps epoch 1 and is told to give up m2's share
    revoke = group.heartbeat(beat("m1", 1, first.assignment), meta, 2)
    assert revoke.member_epoch == 1
    assert partitions(revoke) == {(T1, p) for p in range(4) if p not in target_m2}
    assert state_of(group, "m1") == MemberState.UNREVOKED_PARTITIONS
    assert group.state == ConsumerGroupState.RECONCILING

    # m2 still gets nothing while m1 has not acknowledged
    waiting = group.heartbeat(beat("m2", 2, {}), meta, 3)
    assert waiting.assignment is None and waiting.member_epoch == 2

    # m1 acknowledges by heartbeating without them: it moves to epoch 2
    ack = group.heartbeat(beat("m1", 1, revoke.assignment), meta, 4)
    assert ack.member_epoch == 2 and state_of(group, "m1") == MemberState.STABLE

    # now m2 gets them
    granted = group.heartbeat(beat("m2", 2, {}), meta, 5)
    assert partitions(granted) == {(T1, p) for p in target_m2}
    assert group_state(group) == ConsumerGroupState.STABLE


def test_a_member_that_does_not_say_what_it_owns_is_assumed_to_own_it() -> None:
    meta = topics(a=2)
    group = ConsumerGroup("g")
    first = group.heartbeat(join("m1"), meta, 0)
    group.heartbeat(join("m2"), meta, 1)
    group.heartbeat(beat("m1", 1, first.assignment), meta, 2)
    # owned None (unchanged): still unrevoked
    group.heartbeat(beat("m1", 1, None), meta, 3)
    assert state_of(group, "m1") == MemberState.UNREVOKED_PARTITIONS


def test_a_leaving_member_releases_its_partitions_at_once() -> None:
    meta = topics(a=4)
    group = ConsumerGroup("g")
    clients = [Client("m1"), Client("m2")]
    converge(group, clients, meta)
    epoch = group.group_epoch
    result = group.heartbeat(HeartbeatRequest("m2", -1), meta, 0)
    assert result.error == ErrorCode.none
    result = group.heartbeat(HeartbeatRequest("m2", -1), meta, 0)
    assert result.error == ErrorCode.unknown_member_id  # already gone
    assert group.group_epoch == epoch + 1 and "m2" not in group.members
    again = step(group, clients[0], meta)
    assert partitions(again) == {(T1, p) for p in range(4)}


def test_leave_answers_the_member_id_and_epoch_minus_one() -> None:
    group = ConsumerGroup("g")
    group.heartbeat(join("m1"), topics(a=1), 0)
    result = group.heartbeat(HeartbeatRequest("m1", -1), topics(a=1), 0)
    assert (result.error, result.member_id, result.member_epoch) == (ErrorCode.none, "m1", -1)
    assert group.state == ConsumerGroupState.EMPTY and group.owner_of(T1, 0) is None


def test_a_subscription_change_moves_the_group_epoch() -> None:
    meta = topics(a=2, b=2)
    group = ConsumerGroup("g")
    client = Client("m1")
    step(group, client, meta)
    assert client.held() == {(T1, 0), (T1, 1)}
    request = HeartbeatRequest("m1", client.epoch, subscribed_topic_names=("a", "b"),
                               owned=dict(client.owned))
    result = group.heartbeat(request, meta, 1)
    client.apply(result)
    assert group.group_epoch == 2 and client.epoch == 2
    assert client.held() == {(T1, 0), (T1, 1), (T2, 0), (T2, 1)}
    # unsubscribing from a: its partitions are revoked first
    request = HeartbeatRequest("m1", client.epoch, subscribed_topic_names=("b",),
                               owned=dict(client.owned))
    result = group.heartbeat(request, meta, 2)
    client.apply(result)
    assert client.held() == {(T2, 0), (T2, 1)}
    assert state_of(group, "m1") == MemberState.UNREVOKED_PARTITIONS
    step(group, client, meta)
    assert state_of(group, "m1") == MemberState.STABLE and client.epoch == 3


def test_partitions_added_to_a_topic_are_assigned() -> None:
    group = ConsumerGroup("g")
    client = Client("m1")
    step(group, client, topics(a=2))
    step(group, client, topics(a=3))
    assert group.group_epoch == 2
    assert client.held() == {(T1, 0), (T1, 1), (T1, 2)} and client.epoch == 2


def test_a_deleted_topic_is_revoked() -> None:
    group = ConsumerGroup("g")
    client = Client("m1", subscribed=("a", "b"))
    step(group, client, topics(a=1, b=1))
    assert client.held() == {(T1, 0), (T2, 0)}
    step(group, client, topics(a=1))
    assert client.held() == {(T1, 0)}
    step(group, client, topics(a=1))
    assert group.state == ConsumerGroupState.STABLE and client.epoch == group.group_epoch


def test_the_server_assignor_asked_by_the_members_is_used() -> None:
    meta = topics(a=2, b=2)
    group = ConsumerGroup("g", ConsumerGroupConfig(assignors=("uniform", "range")))
    group.heartbeat(join("m1", "a", "b", assignor="range"), meta, 0)
    group.heartbeat(join("m2", "a", "b", assignor="range"), meta, 0)
    assert group.assignor_name == "range"
    # range: each member gets partition p of every topic
    assert {frozenset(t.items()) for t in group.target.values()} == {
        frozenset({(T1, frozenset({0})), (T2, frozenset({0}))}),
        frozenset({(T1, frozenset({1})), (T2, frozenset({1}))}),
    }


def test_a_member_changing_its_server_assignor_moves_the_group_epoch() -> None:
    """The only member asks for another assignor: the group's preferred assignor changes,
    so the group epoch moves and the target is computed again with it (Kafka bumps the
    epoch when the preferred assignor changes, KAFKA-20434)."""
    meta = topics(a=2, b=2)
    group = ConsumerGroup("g", ConsumerGroupConfig(assignors=("uniform", "range")))
    m1 = Client("m1", ("a", "b"))
    converge(group, [m1], meta)
    assert (group.assignor_name, group.group_epoch) == ("uniform", 1)
    m1.assignor, m1.full = "range", True
    step(group, m1, meta)
    assert (group.assignor_name, group.group_epoch, group.assignment_epoch) == ("range", 2, 2)
    assert m1.epoch == 2


def test_the_group_epoch_moves_once_most_members_ask_for_another_assignor() -> None:
    meta = topics(a=2, b=2)
    group = ConsumerGroup("g", ConsumerGroupConfig(assignors=("uniform", "range")))
    clients = [Client(f"m{i}", ("a", "b"), assignor="uniform") for i in (1, 2, 3)]
    converge(group, clients, meta)
    assert group.assignor_name == "uniform"
    epoch = group.group_epoch
    clients[0].assignor, clients[0].full = "range", True
    step(group, clients[0], meta)
    # one of three asks for range: the preferred assignor, hence the target, stays
    assert (group.assignor_name, group.group_epoch) == ("uniform", epoch)
    assert group.members["m1"].server_assignor == "range"
    clients[1].assignor, clients[1].full = "range", True
    step(group, clients[1], meta)
    assert (group.assignor_name, group.group_epoch) == ("range", epoch + 1)
    converge(group, clients, meta)
    # range: partition p of each topic to the p-th member (by member id)
    assert [c.held() for c in clients] == [{(T1, 0), (T2, 0)}, {(T1, 1), (T2, 1)}, set()]


def test_the_default_assignor_is_the_first_configured() -> None:
    group = ConsumerGroup("g", ConsumerGroupConfig(assignors=("range", "uniform")))
    group.heartbeat(join("m1"), topics(a=1), 0)
    assert group.assignor_name == "range"


# ------------------------------------------------------------------ liveness
def test_a_member_past_its_session_is_removed_and_its_partitions_move() -> None:
    meta = topics(a=4)
    group = ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=1_000))
    m1, m2 = Client("m1"), Client("m2")
    converge(group, [m1, m2], meta)
    step(group, m1, meta, now=900)
    assert group.next_deadline_ms() == 1_000  # m2's, from its last heartbeat at 0
    assert group.expire(999) == []
    assert group.expire(1_000) == [("m2", "session timeout")]
    step(group, m1, meta, now=1_001)
    assert m1.held() == {(T1, p) for p in range(4)}


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() -> None:
    meta = topics(a=2)
    group = ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=100_000))
    first = group.heartbeat(join("m1"), meta, 0)
    group.heartbeat(join("m2"), meta, 0)
    group.heartbeat(beat("m1", 1, first.assignment), meta, 10)  # told to revoke at 10
    assert group.members["m1"].revocation_deadline_ms == 30_010
    group.heartbeat(beat("m1", 1, first.assignment), meta, 20_000)  # still owns them
    assert group.expire(30_009) == []
    assert group.expire(30_010) == [("m1", "rebalance timeout (partitions not revoked)")]
    result = group.heartbeat(beat("m2", 2, {}), meta, 30_011)
    assert partitions(result) == {(T1, 0), (T1, 1)}


# ------------------------------------------------------------------ static membership
def test_a_static_member_that_rejoins_keeps_its_assignment_without_a_rebalance() -> None:
    meta = topics(a=4)
    group = ConsumerGroup("g")
    s1 = Client("s1-a", instance_id="i1")
    s2 = Client("s2", instance_id="i2")
    converge(group, [s1, s2], meta)
    before = s1.held()
    epoch = group.group_epoch
    left = group.heartbeat(HeartbeatRequest("s1-a", -2, instance_id="i1"), meta, 0)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    # its partitions stay with it: nobody else gets them meanwhile
    step(group, s2, meta)
    assert s2.held().isdisjoint(before)
    restarted = Client("s1-b", instance_id="i1")
    result = step(group, restarted, meta)
    assert result.error == ErrorCode.none
    assert restarted.held() == before and restarted.epoch == epoch
    assert group.group_epoch == epoch
    assert "s1-a" not in group.members and group.static_members["i1"] == "s1-b"
    assert group.state == ConsumerGroupState.STABLE


def test_a_static_instance_still_in_use_is_unreleased_instance_id() -> None:
    group = ConsumerGroup("g")
    group.heartbeat(join("s1", instance_id="i1"), topics(a=1), 0)
    result = group.heartbeat(join("s2", instance_id="i1"), topics(a=1), 0)
    assert result.error == ErrorCode.unreleased_instance_id


def test_static_member_checks() -> None:
    group = ConsumerGroup("g")
    group.heartbeat(join("s1", instance_id="i1"), topics(a=1), 0)
    assert group.heartbeat(beat("s9", 1, {}, instance_id="i1"), topics(a=1), 0).error == (
        ErrorCode.fenced_instance_id)
    assert group.heartbeat(beat("s1", 1, {}, instance_id="i9"), topics(a=1), 0).error == (
        ErrorCode.unknown_member_id)
    assert group.heartbeat(HeartbeatRequest("s9", -2, instance_id="i1"), topics(a=1),
                           0).error == ErrorCode.fenced_instance_id
    # epoch -1 with the instance id leaves for good
    gone = group.heartbeat(HeartbeatRequest("s1", -1, instance_id="i1"), topics(a=1), 0)
    assert gone.error == ErrorCode.none and not group.static_members


def test_a_known_member_rejoining_under_another_instance_id_is_known_by_it() -> None:
    """Kafka's updateMember maps the member's new instance id to it (and a group loaded
    from its records knows it only by that one): the next heartbeat is answered NONE."""
    meta = topics(a=2)
    group = ConsumerGroup("g")
    for old_instance in (None, "i1"):
        group.heartbeat(join("m1", instance_id=old_instance), meta, 0)
        rejoined = group.heartbeat(join("m1", instance_id="i2"), meta, 0)
        assert rejoined.error == ErrorCode.none
        result = group.heartbeat(beat("m1", rejoined.member_epoch, rejoined.assignment,
                                      instance_id="i2"), meta, 0)
        assert result.error == ErrorCode.none
        assert group.static_members == {"i2": "m1"}
        if old_instance is not None:  # the old instance id no longer names it
            assert group.heartbeat(beat("m1", rejoined.member_epoch, {},
                                        instance_id=old_instance), meta, 0).error == (
                ErrorCode.unknown_member_id)
        group.heartbeat(HeartbeatRequest("m1", -1, instance_id="i2"), meta, 0)
        assert not group.members and not group.static_members


def test_a_static_member_that_does_not_come_back_is_removed_after_its_session() -> None:
    meta = topics(a=2)
    group = ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=1_000))
    group.heartbeat(join("s1", instance_id="i1"), meta, 0)
    group.heartbeat(HeartbeatRequest("s1", -2, instance_id="i1"), meta, 500)
    assert group.expire(1_000) == [("s1", "session timeout")]
    assert group.state == ConsumerGroupState.EMPTY


# ------------------------------------------------------------------ size
def test_group_max_size() -> None:
    group = ConsumerGroup("g", ConsumerGroupConfig(max_size=1))
    group.heartbeat(join("m1"), topics(a=1), 0)
    result = group.heartbeat(join("m2"), topics(a=1), 0)
    assert result.error == ErrorCode.group_max_size_reached
    assert "maximum capacity of 1 members" in (result.message or "")
    # a known member may still rejoin
    assert group.heartbeat(join("m1"), topics(a=1), 0).error == ErrorCode.none


# ------------------------------------------------------------------ a model check
@pytest.mark.parametrize("seed", range(40))
def test_random_churn_never_gives_a_partition_to_two_members(seed: int) -> None:
    """Members join, leave, time out, restart, change subscriptions, topics grow and
    answers are lost; at no time do two clients own the same partition, and once the
    churn stops the group converges with every partition assigned."""
    rng = random.Random(seed)
    sizes = {"a": rng.randint(1, 6), "b": rng.randint(1, 6)}
    meta = topics(**sizes)
    group = ConsumerGroup("g", ConsumerGroupConfig(
        assignors=(rng.choice(["uniform", "range"]),)))
    clients: dict[str, Client] = {}
    next_id = 0
    for _ in range(300):
        action = rng.random()
        if action < 0.1 or not clients:
            next_id += 1
            member_id = f"m{next_id}"
            clients[member_id] = Client(member_id, subscribed=rng.choice(
                [("a",), ("b",), ("a", "b")]))
        elif action < 0.14:
            gone = rng.choice(list(clients))
            group.heartbeat(HeartbeatRequest(gone, -1), meta, 0)
            del clients[gone]
        elif action < 0.16:
            gone = rng.choice(list(clients))
            group.remove_member(gone)  # as a session timeout does; the client is dead
            del clients[gone]
        elif action < 0.18:
            sizes[rng.choice("ab")] += 1
            meta = topics(**sizes)
        else:
            client = clients[rng.choice(list(clients))]
            result = group.heartbeat(client.request(), meta, 0)
            if rng.random() < 0.1 and result.error == ErrorCode.none and client.joined:
                client.full = True  # the answer is lost
                continue
            client.apply(result)
        assert_exclusive(list(clients.values()))
    everyone = list(clients.values())
    for _ in range(20):
        for c in everyone:
            step(group, c, meta)
            assert_exclusive(everyone)
    assert group.state == ConsumerGroupState.STABLE
    wanted = {meta[t].topic_id for c in everyone for t in c.subscribed}
    held = set().union(*(c.held() for c in everyone)) if everyone else set()
    assert held == {(meta[t].topic_id, p) for t in sizes for p in range(sizes[t])
                    if meta[t].topic_id in wanted}


@pytest.mark.parametrize("seed", range(20))
def test_random_static_churn_never_gives_a_partition_to_two_members(seed: int) -> None:
    """Static members leave with epoch -2 and come back as new instances (new member ids,
    same instance ids), others join and leave: never two owners of a partition, and the
    group converges with every partition assigned."""
    rng = random.Random(1000 + seed)
    meta = topics(a=rng.randint(2, 8))
    group = ConsumerGroup("g")
    clients: dict[str, Client] = {}  # instance id -> its live client
    generation = 0
    for _ in range(300):
        action = rng.random()
        instances = list(clients)
        if action < 0.1 or not instances:
            generation += 1
            instance = f"i{rng.randint(1, 5)}"
            if instance in clients:
                continue
            clients[instance] = Client(f"{instance}-{generation}", instance_id=instance)
        elif action < 0.16:
            instance = rng.choice(instances)
            client = clients.pop(instance)
            if client.joined:
                result = group.heartbeat(
                    HeartbeatRequest(client.member_id, -2, instance_id=instance), meta, 0)
                assert result.error == ErrorCode.none, result
        elif action < 0.19:
            instance = rng.choice(instances)
            client = clients.pop(instance)
            if client.joined:
                group.heartbeat(HeartbeatRequest(client.member_id, -1, instance_id=instance),
                                meta, 0)
        else:
            client = clients[rng.choice(instances)]
            result = group.heartbeat(client.request(), meta, 0)
            if result.error == ErrorCode.unreleased_instance_id:
                continue  # the instance id is still held: it tries again later
            client.apply(result)
        assert_exclusive(list(clients.values()))
    for member in list(group.members.values()):
        if member.member_epoch == -2 and member.instance_id not in clients:
            group.remove_member(member.member_id)  # never came back: its session times out
    everyone = list(clients.values())
    for _ in range(20):
        for c in everyone:
            step(group, c, meta)
            assert_exclusive(everyone)
    members = {m.member_id: (m.member_epoch, m.state.value, m.instance_id)
               for m in group.members.values()}
    assert group_state(group) == (
        ConsumerGroupState.STABLE if everyone else ConsumerGroupState.EMPTY), (
        members, [(c.member_id, c.joined, c.epoch) for c in everyone], group.assignment_epoch)
    held = set().union(*(c.held() for c in everyone)) if everyone else set()
    assert held == ({(T1, p) for p in range(meta["a"].num_partitions)} if everyone else set())
