"""Errors that name the Kafka error code the broker answers with, and storage's own.

The rooms below the server do not import the protocol room: an error raised there that a
client must see carries ``kafka_error``, the name of its Kafka error code (upper-case, a
``kio.schema.errors.ErrorCode`` member), and the server maps it
(``server/handlers/_errors.py``). :class:`ApiError` is their one base (Kafka's
``ApiException``); storage's errors are here, the cluster's in ``cluster/errors.py``.
"""

from __future__ import annotations


class ApiError(Exception):
    """An error answered with the Kafka error code ``kafka_error`` names."""

    kafka_error = "UNKNOWN_SERVER_ERROR"


class StorageError(ApiError):
    record_errors: tuple[tuple[int, str], ...] = ()
    """The records a rule refused, as (index of the record in its batch, why): Produce v8+
    answers them per record (KIP-467, Kafka's RecordValidationException)."""


class KafkaStorageError(StorageError):
    """A disk I/O error took a log dir offline (Kafka's KafkaStorageException)."""

    kafka_error = "KAFKA_STORAGE_ERROR"


class ResourceLimitError(StorageError):
    """The process ran out of a resource (descriptors, memory) during one operation: that
    operation fails, the log dir stays online (see :mod:`odradek.storage.dir_failure`).

    REQUEST_TIMED_OUT, not KAFKA_STORAGE_ERROR: the latter tells clients the replica's disk
    is gone (producers and consumers refresh metadata and look for another leader; the
    controller would move leadership away) and it is not. REQUEST_TIMED_OUT is retriable
    for producers (they retry with backoff within ``delivery.timeout.ms``) and for admin
    clients it surfaces as a TimeoutException callers already retry on; a descriptor shortage
    is usually transient (a burst of topics, a pile of connections). UNKNOWN_SERVER_ERROR
    would make a Java producer drop the batch as non-retriable."""

    kafka_error = "REQUEST_TIMED_OUT"


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


def with_record_errors(
    exc: StorageError, record_errors: list[tuple[int, str]]
) -> StorageError:
    """``exc`` carrying the records it refused (KIP-467)."""
    exc.record_errors = tuple(record_errors)
    return exc


def record_errors_summary(record_errors: list[tuple[int, str]]) -> str:
    """Kafka's message for a batch refused record by record (LogValidator)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                      for i, m in record_errors[:3])
    return (f"One or more records have been rejected due to {len(record_errors)} record "
            f"errors in total, and only showing the first three errors at most: [{shown}]")


class LogDirNotFoundError(StorageError):
    kafka_error = "LOG_DIR_NOT_FOUND"
