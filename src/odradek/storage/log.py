"""A partition's log: an ordered list of segments (Kafka's UnifiedLog + LocalLog).

How it works:
- **Append** (leader): validate every batch (size, magic, CRC32C, offsets, timestamps — per
  batch, never per record), copy the request's bytes once, rewrite each batch's base offset
  (not covered by the CRC) and partition leader epoch, stamp LogAppendTime when the topic
  asks for it, roll the active segment if needed, and append the bytes as received. A batch
  the broker built itself (a coordinator's record, Kafka's ``AppendOrigin.COORDINATOR``;
  :meth:`PartitionLog.append_as_coordinator`) is not checked again for what only a
  client's batch can get wrong: its CRC (just computed), its keys on a compacted topic, its
  timestamps (the coordinator's clock); the size limit, offsets and producer state apply
  as to any append.
- **Read**: find the segment holding the offset (bisect over base offsets), let it translate
  the offset to a position through its sparse index, and return a file region bounded by
  ``max_bytes`` and by the high watermark (KIP-74: the first batch whole even if larger).
- **Roll** on ``segment.bytes``, ``segment.ms`` (+ jitter), a full index, or offsets that
  would not fit an index's 4-byte relative offset. The old segment's indexes are trimmed and
  it is flushed, which moves the recovery point.
- **Load** (:mod:`odradek.storage.log_loader`, Kafka's LogLoader): leftovers removed,
  ``.swap`` files completed, indexes rebuilt where missing or failing their sanity check,
  and after an unclean shutdown every segment from the recovery point on revalidated and a
  torn or corrupt tail truncated.
- **Transactions** (Kafka's UnifiedLog with ProducerStateManager, KIP-98): transactional
  batches open their producer's transaction; a commit or abort marker, appended by
  :meth:`PartitionLog.append_control_as_leader` for the transaction coordinator (or
  replicated), ends it, and an abort adds an entry to the active segment's ``.txnindex``.
  :attr:`PartitionLog.last_stable_offset` is the first offset of the oldest transaction
  not yet ended and replicated, bounded by the high watermark: ``read_committed`` reads
  stop there, and :meth:`PartitionLog.collect_aborted_transactions` names the aborted
  transactions a read returns records of.
- **Retention** deletes closed segments only (never the active one): older than
  ``retention.ms``, beyond ``retention.bytes``, or wholly below the log start offset. Their
  files are renamed ``.deleted`` and removed later, asynchronously.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from odradek.clock import now_ms
from odradek.histogram import Histogram
from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    NO_TIMESTAMP,
    BatchesInfo,
    BatchHeader,
    InvalidRecordError,
    iter_records,
    recompress,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
)
from odradek.records.compression import CompressionType
from odradek.records.control import ControlType, EndTransactionMarker, build_end_txn_marker
from odradek.storage import files, log_loader
from odradek.storage.config import LogConfig
from odradek.storage.dir_failure import LogDirFailureChannel
from odradek.storage.errors import (
    CorruptRecordError,
    InvalidRecordBatchError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    record_errors_summary,
    with_record_errors,
)
from odradek.storage.index import TimestampOffset
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.producer_state import BatchMetadata, CompletedTxn, ProducerStateManager
from odradek.storage.segment import AppendedBatch, BatchExtent, LogSegment
from odradek.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


class LogFlushStats:
    """Kafka's ``LogFlushStats`` (``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs``):
    one timer for every log's fsyncs, process-wide as Kafka's. Flushes run on worker
    threads, and are rare: a lock is cheap here."""

    def __init__(self) -> None:
        self.histogram = Histogram()
        self._lock = threading.Lock()

    def record(self, ns: int) -> None:
        with self._lock:
            self.histogram.record(ns)

    def snapshot(self) -> tuple[list[int], int]:
        with self._lock:
            return self.histogram.snapshot()


LOG_FLUSH_STATS = LogFlushStats()


class TruncationStats:
    """Truncations of logs' ends (a follower dropping what its leader does not have, or
    starting again at the leader's log start): how many, how many offsets they removed,
    and how many went below the high watermark the log knew, i.e. into what was
    acknowledged. Process-wide, as :data:`LOG_FLUSH_STATS` (one broker per process outside
    the tests); plain ints under a lock, truncations are rare."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.truncations = 0
        self.truncated_offsets = 0
        self.below_high_watermark = 0

    def record(self, removed: int, below_high_watermark: bool) -> None:
        with self._lock:
            self.truncations += 1
            self.truncated_offsets += removed
            self.below_high_watermark += below_high_watermark

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.truncations, self.truncated_offsets, self.below_high_watermark


TRUNCATION_STATS = TruncationStats()

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

# Batch errors that mean "the bytes are broken" (CORRUPT_MESSAGE) rather than "a well-formed
# batch breaks a rule" (INVALID_RECORD).
_CORRUPT_REASONS = frozenset(
    {"short_header", "short_length", "truncated", "magic", "crc", "codec", "empty"}
)
_INT32_MAX = (1 << 31) - 1
_CONTROL_MASK = 0x20  # the control bit of a batch's attributes (records/batch.py)
_TOPIC_CODECS = {
    "uncompressed": CompressionType.NONE, "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD,
}


