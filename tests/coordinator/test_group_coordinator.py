"""The group coordinator driven directly (no network): rebalances, timers, commit checks,
reload.

``__consumer_offsets`` is replaced by an in-memory list of (key, value) records per
partition, so every test can also check what would be written and replay it. What the
manager does on its own (storing, loading, expiring) is tested in
``test_group_metadata_manager.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.group_coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinResult,
)
from odradek.coordinator.group_records import GroupMetadataKey, decode_key
from odradek.coordinator.group_state import GroupState
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.protocol.errors import ErrorCode
from tests.coordinator._offsets_topic import Clock, FakeOffsetsTopic


def run(body: Callable[[GroupCoordinator, FakeOffsetsTopic, Clock], Awaitable[None]],
        **config: Any) -> None:
    async def main() -> None:
        topic = FakeOffsetsTopic()
        clock = Clock()
        settings = {"min_session_timeout_ms": 1, **config}
        coordinator = GroupCoordinator(cast(OffsetsTopic, topic), CoordinatorConfig(**settings),
                                       time_ms=clock)
        coordinator.startup()
        try:
            await body(coordinator, topic, clock)
        finally:
            coordinator.shutdown()

    asyncio.run(asyncio.wait_for(main(), 20))


PROTOCOLS = [("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")]


async def join(c: GroupCoordinator, group: str = "g", member: str = "", *,
               session: int = 10000, rebalance: int = 10000, instance: str | None = None,
               protocols: list[tuple[str, bytes]] | None = None,
               require_known: bool = True) -> JoinResult:
    return await c.join_group(group, member, instance, require_known, "client", "/127.0.0.1",
                              rebalance, session, "consumer", protocols or PROTOCOLS)


async def join_new(c: GroupCoordinator, group: str = "g", **kw: Any) -> JoinResult:
    first = await join(c, group, **kw)
    if first.error != ErrorCode.member_id_required:
        return first
    return await join(c, group, first.member_id, **kw)


def test_first_join_requires_a_member_id_then_one_member_group_is_formed() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        first = await join(c)
        assert first.error == ErrorCode.member_id_required
        assert first.member_id.startswith("client-")
        result = await join(c, "g", first.member_id)
        assert result.error == ErrorCode.none
        assert (result.generation_id, result.leader_id, result.protocol_name) == (
            1, first.member_id, "range")
        assert [m[0] for m in result.members] == [first.member_id]
        sync = await c.sync_group("g", 1, first.member_id, None, "consumer", "range",
                                  {first.member_id: b"A"})
        assert (sync.error, sync.assignment) == (ErrorCode.none, b"A")
        assert c.groups["g"].state is GroupState.STABLE
        assert c.heartbeat("g", 1, first.member_id, None) == ErrorCode.none
        assert c.heartbeat("g", 0, first.member_id, None) == ErrorCode.illegal_generation
        assert c.heartbeat("g", 1, "stranger", None) == ErrorCode.unknown_member_id
        assert c.heartbeat("nope", 1, first.member_id, None) == ErrorCode.unknown_member_id
        keys = [decode_key(k) for k, _ in topic.records[c.partition_for("g")]]
        assert GroupMetadataKey("g") in keys

    run(body)


def test_old_join_versions_get_an_id_without_member_id_required() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        result = await join(c, require_known=False)
        assert result.error == ErrorCode.none and result.member_id

    run(body)


def test_second_member_triggers_a_rebalance_and_both_get_the_new_generation() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"all"})
        b_task = asyncio.create_task(join_new(c))
        await asyncio.sleep(0.01)
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert c.heartbeat("g", 1, a.member_id, None) == ErrorCode.rebalance_in_progress
        a2 = await join(c, "g", a.member_id)
        b = await b_task
        assert a2.generation_id == b.generation_id == 2
        assert a2.leader_id == a.member_id and len(a2.members) == 2 and not b.members
        follower = asyncio.create_task(
            c.sync_group("g", 2, b.member_id, None, None, None, {}))
        await asyncio.sleep(0.01)
        assert not follower.done()  # waits for the leader's assignment
        leader = await c.sync_group("g", 2, a.member_id, None, None, None,
                                    {a.member_id: b"A", b.member_id: b"B"})
        assert leader.assignment == b"A" and (await follower).assignment == b"B"
        # a leave sends the group back to rebalancing; the other member rejoins alone
        assert c.leave_group("g", [(b.member_id, None)]) == (ErrorCode.none, [ErrorCode.none])
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        a3 = await join(c, "g", a.member_id)
        assert a3.generation_id == 3 and len(a3.members) == 1
        assert c.leave_group("g", [("ghost", None)])[1] == [ErrorCode.unknown_member_id]

    run(body)


def test_sync_errors() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c)
        m = a.member_id
        assert (await c.sync_group("g", 5, m, None, None, None, {})).error == (
            ErrorCode.illegal_generation)
        assert (await c.sync_group("g", 1, "x", None, None, None, {})).error == (
            ErrorCode.unknown_member_id)
        assert (await c.sync_group("g", 1, m, None, "connect", None, {})).error == (
            ErrorCode.inconsistent_group_protocol)
        assert (await c.sync_group("g", 1, m, None, None, "roundrobin", {})).error == (
            ErrorCode.inconsistent_group_protocol)
        assert (await c.sync_group("nope", 1, m, None, None, None, {})).error == (
            ErrorCode.unknown_member_id)
        other = await join(c, protocols=[("sticky", b"")])
        assert other.error == ErrorCode.inconsistent_group_protocol

    run(body)


def test_session_timeout_removes_a_silent_member() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c, session=100)
        await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
        await asyncio.sleep(0.3)
        group = c.groups["g"]
        assert not group.members
        assert group.state is GroupState.EMPTY and group.generation_id == 2

    run(body)


def test_heartbeats_keep_a_member_alive() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c, session=150)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        for _ in range(6):
            await asyncio.sleep(0.05)
            assert c.heartbeat("g", 1, a.member_id, None) == ErrorCode.none
        assert a.member_id in c.groups["g"].members

    run(body)


def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c, session=5000, rebalance=200)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        started = asyncio.get_running_loop().time()
        b = await join_new(c, session=5000, rebalance=200)  # a never rejoins
        waited = asyncio.get_running_loop().time() - started
        assert b.error == ErrorCode.none and b.generation_id == 2
        assert b.leader_id == b.member_id and len(b.members) == 1
        assert 0.15 < waited < 2

    run(body)


def test_pending_member_that_never_joins_expires() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        first = await join(c, session=100)
        assert first.member_id in c.groups["g"].pending_members
        await asyncio.sleep(0.25)
        assert first.member_id not in c.groups["g"].pending_members

    run(body)


def test_pending_member_keeps_its_id_across_a_completed_join() -> None:
    """KIP-394, as Kafka: a member id handed out with MEMBER_ID_REQUIRED stays pending when
    a join round completes without it, until it joins or its session timeout passes (it
    used to be dropped, and the member's join came back UNKNOWN_MEMBER_ID)."""
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        kw: dict[str, Any] = {"session": 5000, "rebalance": 200}
        a = await join_new(c, **kw)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        pending = await join(c, **kw)
        assert pending.error == ErrorCode.member_id_required
        newcomer = asyncio.create_task(join_new(c, **kw))  # a rebalance without `pending`
        await asyncio.sleep(0.01)
        a2, b = await asyncio.gather(join(c, "g", a.member_id, **kw), newcomer)
        assert a2.generation_id == b.generation_id == 2
        assert pending.member_id in c.groups["g"].pending_members
        late = asyncio.create_task(join(c, "g", pending.member_id, **kw))
        await asyncio.sleep(0.01)
        a3, b3, late_result = await asyncio.gather(
            join(c, "g", a.member_id, **kw), join(c, "g", b.member_id, **kw), late)
        assert late_result.error == ErrorCode.none
        assert a3.generation_id == b3.generation_id == late_result.generation_id == 3
        assert pending.member_id in c.groups["g"].members

    run(body)


def test_pending_member_that_outlives_a_join_round_expires_with_its_session_timeout() -> None:
    """A pending member kept across a completed round is still dropped after its session
    timeout if it never joins; its late join is then UNKNOWN_MEMBER_ID, and the group
    is left alone (no rebalance)."""
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        kw: dict[str, Any] = {"session": 5000, "rebalance": 100}
        a = await join_new(c, **kw)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        pending = await join(c, session=400, rebalance=100)
        assert pending.error == ErrorCode.member_id_required
        newcomer = asyncio.create_task(join_new(c, **kw))
        await asyncio.sleep(0.01)
        a2, b = await asyncio.gather(join(c, "g", a.member_id, **kw), newcomer)
        assert a2.generation_id == b.generation_id == 2
        follower = asyncio.create_task(c.sync_group("g", 2, b.member_id, None, None, None, {}))
        await c.sync_group("g", 2, a.member_id, None, None, None, {})
        await follower
        group = c.groups["g"]
        assert group.state is GroupState.STABLE
        assert pending.member_id in group.pending_members  # the round did not drop it
        await asyncio.sleep(0.45)  # past the pending member's 400 ms session timeout
        assert pending.member_id not in group.pending_members
        assert (group.state, group.generation_id) == (GroupState.STABLE, 2)
        late = await join(c, "g", pending.member_id, session=400, rebalance=100)
        assert late.error == ErrorCode.unknown_member_id
        assert (group.state, group.generation_id) == (GroupState.STABLE, 2)

    run(body)


def test_pending_member_joining_a_stable_group_triggers_a_rebalance() -> None:
    """As Kafka's addMemberAndRebalance: a pending member that joins with its id after the
    group went Stable without it is a new member, so the group rebalances to include it."""
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        kw: dict[str, Any] = {"session": 5000, "rebalance": 200}
        pending = await join(c, **kw)
        assert pending.error == ErrorCode.member_id_required
        a = await join_new(c, **kw)  # the first round completes without `pending`
        assert a.generation_id == 1 and len(a.members) == 1
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        assert c.groups["g"].state is GroupState.STABLE
        late = asyncio.create_task(join(c, "g", pending.member_id, **kw))
        await asyncio.sleep(0.01)
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert c.heartbeat("g", 1, a.member_id, None) == ErrorCode.rebalance_in_progress
        a2, late_result = await asyncio.gather(join(c, "g", a.member_id, **kw), late)
        assert late_result.error == ErrorCode.none
        assert a2.generation_id == late_result.generation_id == 2
        assert {m[0] for m in a2.members} == {a.member_id, pending.member_id}

    run(body)


def test_initial_rebalance_delay_gathers_members_into_one_generation() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        results = await asyncio.gather(*(join_new(c) for _ in range(3)))
        assert {r.generation_id for r in results} == {1}
        assert sum(1 for r in results if r.members) == 1

    run(body, initial_rebalance_delay_ms=100)


def test_static_member_rejoin_gets_its_assignment_back_without_rebalance() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c, instance="i-a")
        assert a.error == ErrorCode.none  # static members need no MEMBER_ID_REQUIRED round
        b_task = asyncio.create_task(join_new(c, instance="i-b"))
        await asyncio.sleep(0.01)
        a = await join(c, "g", a.member_id, instance="i-a")
        b = await b_task
        follower = asyncio.create_task(c.sync_group("g", 2, b.member_id, "i-b", None, None, {}))
        await c.sync_group("g", 2, a.member_id, "i-a", None, None,
                           {a.member_id: b"A", b.member_id: b"B"})
        await follower
        # b restarts: a new JoinGroup with no member id but the same instance id
        b2 = await join(c, instance="i-b")
        assert b2.error == ErrorCode.none and b2.member_id != b.member_id
        assert b2.generation_id == 2 and b2.leader_id == a.member_id
        assert c.groups["g"].state is GroupState.STABLE
        sync = await c.sync_group("g", 2, b2.member_id, "i-b", None, None, {})
        assert sync.assignment == b"B"
        # the old incarnation is fenced
        assert c.heartbeat("g", 2, b.member_id, "i-b") == ErrorCode.fenced_instance_id
        assert c.leave_group("g", [(b.member_id, "i-b")])[1] == [ErrorCode.fenced_instance_id]
        # a batched leave by instance id
        assert c.leave_group("g", [("", "i-b")])[1] == [ErrorCode.none]
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE

    run(body)


