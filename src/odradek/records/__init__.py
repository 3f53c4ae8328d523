"""RecordBatch v2 (magic 2): the unit Kafka stores and ships; independent of storage.

Public surface:
- :class:`~odradek.records.batch.BatchHeader` — read-only view over the 61-byte header.
- :func:`~odradek.records.batch.validate_batches` — validate a buffer of batches.
- :class:`~odradek.records.builder.BatchBuilder` — build a batch (tests, cleaner, control records).
- :func:`~odradek.records.batch.iter_records` — lazy record iteration.
"""

from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CompressionType,
    Header,
    InvalidRecordError,
    Record,
    TimestampType,
    iter_batches,
    iter_records,
    validate_batches,
)
from odradek.records.builder import BatchBuilder

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchBuilder",
    "BatchHeader",
    "CompressionType",
    "Header",
    "InvalidRecordError",
    "Record",
    "TimestampType",
    "iter_batches",
    "iter_records",
    "validate_batches",
]
