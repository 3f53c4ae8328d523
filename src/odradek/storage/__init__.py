"""Physical storage in Kafka's on-disk format: segments, indexes, partition logs, log dirs.

Disk format = wire format = Kafka's format (older Kafkas' message formats v0/v1 read too): a
partition is a directory ``<topic>-<partition>`` of segments, each a ``.log`` of record
batches exactly as received (offsets rewritten), a sparse ``.index`` and a ``.timeindex``.
"""

from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptRecordError,
    InvalidRecordBatchError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from odradek.storage.log import FetchDataInfo, LogAppendInfo, PartitionLog
from odradek.storage.manager import LogManager, TopicPartition

__all__ = [
    "CorruptRecordError",
    "FetchDataInfo",
    "InvalidRecordBatchError",
    "KafkaStorageError",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordTooLargeError",
    "StorageError",
    "TopicPartition",
]
