"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), v0
(KIP-455; Kafka's ``KafkaApis.handleAlterPartitionReassignmentsRequest`` in ZooKeeper mode).

Alter validates each partition as Kafka does, then hands the valid ones to the controller
through ``/admin/reassign_partitions`` (:mod:`odradek.cluster.reassignment`) and answers at
once; the move itself runs in the background (ListPartitionReassignments shows it):
- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
- an empty replica list, a broker named twice, or a broker that is not live:
  INVALID_REPLICA_ASSIGNMENT with the reason;
- ``replicas`` null cancels: NO_REASSIGNMENT_IN_PROGRESS when none is; else the partition
  goes back to its replicas from before the reassignment;
- a target equal to the current assignment with nothing under way changes nothing.
On the single node nothing can move: every valid target is the current assignment.

List answers every reassignment under way (or those of the named partitions) with the
current replicas and the replicas being added and removed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from odradek.cluster.reassignment import Reassignment
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, require_on_cluster
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (0, 0)


def register_reassignments(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.ALTER_PARTITION_REASSIGNMENTS, VERSIONS[0], VERSIONS[1],
                      bind(alter_reassignments, services))
    registry.register(ApiKey.LIST_PARTITION_REASSIGNMENTS, VERSIONS[0], VERSIONS[1],
                      bind(list_reassignments, services))


async def _in_progress(services: BrokerServices) -> dict[tuple[str, int], Reassignment]:
    """The reassignments under way (none on the single node)."""
    store = services.reassignments
    if store is None:
        return {}
    return await asyncio.to_thread(store.read_reassignments)


async def alter_reassignments(
    services: BrokerServices, ctx: RequestContext, request: Any,
) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.ALTER)
    m = response_module("alter_partition_reassignments", ctx.api_version)
    live = {b[0] for b in services.live_brokers()}
    under_way = await _in_progress(services)
    accepted: list[Reassignment] = []
    topics = []
    for topic in request.topics:
        info = services.metadata.get(topic.name)
        partitions = []
        for p in topic.partitions:
            code, message = ErrorCode.none, None
            current = (tuple(info.partitions[p.partition_index])
                       if info is not None and p.partition_index in info.partitions
                       else None)
            target = None if p.replicas is None else tuple(int(r) for r in p.replicas)
            key = (topic.name, p.partition_index)
            if current is None:
                code, message = ErrorCode.unknown_topic_or_partition, None
            elif target is None:
                if key not in under_way:
                    code = ErrorCode.no_reassignment_in_progress
                    message = f"no reassignment of {topic.name}-{p.partition_index}"
                else:
                    accepted.append(Reassignment(*key, None, under_way[key].original))
            elif not target:
                code = ErrorCode.invalid_replica_assignment
                message = "the replica list is empty"
            elif len(set(target)) != len(target):
                code = ErrorCode.invalid_replica_assignment
                message = f"a broker is named twice in {list(target)}"
            elif not set(target) <= live:
                code = ErrorCode.invalid_replica_assignment
                message = (f"brokers {sorted(set(target) - live)} are not live "
                           f"(live: {sorted(live)})")
            elif target != current or key in under_way:
                original = under_way[key].original if key in under_way else current
                accepted.append(Reassignment(*key, target, original))
            partitions.append(make(m.ReassignablePartitionResponse,
                                   partition_index=p.partition_index, error_code=code,
                                   error_message=message))
        topics.append(make(m.ReassignableTopicResponse, name=topic.name,
                           partitions=tuple(partitions)))
    if accepted:
        store = services.reassignments
        assert store is not None  # the single node accepts no move (no other broker)
        await asyncio.to_thread(store.add_reassignments, accepted)
    return make(m.AlterPartitionReassignmentsResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, responses=tuple(topics))


async def list_reassignments(
    services: BrokerServices, ctx: RequestContext, request: Any,
) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.DESCRIBE)
    m = response_module("list_partition_reassignments", ctx.api_version)
    under_way = await _in_progress(services)
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.name, int(i)) for t in request.topics for i in t.partition_indexes}
    by_topic: dict[str, list[Any]] = {}
    for key, entry in sorted(under_way.items()):
        if wanted is not None and key not in wanted:
            continue
        info = services.metadata.get(key[0])
        if info is None or key[1] not in info.partitions:
            continue
        by_topic.setdefault(key[0], []).append(make(
            m.OngoingPartitionReassignment, partition_index=key[1],
            replicas=tuple(info.partitions[key[1]]), adding_replicas=entry.adding,
            removing_replicas=entry.removing,
        ))
    return make(m.ListPartitionReassignmentsResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None,
                topics=tuple(make(m.OngoingTopicReassignment, name=name,
                                  partitions=tuple(ps))
                             for name, ps in by_topic.items()))