def test_offset_commits_of_simple_and_group_consumers() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        # a consumer without group management on an unknown group
        assert c.commit_offsets("simple", "", None, -1, {("t", 0): (5, -1, "m")}) == {
            ("t", 0): ErrorCode.none}
        assert c.groups["simple"].state is GroupState.EMPTY
        assert c.commit_offsets("unknown", "m", None, 3, {("t", 0): (5, -1, None)}) == {
            ("t", 0): ErrorCode.illegal_generation}
        error, offsets = c.fetch_offsets("simple", [("t", 0), ("t", 1)], False)
        assert error == ErrorCode.none
        committed = offsets[("t", 0)]
        assert committed is not None and (committed.offset, committed.metadata) == (5, "m")
        assert offsets[("t", 1)] is None
        a = await join_new(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        ok = c.commit_offsets("g", a.member_id, None, 1, {("t", 0): (10, 0, "")})
        assert ok == {("t", 0): ErrorCode.none}
        assert c.commit_offsets("g", a.member_id, None, 0, {("t", 0): (1, 0, "")}) == {
            ("t", 0): ErrorCode.illegal_generation}
        assert c.commit_offsets("g", "", None, -1, {("t", 0): (1, 0, "")}) == {
            ("t", 0): ErrorCode.unknown_member_id}
        assert c.commit_offsets("g", a.member_id, None, 1, {("t", 0): (1, 0, "x" * 5000)}) == {
            ("t", 0): ErrorCode.offset_metadata_too_large}
        topic.fail_appends = True
        assert c.commit_offsets("g", a.member_id, None, 1, {("t", 1): (1, 0, "")}) == {
            ("t", 1): ErrorCode.not_coordinator}
        topic.fail_appends = False
        assert c.fetch_offsets("g", [("t", 1)], False)[1][("t", 1)] is None

    run(body)


def test_groups_and_offsets_survive_a_reload() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c, instance="i-a")
        await c.sync_group("g", 1, a.member_id, "i-a", None, None, {a.member_id: b"A"})
        c.commit_offsets("g", a.member_id, "i-a", 1, {("t", 0): (7, 1, "x"), ("t", 1): (8, 1, "")})
        c.commit_offsets("g", a.member_id, "i-a", 1, {("t", 0): (9, 1, "y")})
        c.commit_offsets("s", "", None, -1, {("t", 0): (3, -1, "")})
        assert c.delete_offsets("s", [("t", 0)]) == (ErrorCode.none, {("t", 0): ErrorCode.none})
        c.commit_offsets("s2", "", None, -1, {("t", 0): (3, -1, "")})
        assert c.delete_groups(["s2"]) == {"s2": ErrorCode.none}
        fresh = GroupCoordinator(cast(OffsetsTopic, topic),
                                 CoordinatorConfig(min_session_timeout_ms=1), time_ms=clock)
        fresh.startup()
        try:
            group = fresh.groups["g"]
            assert group.state is GroupState.STABLE and group.generation_id == 1
            assert group.static_member_id("i-a") == a.member_id
            assert group.members[a.member_id].assignment == b"A"
            offsets = fresh.fetch_offsets("g", None, False)[1]
            assert {tp: o.offset for tp, o in offsets.items() if o} == {("t", 0): 9, ("t", 1): 8}
            assert "s" not in fresh.groups and "s2" not in fresh.groups
            assert fresh.heartbeat("g", 1, a.member_id, "i-a") == ErrorCode.none
        finally:
            fresh.shutdown()

    run(body)


