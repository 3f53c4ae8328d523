"""Records of ``__transaction_state``: Kafka's key and value layouts, byte for byte.

The transaction coordinator's state lives in the compacted internal topic
``__transaction_state`` (Kafka's ``TransactionLog`` / ``TransactionStateManager``, KIP-98).
A transactional id's records all go to one partition,
``abs(String.hashCode(transactional_id)) % transaction.state.log.num.partitions``
(:func:`partition_for`, the same hash the offsets topic uses for groups), and its
coordinator is that partition's leader. Compaction keeps the newest value per key; a null
value (tombstone) removes an expired id.

Key and value start with an int16 version; integers are big-endian. Version 0 uses
int16-length strings and int32-count arrays; version 1 of the value is flexible (KIP-482:
unsigned varint length or count + 1, and tagged fields after each struct)::

    TransactionLogKey v0      transactional_id string

    TransactionLogValue v0-1  producer_id int64
                              producer_epoch int16
                              transaction_timeout_ms int32
                              transaction_status int8   (TransactionState.id)
                              transaction_partitions nullable array of:
                                  topic string, partition_ids array of int32
                              transaction_last_update_timestamp_ms int64
                              transaction_start_timestamp_ms int64
                    v1 tags   0: previous_producer_id int64 (default -1)
                              1: next_producer_id int64 (default -1)
                              2: client_transaction_version int16 (default 0)

An Empty transaction's partitions are written as null (Kafka's ``valueToBytes``) and read
as none whatever the record says. Odradek writes value version 0 unless asked for 1, as
Kafka does for clients before Transactions V2 (``transactionLogValueVersion``), so older
brokers can still read the log (KIP-915); tags are written only in version 1 and only
when they differ from their defaults.

Records are read with the bounded reader requests use
(:class:`odradek.protocol.primitives.BodyReader`): every count and length is checked
against the bytes left before anything loops or allocates, so decoding a record costs at
most its size; a bad record is :class:`TransactionLogFormatError`.
Bytes after the last field are ignored and unknown tags (newer Kafkas add some) skipped,
as Kafka's generated readers do.
"""

from __future__ import annotations

import contextlib
import struct
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from odradek.coordinator.group_records import java_string_hash
from odradek.coordinator.transaction_state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import BodyReader, read_uvarint, refuse_count

