"""The consumer group protocol's APIs (KIP-848) over a real socket with hand-built kio
requests: ConsumerGroupHeartbeat v0-1 and ConsumerGroupDescribe v0-1, and what the
classic and offset APIs answer for a consumer group (JoinGroup, DescribeGroups,
ListGroups with types and states, DeleteGroups, OffsetCommit/OffsetFetch v9+ with the
member epoch, OffsetDelete), and session expiry on the broker's loop."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server._requests import one, req

REBALANCE = datetime.timedelta(seconds=30)
SESSION_MS = 1500


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides={
        "group.min.session.timeout.ms": "100",
        "group.consumer.session.timeout.ms": str(SESSION_MS),
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "500",
    }) as broker:
        yield broker


def new_topic(rb: RunningBroker, partitions: int = 4) -> tuple[str, uuid.UUID]:
    name = f"cg-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, {})
    info = rb.broker.metadata.get(name)
    assert info is not None
    return name, info.topic_id


def new_group() -> str:
    return f"cg-{uuid.uuid4().hex[:8]}"


def heartbeat(group: str, member_id: str, epoch: int, *, version: int = 1,
              topics: tuple[str, ...] | None = None, owned: Any = (),
              instance_id: str | None = None, assignor: str | None = None,
              regex: str | None = None) -> Any:
    m = req("consumer_group_heartbeat", version)
    if owned is not None:
        owned = tuple(m.TopicPartitions(topic_id=t, partitions=tuple(ps)) for t, ps in owned)
    fields: dict[str, Any] = {} if version == 0 else {"subscribed_topic_regex": regex}
    return m.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
        rack_id=None,
        rebalance_timeout=REBALANCE if epoch == 0 else datetime.timedelta(milliseconds=-1),
        subscribed_topic_names=topics, server_assignor=assignor, topic_partitions=owned,
        **fields)


def assigned(response: Any) -> dict[uuid.UUID, set[int]]:
    assert response.assignment is not None
    return {tp.topic_id: set(tp.partitions) for tp in response.assignment.topic_partitions}


def describe(rb: RunningBroker, *groups: str, version: int = 1) -> Any:
    m = req("consumer_group_describe", version)
    return one(rb, m.ConsumerGroupDescribeRequest(group_ids=groups,
                                                  include_authorized_operations=True))


# -- ConsumerGroupHeartbeat --------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_a_member_joins_and_gets_every_partition(rb: RunningBroker, version: int) -> None:
    topic, topic_id = new_topic(rb)
    group = new_group()
    member_id = "" if version == 0 else "member-1"
    response = one(rb, heartbeat(group, member_id, 0, version=version, topics=(topic,)))
    assert response.error_code == ErrorCode.none, response.error_message
    assert response.member_epoch == 1
    assert response.heartbeat_interval == datetime.timedelta(milliseconds=500)
    assert assigned(response) == {topic_id: {0, 1, 2, 3}}
    if version == 0:
        assert response.member_id  # named by the coordinator
    else:
        assert response.member_id == "member-1"
    again = one(rb, heartbeat(group, response.member_id, 1, version=version, topics=None,
                              owned=[(topic_id, [0, 1, 2, 3])]))
    assert again.error_code == ErrorCode.none and again.assignment is None
    left = one(rb, heartbeat(group, response.member_id, -1, version=version, owned=None))
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"topics": None}, ErrorCode.invalid_request,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"topics": ("t",), "owned": None}, ErrorCode.invalid_request,
     "TopicPartitions must be empty when (re-)joining."),
    ({"topics": ("t",), "regex": "t[.*"}, ErrorCode.invalid_regular_expression,
     "SubscribedTopicRegex `t[.*` is not a valid regular expression: missing closing ]."),
    ({"topics": None, "regex": "(?=t)"}, ErrorCode.invalid_regular_expression,
     "SubscribedTopicRegex `(?=t)` is not a valid regular expression: invalid or "
     "unsupported Perl syntax."),
    ({"topics": ("t",), "assignor": "sticky"}, ErrorCode.unsupported_assignor,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
])
def test_a_bad_first_heartbeat(rb: RunningBroker, kwargs: dict[str, Any], error: ErrorCode,
                               message: str) -> None:
    response = one(rb, heartbeat(new_group(), "m", 0, **kwargs))
    assert (response.error_code, response.error_message) == (error, message)
    assert response.member_id is None and response.assignment is None


def test_a_second_member_gets_partitions_once_the_first_released_them(
        rb: RunningBroker) -> None:
    topic, topic_id = new_topic(rb)
    group = new_group()
    first = one(rb, heartbeat(group, "m1", 0, topics=(topic,)))
    second = one(rb, heartbeat(group, "m2", 0, topics=(topic,)))
    assert second.member_epoch == 2 and assigned(second) == {}
    revoke = one(rb, heartbeat(group, "m1", 1, owned=[(topic_id, [0, 1, 2, 3])]))
    assert revoke.member_epoch == 1
    kept = assigned(revoke)[topic_id]
    assert len(kept) == 2
    ack = one(rb, heartbeat(group, "m1", 1, owned=[(topic_id, sorted(kept))]))
    assert ack.member_epoch == 2
    granted = one(rb, heartbeat(group, "m2", 2, owned=[]))
    assert assigned(granted) == {topic_id: {0, 1, 2, 3} - kept}
    assert first.member_epoch == 1


def test_fenced_and_unknown_members(rb: RunningBroker) -> None:
    topic, _ = new_topic(rb)
    group = new_group()
    one(rb, heartbeat(group, "m1", 0, topics=(topic,)))
    assert one(rb, heartbeat(group, "m1", 5, owned=None)).error_code == (
        ErrorCode.fenced_member_epoch)
    assert one(rb, heartbeat(group, "ghost", 1, owned=None)).error_code == (
        ErrorCode.unknown_member_id)
    # a heartbeat to a group that does not exist (its records would be loaded): Kafka's
    # answer
    assert one(rb, heartbeat(new_group(), "m1", 3, owned=None)).error_code == (
        ErrorCode.group_id_not_found)


def test_static_membership_over_the_wire(rb: RunningBroker) -> None:
    topic, topic_id = new_topic(rb)
    group = new_group()
    first = one(rb, heartbeat(group, "s1", 0, topics=(topic,), instance_id="i1"))
    assert assigned(first) == {topic_id: {0, 1, 2, 3}}
    busy = one(rb, heartbeat(group, "s2", 0, topics=(topic,), instance_id="i1"))
    assert busy.error_code == ErrorCode.unreleased_instance_id
    left = one(rb, heartbeat(group, "s1", -2, instance_id="i1", owned=None))
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -2)
    back = one(rb, heartbeat(group, "s2", 0, topics=(topic,), instance_id="i1"))
    assert back.error_code == ErrorCode.none
    assert back.member_epoch == 1 and assigned(back) == {topic_id: {0, 1, 2, 3}}


def test_a_member_that_stops_heartbeating_is_fenced_by_the_session_timeout(
        rb: RunningBroker) -> None:
    topic, topic_id = new_topic(rb, 2)
    group = new_group()
    one(rb, heartbeat(group, "dies", 0, topics=(topic,)))
    lives = one(rb, heartbeat(group, "lives", 0, topics=(topic,)))
    assert assigned(lives) == {}
    started = time.monotonic()
    got: dict[uuid.UUID, set[int]] = {}
    while not expired(started, 10):
        response = one(rb, heartbeat(group, "lives", 2, owned=[
            (t, sorted(ps)) for t, ps in got.items()]))
        assert response.error_code == ErrorCode.none
        if response.assignment is not None:
            got = assigned(response)
        if got == {topic_id: {0, 1}}:
            break
        time.sleep(0.2)
    assert got == {topic_id: {0, 1}}
    (summary,) = describe(rb, group).groups
    assert [m.member_id for m in summary.members] == ["lives"]


# -- ConsumerGroupDescribe ---------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_describe_a_consumer_group(rb: RunningBroker, version: int) -> None:
    topic, topic_id = new_topic(rb, 2)
    group = new_group()
    one(rb, heartbeat(group, "m1", 0, topics=(topic,), assignor="range"))
    response = describe(rb, group, version=version)
    (described,) = response.groups
    assert described.error_code == ErrorCode.none
    assert (described.group_state, described.group_epoch, described.assignment_epoch,
            described.assignor_name) == ("Stable", 1, 1, "range")
    assert described.authorized_operations != -(1 << 31)
    (member,) = described.members
    assert (member.member_id, member.member_epoch, member.client_id) == ("m1", 1,
                                                                         "test-client")
    assert member.subscribed_topic_names == (topic,)
    (tp,) = member.assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, tuple(tp.partitions)) == (topic_id, topic, (0, 1))
    assert member.target_assignment == member.assignment
    if version >= 1:
        assert member.member_type == 1


def test_describe_an_unknown_or_classic_group(rb: RunningBroker) -> None:
    classic = new_group()
    m = req("offset_commit", 8)
    topic, _ = new_topic(rb, 1)
    one(rb, m.OffsetCommitRequest(  # makes a classic group holding an offset
        group_id=classic, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(m.OffsetCommitRequestTopic(
            name=topic, partitions=(m.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                committed_metadata=None),)),)))
    unknown = new_group()
    response = describe(rb, unknown, classic)
    assert [(g.error_code, g.error_message) for g in response.groups] == [
        (ErrorCode.group_id_not_found, f"Group {unknown} not found."),
        (ErrorCode.group_id_not_found, f"Group {classic} is not a consumer group."),
    ]


# -- the classic APIs on a consumer group -------------------------------------------------
def test_classic_apis_on_a_consumer_group(rb: RunningBroker) -> None:
    topic, _ = new_topic(rb, 1)
    group = new_group()
    one(rb, heartbeat(group, "m1", 0, topics=(topic,)))
    j = req("join_group", 9)
    join = one(rb, j.JoinGroupRequest(
        group_id=group, session_timeout=REBALANCE, rebalance_timeout=REBALANCE,
        member_id="x", group_instance_id=None, protocol_type="consumer",
        protocols=(j.JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None))
    # served by the consumer group (online migration), but this metadata is no
    # ConsumerProtocol subscription
    assert join.error_code == ErrorCode.inconsistent_group_protocol
    d = req("describe_groups", 6)
    (described,) = one(rb, d.DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False)).groups
    assert (described.error_code, described.error_message, described.group_state) == (
        ErrorCode.group_id_not_found, f"Group {group} is not a classic group.", "Dead")
    d5 = req("describe_groups", 5)
    (old,) = one(rb, d5.DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False)).groups
    assert (old.error_code, old.group_state) == (ErrorCode.none, "Dead")
    dg = req("delete_groups", 2)
    (result,) = one(rb, dg.DeleteGroupsRequest(groups_names=(group,))).results
    assert result.error_code == ErrorCode.non_empty_group
    assert commit(rb, group, "m1", 1, topic) == ErrorCode.none
    one(rb, heartbeat(group, "m1", -1, owned=None))  # empty, with an offset
    (result,) = one(rb, dg.DeleteGroupsRequest(groups_names=(group,))).results
    assert result.error_code == ErrorCode.none


def test_a_consumer_group_heartbeat_upgrades_a_live_classic_group(rb: RunningBroker) -> None:
    """Online migration (group.consumer.migration.policy, bidirectional by default): the
    classic group with a member becomes a consumer group with a classic member (member
    type 0) and a consumer one (1). A member heartbeating with an epoch is not joining:
    GROUP_ID_NOT_FOUND, as before the upgrade."""
    group = new_group()
    j = req("join_group", 9)
    metadata = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # subscribes to "t"
    joined = one(rb, j.JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
        group_instance_id="static-1", protocol_type="consumer",
        protocols=(j.JoinGroupRequestProtocol(name="range", metadata=metadata),),
        reason=None))
    assert joined.error_code == ErrorCode.none
    response = one(rb, heartbeat(group, "m1", 3, topics=("t",)))
    assert (response.error_code, response.error_message) == (
        ErrorCode.group_id_not_found, f"Group {group} is not a consumer group.")
    response = one(rb, heartbeat(group, "m1", 0, topics=("t",)))
    assert response.error_code == ErrorCode.none
    (described,) = describe(rb, group).groups
    assert described.error_code == ErrorCode.none
    assert sorted((m.member_id == "m1", m.member_type) for m in described.members) == [
        (False, 0), (True, 1)]


def test_list_groups_with_types_and_states(rb: RunningBroker) -> None:
    topic, _ = new_topic(rb, 1)
    group = new_group()
    one(rb, heartbeat(group, "m1", 0, topics=(topic,)))
    lg = req("list_groups", 5)

    def listed(types: tuple[str, ...] = (), states: tuple[str, ...] = ()) -> dict[str, Any]:
        response = one(rb, lg.ListGroupsRequest(states_filter=states, types_filter=types))
        return {g.group_id: g for g in response.groups}

    everything = listed()
    assert (everything[group].group_type, everything[group].protocol_type,
            everything[group].group_state) == ("consumer", "consumer", "Stable")
    assert group in listed(types=("Consumer",))
    assert group not in listed(types=("classic",))
    assert group in listed(states=("stable",))
    assert group not in listed(states=("Empty",))


# -- offsets -------------------------------------------------------------------------------
def commit(rb: RunningBroker, group: str, member_id: str, epoch: int, topic: str,
           version: int = 9) -> ErrorCode:
    m = req("offset_commit", version)
    response = one(rb, m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
        group_instance_id=None, topics=(m.OffsetCommitRequestTopic(
            name=topic, partitions=(m.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                committed_metadata=None),)),)))
    code: ErrorCode = response.topics[0].partitions[0].error_code
    return code


def fetch(rb: RunningBroker, group: str, member_id: str | None, epoch: int,
          topic: str) -> tuple[ErrorCode, int]:
    m = req("offset_fetch", 9)
    (answer,) = one(rb, m.OffsetFetchRequest(groups=(m.OffsetFetchRequestGroup(
        group_id=group, member_id=member_id, member_epoch=epoch,
        topics=(m.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
        require_stable=False)).groups
    if answer.error_code != ErrorCode.none:
        return answer.error_code, -1
    return answer.error_code, answer.topics[0].partitions[0].committed_offset


def test_offset_commit_and_fetch_check_the_member_epoch(rb: RunningBroker) -> None:
    topic, _ = new_topic(rb, 1)
    group = new_group()
    one(rb, heartbeat(group, "m1", 0, topics=(topic,)))
    assert commit(rb, group, "m1", 1, topic) == ErrorCode.none
    assert commit(rb, group, "m1", 0, topic) == ErrorCode.stale_member_epoch
    assert commit(rb, group, "m1", 2, topic) == ErrorCode.stale_member_epoch
    assert commit(rb, group, "ghost", 1, topic) == ErrorCode.unknown_member_id
    assert commit(rb, group, "", -1, topic) == ErrorCode.unknown_member_id  # not Empty
    assert commit(rb, group, "m1", 1, topic, version=8) == ErrorCode.unsupported_version
    assert fetch(rb, group, "m1", 1, topic) == (ErrorCode.none, 7)
    assert fetch(rb, group, None, -1, topic) == (ErrorCode.none, 7)  # an admin tool
    assert fetch(rb, group, "m1", 3, topic)[0] == ErrorCode.stale_member_epoch
    assert fetch(rb, group, "ghost", 1, topic)[0] == ErrorCode.unknown_member_id
    # once the group is empty anyone may commit, and the offsets stay
    one(rb, heartbeat(group, "m1", -1, owned=None))
    assert commit(rb, group, "", -1, topic) == ErrorCode.none
    assert fetch(rb, group, None, -1, topic) == (ErrorCode.none, 7)


def test_offset_delete_refuses_subscribed_topics(rb: RunningBroker) -> None:
    topic, _ = new_topic(rb, 1)
    other, _ = new_topic(rb, 1)
    group = new_group()
    one(rb, heartbeat(group, "m1", 0, topics=(topic,)))
    assert commit(rb, group, "m1", 1, topic) == ErrorCode.none
    assert commit(rb, group, "m1", 1, other) == ErrorCode.none
    m = req("offset_delete", 0)
    response = one(rb, m.OffsetDeleteRequest(group_id=group, topics=tuple(
        m.OffsetDeleteRequestTopic(name=t, partitions=(
            m.OffsetDeleteRequestPartition(partition_index=0),)) for t in (topic, other))))
    assert response.error_code == ErrorCode.none
    assert {t.name: t.partitions[0].error_code for t in response.topics} == {
        topic: ErrorCode.group_subscribed_to_topic, other: ErrorCode.none}


# -- authorization -------------------------------------------------------------------------
def test_authorization_of_the_consumer_group_apis() -> None:
    """Heartbeat needs Read on the group; Describe needs Describe on the group and on
    every topic the group names (carol may describe the group and one of its topics)."""
    from tests.server.test_authorization import (
        ADMIN,
        AUTHORIZER,
        GROUP_T,
        TOPIC_T,
        acl_creation,
        grant,
    )
    from tests.server.test_authorization import call as call_as

    carol, dave, frank = "User:carol", "User:dave", "User:frank"
    describe_op, read_op = 8, 3
    with running_broker(overrides={"authorizer.class.name": AUTHORIZER,
                                   "super.users": ADMIN}) as b:
        topic, _ = new_topic(b, 1)
        hidden, _ = new_topic(b, 1)
        group = new_group()
        grant(b, acl_creation(GROUP_T, group, carol, op=describe_op),
              acl_creation(TOPIC_T, topic, carol, op=describe_op),
              acl_creation(GROUP_T, group, dave, op=read_op),
              acl_creation(GROUP_T, group, frank, op=read_op),
              acl_creation(TOPIC_T, topic, frank, op=describe_op),
              acl_creation(TOPIC_T, hidden, frank, op=describe_op))
        # no Read on the group: refused; with it and Describe on the topics, joined
        # (without Describe on them: tests/server/test_consumer_group_hostile_wire.py)
        _, codes = call_as(b, heartbeat(group, "m1", 0, topics=(topic,)), carol)
        assert codes == {ErrorCode.group_authorization_failed}
        response, codes = call_as(b, heartbeat(group, "m1", 0, topics=(topic,)), frank)
        assert codes == {ErrorCode.none} and response.member_epoch == 1
        m = req("consumer_group_describe", 1)
        request = m.ConsumerGroupDescribeRequest(group_ids=(group,),
                                                 include_authorized_operations=False)
        response, _ = call_as(b, request, "User:erin")  # no ACL at all
        assert response.groups[0].error_code == ErrorCode.group_authorization_failed
        response, _ = call_as(b, request, dave)  # Read implies Describe; not on the topic
        assert response.groups[0].error_code == ErrorCode.topic_authorization_failed
        response, _ = call_as(b, request, carol)
        assert response.groups[0].error_code == ErrorCode.none
        assert len(response.groups[0].members) == 1
        # the group now names a topic carol may not describe
        response, codes = call_as(b, heartbeat(group, "m1", 1, topics=(topic, hidden),
                                               owned=None), frank)
        assert codes == {ErrorCode.none}
        response, _ = call_as(b, request, carol)
        (described,) = response.groups
        assert described.error_code == ErrorCode.topic_authorization_failed
        assert described.members == ()


# -- broker configs ------------------------------------------------------------------------
def test_the_consumer_group_configs_are_served_and_checked_against_each_other() -> None:
    from odradek.coordinator.group_coordinator import CoordinatorConfig
    from odradek.server.config import BrokerConfig, ConfigError
    from odradek.server.kafka_config_support import is_not_applicable, unserved_reason

    base = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    config = BrokerConfig.from_raw({**base, "group.consumer.assignors": "range,uniform"})
    assert config.values["group.consumer.assignors"] == ("range", "uniform")
    for key in ("group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
                "group.consumer.max.size", "group.consumer.assignors",
                "group.consumer.migration.policy"):
        assert unserved_reason(key) is None, key
    # Kafka 4.0's default, case-insensitive as Kafka's CaseInsensitiveValidString
    assert config.values["group.consumer.migration.policy"] == "bidirectional"
    upgrade = BrokerConfig.from_raw({**base, "group.consumer.migration.policy": "UPGRADE"})
    assert CoordinatorConfig.from_broker(upgrade.values).consumer.migration_policy == (
        "upgrade")
    assert is_not_applicable(unserved_reason("group.coordinator.rebalance.protocols") or "")
    for bad, message in [
        ({"group.consumer.session.timeout.ms": "1000"},
         "group.consumer.session.timeout.ms must be between"),
        ({"group.consumer.min.session.timeout.ms": "70000"},
         "group.consumer.max.session.timeout.ms must be greater than or equal to "
         "group.consumer.min.session.timeout.ms"),
        ({"group.consumer.heartbeat.interval.ms": "20000"},
         "group.consumer.heartbeat.interval.ms must be between"),
        ({"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms":
          "5000"}, "group.consumer.heartbeat.interval.ms must be less than"),
        ({"group.consumer.assignors": "sticky"}, "invalid value for group.consumer.assignors"),
        ({"group.consumer.migration.policy": "sideways"},
         "group.consumer.migration.policy.*must be one of disabled, upgrade, downgrade, "
         "bidirectional"),
    ]:
        with pytest.raises(ConfigError, match=message):
            BrokerConfig.from_raw({**base, **bad})


# -- regular-expression subscriptions (SubscribedTopicRegex) --------------------------------
def beat_until(rb: RunningBroker, group: str, member_id: str, epoch: int, owned: Any,
               done: Any, timeout_s: float = 20.0) -> tuple[Any, int, Any]:
    """Heartbeat as a consumer does (owned = what it was last assigned) until ``done``
    of its assignment holds: (the last answer, its epoch, what it owns)."""
    started = time.monotonic()
    while True:
        response = one(rb, heartbeat(group, member_id, epoch, owned=owned))
        assert response.error_code == ErrorCode.none, response.error_message
        epoch = response.member_epoch
        if response.assignment is not None:
            owned = [(t, sorted(ps)) for t, ps in assigned(response).items()]
        if done({t for t, _ in owned}):
            return response, epoch, owned
        assert not expired(started, timeout_s), f"assignment {owned} at epoch {epoch}"
        time.sleep(0.05)


@contextlib.contextmanager
def consumer_config(rb: RunningBroker, **changes: Any) -> Iterator[None]:
    """The broker's group.consumer.* configs changed for a while (a group takes them at
    each heartbeat: setting a group's own ``config`` lasts until its next one)."""
    coordinator = rb.broker.group_coordinator
    config = coordinator.config

    def apply(new: object) -> None:
        coordinator.config = new  # type: ignore[assignment]

    rb.call(apply, dataclasses.replace(
        config, consumer=dataclasses.replace(config.consumer, **changes)))
    try:
        yield
    finally:
        rb.call(apply, config)


