"""DeleteRecords (key 21, v0-2): move partitions' log start offsets forward.

Per partition, as Kafka's ``ReplicaManager.deleteRecords`` on a single leader: offset -1
means "up to the high watermark"; any other negative offset, or one past the high
watermark, is OFFSET_OUT_OF_RANGE; an unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION; a known partition without a local log is
NOT_LEADER_OR_FOLLOWER; a topic whose cleanup.policy lacks ``delete`` (compact only) is
POLICY_VIOLATION. The answer's ``low_watermark`` is the new log start offset (never moved
backwards: deleting below it is a no-op that reports it). Records below the start become
unreadable at once (a fetch there is OFFSET_OUT_OF_RANGE); whole segments below it are
removed by the next retention pass (``LogManager.cleanup_logs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, ResourceType, filter_refused
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import error_code_for

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (0, 2)
HIGH_WATERMARK = -1


def _delete(
    services: BrokerServices, topic: str, partition: int, offset: int
) -> tuple[ErrorCode, int]:
    try:
        partition_log = services.replica_manager.leader_partition(topic, partition).log
    except Exception as exc:
        code, _ = error_code_for(exc, f"deleting records of {topic}-{partition}")
        return code, -1
    if not partition_log.config.delete:
        return ErrorCode.policy_violation, -1
    target = partition_log.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > partition_log.high_watermark:
        return ErrorCode.offset_out_of_range, -1
    try:
        partition_log.maybe_increment_log_start_offset(target)
    except Exception as exc:
        code, _ = error_code_for(exc, f"deleting records of {topic}-{partition}")
        return code, -1
    return ErrorCode.none, partition_log.log_start_offset


def register_delete_records(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.DELETE_RECORDS, VERSIONS[0], VERSIONS[1],
                      bind(delete_records, services))


async def delete_records(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("delete_records", ctx.api_version)
    refused = filter_refused(services.authorizer, ctx, AclOperation.DELETE,
                             ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name in refused:
                code, low = ErrorCode.topic_authorization_failed, -1
            else:
                code, low = _delete(services, topic.name, p.partition_index, p.offset)
            partitions.append(make(m.DeleteRecordsPartitionResult,
                                   partition_index=p.partition_index, low_watermark=low,
                                   error_code=code))
        topics.append(make(m.DeleteRecordsTopicResult, name=topic.name,
                           partitions=tuple(partitions)))
    return make(m.DeleteRecordsResponse, throttle_time=ZERO_THROTTLE, topics=tuple(topics))