__all__ = [
    "TRANSACTION_LOG_KEY_VERSION",
    "TRANSACTION_LOG_VALUE_VERSION",
    "TRANSACTION_STATE_TOPIC",
    "TransactionLogFormatError",
    "TransactionLogKey",
    "TransactionLogValue",
    "decode_key",
    "decode_value",
    "partition_for",
    "tombstone",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_LOG_KEY_VERSION = 0
# The version written by default; 1 (flexible) is read and written on request.
TRANSACTION_LOG_VALUE_VERSION = 0
_FLEXIBLE_VALUE = 1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")  # written; read through BodyReader
_I64 = struct.Struct(">q")
# Smallest encodings, to bound counts: a topic entry is a string length and an array
# count (plus tagged fields when flexible); a partition id is an int32; a tagged field
# is at least a tag and a size.
_MIN_TOPIC_ENTRY = {False: 2 + 4, True: 1 + 1 + 1}
_MIN_PARTITION_ID = 4
_MIN_TAGGED_FIELD = 2


class TransactionLogFormatError(ValueError):
    """A key or value of ``__transaction_state`` that cannot be decoded."""


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (Kafka's
    ``TransactionStateManager.partitionFor``: ``Utils.abs(hashCode) % partitions``)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- key -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str

    def encode(self) -> bytes:
        return _I16.pack(TRANSACTION_LOG_KEY_VERSION) + _string(self.transactional_id, False)


def decode_key(data: bytes) -> TransactionLogKey | None:
    """The key, or None for a key version this coordinator does not know, which loading
    skips (as Kafka's ``TransactionLog.readTxnRecordKey`` answers an unknown key)."""
    with _format_errors():
        return _decode_key(_Reader(data))


def _decode_key(r: _Reader) -> TransactionLogKey | None:
    version = r.i16()
    if version != TRANSACTION_LOG_KEY_VERSION:
        return None
    transactional_id = r.string(False)
    if transactional_id is None:
        raise TransactionLogFormatError("null transactional id in a transaction log key")
    return TransactionLogKey(transactional_id)


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    """The record that removes an expired (Dead) id once compacted: its key, no value."""
    return TransactionLogKey(transactional_id).encode(), None


# -- value -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @classmethod
    def from_transit(cls, transit: TxnTransitMetadata) -> TransactionLogValue:
        """What the coordinator writes for a prepared move (Kafka's ``valueToBytes``)."""
        if transit.state is TransactionState.DEAD:
            raise ValueError("a Dead transactional id is written as a tombstone")
        if transit.state is TransactionState.EMPTY and transit.topic_partitions:
            raise ValueError("an Empty transaction has no partitions")
        return cls(
            transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms,
            transit.state, transit.topic_partitions, transit.txn_last_update_timestamp,
            transit.txn_start_timestamp, transit.previous_producer_id,
            transit.next_producer_id, transit.client_transaction_version,
        )

    def to_metadata(self, transactional_id: str) -> TransactionMetadata:
        """The id as loaded from the log (Kafka's ``TransactionLog.read``): no pending
        move, and no last epoch, which the log does not keep (a KIP-360 retry of a bump
        that spans a coordinator move is therefore fenced, as in Kafka)."""
        return TransactionMetadata(
            transactional_id, self.producer_id,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=self.transaction_timeout_ms,
            state=self.state,
            topic_partitions=set(self.topic_partitions),
            txn_start_timestamp=self.start_timestamp_ms,
            txn_last_update_timestamp=self.last_update_timestamp_ms,
            client_transaction_version=self.client_transaction_version,
        )

    def encode(self, version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
        if version not in (0, _FLEXIBLE_VALUE):
            raise ValueError(f"unknown transaction log value version {version}")
        flexible = version >= _FLEXIBLE_VALUE
        out = bytearray(_I16.pack(version))
        out += _I64.pack(self.producer_id)
        out += _I16.pack(self.producer_epoch)
        out += _I32.pack(self.transaction_timeout_ms)
        out += _I8.pack(self.state.id)
        if self.state is TransactionState.EMPTY:
            out += _array_length(None, flexible)
        else:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, partition in sorted(self.topic_partitions):
                by_topic[topic].append(partition)
            out += _array_length(len(by_topic), flexible)
            for topic, partitions in by_topic.items():
                out += _string(topic, flexible)
                out += _array_length(len(partitions), flexible)
                for partition in partitions:
                    out += _I32.pack(partition)
                if flexible:
                    out += b"\x00"
        out += _I64.pack(self.last_update_timestamp_ms)
        out += _I64.pack(self.start_timestamp_ms)
        if flexible:
            tags: list[bytes] = []
            if self.previous_producer_id != NO_PRODUCER_ID:
                tags.append(_tagged(_TAG_PREVIOUS_PRODUCER_ID,
                                    _I64.pack(self.previous_producer_id)))
            if self.next_producer_id != NO_PRODUCER_ID:
                tags.append(_tagged(_TAG_NEXT_PRODUCER_ID, _I64.pack(self.next_producer_id)))
            if self.client_transaction_version != 0:
                tags.append(_tagged(_TAG_CLIENT_TRANSACTION_VERSION,
                                    _I16.pack(self.client_transaction_version)))
            out += _uvarint(len(tags)) + b"".join(tags)
        return bytes(out)


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """The value, or None for a tombstone (the id was removed). An unknown version is
    :class:`TransactionLogFormatError`; loading skips such a record, as Kafka's
    ``UnknownValueVersion``."""
    if data is None:
        return None
    with _format_errors():
        return _decode_value(_Reader(data))


def _decode_value(r: _Reader) -> TransactionLogValue:
    version = r.i16()
    if version not in (0, _FLEXIBLE_VALUE):
        raise TransactionLogFormatError(f"unknown transaction log value version {version}")
    flexible = version >= _FLEXIBLE_VALUE
    producer_id = r.i64()
    producer_epoch = r.i16()
    timeout_ms = r.i32()
    status = r.i8()
    try:
        state = TransactionState.from_id(status)
    except ValueError as exc:
        raise TransactionLogFormatError(str(exc)) from None
    partitions: set[TopicPartition] = set()
    for _ in range(r.elements(_MIN_TOPIC_ENTRY[flexible], flexible, "transaction partitions")):
        topic = r.string(flexible)
        if topic is None:
            raise TransactionLogFormatError("null topic in transaction partitions")
        for _ in range(r.elements(_MIN_PARTITION_ID, flexible, "partition ids")):
            partitions.add((topic, r.i32()))
        if flexible:
            r.skip_tagged_fields()
    last_update = r.i64()
    start = r.i64()
    previous_producer_id = next_producer_id = NO_PRODUCER_ID
    client_transaction_version = 0
    if flexible:
        for tag, payload in r.tagged_fields():
            if tag == _TAG_PREVIOUS_PRODUCER_ID:
                previous_producer_id = _fixed(_I64, payload, "previous producer id")
            elif tag == _TAG_NEXT_PRODUCER_ID:
                next_producer_id = _fixed(_I64, payload, "next producer id")
            elif tag == _TAG_CLIENT_TRANSACTION_VERSION:
                client_transaction_version = _fixed(_I16, payload, "client transaction version")
    if state is TransactionState.EMPTY:
        partitions.clear()
    return TransactionLogValue(
        producer_id, producer_epoch, timeout_ms, state, frozenset(partitions), last_update,
        start, previous_producer_id, next_producer_id, client_transaction_version,
    )


# -- primitives ------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode("utf-8")
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _array_length(n: int | None, flexible: bool) -> bytes:
    if flexible:
        return _uvarint(0 if n is None else n + 1)
    return _I32.pack(-1 if n is None else n)


def _tagged(tag: int, payload: bytes) -> bytes:
    return _uvarint(tag) + _uvarint(len(payload)) + payload


def _fixed(layout: struct.Struct, payload: bytes, what: str) -> int:
    if len(payload) != layout.size:
        raise TransactionLogFormatError(f"{what} of {len(payload)} bytes")
    return int(layout.unpack(payload)[0])


class _Reader(BodyReader):
    """The shared bounded body reader (:class:`~odradek.protocol.primitives.BodyReader`)
    with what the record format adds: int8, int64, unsigned varints, compact strings and
    arrays, tagged fields. Its errors are turned into :class:`TransactionLogFormatError`
    by :func:`_format_errors`."""

    __slots__ = ()

    def i8(self) -> int:
        return int(_I8.unpack(self.take(1, "int8"))[0])

    def i16(self) -> int:
        return self.int16()

    def i32(self) -> int:
        return self.int32()

    def i64(self) -> int:
        return int(_I64.unpack(self.take(8, "int64"))[0])

    def uvarint(self) -> int:
        if self.remaining <= 0:
            raise TransactionLogFormatError(f"record ends early at byte {self.pos}")
        try:
            value, self.pos = read_uvarint(self.buf, self.pos)
        except IndexError:
            raise TransactionLogFormatError(
                f"record ends early at byte {self.pos} (in a varint)") from None
        except InvalidRequestError:
            raise TransactionLogFormatError("unsigned varint longer than 5 bytes") from None
        return value

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            return None
        try:
            return bytes(self.take(n, "string")).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TransactionLogFormatError(f"string is not UTF-8: {exc}") from None

    def elements(self, min_size: int, flexible: bool, what: str) -> int:
        """An array's element count (null reads as 0), refused when the bytes left cannot
        hold that many elements of at least ``min_size`` bytes."""
        if not flexible:
            return self.count(min_size, what)
        n = self.uvarint() - 1
        if n <= 0:
            return 0
        if n * min_size > self.remaining:
            raise refuse_count(what, n, min_size, self.remaining)
        return n

    def tagged_fields(self) -> list[tuple[int, bytes]]:
        n = self.uvarint()
        if n * _MIN_TAGGED_FIELD > self.remaining:
            raise TransactionLogFormatError(
                f"{n} tagged fields, but only {self.remaining} bytes remain")
        fields = []
        for _ in range(n):
            tag = self.uvarint()
            fields.append((tag, bytes(self.take(self.uvarint(), "tagged field"))))
        return fields

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()


@contextlib.contextmanager
def _format_errors() -> Iterator[None]:
    """The shared reader's refusals (a short record, a count too large for the bytes
    left) as :class:`TransactionLogFormatError`."""
    try:
        yield
    except InvalidRequestError as exc:
        raise TransactionLogFormatError(f"record ends early or is malformed: {exc}") from None
