"""Fetch (key 1), versions 4-17: read record batches, waiting for ``min_bytes``.

Follows Kafka's ``KafkaApis.handleFetchRequest`` / ``ReplicaManager.fetchMessages`` /
``DelayedFetch``:
- Each partition is read from its fetch offset up to ``partition_max_bytes`` and what is
  left of the response's ``max_bytes`` (capped by the broker's ``fetch.max.bytes``). The
  first partition that returns data returns at least one whole batch even if it is larger
  (KIP-74), so a consumer can never be stuck behind a big batch.
- Reads stop at the high watermark. A fetch offset outside [log start, log end] is
  OFFSET_OUT_OF_RANGE; an unknown partition UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID
  for v13+ requests by topic id).
- When fewer than ``min_bytes`` are available and ``max_wait_ms`` > 0 the request waits in
  the fetch purgatory; appends to its partitions complete it (events, not polling), or the
  timeout does, and the partitions are read again.
- Fetch sessions (KIP-227): see :mod:`odradek.server.fetch_session`.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.handlers._entities import ZERO_THROTTLE, make, nested, response_module
from odradek.server.handlers._errors import error_code_for
from odradek.storage import TopicPartition

if TYPE_CHECKING:
    from odradek.server.broker import Broker

VERSIONS = (4, 17)
ZERO_UUID = uuid.UUID(int=0)


class _Wanted:
    __slots__ = ("fetch_offset", "leader_epoch", "max_bytes", "name", "partition", "topic_id")

    def __init__(self, name: str | None, topic_id: uuid.UUID | None, p: Any) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partition: int = p.partition
        self.fetch_offset: int = p.fetch_offset
        self.max_bytes: int = p.partition_max_bytes
        self.leader_epoch: int = getattr(p, "current_leader_epoch", -1)


def register_fetch(registry: HandlerRegistry, broker: Broker) -> None:
    async def fetch(ctx: RequestContext, request: Any) -> Any:
        m = response_module("fetch", ctx.api_version)
        by_id = ctx.api_version >= 13
        session_id = getattr(request, "session_id", 0)
        session_epoch = getattr(request, "session_epoch", -1)
        if session_epoch > 0 or (session_id != 0 and session_epoch != -1):
            # We never hand out sessions (see module docstring), so none can be found.
            return make(m.FetchResponse, throttle_time=ZERO_THROTTLE,
                        error_code=ErrorCode.fetch_session_id_not_found, session_id=0,
                        responses=(), node_endpoints=())
        wanted: list[_Wanted] = []
        for topic in request.topics:
            if by_id:
                info = broker.metadata.by_id(topic.topic_id)
                name = info.name if info else None
                for p in topic.partitions:
                    wanted.append(_Wanted(name, topic.topic_id, p))
            else:
                for p in topic.partitions:
                    wanted.append(_Wanted(topic.topic, None, p))
        max_bytes = min(request.max_bytes, int(broker.config["fetch.max.bytes"]))
        results, total, errors = _read_all(m, broker, wanted, max_bytes, by_id)
        max_wait_ms = int(request.max_wait.total_seconds() * 1000)
        if total < request.min_bytes and max_wait_ms > 0 and not errors:
            keys = [TopicPartition(w.name, w.partition) for w in wanted if w.name]
            await broker.fetch_purgatory.wait(keys, request.min_bytes, total, max_wait_ms / 1000)
            results, total, errors = _read_all(m, broker, wanted, max_bytes, by_id)
        topics: dict[Any, list[Any]] = {}
        for w, data in zip(wanted, results, strict=True):
            topics.setdefault(w.topic_id if by_id else w.name, []).append(data)
        responses = tuple(
            make(m.FetchableTopicResponse, topic=key, topic_id=key, partitions=tuple(parts))
            for key, parts in topics.items()
        )
        return make(m.FetchResponse, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none,
                    session_id=0, responses=responses, node_endpoints=())

    registry.register(ApiKey.FETCH, VERSIONS[0], VERSIONS[1], fetch)


def _read_all(
    m: Any, broker: Broker, wanted: list[_Wanted], max_bytes: int, by_id: bool
) -> tuple[list[Any], int, int]:
    results = []
    remaining = max_bytes
    total = 0
    errors = 0
    min_one = True
    for w in wanted:
        data, size, failed = _read_one(m, broker, w, remaining, min_one, by_id)
        if size:
            min_one = False
        remaining = max(0, remaining - size)
        total += size
        errors += failed
        results.append(data)
    return results, total, errors


def _partition(m: Any, index: int, code: ErrorCode, hw: int = -1, lso: int = -1,
               start: int = -1, records: bytes = b"") -> Any:
    return make(
        m.PartitionData,
        partition_index=index,
        error_code=code,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=start,
        diverging_epoch=nested(m, "EpochEndOffset", epoch=-1, end_offset=-1),
        current_leader=nested(m, "LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1),
        snapshot_id=nested(m, "SnapshotId", end_offset=-1, epoch=-1),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=records,
    )


def _read_one(
    m: Any, broker: Broker, w: _Wanted, remaining: int, min_one: bool, by_id: bool
) -> tuple[Any, int, int]:
    if w.name is None:
        return _partition(m, w.partition, ErrorCode.unknown_topic_id), 0, 1
    partition_log = broker.get_log(w.name, w.partition)
    if partition_log is None:
        code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
        return _partition(m, w.partition, code), 0, 1
    if w.leader_epoch > 0:
        return _partition(m, w.partition, ErrorCode.unknown_leader_epoch), 0, 1
    limit = min(w.max_bytes, remaining)
    try:
        info = partition_log.read(w.fetch_offset, limit, partition_log.high_watermark,
                                  min_one_message=min_one)
        records = info.read()
    except Exception as exc:
        code, _ = error_code_for(exc, f"fetching {w.name}-{w.partition}")
        return _partition(
            m, w.partition, code, partition_log.high_watermark, partition_log.high_watermark,
            partition_log.log_start_offset,
        ), 0, 1
    data = _partition(m, w.partition, ErrorCode.none, info.high_watermark, info.high_watermark,
                      info.log_start_offset, records)
    return data, len(records), 0