def test_describe_list_delete() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
        c.commit_offsets("s", "", None, -1, {("t", 0): (3, -1, "")})
        summary = c.describe_group("g")
        assert (summary.state, summary.protocol_type, summary.protocol) == (
            "Stable", "consumer", "range")
        assert summary.members[0].assignment == b"A"
        assert c.describe_group("missing").error == ErrorCode.group_id_not_found
        assert [g.group_id for g in c.list_groups()[1]] == ["g", "s"]
        assert [g.group_id for g in c.list_groups(["empty"])[1]] == ["s"]
        assert c.delete_groups(["g", "s", "missing"]) == {
            "g": ErrorCode.non_empty_group, "s": ErrorCode.none,
            "missing": ErrorCode.group_id_not_found}
        error, results = c.delete_offsets("g", [("t", 0), ("other", 0)])
        assert error == ErrorCode.none
        assert results == {("t", 0): ErrorCode.group_subscribed_to_topic,
                           ("other", 0): ErrorCode.none}

    run(body)


def test_invalid_requests() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        assert (await join(c, "")).error == ErrorCode.invalid_group_id
        assert (await join(c, session=999_999_999)).error == ErrorCode.invalid_session_timeout
        assert (await join(c, "g", "made-up")).error == ErrorCode.unknown_member_id

    run(body)


