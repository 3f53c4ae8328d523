"""The group metadata manager driven directly: storing and fetching offsets, tombstones,
loading a partition back (through the state table), expiry, append errors. No event loop
and no coordinator: groups are built by hand through the state table, as the coordinator
would leave them.
"""

from __future__ import annotations

import threading
from typing import cast

import pytest

from odradek.coordinator import group_metadata
from odradek.coordinator.group_metadata import GroupMetadata, MemberMetadata
from odradek.coordinator.group_metadata_manager import GroupMetadataManager, OffsetConfig
from odradek.coordinator.group_protocol import CONSUMER_PROTOCOL_TYPE
from odradek.coordinator.group_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
)
from odradek.coordinator.group_state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransitionError,
    check_transition,
)
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.protocol.errors import ErrorCode
from tests.coordinator._offsets_topic import PARTITIONS, Clock, FakeOffsetsTopic

# a consumer-protocol subscription (version 0) to topic "t"
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


def make_manager(topic: FakeOffsetsTopic, clock: Clock, *, load: bool = True,
                 **config: int) -> GroupMetadataManager:
    manager = GroupMetadataManager(cast(OffsetsTopic, topic), OffsetConfig(**config), clock)
    if load:
        for partition in range(PARTITIONS):
            manager.load_partition(partition, lambda group: None)
    return manager


def stable_group(manager: GroupMetadataManager, group_id: str, now: int,
                 *member_ids: str) -> GroupMetadata:
    """A consumer group after a completed rebalance, cached in ``manager``."""
    group = manager.add_group(GroupMetadata(group_id, state_timestamp_ms=now))
    for member_id in member_ids:
        group.add(MemberMetadata(
            member_id, None, "client", "/127.0.0.1", 10000, 10000, CONSUMER_PROTOCOL_TYPE,
            [("range", SUBSCRIPTION)], assignment=member_id.encode(),
        ))
    group.transition_to(GroupState.PREPARING_REBALANCE, now)
    group.init_next_generation(now)
    group.transition_to(GroupState.STABLE, now)
    return group


def written(topic: FakeOffsetsTopic, manager: GroupMetadataManager,
            group_id: str) -> list[tuple[object, bytes | None]]:
    return [(decode_key(k), v) for k, v in topic.records[manager.partition_for(group_id)]]


def test_store_offsets_writes_then_caches() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    results = manager.store_offsets(group, {("t", 0): (5, 2, "m"), ("t", 1): (6, -1, None)})
    assert results == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    committed = group.offsets[("t", 0)]
    assert (committed.offset, committed.leader_epoch, committed.metadata) == (5, 2, "m")
    assert (committed.commit_timestamp, committed.expire_timestamp) == (clock.now, -1)
    assert group.offsets[("t", 1)].metadata == ""
    assert [k for k, _ in written(topic, manager, "s")] == [
        OffsetCommitKey("s", "t", 0), OffsetCommitKey("s", "t", 1)]


def test_store_offsets_refuses_large_metadata_and_caches_nothing_on_a_failed_append() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock, max_metadata_size=4)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    assert manager.store_offsets(group, {("t", 0): (1, -1, "12345"), ("t", 1): (1, -1, "")}) == {
        ("t", 0): ErrorCode.offset_metadata_too_large, ("t", 1): ErrorCode.none}
    assert set(group.offsets) == {("t", 1)}
    topic.fail_appends = True
    assert manager.store_offsets(group, {("t", 1): (9, -1, "")}) == {
        ("t", 1): ErrorCode.not_coordinator}
    assert group.offsets[("t", 1)].offset == 1


def test_get_offsets_of_some_or_all_partitions() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    manager.store_offsets(group, {("u", 0): (3, -1, ""), ("t", 2): (4, -1, "")})
    assert list(manager.get_offsets("s", None)) == [("t", 2), ("u", 0)]
    some = manager.get_offsets("s", [("u", 0), ("t", 9)])
    assert some[("t", 9)] is None and some[("u", 0)] is not None
    assert manager.get_offsets("unknown", None) == {}
    assert manager.get_offsets("unknown", [("t", 0)]) == {("t", 0): None}


def test_writes_for_a_partition_not_owned_are_not_coordinator() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock, load=False)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    assert manager.store_offsets(group, {("t", 0): (1, -1, "")}) == {
        ("t", 0): ErrorCode.not_coordinator}
    assert manager.store_group(group) == ErrorCode.not_coordinator
    assert not any(topic.records.values())


