"""Control records: the commit and abort markers of transactions (Kafka's ControlRecordType
and EndTransactionMarker, KIP-98).

How it works: a control batch has the control bit (and, for a marker, the transactional
bit) set in its attributes, the producer id and epoch of the transaction it ends, no
sequence number, and exactly one record, whose key and value are::

    key    version            int16  0
           type               int16  0 ABORT, 1 COMMIT (other types are not markers)
    value  version            int16  0
           coordinator_epoch  int32  the epoch of the transaction coordinator that wrote it

Readers take the key's type from the record alone; the batch header says whose
transaction it is. Built by :func:`~odradek.records.builder.build_one_record_batch`, byte
for byte what :class:`~odradek.records.builder.BatchBuilder` builds, so the layout and CRC
rules are those of every batch.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    iter_records,
)
from odradek.records.builder import build_one_record_batch

__all__ = [
    "ControlType",
    "EndTransactionMarker",
    "build_end_txn_marker",
    "read_end_txn_marker",
]

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
# A control batch holds one small record: an uncompressed marker batch is 61 bytes of
# header and about 20 of record. Reading this much after the header always covers it.
MARKER_BATCH_MAX = BATCH_HEADER_SIZE + 64


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class EndTransactionMarker(NamedTuple):
    control_type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type is ControlType.COMMIT


def build_end_txn_marker(
    producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
    timestamp: int, partition_leader_epoch: int = -1,
) -> bytes:
    """The control batch (offset 0, assigned on append) ending a transaction."""
    kind = ControlType.COMMIT if committed else ControlType.ABORT
    return build_one_record_batch(
        _KEY.pack(CONTROL_KEY_VERSION, kind),
        _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch), timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
        control=True, partition_leader_epoch=partition_leader_epoch)


def read_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTransactionMarker | None:
    """The marker a control batch holds; None for a control record of another type (Kafka
    has types beyond the markers, which a partition's state ignores) or an empty batch. Raises
    :class:`InvalidRecordError` on a control batch that does not decode."""
    header = BatchHeader.parse(batch)
    if not header.is_control:
        raise InvalidRecordError("control", "not a control batch")
    if header.record_count == 0:
        return None  # emptied by the cleaner, which keeps a group's last batch
    for record in iter_records(batch):
        key = record.key
        if key is None or len(key) < _KEY.size:
            raise InvalidRecordError("control", "control record without a valid key")
        _version, kind = _KEY.unpack_from(key)
        if kind not in (ControlType.ABORT, ControlType.COMMIT):
            return None
        value = record.value
        if value is None or len(value) < _VALUE.size:
            raise InvalidRecordError("control", "end transaction marker without a valid value")
        _value_version, coordinator_epoch = _VALUE.unpack_from(value)
        return EndTransactionMarker(ControlType(kind), coordinator_epoch)
    raise InvalidRecordError("control", "control batch without a record")
