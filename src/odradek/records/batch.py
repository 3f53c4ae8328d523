"""RecordBatch v2 (magic 2): header view, validation and lazy record iteration.

Follows Kafka's ``DefaultRecordBatch`` (KIP-98). The on-wire and on-disk layout of a batch:

    offset  size  field
         0     8  base_offset            int64, rewritten by the broker on append
         8     4  batch_length           int32, bytes after this field (total - 12)
        12     4  partition_leader_epoch int32, set by the leader
        16     1  magic                  int8, always 2 here
        17     4  crc                    uint32, CRC32C over attributes..end of batch
        21     2  attributes             int16: bits 0-2 codec, 3 timestamp type (1 =
                                         LogAppendTime), 4 transactional, 5 control,
                                         6 has delete horizon (KIP-534)
        23     4  last_offset_delta      int32
        27     8  base_timestamp         int64
        35     8  max_timestamp          int64
        43     8  producer_id            int64
        51     2  producer_epoch         int16
        53     4  base_sequence          int32
        57     4  record_count           int32
        61     …  records (compressed as a whole when the codec is not none)

The CRC rule: the CRC covers bytes 21..end, so the broker may rewrite ``base_offset``,
``batch_length`` never, and ``partition_leader_epoch`` without recomputing it. Offsets of
the fields are derived from the struct below, never typed in.

Each record inside: length varint, attributes int8, timestamp_delta varlong, offset_delta
varint, key length varint (-1 = null) + key, value length varint (-1 = null) + value,
header count varint, then per header: key length varint + key (utf-8), value length varint
(-1 = null) + value.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from odradek.records.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CompressionError,
    CompressionType,
    compress,
    decompress,
)
from odradek.records.varint import VarintError, read_varint, read_varlong

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "BatchesInfo",
    "CompressionType",
    "Header",
    "InvalidRecordError",
    "Record",
    "TimestampType",
    "decode_records",
    "iter_batches",
    "iter_records",
    "validate_batches",
]

# The header as one struct; every field offset below is derived from it.
_HEADER_FIELDS = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("record_count", "i"),
)
HEADER_STRUCT = struct.Struct(">" + "".join(f for _, f in _HEADER_FIELDS))
BATCH_HEADER_SIZE = HEADER_STRUCT.size  # 61


def _field_offset(name: str) -> int:
    fmt = ">"
    for field_name, code in _HEADER_FIELDS:
        if field_name == name:
            return struct.calcsize(fmt)
        fmt += code
    raise KeyError(name)


BASE_OFFSET_OFFSET = _field_offset("base_offset")
LENGTH_OFFSET = _field_offset("batch_length")
PARTITION_LEADER_EPOCH_OFFSET = _field_offset("partition_leader_epoch")
MAGIC_OFFSET = _field_offset("magic")
CRC_OFFSET = _field_offset("crc")
ATTRIBUTES_OFFSET = _field_offset("attributes")
MAX_TIMESTAMP_OFFSET = _field_offset("max_timestamp")
# batch_length counts the bytes after itself: the log overhead is base offset + length.
LOG_OVERHEAD = LENGTH_OFFSET + 4  # 12
RECORDS_OFFSET = BATCH_HEADER_SIZE

CURRENT_MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_COMPRESSION_MASK = 0x07
_NO_CODEC = int(CompressionType.NONE)
_MAX_CODEC = int(CompressionType.ZSTD)
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40

# The smallest possible record: length, attributes, timestamp delta, offset delta, key
# length, value length and header count, one byte each.
MIN_RECORD_SIZE = 7

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class InvalidRecordError(ValueError):
    """A batch broke the format. ``reason`` names the rule, for logs and error messages.

    The broker maps it to CORRUPT_MESSAGE (bad CRC, magic, lengths) or INVALID_RECORD.
    """

    def __init__(self, reason: str, message: str, position: int = 0) -> None:
        super().__init__(message)
        self.reason = reason
        self.position = position


class BatchHeader(NamedTuple):
    """A decoded copy of the 61-byte header; ``position`` is where the batch starts.

    A NamedTuple rather than a frozen dataclass: the produce path builds one per batch, and
    a tuple is built in C where a frozen dataclass's ``__init__`` runs in Python, one
    ``object.__setattr__`` per field."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0

    @classmethod
    def parse(
        cls, buf: bytes | bytearray | memoryview, position: int = 0, at: int | None = None
    ) -> BatchHeader:
        """Decode the header at ``position`` of ``buf``; ``at`` overrides the recorded
        position (a header read alone from a file at ``at``)."""
        fields: tuple[int, ...] = HEADER_STRUCT.unpack_from(buf, position)
        return cls._make((*fields, position if at is None else at))

    @property
    def size(self) -> int:
        """Total bytes of the batch, log overhead included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


class Header(NamedTuple):
    key: str
    value: bytes | None


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    attributes: int = 0


class BatchesInfo(NamedTuple):
    """What validation learnt about a buffer of batches (Kafka's LogAppendInfo, in part)."""

    batches: tuple[BatchHeader, ...]
    record_count: int
    max_timestamp: int
    offset_of_max_timestamp_delta: int  # index into ``batches`` of the batch holding it
    size: int

    @property
    def shallow_count(self) -> int:
        return len(self.batches)


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC32C over attributes..end, as stored in the header."""
    return int(crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


def iter_batches(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchHeader]:
    """Walk batch headers without validating them; stops at the first incomplete batch."""
    end = len(buf)
    pos = start
    while pos + BATCH_HEADER_SIZE <= end:
        (length,) = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > end:
            return
        yield BatchHeader.parse(buf, pos)
        pos += LOG_OVERHEAD + length


def validate_batch(
    buf: bytes | bytearray | memoryview, position: int, strict_offsets: bool = True
) -> BatchHeader:
    """Validate the batch at ``position`` of ``buf`` and return its header.

    ``strict_offsets`` is the producer rule (Kafka's LogValidator): record_count must equal
    last_offset_delta + 1. Compacted batches written by the cleaner have gaps, so replication
    and recovery validate with it off (record_count ≤ last_offset_delta + 1).
    """
    remaining = len(buf) - position
    if remaining < BATCH_HEADER_SIZE:
        raise InvalidRecordError(
            "short_header",
            f"batch at position {position} has {remaining} bytes, fewer than the "
            f"{BATCH_HEADER_SIZE}-byte header",
            position,
        )
    header = BatchHeader.parse(buf, position)
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidRecordError(
            "short_length",
            f"batch length {header.batch_length} is smaller than the header",
            position,
        )
    if header.size > remaining:
        raise InvalidRecordError(
            "truncated",
            f"batch length {header.batch_length} runs {header.size - remaining} bytes "
            "past the end of the buffer",
            position,
        )
    if header.magic != CURRENT_MAGIC:
        raise InvalidRecordError(
            "magic", f"unsupported magic byte {header.magic}: only RecordBatch v2 is accepted",
            position,
        )
    view = memoryview(buf)[position : position + header.size]
    actual = compute_crc(view)
    if actual != header.crc:
        raise InvalidRecordError(
            "crc", f"CRC32C mismatch: header says {header.crc}, data gives {actual}", position
        )
    codec = header.attributes & _COMPRESSION_MASK
    if codec > _MAX_CODEC:
        raise InvalidRecordError("codec", f"unknown compression codec {codec}", position)
    count = header.record_count
    if count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordError(
            "record_count",
            f"negative record count {count} or last offset delta {header.last_offset_delta}",
            position,
        )
    if strict_offsets:
        if count == 0 or count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                "record_count",
                f"record count {count} does not match last offset delta "
                f"{header.last_offset_delta}",
                position,
            )
    elif count > header.last_offset_delta + 1:
        raise InvalidRecordError(
            "record_count",
            f"record count {count} exceeds the offset range {header.last_offset_delta + 1}",
            position,
        )
    payload = header.batch_length - (BATCH_HEADER_SIZE - LOG_OVERHEAD)
    if codec == _NO_CODEC and count * MIN_RECORD_SIZE > payload:
        raise InvalidRecordError(
            "record_count",
            f"record count {count} cannot fit in {payload} bytes of records",
            position,
        )
    return header


def validate_batches(
    buf: bytes | bytearray | memoryview, strict_offsets: bool = True
) -> BatchesInfo:
    """Validate every batch of ``buf`` (one produce partition's records). Per batch, not
    per record: CRC32C runs in C over the whole batch. Raises on the first bad batch."""
    pos = 0
    end = len(buf)
    headers: list[BatchHeader] = []
    records = 0
    max_ts = NO_TIMESTAMP
    max_ts_index = -1
    if end == 0:
        raise InvalidRecordError("empty", "no record batches in the request")
    while pos < end:
        header = validate_batch(buf, pos, strict_offsets)
        headers.append(header)
        records += header.record_count
        if header.max_timestamp > max_ts:
            max_ts = header.max_timestamp
            max_ts_index = len(headers) - 1
        pos += header.size
    return BatchesInfo(tuple(headers), records, max_ts, max_ts_index, end)


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at ``position`` (outside the CRC)."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp`` as max timestamp and recompute the
    CRC (both fields are covered by it), as Kafka's LogValidator does."""
    (attributes,) = struct.unpack_from(">h", buf, position + ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes | _TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    (length,) = _INT32.unpack_from(buf, position + LENGTH_OFFSET)
    view = memoryview(buf)[position : position + LOG_OVERHEAD + length]
    struct.pack_into(">I", buf, position + CRC_OFFSET, compute_crc(view))


def records_payload(
    batch: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> bytes | memoryview:
    """The batch's records, decompressed when the codec says so."""
    header = BatchHeader.parse(batch)
    raw = memoryview(batch)[RECORDS_OFFSET : header.size]
    if header.compression == CompressionType.NONE:
        return raw
    try:
        return decompress(header.compression, raw, max_size)
    except CompressionError as exc:
        raise InvalidRecordError("compression", str(exc)) from exc


def recompress(
    batch: bytes | bytearray | memoryview, codec: CompressionType,
    max_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> bytes:
    """The same batch with its records compressed by ``codec`` (a topic's
    ``compression.type``). The records section is one blob, so this is decompress +
    compress in C and a new header (attributes, length, CRC); no record is parsed."""
    header = BatchHeader.parse(batch)
    payload = records_payload(batch, max_size)
    body = compress(codec, payload)
    attributes = (header.attributes & ~_COMPRESSION_MASK) | int(codec)
    out = bytearray(HEADER_STRUCT.pack(
        header.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
        header.partition_leader_epoch, header.magic, 0, attributes, header.last_offset_delta,
        header.base_timestamp, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, header.record_count,
    ))
    out += body
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


def iter_records(
    batch: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> Iterator[Record]:
    """Lazily decode the records of one batch (decompressing it first if needed)."""
    header = BatchHeader.parse(batch)
    yield from decode_records(
        records_payload(batch, max_size), header.record_count, header.base_offset,
        header.base_timestamp, header.max_timestamp,
        header.timestamp_type == TimestampType.LOG_APPEND_TIME,
    )


def decode_records(
    payload: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
    max_timestamp: int, log_append_time: bool,
) -> Iterator[Record]:
    """Decode ``count`` records from a batch's (decompressed) records section, with the
    rules of Kafka's ``DefaultRecord.readFrom``; LogAppendTime batches give every record
    the batch's max_timestamp."""
    pos = 0
    end = len(payload)
    try:
        for _ in range(count):
            length, pos = read_varint(payload, pos)
            record_end = pos + length
            if length < MIN_RECORD_SIZE - 1 or record_end > end:
                raise InvalidRecordError("record_length", f"record length {length} is invalid")
            attributes = payload[pos]
            pos += 1
            ts_delta, pos = read_varlong(payload, pos)
            offset_delta, pos = read_varint(payload, pos)
            key, pos = _read_bytes(payload, pos, record_end)
            value, pos = _read_bytes(payload, pos, record_end)
            header_count, pos = read_varint(payload, pos)
            if header_count < 0 or header_count > record_end - pos:
                raise InvalidRecordError("headers", f"invalid header count {header_count}")
            headers = []
            for _h in range(header_count):
                hkey, pos = _read_bytes(payload, pos, record_end)
                if hkey is None:
                    raise InvalidRecordError("headers", "null header key")
                hvalue, pos = _read_bytes(payload, pos, record_end)
                headers.append(Header(hkey.decode("utf-8", "replace"), hvalue))
            if pos != record_end:
                raise InvalidRecordError("record_length", "record length does not match its fields")
            timestamp = max_timestamp if log_append_time else base_timestamp + ts_delta
            yield Record(base_offset + offset_delta, timestamp, key, value, tuple(headers),
                         attributes)
    except VarintError as exc:
        raise InvalidRecordError("varint", str(exc)) from exc
    if pos != end:
        raise InvalidRecordError("record_count", "bytes remain after the last record")


def _read_bytes(buf: bytes | memoryview, pos: int, limit: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > limit:
        raise InvalidRecordError("record_length", f"field length {length} runs past its record")
    return bytes(buf[pos : pos + length]), pos + length
