"""Hot-path encoder for Fetch response bodies (versions 4-17): buffers plus file regions.

How it works
------------
A Fetch response is mostly record bytes that already sit, in wire format, in segment
files. Kafka never copies them into the heap: ``FetchResponse`` is written as a
``MultiRecordsSend`` whose parts are small byte buffers (the encoded fields *around* each
partition's records) and ``FileRecords`` slices that ``FileChannel.transferTo`` hands to
the kernel (``sendfile``). This module does the same, sans I/O: :func:`write_fetch_response`
returns a :class:`~odradek.protocol.send.Send` whose parts are ``bytes`` chunks and
:class:`~odradek.protocol.send.FileRegion` s, and the network layer writes the chunks and
``sendfile`` s the regions. Only the record *length* must be known up front, and it is:
``PartitionLog.read`` returns the region's size.

The body layout (Kafka's ``FetchResponse.json``; "flexible" = v12+, which uses compact
arrays / strings / bytes — unsigned varint length + 1, 0 for null — and tagged fields)::

    FetchResponse
      throttle_time_ms      int32
      error_code            int16                     v7+
      session_id            int32                     v7+
      responses             array of
        topic               string                    v4-12
        topic_id            uuid (16 bytes)           v13+
        partitions          array of
          partition_index       int32
          error_code            int16
          high_watermark        int64
          last_stable_offset    int64
          log_start_offset      int64                 v5+
          aborted_transactions  nullable array of     (null = -1 / compact 0)
            producer_id           int64
            first_offset          int64
            <tagged fields>                           v12+ (always empty)
          preferred_read_replica int32                v11+
          records               nullable bytes        (int32 length, or compact length)
          <tagged fields>                             v12+:
            0 diverging_epoch   {epoch int32, end_offset int64, <tags>}
            1 current_leader    {leader_id int32, leader_epoch int32, <tags>}
            2 snapshot_id       {end_offset int64, epoch int32, <tags>}
        <tagged fields>                               v12+ (always empty)
      <tagged fields>                                 v12+:
        0 node_endpoints    v16+  compact array of {node_id int32, host compact string,
                                   port int32, rack compact nullable string, <tags>}

Tagged fields are written, in tag order, only when they differ from their default
(``(-1, -1)`` for the three partition structs, empty for ``node_endpoints``) — exactly
what kio's generic writer does, and what the unit tests check byte for byte against kio
for every version. v14, v15 and v17 change only the request, so the response layout is
that of v13 / v16.

The byte chunks between two file regions are coalesced into one ``bytearray``, so a
response with N partitions has at most 2N + 1 parts.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from odradek.protocol.primitives import array_length, string, tagged, uvarint
from odradek.protocol.send import Chunk, FileRegion, Send

__all__ = [
    "MAX_VERSION",
    "MIN_VERSION",
    "FetchPartition",
    "FetchTopic",
    "NodeEndpoint",
    "materialize",
    "write_fetch_response",
]

MIN_VERSION = 4
MAX_VERSION = 17
_FLEXIBLE = 12
_TOPIC_IDS = 13
_NODE_ENDPOINTS = 16

_ZERO_UUID = bytes(16)
_DEFAULT_PAIR = (-1, -1)

_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
_PART_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, lso
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iqB")  # epoch, end_offset, empty tagged fields
_LEADER = struct.Struct(">iiB")  # leader_id, leader_epoch, empty tagged fields
_SNAPSHOT = struct.Struct(">qiB")  # end_offset, epoch, empty tagged fields


@dataclass(slots=True)
class FetchPartition:
    """One partition's answer. ``records`` is a file region (zero copy), inline bytes, or
    ``None`` (null records). The pairs are ``(epoch, end_offset)`` for ``diverging_epoch``,
    ``(leader_id, leader_epoch)`` for ``current_leader`` and ``(end_offset, epoch)`` for
    ``snapshot_id``, in schema field order; ``(-1, -1)`` means "not set"."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileRegion | bytes | None = b""
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    diverging_epoch: tuple[int, int] = _DEFAULT_PAIR
    current_leader: tuple[int, int] = _DEFAULT_PAIR
    snapshot_id: tuple[int, int] = _DEFAULT_PAIR

    @property
    def records_size(self) -> int:
        records = self.records
        if records is None:
            return 0
        if isinstance(records, FileRegion):
            return records.size
        return len(records)


