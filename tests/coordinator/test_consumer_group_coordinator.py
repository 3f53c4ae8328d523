"""KIP-848 consumer groups in the group coordinator, driven directly (no network):
the session timer on the loop, a coordinator that resigns and is elected again, listing
and deleting, and commits checked against member epochs (``__consumer_offsets`` is the
in-memory fake of ``test_group_coordinator.py``)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

from odradek.coordinator.consumer_group import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    TopicMetadata,
)
from odradek.coordinator.group_coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    consumer_group_config,
)
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.protocol.errors import ErrorCode
from tests.coordinator._offsets_topic import Clock, FakeOffsetsTopic

TOPIC = TopicMetadata(uuid.UUID(int=7), "t", 2)
TOPICS = {"t": TOPIC}


def run(body: Callable[[GroupCoordinator, FakeOffsetsTopic, Clock], Awaitable[None]],
        consumer: ConsumerGroupConfig | None = None) -> None:
    async def main() -> None:
        topic = FakeOffsetsTopic()
        clock = Clock()
        config = CoordinatorConfig(min_session_timeout_ms=1,
                                   consumer=consumer or ConsumerGroupConfig())
        coordinator = GroupCoordinator(cast(OffsetsTopic, topic), config, time_ms=clock)
        coordinator.startup()
        try:
            await body(coordinator, topic, clock)
        finally:
            coordinator.shutdown()

    asyncio.run(asyncio.wait_for(main(), 20))


def join(member_id: str, instance_id: str | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(member_id, 0, instance_id=instance_id, rebalance_timeout_ms=5000,
                            subscribed_topic_names=("t",), owned={})


def test_the_session_timer_fences_a_silent_member() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, clock: Clock) -> None:
        assert (await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)).member_epoch == 1
        group = c.consumer_group("g")
        assert group is not None
        clock.now += 30  # still within the session: the timer fires and finds nothing
        await asyncio.sleep(0.06)
        assert "m1" in group.members
        clock.now += 100
        await asyncio.sleep(0.1)  # the timer was set for 50 ms after the heartbeat
        assert group.is_empty() and group.group_epoch == 2

    run(body, ConsumerGroupConfig(session_timeout_ms=50, heartbeat_interval_ms=10))


def test_a_resigned_coordinator_elected_again_loads_its_consumer_groups() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        partition = c.partition_for("g")
        c.on_resigned(partition)
        assert c.consumer_group("g") is None
        beat = HeartbeatRequest("m1", 1, owned={TOPIC.topic_id: frozenset({0, 1})})
        assert (await c.consumer_group_heartbeat("g", beat, 1, TOPICS)).error == (
            ErrorCode.not_coordinator)
        c.on_elected(partition)
        result = await c.consumer_group_heartbeat("g", beat, 1, TOPICS)
        assert (result.error, result.member_epoch) == (ErrorCode.none, 1)
        # Kafka's answers for a group, and a member, it does not know
        unknown = await c.consumer_group_heartbeat("h", beat, 1, TOPICS)
        assert unknown.error == ErrorCode.group_id_not_found
        ghost = await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("m9", 1, owned={}), 1, TOPICS)
        assert ghost.error == ErrorCode.unknown_member_id

    run(body)


def owned(*partitions: int) -> dict[uuid.UUID, frozenset[int]]:
    return {TOPIC.topic_id: frozenset(partitions)} if partitions else {}


def fresh(topic: FakeOffsetsTopic, clock: Clock,
          consumer: ConsumerGroupConfig | None = None) -> GroupCoordinator:
    """A coordinator that loads every partition of ``topic``: the one a failover elects."""
    config = CoordinatorConfig(min_session_timeout_ms=1,
                               consumer=consumer or ConsumerGroupConfig())
    coordinator = GroupCoordinator(cast(OffsetsTopic, topic), config, time_ms=clock)
    coordinator.startup()
    return coordinator


def test_a_fresh_coordinator_loads_a_group_mid_revocation_and_it_carries_on() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        assert (await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)).assignment == (
            owned(0, 1))
        # m2 joins: m1 must revoke one partition first (epoch 2 waits for it)
        second = await c.consumer_group_heartbeat("g", join("m2"), 1, TOPICS)
        assert (second.member_epoch, second.assignment) == (2, {})
        revoking = await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("m1", 1, owned=owned(0, 1)), 1, TOPICS)
        assert revoking.member_epoch == 1 and revoking.assignment is not None
        kept = revoking.assignment[TOPIC.topic_id]
        assert len(kept) == 1
        written = sum(len(records) for records in topic.records.values())
        # a heartbeat that changes nothing writes nothing
        await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("m1", 1, owned=owned(0, 1)), 1, TOPICS)
        assert sum(len(records) for records in topic.records.values()) == written
        c.shutdown()  # killed: nothing more is written

        clock.now += 1000
        other = fresh(topic, clock)
        try:
            group = other.consumer_group("g")
            assert group is not None
            assert (group.group_epoch, group.assignment_epoch) == (2, 2)
            assert group.state.value == "Reconciling"
            # m2 gets nothing until m1 released its partition
            still = await other.consumer_group_heartbeat(
                "g", HeartbeatRequest("m2", 2, owned={}), 1, TOPICS)
            assert (still.error, still.member_epoch) == (ErrorCode.none, 2)
            assert not still.assignment
            done = await other.consumer_group_heartbeat(
                "g", HeartbeatRequest("m1", 1, owned={TOPIC.topic_id: kept}), 1, TOPICS)
            assert (done.error, done.member_epoch) == (ErrorCode.none, 2)
            released = await other.consumer_group_heartbeat(
                "g", HeartbeatRequest("m2", 2, owned={}), 1, TOPICS)
            assert released.assignment == {TOPIC.topic_id: frozenset({0, 1}) - kept}
            assert group.state.value == "Stable"
            # and a third coordinator loads what the second wrote
            third = fresh(topic, clock)
            try:
                loaded = third.consumer_group("g")
                assert loaded is not None and loaded.state.value == "Stable"
                assert {m: dict(x.assigned) for m, x in loaded.members.items()} == {
                    m: dict(x.assigned) for m, x in group.members.items()}
            finally:
                third.shutdown()
        finally:
            other.shutdown()

    run(body)


def test_a_failed_append_puts_the_group_back_and_answers_not_coordinator() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        topic.fail_appends = True
        failed = await c.consumer_group_heartbeat("g", join("m2"), 1, TOPICS)
        assert failed.error == ErrorCode.not_coordinator
        group = c.consumer_group("g")
        assert group is not None and set(group.members) == {"m1"}
        assert group.group_epoch == 1 and group.owner_of(TOPIC.topic_id, 0) == "m1"
        # a new group that could not be written is not created
        assert (await c.consumer_group_heartbeat("h", join("m1"), 1, TOPICS)).error == (
            ErrorCode.not_coordinator)
        assert c.consumer_group("h") is None
        # the leave is not stored: the member is still there
        left = await c.consumer_group_heartbeat("g", HeartbeatRequest("m1", -1), 1, TOPICS)
        group = c.consumer_group("g")  # the group as the log holds it
        assert left.error == ErrorCode.not_coordinator
        assert group is not None and "m1" in group.members
        topic.fail_appends = False
        again = await c.consumer_group_heartbeat("g", join("m2"), 1, TOPICS)
        assert (again.error, again.member_epoch) == (ErrorCode.none, 2)
        c.shutdown()
        other = fresh(topic, clock)
        try:
            loaded = other.consumer_group("g")
            assert loaded is not None and set(loaded.members) == {"m1", "m2"}
        finally:
            other.shutdown()

    run(body)


def test_a_timed_out_replication_is_coordinator_not_available() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        async def timed_out(_group_id: str) -> ErrorCode:
            return ErrorCode.request_timed_out

        c.wait_replicated = timed_out
        result = await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        assert result.error == ErrorCode.coordinator_not_available
        # the records are in the log: the group is kept, the member retries its join
        assert c.consumer_group("g") is not None
        c.wait_replicated = None
        again = await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        assert (again.error, again.member_epoch) == (ErrorCode.none, 1)

    run(body)


def test_fencing_leaving_and_deleting_are_stored() -> None:
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        await c.consumer_group_heartbeat("g", join("m2"), 1, TOPICS)
        await c.consumer_group_heartbeat("a", join("m1"), 1, TOPICS)
        await c.consumer_group_heartbeat("a", HeartbeatRequest("m1", -1), 1, TOPICS)
        c.commit_offsets("g", "m2", None, 2, {("t", 0): (5, -1, None)}, api_version=9)
        clock.now += 100  # past the session of both: m2's heartbeat keeps it
        await c.consumer_group_heartbeat("g", HeartbeatRequest("m2", 2, owned={}), 1, TOPICS)
        await asyncio.sleep(0.06)  # m1's timer fires
        group = c.consumer_group("g")
        assert group is not None and set(group.members) == {"m2"} and group.group_epoch == 3
        other = fresh(topic, clock, CONFIG)
        try:
            loaded = other.consumer_group("g")
            assert loaded is not None and set(loaded.members) == {"m2"}
            assert loaded.group_epoch == 3
            assert other.consumer_group("a") is None  # left and forgotten: tombstoned
        finally:
            other.shutdown()
        await c.consumer_group_heartbeat("g", HeartbeatRequest("m2", -1), 1, TOPICS)
        assert c.delete_groups(["g"]) == {"g": ErrorCode.none}
        c.shutdown()
        other = fresh(topic, clock, CONFIG)
        try:
            assert other.consumer_group("g") is None
            assert other.fetch_offsets("g", None, False)[1] == {}
        finally:
            other.shutdown()

    run(body, CONFIG)


CONFIG = ConsumerGroupConfig(session_timeout_ms=50, heartbeat_interval_ms=10)


def test_a_consumer_group_is_listed_after_its_offsets_holder_expired() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        clock.now += 365 * 24 * 3600 * 1000
        c.manager.expire_offsets()  # the empty classic holder of its offsets goes
        assert "g" not in c.manager.groups
        error, listed = c.list_groups()
        assert error == ErrorCode.none
        assert [(s.group_id, s.group_type, s.state) for s in listed] == [
            ("g", "consumer", "Stable")]
        # a commit brings the holder back
        assert c.commit_offsets("g", "m1", None, 1, {("t", 0): (5, -1, None)},
                                api_version=9) == {("t", 0): ErrorCode.none}
        assert c.fetch_offsets("g", [("t", 0)], False, "m1", 1)[1][("t", 0)] is not None

    run(body)


def test_delete_after_the_last_member_left() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        c.commit_offsets("g", "m1", None, 1, {("t", 0): (5, -1, None)}, api_version=9)
        assert c.delete_groups(["g"]) == {"g": ErrorCode.non_empty_group}
        await c.consumer_group_heartbeat("g", HeartbeatRequest("m1", -1), 1, TOPICS)
        assert c.consumer_group("g") is not None  # empty, with offsets
        assert c.delete_groups(["g"]) == {"g": ErrorCode.none}
        assert c.consumer_group("g") is None and c.fetch_offsets("g", None, False)[1] == {}
        assert c.delete_groups(["g"]) == {"g": ErrorCode.group_id_not_found}

    run(body)


def test_transactional_commits_of_a_consumer_group_member() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {("t", 0): (3, -1, None)}
        assert c.txn_commit_offsets("g", 1, 0, "m1", None, 2, offsets) == {
            ("t", 0): ErrorCode.illegal_generation}
        assert c.txn_commit_offsets("g", 1, 0, "ghost", None, 1, offsets) == {
            ("t", 0): ErrorCode.unknown_member_id}
        assert c.txn_commit_offsets("g", 1, 0, "m1", None, 1, offsets) == {
            ("t", 0): ErrorCode.none}

    run(body)


def test_the_broker_configs_of_consumer_groups() -> None:
    values: dict[str, Any] = {
        "group.consumer.session.timeout.ms": 3000,
        "group.consumer.heartbeat.interval.ms": 100,
        "group.consumer.max.size": 7,
        "group.consumer.assignors": (
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor", "uniform"),
    }
    assert consumer_group_config(values) == ConsumerGroupConfig(
        session_timeout_ms=3000, heartbeat_interval_ms=100, max_size=7,
        assignors=("range", "uniform"))
    assert consumer_group_config({}) == ConsumerGroupConfig()


def test_an_empty_consumer_group_is_kept_while_it_has_offsets() -> None:
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, clock: Clock) -> None:
        await c.consumer_group_heartbeat("a", join("m1"), 1, TOPICS)
        await c.consumer_group_heartbeat("a", HeartbeatRequest("m1", -1), 1, TOPICS)
        assert c.consumer_group("a") is None  # nothing to keep: forgotten
        await c.consumer_group_heartbeat("b", join("m1"), 1, TOPICS)
        c.commit_offsets("b", "m1", None, 1, {("t", 0): (5, -1, None)}, api_version=9)
        await c.consumer_group_heartbeat("b", HeartbeatRequest("m1", -1), 1, TOPICS)
        assert [(s.group_id, s.state) for s in c.list_groups()[1]] == [("b", "Empty")]
        clock.now += 365 * 24 * 3600 * 1000
        c.manager.expire_offsets()
        assert c.list_groups()[1] == [] and c.consumer_group("b") is None

    run(body)


def test_a_heartbeat_writing_nothing_waits_for_the_records_still_pending() -> None:
    """Kafka's runtime defers a write that produced no records until the shard's pending
    writes are committed: an assignment whose records the ISR does not hold yet (a
    failover would lose them and give the partitions to another member) is not answered,
    even to a heartbeat that itself changes nothing."""
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, _clock: Clock) -> None:
        isr_has_it = False
        waits: list[str] = []

        async def replicated(group_id: str) -> ErrorCode:
            waits.append(group_id)
            return ErrorCode.none if isr_has_it else ErrorCode.request_timed_out

        c.wait_replicated = replicated
        first = await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        assert first.error == ErrorCode.coordinator_not_available
        # the member retries: nothing new to write, but its assignment is not committed
        retry = await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        assert retry.error == ErrorCode.coordinator_not_available
        steady = await c.consumer_group_heartbeat(
            "g", HeartbeatRequest("m1", 1, owned=owned(0, 1)), 1, TOPICS)
        assert steady.error == ErrorCode.coordinator_not_available
        assert waits == ["g", "g", "g"]
        isr_has_it = True
        again = await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        assert (again.error, again.member_epoch, again.assignment) == (
            ErrorCode.none, 1, owned(0, 1))

    run(body)


def _compacted(records: list[Any], drop_tombstones: bool) -> list[Any]:
    """``records`` as the log cleaner leaves them: the last record of each key, and with
    ``drop_tombstones`` (past ``delete.retention.ms``) no tombstone."""
    last = {item[0]: i for i, item in enumerate(records)}
    return [item for i, item in enumerate(records)
            if last[item[0]] == i and not (drop_tombstones and item[1] is None)]


def _state(c: GroupCoordinator, group_id: str) -> object:
    """What a load must give back of a consumer group (timers restart at a load)."""
    g = c.consumer_group(group_id)
    if g is None:
        return None
    return (g.group_epoch, g.assignment_epoch,
            {m.member_id: (m.member_epoch, m.previous_member_epoch, m.state,
                           dict(m.assigned), dict(m.pending_revocation))
             for m in g.members.values()},
            {k: dict(v) for k, v in g.target.items()})


def test_a_compacted_log_loads_the_groups_the_coordinator_holds_through_failed_appends(
) -> None:
    """Joins, steady heartbeats, leaves, commits, deletions, fencing by the timer, two
    groups sharing member ids, appends failing at random: after every step the log, as
    written and as the cleaner leaves it (with and without its tombstones), loads exactly
    the groups the coordinator holds (the snapshot kept beside each group never drifts
    from the log)."""
    async def body(c: GroupCoordinator, topic: FakeOffsetsTopic, clock: Clock) -> None:
        rnd = random.Random(7)
        for step in range(200):
            group_id, member_id, op = rnd.choice("gh"), rnd.choice(("m1", "m2", "m3")), rnd.random()
            if rnd.random() < 0.15:
                topic.fail_appends = not topic.fail_appends
            group = c.consumer_group(group_id)
            member = None if group is None else group.members.get(member_id)
            if op < 0.4:
                await c.consumer_group_heartbeat(group_id, join(member_id), 1, TOPICS)
            elif op < 0.7 and member is not None:
                await c.consumer_group_heartbeat(group_id, HeartbeatRequest(
                    member_id, member.member_epoch, owned=dict(member.assigned)), 1, TOPICS)
            elif op < 0.85 and member is not None:
                await c.consumer_group_heartbeat(
                    group_id, HeartbeatRequest(member_id, -1), 1, TOPICS)
            elif op < 0.9 and member is not None:
                c.commit_offsets(group_id, member_id, None, member.member_epoch,
                                 {("t", 0): (step, -1, None)}, api_version=9)
            elif op < 0.95:
                c.delete_groups([group_id])
            else:
                clock.now += 60  # every session ends: the timers fence (or retry)
                await asyncio.sleep(0.06)
            failing, topic.fail_appends = topic.fail_appends, False
            want = {g: _state(c, g) for g in "gh"}
            written = topic.records
            for compaction in (None, False, True):
                topic.records = written if compaction is None else {
                    p: _compacted(r, compaction) for p, r in written.items()}
                other = fresh(topic, clock, CONFIG)
                try:
                    assert {g: _state(other, g) for g in "gh"} == want, (step, compaction)
                finally:
                    other.shutdown()
            topic.records, topic.fail_appends = written, failing

    run(body, CONFIG)


def test_a_consumer_groups_offsets_of_subscribed_topics_do_not_expire() -> None:
    """Kafka's OffsetMetadataManager.cleanupExpiredOffsets leaves the topics a group
    subscribes to (ConsumerGroup.isSubscribedToTopic): a member reading a topic nobody
    writes to commits nothing new for weeks, and its position must not go."""
    async def body(c: GroupCoordinator, _topic: FakeOffsetsTopic, clock: Clock) -> None:
        await c.consumer_group_heartbeat("g", join("m1"), 1, TOPICS)
        c.commit_offsets("g", "m1", None, 1,
                         {("t", 0): (5, -1, None), ("gone", 0): (7, -1, None)}, api_version=9)
        clock.now += 8 * 24 * 3600 * 1000  # past offsets.retention.minutes (7 days)
        assert c.manager.expire_offsets() == 1  # the unsubscribed topic's only
        offsets = c.manager.groups["g"].offsets
        assert set(offsets) == {("t", 0)} and offsets[("t", 0)].offset == 5
        await c.consumer_group_heartbeat("g", HeartbeatRequest("m1", -1), 1, TOPICS)
        assert c.manager.expire_offsets() == 1  # nobody subscribes any more: it goes
        assert c.list_groups()[1] == []

    run(body)