@pytest.mark.parametrize("state", ["join", "sync"])
def test_shutdown_answers_parked_requests(state: str) -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        a = await join_new(c)
        if state == "join":
            await c.sync_group("g", 1, a.member_id, None, None, None, {})
            b = await join(c)
            parked: Any = asyncio.create_task(join(c, "g", b.member_id))
        else:
            b_task = asyncio.create_task(join_new(c))
            await asyncio.sleep(0.01)
            await join(c, "g", a.member_id)
            b = await b_task
            parked = asyncio.create_task(c.sync_group("g", 2, b.member_id, None, None, None, {}))
        await asyncio.sleep(0.01)
        c.shutdown()
        assert (await parked).error == ErrorCode.not_coordinator
        assert c.heartbeat("g", 1, a.member_id, None) == ErrorCode.coordinator_not_available

    run(body)


# -- property: random member behaviour never breaks the group's invariants -------------------
OPS = st.lists(st.tuples(st.sampled_from(["join", "leave", "sync", "heartbeat", "tick"]),
                         st.integers(0, 3)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, delay=st.sampled_from([0, 5]))
def test_random_member_behaviour_keeps_invariants(ops: list[tuple[str, int]],
                                                  delay: int) -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        ids: dict[int, str] = {}
        generation: dict[int, int] = {}
        tasks: list[asyncio.Task[Any]] = []

        async def do_join(slot: int) -> None:
            result = await join(c, "g", ids.get(slot, ""))
            if result.error == ErrorCode.member_id_required:
                ids[slot] = result.member_id
                result = await join(c, "g", result.member_id)
            if result.error == ErrorCode.none:
                ids[slot] = result.member_id
                generation[slot] = result.generation_id
            elif result.error == ErrorCode.unknown_member_id:
                ids.pop(slot, None)

        async def do_sync(slot: int) -> None:
            member = ids.get(slot)
            if member is None:
                return
            members = list(c.groups["g"].members) if "g" in c.groups else []
            await c.sync_group("g", generation.get(slot, -1), member, None, None, None,
                               {m: m.encode() for m in members})

        last_generation = 0
        for op, slot in ops:
            if op == "join":
                tasks.append(asyncio.create_task(do_join(slot)))
            elif op == "sync":
                tasks.append(asyncio.create_task(do_sync(slot)))
            elif op == "leave" and slot in ids:
                c.leave_group("g", [(ids.pop(slot), None)])
            elif op == "heartbeat" and slot in ids:
                c.heartbeat("g", generation.get(slot, -1), ids[slot], None)
            for _ in range(3):
                await asyncio.sleep(0)
            group = c.groups.get("g")
            if group is None:
                continue
            assert group.generation_id >= last_generation
            last_generation = group.generation_id
            if group.members:
                assert group.leader_id in group.members
            else:
                assert group.leader_id is None
            if group.state is GroupState.EMPTY:
                assert not group.members
            if group.state is GroupState.STABLE:
                assert all(m.assignment == m.member_id.encode() for m in group.members.values())
                assert not any(m.awaiting_join for m in group.members.values())
        c.shutdown()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)

    run(body, initial_rebalance_delay_ms=delay)