class LogAppendInfo(NamedTuple):
    """What an append did (a named tuple: built once per partition per produce)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    valid_bytes: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """A fetch answer: a region of a segment file (``size`` may be 0) plus the offsets the
    response reports. ``fd`` stays open as long as this object holds its segment's file
    handle: a released or deleted segment's descriptor closes only when the last
    reference goes. An empty answer (``size`` 0) may name no file at all (``fd`` -1)."""

    fetch_offset: int
    fd: int
    position: int
    size: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    # The segment's FileHandle: keeps ``fd`` open while this answer is in use.
    segment: object = None
    # The region may hold v0/v1 entries (a segment of a Kafka before 0.11): fetchers get
    # it up-converted (records/legacy.py ``up_convert``), not as it is.
    legacy: bool = False
    # The last stable offset when read (-1: not asked for).
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions the region
    # may hold records of (None: read_uncommitted).
    aborted_transactions: list[tuple[int, int]] | None = None
    # The region ends inside its first batch (only without ``min_one_message``: the
    # batch is larger than ``max_bytes``): Kafka's ``FetchDataInfo.firstEntryIncomplete``.
    first_entry_incomplete: bool = False

    def read(self) -> bytes:
        return os.pread(self.fd, self.size, self.position) if self.size else b""


def _marker_of(committed: bool, coordinator_epoch: int) -> EndTransactionMarker:
    return EndTransactionMarker(
        ControlType.COMMIT if committed else ControlType.ABORT, coordinator_epoch)


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    topic, _, partition = dir_name.rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory")
    return topic, int(partition)


COMPACTED_KEYLESS_MESSAGE = "Compacted topic cannot accept message without key"


def _require_keys(
    records: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], name: str
) -> None:
    """Refuse a producer's batch holding a record without a key on a compacted topic
    (Kafka's LogValidator rule), naming every such record (KIP-467). Iterates records:
    compacted topics only."""
    view = memoryview(records)
    refused: list[tuple[int, str]] = []
    message = f"{COMPACTED_KEYLESS_MESSAGE} in topic partition {name}."
    for header in headers:
        if header.is_control:
            continue
        try:
            batch = view[header.position : header.position + header.size]
            for index, record in enumerate(iter_records(batch)):
                if record.key is None:
                    refused.append((index, message))
        except InvalidRecordError as exc:
            raise CorruptRecordError(f"a record of {name} does not decode: {exc}") from exc
    if refused:
        raise with_record_errors(
            InvalidRecordBatchError(record_errors_summary(refused)), refused)


class PartitionLog:
    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        failure_channel: LogDirFailureChannel | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = True,
        time_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.dir = dir
        self.topic, self.partition = parse_topic_partition(dir.name)
        self.config = config
        self.failure_channel = failure_channel or LogDirFailureChannel()
        self.log_dir = dir.parent
        self.time_ms = time_ms
        self._lock = threading.RLock()
        # The segment list is copy-on-write: every change publishes new lists in one
        # assignment, so readers on the event loop (read, ListOffsets) take a consistent
        # snapshot without the lock while cleaner and retention threads change it.
        self._view: tuple[list[int], list[LogSegment]] = ([], [])
        # How slow disk work (fsync of a rolled segment, snapshots) is run off the
        # appending thread; the LogManager installs a worker pool, the default is inline.
        self.schedule_io: Callable[[Callable[[], None]], None] = lambda fn: fn()
        # Set (under the lock) when the log is deleted: background work becomes a no-op.
        self.closed = False
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.unflushed_messages = 0
        self.last_flush_ms = time_ms()
        self._append_listeners: list[Callable[[PartitionLog, int], None]] = []
        with self._io("loading log"):
            dir.mkdir(parents=True, exist_ok=True)
            self.leader_epoch_cache = LeaderEpochCache(dir / files.LEADER_EPOCH_CHECKPOINT)
            self.leader_epoch_cache.schedule = self._schedule_checkpoint
            if self.leader_epoch_cache.damaged:  # rebuilt from every batch
                had_clean_shutdown = False
                self.recovery_point = 0
            self.producer_state = ProducerStateManager(dir)
            self._load(had_clean_shutdown)
        # A log alone is its only replica: its high watermark follows its log end. In a
        # broker, the partition that takes the log over (cluster.Partition) sets
        # ``high_watermark_managed`` and moves it: the smallest log end offset over the ISR.
        self.high_watermark_managed = False
        # Read it as a plain attribute (the produce and fetch paths do, every request);
        # move it only by :meth:`update_high_watermark`, which keeps the producer state in
        # step (tests/storage/test_log_high_watermark.py holds the tree to that).
        self.high_watermark = self.log_end_offset

    # -- high watermark ------------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> None:
        """Move the high watermark to ``offset``. Every move, leader or follower, lets the
        producer state forget the transactions whose markers it passed (Kafka's
        ``updateHighWatermark``); with none waiting, that costs one truth test."""
        self.high_watermark = offset
        if self.producer_state.unreplicated:
            self.producer_state.on_high_watermark_updated(offset)

    # -- helpers -------------------------------------------------------------------------
    def _io(self, operation: str) -> AbstractContextManager[None]:
        return self.failure_channel.guard(self.log_dir, f"{operation} for {self.dir.name}")

    def _schedule_checkpoint(self, write: Callable[[], None]) -> None:
        """A checkpoint write off the appending thread, still through the disk-error choke
        point; skipped once the log is deleted."""
        def run() -> None:
            if not self.closed:
                with self._io("writing the leader-epoch checkpoint"):
                    write()

        self.schedule_io(run)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.dir.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self.segments)})"
        )

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def segments(self) -> list[LogSegment]:
        return self._view[1]

    @property
    def _bases(self) -> list[int]:
        return self._view[0]

    def _publish(self, segments: list[LogSegment]) -> None:
        self._view = ([s.base_offset for s in segments], segments)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._view[1][-1].next_offset  # the active segment's (read on every append)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def add_append_listener(self, listener: Callable[[PartitionLog, int], None]) -> None:
        """Called with (log, bytes appended) after each append (the broker completes
        delayed fetches from it)."""
        self._append_listeners.append(listener)

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(
            self.dir, base_offset, self.config.index_interval_bytes,
            self.config.segment_index_bytes, new=True,
        )
        self._assign_jitter(segment)
        return segment

    def _assign_jitter(self, segment: LogSegment) -> None:
        """Kafka's per-segment random ``segment.jitter.ms``, so that logs created together
        do not all roll at the same moment."""
        jitter = self.config.segment_jitter_ms
        segment.roll_jitter_ms = random.randint(0, jitter) if jitter > 0 else 0

    def _add_segment(self, segment: LogSegment) -> None:
        bases, segments = self._view
        i = bisect.bisect_left(bases, segment.base_offset)
        if i < len(bases) and bases[i] == segment.base_offset:
            self._publish([*segments[:i], segment, *segments[i + 1 :]])
        else:
            self._publish([*segments[:i], segment, *segments[i:]])

    def _segment_for(self, offset: int) -> int:
        """Index of the segment whose base offset is the largest ≤ offset (floor)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # -- load ----------------------------------------------------------------------------
    def _load(self, had_clean_shutdown: bool) -> None:
        #: segments whose indexes were rebuilt at load (the log manager's summary line)
        self.indexes_rebuilt = log_loader.load(self, had_clean_shutdown)

    # -- append --------------------------------------------------------------------------
    def validate(
        self, records: bytes | bytearray | memoryview, strict: bool = True
    ) -> BatchesInfo:
        try:
            info = validate_batches(records, strict_offsets=strict)
        except InvalidRecordError as exc:
            cls = CorruptRecordError if exc.reason in _CORRUPT_REASONS else InvalidRecordBatchError
            raise cls(str(exc)) from exc
        max_size = self.config.max_message_bytes
        for header in info.batches:
            if header.size > max_size:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes exceeds max.message.bytes {max_size}"
                )
            if strict and header.attributes & _CONTROL_MASK:
                # Kafka's LogValidator: markers come from the transaction coordinator
                # (append_control_as_leader), never in a client's produce.
                raise InvalidRecordBatchError("Clients are not allowed to write control records")
        if strict and self.config.compact:  # a producer's batches, not replicated ones
            _require_keys(records, info.batches, self.name)
        return info

    def _own_batch(self, records: bytes | bytearray | memoryview) -> BatchesInfo:
        """The header of a batch this broker built (one batch, the whole buffer): read,
        not verified, but still held to ``max.message.bytes``."""
        header = BatchHeader.parse(records)
        if header.size != len(records):
            raise ValueError(f"a coordinator's batch of {header.size} bytes in a buffer of "
                             f"{len(records)}")
        if header.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}")
        return BatchesInfo((header,), header.record_count, header.max_timestamp, 0,
                           header.size)

    def _check_timestamps(
        self, records: bytes | bytearray | memoryview, headers: tuple[BatchHeader, ...],
        now: int,
    ) -> None:
        """Per batch on the way in (Kafka checks per record; a batch's first record has the
        base timestamp and none is later than the max timestamp); a batch that fails is
        then read record by record to name the records out of range (KIP-467)."""
        config = self.config
        before = config.timestamp_before_max_ms
        after = config.timestamp_after_max_ms
        low, high = now - before, now + after
        refused: list[tuple[int, str]] = []
        failed = False
        for header in headers:
            if (header.max_timestamp > high or header.base_timestamp < low) and (
                header.max_timestamp != NO_TIMESTAMP  # v0 messages have none: not checked
            ):
                failed = True
                batch = memoryview(records)[header.position : header.position + header.size]
                try:
                    for index, record in enumerate(iter_records(batch)):
                        if not low <= record.timestamp <= high:
                            refused.append((index, (
                                f"Timestamp {record.timestamp} of message with offset "
                                f"{record.offset} is out of range. The timestamp should be "
                                f"within [{low}, {high}]")))
                except InvalidRecordError as exc:
                    raise CorruptRecordError(
                        f"a record of {self.name} does not decode: {exc}") from exc
        if failed:
            raise with_record_errors(InvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp"), refused)

    def _apply_topic_compression(
        self, records: bytes | bytearray | memoryview, info: BatchesInfo
    ) -> tuple[bytes | bytearray | memoryview, BatchesInfo]:
        """Recompress batches whose codec differs from the topic's ``compression.type``
        (``producer`` keeps what the producer sent), as Kafka's LogValidator does."""
        target = _TOPIC_CODECS.get(self.config.compression_type)
        if target is None or all(h.compression == target for h in info.batches):
            return records, info
        view = memoryview(records)
        try:
            converted = b"".join(
                recompress(view[h.position : h.position + h.size], target)
                for h in info.batches
            )
        except InvalidRecordError as exc:
            raise CorruptRecordError(str(exc)) from exc
        return converted, self.validate(converted, strict=True)

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int = -1
    ) -> LogAppendInfo:
        """Validate and append a producer's batches, assigning offsets.

        Runs once per partition of every produce request, so it stays lean: config values
        are attributes, and the batches written are described by :class:`AppendedBatch`
        (computed while rewriting) rather than by re-parsed headers. A writable
        ``memoryview`` (the produce request's own frame) is rewritten in place and written
        from there; anything else is copied once."""
        info = self.validate(records, strict=True)
        config = self.config
        if config.compression_type != "producer":
            records, info = self._apply_topic_compression(records, info)
        now = self.time_ms()
        log_append = config.log_append_time
        batches = info.batches
        if not log_append:
            self._check_timestamps(records, batches, now)
        buf: bytearray | memoryview
        if isinstance(records, memoryview) and not records.readonly:
            buf = records
        else:
            buf = bytearray(records)
        with self._lock:
            next_offset = self._view[1][-1].next_offset
            producers = self.producer_state.analyze(batches, next_offset)
            if producers.duplicate is not None:
                return self._duplicate_append_info(producers.duplicate)
            first = next_offset
            if leader_epoch >= 0:  # before the append, as Kafka's UnifiedLog.append
                self.leader_epoch_cache.assign(leader_epoch, first)
            appended: list[AppendedBatch] = []
            for header in batches:
                position = header.position
                set_base_offset(buf, position, next_offset)
                if leader_epoch >= 0:
                    set_partition_leader_epoch(buf, position, leader_epoch)
                if log_append:
                    set_log_append_time(buf, position, now)
                next_offset += header.last_offset_delta + 1
                appended.append(AppendedBatch(
                    position, header.size, next_offset - 1,
                    now if log_append else header.max_timestamp,
                ))
            size = self._append(buf, appended, first, next_offset - 1, False)
            self.producer_state.commit(producers)
            for listener in self._append_listeners:  # _appended, inline: every Produce
                listener(self, size)
        return LogAppendInfo(
            first, next_offset - 1,
            now if log_append else info.max_timestamp,
            now if log_append else -1,
            self.log_start_offset, info.record_count, info.size,
        )

    def append_as_coordinator(
        self, batch: bytes | bytearray, leader_epoch: int = -1
    ) -> LogAppendInfo:
        """Append the one batch a coordinator of this broker built (its record of a state
        change; module docstring), assigning its offsets as :meth:`append_as_leader`
        does: a method of its own, so that the path every produce request takes stays as
        it is. On a topic that recompresses or stamps LogAppendTime the batch goes through
        :meth:`append_as_leader`."""
        info = self._own_batch(batch)
        config = self.config
        if config.compression_type != "producer" or config.log_append_time:
            return self.append_as_leader(batch, leader_epoch)
        header = info.batches[0]
        buf = bytearray(batch)
        with self._lock:
            first = self._view[1][-1].next_offset
            producers = self.producer_state.analyze(info.batches, first)
            if producers.duplicate is not None:
                return self._duplicate_append_info(producers.duplicate)
            if leader_epoch >= 0:
                self.leader_epoch_cache.assign(leader_epoch, first)
                set_partition_leader_epoch(buf, 0, leader_epoch)
            set_base_offset(buf, 0, first)
            last = first + header.last_offset_delta
            self._append(buf, (AppendedBatch(0, header.size, last, header.max_timestamp),),
                         first, last, notify=False)
            self.producer_state.commit(producers)
            self._appended(len(buf))
        return LogAppendInfo(first, last, info.max_timestamp, -1, self.log_start_offset,
                             info.record_count, info.size)

    def _duplicate_append_info(self, duplicate: BatchMetadata) -> LogAppendInfo:
        """A retried idempotent batch: nothing written, the original offsets answered."""
        return LogAppendInfo(
            duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, -1,
            self.log_start_offset, 0, 0,
        )

    def append_control_as_leader(
        self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
        leader_epoch: int = -1,
    ) -> LogAppendInfo:
        """Append the marker ending a transaction, for the transaction coordinator
        (WriteTxnMarkers); fenced as Kafka's coordinator-origin appends are
        (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)."""
        now = self.time_ms()
        batch = build_end_txn_marker(producer_id, producer_epoch, committed,
                                     coordinator_epoch, now)
        header = BatchHeader.parse(batch)  # built just now: nothing to verify
        buf = bytearray(batch)
        with self._lock:
            self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
            offset = self._view[1][-1].next_offset
            if leader_epoch >= 0:
                self.leader_epoch_cache.assign(leader_epoch, offset)
                set_partition_leader_epoch(buf, 0, leader_epoch)
            set_base_offset(buf, 0, offset)
            if self.config.log_append_time:
                set_log_append_time(buf, 0, now)
            placed = header._replace(base_offset=offset)
            self._append(buf, (placed,), offset, offset, notify=False)
            completed = self.producer_state.complete_txn(
                placed, _marker_of(committed, coordinator_epoch))
            if completed is not None:  # None: an empty transaction
                self._index_completed([completed])
            self._appended(len(buf))
        return LogAppendInfo(offset, offset, now, -1, self.log_start_offset, 1, len(buf))

    def _index_completed(self, completed: Sequence[CompletedTxn]) -> None:
        """Aborted transactions go into the active segment's ``.txnindex`` (the segment
        their markers were just appended to)."""
        for txn in completed:
            if txn.is_aborted:
                entry = self.producer_state.aborted_txn(txn)
                with self._io("writing the transaction index"):
                    self.active_segment.txn_index.append(entry)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest transaction not ended and replicated, bounded by
        the high watermark and the log start offset (Kafka's ``UnifiedLog.lastStableOffset``)."""
        hw = self.high_watermark
        state = self.producer_state
        if not (state.ongoing or state.unreplicated):
            return hw
        first = state.first_unstable_offset(hw)
        if first is None or first > hw:
            return hw
        # An open transaction whose start retention removed: from the log start on
        # (Kafka's maybeIncrementFirstUnstableOffset).
        return max(first, self.log_start_offset)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), from
        the ``.txnindex`` of the segment holding ``start_offset`` and the ones after it,
        until an entry's last stable offset says no later one can overlap (Kafka's
        ``collectAbortedTransactions``)."""
        with self._io("reading the transaction index"):
            return self._aborted_transactions(start_offset, upper_bound_offset)

    def _aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """:meth:`collect_aborted_transactions` without the disk-error choke point, for a
        caller already inside it (the read of every read_committed fetch). A segment
        whose index holds no entry (every segment of a log no transaction was aborted
        in) is passed over without a search."""
        bases, segments = self._view
        found: list[AbortedTxn] = []
        for segment in segments[max(0, bisect.bisect_right(bases, start_offset) - 1):]:
            index = segment.txn_index
            if not index.entries:
                continue
            result = index.collect(start_offset, upper_bound_offset)
            found.extend(result.aborted)
            if result.complete:
                break
        return found

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches whose offsets are already assigned (replication, the cleaner)."""
        info = self.validate(records, strict=False)
        with self._lock:
            first = info.batches[0].base_offset
            last = info.batches[-1].last_offset
            expected = self.log_end_offset
            previous = expected - 1
            for header in info.batches:
                if header.base_offset <= previous:
                    raise InvalidRecordBatchError(
                        f"offset {header.base_offset} is not after {previous}"
                    )
                previous = header.last_offset
            if first < expected:
                raise InvalidRecordBatchError(f"first offset {first} is below log end {expected}")
            for header in info.batches:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            self._append(records, info.batches, first, last)
            completed = self.producer_state.apply(info.batches, records)
            if completed:
                self._index_completed(completed)
        return LogAppendInfo(
            first, last, info.max_timestamp, -1, self.log_start_offset,
            info.record_count, info.size,
        )

    def _append(
        self, buf: bytes | bytearray | memoryview, batches: Sequence[BatchExtent],
        first_offset: int, last_offset: int, notify: bool = True,
    ) -> int:
        """Write the batches (returns their bytes); with ``notify`` tell the append
        listeners. A leader's append tells them itself once the producer state holds the
        batches: a listener may move the high watermark and wake a read_committed fetch,
        which must see the last stable offset the append leaves (issue 46)."""
        # The disk-error choke point without a context manager: this runs per batch.
        channel = self.failure_channel
        channel.check(self.log_dir)
        size = len(buf)
        try:
            segment = self._maybe_roll(size, first_offset, last_offset, batches)
            segment.append(buf, batches)
            self.unflushed_messages += last_offset - first_offset + 1
            if self.unflushed_messages >= self.config.flush_messages:
                self._flush_segments(self.segments[self._segment_for(self.recovery_point) :])
                self.leader_epoch_cache.write()
                self.recovery_point = self.log_end_offset
                self.unflushed_messages = 0
                self.last_flush_ms = self.time_ms()
        except OSError as exc:
            raise channel.failed(self.log_dir, f"appending for {self.dir.name}", exc) from exc
        if not self.high_watermark_managed:
            self.update_high_watermark(segment.next_offset)
        if notify:
            for listener in self._append_listeners:
                listener(self, size)
        return size

    def _appended(self, size: int) -> None:
        for listener in self._append_listeners:
            listener(self, size)

    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, batches: Sequence[BatchExtent]
    ) -> LogSegment:
        segment = self._view[1][-1]
        segment_size = segment.size
        if segment_size == 0:
            return segment
        config = self.config
        if (
            segment_size > config.segment_bytes - size
            or segment.is_full()
            or last_offset - segment.base_offset > _INT32_MAX
        ):
            return self._roll(first_offset)
        rolling = segment.rolling_based_timestamp
        if rolling is not None and rolling >= 0:
            if len(batches) == 1:
                max_ts = batches[0].max_timestamp
            else:
                max_ts = max(b.max_timestamp for b in batches) if batches else -1
            waited = max_ts - rolling
        else:
            waited = self.time_ms() - segment.created_ms
        if waited > config.segment_ms - segment.roll_jitter_ms:
            return self._roll(first_offset)
        return segment

    def roll(self) -> LogSegment:
        with self._lock, self._io("rolling"):
            return self._roll(self.log_end_offset)

    def _roll(self, base_offset: int) -> LogSegment:
        old = self.active_segment
        if old.size == 0:
            return old
        old.on_become_inactive()
        segment = self._new_segment(base_offset)
        self._add_segment(segment)
        write_snapshot = self.producer_state.snapshot_writer(base_offset)

        def flush_rolled() -> None:
            # Off the appending thread, like Kafka's scheduled flush of a rolled segment:
            # an fsync of up to segment.bytes must not stall every client.
            if self.closed:
                return
            self.failure_channel.check(self.log_dir)
            try:
                old.flush()
                files.fsync_dir(self.dir)
                write_snapshot()
                self.leader_epoch_cache.write()
            except OSError as exc:
                if self.closed:  # deleted meanwhile: the dir was renamed away (issue 52)
                    return
                raise self.failure_channel.failed(
                    self.log_dir, f"flushing a rolled segment for {self.dir.name}", exc
                ) from exc
            with self._lock:
                self.recovery_point = max(self.recovery_point, old.next_offset)

        self.schedule_io(flush_rolled)
        log.debug("%s: rolled new segment at %d", self.name, base_offset)
        return segment

    # -- read ----------------------------------------------------------------------------
    def read(
        self, offset: int, max_bytes: int, max_offset: int | None = None,
        min_one_message: bool = True, include_aborted_txns: bool = False,
    ) -> FetchDataInfo:
        """Region to send from ``offset``: at most ``max_bytes`` (the first batch whole with
        ``min_one_message``), never at or past ``max_offset`` (the high watermark or the
        last stable offset). With ``include_aborted_txns`` (read_committed) the answer
        names the aborted transactions whose records the region may hold, as Kafka's
        ``LocalLog.read``: those overlapping [offset, last stable offset).

        A read with no room (``max_bytes`` 0 without ``min_one_message``: the response's
        limit is used up) answers empty at once, its offset still checked against the
        log's range, without locating the offset in a segment: a fetch of many partitions
        pays that search only for the partitions that can still get bytes."""
        leo = self.log_end_offset
        start = self.log_start_offset
        hw = self.high_watermark
        state = self.producer_state
        lso = self.last_stable_offset if state.ongoing or state.unreplicated else hw
        if offset < start or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {leo}] of {self.name}"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        bases, segments = self._view
        if offset >= limit or (max_bytes <= 0 and not min_one_message):
            return FetchDataInfo(offset, -1, 0, 0, start, leo, hw, last_stable_offset=lso,
                                 aborted_transactions=[] if include_aborted_txns else None)
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        # The disk-error choke point without a context manager: this runs for every
        # partition of every fetch.
        channel = self.failure_channel
        channel.check(self.log_dir)
        try:
            while i < len(segments):
                segment = segments[i]
                max_position = None
                if segment.base_offset <= limit < segment.next_offset:
                    found = segment.translate_offset(limit)
                    max_position = found.position if found else segment.size
                result = segment.read(offset, max_bytes, max_position, min_one_message)
                if result is not None:
                    first, size = result
                    if (
                        size == first.size == BATCH_HEADER_SIZE
                        and i + 1 < len(segments)
                        and segments[i + 1].base_offset < limit
                    ):
                        # Nothing left here but the empty batch the cleaner keeps at the end
                        # of a group it emptied: read on into the next segment, as Kafka
                        # does past an empty segment. (A response of empty batches alone
                        # makes librdkafka double its fetch size each time until it gives
                        # up with MSG_SIZE_TOO_LARGE.)
                        i += 1
                        continue
                    handle = segment.file_handle()  # keeps the fd open (segment.py doc)
                    aborted = None
                    if include_aborted_txns:
                        aborted = [] if not size else [
                            (t.producer_id, t.first_offset)
                            for t in self._aborted_transactions(offset, lso)]
                    return FetchDataInfo(
                        offset, handle.fd, first.position, size, start, leo, hw, handle,
                        segment.legacy, lso, aborted, 0 < size < first.size,
                    )
                i += 1
        except OSError as exc:
            raise channel.failed(self.log_dir, f"reading for {self.dir.name}", exc) from exc
        return FetchDataInfo(offset, -1, 0, 0, start, leo, hw, last_stable_offset=lso,
                             aborted_transactions=[] if include_aborted_txns else None)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets: earliest (-2), latest (-1), max timestamp (-3), or the first record
        whose timestamp is ≥ ``timestamp``."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_end_offset)
        with self._io("searching by timestamp"):
            if timestamp == MAX_TIMESTAMP:
                best = max(self.segments, key=lambda s: s.max_timestamp_so_far)
                if best.max_timestamp_so_far < 0:
                    return None
                # The segment knows the batch holding the largest timestamp, not the
                # record: the first record of the log at that timestamp is it (KIP-734;
                # answering the batch's last offset was Kafka's KAFKA-16310).
                try:
                    found = best.find_offset_by_timestamp(
                        best.max_timestamp_so_far, self.log_start_offset
                    )
                except InvalidRecordError as exc:
                    raise CorruptRecordError(
                        f"{self.name}: a stored batch does not decode: {exc}"
                    ) from exc
                return found if found is not None else TimestampOffset(
                    best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far
                )
            for segment in self.segments:
                if segment.max_timestamp_so_far >= timestamp:
                    try:
                        found = segment.find_offset_by_timestamp(
                            timestamp, self.log_start_offset
                        )
                    except InvalidRecordError as exc:
                        raise CorruptRecordError(
                            f"{self.name}: a stored batch does not decode: {exc}"
                        ) from exc
                    if found is not None:
                        return found
        return None

    # -- log start offset, retention -----------------------------------------------------
    def maybe_increment_log_start_offset(self, new_start: int) -> None:
        """DeleteRecords: move the log start offset (never past the high watermark)."""
        if new_start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move log start offset to {new_start} past the high watermark "
                f"{self.high_watermark}"
            )
        with self._lock:
            if new_start > self.log_start_offset:
                self.log_start_offset = new_start
                with self._io("trimming the leader epoch cache"):
                    self.leader_epoch_cache.truncate_from_start(new_start)

    def delete_old_segments(self) -> list[LogSegment]:
        """Apply retention; returns the segments removed (renamed ``.deleted``)."""
        now = self.time_ms()
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        with self._lock, self._io("deleting old segments"):
            if self.closed:
                return []
            removed: list[LogSegment] = []
            excess = self.size_in_bytes - retention_bytes if retention_bytes >= 0 else -1
            while len(self.segments) > 1:
                segment = self.segments[0]
                upper = self.segments[1].base_offset
                if upper > self.high_watermark:
                    break
                by_start = upper <= self.log_start_offset
                by_time = (
                    self.config.delete and retention_ms >= 0
                    and now - segment.largest_timestamp > retention_ms
                )
                by_size = self.config.delete and excess >= segment.size
                if not (by_start or by_time or by_size):
                    break
                if by_size:
                    excess -= segment.size
                removed.append(self._remove_first_segment())
            if removed:
                self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
                self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
                self.recovery_point = max(self.recovery_point, self.log_start_offset)
            return removed

    def _remove_first_segment(self) -> LogSegment:
        segment = self.segments[0]
        self._publish(self.segments[1:])
        segment.change_suffix("", files.DELETED_SUFFIX)
        log.info("%s: deleting segment %d (retention)", self.name, segment.base_offset)
        return segment

    # -- compaction ----------------------------------------------------------------------
    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        """The cleaner's swap: ``cleaned`` (complete, fsynced, files ``*.cleaned``) takes
        the place of the consecutive segments ``old``. Renames ``.cleaned`` -> ``.swap``
        (indexes first, the ``.log`` last: the commit point), the old segments ->
        ``.deleted`` (the caller schedules their removal), then ``.swap`` -> final names,
        so that :func:`log_loader.complete_swaps` can finish or drop it after a crash at any point.
        False (nothing renamed) when the log changed since the cleaner read it, or was
        deleted meanwhile (its dir renamed away: nothing to swap in)."""
        with self._lock, self._io("swapping in a cleaned segment"):
            if self.closed:
                return False
            try:
                i = next(n for n, s in enumerate(self.segments) if s is old[0])
            except StopIteration:
                return False
            current = self.segments[i : i + len(old)]
            if (
                len(current) != len(old)
                or any(a is not b for a, b in zip(current, old, strict=True))
                or i + len(old) >= len(self.segments)  # never the active segment
                or cleaned.base_offset != old[0].base_offset
            ):
                return False
            base = cleaned.base_offset
            for fn in (files.index_file, files.time_index_file, files.txn_index_file):
                src = fn(self.dir, base, files.CLEANED_SUFFIX)
                if src.exists():
                    src.rename(fn(self.dir, base, files.SWAP_SUFFIX))
            cleaned.change_suffix(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
            files.fsync_dir(self.dir)
            for segment in old:
                segment.change_suffix("", files.DELETED_SUFFIX)
            cleaned.change_suffix(files.SWAP_SUFFIX, "")
            files.fsync_dir(self.dir)
            self._publish([*self.segments[:i], cleaned, *self.segments[i + len(old) :]])
        return True

    # -- truncation ----------------------------------------------------------------------
    def truncate_to(self, offset: int, reason: str = "") -> int:
        """Remove every record at ``offset`` and after (a follower truncating), saying so
        with ``reason`` (Kafka's "Truncating to offset ..."); returns how many offsets
        went. One below the high watermark this log knew removes acknowledged records: a
        WARNING with the numbers."""
        with self._lock, self._io("truncating"):
            end, hw = self.log_end_offset, self.high_watermark
            if offset >= end:
                return 0
            if offset < self.segments[0].base_offset:
                self._truncate_fully(offset)
                return self._report_truncation(end, hw, offset, reason)
            i = self._segment_for(offset)
            for segment in self.segments[i + 1 :]:
                segment.delete_files()
            self._publish(self.segments[: i + 1])
            self.segments[i].truncate_to(offset)
            self.active_segment.make_active()
            self.update_high_watermark(min(self.high_watermark, self.log_end_offset))
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            self.producer_state.load(self.segments, self.log_start_offset, self.log_end_offset)
            return self._report_truncation(end, hw, offset, reason)

    def truncate_fully_and_start_at(self, offset: int, reason: str = "") -> int:
        """Drop the whole log and start it empty at ``offset`` (a follower below its
        leader's log start); logged and counted as :meth:`truncate_to`. Returns how many
        offsets went."""
        with self._lock, self._io("truncating fully"):
            start, end, hw = self.log_start_offset, self.log_end_offset, self.high_watermark
            self._truncate_fully(offset)
            return self._report_truncation(end, hw, offset, reason, start)

    def _report_truncation(self, end: int, hw: int, asked: int, reason: str,
                           fully_from: int | None = None) -> int:
        """Log and count a truncation done: the log ended at ``end`` with high watermark
        ``hw``, and was asked to end at ``asked`` (it ends at a batch boundary, at or
        below); ``fully_from``: the whole log went, from its start then, and it starts
        again at ``asked``. Returns how many offsets were removed."""
        cut = self.log_end_offset if fully_from is None else fully_from
        removed = max(0, end - cut)
        why = f" ({reason})" if reason else ""
        if fully_from is not None:
            log.info("Truncating %s from %d to %d, starting again at %d%s: %d offsets "
                     "removed", self.name, end, cut, asked, why, removed)
        elif cut != asked:
            log.info("Truncating %s from %d to %d (asked %d, inside a batch)%s: %d offsets "
                     "removed", self.name, end, cut, asked, why, removed)
        else:
            log.info("Truncating %s from %d to %d%s: %d offsets removed", self.name, end,
                     cut, why, removed)
        below = cut < hw and removed > 0 and (fully_from is None or asked < hw)
        if below:
            log.warning("Truncating %s to %d, below its high watermark %d: %d acknowledged "
                        "offsets (%d..%d) removed%s", self.name, cut, hw, hw - cut, cut,
                        hw - 1, why)
        TRUNCATION_STATS.record(removed, below)
        return removed

    def _truncate_fully(self, offset: int) -> None:
        for segment in self.segments:
            segment.delete_files()
        self._publish([])
        self._add_segment(self._new_segment(offset))
        self.log_start_offset = offset
        self.recovery_point = offset
        self.update_high_watermark(offset)
        self.leader_epoch_cache.clear()
        self.producer_state.reset()

    # -- flush, close --------------------------------------------------------------------
    def _flush_segments(self, segments: list[LogSegment]) -> None:
        started = time.monotonic_ns()
        for segment in segments:
            segment.flush()
        files.fsync_dir(self.dir)
        LOG_FLUSH_STATS.record(time.monotonic_ns() - started)

    def flush(self) -> None:
        """fsync everything up to the log end offset; moves the recovery point."""
        # The fsyncs run outside the log's lock, so appends are not held up behind them.
        with self._lock:
            if self.closed:
                return
            leo = self.log_end_offset
            pending = leo > self.recovery_point or self.unflushed_messages
            segments = self.segments[self._segment_for(self.recovery_point) :]
            self.unflushed_messages = 0
        with self._io("flushing"):
            if pending:
                self._flush_segments(segments)
            self.leader_epoch_cache.write()  # before the recovery point moves past them
        with self._lock:
            self.recovery_point = max(self.recovery_point, leo)
            self.last_flush_ms = self.time_ms()

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    def close(self) -> None:
        with self._lock, self._io("closing"):
            self.flush()
            self.producer_state.take_snapshot(self.log_end_offset)
            for segment in self.segments:
                segment.close()

    def delete_files(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        with self._lock, self._io("deleting"):
            for segment in self.segments:
                segment.delete_files()
            for path in self.dir.iterdir():
                path.unlink()
            self.dir.rmdir()