def test_a_regex_subscription_over_the_wire(rb: RunningBroker) -> None:
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    ids = {}
    for name in (f"{prefix}-a", f"{prefix}-b", f"other-{prefix}"):
        rb.call(rb.broker.metadata.create_topic, name, 2, 1, {})
        info = rb.broker.metadata.get(name)
        assert info is not None
        ids[name] = info.topic_id
    group = new_group()
    regex = f"{prefix}-.*"
    first = one(rb, heartbeat(group, "m1", 0, regex=regex))
    assert first.error_code == ErrorCode.none, first.error_message
    wanted = {ids[f"{prefix}-a"], ids[f"{prefix}-b"]}
    _, epoch, owned = beat_until(rb, group, "m1", first.member_epoch, [],
                                 lambda got: got == wanted)
    (described,) = describe(rb, group).groups
    (member,) = described.members
    assert (member.subscribed_topic_regex, member.subscribed_topic_names) == (regex, ())
    # a new matching topic is picked up without resubscribing (the group's expressions
    # are refreshed at most every 10 s: lowered here)
    with consumer_config(rb, regex_refresh_interval_ms=100):
        rb.call(rb.broker.metadata.create_topic, f"{prefix}-c", 1, 1, {})
        info = rb.broker.metadata.get(f"{prefix}-c")
        assert info is not None
        beat_until(rb, group, "m1", epoch, owned,
                   lambda got: got == wanted | {info.topic_id})


