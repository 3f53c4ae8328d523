"""Metadata (key 3), versions 0-12: brokers, cluster id, controller, topics and partitions.

Follows Kafka's ``KafkaApis.handleTopicMetadataRequest``: a null topic list (v1+) or an
empty one at v0 means every topic; a requested topic that does not exist is created when
both the request (``allow_auto_topic_creation``, v4+) and the broker
(``auto.create.topics.enable``) allow it, otherwise UNKNOWN_TOPIC_OR_PARTITION; an illegal
name is INVALID_TOPIC_EXCEPTION; topics asked by id (v10+) that do not exist get
UNKNOWN_TOPIC_ID; a name asked twice is answered once (Kafka reads the names as a set).
The topics to create are created together, their logs in a worker thread
(``ReplicaManager.change_topics``) while the loop serves others; the answer waits for
them up to ``AUTO_CREATE_WAIT``, so a new topic is normally answered with its partitions
at once. A partition is answered with the leader decided for it even while its log is
still being created there, as a KRaft broker answers from its metadata image before its
replica manager has made the log: the data path answers that window LEADER_NOT_AVAILABLE,
which every client retries (``ReplicaManager.leader_partition``). A partition without a
leader answered LEADER_NOT_AVAILABLE would be taken as settled by some clients: librdkafka's
watermark query then fails UNKNOWN_PARTITION without asking again until its periodic
metadata refresh, five minutes later.
``include_cluster_authorized_operations`` (v8-10) and
``include_topic_authorized_operations`` (v8+) are answered from
``server/authorization.py`` (KIP-430). With an authorizer, topics the caller may not
Describe are left out of an all-topics answer, and a named one is answered
TOPIC_AUTHORIZATION_FAILED whether it exists or not (a topic asked by id: with its id and
no name, as Kafka, ids not being secret); auto-creation needs Create on the cluster or on
the topic, else TOPIC_AUTHORIZATION_FAILED. Auto-created topics are validated as explicit
creations are (legal characters, at most 249 of them, no '.'/'_' collision with an
existing topic: INVALID_TOPIC_EXCEPTION) and count against the client's
``controller_mutation_rate`` permissively, as Kafka's auto-creation does: the topic is
created, and the answer carries the throttle time while the connection is muted for it.
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from odradek.cluster.metadata import MetadataError, TopicInfo
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.metadata_writer import (
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    write_metadata_response,
)
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.protocol.send import Send
from odradek.server.authorization import (
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
    allowed,
    allowed_on_cluster,
    authorized_operations,
    cluster_operations,
)
from odradek.server.client_quotas import MutationQuota
from odradek.server.handlers._errors import code_of
from odradek.server.handlers._quotas import PERMISSIVE, mutation_quota, throttle_ms_after
from odradek.server.handlers._steps import Steps

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (0, 12)
ZERO_UUID = uuid.UUID(int=0)


def register_metadata(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.METADATA, VERSIONS[0], VERSIONS[1], bind(metadata, services))


async def metadata(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    topics: list[MetadataTopic] = []
    quota: MutationQuota | None = None
    info: TopicInfo | None
    requested = request.topics
    live_brokers = services.live_brokers(ctx.listener_name)
    live = {b[0] for b in live_brokers}
    authorizer = services.authorizer
    # KIP-430 (v8+): the operations the caller may perform, when asked
    asked_ops = getattr(request, "include_topic_authorized_operations", False)

    def ops_of(name: str) -> int:
        return (authorized_operations(authorizer, ctx, ResourceType.TOPIC, name)
                if asked_ops else NOT_REQUESTED)

    def may_describe(name: str) -> bool:
        return allowed(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    steps = Steps()  # a broker of many partitions: the answer is built in bounded steps
    if requested is None or (version == 0 and not requested):
        for info in sorted(services.metadata.topics.values(), key=lambda i: i.name):
            if authorizer is not None and not may_describe(info.name):
                continue
            topics.append(_topic(services, info, live, ops_of(info.name)))
            await steps.tick(1 + len(info.partitions))
    else:
        allow = getattr(request, "allow_auto_topic_creation", True) and bool(
            services.config["auto.create.topics.enable"]
        )
        quota = mutation_quota(services, ctx, PERMISSIVE) if allow else None
        created: dict[str, TopicInfo | MetadataError] = {}
        refused: set[str] = set()  # Describe, or Create for auto-creation, not allowed
        if authorizer is not None:
            refused = {w.name for w in requested
                       if w.name is not None and not may_describe(w.name)}
        if allow:
            missing = [n for n in dict.fromkeys(w.name for w in requested)
                       if n is not None and n not in refused
                       and services.metadata.get(n) is None]
            if missing and not allowed_on_cluster(authorizer, ctx, AclOperation.CREATE):
                denied = {n for n in missing if not allowed(
                    authorizer, ctx, AclOperation.CREATE, ResourceType.TOPIC, n)}
                refused |= denied
                missing = [n for n in missing if n not in denied]
            if missing:
                created = await _auto_create(services, missing, quota)
        answered: set[str] = set()
        for wanted in requested:
            await steps.tick()
            name = wanted.name
            if name is None:
                topic_id = getattr(wanted, "topic_id", None)
                info = services.metadata.by_id(topic_id) if topic_id else None
                if info is None:
                    topics.append(_error_topic(None, ErrorCode.unknown_topic_id, topic_id))
                elif authorizer is not None and not may_describe(info.name):
                    topics.append(_error_topic(None, ErrorCode.topic_authorization_failed,
                                               topic_id))
                else:
                    topics.append(_topic(services, info, live, ops_of(info.name)))
                continue
            if name in answered:  # Kafka answers a set of names: each once
                continue
            answered.add(name)
            if name in refused:
                topics.append(_error_topic(name, ErrorCode.topic_authorization_failed))
                continue
            outcome = created.get(name)
            if isinstance(outcome, MetadataError):
                topics.append(_error_topic(name, code_of(outcome.kafka_error),
                                           ops=ops_of(name)))
                continue
            info = services.metadata.get(name)
            if info is None:
                topics.append(_error_topic(name, ErrorCode.unknown_topic_or_partition,
                                           ops=ops_of(name)))
            else:
                topics.append(_topic(services, info, live, ops_of(name)))
                await steps.tick(len(info.partitions))
    brokers = [MetadataBroker(b, host, port, rack) for b, host, port, rack in live_brokers]
    throttle_ms = throttle_ms_after(ctx, quota) if quota is not None else 0
    # Encoded by the hot-path writer (byte-identical to kio's, see its tests).
    return Send((write_metadata_response(
        version, brokers, services.metadata.cluster_id, services.controller_id(), topics,
        cluster_operations(authorizer, ctx)
        if getattr(request, "include_cluster_authorized_operations", False)
        else NOT_REQUESTED,
        throttle_ms,
    ),))


#: How long auto-creation waits for the new logs before answering (then requests to the
#: pending partitions are LEADER_NOT_AVAILABLE, and the client asks again).
AUTO_CREATE_WAIT = datetime.timedelta(seconds=10)


async def _auto_create(
    services: BrokerServices, names: list[str], quota: MutationQuota | None
) -> dict[str, TopicInfo | MetadataError]:
    """Create the topics ``names`` with the broker's defaults, their logs made in a worker
    thread (``ReplicaManager.change_topics``) so that the loop turns meanwhile. Each
    topic's partitions are charged to ``quota`` as it is created, as CreateTopics does,
    not once the logs are in place: another request of the client's meanwhile (librdkafka
    asks again on a new connection when it drops its bootstrap one) sees the charge."""
    def create() -> dict[str, TopicInfo | MetadataError]:
        outcomes: dict[str, TopicInfo | MetadataError] = {}
        for name in names:
            try:
                outcomes[name] = info = services.metadata.create_topic(name)
                if quota is not None:
                    quota.record(len(info.partitions))
            except MetadataError as exc:
                if exc.kafka_error != "TOPIC_ALREADY_EXISTS":  # else: made meanwhile
                    outcomes[name] = exc
        return outcomes

    outcomes, _ = await services.replica_manager.change_topics(create, AUTO_CREATE_WAIT)
    return outcomes


_NONE = int(ErrorCode.none.value)
_LEADER_NOT_AVAILABLE = int(ErrorCode.leader_not_available.value)


def _topic(
    services: BrokerServices, info: TopicInfo, live: set[int], ops: int = NOT_REQUESTED
) -> MetadataTopic:
    """Each partition's leader, leader epoch and ISR as decided (the metadata's partition
    state), whether or not the leader has its log in place yet (module header); a
    partition without a leader, or whose leader is not among the live brokers of this
    answer (this broker has not yet seen it register), is LEADER_NOT_AVAILABLE with no
    leader, as Kafka's MetadataCache answers: a leader id missing from the brokers list
    leaves some clients (aiokafka) retrying a node they cannot resolve."""
    partitions = []
    state_of = services.metadata.partition_state
    name = info.name
    for index, replicas in sorted(info.partitions.items()):
        nodes = tuple(replicas)
        state = state_of(name, index)
        leader = state.leader
        if leader < 0 or leader not in live:
            partitions.append(
                MetadataPartition(_LEADER_NOT_AVAILABLE, index, -1, state.leader_epoch,
                                  nodes, (), nodes)
            )
        else:
            partitions.append(MetadataPartition(
                _NONE, index, state.leader, state.leader_epoch, nodes, state.isr, ()
            ))
    return MetadataTopic(
        _NONE, info.name, info.topic_id, info.is_internal, partitions, ops
    )


def _error_topic(
    name: str | None, code: ErrorCode, topic_id: Any = None, ops: int = NOT_REQUESTED
) -> MetadataTopic:
    """A topic answered with an error. Kafka gives the authorized operations of a topic
    named in the request (its Describe was authorized) but not of an unknown topic id."""
    return MetadataTopic(
        int(code.value), name, topic_id or ZERO_UUID, False, (), ops
    )
