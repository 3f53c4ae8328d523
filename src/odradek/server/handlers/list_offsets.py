"""ListOffsets (key 2), versions 0-9: earliest, latest, max timestamp, or by timestamp.

Follows Kafka's ``KafkaApis.handleListOffsetRequest`` / ``UnifiedLog.fetchOffsetByTimestamp``:
-2 (and -4, earliest local, v8+) is the log start offset, -5 (latest tiered, v9+) is -1
as nothing is tiered, -1 is the high watermark for ``isolation_level`` READ_UNCOMMITTED and
the last stable offset for READ_COMMITTED (v2+), -3 (v7+, KIP-734)
the offset of the largest timestamp; any other timestamp goes through the time index to
the first record whose timestamp is ≥ it, or -1 when there is none below the high
watermark (the last stable offset for READ_COMMITTED). A replica's or a debugging
tool's request (replica_id ≥ 0 or -2) is answered from the whole log instead, as
Kafka's. A leader just elected whose high watermark still lags the start of its epoch
answers a client OFFSET_NOT_AVAILABLE (KIP-207) instead of a stale end, which the client
retries. Only the leader
answers, at the request's ``current_leader_epoch`` (the replica manager's errors), and
the answer carries the partition's leader epoch.

Version 0 (clients of Kafka 0.9; KIP-896 removed it from Kafka 4.0) asks for up to
``max_num_offsets`` offsets "before" a time, answered as Kafka's
``legacyFetchOffsetsBefore``: the base offset of every segment (the first raised to the
log start offset) with the segment file's last modification time, then the log end with
the current time if the active segment holds anything; -1 starts from the newest entry,
-2 from the oldest, another time from the newest entry modified at or before it; the
offsets go newest first, and a client's answer never goes past the high watermark.

With an authorizer each topic needs Describe, else its partitions are
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import decode_request
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy_api import read_list_offsets_v0, write_list_offsets_v0
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    HandlerRegistry,
    RequestContext,
    bind,
)
from odradek.server.authorization import AclOperation, ResourceType, filter_refused
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import error_code_for
from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices
    from odradek.storage.log import PartitionLog

VERSIONS = (0, 9)
# KIP-405/KIP-1005 special timestamps (v8, v9). Without tiered storage every offset is
# local: -4 is the log start offset and -5 finds nothing (-1).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# The request's isolation_level (v2+): 0 READ_UNCOMMITTED, 1 READ_COMMITTED.
READ_COMMITTED = 1
# replica_id of a client's request; a follower sends its id, a debugging tool -2.
CONSUMER_REPLICA_ID = -1


def register_list_offsets(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.LIST_OFFSETS, VERSIONS[0], VERSIONS[1],
                      bind(list_offsets, services), decode=decode, error_response=error_response)


async def list_offsets(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    refused = filter_refused(services.authorizer, ctx, AclOperation.DESCRIBE,
                             ResourceType.TOPIC, (t.name for t in request.topics))
    if ctx.api_version == 0:
        return _v0(services, request, refused)
    m = response_module("list_offsets", ctx.api_version)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            partitions.append(_one(m, services, topic.name, p, ctx.api_version,
                                   request.replica_id == CONSUMER_REPLICA_ID,
                                   topic.name in refused,
                                   getattr(request, "isolation_level", 0) == READ_COMMITTED))
        topics.append(make(m.ListOffsetsTopicResponse, name=topic.name,
                           partitions=tuple(partitions)))
    return make(m.ListOffsetsResponse, throttle_time=ZERO_THROTTLE, topics=tuple(topics))


def decode(frame: bytes | bytearray | memoryview, offset: int, version: int) -> Any:
    if version == 0:
        return read_list_offsets_v0(frame, offset, version)
    return decode_request(ApiKey.LIST_OFFSETS, version, frame, offset)


def error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    if ctx.api_version > 0:
        return GENERIC_ERROR_RESPONSE
    value = int(code.value)
    return write_list_offsets_v0([
        (t.name, [(p.partition_index, value, ()) for p in t.partitions])
        for t in request.topics
    ])


def _v0(services: BrokerServices, request: Any, refused: set[str]) -> Any:
    client = request.replica_id == CONSUMER_REPLICA_ID
    topics = []
    for topic in request.topics:
        partitions: list[tuple[int, int, list[int]]] = []
        for p in topic.partitions:
            if topic.name in refused:
                partitions.append((p.partition_index,
                                   int(ErrorCode.topic_authorization_failed.value), []))
                continue
            try:
                partition = services.replica_manager.leader_partition(topic.name,
                                                                      p.partition_index)
                offsets = _offsets_before(partition.log, p.timestamp, p.max_num_offsets)
                if client:
                    hw = partition.high_watermark
                    if any(o > hw for o in offsets):
                        offsets = [hw] + [o for o in offsets if o <= hw]
                partitions.append((p.partition_index, 0, offsets))
            except Exception as exc:
                code, _ = error_code_for(exc, f"listing offsets of {topic.name}-"
                                              f"{p.partition_index}")
                partitions.append((p.partition_index, int(code.value), []))
        topics.append((topic.name, partitions))
    return write_list_offsets_v0(topics)


def _offsets_before(log: PartitionLog, timestamp: int, max_num: int) -> list[int]:
    """Kafka's ``UnifiedLog.legacyFetchOffsetsBefore``."""
    segments = log.segments
    start = log.log_start_offset
    table = [(max(s.base_offset, start), int(s.log_path.stat().st_mtime * 1000))
             for s in segments]
    if segments[-1].size > 0:
        table.append((log.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST_TIMESTAMP:
        index = len(table) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        index = 0
    else:
        index = len(table) - 1
        while index >= 0 and table[index][1] > timestamp:
            index -= 1
    picked = [table[i][0] for i in range(index, max(index - max(max_num, 0), -1), -1)]
    return sorted(picked, reverse=True)


def _one(
    m: Any, services: BrokerServices, topic: str, p: Any, version: int, client: bool,
    refused: bool = False, read_committed: bool = False,
) -> Any:
    def answer(code: ErrorCode, timestamp: int = -1, offset: int = -1) -> Any:
        return make(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                    error_code=code, timestamp=timestamp, offset=offset,
                    leader_epoch=leader_epoch if code == ErrorCode.none else -1,
                    old_style_offsets=())

    leader_epoch = -1
    if refused:
        return answer(ErrorCode.topic_authorization_failed)
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
    if not client:
        last_fetchable = partition_log.log_end_offset
    elif read_committed:
        last_fetchable = partition_log.last_stable_offset
    else:
        last_fetchable = partition.high_watermark
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