# -- transactional offsets (TxnOffsetCommit) ---------------------------------------------


def _txn_commit(c: GroupCoordinator, group: str, pid: int, offset: int,
                tp: tuple[str, int] = ("t", 0), generation: int = -1,
                member: str = "") -> dict[tuple[str, int], ErrorCode]:
    return c.txn_commit_offsets(group, pid, 0, member, None, generation, {tp: (offset, -1, "m")})


def test_txn_offsets_are_pending_until_the_commit_marker() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Any) -> None:
        assert _txn_commit(c, "g", 7, 42) == {("t", 0): ErrorCode.none}
        error, offsets = c.fetch_offsets("g", [("t", 0)], require_stable=True)
        assert error == ErrorCode.none and offsets[("t", 0)] is None
        assert c.unstable_offsets("g") == {("t", 0)}
        partition = c.partition_for("g")
        c.on_txn_marker(partition + 1, 7, commit=True)  # another partition: no effect
        assert c.unstable_offsets("g") == {("t", 0)}
        topic.marker(partition, 7, True)
        c.on_txn_marker(partition, 7, commit=True)
        assert c.unstable_offsets("g") == set()
        committed = c.fetch_offsets("g", [("t", 0)], require_stable=True)[1][("t", 0)]
        assert committed is not None and committed.offset == 42
        # reloaded from the log: committed by its marker
        fresh = GroupCoordinator(cast(OffsetsTopic, topic), CoordinatorConfig(), time_ms=clock)
        fresh.startup()
        loaded = fresh.fetch_offsets("g", [("t", 0)], False)[1][("t", 0)]
        assert loaded is not None and loaded.offset == 42
        fresh.shutdown()

    run(body)