@pytest.mark.parametrize(("kafka_error", "expected"), [
    ("NOT_ENOUGH_REPLICAS", ErrorCode.coordinator_not_available),
    ("NOT_LEADER_OR_FOLLOWER", ErrorCode.not_coordinator),
    ("MESSAGE_TOO_LARGE", ErrorCode.invalid_commit_offset_size),
    ("SOMETHING_ELSE", ErrorCode.unknown_server_error),
])
def test_append_errors_become_errors_group_clients_understand(
    kafka_error: str, expected: ErrorCode
) -> None:
    class FailingTopic(FakeOffsetsTopic):
        def append(self, partition: int, records: object, timestamp: int) -> None:
            error = RuntimeError("append failed")
            error.kafka_error = kafka_error  # type: ignore[attr-defined]
            raise error

    topic, clock = FailingTopic(), Clock()
    manager = make_manager(topic, clock)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    assert manager.store_group(group) == expected


def test_groups_and_offsets_survive_a_reload() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    group = stable_group(manager, "g", clock.now, "m-1", "m-2")
    assert manager.store_group(group) == ErrorCode.none
    manager.store_offsets(group, {("t", 0): (7, 1, "x"), ("t", 1): (8, 1, "")})
    manager.store_offsets(group, {("t", 0): (9, 1, "y")})
    simple = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    manager.store_offsets(simple, {("t", 0): (3, -1, ""), ("t", 1): (4, -1, "")})
    assert manager.delete_offsets(simple, [("t", 0)]) == ErrorCode.none
    assert set(simple.offsets) == {("t", 1)}
    gone = manager.add_group(GroupMetadata("s2", state_timestamp_ms=clock.now))
    manager.store_offsets(gone, {("t", 0): (3, -1, "")})
    assert manager.delete_group(gone) == ErrorCode.none
    assert gone.state is GroupState.DEAD and manager.get_group("s2") is None

    loaded: list[str] = []
    fresh = make_manager(topic, clock, load=False)
    for partition in range(PARTITIONS):
        fresh.load_partition(partition, lambda g: loaded.append(g.group_id))
    assert sorted(loaded) == ["g", "s"] and fresh.partitions.owned() == list(range(PARTITIONS))
    again = fresh.get_group("g")
    assert again is not None
    assert (again.state, again.generation_id, again.protocol_name, again.leader_id) == (
        GroupState.STABLE, 1, "range", "m-1")
    assert {m: x.assignment for m, x in again.members.items()} == {"m-1": b"m-1", "m-2": b"m-2"}
    assert {tp: o.offset for tp, o in again.offsets.items()} == {("t", 0): 9, ("t", 1): 8}
    loaded_simple = fresh.get_group("s")
    assert loaded_simple is not None and loaded_simple.state is GroupState.EMPTY
    assert set(loaded_simple.offsets) == {("t", 1)}


def test_an_unreadable_record_is_skipped_on_load() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    manager.store_offsets(group, {("t", 0): (3, -1, "")})
    partition = manager.partition_for("s")
    topic.records[partition].insert(0, (OffsetCommitKey("s", "t", 1).encode(), b"\x00\x03"))
    fresh = make_manager(topic, clock)
    loaded = fresh.get_group("s")
    assert loaded is not None and set(loaded.offsets) == {("t", 0)}


def test_a_partition_is_loading_while_it_replays_then_owned() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock, load=False)
    seen: list[tuple[bool, bool, bool]] = []

    class WatchedTopic(FakeOffsetsTopic):
        def replay_entries(self, partition: int):  # type: ignore[no-untyped-def]
            seen.append((manager.partitions.is_loading(partition), manager.partitions.any_loading(),
                         manager.partitions.is_owned(partition)))
            yield from ()

    manager.topic = cast(OffsetsTopic, WatchedTopic())
    manager.load_partition(1, lambda group: None)
    assert seen == [(True, True, False)]
    assert not manager.partitions.any_loading() and manager.partitions.is_owned(1)


def test_unloading_a_partition_drops_only_its_groups() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    ids = [f"group-{i}" for i in range(12)]
    for group_id in ids:
        manager.add_group(GroupMetadata(group_id, state_timestamp_ms=clock.now))
    partition = manager.partition_for(ids[0])
    unloaded: list[str] = []
    manager.unload_partition(partition, lambda g: unloaded.append(g.group_id))
    assert sorted(unloaded) == sorted(g for g in ids if manager.partition_for(g) == partition)
    assert set(manager.groups) == set(ids) - set(unloaded)
    assert not manager.partitions.is_owned(partition)


