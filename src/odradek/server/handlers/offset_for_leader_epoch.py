"""OffsetForLeaderEpoch (key 23), versions 2-4: where a leader epoch ended in the leader's
log (KIP-101, KIP-279, KIP-320).

Follows Kafka's ``KafkaApis.handleOffsetForLeaderEpochRequest`` /
``Partition.lastOffsetForLeaderEpoch``: only the leader answers, at the request's
``current_leader_epoch`` (-1 skips the check), with the replica manager's errors
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
UNKNOWN_TOPIC_OR_PARTITION). The answer comes from the leader-epoch cache: for the
requested epoch, the largest epoch at or below it the log knows and where it ended, which
is the start of the next epoch, or the log end offset for the latest one; an epoch older
than every epoch the log holds is answered -1/-1. Followers (``replica_id`` >= 0) use it
to truncate before they fetch; consumers (KIP-320) to check their position after a
leader change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import error_code_for

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (2, 4)


def register_offset_for_leader_epoch(registry: HandlerRegistry, services: BrokerServices) -> None:
    replica_manager = services.replica_manager

    async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
        m = response_module("offset_for_leader_epoch", ctx.api_version)
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                code = ErrorCode.none
                epoch, end = -1, -1
                try:
                    partition = replica_manager.leader_partition(
                        topic.topic, p.partition, p.current_leader_epoch
                    )
                    partition_log = partition.log
                    epoch, end = partition_log.leader_epoch_cache.end_offset_for(
                        p.leader_epoch, partition_log.log_end_offset
                    )
                except Exception as exc:
                    code, _ = error_code_for(
                        exc, f"OffsetForLeaderEpoch of {topic.topic}-{p.partition}"
                    )
                partitions.append(make(m.EpochEndOffset, error_code=code,
                                       partition=p.partition, leader_epoch=epoch,
                                       end_offset=end))
            topics.append(make(m.OffsetForLeaderTopicResult, topic=topic.topic,
                               partitions=tuple(partitions)))
        return make(m.OffsetForLeaderEpochResponse, throttle_time=ZERO_THROTTLE,
                    topics=tuple(topics))

    registry.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, VERSIONS[0], VERSIONS[1],
                      offset_for_leader_epoch)
