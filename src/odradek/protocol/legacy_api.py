"""Bodies of the API versions Kafka 4.0 removed (KIP-896) and kio has no schema for.

How it works: Kafka 3.9 still served Produce v0-2 and Fetch v0-3, which clients built for
Kafka 0.9-0.10 speak (kafka-python with ``api_version=(0, 9)`` or ``(0, 10, 1)``,
librdkafka with ``broker.version.fallback=0.9.0``/``0.10.0``). kio is generated from
Kafka 4.0's JSON schemas and lacks them, so this module reads their requests and writes
their responses with ``struct``, in the layouts of Kafka 3.9's ``ProduceRequest.json``,
``ProduceResponse.json``, ``FetchRequest.json`` and ``FetchResponse.json``. None of these
versions is flexible: int16-length strings, int32-length arrays and bytes.

Produce v0-2 requests are read by :func:`~odradek.protocol.produce_reader.read_produce_request`
(v3 only added ``transactional_id`` in front). Their responses::

    ProduceResponse v0-2
      responses     array of {name string,
                              partitions array of {index int32, error_code int16,
                                                   base_offset int64,
                                                   log_append_time_ms int64   v2+}}
      throttle_time_ms int32                                                  v1+

Fetch v0-3::

    FetchRequest v0-3
      replica_id int32, max_wait_ms int32, min_bytes int32, max_bytes int32 (v3+),
      topics array of {topic string,
                       partitions array of {partition int32, fetch_offset int64,
                                            partition_max_bytes int32}}
    FetchResponse v0-3
      throttle_time_ms int32                                                  v1+
      responses array of {topic string,
                          partitions array of {partition_index int32, error_code int16,
                                               high_watermark int64, records bytes}}

ListOffsets v0 (the offsets "before" a time, Kafka's ``legacyFetchOffsetsBefore``)::

    ListOffsetsRequest v0
      replica_id int32,
      topics array of {name string,
                       partitions array of {partition_index int32, timestamp int64,
                                            max_num_offsets int32}}
    ListOffsetsResponse v0
      topics array of {name string,
                       partitions array of {partition_index int32, error_code int16,
                                            old_style_offsets array of int64}}

OffsetCommit v0-1 and OffsetFetch v0 (clients of 0.8.1-0.8.2)::

    OffsetCommitRequest v0-1
      group_id string, generation_id int32 (v1), member_id string (v1),
      topics array of {name string,
                       partitions array of {partition_index int32, committed_offset int64,
                                            commit_timestamp int64 (v1),
                                            committed_metadata nullable string}}
    OffsetCommitResponse v0-1
      topics array of {name string, partitions array of {partition_index int32,
                                                         error_code int16}}
    OffsetFetchRequest v0
      group_id string, topics array of {name string, partition_indexes array of int32}
    OffsetFetchResponse v0
      topics array of {name string,
                       partitions array of {partition_index int32, committed_offset int64,
                                            metadata nullable string, error_code int16}}

The records of a v0/v1 fetch are a message set of magic 0 (Fetch v0-1) or 1 (v2-3),
down-converted by the handler (records/legacy.py). Malformed requests are
:class:`InvalidRequestError`, as kio's decoding failures are.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Sequence
from typing import NamedTuple

from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import refuse_count
from odradek.protocol.produce_writer import PartitionResult
from odradek.protocol.send import Send

__all__ = [
    "FETCH_LEGACY_MAX",
    "PRODUCE_LEGACY_MAX",
    "LegacyFetchPartition",
    "LegacyFetchRequest",
    "LegacyFetchTopic",
    "ListOffsetsV0Request",
    "OffsetCommitLegacyRequest",
    "OffsetFetchV0Request",
    "fetch_magic",
    "read_fetch_request",
    "read_list_offsets_v0",
    "read_offset_commit_legacy",
    "read_offset_fetch_v0",
    "write_fetch_response",
    "write_list_offsets_v0",
    "write_offset_commit_legacy",
    "write_offset_fetch_v0",
    "write_produce_response",
]

PRODUCE_LEGACY_MAX = 2
FETCH_LEGACY_MAX = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FETCH_HEAD = struct.Struct(">iii")  # replica_id, max_wait_ms, min_bytes
_FETCH_PART = struct.Struct(">iqi")  # partition, fetch_offset, partition_max_bytes
_PRODUCE_PART_V0 = struct.Struct(">ihq")
_PRODUCE_PART_V2 = struct.Struct(">ihqq")
_FETCH_PART_HEAD = struct.Struct(">ihqi")  # partition, error, high watermark, records length
_MAX_COUNT = 1 << 20  # no array in a request this size can hold more elements
_TOPIC_MIN = 6  # a topic entry: an int16 name length and an int32 partition count


def fetch_magic(version: int) -> int:
    """The message format a Fetch of ``version`` reads: magic 0 for v0-1, 1 for v2-3."""
    return 0 if version <= 1 else 1


class LegacyFetchPartition(NamedTuple):
    partition: int
    fetch_offset: int
    partition_max_bytes: int


class LegacyFetchTopic(NamedTuple):
    topic: str
    partitions: tuple[LegacyFetchPartition, ...]


class LegacyFetchRequest(NamedTuple):
    """Named as kio's FetchRequest fields, so the Fetch handler reads either."""

    replica_id: int
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    topics: tuple[LegacyFetchTopic, ...]


