"""DeleteGroups and ConsumerGroupDescribe of a KIP-848 consumer group while a follower of
the group's ``__consumer_offsets`` partition lags (paused with SIGSTOP, still in the ISR):
neither answers with what the ISR does not hold. A deletion is answered once its
tombstones are replicated (else COORDINATOR_NOT_AVAILABLE after
``offsets.commit.timeout.ms``, as a heartbeat is), and a describe only once the state it
shows is replicated: a failover would otherwise bring back a group the client was told
was deleted, or lose a member the client was shown.

And a group config (KIP-848) altered through another broker reaches the coordinator (its
ZooKeeper watch of ``/config/groups``), which applies it at the member's next
heartbeat."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client.connection import BrokerConnection, ClientError, request_class
from odradek.client.groups import GroupsClient
from odradek.protocol.errors import ErrorCode

from ._cluster import Cluster, running_cluster, wait_for

pytestmark = pytest.mark.interop

COMMIT_TIMEOUT_MS = 1500  # well within the paused broker's ZooKeeper session (6 s)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("kip848-lag")), overrides={
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 1,
        "offsets.commit.timeout.ms": COMMIT_TIMEOUT_MS,
        "replica.lag.time.max.ms": 60000,  # the leader keeps the paused follower in its ISR
    }) as c:
        yield c


def coordinator_of(cluster: Cluster, group: str) -> int:
    async def ask() -> int:
        async with await BrokerConnection.open(cluster.address(1)) as conn:
            node_id, _, _ = await GroupsClient(conn).find_coordinator(group)
            return node_id

    def attempt() -> int | None:
        try:
            return asyncio.run(ask())
        except ClientError:  # COORDINATOR_NOT_AVAILABLE while __consumer_offsets is created
            return None

    return wait_for(attempt, 30, f"a coordinator for {group}")


def send(cluster: Cluster, broker: int, request: Any) -> Any:
    async def go() -> Any:
        async with await BrokerConnection.open(cluster.address(broker)) as conn:
            return await conn.send(request)

    return asyncio.run(go())


def heartbeat(group: str, member_id: str, epoch: int, topic: str | None = None) -> Any:
    cls = request_class("consumer_group_heartbeat", 1, "ConsumerGroupHeartbeatRequest")
    joining = epoch == 0
    return cls(group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None,
               rack_id=None,
               rebalance_timeout=datetime.timedelta(milliseconds=30000 if joining else -1),
               subscribed_topic_names=(topic,) if joining else None, server_assignor=None,
               topic_partitions=() if joining else None, subscribed_topic_regex=None)


def commit_request(group: str, member_id: str, epoch: int, topic: str) -> Any:
    """OffsetCommit v9 (a consumer group member's, KIP-848) of offset 1 of partition 0."""
    name = "offset_commit"
    part = request_class(name, 9, "OffsetCommitRequestPartition")(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1,
        committed_metadata="")
    return request_class(name, 9, "OffsetCommitRequest")(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
        group_instance_id=None, topics=(request_class(name, 9, "OffsetCommitRequestTopic")(
            name=topic, partitions=(part,)),))


def describe(group: str) -> Any:
    cls = request_class("consumer_group_describe", 1, "ConsumerGroupDescribeRequest")
    return cls(group_ids=(group,), include_authorized_operations=False)


def delete(group: str) -> Any:
    cls = request_class("delete_groups", 2, "DeleteGroupsRequest")
    return cls(groups_names=(group,))


def setup(cluster: Cluster) -> tuple[str, str, int, int]:
    """A topic, a group, its coordinator and a follower of its partition."""
    topic = f"lag-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"

    def serving() -> int | None:
        # FindCoordinator names the partition's leader from a broker's metadata, which
        # may still be becoming the leader: NOT_COORDINATOR, which a client retries
        # (whole run Q46: the first heartbeat got it); wait until it serves the group
        coordinator = coordinator_of(cluster, group)
        [shown] = send(cluster, coordinator, describe(group)).groups
        return coordinator if shown.error_code == ErrorCode.group_id_not_found else None

    coordinator = wait_for(serving, 30, f"the coordinator of {group} serving it")
    follower = next(b for b in (1, 2, 3) if b != coordinator)
    return topic, group, coordinator, follower


def test_delete_groups_answers_once_the_tombstones_are_replicated(cluster: Cluster) -> None:
    topic, group, coordinator, follower = setup(cluster)
    joined = send(cluster, coordinator, heartbeat(group, "m1", 0, topic))
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)

    def commit() -> None:  # the group keeps its offsets once empty: not forgotten
        [t] = send(cluster, coordinator, commit_request(group, "m1", 1, topic)).topics
        assert [p.error_code for p in t.partitions] == [ErrorCode.none]

    commit()
    left = send(cluster, coordinator, heartbeat(group, "m1", -1))
    assert left.error_code == ErrorCode.none
    cluster.sigstop(follower)
    try:
        started = time.monotonic()
        [result] = send(cluster, coordinator, delete(group)).results
        waited = time.monotonic() - started
        # the tombstones are not in the ISR: not told "deleted"
        assert result.error_code == ErrorCode.coordinator_not_available, result
        assert waited >= COMMIT_TIMEOUT_MS / 1000 * 0.9, waited
    finally:
        cluster.sigcont(follower)

    def gone() -> bool | None:
        [again] = send(cluster, coordinator, delete(group)).results
        return True if again.error_code == ErrorCode.group_id_not_found else None

    wait_for(gone, 30, "the deletion replicated")
    # replicated, a deletion is answered at once
    joined = send(cluster, coordinator, heartbeat(group, "m1", 0, topic))
    assert joined.error_code == ErrorCode.none
    commit()
    assert send(cluster, coordinator, heartbeat(group, "m1", -1)).error_code == ErrorCode.none
    [result] = send(cluster, coordinator, delete(group)).results
    assert result.error_code == ErrorCode.none