def test_a_regex_resolves_to_the_topics_the_member_may_describe() -> None:
    """Kafka 4.0 (KAFKA-18813): the topics an expression matches are filtered by the
    Describe ACLs of the member whose heartbeat started the resolution."""
    from tests.server.test_authorization import (
        ADMIN,
        AUTHORIZER,
        GROUP_T,
        TOPIC_T,
        acl_creation,
        grant,
    )
    from tests.server.test_authorization import call as call_as

    frank, describe_op, read_op = "User:frank", 8, 3
    with running_broker(overrides={"authorizer.class.name": AUTHORIZER,
                                   "super.users": ADMIN}) as b:
        ids = {}
        for name in ("orders-eu", "orders-us"):
            b.call(b.broker.metadata.create_topic, name, 1, 1, {})
            info = b.broker.metadata.get(name)
            assert info is not None
            ids[name] = info.topic_id
        group = new_group()
        grant(b, acl_creation(GROUP_T, group, frank, op=read_op),
              acl_creation(TOPIC_T, "orders-eu", frank, op=describe_op))
        response, codes = call_as(b, heartbeat(group, "m1", 0, regex="orders-.*"), frank)
        assert codes == {ErrorCode.none}
        epoch, started = response.member_epoch, time.monotonic()
        while b.broker.group_coordinator.consumer_groups[group].resolved_regexes == {}:
            assert not expired(started, 20), "the regex never resolved"
            time.sleep(0.05)
        while True:
            response, codes = call_as(b, heartbeat(group, "m1", epoch, owned=None), frank)
            assert codes == {ErrorCode.none}
            epoch = response.member_epoch
            if response.assignment is not None and assigned(response):
                break
            assert not expired(started, 20), f"no assignment at epoch {epoch}"
            time.sleep(0.05)
        assert assigned(response) == {ids["orders-eu"]: {0}}


