"""Records of KIP-848's consumer groups in ``__consumer_offsets``, byte for byte as Kafka 4.0.

Kafka 4 keeps a consumer group's state (the group epoch, the subscribed topics' metadata,
each member's subscription, the target assignment and each member's current assignment)
in the same compacted topic as the classic groups and the offsets, one record per piece
(``GroupCoordinatorRecordSerde``, the ``ConsumerGroup*Key/Value`` JSON schemas of
group-coordinator, ``GroupCoordinatorRecordHelpers``). A null value (tombstone) deletes
the key; compaction keeps the newest value per key.

How the bytes are laid out:

- **Key**: int16 *record type* then the key's fields, non-flexible (int16-length strings).
  The record type is what ``group_records`` calls the key version: 0 and 1 are offset
  commits and 2 a classic group (:mod:`odradek.coordinator.group_records`); the consumer
  group records are 3 to 8, and 16 (a resolved regular expression, Kafka 4.0). Kafka
  3.7-3.9 wrote the same bytes with the type as the key schema's "version"; Kafka 4.0's
  ``coordinator-key`` schemas call it ``apiKey``. Share groups (9-15) and streams groups
  (17+) are not Odradek's: :func:`decode_key` returns None for them, as for 0-2.
- **Value**: int16 value version (0 for every record here) then the fields in the
  *flexible* encoding: compact strings/bytes/arrays (unsigned varint length + 1, 0 for
  null), UUIDs as 16 bytes, and after every struct a tagged-field section (unsigned varint
  count, then tag, size, data per field). Tags this module does not know are skipped.

The records (type, key fields -> value fields)::

    3  ConsumerGroupMetadata           group_id -> epoch int32
    4  ConsumerGroupPartitionMetadata  group_id -> topics [topic_id uuid, topic_name,
                                        num_partitions int32, partition_metadata
                                        [partition int32, racks [string]]]
    5  ConsumerGroupMemberMetadata     group_id, member_id -> instance_id?, rack_id?,
                                        client_id, client_host, subscribed_topic_names
                                        [string], subscribed_topic_regex?,
                                        rebalance_timeout_ms int32, server_assignor?,
                                        tag 0: classic_member_metadata? (session_timeout_ms
                                        int32, supported_protocols [name, metadata bytes])
    6  ConsumerGroupTargetAssignmentMetadata  group_id -> assignment_epoch int32
    7  ConsumerGroupTargetAssignmentMember    group_id, member_id -> topic_partitions
                                        [topic_id uuid, partitions [int32]]
    8  ConsumerGroupCurrentMemberAssignment   group_id, member_id -> member_epoch int32,
                                        previous_member_epoch int32, state int8 (Kafka's
                                        MemberState: 0 stable, 1 unrevoked_partitions,
                                        2 unreleased_partitions), assigned_partitions and
                                        partitions_pending_revocation [topic_id, [int32]]
    16 ConsumerGroupRegularExpression  group_id, regular_expression -> topics [string],
                                        version int64, timestamp int64

(``?`` marks a nullable string.) A nullable struct in a tagged field is written as Kafka's
generator does: size = struct size + 1, then unsigned varint 1 (0 would be null), then
the struct.

Decoding is bounded: every length is checked against the bytes left before anything is
read or allocated for it (an array of N items needs at least N bytes, N*4 for int32s),
varints are at most five bytes, and bytes left over after a value are an error — a bad
record raises :class:`RecordFormatError` naming the record type and what is wrong.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from odradek.coordinator.group_records import RecordFormatError

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "MEMBER_STATE_STABLE",
    "MEMBER_STATE_UNRELEASED_PARTITIONS",
    "MEMBER_STATE_UNREVOKED_PARTITIONS",
    "VALUE_VERSION",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupValue",
    "PartitionMetadata",
    "RecordFormatError",
    "TopicMetadata",
    "TopicPartitions",
    "decode_key",
    "decode_value",
    "kafka_uuid_string",
]

# The only value version of every consumer group record in Kafka 4.0.
VALUE_VERSION = 0

# Kafka's MemberState codes (the State int8 of ConsumerGroupCurrentMemberAssignmentValue).
MEMBER_STATE_STABLE = 0
MEMBER_STATE_UNREVOKED_PARTITIONS = 1
MEMBER_STATE_UNRELEASED_PARTITIONS = 2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_UUID_SIZE = 16
_MAX_VARINT_BYTES = 5  # an unsigned varint of 32 bits


def kafka_uuid_string(value: uuid.UUID) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


# -- keys -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    RECORD_TYPE: ClassVar[int] = 3
    group_id: str

    def encode(self) -> bytes:
        return _I16.pack(self.RECORD_TYPE) + _string(self.group_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    RECORD_TYPE: ClassVar[int] = 4
    group_id: str

    def encode(self) -> bytes:
        return _I16.pack(self.RECORD_TYPE) + _string(self.group_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[int] = 5
    group_id: str
    member_id: str

    def encode(self) -> bytes:
        return _I16.pack(self.RECORD_TYPE) + _string(self.group_id) + _string(self.member_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[int] = 6
    group_id: str

    def encode(self) -> bytes:
        return _I16.pack(self.RECORD_TYPE) + _string(self.group_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[int] = 7
    group_id: str
    member_id: str

    def encode(self) -> bytes:
        return _I16.pack(self.RECORD_TYPE) + _string(self.group_id) + _string(self.member_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[int] = 8
    group_id: str
    member_id: str

    def encode(self) -> bytes:
        return _I16.pack(self.RECORD_TYPE) + _string(self.group_id) + _string(self.member_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    RECORD_TYPE: ClassVar[int] = 16
    group_id: str
    regular_expression: str

    def encode(self) -> bytes:
        return (_I16.pack(self.RECORD_TYPE) + _string(self.group_id)
                + _string(self.regular_expression))


ConsumerGroupKey = (
    ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)

_GROUP_KEYS: dict[int, type[ConsumerGroupMetadataKey] | type[ConsumerGroupPartitionMetadataKey]
                  | type[ConsumerGroupTargetAssignmentMetadataKey]] = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
}
_MEMBER_KEYS: dict[int, type[ConsumerGroupMemberMetadataKey]
                   | type[ConsumerGroupTargetAssignmentMemberKey]
                   | type[ConsumerGroupCurrentMemberAssignmentKey]] = {
    5: ConsumerGroupMemberMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
}
CONSUMER_GROUP_RECORD_TYPES = frozenset((*_GROUP_KEYS, *_MEMBER_KEYS, 16))


def decode_key(data: bytes) -> ConsumerGroupKey | None:
    """The key of a consumer group record, or None for the other record types of
    ``__consumer_offsets`` (offset commits, classic groups, share and streams groups)."""
    r = _Reader(data, "key")
    record_type = r.i16()
    if record_type not in CONSUMER_GROUP_RECORD_TYPES:
        return None
    r.what = f"key of record type {record_type}"
    group_id = r.key_string()
    key: ConsumerGroupKey
    if record_type in _GROUP_KEYS:
        key = _GROUP_KEYS[record_type](group_id)
    elif record_type in _MEMBER_KEYS:
        key = _MEMBER_KEYS[record_type](group_id, r.key_string())
    else:
        key = ConsumerGroupRegularExpressionKey(group_id, r.key_string())
    r.end()
    return key


# -- values -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int

    def encode(self) -> bytes:
        w = _Writer()
        w.i32(self.epoch)
        w.no_tagged_fields()
        return w.done()


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The racks of one partition's replicas (Kafka 4.0 writes them; 4.1 stopped)."""

    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """The metadata of the topics the group subscribes to, as the group last saw it."""

    topics: tuple[TopicMetadata, ...]

    def encode(self) -> bytes:
        w = _Writer()
        w.array_length(len(self.topics))
        for t in self.topics:
            w.uuid(t.topic_id)
            w.string(t.topic_name)
            w.i32(t.num_partitions)
            w.array_length(len(t.partition_metadata))
            for p in t.partition_metadata:
                w.i32(p.partition)
                w.strings(p.racks)
                w.no_tagged_fields()
            w.no_tagged_fields()
        w.no_tagged_fields()
        return w.done()


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol in a consumer group (online migration)."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]

    def encode(self) -> bytes:
        w = _Writer(version=False)
        w.i32(self.session_timeout_ms)
        w.array_length(len(self.supported_protocols))
        for p in self.supported_protocols:
            w.string(p.name)
            w.bytes_(p.metadata)
            w.no_tagged_fields()
        w.no_tagged_fields()
        return w.done()


