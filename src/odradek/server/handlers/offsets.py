"""Committed offsets: OffsetCommit (key 8) v0-10, OffsetFetch (9) v0-10, OffsetDelete (47) v0.

Follows Kafka's ``KafkaApis.handleOffsetCommitRequest`` / ``handleOffsetFetchRequest`` /
``handleOffsetDeleteRequest``: partitions of topics that do not exist get
UNKNOWN_TOPIC_OR_PARTITION (v10 names topics by id: an unknown id is UNKNOWN_TOPIC_ID);
the rest go to the group coordinator, which appends them to ``__consumer_offsets``
before the response is sent. Generation -1 with an empty member id is a commit from a
consumer without group management (or an admin tool), accepted while the group is Empty.

OffsetFetch: v1 has no group-level error field, so a group error is repeated on every
partition; v2-7 carry it at the top; v8+ ask for several groups in one request, each
answered with its own error. A partition without a committed offset is offset -1 with
no error. A null topic list (v2+) asks for every committed offset of the group.
OffsetCommit v9+ carries a consumer group member's epoch where the generation was: a
commit to a consumer group (KIP-848) from a member at another epoch is STALE_MEMBER_EPOCH,
from an unknown member UNKNOWN_MEMBER_ID, and a member committing below v9
UNSUPPORTED_VERSION, as Kafka's ``ConsumerGroup.validateOffsetCommit``; OffsetFetch v9+
names the member and epoch too, checked the same way unless both are absent (an admin
tool). ``require_stable`` (v7+) answers a partition with an offset committed by a transaction not
completed yet UNSTABLE_OFFSET_COMMIT (when topics are named; a null topic list leaves
pending offsets out). The
retention time of v2-4 sets an expire timestamp on the committed offsets (value v1).

With an authorizer: OffsetCommit needs Read on the group (else the whole request is
GROUP_AUTHORIZATION_FAILED) and Read on each topic (else its partitions are
TOPIC_AUTHORIZATION_FAILED); OffsetFetch Describe on the group (v8+: per group) and on each
topic, the topics not Described left out of an every-offset answer; OffsetDelete Delete on
the group and Read on each topic.

The versions of 0.8 clients (KIP-896 removed them from Kafka 4.0; bodies in
protocol/legacy_api.py): OffsetCommit v1 commits through the group coordinator as v2 does
(its per-partition ``commit_timestamp`` is not used: the broker stamps the commit, and
offsets expire after ``offsets.retention.minutes``); OffsetCommit v0 and OffsetFetch v0 keep
offsets "the old way", as Kafka in ZooKeeper mode did: the offset as decimal text in
``/consumers/<group>/offsets/<topic>/<partition>`` of the metadata store (ZooKeeper in
cluster mode), not in ``__consumer_offsets``, so v0 and later versions do not see each
other's commits, as with Kafka. A missing node is offset -1 with no error. The node is
written through :meth:`ClusterMetadata.set_consumer_offset` (set, else create, as Kafka's
``ZkUtils.updatePersistentPath``), so two commits racing to create it both succeed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group_metadata import CommittedOffset
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import decode_request
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy_api import (
    read_offset_commit_legacy,
    read_offset_fetch_v0,
    write_offset_commit_legacy,
    write_offset_fetch_v0,
)
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    HandlerRegistry,
    RequestContext,
    bind,
)
from odradek.server.authorization import AclOperation, ResourceType, allowed, require
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._group_log import group_log_replicated
from odradek.server.handlers._steps import Steps

if TYPE_CHECKING:
    from odradek.cluster.metadata import ClusterMetadata
    from odradek.server.services import BrokerServices

OFFSET_COMMIT_VERSIONS = (0, 10)
OFFSET_FETCH_VERSIONS = (0, 10)
OLD_COMMIT_MAX = 1  # OffsetCommit v0-1 and OffsetFetch v0: no kio schema
OFFSET_DELETE_VERSIONS = (0, 0)
TOPIC_IDS_FROM = 10  # OffsetCommit and OffsetFetch name topics by id from v10


def register_offsets(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.OFFSET_COMMIT, *OFFSET_COMMIT_VERSIONS,
                      bind(offset_commit, services), decode=commit_decode,
                      error_response=commit_error)
    registry.register(ApiKey.OFFSET_FETCH, *OFFSET_FETCH_VERSIONS,
                      bind(offset_fetch, services), decode=fetch_decode,
                      error_response=fetch_error)
    registry.register(ApiKey.OFFSET_DELETE, *OFFSET_DELETE_VERSIONS,
                      bind(offset_delete, services))


def _retention_ms(value: Any) -> int:
    """OffsetCommit v2-4 ``retention_time``: -1 means the broker's retention."""
    if value is None:
        return -1
    ms: float = value.total_seconds() * 1000
    return max(round(ms), -1)


