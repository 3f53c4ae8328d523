"""Group and offset APIs over a real socket with hand-built kio requests: every served
version of JoinGroup/SyncGroup/Heartbeat/LeaveGroup, FindCoordinator (single and batched
keys), OffsetCommit/OffsetFetch (several groups, topic ids), DescribeGroups, ListGroups
filters, DeleteGroups and OffsetDelete, and the ``odradek groups`` CLI."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.coordinator.group_protocol import encode_assignment
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC
from odradek.records.builder import build_batch
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server._requests import call, req

SESSION = datetime.timedelta(seconds=10)
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides={"group.min.session.timeout.ms": "100"}) as broker:
        yield broker


def new_topic(rb: RunningBroker, partitions: int = 2, records: int = 0) -> str:
    name = f"grp-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, {})
    for p in range(partitions):
        log = rb.broker.get_log(name, p)
        assert log is not None
        for _ in range(records):
            rb.call(log.append_as_leader,
                    build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000)))
    return name


def join_request(version: int, group: str, member_id: str = "", instance: str | None = None) -> Any:
    m = req("join_group", version)
    return m.JoinGroupRequest(
        group_id=group, session_timeout=SESSION, rebalance_timeout=SESSION,
        member_id=member_id, group_instance_id=instance, protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION),),
        reason=None,
    ) if version >= 8 else _old_join(m, version, group, member_id, instance)


def _old_join(m: Any, version: int, group: str, member_id: str, instance: str | None) -> Any:
    kwargs: dict[str, Any] = {
        "group_id": group, "session_timeout": SESSION, "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": (m.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION),),
    }
    if version >= 1:
        kwargs["rebalance_timeout"] = SESSION
    if version >= 5:
        kwargs["group_instance_id"] = instance
    return m.JoinGroupRequest(**kwargs)


# -- FindCoordinator ------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_every_version(rb: RunningBroker, version: int) -> None:
    m = req("find_coordinator", version)
    if version == 0:
        request = m.FindCoordinatorRequest(key="g-find")
    elif version < 4:
        request = m.FindCoordinatorRequest(key="g-find", key_type=0)
    else:
        request = m.FindCoordinatorRequest(key_type=0, coordinator_keys=("g-a", "g-b"))
    (response,) = call(rb, request)
    answers = response.coordinators if version >= 4 else [response]
    for answer in answers:
        assert answer.error_code == ErrorCode.none
        assert (answer.node_id, answer.host, answer.port) == (0, "127.0.0.1", rb.port)
    if version >= 4:
        assert [c.key for c in response.coordinators] == ["g-a", "g-b"]
    info = rb.broker.metadata.get(OFFSETS_TOPIC)
    assert info is not None and len(info.partitions) == 50
    assert info.configs["cleanup.policy"] == "compact"
    assert info.configs["segment.bytes"] == "104857600"


def test_find_coordinator_other_key_types(rb: RunningBroker) -> None:
    m3, m6 = req("find_coordinator", 3), req("find_coordinator", 6)
    txn, share = call(rb, m3.FindCoordinatorRequest(key="tx", key_type=1),
                      m6.FindCoordinatorRequest(key_type=2, coordinator_keys=("s",)))
    assert txn.error_code == ErrorCode.none and txn.node_id == rb.broker.broker_id
    assert share.coordinators[0].error_code == ErrorCode.invalid_request


# -- membership, every version ----------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 10))
def test_join_sync_heartbeat_leave_every_version(rb: RunningBroker, version: int) -> None:
    group = f"g-join-v{version}"
    (first,) = call(rb, join_request(version, group))
    if version >= 4:
        assert first.error_code == ErrorCode.member_id_required
        assert first.member_id.startswith("test-client-")
        (joined,) = call(rb, join_request(version, group, first.member_id))
    else:
        joined = first
    assert joined.error_code == ErrorCode.none
    member = joined.member_id
    assert joined.leader == member and joined.generation_id == 1
    assert joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [member]
    assert bytes(joined.members[0].metadata) == SUBSCRIPTION
    sync_version = min(version, 5)
    s = req("sync_group", sync_version)
    kwargs: dict[str, Any] = {
        "group_id": group, "generation_id": 1, "member_id": member,
        "assignments": (s.SyncGroupRequestAssignment(member_id=member, assignment=b"A"),),
    }
    if sync_version >= 3:
        kwargs["group_instance_id"] = None
    if sync_version >= 5:
        kwargs.update(protocol_type="consumer", protocol_name="range")
    (synced,) = call(rb, s.SyncGroupRequest(**kwargs))
    assert synced.error_code == ErrorCode.none and bytes(synced.assignment) == b"A"
    hb_version = min(version, 4)
    h = req("heartbeat", hb_version)
    hb_kwargs: dict[str, Any] = {"group_id": group, "generation_id": 1, "member_id": member}
    if hb_version >= 3:
        hb_kwargs["group_instance_id"] = None
    ok, stale = call(rb, h.HeartbeatRequest(**hb_kwargs),
                     h.HeartbeatRequest(**{**hb_kwargs, "generation_id": 7}))
    assert ok.error_code == ErrorCode.none
    assert stale.error_code == ErrorCode.illegal_generation
    leave_version = min(version, 5)
    lv = req("leave_group", leave_version)
    if leave_version >= 3:
        identity = {"member_id": member, "group_instance_id": None}
        if leave_version >= 5:
            identity["reason"] = None
        leave = lv.LeaveGroupRequest(group_id=group, members=(
            lv.MemberIdentity(**identity), lv.MemberIdentity(**{**identity, "member_id": "x"})))
    else:
        leave = lv.LeaveGroupRequest(group_id=group, member_id=member)
    (left,) = call(rb, leave)
    assert left.error_code == ErrorCode.none
    if leave_version >= 3:
        assert [r.error_code for r in left.members] == [ErrorCode.none,
                                                        ErrorCode.unknown_member_id]
    group_state = rb.call(lambda: rb.broker.group_coordinator.groups[group].state.value)
    assert group_state == "Empty"


# -- describe / list / delete ------------------------------------------------------------------
def test_describe_list_and_delete_groups(rb: RunningBroker) -> None:
    group = "g-describe"
    (first,) = call(rb, join_request(9, group))
    (joined,) = call(rb, join_request(9, group, first.member_id))
    s = req("sync_group", 5)
    assignment = encode_assignment({"t": [0, 1]})
    call(rb, s.SyncGroupRequest(
        group_id=group, generation_id=1, member_id=joined.member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=(s.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                  assignment=assignment),)))
    d5, d6 = req("describe_groups", 5), req("describe_groups", 6)
    described, missing_v5, missing_v6 = call(
        rb,
        d6.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False),
        d5.DescribeGroupsRequest(groups=("nope",), include_authorized_operations=False),
        d6.DescribeGroupsRequest(groups=("nope",), include_authorized_operations=False),
    )
    g = described.groups[0]
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        ErrorCode.none, "Stable", "consumer", "range")
    member = g.members[0]
    assert member.client_id == "test-client" and member.client_host == "/127.0.0.1"
    assert bytes(member.member_assignment) == assignment
    assert bytes(member.member_metadata) == SUBSCRIPTION
    assert (missing_v5.groups[0].error_code, missing_v5.groups[0].group_state) == (
        ErrorCode.none, "Dead")
    assert missing_v6.groups[0].error_code == ErrorCode.group_id_not_found
    l0, l4, l5 = req("list_groups", 0), req("list_groups", 4), req("list_groups", 5)
    all_groups, stable, classic, consumer_type = call(
        rb, l0.ListGroupsRequest(), l4.ListGroupsRequest(states_filter=("stable",)),
        l5.ListGroupsRequest(states_filter=(), types_filter=("Classic",)),
        l5.ListGroupsRequest(states_filter=(), types_filter=("consumer",)),
    )
    assert group in {x.group_id for x in all_groups.groups}
    assert {(x.group_id, x.group_state) for x in stable.groups} >= {(group, "Stable")}
    assert all(x.group_state == "Stable" for x in stable.groups)
    assert group in {x.group_id for x in classic.groups}
    assert all(x.group_type == "classic" for x in classic.groups)
    assert consumer_type.groups == ()
    dg = req("delete_groups", 2)
    (refused,) = call(rb, dg.DeleteGroupsRequest(groups_names=(group, "nope")))
    assert [(r.group_id, r.error_code) for r in refused.results] == [
        (group, ErrorCode.non_empty_group), ("nope", ErrorCode.group_id_not_found)]
    lv = req("leave_group", 4)
    call(rb, lv.LeaveGroupRequest(group_id=group, members=(
        lv.MemberIdentity(member_id=joined.member_id, group_instance_id=None),)))
    (deleted,) = call(rb, dg.DeleteGroupsRequest(groups_names=(group,)))
    assert deleted.results[0].error_code == ErrorCode.none


# -- offsets -------------------------------------------------------------------------------
def commit_request(version: int, group: str, topic: str, offsets: dict[int, int],
                   topic_id: Any = None, generation: int = -1, member: str = "") -> Any:
    m = req("offset_commit", version)
    parts = []
    for p, o in offsets.items():
        kwargs: dict[str, Any] = {"partition_index": p, "committed_offset": o,
                                  "committed_metadata": f"meta{p}"}
        if version >= 6:
            kwargs["committed_leader_epoch"] = 0
        parts.append(m.OffsetCommitRequestPartition(**kwargs))
    t = (m.OffsetCommitRequestTopic(topic_id=topic_id, partitions=tuple(parts)) if version >= 10
         else m.OffsetCommitRequestTopic(name=topic, partitions=tuple(parts)))
    kwargs = {"group_id": group, "generation_id_or_member_epoch": generation,
              "member_id": member, "topics": (t,)}
    if version <= 4:
        kwargs["retention_time"] = datetime.timedelta(milliseconds=-1)
    if version >= 7:
        kwargs["group_instance_id"] = None
    return m.OffsetCommitRequest(**kwargs)


@pytest.mark.parametrize("version", range(2, 11))
def test_offset_commit_and_fetch_every_version(rb: RunningBroker, version: int) -> None:
    topic = new_topic(rb)
    info = rb.broker.metadata.get(topic)
    assert info is not None
    group = f"g-commit-v{version}"
    (committed,) = call(rb, commit_request(version, group, topic, {0: 5, 1: 6, 9: 1},
                                           topic_id=info.topic_id))
    codes = {p.partition_index: p.error_code for p in committed.topics[0].partitions}
    assert codes == {0: ErrorCode.none, 1: ErrorCode.none,
                     9: ErrorCode.unknown_topic_or_partition}
    fetch_version = version if version != 2 else 1
    f = req("offset_fetch", fetch_version)
    if fetch_version >= 8:
        ids = (0, 1, 2)
        topics: Any = (f.OffsetFetchRequestTopics(topic_id=info.topic_id, partition_indexes=ids)
                       if fetch_version >= 10 else
                       f.OffsetFetchRequestTopics(name=topic, partition_indexes=ids))
        group_kwargs: dict[str, Any] = {"group_id": group, "topics": (topics,)}
        if fetch_version >= 9:
            group_kwargs.update(member_id=None, member_epoch=-1)
        other = {**group_kwargs, "group_id": "g-never", "topics": None}
        (fetched,) = call(rb, f.OffsetFetchRequest(
            groups=(f.OffsetFetchRequestGroup(**group_kwargs), f.OffsetFetchRequestGroup(**other)),
            require_stable=True))
        assert [g.group_id for g in fetched.groups] == [group, "g-never"]
        assert fetched.groups[1].topics == ()
        result_topics = fetched.groups[0].topics
    else:
        kwargs: dict[str, Any] = {"group_id": group, "topics": (
            f.OffsetFetchRequestTopic(name=topic, partition_indexes=(0, 1, 2)),)}
        if fetch_version >= 7:
            kwargs["require_stable"] = True
        (fetched,) = call(rb, f.OffsetFetchRequest(**kwargs))
        result_topics = fetched.topics
    got = {p.partition_index: (p.committed_offset, p.metadata, p.error_code)
           for p in result_topics[0].partitions}
    assert got == {0: (5, "meta0", ErrorCode.none), 1: (6, "meta1", ErrorCode.none),
                   2: (-1, "", ErrorCode.none)}


def test_offset_fetch_all_topics_and_offset_delete(rb: RunningBroker) -> None:
    topic = new_topic(rb)
    group = "g-offset-delete"
    call(rb, commit_request(8, group, topic, {0: 1, 1: 2}))
    f = req("offset_fetch", 7)
    (everything,) = call(rb, f.OffsetFetchRequest(group_id=group, topics=None,
                                                  require_stable=False))
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything.topics] == [
        (topic, [1, 2])]
    od = req("offset_delete", 0)
    (deleted,) = call(rb, od.OffsetDeleteRequest(group_id=group, topics=(
        od.OffsetDeleteRequestTopic(name=topic, partitions=(
            od.OffsetDeleteRequestPartition(partition_index=0),
            od.OffsetDeleteRequestPartition(partition_index=7))),)))
    assert deleted.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for p in deleted.topics[0].partitions] == [
        (0, ErrorCode.none), (7, ErrorCode.unknown_topic_or_partition)]
    (after,) = call(rb, f.OffsetFetchRequest(group_id=group, topics=None, require_stable=False))
    assert [[p.partition_index for p in t.partitions] for t in after.topics] == [[1]]
    (missing,) = call(rb, od.OffsetDeleteRequest(group_id="g-none", topics=()))
    assert missing.error_code == ErrorCode.group_id_not_found


def test_commit_with_a_stale_generation_is_refused(rb: RunningBroker) -> None:
    topic = new_topic(rb)
    (resp,) = call(rb, commit_request(8, "g-stale", topic, {0: 1}, generation=4, member="m"))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.illegal_generation


# -- CLI -------------------------------------------------------------------------------------
def cli(rb: RunningBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "groups", *args, "-b", rb.bootstrap],
        capture_output=True, text=True, timeout=60,
    )


def test_cli_list_describe_reset_delete(rb: RunningBroker) -> None:
    topic = new_topic(rb, partitions=2, records=10)
    group = "g-cli"
    call(rb, commit_request(8, group, topic, {0: 4, 1: 10}))
    listed = cli(rb, "list", "--state", "Empty")
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:2] == [group, "Empty"] for line in listed.stdout.splitlines())
    described = cli(rb, "describe", "--group", group)
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith(topic)]
    assert [r[:5] for r in rows] == [[topic, "0", "4", "10", "6"], [topic, "1", "10", "10", "0"]]
    dry = cli(rb, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout
    assert call(rb, req("offset_fetch", 7).OffsetFetchRequest(
        group_id=group, topics=None, require_stable=False))[0].topics[0].partitions[0] \
        .committed_offset == 4
    shifted = cli(rb, "reset-offsets", "--group", group, "--topic", f"{topic}:1",
                  "--shift-by", "-3", "--execute")
    assert shifted.returncode == 0, shifted.stderr
    future = cli(rb, "reset-offsets", "--group", group, "--all-topics", "--to-datetime",
                 "2999-01-01T00:00:00+00:00", "--execute")
    assert future.returncode == 0, future.stderr
    (fetched,) = call(rb, req("offset_fetch", 7).OffsetFetchRequest(
        group_id=group, topics=None, require_stable=False))
    assert [p.committed_offset for p in fetched.topics[0].partitions] == [10, 10]
    cli(rb, "reset-offsets", "--group", group, "--topic", topic, "--to-offset", "2", "--execute")
    (fetched,) = call(rb, req("offset_fetch", 7).OffsetFetchRequest(
        group_id=group, topics=None, require_stable=False))
    assert [p.committed_offset for p in fetched.topics[0].partitions] == [2, 2]
    deleted = cli(rb, "delete", "--group", group)
    assert deleted.returncode == 0 and f"Deleted group {group}" in deleted.stdout
    gone = cli(rb, "describe", "--group", group)
    assert gone.returncode == 1 and "does not exist" in gone.stdout


def test_cli_refuses_to_reset_an_active_group(rb: RunningBroker) -> None:
    topic = new_topic(rb, partitions=1, records=3)
    group = "g-cli-active"
    (first,) = call(rb, join_request(9, group))
    (joined,) = call(rb, join_request(9, group, first.member_id))
    assert joined.error_code == ErrorCode.none
    refused = cli(rb, "reset-offsets", "--group", group, "--topic", topic, "--to-latest",
                  "--execute")
    assert refused.returncode == 1 and "stop its consumers" in refused.stderr
    described = cli(rb, "describe", "--group", group)
    assert described.returncode == 0
    assert joined.member_id in described.stdout


def test_sync_and_commit_wait_for_the_isr_of_the_group_partition() -> None:
    """Group records are stored with acks=-1 (Kafka's appendForGroup): while a follower of
    the group's __consumer_offsets partition lags, SyncGroup answers
    COORDINATOR_NOT_AVAILABLE and OffsetCommit REQUEST_TIMED_OUT after
    offsets.commit.timeout.ms, never success; once it has caught up, both succeed."""
    from odradek.cluster.partition import PartitionState

    overrides = {"offsets.commit.timeout.ms": "300", "group.min.session.timeout.ms": "100"}
    with running_broker(overrides=overrides) as broker:
        group = "g-isr"
        (first,) = call(broker, join_request(9, group))
        (joined,) = call(broker, join_request(9, group, first.member_id))
        assert joined.error_code == ErrorCode.none
        member = joined.member_id
        index = broker.broker.group_coordinator.manager.partition_for(group)
        partition = broker.broker.replica_manager.get_partition(OFFSETS_TOPIC, index)
        assert partition is not None and partition.is_leader
        me = partition.broker_id
        other = me + 1
        broker.call(partition.update_state, PartitionState(me, 1, (me, other), (me, other)))
        s = req("sync_group", 5)
        sync = s.SyncGroupRequest(
            group_id=group, generation_id=1, member_id=member, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments=(s.SyncGroupRequestAssignment(member_id=member, assignment=b"A"),))
        topic = new_topic(broker, 1)
        commit = commit_request(8, group, topic, {0: 5}, generation=1, member=member)
        synced, committed = call(broker, sync, commit)
        assert synced.error_code == ErrorCode.coordinator_not_available
        assert committed.topics[0].partitions[0].error_code == ErrorCode.request_timed_out
        # The follower fetches up to the log end: the high watermark passes both records.
        end = partition.log.log_end_offset
        broker.call(partition.update_follower_fetch_state, other, end, 0)
        assert partition.high_watermark == end
        (synced,) = call(broker, sync)
        assert synced.error_code == ErrorCode.none and bytes(synced.assignment) == b"A"

        async def commit_while_the_follower_fetches() -> Any:
            conn = await BrokerConnection.open(broker.bootstrap, client_id="test-client")
            try:
                pending = asyncio.ensure_future(conn.send(commit))
                started = time.monotonic()
                while not pending.done():  # a follower fetching up to the log end
                    assert not expired(started, 10), "the commit was never answered"
                    broker.call(lambda: partition.update_follower_fetch_state(
                        other, partition.log.log_end_offset, 0))
                    await asyncio.sleep(0.01)
                return await pending
            finally:
                await conn.close()

        committed = asyncio.run(commit_while_the_follower_fetches())
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none


def test_a_static_member_rejoining_without_a_rebalance_waits_for_the_isr() -> None:
    """The group record a static member's JoinGroup stores when it rejoins with a new
    member id and no rebalance is stored with acks=-1 too (Kafka's storeGroup): while a
    follower of the group's __consumer_offsets partition lags, the JoinGroup answers
    COORDINATOR_NOT_AVAILABLE after offsets.commit.timeout.ms and the member keeps its old
    id; once the follower has caught up, the same rejoin succeeds."""
    from odradek.cluster.partition import PartitionState

    overrides = {"offsets.commit.timeout.ms": "300", "group.min.session.timeout.ms": "100"}
    with running_broker(overrides=overrides) as broker:
        group, instance = "g-static-isr", "instance-1"
        (joined,) = call(broker, join_request(9, group, instance=instance))
        assert joined.error_code == ErrorCode.none
        old = joined.member_id
        s = req("sync_group", 5)
        (synced,) = call(broker, s.SyncGroupRequest(
            group_id=group, generation_id=1, member_id=old, group_instance_id=instance,
            protocol_type="consumer", protocol_name="range",
            assignments=(s.SyncGroupRequestAssignment(member_id=old, assignment=b"A"),)))
        assert synced.error_code == ErrorCode.none
        index = broker.broker.group_coordinator.manager.partition_for(group)
        partition = broker.broker.replica_manager.get_partition(OFFSETS_TOPIC, index)
        assert partition is not None and partition.is_leader
        me = partition.broker_id
        other = me + 1
        broker.call(partition.update_state, PartitionState(me, 1, (me, other), (me, other)))
        h = req("heartbeat", 4)

        def heartbeat(member: str) -> Any:
            return h.HeartbeatRequest(group_id=group, generation_id=1, member_id=member,
                                      group_instance_id=instance)

        started = time.monotonic()
        refused, still = call(broker, join_request(9, group, instance=instance), heartbeat(old))
        assert refused.error_code == ErrorCode.coordinator_not_available
        assert refused.member_id == ""
        assert time.monotonic() - started >= 0.3  # it waited offsets.commit.timeout.ms
        assert still.error_code == ErrorCode.none  # the old id is the member's again
        # The follower fetches up to the log end: the high watermark passes the record.
        broker.call(partition.update_follower_fetch_state, other, partition.log.log_end_offset, 0)

        async def rejoin_while_the_follower_fetches() -> Any:
            conn = await BrokerConnection.open(broker.bootstrap, client_id="test-client")
            try:
                pending = asyncio.ensure_future(
                    conn.send(join_request(9, group, instance=instance)))
                started = time.monotonic()
                while not pending.done():
                    assert not expired(started, 10), "the JoinGroup was never answered"
                    broker.call(lambda: partition.update_follower_fetch_state(
                        other, partition.log.log_end_offset, 0))
                    await asyncio.sleep(0.01)
                return await pending
            finally:
                await conn.close()

        rejoined = asyncio.run(rejoin_while_the_follower_fetches())
        assert rejoined.error_code == ErrorCode.none
        assert rejoined.generation_id == 1 and rejoined.member_id not in ("", old)
        fresh, fenced = call(broker, heartbeat(rejoined.member_id), heartbeat(old))
        assert fresh.error_code == ErrorCode.none
        assert fenced.error_code == ErrorCode.fenced_instance_id