_CLASSIC_MEMBER_METADATA_TAG = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    """A member's subscription and client, what its heartbeats declared."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None

    def encode(self) -> bytes:
        w = _Writer()
        w.string(self.instance_id)
        w.string(self.rack_id)
        w.string(self.client_id)
        w.string(self.client_host)
        w.strings(self.subscribed_topic_names)
        w.string(self.subscribed_topic_regex)
        w.i32(self.rebalance_timeout_ms)
        w.string(self.server_assignor)
        if self.classic_member_metadata is None:
            w.no_tagged_fields()
        else:
            struct_bytes = self.classic_member_metadata.encode()
            w.uvarint(1)  # one tagged field
            w.uvarint(_CLASSIC_MEMBER_METADATA_TAG)
            w.uvarint(len(struct_bytes) + 1)  # +1: the presence varint of a nullable struct
            w.uvarint(1)
            w.raw(struct_bytes)
        return w.done()


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int

    def encode(self) -> bytes:
        w = _Writer()
        w.i32(self.assignment_epoch)
        w.no_tagged_fields()
        return w.done()


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    """One member's partitions in the target assignment."""

    topic_partitions: tuple[TopicPartitions, ...]

    def encode(self) -> bytes:
        w = _Writer()
        w.topic_partitions(self.topic_partitions)
        w.no_tagged_fields()
        return w.done()


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """Where a member is in its reconciliation: its epochs, state (``MEMBER_STATE_*``),
    the partitions it owns and those it must revoke."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]

    def encode(self) -> bytes:
        w = _Writer()
        w.i32(self.member_epoch)
        w.i32(self.previous_member_epoch)
        w.i8(self.state)
        w.topic_partitions(self.assigned_partitions)
        w.topic_partitions(self.partitions_pending_revocation)
        w.no_tagged_fields()
        return w.done()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """The topics a subscribed regular expression matched, at a metadata ``version``
    (Kafka's metadata image offset) and ``timestamp`` (ms) of the resolution."""

    topics: tuple[str, ...]
    version: int
    timestamp: int

    def encode(self) -> bytes:
        w = _Writer()
        w.strings(self.topics)
        w.i64(self.version)
        w.i64(self.timestamp)
        w.no_tagged_fields()
        return w.done()


ConsumerGroupValue = (
    ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)


def decode_value(key: ConsumerGroupKey, data: bytes | None) -> ConsumerGroupValue | None:
    """The value of the record with ``key``; None for a tombstone (``data`` None)."""
    if data is None:
        return None
    record_type = key.RECORD_TYPE
    r = _Reader(data, f"value of record type {record_type}")
    version = r.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(
            f"unknown value version {version} of record type {record_type} (Kafka 4.0 "
            f"writes version {VALUE_VERSION})"
        )
    value = _VALUE_DECODERS[record_type](r)
    r.end()
    return value


def _decode_group_metadata(r: _Reader) -> ConsumerGroupMetadataValue:
    epoch = r.i32()
    r.skip_tagged_fields()  # 4.1's MetadataHash (tag 0) and later ones
    return ConsumerGroupMetadataValue(epoch)


def _decode_partition_metadata(r: _Reader) -> ConsumerGroupPartitionMetadataValue:
    def partition(r: _Reader) -> PartitionMetadata:
        number = r.i32()
        racks = r.strings()
        r.skip_tagged_fields()
        return PartitionMetadata(number, racks)

    def topic(r: _Reader) -> TopicMetadata:
        topic_id = r.uuid()
        name = r.string()
        num_partitions = r.i32()
        partitions = r.array(partition, min_item_size=6)
        r.skip_tagged_fields()
        return TopicMetadata(topic_id, name, num_partitions, partitions)

    topics = r.array(topic, min_item_size=_UUID_SIZE + 7)
    r.skip_tagged_fields()
    return ConsumerGroupPartitionMetadataValue(topics)


def _decode_classic_member_metadata(r: _Reader) -> ClassicMemberMetadata:
    session_timeout_ms = r.i32()

    def protocol(r: _Reader) -> ClassicProtocol:
        name = r.string()
        metadata = r.bytes_()
        r.skip_tagged_fields()
        return ClassicProtocol(name, metadata)

    protocols = r.array(protocol, min_item_size=3)
    r.skip_tagged_fields()
    return ClassicMemberMetadata(session_timeout_ms, protocols)


def _decode_member_metadata(r: _Reader) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.nullable_string()
    rack_id = r.nullable_string()
    client_id = r.string()
    client_host = r.string()
    topic_names = r.strings()
    regex = r.nullable_string()
    rebalance_timeout_ms = r.i32()
    server_assignor = r.nullable_string()
    classic: ClassicMemberMetadata | None = None
    for tag, field in r.tagged_fields():
        if tag == _CLASSIC_MEMBER_METADATA_TAG:
            if field.uvarint() > 0:
                classic = _decode_classic_member_metadata(field)
            field.end()
    return ConsumerGroupMemberMetadataValue(
        instance_id, rack_id, client_id, client_host, topic_names, regex,
        rebalance_timeout_ms, server_assignor, classic,
    )


def _decode_target_metadata(r: _Reader) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = r.i32()
    r.skip_tagged_fields()  # 4.3's AssignmentTimestamp (tag 0)
    return ConsumerGroupTargetAssignmentMetadataValue(epoch)


def _decode_target_member(r: _Reader) -> ConsumerGroupTargetAssignmentMemberValue:
    partitions = r.topic_partitions()
    r.skip_tagged_fields()
    return ConsumerGroupTargetAssignmentMemberValue(partitions)


def _decode_current_assignment(r: _Reader) -> ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch = r.i32()
    previous = r.i32()
    state = r.i8()
    assigned = r.topic_partitions()
    pending = r.topic_partitions()
    r.skip_tagged_fields()
    return ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch, previous, state, assigned, pending
    )