def _resolve(metadata: ClusterMetadata, topic: Any, by_id: bool) -> tuple[str | None, ErrorCode]:
    """A request topic's name, or UNKNOWN_TOPIC_ID for an unknown id (v10+)."""
    if by_id:
        info = metadata.by_id(topic.topic_id)
        return (None, ErrorCode.unknown_topic_id) if info is None else (info.name,
                                                                        ErrorCode.none)
    return topic.name, ErrorCode.none


def _partition_exists(metadata: ClusterMetadata, name: str, partition: int) -> bool:
    info = metadata.get(name)
    return info is not None and partition in info.partitions


async def _replicated(
    services: BrokerServices, group_id: str, results: dict[tuple[str, int], ErrorCode],
) -> None:
    """Offsets are committed with acks=-1: a commit the ISR did not take in time is
    REQUEST_TIMED_OUT (the client retries), NOT_COORDINATOR if leadership was lost."""
    failed = await group_log_replicated(services, group_id)
    if failed != ErrorCode.none:
        for key, code in results.items():
            if code == ErrorCode.none:
                results[key] = failed


# -- OffsetCommit ----------------------------------------------------------------------
async def offset_commit(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version <= OLD_COMMIT_MAX:
        return await _offset_commit_v0_1(services, ctx, request)
    authorizer = services.authorizer
    require(authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    m = response_module("offset_commit", ctx.api_version)
    by_id = ctx.api_version >= TOPIC_IDS_FROM
    metadata = services.metadata
    wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    early: dict[tuple[int, int], ErrorCode] = {}  # (topic index, partition) -> error
    names: list[str | None] = []
    steps = Steps()
    for ti, topic in enumerate(request.topics):
        name, error = _resolve(metadata, topic, by_id)
        if error == ErrorCode.none and name is not None and not allowed(
                authorizer, ctx, AclOperation.READ, ResourceType.TOPIC, name):
            error = ErrorCode.topic_authorization_failed
        names.append(name)
        for p in topic.partitions:
            await steps.tick()
            if error != ErrorCode.none:
                early[(ti, p.partition_index)] = error
            elif name is None or not _partition_exists(metadata, name, p.partition_index):
                early[(ti, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                wanted[(name, p.partition_index)] = (
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                )
    results = services.group_coordinator.commit_offsets(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.generation_id_or_member_epoch, wanted,
        _retention_ms(getattr(request, "retention_time", None)), ctx.api_version,
    ) if wanted else {}
    if any(code == ErrorCode.none for code in results.values()):
        await _replicated(services, request.group_id, results)
    topics = []
    for ti, topic in enumerate(request.topics):
        partitions = []
        await steps.tick(len(topic.partitions))
        for p in topic.partitions:
            name = names[ti]
            code = early.get((ti, p.partition_index))
            if code is None:
                assert name is not None
                code = results.get((name, p.partition_index), ErrorCode.none)
            partitions.append(make(m.OffsetCommitResponsePartition,
                                   partition_index=p.partition_index, error_code=code))
        topics.append(make(m.OffsetCommitResponseTopic, name=getattr(topic, "name", None),
                           topic_id=getattr(topic, "topic_id", None),
                           partitions=tuple(partitions)))
    return make(m.OffsetCommitResponse, throttle_time=ZERO_THROTTLE, topics=tuple(topics))


# -- OffsetFetch -----------------------------------------------------------------------
async def offset_fetch(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if version == 0:
        require(services.authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                request.group_id)
        return await _offset_fetch_v0(services, ctx, request)
    m = response_module("offset_fetch", version)
    require_stable = bool(getattr(request, "require_stable", False))
    authorizer = services.authorizer
    if version >= 8:
        groups = []
        steps = Steps()
        for g in request.groups:
            await steps.tick(1 + sum(len(t.partition_indexes) for t in g.topics or ()))
            if not allowed(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                           g.group_id):
                groups.append(make(m.OffsetFetchResponseGroup, group_id=g.group_id,
                                   topics=(), error_code=ErrorCode.group_authorization_failed))
                continue
            error, topics = _fetch_group(services, ctx, m, version, g.group_id, g.topics,
                                         require_stable, getattr(g, "member_id", None),
                                         getattr(g, "member_epoch", -1))
            groups.append(make(m.OffsetFetchResponseGroup, group_id=g.group_id,
                               topics=topics, error_code=error))
        return make(m.OffsetFetchResponse, throttle_time=ZERO_THROTTLE, groups=tuple(groups))
    require(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id)
    error, topics = _fetch_group(services, ctx, m, version, request.group_id, request.topics,
                                 require_stable)
    return make(m.OffsetFetchResponse, throttle_time=ZERO_THROTTLE, topics=topics,
                error_code=error)


def _classes(m: Any, version: int) -> tuple[Any, Any]:
    """OffsetFetch's (topic, partition) response classes for ``version`` (v8+ renamed them)."""
    if version >= 8:
        return m.OffsetFetchResponseTopics, m.OffsetFetchResponsePartitions
    return m.OffsetFetchResponseTopic, m.OffsetFetchResponsePartition


def _answer(part_cls: Any, index: int, committed: CommittedOffset | None,
            code: ErrorCode) -> Any:
    return make(
        part_cls, partition_index=index,
        committed_offset=committed.offset if committed else -1,
        committed_leader_epoch=committed.leader_epoch if committed else -1,
        metadata=committed.metadata if committed else "", error_code=code,
    )


def _fetch_group(services: BrokerServices, ctx: RequestContext, m: Any, version: int,
                 group_id: str, topics: Any, require_stable: bool,
                 member_id: str | None = None,
                 member_epoch: int = -1) -> tuple[ErrorCode, tuple[Any, ...]]:
    """One group's committed offsets: those of ``topics``, or all of them (None). v9+
    name the member asking (a consumer group's member is checked)."""
    authorizer = services.authorizer

    def may_describe(name: str) -> bool:
        return allowed(authorizer, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    by_id = version >= TOPIC_IDS_FROM
    topic_cls, part_cls = _classes(m, version)
    requested: list[tuple[Any, str | None, ErrorCode]] = []
    wanted: list[tuple[str, int]] | None = None
    if topics is not None:
        wanted = []
        for topic in topics:
            name, error = _resolve(services.metadata, topic, by_id)
            if name is not None and authorizer is not None and not may_describe(name):
                name, error = None, ErrorCode.topic_authorization_failed
            requested.append((topic, name, error))
            if name is not None:
                wanted.extend((name, p) for p in topic.partition_indexes)
    error, offsets = services.group_coordinator.fetch_offsets(
        group_id, wanted, require_stable, member_id, member_epoch)
    unstable = (services.group_coordinator.unstable_offsets(group_id)
                if require_stable and error == ErrorCode.none else set())
    if error != ErrorCode.none and version >= 2:
        return error, ()
    if topics is None:
        if authorizer is not None:
            offsets = {k: v for k, v in offsets.items() if may_describe(k[0])}
        return ErrorCode.none, _every_offset(services.metadata, topic_cls, part_cls, by_id,
                                             offsets)
    out = []
    for topic, name, topic_error in requested:
        parts = []
        for index in topic.partition_indexes:
            code = topic_error if topic_error != ErrorCode.none else error
            committed = offsets.get((name, index)) if name is not None else None
            if code == ErrorCode.none and (name, index) in unstable:
                code, committed = ErrorCode.unstable_offset_commit, None
            parts.append(_answer(part_cls, index, committed, code))
        out.append(make(topic_cls, name=getattr(topic, "name", None),
                        topic_id=getattr(topic, "topic_id", None), partitions=tuple(parts)))
    return error, tuple(out)


def _every_offset(
    metadata: ClusterMetadata, topic_cls: Any, part_cls: Any, by_id: bool,
    offsets: dict[tuple[str, int], CommittedOffset | None],
) -> tuple[Any, ...]:
    """A null topic list (v2+): every committed offset of the group, by topic (v10+ leave
    out topics that no longer exist: they have no id to name them by)."""
    by_topic: dict[str, list[Any]] = {}
    for (name, index), committed in offsets.items():
        by_topic.setdefault(name, []).append(_answer(part_cls, index, committed, ErrorCode.none))
    out = []
    for name, parts in by_topic.items():
        info = metadata.get(name) if by_id else None
        topic_id = None if info is None else info.topic_id
        if by_id and topic_id is None:
            continue
        out.append(make(topic_cls, name=name, topic_id=topic_id, partitions=tuple(parts)))
    return tuple(out)


# -- OffsetDelete ----------------------------------------------------------------------
async def offset_delete(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    authorizer = services.authorizer
    require(authorizer, ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id)
    m = response_module("offset_delete", ctx.api_version)
    refused = {t.name for t in request.topics if not allowed(
        authorizer, ctx, AclOperation.READ, ResourceType.TOPIC, t.name)}
    wanted = [
        (t.name, p.partition_index) for t in request.topics for p in t.partitions
        if t.name not in refused
        and _partition_exists(services.metadata, t.name, p.partition_index)
    ]
    error, results = services.group_coordinator.delete_offsets(request.group_id, wanted)
    results.update({(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                    for t in request.topics if t.name in refused for p in t.partitions})
    topics = []
    if error == ErrorCode.none:
        for t in request.topics:
            partitions = tuple(
                make(m.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                     error_code=results.get((t.name, p.partition_index),
                                            ErrorCode.unknown_topic_or_partition))
                for p in t.partitions
            )
            topics.append(make(m.OffsetDeleteResponseTopic, name=t.name,
                               partitions=partitions))
    return make(m.OffsetDeleteResponse, error_code=error, throttle_time=ZERO_THROTTLE,
                topics=tuple(topics))


# -- the versions of 0.8 clients -------------------------------------------------------
async def _offset_commit_v0_1(
    services: BrokerServices, ctx: RequestContext, request: Any,
) -> Any:
    """v1 commits through the group coordinator; v0 into the metadata store."""
    require(services.authorizer, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    metadata = services.metadata
    max_metadata = int(services.config["offset.metadata.max.bytes"])
    results: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if not allowed(services.authorizer, ctx, AclOperation.READ, ResourceType.TOPIC,
                           topic.name):
                results[key] = ErrorCode.topic_authorization_failed
            elif not _partition_exists(metadata, *key):
                results[key] = ErrorCode.unknown_topic_or_partition
            elif p.committed_metadata is not None and (
                len(p.committed_metadata.encode()) > max_metadata
            ):
                results[key] = ErrorCode.offset_metadata_too_large
            else:
                wanted[key] = (p.committed_offset, -1, p.committed_metadata)
    if wanted and ctx.api_version == 1:
        results.update(services.group_coordinator.commit_offsets(
            request.group_id, request.member_id, None, request.generation_id, wanted, -1))
        if any(code == ErrorCode.none for code in results.values()):
            await _replicated(services, request.group_id, results)
    elif wanted:
        def write() -> None:
            for (name, index), (committed, _, _) in wanted.items():
                metadata.set_consumer_offset(request.group_id, name, index, committed)
                results[(name, index)] = ErrorCode.none
        await asyncio.to_thread(write)
    return write_offset_commit_legacy([
        (t.name, [(p.partition_index,
                   int(results.get((t.name, p.partition_index), ErrorCode.none).value))
                  for p in t.partitions])
        for t in request.topics
    ])


async def _offset_fetch_v0(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    """The offsets OffsetCommit v0 stored in the metadata store."""
    metadata = services.metadata
    refused = {t.name for t in request.topics if not allowed(
        services.authorizer, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)}

    def read() -> list[tuple[str, list[tuple[int, int, str | None, int]]]]:
        out: list[tuple[str, list[tuple[int, int, str | None, int]]]] = []
        for t in request.topics:
            parts: list[tuple[int, int, str | None, int]] = []
            for index in t.partition_indexes:
                if t.name in refused:
                    parts.append((index, -1, "",
                                  int(ErrorCode.topic_authorization_failed.value)))
                    continue
                if not _partition_exists(metadata, t.name, index):
                    parts.append((index, -1, "",
                                  int(ErrorCode.unknown_topic_or_partition.value)))
                    continue
                committed = metadata.consumer_offset(request.group_id, t.name, index)
                parts.append((index, committed, "", 0))
            out.append((t.name, parts))
        return out

    return write_offset_fetch_v0(await asyncio.to_thread(metadata.off_loop(read)))


def commit_decode(frame: bytes | bytearray | memoryview, offset: int, version: int) -> Any:
    if version <= OLD_COMMIT_MAX:
        return read_offset_commit_legacy(frame, offset, version)
    return decode_request(ApiKey.OFFSET_COMMIT, version, frame, offset)


def fetch_decode(frame: bytes | bytearray | memoryview, offset: int, version: int) -> Any:
    if version == 0:
        return read_offset_fetch_v0(frame, offset, version)
    return decode_request(ApiKey.OFFSET_FETCH, version, frame, offset)


def commit_error(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    if ctx.api_version > OLD_COMMIT_MAX:
        return GENERIC_ERROR_RESPONSE
    value = int(code.value)
    return write_offset_commit_legacy(
        [(t.name, [(p.partition_index, value) for p in t.partitions])
         for t in request.topics])


def fetch_error(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    if ctx.api_version > 0:
        return GENERIC_ERROR_RESPONSE
    value = int(code.value)
    return write_offset_fetch_v0(
        [(t.name, [(i, -1, "", value) for i in t.partition_indexes])
         for t in request.topics])
