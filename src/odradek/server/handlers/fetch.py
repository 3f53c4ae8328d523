"""Fetch (key 1), versions 0-17: read record batches, waiting for ``min_bytes``; zero copy.

Follows Kafka's ``KafkaApis.handleFetchRequest`` / ``ReplicaManager.fetchMessages`` /
``DelayedFetch``:
- Fetch sessions (KIP-227) first: :mod:`odradek.server.fetch_session` turns the request's
  ``session_id`` / ``session_epoch`` / ``forgotten_topics_data`` into the list of
  partitions to read (all of a session's partitions for an incremental fetch) or a
  top-level session error.
- Each partition is read from its fetch offset up to ``partition_max_bytes`` and what is
  left of the response's ``max_bytes``, capped by the broker's ``fetch.max.bytes``; left
  at its default, that cap is 8 MiB or :data:`ANSWER_BYTES_PER_PARTITION` for each
  partition the request names, whichever is larger, up to :data:`DEFAULT_ANSWER_MAX_BYTES`
  (see :func:`answer_cap`). The first partition that returns data returns at least one
  whole batch even if it is larger (KIP-74), so a consumer can never be stuck behind a
  big batch. Once the answer is full, the partitions left are answered empty without
  locating their offset in a segment (``PartitionLog.read``).
- Past the first partition with data, a partition whose first batch does not fit in
  what is left is sent empty rather than as a partial batch (Kafka's
  ``firstEntryIncomplete`` rule for v3+: clients cannot make progress on a partial first
  batch; kafka-python raises). Partial batches *after* complete ones are sent, as by
  Kafka, and clients drop them.
- Partitions are reached through the replica manager, which answers for leadership and
  the request's ``current_leader_epoch`` (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
  UNKNOWN_LEADER_EPOCH, LEADER_NOT_AVAILABLE while a log is being created). Consumers'
  reads stop at the high watermark (``isolation_level`` READ_COMMITTED, v4+: at the last
  stable offset, with the aborted transactions the answer may hold records of, from the
  segments' ``.txnindex``), a follower's (replica id >= 0) at the log end. Every answer
  reports the last stable offset beside the high watermark. A
  fetch offset outside [log start, log end] is OFFSET_OUT_OF_RANGE; an unknown partition
  UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID for v13+ requests by topic id).
- When fewer than ``min_bytes`` are available and ``max_wait_ms`` > 0 the request waits in
  the fetch purgatory; appends to its partitions complete it (events, not polling), or the
  timeout does, and the partitions are read again. A read_committed fetch counts the
  bytes only once its partition's last stable offset moves (Kafka's DelayedFetch reads
  to the LSO): appends into an open transaction do not wake it (it would answer empty
  and be sent again at once, a consumer spinning beside the transaction).
- The response is encoded by :mod:`odradek.protocol.fetch_writer` into a ``Send``: record
  data stays in the segment files and the network layer ``sendfile`` s it (zero copy;
  read+write on TLS).

With an authorizer, a consumer's fetch needs Read on each topic and a follower's
(replica id >= 0) ClusterAction on the cluster; the partitions refused are
TOPIC_AUTHORIZATION_FAILED, checked before their existence.

Client quotas (consumers only; followers have the replication throttles): a fetch asks for
no more than the client's ``consumer_byte_rate`` allows in one quota window; the bytes it
would send are recorded, and over the quota the answer is empty, carries the throttle
time, and the connection is muted for it (KIP-219), the records being read again
afterwards (:mod:`odradek.server.client_quotas`).
(Versions 0-3 below are not subject to client quotas yet: their answers have no
throttle field Odradek fills.)

Versions 0-3 (clients of Kafka 0.9-0.10; KIP-896 removed them from Kafka 4.0) read
message sets of magic 0 (v0-1) or 1 (v2-3), so their answers are down-converted, as
Kafka does with ``message.downconversion.enable`` (records/legacy.py: control batches and
record headers dropped, zstd refused with UNSUPPORTED_COMPRESSION_TYPE). That costs CPU
per record, so it is bounded: at most :data:`DOWN_CONVERSION_MAX_BYTES` of log are
converted per response (the client fetches again for the rest), and the conversion runs
on one dedicated thread, not on the event loop: the loop keeps serving other connections
meanwhile (the thread gives the GIL back every switch interval), and however many old
consumers fetch at once, down-conversion uses one core at most. v0-2 have no response
limit and a hard partition limit (no KIP-74): a first message larger than
``partition_max_bytes`` is sent cut, as Kafka does, and the old client reports it.

A segment left by a Kafka before 0.11 (message formats v0/v1 in a log dir taken over from
it) is sent to v4+ fetchers up-converted to RecordBatch v2 (one batch per old entry), not
zero copy: only regions of such segments pay it.

File descriptor lifetime: a ``FileRegion`` is written after the handler returns, maybe
much later (a slow client). Segments removed by retention are closed only after
``file.delete.delay.ms`` (60 s by default), but a deleted *topic* closes its segments at
once, and a closed fd number can be reused by the next ``open`` — the response would
then silently carry another file's bytes. So each region gets its own ``os.dup`` of the
segment fd, owned by the response (:class:`_OwningSend`) and closed when the response
is dropped after being written. A dup costs one syscall per partition with data, and
also keeps ``sendfile`` (which moves the file offset) away from the segment's own fd.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import functools
import logging
import os
import time
import uuid
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from odradek.clock import monotonic_ms
from odradek.cluster.errors import UnknownTopicOrPartitionError
from odradek.cluster.replica_manager import FollowerKey
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import decode_request
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch_writer import FetchPartition, FetchTopic, write_fetch_response
from odradek.protocol.legacy_api import (
    FETCH_LEGACY_MAX,
    LegacyFetchAnswer,
    fetch_magic,
    read_fetch_request,
)
from odradek.protocol.legacy_api import write_fetch_response as write_legacy_response
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    HandlerRegistry,
    RequestContext,
    bind,
)
from odradek.protocol.send import FileRegion, Send
from odradek.records.batch import InvalidRecordError
from odradek.records.legacy import down_convert, up_convert
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.server.client_quotas import principal_user
from odradek.server.fetch_session import CachedPartition, ContextKind, FetchContext, PartitionKey
from odradek.server.handlers._errors import error_code_for
from odradek.storage import TopicPartition
from odradek.storage.errors import StorageError
from odradek.storage.log import FetchDataInfo

if TYPE_CHECKING:
    from odradek.cluster.metadata import ClusterMetadata
    from odradek.cluster.replica_manager import ReplicaManager
    from odradek.server.broker_stats import BrokerTopicStats
    from odradek.server.config import BrokerConfig
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

VERSIONS = (0, 17)
ZERO_UUID = uuid.UUID(int=0)
# The request's isolation_level (v4+): 0 READ_UNCOMMITTED, 1 READ_COMMITTED.
READ_COMMITTED = 1

# Log bytes down-converted per Fetch v0-3 response at most (at least one batch): the
# conversion walks records in Python, so one old consumer's request must stay small.
DOWN_CONVERSION_MAX_BYTES = 4 * 1024 * 1024
# One thread for every down-conversion of the broker (see the module docstring).
_DOWN_CONVERTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="down-conversion")

# The answer's cap while ``fetch.max.bytes`` is left at its default (8 MiB): a request
# naming many partitions may get this much a partition instead. Every answer pays a
# step per partition named (a full fetch answers every one of them), so with 1,000
# partitions an 8 MiB answer spent more of the broker's CPU on those steps than on the
# bytes, and with 100 a seventh more than fadb458's 55 MiB answers (256 KiB a partition
# from 33 partitions on, 30 MiB from 120); the bound stays under glibc's largest mmap
# threshold (32 MiB), so the client's buffer for the answer still comes from its heap
# (docs/architecture.md, "Fetch response size").
ANSWER_BYTES_PER_PARTITION = 256 * 1024
DEFAULT_ANSWER_MAX_BYTES = 30 * 1024 * 1024


class _OwningSend(Send):
    """A :class:`Send` that closes the (dup'ed) fds of its file regions when dropped."""

    __slots__ = ("_owned",)
    _owned: list[int]

    def __init__(self, send: Send, owned: list[int]) -> None:
        # ``send``'s fields taken over as they are (its size is not summed again)
        object.__setattr__(self, "parts", send.parts)
        object.__setattr__(self, "size", send.size)
        object.__setattr__(self, "has_file_regions", send.has_file_regions)
        object.__setattr__(self, "error_code", send.error_code)
        object.__setattr__(self, "_owned", owned)

    def __del__(self) -> None:
        # Not contextlib.suppress around each close: this runs for every region sent.
        for fd in self._owned:
            try:
                os.close(fd)
            except OSError:
                continue  # closed already: the others still close
        self._owned.clear()


def register_fetch(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.FETCH, VERSIONS[0], VERSIONS[1], bind(fetch, services),
                      decode=decode, error_response=error_response)


async def fetch(services: BrokerServices, ctx: RequestContext, request: Any) -> Send:
    """Read the session's partitions, wait in the purgatory for ``min_bytes`` if asked,
    and answer (see the module docstring)."""
    version = ctx.api_version
    by_id = version >= 13
    context = _session_context(services, request, by_id)
    if context.kind is ContextKind.ERROR:
        return write_fetch_response(version, [], error_code=context.error)
    parts = context.partitions
    cap = int(services.config["fetch.max.bytes"])
    if len(parts) * ANSWER_BYTES_PER_PARTITION > cap:  # many partitions: maybe more
        cap = answer_cap(services.config, len(parts))
    max_bytes = min(request.max_bytes, cap)
    replica_id = _replica_id(request)
    follower = replica_id >= 0
    quota = services.client_quotas.fetch
    quota_applies = quota.active and not follower
    user = principal_user(ctx.principal) if quota_applies else ""
    if quota_applies:
        max_bytes = min(max_bytes, max(int(quota.max_value_in_window(ctx.client_id, user)), 1))
    replica_manager = services.replica_manager
    refused = None if services.authorizer is None else _refused(services, ctx, parts, follower)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED and not follower
    infos, total, errors = _read_all(replica_manager, parts, max_bytes, by_id, replica_id,
                                     refused, read_committed)
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    if total < request.min_bytes and max_wait_ms > 0 and not errors and parts:
        # Followers wait for appends; consumers for the high watermark to move.
        keys: list[Hashable] = [
            FollowerKey(TopicPartition(cp.topic, cp.partition)) if follower
            else TopicPartition(cp.topic, cp.partition)
            for cp in parts if cp.topic
        ]
        if read_committed:  # woken by the last stable offset, not the high watermark
            await services.fetch_purgatory.wait_stable(
                keys, request.min_bytes, total, max_wait_ms / 1000,
                functools.partial(_last_stable_offset, replica_manager),
                functools.partial(_unstable_bytes, replica_manager))
        else:
            await services.fetch_purgatory.wait(keys, request.min_bytes, total,
                                                max_wait_ms / 1000)
        infos, total, errors = _read_all(replica_manager, parts, max_bytes, by_id, replica_id,
                                         refused, read_committed)

    if version <= FETCH_LEGACY_MAX:  # sessionless: no session fields below v7
        return await _legacy_response(version, parts, infos, max_bytes)

    incremental = context.kind is ContextKind.INCREMENTAL
    if quota_applies and total:
        throttle_ms = quota.record(ctx.client_id, total, user=user)
        if throttle_ms:
            # Kafka's getThrottledResponse: no data, the session unchanged (a full fetch
            # creates none), the bytes not counted.
            quota.unrecord(ctx.client_id, total, user=user)
            if ctx.channel is not None:
                ctx.channel.throttle(throttle_ms)
            kept = context.session.id if incremental and context.session else 0
            return write_fetch_response(version, [], throttle_time_ms=throttle_ms,
                                        session_id=kept)
    session_id = 0
    if context.kind is ContextKind.FULL and parts:
        session = services.fetch_sessions.maybe_create(follower, by_id, parts, monotonic_ms())
        if session is not None:
            session_id = session.id
    elif incremental:
        assert context.session is not None
        session_id = context.session.id
    send = _response(version, context, parts, infos, by_id, session_id)
    if services.topic_stats is not None:
        _count(services.topic_stats, parts, infos, follower)
    return send


def answer_cap(config: BrokerConfig, partitions: int) -> int:
    """The broker's cap on an answer naming ``partitions`` partitions: ``fetch.max.bytes``
    when set; left at its default (8 MiB), :data:`ANSWER_BYTES_PER_PARTITION` a partition
    if that is more, up to :data:`DEFAULT_ANSWER_MAX_BYTES`."""
    cap = int(config["fetch.max.bytes"])
    if "fetch.max.bytes" in config.raw:
        return cap
    return min(max(cap, partitions * ANSWER_BYTES_PER_PARTITION), DEFAULT_ANSWER_MAX_BYTES)


def _refused(services: BrokerServices, ctx: RequestContext, parts: list[CachedPartition],
             follower: bool) -> frozenset[str] | None:
    """The topics of ``parts`` the caller may not fetch (None: none)."""
    authorizer = services.authorizer
    assert authorizer is not None
    names = {cp.topic for cp in parts if cp.topic is not None}
    principal, host = ctx.principal, ctx.peer[0]
    if follower:
        if authorizer.authorize(principal, host, AclOperation.CLUSTER_ACTION,
                                ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return frozenset(names)
    refused = frozenset(n for n in names if not authorizer.authorize(
        principal, host, AclOperation.READ, ResourceType.TOPIC, n))
    return refused or None


def _session_context(services: BrokerServices, request: Any, by_id: bool) -> FetchContext:
    """The request's partitions through its fetch session (KIP-227): all of the session's
    for an incremental fetch, their topic names looked up again (v13+ name topics by id,
    and a session outlives requests)."""
    names: dict[uuid.UUID, str | None] = {}
    metadata = services.metadata
    wanted: list[CachedPartition] = []
    for topic in request.topics:
        tid = _topic_id(topic.topic_id) if by_id else None
        name = _name_of(metadata, names, tid) if tid is not None else topic.topic
        for p in topic.partitions:
            wanted.append(CachedPartition(
                name, tid, p.partition, p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1),
            ))
    forgotten: list[PartitionKey] = []
    for topic in getattr(request, "forgotten_topics_data", ()):
        key: str | uuid.UUID = _topic_id(topic.topic_id) if by_id else topic.topic
        forgotten.extend((key, p) for p in topic.partitions)
    context = services.fetch_sessions.new_context(
        getattr(request, "session_id", 0), getattr(request, "session_epoch", -1),
        wanted, forgotten, by_id, monotonic_ms(),
    )
    if by_id and context.kind is ContextKind.INCREMENTAL:
        for cp in context.partitions:
            assert cp.topic_id is not None
            cp.topic = _name_of(metadata, names, cp.topic_id)
    return context


def _name_of(
    metadata: ClusterMetadata, names: dict[uuid.UUID, str | None], topic_id: uuid.UUID,
) -> str | None:
    """The name of topic ``topic_id`` (None: unknown), looked up once per request."""
    if topic_id not in names:
        info = metadata.by_id(topic_id)
        names[topic_id] = info.name if info else None
    return names[topic_id]


def _response(
    version: int, context: FetchContext, parts: list[CachedPartition],
    infos: list[FetchPartition | FetchDataInfo], by_id: bool, session_id: int,
) -> Send:
    """The v4+ answer: each partition's region on its own fd (an incremental fetch sends
    only the partitions that changed, and moves those with data to the session's end)."""
    incremental = context.kind is ContextKind.INCREMENTAL
    topics: dict[str | uuid.UUID | None, FetchTopic] = {}
    owned: list[int] = []
    rotate: list[CachedPartition] = []
    try:
        for cp, info in zip(parts, infos, strict=True):
            data = info if isinstance(info, FetchPartition) else _region(cp, info, owned)
            must = cp.maybe_update(data.records_size, data.high_watermark,
                                   data.log_start_offset, data.error_code)
            if incremental:
                if not must:
                    continue
                if data.records_size:
                    rotate.append(cp)
            group = cp.topic_id if by_id else cp.topic
            entry = topics.get(group)
            if entry is None:
                entry = topics[group] = FetchTopic(cp.topic, cp.topic_id, [])
            entry.partitions.append(data)
        if context.session is not None:
            for cp in rotate:
                context.session.move_to_end(cp)
        return _OwningSend(
            write_fetch_response(version, list(topics.values()), session_id=session_id), owned)
    except BaseException:
        for fd in owned:
            os.close(fd)
        raise


def decode(frame: bytes | bytearray | memoryview, offset: int, version: int) -> Any:
    """v0-3 by the old-version reader, the rest by kio."""
    if version <= FETCH_LEGACY_MAX:
        return read_fetch_request(frame, offset, version)
    return decode_request(ApiKey.FETCH, version, frame, offset)


def error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    """v0-3 answer every partition with ``code`` in their own layout."""
    if ctx.api_version > FETCH_LEGACY_MAX:
        return GENERIC_ERROR_RESPONSE
    value = int(code.value)
    return write_legacy_response(ctx.api_version, [
        (t.topic, [LegacyFetchAnswer(p.partition, value, -1, b"") for p in t.partitions])
        for t in request.topics
    ])


async def _legacy_response(
    version: int, parts: list[CachedPartition], infos: list[FetchPartition | FetchDataInfo],
    max_bytes: int,
) -> Send:
    """Fetch v0-3: each partition's v2 batches down-converted to the client's format."""
    magic = fetch_magic(version)
    loop = asyncio.get_running_loop()
    budget = min(max_bytes, DOWN_CONVERSION_MAX_BYTES)
    first = True
    topics: dict[str, list[LegacyFetchAnswer]] = {}
    for cp, info in zip(parts, infos, strict=True):
        if isinstance(info, FetchPartition):
            code = info.error_code
            answer = LegacyFetchAnswer(
                cp.partition, int(code.value) if isinstance(code, ErrorCode) else int(code),
                info.high_watermark, b"")
        else:
            data = b""
            error = 0
            if info.size and budget > 0:
                limit = min(cp.max_bytes, budget)
                raw = _read_head(info, limit)
                try:
                    converted = await loop.run_in_executor(_DOWN_CONVERTER, functools.partial(
                        down_convert, raw, magic, cp.fetch_offset, limit,
                        min_one=first and version >= 3))
                    data = converted.data
                    if not data and first and raw:
                        # v0-2 hard limit: the first message does not fit; sent cut
                        whole = await loop.run_in_executor(_DOWN_CONVERTER, functools.partial(
                            down_convert, raw, magic, cp.fetch_offset, limit, min_one=True))
                        data = whole.data[:limit]
                except InvalidRecordError as exc:
                    error = int((ErrorCode.unsupported_compression_type if exc.reason == "codec"
                                 else ErrorCode.corrupt_message).value)
                    data = b""
                budget -= len(data)
                first = first and not data
            answer = LegacyFetchAnswer(cp.partition, error, info.high_watermark, data)
        topics.setdefault(cp.topic or "", []).append(answer)
    return write_legacy_response(version, list(topics.items()))


def _read_head(info: FetchDataInfo, limit: int) -> bytes:
    """At most ``limit`` bytes of the region, or its first entry whole when that is larger
    (converted, v2 batches hardly ever get smaller, so more would not fit): the memory a
    down-converted response takes stays near what it sends."""
    if info.size <= limit:
        return info.read()
    head = os.pread(info.fd, limit, info.position)
    if len(head) >= 12:
        first = 12 + int.from_bytes(head[8:12], "big", signed=True)
        if first > limit:
            return os.pread(info.fd, min(first, info.size), info.position)
    return head


def _count(
    stats: BrokerTopicStats, parts: list[CachedPartition],
    infos: list[FetchPartition | FetchDataInfo], follower: bool,
) -> None:
    """BrokerTopicMetrics of a fetch: per partition read, a fetch request (failed when it
    carries an error) and the bytes sent; a follower's bytes are replication traffic
    (Kafka's ReplicationBytesOutPerSec), not BytesOutPerSec."""
    for cp, info in zip(parts, infos, strict=True):
        if cp.topic is None:
            continue
        counters = stats.topic(cp.topic)
        counters.fetch_requests += 1
        if isinstance(info, FetchPartition):
            counters.failed_fetch_requests += 1
        elif info.size:
            if follower:
                stats.replication_bytes_out += info.size
            else:
                counters.bytes_out += info.size


def _topic_id(topic_id: uuid.UUID | None) -> uuid.UUID:
    """kio reads the all-zero topic id (Kafka's ``Uuid.ZERO_UUID``) as None; a topic id
    names no topic then, and its partitions are answered UNKNOWN_TOPIC_ID as Kafka does."""
    return ZERO_UUID if topic_id is None else topic_id


def _replica_id(request: Any) -> int:
    """The fetching replica's broker id (a follower), or -1 (a consumer)."""
    state = getattr(request, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(request, "replica_id", -1)
    return int(replica_id)


def _region(cp: CachedPartition, info: FetchDataInfo, owned: list[int]) -> FetchPartition:
    """The answer for a successful read: a FileRegion on a dup of the segment's fd."""
    records: FileRegion | bytes = b""
    if info.size and info.legacy:
        # A segment an old Kafka wrote (formats v0/v1): up-converted, as Kafka 4 serves
        # such segments to fetchers (KIP-724); per record, only for those segments.
        try:
            records = up_convert(info.read(), cp.fetch_offset)
        except InvalidRecordError:
            hw = info.high_watermark
            return FetchPartition(cp.partition, ErrorCode.corrupt_message, hw,
                                  info.last_stable_offset, info.log_start_offset)
    elif info.size:
        try:
            fd = os.dup(info.fd)
        except OSError as exc:  # out of fds: copy instead of failing the fetch
            log.warning("cannot dup a segment fd (%s); copying %d bytes", exc, info.size)
            records = info.read()
        else:
            owned.append(fd)
            records = FileRegion(fd, info.position, info.size)
    return FetchPartition(cp.partition, ErrorCode.none, info.high_watermark,
                          info.last_stable_offset, info.log_start_offset, records,
                          info.aborted_transactions)


def _read_all(
    replica_manager: ReplicaManager, parts: list[CachedPartition], max_bytes: int, by_id: bool,
    replica_id: int, refused: frozenset[str] | None = None, read_committed: bool = False,
) -> tuple[list[FetchPartition | FetchDataInfo], int, int]:
    results: list[FetchPartition | FetchDataInfo] = []
    remaining = max_bytes
    total = 0
    errors = 0
    min_one = True
    for cp in parts:
        if refused is not None and cp.topic in refused:
            results.append(FetchPartition(cp.partition, ErrorCode.topic_authorization_failed))
            errors += 1
            continue
        result = _read_one(replica_manager, cp, remaining, min_one, by_id, replica_id,
                           read_committed)
        if isinstance(result, FetchPartition):
            errors += 1
        elif result.size:
            min_one = False
            remaining = max(0, remaining - result.size)
            total += result.size
        results.append(result)
    return results, total, errors


def _last_stable_offset(replica_manager: ReplicaManager, key: Hashable) -> int:
    """The last stable offset of a consumer's purgatory key (-1: no such partition)."""
    if not isinstance(key, TopicPartition):
        return -1
    partition = replica_manager.get_partition(key.topic, key.partition)
    return -1 if partition is None else partition.log.last_stable_offset


def _unstable_bytes(replica_manager: ReplicaManager, key: Hashable) -> int:
    """The bytes of a consumer's purgatory key between its last stable offset and its high
    watermark: an open transaction's data a commit will make readable at once (purgatory's
    DelayedStableBytes). Two offset lookups, only for a partition with such data."""
    if not isinstance(key, TopicPartition):
        return 0
    partition = replica_manager.get_partition(key.topic, key.partition)
    if partition is None:
        return 0
    log = partition.log
    lso, hw = log.last_stable_offset, log.high_watermark
    if lso >= hw:
        return 0
    segments = log.segments
    bases = [s.base_offset for s in segments]
    total = 0
    try:
        for i in range(max(0, bisect.bisect_right(bases, lso) - 1), len(segments)):
            segment = segments[i]
            if segment.base_offset >= hw:
                break
            start = segment.translate_offset(lso) if lso > segment.base_offset else None
            end = segment.translate_offset(hw) if hw < segment.next_offset else None
            total += ((end.position if end is not None else segment.size)
                      - (start.position if start is not None else 0))
    except (OSError, StorageError):  # the read after the wait meets the failure itself
        return 0
    return total


def _read_one(
    replica_manager: ReplicaManager, cp: CachedPartition, remaining: int, min_one: bool,
    by_id: bool, replica_id: int, read_committed: bool = False,
) -> FetchPartition | FetchDataInfo:
    """The log region to send, or a FetchPartition carrying an error."""
    if cp.topic is None:
        return FetchPartition(cp.partition, ErrorCode.unknown_topic_id)
    try:
        partition = replica_manager.leader_partition(cp.topic, cp.partition, cp.leader_epoch)
    except UnknownTopicOrPartitionError:
        code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
        return FetchPartition(cp.partition, code)
    except Exception as exc:
        code, _ = error_code_for(exc, f"fetching {cp.topic}-{cp.partition}")
        return FetchPartition(cp.partition, code)
    limit = min(cp.max_bytes, remaining)
    follower = replica_id >= 0
    throttled = False
    try:
        if follower and replica_manager.leader_throttled(partition, replica_id):
            # KIP-73: over leader.replication.throttled.rate, no records this time
            now = time.monotonic()
            if replica_manager.leader_quota.exceeded(now):
                limit, min_one = 0, False
            else:
                throttled = True
        info = partition.read(cp.fetch_offset, limit, min_one, follower, read_committed)
        if follower and replica_manager.record_follower_fetch(
            partition, replica_id, cp.fetch_offset
        ):
            # Only a fetch served tells where the follower is (an offset out of range
            # raised above: Kafka's fetchMessages reads, then updateFollowerFetchState).
            # The high watermark it moved goes back with this answer.
            info = dataclasses.replace(info, high_watermark=partition.high_watermark)
        if throttled and info.size:
            replica_manager.leader_quota.record(info.size, time.monotonic())
        if info.first_entry_incomplete:
            # Kafka (v3+): a partition whose first batch does not fit is sent empty, not
            # as a partial batch the client could not make progress with. (The log knows
            # the batch's size from its read: no header read here, and no
            # dataclasses.replace, which costs ~20 calls; this runs for every partition
            # named after the answer is nearly full.)
            return FetchDataInfo(info.fetch_offset, -1, 0, 0, info.log_start_offset,
                                 info.log_end_offset, info.high_watermark,
                                 last_stable_offset=info.last_stable_offset,
                                 aborted_transactions=info.aborted_transactions)
        return info
    except Exception as exc:
        code, _ = error_code_for(exc, f"fetching {cp.topic}-{cp.partition}")
        if code == ErrorCode.request_timed_out:
            # Out of descriptors reopening an old segment (storage's ResourceLimitError):
            # the Java consumer takes REQUEST_TIMED_OUT in a Fetch for a bug
            # (IllegalStateException) but retries UNKNOWN_SERVER_ERROR.
            code = ErrorCode.unknown_server_error
        hw = partition.high_watermark
        return FetchPartition(cp.partition, code, hw, hw, partition.log.log_start_offset)