# -- retention --------------------------------------------------------------------------------
def test_expired_offsets_of_empty_groups_are_tombstoned() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock, retention_ms=60_000)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    manager.store_offsets(group, {("t", 0): (3, -1, "")})
    clock.now += 30_000
    manager.store_offsets(group, {("t", 1): (4, -1, "")})
    assert manager.expire_offsets(clock.now + 40_000) == 1  # (t,0) is 70 s old
    assert set(group.offsets) == {("t", 1)}
    assert manager.expire_offsets(clock.now + 70_000) == 1
    assert manager.get_group("s") is None and group.state is GroupState.DEAD
    assert (OffsetCommitKey("s", "t", 0), None) in written(topic, manager, "s")
    assert (GroupMetadataKey("s"), None) in written(topic, manager, "s")


def test_commit_retention_time_sets_an_expire_timestamp() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock, retention_ms=60_000)
    group = manager.add_group(GroupMetadata("s", state_timestamp_ms=clock.now))
    manager.store_offsets(group, {("t", 0): (3, -1, "")}, retention_ms=1000)
    manager.store_offsets(group, {("t", 1): (4, -1, "")})
    assert group.offsets[("t", 0)].expire_timestamp == clock.now + 1000
    assert manager.expire_offsets(clock.now + 1000) == 1
    assert set(group.offsets) == {("t", 1)}


def test_a_stable_group_keeps_subscribed_offsets_and_expires_the_others() -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock, retention_ms=60_000)
    group = stable_group(manager, "g", clock.now, "m-1")
    manager.store_offsets(group, {("t", 0): (1, -1, ""), ("old", 0): (2, -1, "")})
    assert manager.expire_offsets(clock.now + 59_999) == 0
    assert manager.expire_offsets(clock.now + 60_000) == 1
    assert set(group.offsets) == {("t", 0)} and group.state is GroupState.STABLE


# -- loading goes through the state table ----------------------------------------------------
def test_a_loaded_group_replays_its_rebalance_through_the_state_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    written_at = clock.now - 5000
    stable = stable_group(manager, "g", written_at, "m-1")
    manager.store_group(stable)
    empty = manager.add_group(GroupMetadata("e", state_timestamp_ms=written_at))
    empty.transition_to(GroupState.PREPARING_REBALANCE, written_at)
    empty.init_next_generation(written_at)  # a group whose last member left: Empty, gen 1
    manager.store_group(empty)
    moves: list[tuple[str, GroupState, GroupState]] = []

    me = threading.get_ident()  # the check is process-wide: another test's broker uses it

    def spy(group_id: str, current: GroupState, target: GroupState) -> None:
        if threading.get_ident() == me:
            moves.append((group_id, current, target))
        check_transition(group_id, current, target)

    monkeypatch.setattr(group_metadata, "check_transition", spy)
    fresh = make_manager(topic, clock)
    assert moves == [
        ("g", GroupState.EMPTY, GroupState.PREPARING_REBALANCE),
        ("g", GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE),
        ("g", GroupState.COMPLETING_REBALANCE, GroupState.STABLE),
    ]
    loaded = fresh.get_group("g")
    assert loaded is not None and loaded.state is GroupState.STABLE
    assert loaded.state_timestamp_ms == written_at  # the record's, not the load time
    loaded_empty = fresh.get_group("e")
    assert loaded_empty is not None
    assert (loaded_empty.state, loaded_empty.generation_id) == (GroupState.EMPTY, 1)


def test_a_load_the_state_table_forbids_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    topic, clock = FakeOffsetsTopic(), Clock()
    manager = make_manager(topic, clock)
    manager.store_group(stable_group(manager, "g", clock.now, "m-1"))
    partition = manager.partition_for("g")
    monkeypatch.setitem(VALID_PREVIOUS_STATES, GroupState.STABLE, frozenset())
    fresh = make_manager(topic, clock, load=False)
    with pytest.raises(IllegalStateTransitionError) as raised:
        fresh.load_partition(partition, lambda group: None)
    assert "CompletingRebalance to Stable" in str(raised.value)
    assert f"__consumer_offsets-{partition}" in "".join(raised.value.__notes__)
    assert fresh.get_group("g") is None
    assert not fresh.partitions.is_loading(partition)
    assert not fresh.partitions.is_owned(partition)