def test_a_regex_group_is_reloaded_by_a_coordinator_elected_again(rb: RunningBroker) -> None:
    """The member's expression and the group's resolution are in ``__consumer_offsets``
    (member metadata, ConsumerGroupRegularExpression): a coordinator that resigns and is
    elected again (as after a failover) loads them, and the member carries on at its
    epoch with its partitions."""
    prefix = f"rl{uuid.uuid4().hex[:6]}"
    rb.call(rb.broker.metadata.create_topic, f"{prefix}-a", 2, 1, {})
    info = rb.broker.metadata.get(f"{prefix}-a")
    assert info is not None
    group = new_group()
    first = one(rb, heartbeat(group, "m1", 0, regex=f"{prefix}-.*"))
    assert first.error_code == ErrorCode.none, first.error_message
    _, epoch, owned = beat_until(rb, group, "m1", first.member_epoch, [],
                                 lambda got: got == {info.topic_id})
    coordinator = rb.broker.group_coordinator
    before = coordinator.consumer_groups[group]
    resolved, group_epoch = dict(before.resolved_regexes), before.group_epoch
    partition = coordinator.partition_for(group)
    rb.call(coordinator.on_resigned, partition)
    assert coordinator.consumer_group(group) is None
    rb.call(coordinator.on_elected, partition)
    loaded = coordinator.consumer_groups[group]
    assert loaded is not before
    assert loaded.members["m1"].subscribed_topic_regex == f"{prefix}-.*"
    assert loaded.resolved_regexes == resolved
    response = one(rb, heartbeat(group, "m1", epoch, owned=owned))
    assert (response.error_code, response.member_epoch) == (ErrorCode.none, epoch)
    assert loaded.group_epoch == group_epoch
    (described,) = describe(rb, group).groups
    assert described.members[0].subscribed_topic_regex == f"{prefix}-.*"
