"""Storage errors, each naming the Kafka error code the broker answers with.

Storage does not import the protocol room: each error carries ``kafka_error``, the name of
its Kafka error code (``kio.schema.errors.ErrorCode`` member), and the server maps it.
"""

from __future__ import annotations


class StorageError(Exception):
    kafka_error = "UNKNOWN_SERVER_ERROR"


class KafkaStorageError(StorageError):
    """A disk I/O error took a log dir offline (Kafka's KafkaStorageException)."""

    kafka_error = "KAFKA_STORAGE_ERROR"


class OffsetOutOfRangeError(StorageError):
    kafka_error = "OFFSET_OUT_OF_RANGE"


class RecordTooLargeError(StorageError):
    """A batch is larger than the topic's ``max.message.bytes``."""

    kafka_error = "MESSAGE_TOO_LARGE"


class CorruptRecordError(StorageError):
    """Bad CRC, magic, or framing (Kafka's CorruptRecordException)."""

    kafka_error = "CORRUPT_MESSAGE"


class InvalidRecordBatchError(StorageError):
    """A well-formed batch that breaks a rule (offsets, timestamps, missing key)."""

    kafka_error = "INVALID_RECORD"


class InvalidTimestampError(StorageError):
    kafka_error = "INVALID_TIMESTAMP"


class LogDirNotFoundError(StorageError):
    kafka_error = "LOG_DIR_NOT_FOUND"
