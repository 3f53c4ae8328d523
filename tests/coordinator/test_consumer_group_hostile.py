"""The KIP-848 consumer group state machine against hostile or confused clients,
sans-I/O: member ids reused across dynamic and static members, heartbeats with any
epoch, instance id and owned-partition list, topics deleted and created again, and the
cost of a heartbeat when one member subscribes to names by the hundred thousand."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Mapping

import pytest

from odradek.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    TopicMetadata,
    validate_heartbeat,
)
from odradek.protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)


def join(member_id: str, *subscribed: str, instance_id: str | None = None
         ) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, 0, instance_id=instance_id,
                            rebalance_timeout_ms=30_000,
                            subscribed_topic_names=subscribed or ("a",), owned={})


def beat_as_told(group: ConsumerGroup, member_id: str,
                 topics: Mapping[str, TopicMetadata], now_ms: int) -> None:
    """A heartbeat of a well-behaved client: its epoch, owning what it was assigned."""
    member = group.members[member_id]
    result = group.heartbeat(HeartbeatRequest(member_id, member.member_epoch,
                                              owned=dict(member.assigned)), topics, now_ms)
    assert result.error == ErrorCode.none, result


def check_ownership(group: ConsumerGroup) -> None:
    """Every partition held (assigned or pending revocation) by one member only, the
    owner table saying exactly that, and each static instance id naming its member."""
    held: dict[tuple[uuid.UUID, int], str] = {}
    for member in group.members.values():
        for key in member.held():
            assert key not in held, f"{key} held by {held[key]} and {member.member_id}"
            held[key] = member.member_id
    assert {k: group.owner_of(*k) for k in held} == held
    assert all(group.owner_of(*k) in (None, held.get(k)) for k in group._owners)
    for instance_id, member_id in group.static_members.items():
        assert group.members[member_id].instance_id == instance_id


def test_a_member_id_that_takes_over_a_static_instance_frees_what_it_held() -> None:
    """A dynamic member rejoining (epoch 0) as the instance of a static member that left
    with -2 takes over that member; what it held as a dynamic member is free, the group
    epoch moves and every partition is assigned again (they were held, by nobody, for
    good: never consumed)."""
    meta = {"a": TopicMetadata(T1, "a", 4)}
    group = ConsumerGroup("g")
    assert group.heartbeat(join("A"), meta, 0).error == ErrorCode.none
    assert group.heartbeat(join("S", instance_id="X"), meta, 0).error == ErrorCode.none
    for now in range(1, 4):
        for member_id in ("A", "S"):
            beat_as_told(group, member_id, meta, now)
    assert group.members["A"].assigned == {T1: frozenset({0, 1})}
    assert group.members["S"].assigned == {T1: frozenset({2, 3})}
    left = group.heartbeat(HeartbeatRequest("S", -2, instance_id="X"), meta, 5)
    assert left.error == ErrorCode.none
    epoch = group.group_epoch

    taken = group.heartbeat(join("A", instance_id="X"), meta, 6)
    assert taken.error == ErrorCode.none
    check_ownership(group)
    assert group.group_epoch > epoch  # A's own partitions are to be assigned again
    for now in range(7, 10):
        beat_as_told(group, "A", meta, now)
    assert set(group.members) == {"A"}
    assert group.members["A"].assigned == {T1: frozenset(range(4))}
    assert group.static_members == {"X": "A"}


def _hostile_run(seed: int, steps: int) -> None:
    rnd = random.Random(seed)
    group = ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=1000, max_size=4))
    names = ["a", "b", "c"]
    meta = {"a": TopicMetadata(uuid.uuid4(), "a", 3), "b": TopicMetadata(uuid.uuid4(), "b", 2)}
    now = 0
    for _ in range(steps):
        now += rnd.choice([0, 1, 10, 100, 600])
        r = rnd.random()
        if r < 0.05:  # a topic deleted, grown, or created (again: a new id)
            name = rnd.choice(names)
            if name in meta and rnd.random() < 0.5:
                del meta[name]
            elif name in meta:
                meta[name] = TopicMetadata(meta[name].topic_id, name,
                                           meta[name].num_partitions + 1)
            else:
                meta[name] = TopicMetadata(uuid.uuid4(), name, rnd.randint(1, 4))
            continue
        if r < 0.1:
            group.expire(now)
            check_ownership(group)
            continue
        member_id = rnd.choice("ABCDE")
        member = group.members.get(member_id)
        epochs = [-2, -1, 0, 1, 2]
        if member is not None:
            epochs += [member.member_epoch] * 2 + [
                member.member_epoch + 1, member.member_epoch - 1,
                member.previous_member_epoch]
        epoch = rnd.choice(epochs)
        instance_id = rnd.choice([None, None, "X", "Y"])
        if member is not None and rnd.random() < 0.7:
            instance_id = member.instance_id
        owned: dict[uuid.UUID, frozenset[int]] | None = None
        if epoch == 0:
            owned = {}
        elif rnd.random() < 0.8:
            if member is not None and rnd.random() < 0.7:  # what it has, or less, or more
                source = dict(member.assigned)
                if rnd.random() < 0.5:
                    source.update(member.pending_revocation)
                owned = {t: frozenset(p for p in ps if rnd.random() < 0.8)
                         for t, ps in source.items()}
            else:  # anything, another member's partitions included
                owned = {t.topic_id: frozenset(rnd.sample(range(5), rnd.randint(0, 3)))
                         for t in meta.values()}
        subscribed = None
        if epoch == 0 or rnd.random() < 0.2:
            subscribed = tuple(rnd.sample(names, rnd.randint(1, 3)))
        request = HeartbeatRequest(
            member_id, epoch, instance_id=instance_id,
            rebalance_timeout_ms=rnd.choice([-1, 500, 30_000]) if epoch else 500,
            subscribed_topic_names=subscribed, owned=owned,
            server_assignor=rnd.choice([None, "uniform", "range"]))
        if validate_heartbeat(request, "g", 1, ("uniform", "range")) is not None:
            continue
        group.heartbeat(request, meta, now)  # never raises
        check_ownership(group)


@pytest.mark.parametrize("seed", range(40))
def test_hostile_heartbeats_never_give_a_partition_to_two_members(seed: int) -> None:
    """Heartbeats with any epoch, instance id (ids swapped between dynamic and static
    members), owned list (another member's partitions, fewer or more than assigned) and
    subscription, topics deleted and created again, sessions expiring: no exception, and
    the owners stay exclusive and consistent (a partition held in the owner table by a
    member that does not hold it is never assigned again)."""
    _hostile_run(seed, 400)


class _CountingTopics(Mapping[str, TopicMetadata]):
    """The cluster's topics, counting each one looked at."""

    def __init__(self, topics: Mapping[str, TopicMetadata]) -> None:
        self.topics = dict(topics)
        self.looked_at = 0

    def __getitem__(self, name: str) -> TopicMetadata:
        self.looked_at += 1
        return self.topics[name]

    def __contains__(self, name: object) -> bool:
        self.looked_at += 1
        return name in self.topics

    def __iter__(self) -> Iterator[str]:
        for name in list(self.topics):
            self.looked_at += 1
            yield name

    def __len__(self) -> int:
        return len(self.topics)


def test_a_heartbeat_costs_per_topic_of_the_cluster_not_per_name_subscribed() -> None:
    """One member subscribing to 200,000 names (no topics: a 2 MB request) made every
    later heartbeat of every member look each name up (about 0.3 s of the broker's loop
    per heartbeat on a 100k-name subscription, 3 s for a million). A heartbeat now looks
    at no more topics than the cluster has, and a topic created under one of those names
    is still assigned at the next heartbeat."""
    topics = _CountingTopics({"a": TopicMetadata(T1, "a", 4)})
    group = ConsumerGroup("g")
    assert group.heartbeat(join("V"), topics, 0).error == ErrorCode.none
    hostile = (*(f"t{i}" for i in range(200_000)), "a")
    assert group.heartbeat(join("E", *hostile), topics, 1).error == ErrorCode.none

    for now in range(2, 6):
        for member_id in ("V", "E"):
            topics.looked_at = 0
            beat_as_told(group, member_id, topics, now)
            assert topics.looked_at <= 2 * len(topics.topics) + 2, (member_id,
                                                                   topics.looked_at)
    check_ownership(group)
    assert group.members["V"].assigned and group.members["E"].assigned

    created = uuid.UUID(int=7)
    topics.topics["t12345"] = TopicMetadata(created, "t12345", 2)
    epoch = group.group_epoch
    beat_as_told(group, "E", topics, 10)
    assert group.group_epoch == epoch + 1
    assert group.target["E"].get(created) == frozenset({0, 1})
