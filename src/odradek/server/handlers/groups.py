"""Group membership APIs of the classic protocol, on :class:`GroupCoordinator`.

FindCoordinator (key 10) v0-6, JoinGroup (11) v0-9, Heartbeat (12) v0-4, LeaveGroup (13)
v0-5, SyncGroup (14) v0-5, DescribeGroups (15) v0-6, ListGroups (16) v0-5, DeleteGroups
(42) v0-2 — kio's ranges, which are Kafka 4's. Offsets APIs are in :mod:`.offsets`.

Follows Kafka's ``KafkaApis`` for the request-to-coordinator translation:

- FindCoordinator: key type 0 (group) creates ``__consumer_offsets`` on first use and
  answers the leader of the group's partition; v4+ answers every key of the batch. Key
  type 1 (transaction) does the same with ``__transaction_state`` and the transactional
  id (Describe on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); share groups (2) and
  unknown types are INVALID_REQUEST.
- JoinGroup v4+ requires a known member id (KIP-394); the response waits until the join
  phase of the rebalance completes. A v0 request has no rebalance timeout: the session
  timeout stands in, as in Kafka.
- LeaveGroup v0-2 carries one member id; v3+ a batch of members (with
  ``group.instance.id``) answered one by one.
- DescribeGroups answers an unknown group with state Dead: NONE up to v5, and
  GROUP_ID_NOT_FOUND from v6 (KIP-1043).

With an authorizer (``server/authorization.py``): FindCoordinator needs Describe on the
group, JoinGroup, SyncGroup, Heartbeat and LeaveGroup Read on it, DescribeGroups Describe
and DeleteGroups Delete on each group, all answered GROUP_AUTHORIZATION_FAILED; ListGroups
lists every group to a caller with Describe on the cluster, else only the groups it may
Describe.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from odradek.coordinator.offsets_topic import OffsetsTopicUnavailableError
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    allowed,
    allowed_on_cluster,
    authorized_operations,
    require,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._group_log import group_log_replicated, groups_replicated
from odradek.server.handlers._steps import Steps
from odradek.server.handlers.consumer_groups import TopicsByName, register_consumer_groups

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

FIND_COORDINATOR_VERSIONS = (0, 6)
JOIN_GROUP_VERSIONS = (0, 9)
HEARTBEAT_VERSIONS = (0, 4)
LEAVE_GROUP_VERSIONS = (0, 5)
SYNC_GROUP_VERSIONS = (0, 5)
DESCRIBE_GROUPS_VERSIONS = (0, 6)
LIST_GROUPS_VERSIONS = (0, 5)
DELETE_GROUPS_VERSIONS = (0, 2)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
CLASSIC_GROUP_TYPE = "classic"


def _ms(value: Any, default: int = -1) -> int:
    if value is None:
        return default
    ms: float = value.total_seconds() * 1000
    return round(ms)


def _host(ctx: RequestContext) -> str:
    return f"/{ctx.peer[0]}"


def register_groups(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.FIND_COORDINATOR, *FIND_COORDINATOR_VERSIONS,
                      bind(find_coordinator, services))
    registry.register(ApiKey.JOIN_GROUP, *JOIN_GROUP_VERSIONS, bind(join_group, services))
    registry.register(ApiKey.HEARTBEAT, *HEARTBEAT_VERSIONS, bind(heartbeat, services))
    registry.register(ApiKey.LEAVE_GROUP, *LEAVE_GROUP_VERSIONS, bind(leave_group, services))
    registry.register(ApiKey.SYNC_GROUP, *SYNC_GROUP_VERSIONS, bind(sync_group, services))
    registry.register(ApiKey.DESCRIBE_GROUPS, *DESCRIBE_GROUPS_VERSIONS,
                      bind(describe_groups, services))
    registry.register(ApiKey.LIST_GROUPS, *LIST_GROUPS_VERSIONS, bind(list_groups, services))
    registry.register(ApiKey.DELETE_GROUPS, *DELETE_GROUPS_VERSIONS, bind(delete_groups, services))
    register_consumer_groups(registry, services)


# -- FindCoordinator ---------------------------------------------------------------
async def find_coordinator(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("find_coordinator", ctx.api_version)
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    offsets_topic = services.group_coordinator.topic
    if key_type == KEY_TYPE_TRANSACTION and services.transaction_coordinator is not None:
        offsets_topic = services.transaction_coordinator.topic
    not_yet = False
    if (key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION) and services.metadata.remote
            and not offsets_topic.exists()):
        # Cluster mode: __consumer_offsets is created with its ZooKeeper write off
        # the loop; made meanwhile through another broker, it is not known here yet.
        with contextlib.suppress(OffsetsTopicUnavailableError):
            await asyncio.to_thread(services.metadata.off_loop(offsets_topic.ensure))
        not_yet = not offsets_topic.exists()

    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node, host, port = _coordinator(services, ctx, key_type,
                                                            not_yet, key)
            coordinators.append(make(
                m.Coordinator, key=key, node_id=node, host=host, port=port,
                error_code=error, error_message=message,
            ))
        return make(m.FindCoordinatorResponse, throttle_time=ZERO_THROTTLE,
                    coordinators=tuple(coordinators))
    error, message, node, host, port = _coordinator(services, ctx, key_type, not_yet,
                                                    request.key)
    return make(m.FindCoordinatorResponse, throttle_time=ZERO_THROTTLE, error_code=error,
                error_message=message, node_id=node, host=host, port=port)


def _coordinator(
    services: BrokerServices, ctx: RequestContext, key_type: int, not_yet: bool, key: str,
) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) answering one coordinator key, with the
    coordinator's endpoint on the listener the request came in on."""
    if key_type == KEY_TYPE_GROUP and not allowed(
            services.authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return (ErrorCode.group_authorization_failed,
                f"Describe on group {key!r} is not authorized", -1, "", -1)
    if key_type == KEY_TYPE_TRANSACTION:
        if not allowed(services.authorizer, ctx, AclOperation.DESCRIBE,
                       ResourceType.TRANSACTIONAL_ID, key):
            return (ErrorCode.transactional_id_authorization_failed,
                    f"Describe on transactional id {key!r} is not authorized", -1, "", -1)
        txn = services.transaction_coordinator
        if txn is None:
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        if not_yet:
            return (ErrorCode.coordinator_not_available,
                    "the transaction state topic is being created", -1, "", -1)
        if not key:
            return ErrorCode.invalid_request, "empty transactional id", -1, "", -1
        error, node = txn.coordinator_for(key)
    elif key_type != KEY_TYPE_GROUP:
        return ErrorCode.invalid_request, f"unsupported key type {key_type}", -1, "", -1
    elif not_yet:
        return (ErrorCode.coordinator_not_available,
                "the offsets topic is being created", -1, "", -1)
    else:
        error, node = services.group_coordinator.coordinator_for(key)
    if error != ErrorCode.none:
        return error, None, -1, "", -1
    endpoint = next(
        ((host, port) for b, host, port, _ in services.live_brokers(ctx.listener_name)
         if b == node), None
    )
    if endpoint is None:  # the leader is not registered (yet, or any more)
        return (ErrorCode.coordinator_not_available,
                f"no live broker {node} to coordinate the group", -1, "", -1)
    host, port = endpoint
    return ErrorCode.none, None, node, host, port


# -- JoinGroup -----------------------------------------------------------------------
async def join_group(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    require(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    m = response_module("join_group", ctx.api_version)
    session_timeout = _ms(request.session_timeout)
    result = await services.group_coordinator.join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        require_known_member_id=ctx.api_version >= 4,
        client_id=ctx.client_id or "",
        client_host=_host(ctx),
        rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", None),
                                 session_timeout),
        session_timeout_ms=session_timeout,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        topics=TopicsByName(services.metadata),
    )
    members = tuple(
        make(m.JoinGroupResponseMember, member_id=mid, group_instance_id=iid, metadata=md)
        for mid, iid, md in result.members
    )
    generation = result.generation_id
    return make(
        m.JoinGroupResponse, throttle_time=ZERO_THROTTLE, error_code=result.error,
        generation_id=generation, protocol_type=result.protocol_type,
        protocol_name=result.protocol_name or ("" if ctx.api_version < 7 else None),
        leader=result.leader_id, skip_assignment=False, member_id=result.member_id,
        members=members,
    )


# -- SyncGroup -----------------------------------------------------------------------
async def sync_group(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    require(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    m = response_module("sync_group", ctx.api_version)
    result = await services.group_coordinator.sync_group(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    if result.error == ErrorCode.none:
        # The generation's group record is stored with acks=-1: no member is told its
        # assignment before the ISR has it (Kafka's storeGroup callback maps a timeout
        # to COORDINATOR_NOT_AVAILABLE; the member finds the coordinator and rejoins).
        stored = await group_log_replicated(services, request.group_id)
        if stored != ErrorCode.none:
            if stored == ErrorCode.request_timed_out:
                stored = ErrorCode.coordinator_not_available
            return make(m.SyncGroupResponse, throttle_time=ZERO_THROTTLE,
                        error_code=stored, protocol_type=result.protocol_type,
                        protocol_name=result.protocol_name, assignment=b"")
    return make(
        m.SyncGroupResponse, throttle_time=ZERO_THROTTLE, error_code=result.error,
        protocol_type=result.protocol_type, protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


# -- Heartbeat -----------------------------------------------------------------------
async def heartbeat(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    require(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    m = response_module("heartbeat", ctx.api_version)
    error = services.group_coordinator.heartbeat(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return make(m.HeartbeatResponse, throttle_time=ZERO_THROTTLE, error_code=error)


# -- LeaveGroup ----------------------------------------------------------------------
async def leave_group(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    require(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    m = response_module("leave_group", ctx.api_version)
    if ctx.api_version < 3:
        error, errors = services.group_coordinator.leave_group(
            request.group_id, [(request.member_id, None)]
        )
        return make(m.LeaveGroupResponse, throttle_time=ZERO_THROTTLE,
                    error_code=error if error != ErrorCode.none else errors[0])
    identities = [(mi.member_id, mi.group_instance_id) for mi in request.members]
    error, errors = services.group_coordinator.leave_group(request.group_id, identities)
    members = tuple(
        make(m.MemberResponse, member_id=mid, group_instance_id=iid, error_code=code)
        for (mid, iid), code in zip(identities, errors, strict=True)
    )
    return make(m.LeaveGroupResponse, throttle_time=ZERO_THROTTLE, error_code=error,
                members=members if error == ErrorCode.none else ())


# -- DescribeGroups ------------------------------------------------------------------
async def describe_groups(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("describe_groups", ctx.api_version)
    asked_operations = getattr(request, "include_authorized_operations", False)
    groups = []
    steps = Steps()
    authorizer = services.authorizer
    for group_id in request.groups:
        if not allowed(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(make(
                m.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                error_message=None, group_id=group_id, group_state="", protocol_type="",
                protocol_data="", members=(), authorized_operations=NOT_REQUESTED))
            continue
        summary = services.group_coordinator.describe_group(group_id)
        await steps.tick(1 + len(summary.members))
        error = summary.error
        message = None
        if error == ErrorCode.group_id_not_found:
            if ctx.api_version < 6:
                error = ErrorCode.none
            else:
                message = summary.message or f"Group {group_id} not found."
        members = tuple(
            make(m.DescribedGroupMember, member_id=s.member_id,
                 group_instance_id=s.group_instance_id, client_id=s.client_id,
                 client_host=s.client_host, member_metadata=s.metadata,
                 member_assignment=s.assignment)
            for s in summary.members
        )
        groups.append(make(
            m.DescribedGroup, error_code=error, error_message=message, group_id=group_id,
            group_state=summary.state, protocol_type=summary.protocol_type,
            protocol_data=summary.protocol, members=members,
            authorized_operations=authorized_operations(authorizer, ctx, ResourceType.GROUP,
                                                        group_id)
            if error == ErrorCode.none and asked_operations else NOT_REQUESTED,
        ))
    return make(m.DescribeGroupsResponse, throttle_time=ZERO_THROTTLE,
                groups=tuple(groups))


# -- ListGroups ----------------------------------------------------------------------
async def list_groups(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("list_groups", ctx.api_version)
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    error, summaries = services.group_coordinator.list_groups(getattr(request, "states_filter", ()))
    if types:
        summaries = [s for s in summaries if s.group_type in types]
    if not allowed_on_cluster(services.authorizer, ctx, AclOperation.DESCRIBE):
        summaries = [s for s in summaries if allowed(
            services.authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, s.group_id)]
    groups = tuple(
        make(m.ListedGroup, group_id=s.group_id, protocol_type=s.protocol_type,
             group_state=s.state, group_type=s.group_type)
        for s in summaries
    )
    return make(m.ListGroupsResponse, throttle_time=ZERO_THROTTLE, error_code=error,
                groups=groups)


# -- DeleteGroups --------------------------------------------------------------------
async def delete_groups(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("delete_groups", ctx.api_version)
    names = list(dict.fromkeys(request.groups_names))
    refused = [g for g in names if not allowed(
        services.authorizer, ctx, AclOperation.DELETE, ResourceType.GROUP, g)]
    results = services.group_coordinator.delete_groups([g for g in names if g not in refused])
    # answered once the tombstones are in the ISR, as Kafka's runtime answers a write
    results.update(await groups_replicated(
        services, [g for g, error in results.items() if error == ErrorCode.none]))
    results.update({g: ErrorCode.group_authorization_failed for g in refused})
    return make(
        m.DeleteGroupsResponse, throttle_time=ZERO_THROTTLE,
        results=tuple(make(m.DeletableGroupResult, group_id=g, error_code=results[g])
                      for g in names if g in results),
    )
