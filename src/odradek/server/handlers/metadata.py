"""Metadata (key 3), versions 0-12: brokers, cluster id, controller, topics and partitions.

Follows Kafka's ``KafkaApis.handleTopicMetadataRequest``: a null topic list (v1+) or an
empty one at v0 means every topic; a requested topic that does not exist is created when
both the request (``allow_auto_topic_creation``, v4+) and the broker
(``auto.create.topics.enable``) allow it, otherwise UNKNOWN_TOPIC_OR_PARTITION; an illegal
name is INVALID_TOPIC_EXCEPTION; topics asked by id (v10+) that do not exist get
UNKNOWN_TOPIC_ID. Creation here is synchronous, so the new topic is answered with its
partitions at once instead of LEADER_NOT_AVAILABLE.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from odradek.cluster.metadata import MetadataError, TopicInfo
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import code_of

if TYPE_CHECKING:
    from odradek.server.broker import Broker

VERSIONS = (0, 12)
NO_AUTHORIZED_OPERATIONS = -(1 << 31)
ZERO_UUID = uuid.UUID(int=0)


def register_metadata(registry: HandlerRegistry, broker: Broker) -> None:
    async def metadata(ctx: RequestContext, request: Any) -> Any:
        m = response_module("metadata", ctx.api_version)
        topics: list[Any] = []
        info: TopicInfo | None
        requested = request.topics
        if requested is None or (ctx.api_version == 0 and not requested):
            for info in sorted(broker.metadata.topics.values(), key=lambda i: i.name):
                topics.append(_topic(m, broker, info))
        else:
            allow = getattr(request, "allow_auto_topic_creation", True) and bool(
                broker.config["auto.create.topics.enable"]
            )
            for wanted in requested:
                name = wanted.name
                if name is None:
                    topic_id = getattr(wanted, "topic_id", None)
                    info = broker.metadata.by_id(topic_id) if topic_id else None
                    if info is None:
                        topics.append(_error_topic(m, None, ErrorCode.unknown_topic_id, topic_id))
                    else:
                        topics.append(_topic(m, broker, info))
                    continue
                info = broker.metadata.get(name)
                if info is None and allow:
                    try:
                        info = broker.metadata.create_topic(name)
                    except MetadataError as exc:
                        if exc.kafka_error != "TOPIC_ALREADY_EXISTS":
                            topics.append(_error_topic(m, name, code_of(exc.kafka_error)))
                            continue
                        info = broker.metadata.get(name)
                if info is None:
                    topics.append(_error_topic(m, name, ErrorCode.unknown_topic_or_partition))
                else:
                    topics.append(_topic(m, broker, info))
        listener = broker.config.advertised_listeners[0]
        brokers = (
            make(m.MetadataResponseBroker, node_id=broker.broker_id, host=listener.host,
                 port=broker.port if listener.port == 0 else listener.port, rack=None),
        )
        return make(
            m.MetadataResponse,
            throttle_time=ZERO_THROTTLE,
            brokers=brokers,
            cluster_id=broker.metadata.cluster_id,
            controller_id=broker.broker_id,
            topics=tuple(topics),
            cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
            error_code=ErrorCode.none,
        )

    registry.register(ApiKey.METADATA, VERSIONS[0], VERSIONS[1], metadata)


def _topic(m: Any, broker: Broker, info: TopicInfo) -> Any:
    partitions = []
    for index, replicas in sorted(info.partitions.items()):
        online = broker.get_log(info.name, index) is not None
        partitions.append(
            make(
                m.MetadataResponsePartition,
                error_code=ErrorCode.none if online else ErrorCode.leader_not_available,
                partition_index=index,
                leader_id=replicas[0] if online else -1,
                leader_epoch=0,
                replica_nodes=tuple(replicas),
                isr_nodes=tuple(replicas) if online else (),
                offline_replicas=() if online else tuple(replicas),
            )
        )
    return make(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=tuple(partitions),
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def _error_topic(m: Any, name: str | None, code: ErrorCode, topic_id: Any = None) -> Any:
    return make(
        m.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id or ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )
