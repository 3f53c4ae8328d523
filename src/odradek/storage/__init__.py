"""Physical storage in Kafka's on-disk format: segments, indexes, partition logs, log dirs.

Disk format = wire format = Kafka's format (older Kafkas' message formats v0/v1 read too): a
partition is a directory ``<topic>-<partition>`` of segments, each a ``.log`` of record
batches exactly as received (offsets rewritten), a sparse ``.index`` and a ``.timeindex``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: the package's names and the module each lives in, imported on first use (PEP 562): a
#: tool that reads one file format (``odradek dump-log``, ``status``) takes
#: ``odradek.storage.files`` without the partition log and the log manager, and every
#: ``odradek`` command imports its sub-commands' modules (issue 51)
_LAZY = {
    "LogConfig": "config",
    "CorruptRecordError": "errors",
    "InvalidRecordBatchError": "errors",
    "KafkaStorageError": "errors",
    "OffsetOutOfRangeError": "errors",
    "RecordTooLargeError": "errors",
    "StorageError": "errors",
    "FetchDataInfo": "log",
    "LogAppendInfo": "log",
    "PartitionLog": "log",
    "LogManager": "manager",
    "TopicPartition": "manager",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