def test_describe_shows_only_what_is_replicated(cluster: Cluster) -> None:
    topic, group, coordinator, follower = setup(cluster)
    joined = send(cluster, coordinator, heartbeat(group, "m1", 0, topic))
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    [shown] = send(cluster, coordinator, describe(group)).groups
    assert shown.error_code == ErrorCode.none and len(shown.members) == 1
    cluster.sigstop(follower)
    try:
        # m2's join is appended but the ISR does not hold it: its answer says retry
        second = send(cluster, coordinator, heartbeat(group, "m2", 0, topic))
        assert second.error_code == ErrorCode.coordinator_not_available, second
        [shown] = send(cluster, coordinator, describe(group)).groups
        # not shown with m2 (a failover would lose it): the describe waits, and says retry
        assert shown.error_code == ErrorCode.coordinator_not_available, shown
        assert not shown.members
    finally:
        cluster.sigcont(follower)

    def both() -> Any:
        [g] = send(cluster, coordinator, describe(group)).groups
        return g if g.error_code == ErrorCode.none and len(g.members) == 2 else None

    shown = wait_for(both, 30, "m2's join replicated and shown")
    assert shown.group_epoch == 2


def test_a_replicated_group_is_described_while_another_groups_append_waits(
        cluster: Cluster) -> None:
    """Kafka reads a group at the partition's last committed offset: a group whose records
    the ISR holds is described at once, however many records of other groups (the one
    partition here) wait for a lagging follower."""
    topic, group, coordinator, follower = setup(cluster)
    other = f"g-{uuid.uuid4().hex[:8]}"
    assert coordinator_of(cluster, other) == coordinator  # one partition: the same log
    joined = send(cluster, coordinator, heartbeat(group, "m1", 0, topic))
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    cluster.sigstop(follower)
    try:
        waiting = send(cluster, coordinator, heartbeat(other, "o1", 0, topic))
        assert waiting.error_code == ErrorCode.coordinator_not_available, waiting
        started = time.monotonic()
        [shown] = send(cluster, coordinator, describe(group)).groups
        waited = time.monotonic() - started
        assert shown.error_code == ErrorCode.none, shown
        assert [m.member_id for m in shown.members] == ["m1"]
        assert waited < COMMIT_TIMEOUT_MS / 1000 * 0.9, waited
        # the other group's join is not in the ISR: its describe still waits
        [held] = send(cluster, coordinator, describe(other)).groups
        assert held.error_code == ErrorCode.coordinator_not_available, held
    finally:
        cluster.sigcont(follower)


def test_a_group_config_altered_through_another_broker_reaches_the_coordinator(
        cluster: Cluster) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic, group, coordinator, other = setup(cluster)
    joined = send(cluster, coordinator, heartbeat(group, "m1", 0, topic))
    assert joined.heartbeat_interval == datetime.timedelta(milliseconds=5000)
    admin = AdminClient({"bootstrap.servers": cluster.address(other)})
    entry = ConfigEntry("consumer.heartbeat.interval.ms", "6000",
                        incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        f.result(30)

    # The member heartbeats at the epoch it was last given, as a client does: the group's
    # epoch may move meanwhile (the topic's partitions reaching the coordinator after the
    # join), and a heartbeat at an older epoch without its owned partitions is fenced, as
    # in Kafka (whole run Q54 sent epoch 1 throughout and met FENCED_MEMBER_EPOCH).
    epoch = joined.member_epoch

    def told() -> datetime.timedelta | None:
        nonlocal epoch
        beat = send(cluster, coordinator, heartbeat(group, "m1", epoch))
        assert beat.error_code == ErrorCode.none, beat
        epoch = beat.member_epoch
        return beat.heartbeat_interval if beat.heartbeat_interval.total_seconds() == 6 else None

    wait_for(told, 15, "the group's heartbeat interval at the coordinator")