def read_fetch_request(
    frame: bytes | bytearray | memoryview, offset: int, version: int
) -> LegacyFetchRequest:
    if not 0 <= version <= FETCH_LEGACY_MAX:
        raise ValueError(f"Fetch request v{version} is not read here")
    view = memoryview(frame)
    try:
        replica_id, max_wait_ms, min_bytes = _FETCH_HEAD.unpack_from(view, offset)
        pos = offset + _FETCH_HEAD.size
        max_bytes = 0x7FFFFFFF  # v0-2 have no response limit (Kafka: Int.MaxValue)
        if version >= 3:
            (max_bytes,) = _I32.unpack_from(view, pos)
            pos += 4
        count, pos = _count(view, pos, _TOPIC_MIN)
        topics = []
        for _ in range(count):
            name, pos = _string(view, pos)
            n, pos = _count(view, pos, _FETCH_PART.size)
            partitions = []
            for _ in range(n):
                partitions.append(LegacyFetchPartition(*_FETCH_PART.unpack_from(view, pos)))
                pos += _FETCH_PART.size
            topics.append(LegacyFetchTopic(name, tuple(partitions)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot decode Fetch v{version} request: {exc!r}") from exc
    return LegacyFetchRequest(
        replica_id, datetime.timedelta(milliseconds=max_wait_ms), min_bytes, max_bytes,
        tuple(topics),
    )


def _count(view: memoryview, pos: int, min_size: int) -> tuple[int, int]:
    """An array's element count, refused when negative or when ``min_size`` bytes an
    element would run past the body: the loops over it are bounded by the bytes sent."""
    (n,) = _I32.unpack_from(view, pos)
    pos += 4
    if n < 0 or n > _MAX_COUNT:
        raise InvalidRequestError(f"array length {n} in a request")
    if n * min_size > len(view) - pos:
        raise refuse_count("an array", n, min_size, len(view) - pos)
    return n, pos


def _string(view: memoryview, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(view, pos)
    pos += 2
    if n < 0 or pos + n > len(view):
        raise InvalidRequestError(f"string length {n} in a request")
    return str(view[pos : pos + n], "utf-8"), pos + n


def _pack_string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def write_produce_response(
    version: int, topics: Sequence[tuple[str, Sequence[PartitionResult]]],
    throttle_time_ms: int = 0,
) -> Send:
    if not 0 <= version <= PRODUCE_LEGACY_MAX:
        raise ValueError(f"Produce response v{version} is not written here")
    out = bytearray(_I32.pack(len(topics)))
    for name, partitions in topics:
        out += _pack_string(name)
        out += _I32.pack(len(partitions))
        for p in partitions:
            if version >= 2:
                out += _PRODUCE_PART_V2.pack(p.index, p.error_code, p.base_offset,
                                             p.log_append_time_ms)
            else:
                out += _PRODUCE_PART_V0.pack(p.index, p.error_code, p.base_offset)
    if version >= 1:
        out += _I32.pack(throttle_time_ms)
    return Send((bytes(out),))


class LegacyFetchAnswer(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int
    records: bytes


def write_fetch_response(
    version: int, topics: Sequence[tuple[str, Sequence[LegacyFetchAnswer]]],
    throttle_time_ms: int = 0,
) -> Send:
    if not 0 <= version <= FETCH_LEGACY_MAX:
        raise ValueError(f"Fetch response v{version} is not written here")
    parts: list[bytes] = []
    head = bytearray()
    if version >= 1:
        head += _I32.pack(throttle_time_ms)
    head += _I32.pack(len(topics))
    for name, partitions in topics:
        head += _pack_string(name)
        head += _I32.pack(len(partitions))
        for p in partitions:
            head += _FETCH_PART_HEAD.pack(p.partition_index, p.error_code, p.high_watermark,
                                          len(p.records))
            if p.records:
                parts.append(bytes(head))
                parts.append(p.records)
                head = bytearray()
    if head:
        parts.append(bytes(head))
    return Send(parts)


class ListOffsetsV0Partition(NamedTuple):
    partition_index: int
    timestamp: int
    max_num_offsets: int


class ListOffsetsV0Topic(NamedTuple):
    name: str
    partitions: tuple[ListOffsetsV0Partition, ...]


class ListOffsetsV0Request(NamedTuple):
    replica_id: int
    topics: tuple[ListOffsetsV0Topic, ...]


_LIST_PART = struct.Struct(">iqi")
_I16_I32 = struct.Struct(">ihi")  # partition_index, error_code, offsets count
_I64 = struct.Struct(">q")


def read_list_offsets_v0(
    frame: bytes | bytearray | memoryview, offset: int, version: int
) -> ListOffsetsV0Request:
    if version != 0:
        raise ValueError(f"ListOffsets request v{version} is not read here")
    view = memoryview(frame)
    try:
        (replica_id,) = _I32.unpack_from(view, offset)
        count, pos = _count(view, offset + 4, _TOPIC_MIN)
        topics = []
        for _ in range(count):
            name, pos = _string(view, pos)
            n, pos = _count(view, pos, _LIST_PART.size)
            partitions = []
            for _ in range(n):
                partitions.append(ListOffsetsV0Partition(*_LIST_PART.unpack_from(view, pos)))
                pos += _LIST_PART.size
            topics.append(ListOffsetsV0Topic(name, tuple(partitions)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot decode ListOffsets v0 request: {exc!r}") from exc
    return ListOffsetsV0Request(replica_id, tuple(topics))


def write_list_offsets_v0(
    topics: Sequence[tuple[str, Sequence[tuple[int, int, Sequence[int]]]]],
) -> Send:
    """(name, [(partition_index, error_code, offsets)]) as a ListOffsets v0 body."""
    out = bytearray(_I32.pack(len(topics)))
    for name, partitions in topics:
        out += _pack_string(name)
        out += _I32.pack(len(partitions))
        for index, code, offsets in partitions:
            out += _I16_I32.pack(index, code, len(offsets))
            for value in offsets:
                out += _I64.pack(value)
    return Send((bytes(out),))


class OffsetCommitLegacyPartition(NamedTuple):
    partition_index: int
    committed_offset: int
    commit_timestamp: int
    committed_metadata: str | None


class OffsetCommitLegacyTopic(NamedTuple):
    name: str
    partitions: tuple[OffsetCommitLegacyPartition, ...]


class OffsetCommitLegacyRequest(NamedTuple):
    group_id: str
    generation_id: int
    member_id: str
    topics: tuple[OffsetCommitLegacyTopic, ...]


class OffsetFetchV0Topic(NamedTuple):
    name: str
    partition_indexes: tuple[int, ...]


class OffsetFetchV0Request(NamedTuple):
    group_id: str
    topics: tuple[OffsetFetchV0Topic, ...]


_I32_I64 = struct.Struct(">iq")
_I32_I64_I64 = struct.Struct(">iqq")
# an OffsetCommit partition: its fixed fields and an int16 metadata length, by version
_OFFSET_COMMIT_PART_MIN = {0: _I32_I64.size + 2, 1: _I32_I64_I64.size + 2}
_I32_I16 = struct.Struct(">ih")
_I16_BARE = struct.Struct(">h")


def _nullable_string(view: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(view, pos)
    if n == -1:
        return None, pos + 2
    return _string(view, pos)


def read_offset_commit_legacy(
    frame: bytes | bytearray | memoryview, offset: int, version: int
) -> OffsetCommitLegacyRequest:
    if version not in (0, 1):
        raise ValueError(f"OffsetCommit request v{version} is not read here")
    view = memoryview(frame)
    try:
        group_id, pos = _string(view, offset)
        generation_id, member_id = -1, ""
        if version == 1:
            (generation_id,) = _I32.unpack_from(view, pos)
            member_id, pos = _string(view, pos + 4)
        count, pos = _count(view, pos, _TOPIC_MIN)
        topics = []
        for _ in range(count):
            name, pos = _string(view, pos)
            n, pos = _count(view, pos, _OFFSET_COMMIT_PART_MIN[version])
            partitions = []
            for _ in range(n):
                timestamp = -1
                if version == 1:
                    index, committed, timestamp = _I32_I64_I64.unpack_from(view, pos)
                    pos += _I32_I64_I64.size
                else:
                    index, committed = _I32_I64.unpack_from(view, pos)
                    pos += _I32_I64.size
                metadata, pos = _nullable_string(view, pos)
                partitions.append(
                    OffsetCommitLegacyPartition(index, committed, timestamp, metadata))
            topics.append(OffsetCommitLegacyTopic(name, tuple(partitions)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot decode OffsetCommit v{version} request: {exc!r}"
                                  ) from exc
    return OffsetCommitLegacyRequest(group_id, generation_id, member_id, tuple(topics))


def write_offset_commit_legacy(
    topics: Sequence[tuple[str, Sequence[tuple[int, int]]]],
) -> Send:
    """(name, [(partition_index, error_code)]) as an OffsetCommit v0-1 body."""
    out = bytearray(_I32.pack(len(topics)))
    for name, partitions in topics:
        out += _pack_string(name)
        out += _I32.pack(len(partitions))
        for index, code in partitions:
            out += _I32_I16.pack(index, code)
    return Send((bytes(out),))


def read_offset_fetch_v0(
    frame: bytes | bytearray | memoryview, offset: int, version: int
) -> OffsetFetchV0Request:
    if version != 0:
        raise ValueError(f"OffsetFetch request v{version} is not read here")
    view = memoryview(frame)
    try:
        group_id, pos = _string(view, offset)
        count, pos = _count(view, pos, _TOPIC_MIN)
        topics = []
        for _ in range(count):
            name, pos = _string(view, pos)
            n, pos = _count(view, pos, 4)
            indexes = struct.unpack_from(f">{n}i", view, pos)
            pos += 4 * n
            topics.append(OffsetFetchV0Topic(name, tuple(indexes)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot decode OffsetFetch v0 request: {exc!r}") from exc
    return OffsetFetchV0Request(group_id, tuple(topics))


def write_offset_fetch_v0(
    topics: Sequence[tuple[str, Sequence[tuple[int, int, str | None, int]]]],
) -> Send:
    """(name, [(partition_index, offset, metadata, error_code)]) as an OffsetFetch v0 body."""
    out = bytearray(_I32.pack(len(topics)))
    for name, partitions in topics:
        out += _pack_string(name)
        out += _I32.pack(len(partitions))
        for index, committed, metadata, code in partitions:
            out += _I32_I64.pack(index, committed)
            out += b"\xff\xff" if metadata is None else _pack_string(metadata)
            out += _I16_BARE.pack(code)
    return Send((bytes(out),))
