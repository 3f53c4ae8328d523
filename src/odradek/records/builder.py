"""Build RecordBatch v2 bytes: used by tests, the log cleaner, control records and the
coordinators' records (:func:`build_one_record_batch`, one record per state change).

The builder encodes each record (see :mod:`odradek.records.batch` for the layout),
compresses the concatenated records with the batch codec, fills in the header and computes
the CRC32C over attributes..end. Offsets within the batch are given explicitly so that the
cleaner can rebuild batches with gaps (compacted offsets are preserved).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Header,
    TimestampType,
    compute_crc,
)
from odradek.records.compression import CompressionType, compress
from odradek.records.varint import encode_varint, encode_varlong

_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40


def _encode_bytes(value: bytes | None) -> bytes:
    if value is None:
        return encode_varint(-1)
    return encode_varint(len(value)) + value


@dataclass(slots=True)
class BatchBuilder:
    """Accumulates records, then :meth:`build` returns the batch bytes."""

    compression: CompressionType = CompressionType.NONE
    base_offset: int = 0
    base_timestamp: int | None = None
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    is_transactional: bool = False
    is_control: bool = False
    delete_horizon_ms: int | None = None
    # The cleaner keeps a rebuilt batch's original offset span (and so its last sequence)
    # even when its last records were removed.
    last_offset_delta_override: int | None = None
    _records: list[bytes] = field(default_factory=list)
    _max_timestamp: int = -1
    _last_offset_delta: int = -1

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header | tuple[str, bytes | None]] = (),
        offset_delta: int | None = None,
    ) -> None:
        if self.base_timestamp is None:
            self.base_timestamp = (
                self.delete_horizon_ms if self.delete_horizon_ms is not None else timestamp
            )
        if offset_delta is None:
            offset_delta = self._last_offset_delta + 1
        if offset_delta <= self._last_offset_delta:
            raise ValueError("offset deltas must increase within a batch")
        body = bytearray(b"\x00")  # record attributes: unused, always 0
        body += encode_varlong(timestamp - self.base_timestamp)
        body += encode_varint(offset_delta)
        body += _encode_bytes(key)
        body += _encode_bytes(value)
        body += encode_varint(len(headers))
        for hkey, hvalue in headers:
            body += _encode_bytes(hkey.encode("utf-8"))
            body += _encode_bytes(hvalue)
        self._records.append(encode_varint(len(body)) + bytes(body))
        self._last_offset_delta = offset_delta
        self._max_timestamp = max(self._max_timestamp, timestamp)

    def __len__(self) -> int:
        return len(self._records)

    def build(self) -> bytes:
        if not self._records:
            raise ValueError("a batch needs at least one record")
        payload = compress(self.compression, b"".join(self._records))
        attributes = int(self.compression)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= 0x08
        if self.is_transactional:
            attributes |= _TRANSACTIONAL
        if self.is_control:
            attributes |= _CONTROL
        if self.delete_horizon_ms is not None:
            attributes |= _DELETE_HORIZON
        assert self.base_timestamp is not None
        last_offset_delta = self._last_offset_delta
        if self.last_offset_delta_override is not None:
            last_offset_delta = max(last_offset_delta, self.last_offset_delta_override)
        header = HEADER_STRUCT.pack(
            self.base_offset,
            HEADER_STRUCT.size - LOG_OVERHEAD + len(payload),
            self.partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            last_offset_delta,
            self.base_timestamp,
            self._max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(self._records),
        )
        batch = bytearray(header + payload)
        struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
        assert ATTRIBUTES_OFFSET == CRC_OFFSET + 4
        return bytes(batch)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    timestamp: int = 0,
    compression: CompressionType = CompressionType.NONE,
    base_offset: int = 0,
) -> bytes:
    """Convenience for tests: one batch of (key, value) pairs sharing a timestamp."""
    builder = BatchBuilder(compression=compression, base_offset=base_offset)
    for key, value in records:
        builder.append(key, value, timestamp)
    return builder.build()


def build_one_record_batch(
    key: bytes | None, value: bytes | None, timestamp: int, *,
    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
    transactional: bool = False, control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The batch :class:`BatchBuilder` builds for one uncompressed record without headers
    (offset delta 0, no sequence), byte for byte, in fewer steps: a coordinator writes one
    such record per state change, and a transaction marker is one."""
    body = b"".join((b"\x00\x00\x00", _encode_bytes(key), _encode_bytes(value), b"\x00"))
    record = encode_varint(len(body)) + body
    attributes = (_TRANSACTIONAL if transactional else 0) | (_CONTROL if control else 0)
    header = HEADER_STRUCT.pack(
        0, HEADER_STRUCT.size - LOG_OVERHEAD + len(record), partition_leader_epoch,
        CURRENT_MAGIC, 0, attributes, 0, timestamp, timestamp, producer_id, producer_epoch,
        NO_SEQUENCE, 1,
    )
    batch = bytearray(header + record)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)