def _decode_regular_expression(r: _Reader) -> ConsumerGroupRegularExpressionValue:
    topics = r.strings()
    version = r.i64()
    timestamp = r.i64()
    r.skip_tagged_fields()
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp)


_VALUE_DECODERS: dict[int, Callable[[_Reader], ConsumerGroupValue]] = {
    3: _decode_group_metadata,
    4: _decode_partition_metadata,
    5: _decode_member_metadata,
    6: _decode_target_metadata,
    7: _decode_target_member,
    8: _decode_current_assignment,
    16: _decode_regular_expression,
}


# -- primitives -------------------------------------------------------------------------


def _string(text: str) -> bytes:
    """A non-flexible (key) string: int16 length + UTF-8."""
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit a record key")
    return _I16.pack(len(data)) + data


class _Writer:
    """The flexible encoding of a value, after its int16 version."""

    __slots__ = ("out",)

    def __init__(self, version: bool = True) -> None:
        self.out = bytearray(_I16.pack(VALUE_VERSION) if version else b"")

    def done(self) -> bytes:
        return bytes(self.out)

    def raw(self, data: bytes) -> None:
        self.out += data

    def i8(self, value: int) -> None:
        self.out += _I8.pack(value)

    def i32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def uvarint(self, value: int) -> None:
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def uuid(self, value: uuid.UUID) -> None:
        self.out += value.bytes

    def string(self, text: str | None) -> None:
        if text is None:
            self.uvarint(0)
            return
        data = text.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.out += data

    def bytes_(self, data: bytes) -> None:
        self.uvarint(len(data) + 1)
        self.out += data

    def array_length(self, n: int) -> None:
        self.uvarint(n + 1)

    def strings(self, items: tuple[str, ...]) -> None:
        self.array_length(len(items))
        for item in items:
            self.string(item)

    def topic_partitions(self, items: tuple[TopicPartitions, ...]) -> None:
        self.array_length(len(items))
        for tp in items:
            self.uuid(tp.topic_id)
            self.array_length(len(tp.partitions))
            for p in tp.partitions:
                self.i32(p)
            self.no_tagged_fields()

    def no_tagged_fields(self) -> None:
        self.uvarint(0)