@dataclass(slots=True)
class FetchTopic:
    """A topic's partitions; ``name`` is used up to v12, ``topic_id`` from v13."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def _partition_tags(p: FetchPartition) -> bytes:
    tags: list[bytes] = []
    if p.diverging_epoch != _DEFAULT_PAIR:
        tags.append(tagged(0, _EPOCH_END.pack(p.diverging_epoch[0], p.diverging_epoch[1], 0)))
    if p.current_leader != _DEFAULT_PAIR:
        tags.append(tagged(1, _LEADER.pack(p.current_leader[0], p.current_leader[1], 0)))
    if p.snapshot_id != _DEFAULT_PAIR:
        tags.append(tagged(2, _SNAPSHOT.pack(p.snapshot_id[0], p.snapshot_id[1], 0)))
    if not tags:
        return b"\x00"
    return uvarint(len(tags)) + b"".join(tags)


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    out = bytearray(array_length(len(endpoints), True))
    for e in endpoints:
        out += _I32.pack(e.node_id)
        out += string(e.host, True)
        out += _I32.pack(e.port)
        out += b"\x00" if e.rack is None else string(e.rack, True)
        out += b"\x00"
    return bytes(out)


def write_fetch_response(
    version: int,
    topics: Sequence[FetchTopic],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> Send:
    """Encode a FetchResponse body of ``version`` as a :class:`Send` (no header, no size
    prefix). Record file regions are referenced, never read."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch response version {version} is not in {MIN_VERSION}-{MAX_VERSION}")
    flexible = version >= _FLEXIBLE
    by_id = version >= _TOPIC_IDS
    with_log_start = version >= 5
    with_replica = version >= 11
    parts: list[Chunk] = []
    buf = bytearray(_I32.pack(throttle_time_ms))
    if version >= 7:
        buf += _I16_I32.pack(error_code, session_id)
    # Compact counts below 127 are one byte, written inline (a call each cost more than
    # the rest of a partition's fields).
    n = len(topics)
    if flexible and n < 0x7F:
        buf.append(n + 1)
    else:
        buf += array_length(n, flexible)
    for topic in topics:
        if by_id:
            buf += topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID
        else:
            if topic.name is None:
                raise ValueError("a topic name is required below Fetch v13")
            buf += string(topic.name, flexible)
        n = len(topic.partitions)
        if flexible and n < 0x7F:
            buf.append(n + 1)
        else:
            buf += array_length(n, flexible)
        for p in topic.partitions:
            buf += _PART_HEAD.pack(
                p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
            if with_log_start:
                buf += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if not flexible:
                buf += array_length(None if aborted is None else len(aborted), False)
            elif aborted is None:
                buf.append(0)  # null
            elif len(aborted) < 0x7F:
                buf.append(len(aborted) + 1)
            else:
                buf += array_length(len(aborted), True)
            if aborted is not None:
                for producer_id, first_offset in aborted:
                    buf += _I64_I64.pack(producer_id, first_offset)
                    if flexible:
                        buf += b"\x00"
            if with_replica:
                buf += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                size = records.size if isinstance(records, FileRegion) else len(records)
                buf += uvarint(size + 1) if flexible else _I32.pack(size)
                if isinstance(records, FileRegion):
                    if size:
                        parts.append(buf)
                        parts.append(records)
                        buf = bytearray()
                else:
                    buf += records
            if flexible:
                if (p.diverging_epoch == _DEFAULT_PAIR and p.current_leader == _DEFAULT_PAIR
                        and p.snapshot_id == _DEFAULT_PAIR):
                    buf.append(0)  # no tagged fields (_partition_tags' answer, inline)
                else:
                    buf += _partition_tags(p)
        if flexible:
            buf += b"\x00"
    if flexible:
        if version >= _NODE_ENDPOINTS and node_endpoints:
            buf += b"\x01"
            buf += tagged(0, _node_endpoints(node_endpoints))
        else:
            buf += b"\x00"
    if buf:
        parts.append(buf)
    return Send(parts, error_code)


def materialize(send: Send) -> bytes:
    """The whole body as bytes, reading file regions with ``os.pread`` (tests, tools)."""
    out = bytearray()
    for part in send.parts:
        if isinstance(part, FileRegion):
            out += os.pread(part.fd, part.size, part.position)
        else:
            out += part
    return bytes(out)
