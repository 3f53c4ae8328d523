"""DescribeProducers (key 61), version 0 (KIP-664): the active producers of partitions this
broker leads, read from each partition's producer state.

Follows Kafka's ``KafkaApis.handleDescribeProducersRequest`` and
``Partition.activeProducerState``. For each partition asked for:

- TOPIC_AUTHORIZATION_FAILED without Read on its topic (Kafka's rule: the answer tells
  which producers write there);
- UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, NOT_LEADER_OR_FOLLOWER
  where this broker is not its leader (LEADER_NOT_AVAILABLE while its log is created);
- otherwise every producer id the partition's
  :class:`~odradek.storage.producer_state.ProducerStateManager` holds (those not expired
  by ``producer.id.expiration.ms``), with its epoch, last sequence (-1 when its batches
  were not kept, e.g. after a snapshot load of a producer without one), last timestamp,
  the coordinator epoch of its last marker and the first offset of its ongoing
  transaction (-1: none).

``kafka-transactions.sh describe-producers``, ``abort`` and ``find-hanging`` (and
``odradek transactions``'s verbs of the same names) are built on it: a transaction whose
start offset no coordinator knows is a *hanging* transaction, holding back the last
stable offset until an abort marker is written for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, ResourceType, filter_refused
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import error_code_for
from odradek.server.handlers._steps import Steps

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

__all__ = ["DESCRIBE_PRODUCERS_VERSIONS", "describe_producers", "register_describe_producers"]

DESCRIBE_PRODUCERS_VERSIONS = (0, 0)


def register_describe_producers(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.DESCRIBE_PRODUCERS, *DESCRIBE_PRODUCERS_VERSIONS,
                      bind(describe_producers, services))


async def describe_producers(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    m = response_module("describe_producers", ctx.api_version)
    refused = filter_refused(services.authorizer, ctx, AclOperation.READ, ResourceType.TOPIC,
                             (t.name for t in request.topics))
    replica_manager = services.replica_manager
    steps = Steps()
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            await steps.tick()
            if topic.name in refused:
                partitions.append(_error(m, index, ErrorCode.topic_authorization_failed))
                continue
            try:
                partition = replica_manager.leader_partition(topic.name, int(index))
            except Exception as exc:
                code, _ = error_code_for(exc, f"describing the producers of {topic.name}-{index}")
                partitions.append(_error(m, index, code))
                continue
            producers = tuple(
                make(m.ProducerState, producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                     last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                     coordinator_epoch=e.coordinator_epoch,
                     current_txn_start_offset=e.current_txn_first_offset)
                for e in partition.log.producer_state.active_producers())
            partitions.append(make(m.PartitionResponse, partition_index=index,
                                   error_code=ErrorCode.none, active_producers=producers))
        topics.append(make(m.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return make(m.DescribeProducersResponse, throttle_time=ZERO_THROTTLE, topics=tuple(topics))


def _error(m: Any, index: Any, code: ErrorCode) -> Any:
    return make(m.PartitionResponse, partition_index=index, error_code=code,
                active_producers=())