def test_txn_offsets_of_an_aborted_transaction_are_dropped() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Any) -> None:
        c.commit_offsets("g", "", None, -1, {("t", 0): (5, -1, "")})
        _txn_commit(c, "g", 7, 42)
        partition = c.partition_for("g")
        topic.marker(partition, 7, False)
        c.on_txn_marker(partition, 7, commit=False)
        committed = c.fetch_offsets("g", [("t", 0)], True)[1][("t", 0)]
        assert committed is not None and committed.offset == 5
        assert c.unstable_offsets("g") == set()
        fresh = GroupCoordinator(cast(OffsetsTopic, topic), CoordinatorConfig(), time_ms=clock)
        fresh.startup()
        loaded = fresh.fetch_offsets("g", [("t", 0)], False)[1][("t", 0)]
        assert loaded is not None and loaded.offset == 5
        fresh.shutdown()

    run(body)


def test_an_open_transaction_stays_pending_across_a_reload() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Any) -> None:
        _txn_commit(c, "g", 9, 11)
        fresh = GroupCoordinator(cast(OffsetsTopic, topic), CoordinatorConfig(), time_ms=clock)
        fresh.startup()
        assert fresh.unstable_offsets("g") == {("t", 0)}
        fresh.on_txn_marker(fresh.partition_for("g"), 9, commit=True)
        loaded = fresh.fetch_offsets("g", [("t", 0)], False)[1][("t", 0)]
        assert loaded is not None and loaded.offset == 11
        fresh.shutdown()

    run(body)


def test_txn_offset_commit_checks_member_and_generation() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Any) -> None:
        assert _txn_commit(c, "g", 7, 1, member="nobody") == {
            ("t", 0): ErrorCode.unknown_member_id}
        assert _txn_commit(c, "g", 7, 1, generation=3) == {
            ("t", 0): ErrorCode.illegal_generation}
        assert c.txn_commit_offsets("", 7, 0, "", None, -1, {("t", 0): (1, -1, "")}) == {
            ("t", 0): ErrorCode.invalid_group_id}

    run(body)
