"""The consumer group protocol of KIP-848: ConsumerGroupHeartbeat (key 68) v0-1 and
ConsumerGroupDescribe (69) v0-1, on :class:`GroupCoordinator`'s consumer groups
(:mod:`odradek.coordinator.consumer_group`).

Follows Kafka's ``KafkaApis.handleConsumerGroupHeartbeat`` / ``handleConsumerGroupDescribe``:

- ConsumerGroupHeartbeat needs Read on the group (else GROUP_AUTHORIZATION_FAILED) and,
  as in Kafka 4.0 (KAFKA-18813), Describe on every topic name it subscribes to (else
  TOPIC_AUTHORIZATION_FAILED: an assignment would tell a topic's id and size); the
  topics a ``SubscribedTopicRegex`` resolves to are filtered instead: those the member
  whose heartbeat started the resolution may not describe are left out (Kafka 4.0's
  ``filterTopicDescribeAuthorizedTopics``). An invalid expression is
  INVALID_REGULAR_EXPRESSION (:mod:`odradek.coordinator.consumer_regex`). An
  error is answered with its message, no member id, epoch 0 and no assignment. v0 lets
  the coordinator name a joining member; from v1 the member names itself. The topics a
  member subscribes to are looked up by name in the broker's metadata on each heartbeat,
  so new partitions and deleted topics reach the group at the next heartbeat. The
  coordinator answers once what the heartbeat changed is in the group's
  ``__consumer_offsets`` partition and its ISR.
- ConsumerGroupDescribe needs Describe on each group (else GROUP_AUTHORIZATION_FAILED for
  that group), and Describe on every topic the group's members subscribe to or are
  assigned: a group naming a topic the caller may not describe is answered
  TOPIC_AUTHORIZATION_FAILED without members. An unknown group, or a classic one, is
  GROUP_ID_NOT_FOUND. v1 adds each member's type (classic: 0, a member speaking the
  classic protocol in the group during an online migration; consumer: 1).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from odradek.coordinator.consumer_group import (
    Assignment,
    ConsumerGroup,
    HeartbeatRequest,
    TopicMetadata,
)
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    allowed,
    authorized_operations,
    filter_refused,
    require,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._group_log import groups_replicated

if TYPE_CHECKING:
    from odradek.cluster.metadata import ClusterMetadata
    from odradek.server.services import BrokerServices

CONSUMER_GROUP_HEARTBEAT_VERSIONS = (0, 1)
CONSUMER_GROUP_DESCRIBE_VERSIONS = (0, 1)
MEMBER_TYPE_CLASSIC = 0  # ConsumerGroupDescribe v1's MemberType
MEMBER_TYPE_CONSUMER = 1


def register_consumer_groups(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.CONSUMER_GROUP_HEARTBEAT, *CONSUMER_GROUP_HEARTBEAT_VERSIONS,
                      bind(consumer_group_heartbeat, services))
    registry.register(ApiKey.CONSUMER_GROUP_DESCRIBE, *CONSUMER_GROUP_DESCRIBE_VERSIONS,
                      bind(consumer_group_describe, services))


class TopicsByName(Mapping[str, TopicMetadata]):
    """The cluster's topics by name, read from the metadata on demand (a group looks up
    the topics its members subscribe to, or walks the cluster's topics when they are
    fewer than the names subscribed)."""

    __slots__ = ("_metadata",)

    def __init__(self, metadata: ClusterMetadata) -> None:
        self._metadata = metadata

    def __getitem__(self, name: str) -> TopicMetadata:
        info = self._metadata.get(name)
        if info is None:
            raise KeyError(name)
        return TopicMetadata(info.topic_id, name, len(info.partitions))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._metadata.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._metadata.topics))

    def __len__(self) -> int:
        # what a group with a subscription of more names than this iterates instead
        return len(self._metadata.topics)


def _ms(value: Any) -> int:
    if value is None:
        return -1
    ms: float = value.total_seconds() * 1000
    return round(ms)


def _owned(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in topic_partitions:
        if tp.topic_id is None:
            continue
        owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return {t: ps for t, ps in owned.items() if ps}


# -- ConsumerGroupHeartbeat -----------------------------------------------------------
async def consumer_group_heartbeat(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    require(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    m = response_module("consumer_group_heartbeat", ctx.api_version)
    if request.subscribed_topic_names and filter_refused(
            services.authorizer, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
            set(request.subscribed_topic_names)):
        # Kafka 4.0 (KAFKA-18813): the assignment would tell the topic's id and size
        return _failed(m, ErrorCode.topic_authorization_failed,
                       "Describe on a subscribed topic is not authorized.")
    heartbeat = HeartbeatRequest(
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=(None if request.subscribed_topic_names is None
                                else tuple(request.subscribed_topic_names)),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),  # v1+
        server_assignor=request.server_assignor,
        owned=_owned(request.topic_partitions),
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.peer[0]}",
    )
    authorizer = services.authorizer

    def describable(names: AbstractSet[str]) -> AbstractSet[str]:
        # Kafka 4.0's filterTopicDescribeAuthorizedTopics: a topic the expression matched
        # that this member may not describe is left out of the resolution
        return set(names) - filter_refused(authorizer, ctx, AclOperation.DESCRIBE,
                                           ResourceType.TOPIC, names)

    result = await services.group_coordinator.consumer_group_heartbeat(
        request.group_id, heartbeat, ctx.api_version, TopicsByName(services.metadata),
        None if authorizer is None else describable)
    if result.error != ErrorCode.none:
        return _failed(m, result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = make(m.Assignment, topic_partitions=tuple(
            make(m.TopicPartitions, topic_id=topic_id, partitions=tuple(sorted(ps)))
            for topic_id, ps in result.assignment.items()))
    return make(m.ConsumerGroupHeartbeatResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, member_id=result.member_id,
                member_epoch=result.member_epoch,
                heartbeat_interval=_interval(result.heartbeat_interval_ms),
                assignment=assignment)


def _failed(m: Any, error: ErrorCode, message: str | None) -> Any:
    return make(m.ConsumerGroupHeartbeatResponse, throttle_time=ZERO_THROTTLE,
                error_code=error, error_message=message, member_id=None, member_epoch=0,
                heartbeat_interval=_interval(0), assignment=None)


def _interval(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


# -- ConsumerGroupDescribe ------------------------------------------------------------
async def consumer_group_describe(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    m = response_module("consumer_group_describe", ctx.api_version)
    authorizer = services.authorizer
    coordinator = services.group_coordinator
    groups = []

    def failed_as(gid: str, error: ErrorCode, message: str | None) -> Any:
        return make(m.DescribedGroup, error_code=error, error_message=message,
                    group_id=gid, group_state="", group_epoch=-1,
                    assignment_epoch=-1, assignor_name="", members=(),
                    authorized_operations=NOT_REQUESTED)

    for group_id in request.group_ids:
        def failed(error: ErrorCode, message: str | None, gid: str = group_id) -> Any:
            return failed_as(gid, error, message)

        if not allowed(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(failed(ErrorCode.group_authorization_failed,
                                 f"Describe on group {group_id!r} is not authorized"))
            continue
        error = coordinator.check_coordinator(group_id)
        if error != ErrorCode.none:
            groups.append(failed(error, None))
            continue
        group = coordinator.consumer_group(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group."
                       if coordinator.manager.get_group(group_id) is not None
                       else f"Group {group_id} not found.")
            groups.append(failed(ErrorCode.group_id_not_found, message))
            continue
        names = _topic_names(services.metadata, group)
        topics = {n for n in names.values() if n} | group.subscribed_topics()
        if not all(allowed(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t)
                   for t in topics):
            groups.append(failed(
                ErrorCode.topic_authorization_failed,
                "The group has described topic(s) that the client is not authorized to "
                "describe."))
            continue
        groups.append(_describe(m, ctx, group, names,
                                authorized_operations(authorizer, ctx, ResourceType.GROUP,
                                                      group_id)
                                if request.include_authorized_operations else NOT_REQUESTED))
    # answered once the ISR holds the state shown (Kafka reads at the last committed
    # offset): a failover could otherwise take back a member or an epoch shown
    replicated = await groups_replicated(
        services, [g.group_id for g in groups if g.error_code == ErrorCode.none], reads=True)
    groups = [failed_as(g.group_id, replicated[g.group_id], None)
              if replicated.get(g.group_id, ErrorCode.none) != ErrorCode.none else g
              for g in groups]
    return make(m.ConsumerGroupDescribeResponse, throttle_time=ZERO_THROTTLE,
                groups=tuple(groups))


def _topic_names(metadata: ClusterMetadata, group: ConsumerGroup) -> dict[uuid.UUID, str]:
    """Names of the topics the group's assignments name (subscribed ones first, then the
    metadata for a topic no longer subscribed or deleted)."""
    names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
    for member in group.members.values():
        for holding in (member.assigned, member.pending_revocation,
                        group.target.get(member.member_id, {})):
            for topic_id in holding:
                if topic_id not in names:
                    info = metadata.by_id(topic_id)
                    names[topic_id] = info.name if info is not None else ""
    return names


def _describe(m: Any, ctx: RequestContext, group: ConsumerGroup,
              names: Mapping[uuid.UUID, str], operations: int) -> Any:
    def assignment(partitions: Assignment) -> Any:
        return make(m.Assignment, topic_partitions=tuple(
            make(m.TopicPartitions, topic_id=topic_id, topic_name=names.get(topic_id, ""),
                 partitions=tuple(sorted(ps)))
            for topic_id, ps in sorted(partitions.items(), key=lambda kv: names.get(kv[0], ""))
        ))

    members = tuple(
        make(m.Member, member_id=member.member_id, instance_id=member.instance_id,
             rack_id=member.rack_id, member_epoch=member.member_epoch,
             client_id=member.client_id, client_host=member.client_host,
             subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
             subscribed_topic_regex=member.subscribed_topic_regex,
             assignment=assignment(member.assigned),
             target_assignment=assignment(group.target.get(member.member_id, {})),
             member_type=MEMBER_TYPE_CLASSIC if member.uses_classic_protocol
             else MEMBER_TYPE_CONSUMER)
        for member in group.members.values()
    )
    del ctx
    return make(m.DescribedGroup, error_code=ErrorCode.none, error_message=None,
                group_id=group.group_id, group_state=group.state.value,
                group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor_name, members=members,
                authorized_operations=operations)
