"""ListOffsets (key 2), versions 1-9: earliest, latest, max timestamp, or by timestamp.

Follows Kafka's ``KafkaApis.handleListOffsetRequest`` / ``UnifiedLog.fetchOffsetByTimestamp``:
-2 (and -4, earliest local, v8+) is the log start offset, -5 (latest tiered, v9+) is -1
as nothing is tiered, -1 is the high watermark (read_committed and read_uncommitted alike
without transactions), -3 (v7+, KIP-734)
the offset of the largest timestamp; any other timestamp goes through the time index to
the first record whose timestamp is ≥ it, or -1 when there is none below the high
watermark. A replica's or a debugging tool's request (replica_id ≥ 0 or -2) is answered
from the whole log instead, as Kafka's. A leader just elected whose high watermark
still lags the start of its epoch answers a client OFFSET_NOT_AVAILABLE (KIP-207)
instead of a stale end, which the client retries. Only the leader
answers, at the request's ``current_leader_epoch`` (the replica manager's errors), and
the answer carries the partition's leader epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import error_code_for
from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

VERSIONS = (1, 9)
# KIP-405/KIP-1005 special timestamps (v8, v9). Without tiered storage every offset is
# local: -4 is the log start offset and -5 finds nothing (-1).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# replica_id of a client's request; a follower sends its id, a debugging tool -2.
CONSUMER_REPLICA_ID = -1


def register_list_offsets(registry: HandlerRegistry, services: BrokerServices) -> None:
    async def list_offsets(ctx: RequestContext, request: Any) -> Any:
        m = response_module("list_offsets", ctx.api_version)
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                partitions.append(_one(m, services, topic.name, p, ctx.api_version,
                                       request.replica_id == CONSUMER_REPLICA_ID))
            topics.append(make(m.ListOffsetsTopicResponse, name=topic.name,
                               partitions=tuple(partitions)))
        return make(m.ListOffsetsResponse, throttle_time=ZERO_THROTTLE, topics=tuple(topics))

    registry.register(ApiKey.LIST_OFFSETS, VERSIONS[0], VERSIONS[1], list_offsets)


def _one(
    m: Any, services: BrokerServices, topic: str, p: Any, version: int, client: bool
) -> Any:
    def answer(code: ErrorCode, timestamp: int = -1, offset: int = -1) -> Any:
        return make(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                    error_code=code, timestamp=timestamp, offset=offset,
                    leader_epoch=leader_epoch if code == ErrorCode.none else -1,
                    old_style_offsets=())

    leader_epoch = -1
    try:
        partition = services.replica_manager.leader_partition(
            topic, p.partition_index, getattr(p, "current_leader_epoch", -1)
        )
    except Exception as exc:
        code, _ = error_code_for(exc, f"listing offsets of {topic}-{p.partition_index}")
        return answer(code)
    leader_epoch = partition.leader_epoch
    partition_log = partition.log
    ts = p.timestamp
    if (
        (ts == MAX_TIMESTAMP and version < 7)
        or (ts == EARLIEST_LOCAL_TIMESTAMP and version < 8)
        or (ts == LATEST_TIERED_TIMESTAMP and version < 9)
    ):
        return answer(ErrorCode.unsupported_version)
    if ts < LATEST_TIERED_TIMESTAMP:
        return answer(ErrorCode.invalid_request)
    # A client is answered from below the high watermark; a replica or a debugging tool
    # (replica_id -2) from below the log end offset (Kafka's isolation by replica id).
    # A new leader whose high watermark still lags the start of its epoch does not know
    # where the committed records end: OFFSET_NOT_AVAILABLE, retriable (KIP-207).
    lagging = client and partition.high_watermark_lags_epoch_start()
    last_fetchable = partition.high_watermark if client else partition_log.log_end_offset
    try:
        if ts == LATEST_TIMESTAMP:
            if lagging:
                return answer(ErrorCode.offset_not_available)
            return answer(ErrorCode.none, -1, last_fetchable)
        if ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            # No tiered storage: the earliest local offset is the log start offset.
            return answer(ErrorCode.none, -1, partition_log.log_start_offset)
        if ts == LATEST_TIERED_TIMESTAMP:
            return answer(ErrorCode.none, -1, -1)  # nothing is tiered (KIP-1005)
        found = partition_log.fetch_offset_by_timestamp(ts)
    except Exception as exc:
        code, _ = error_code_for(exc, f"listing offsets of {topic}-{p.partition_index}")
        return answer(code)
    if found is None or found.offset >= last_fetchable:
        # Nothing visible at or after that time (Kafka's Partition.fetchOffsetForTimestamp
        # filters the found offset by the last fetchable one).
        return answer(ErrorCode.offset_not_available if lagging else ErrorCode.none)
    return answer(ErrorCode.none, found.timestamp, found.offset)
