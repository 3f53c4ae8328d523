"""Records of ``__consumer_offsets``: Kafka's key and value layouts, byte for byte.

The group coordinator's state lives in the compacted internal topic ``__consumer_offsets``
(Kafka's ``GroupMetadataManager`` / ``GroupCoordinatorRecordSerde``). A group's records
all go to one partition, ``abs(String.hashCode(group)) % offsets.topic.num.partitions``,
with Java's ``String.hashCode`` (UTF-16 code units, 32-bit overflow) and Kafka's
``Utils.abs`` (Integer.MIN_VALUE maps to 0), so a group lands on the same partition as it
would in Kafka. Compaction keeps the newest value per key; a null value (tombstone)
deletes the key.

Every key and value starts with an int16 version. Strings are int16 length + UTF-8
(nullable: length -1 is null), bytes are int32 length + data, arrays int32 count + items;
all integers big-endian. Flexible versions (group metadata value v4, offset value v4) use
compact encodings instead (unsigned varint length + 1, 0 = null) and end every struct
with tagged fields (unsigned varint count, then tag/size/data; unknown tags are skipped).

Keys::

    OffsetCommitKey   (version 0 or 1)  group: string, topic: string, partition: int32
    GroupMetadataKey  (version 2)       group: string

Offset commit value (what Odradek writes: version 3, or 1 with an expire timestamp)::

    v0  offset int64, metadata string, commit_timestamp int64
    v1  offset int64, metadata string, commit_timestamp int64, expire_timestamp int64
    v2  offset int64, metadata string, commit_timestamp int64
    v3  offset int64, leader_epoch int32, metadata string, commit_timestamp int64
    v4  as v3, flexible (compact string, tagged fields)

Group metadata value (what Odradek writes: version 3)::

    protocol_type string, generation int32, protocol nullable string,
    leader nullable string, current_state_timestamp int64 (v2+),
    members array of:
        member_id string, group_instance_id nullable string (v3+), client_id string,
        client_host string, rebalance_timeout int32 (v1+), session_timeout int32,
        subscription bytes, assignment bytes
    v4  as v3, flexible
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "decode_key",
    "decode_value",
    "java_string_hash",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_FLEXIBLE_OFFSET_VALUE = 4
_FLEXIBLE_GROUP_VALUE = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value of ``__consumer_offsets`` that cannot be decoded."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units,
    as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (Kafka's ``partitionFor``)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- keys ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        return (
            _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(self.group) + _string(self.topic)
            + _I32.pack(self.partition)
        )


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str

    def encode(self) -> bytes:
        return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(self.group)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key, or None for key versions this coordinator does not own (e.g. the
    consumer-protocol records of KIP-848), which loading skips."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupMetadataKey(r.string() or "")
    return None


# -- values ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1

    def encode(self) -> bytes:
        """Version 3; version 1 when an expire timestamp is set (OffsetCommit v2-4 with a
        retention time), the only version that carries one, as Kafka writes it."""
        if self.expire_timestamp >= 0:
            return (
                _I16.pack(1) + _I64.pack(self.offset) + _string(self.metadata)
                + _I64.pack(self.commit_timestamp) + _I64.pack(self.expire_timestamp)
            )
        return (
            _I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(self.offset)
            + _I32.pack(self.leader_epoch) + _string(self.metadata)
            + _I64.pack(self.commit_timestamp)
        )


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadataValue, ...]

    def encode(self) -> bytes:
        out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
        out += _string(self.protocol_type)
        out += _I32.pack(self.generation)
        out += _nullable_string(self.protocol)
        out += _nullable_string(self.leader)
        out += _I64.pack(self.current_state_timestamp)
        out += _I32.pack(len(self.members))
        for m in self.members:
            out += _string(m.member_id)
            out += _nullable_string(m.group_instance_id)
            out += _string(m.client_id)
            out += _string(m.client_host)
            out += _I32.pack(m.rebalance_timeout)
            out += _I32.pack(m.session_timeout)
            out += _I32.pack(len(m.subscription)) + m.subscription
            out += _I32.pack(len(m.assignment)) + m.assignment
        return bytes(out)


def decode_value(
    key: OffsetCommitKey | GroupMetadataKey, data: bytes
) -> OffsetCommitValue | GroupMetadataValue:
    r = _Reader(data)
    version = r.i16()
    if isinstance(key, OffsetCommitKey):
        return _decode_offset_value(r, version)
    return _decode_group_value(r, version)


def _decode_offset_value(r: _Reader, version: int) -> OffsetCommitValue:
    if version < 0 or version > _FLEXIBLE_OFFSET_VALUE:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    flexible = version >= _FLEXIBLE_OFFSET_VALUE
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string(flexible) or ""
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    if flexible:
        r.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _decode_group_value(r: _Reader, version: int) -> GroupMetadataValue:
    if version < 0 or version > _FLEXIBLE_GROUP_VALUE:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    flexible = version >= _FLEXIBLE_GROUP_VALUE
    protocol_type = r.string(flexible) or ""
    generation = r.i32()
    protocol = r.string(flexible)
    leader = r.string(flexible)
    current_state_timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length(flexible)):
        member_id = r.string(flexible) or ""
        instance_id = r.string(flexible) if version >= 3 else None
        client_id = r.string(flexible) or ""
        client_host = r.string(flexible) or ""
        session_timeout = r.i32()
        rebalance_timeout = session_timeout
        if version >= 1:
            rebalance_timeout, session_timeout = session_timeout, r.i32()
        subscription = r.bytes_(flexible)
        assignment = r.bytes_(flexible)
        if flexible:
            r.skip_tagged_fields()
        members.append(MemberMetadataValue(
            member_id, instance_id, client_id, client_host, rebalance_timeout,
            session_timeout, subscription, assignment,
        ))
    if flexible:
        r.skip_tagged_fields()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


# -- primitives ------------------------------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def _nullable_string(text: str | None) -> bytes:
    return _I16.pack(-1) if text is None else _string(text)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"record ends early at byte {self.pos} (wanted {n} more)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise RecordFormatError("unsigned varint is too long")

    def string(self, flexible: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        if n < 0:
            return None
        return self._take(n).decode("utf-8")

    def bytes_(self, flexible: bool = False) -> bytes:
        n = self.uvarint() - 1 if flexible else self.i32()
        return b"" if n < 0 else self._take(n)

    def array_length(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n > len(self.data):
            raise RecordFormatError(f"array of {n} items in a {len(self.data)}-byte record")
        return max(n, 0)

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())