_T = TypeVar("_T")


class _Reader:
    """Bounded reads of the flexible encoding; every failure names what was read."""

    __slots__ = ("data", "end_pos", "pos", "what")

    def __init__(self, data: bytes, what: str, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end_pos = len(data) if end is None else end
        self.what = what

    def error(self, message: str) -> RecordFormatError:
        return RecordFormatError(f"{self.what}: {message} (at byte {self.pos})")

    def remaining(self) -> int:
        return self.end_pos - self.pos

    def _take(self, n: int) -> bytes:
        if n < 0 or n > self.remaining():
            raise self.error(f"ends early: {n} bytes wanted, {self.remaining()} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def end(self) -> None:
        if self.pos != self.end_pos:
            raise self.error(f"{self.remaining()} bytes left over")

    def i8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(_UUID_SIZE))

    def uvarint(self) -> int:
        value = 0
        for i in range(_MAX_VARINT_BYTES):
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                return value
        raise self.error("unsigned varint longer than 5 bytes")

    def _text(self, n: int) -> str:
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"string is not UTF-8 ({exc.reason})") from None

    def key_string(self) -> str:
        """A string of a key: int16 length + UTF-8."""
        n = self.i16()
        if n < 0:
            raise self.error("null string in a key")
        return self._text(n)

    def string(self) -> str:
        """A compact string of a value."""
        text = self.nullable_string()
        if text is None:
            raise self.error("null where a string is required")
        return text

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0:
            raise self.error("null where bytes are required")
        return self._take(n)

    def array(self, item: Callable[[_Reader], _T], min_item_size: int) -> tuple[_T, ...]:
        """A compact array of ``item``s, each at least ``min_item_size`` bytes: a count
        the bytes left cannot hold is refused before anything is read."""
        n = self.uvarint() - 1
        if n < 0:
            raise self.error("null where an array is required")
        if n * min_item_size > self.remaining():
            raise self.error(
                f"array of {n} items cannot fit in the {self.remaining()} bytes left"
            )
        return tuple(item(self) for _ in range(n))

    def strings(self) -> tuple[str, ...]:
        return self.array(_Reader.string, min_item_size=1)

    def int32s(self) -> tuple[int, ...]:
        n = self.uvarint() - 1
        if n < 0:
            raise self.error("null where an array is required")
        if n * 4 > self.remaining():
            raise self.error(f"array of {n} int32 cannot fit in the {self.remaining()} "
                             "bytes left")
        raw = self._take(n * 4)
        return struct.unpack(f">{n}i", raw)

    def topic_partitions(self) -> tuple[TopicPartitions, ...]:
        def item(r: _Reader) -> TopicPartitions:
            topic_id = r.uuid()
            partitions = r.int32s()
            r.skip_tagged_fields()
            return TopicPartitions(topic_id, partitions)

        return self.array(item, min_item_size=_UUID_SIZE + 2)

    def tagged_fields(self) -> list[tuple[int, _Reader]]:
        """(tag, reader over the field's bytes) per tagged field, in order."""
        fields = []
        count = self.uvarint()
        if count > self.remaining():
            raise self.error(f"{count} tagged fields cannot fit in the bytes left")
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise self.error(f"tagged field {tag} after {last}: tags must increase")
            last = tag
            size = self.uvarint()
            start = self.pos
            self._take(size)
            fields.append((tag, _Reader(self.data, self.what, start, start + size)))
        return fields

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()
