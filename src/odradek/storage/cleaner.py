"""Log compaction: one cleaning pass over one partition log (Kafka's LogCleaner.Cleaner).

How it works:

The log is split at the *first dirty offset* (from ``cleaner-offset-checkpoint``) into a
clean head and a dirty tail; the tail ends at the *first uncleanable offset*: the base of
the active segment, of the first segment younger than ``min.compaction.lag.ms``, or the
high watermark, whichever is lowest. A pass has two phases.

1. **Build the offset map** over the dirty section, oldest batch first: every record's key
   hash -> its offset (:class:`~odradek.storage.offset_map.SkimpyOffsetMap`, fixed memory).
   Every batch is CRC-checked. Before a batch would overflow the map the phase stops and
   the pass covers only the dirty offsets that made it in (``end``): the rest stays dirty
   for the next pass. A map too small for even one batch is an error, never a loop.
2. **Recopy** every segment below ``end`` (the clean head too), oldest first, grouping
   neighbours into one ``.cleaned`` segment while it stays under ``segment.bytes``, the
   index size and the 4-byte relative offset range. A record is kept when no later offset
   of its key is in the map and it is not an expired tombstone; records without a key are
   dropped (counted as invalid). A batch whose records are all kept is copied byte for
   byte; otherwise it is rebuilt with the same base offset, offset span (last offset
   delta), producer id, epoch, base sequence, leader epoch, timestamp type and codec
   (recompressed). Offsets are never renumbered: compacted logs have gaps.
3. **Swap**: the ``.cleaned`` segment is fsynced, renamed ``.swap`` (its ``.log`` last:
   that rename is the commit point), the old segments renamed ``.deleted``, then the swap
   renamed to ``.log`` — all under the log's lock (:meth:`PartitionLog.replace_segments`).
   A crash at any moment leaves either the old segments (``.cleaned`` files are removed on
   load) or a ``.swap`` that :func:`log_loader.complete_swaps` finishes: it replaces
   every ``.log`` whose base offset lies in ``[swap base, swap next offset)``. So that this
   range always covers the whole group, a cleaned segment ends at the group's last offset:
   if the group's last batches were all removed, the last removed batch is kept as an
   *empty* batch (no records, same offsets and producer fields), as Kafka does to retain
   producer state.

Tombstones (null values) follow KIP-534: the first pass that keeps a tombstone rebuilds
its batch with a *delete horizon* (now + ``delete.retention.ms``) stored as the batch's
base timestamp (attribute bit 6); a later pass after the horizon drops it. A tombstone
therefore survives at least one cleaning plus ``delete.retention.ms``.

Transactions (Kafka's ``CleanedTransactionMetadata``): the dirty section ends at the last
stable offset, so no open transaction is cleaned. The aborted transactions of the range
come from the segments' ``.txnindex``; walking batches in offset order, a producer's
transactional batches from an aborted transaction's first offset up to its marker are
*aborted data*: left out of the offset map (an aborted record never shadows a committed
one) and dropped from the cleaned segment. Control batches (the markers) never enter the
map, and are kept while their transaction's data remains: a commit marker while any batch
of its transaction is still in the log, an abort marker while the pass still saw (and
dropped) some of its batches. Once a marker guards nothing, the pass that finds it so
gives it a delete horizon (now + ``delete.retention.ms``), and a pass after the horizon
removes it, so a consumer that read the data in time still reads the marker. The state
is one per pass, fed from the log's first segment on. A cleaned segment's ``.txnindex``
holds the entry of every abort marker the pass keeps, and only those (Kafka's
``cleanedIndex``): a read_committed fetcher still learns of aborted data the pass left
(a kept marker, e.g. above the map's end), and an entry never outlives its marker. An
entry left without its marker would be harmful, not harmless: a reader skips its
producer's transactional batches from the entry's first offset until an abort marker of
that producer, committed ones included. So a producer is aborting only from the entry's
first offset up to its marker offset, whether the marker is still there or not, and the
loader drops an entry whose marker is gone (logs an older cleaner wrote, issue 46).

Reading and copying run in a cleaner thread outside the log's lock; only the swap takes it.
Records are decoded in Python (per record, off the produce and fetch paths); digests,
CRCs and codecs run in C.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    InvalidRecordError,
    compute_crc,
    iter_records,
    validate_batch,
)
from odradek.records.builder import BatchBuilder
from odradek.records.control import ControlType, EndTransactionMarker, read_end_txn_marker
from odradek.records.legacy import MESSAGE_OVERHEAD_V0, up_convert
from odradek.storage import files
from odradek.storage.errors import StorageError
from odradek.storage.log import PartitionLog
from odradek.storage.offset_map import SkimpyOffsetMap
from odradek.storage.segment import LogSegment
from odradek.storage.txn_index import AbortedTxn

_INT32 = struct.Struct(">i")
_MIN_ENTRY = LOG_OVERHEAD + MESSAGE_OVERHEAD_V0  # a v0 message, the smallest entry
_INT32_MAX = (1 << 31) - 1
_COMPRESSION_MASK = 0x07
_DELETE_HORIZON_MASK = 0x40



class CleanerError(StorageError):
    """A pass could not complete (corrupt batch, map too small …); the log is retried later."""


class CleanerAbortedError(Exception):
    """The pass was stopped on purpose (shutdown) or the log changed under it."""


# -- produce-side rule -------------------------------------------------------------------
# -- I/O helpers -------------------------------------------------------------------------
class Throttler:
    """Bounds the cleaner's I/O to ``log.cleaner.io.max.bytes.per.second`` (Kafka's
    Throttler): after each chunk, sleep until the bytes so far fit the rate."""

    def __init__(self, bytes_per_second: float, stop: threading.Event | None = None) -> None:
        self.rate = bytes_per_second
        self.stop = stop or threading.Event()
        self._start = time.monotonic()
        self._bytes = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate <= 0 or self.rate >= 1e300:
            return
        self._bytes += nbytes
        elapsed = time.monotonic() - self._start
        ahead = self._bytes / self.rate - elapsed
        if ahead > 0.01:
            self.stop.wait(ahead)
        if elapsed > 1.0:  # a sliding window of about a second
            self._start = time.monotonic()
            self._bytes = 0.0


def read_batches(
    segment: LogSegment, start: int, end: int, buffer_size: int, throttler: Throttler,
    check_abort: Callable[[], None],
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Validated batches of ``segment`` between byte positions ``start`` and ``end``, read
    ``buffer_size`` bytes at a time (a larger batch is read whole). Raises CleanerError on a
    corrupt batch."""
    pos = start
    handle = segment.file_handle()  # held while reading: the segment may be released
    fd = handle.fd
    while pos < end:
        check_abort()
        data = os.pread(fd, min(buffer_size, end - pos), pos)
        throttler.maybe_throttle(len(data))
        view = memoryview(data)
        off = 0
        while off + _MIN_ENTRY <= len(view):
            (length,) = _INT32.unpack_from(view, off + LENGTH_OFFSET)
            size = length + LOG_OVERHEAD
            legacy = view[off + MAGIC_OFFSET] < CURRENT_MAGIC
            if off + size > len(view) or (not legacy and off + BATCH_HEADER_SIZE > len(view)):
                break
            if legacy:
                # A v0/v1 entry of a segment an old Kafka wrote: cleaned as the v2 batch
                # it converts to, so compaction rewrites old segments in format v2.
                converted = memoryview(_up_converted(view[off : off + size], pos + off,
                                                     segment))
                yield _validated(converted, 0, pos + off, segment), converted
            else:
                yield _validated(view, off, pos, segment), view[off : off + size]
            off += size
        if off == 0:  # one batch larger than the buffer (or a torn header)
            head = os.pread(fd, BATCH_HEADER_SIZE, pos)
            legacy = len(head) > MAGIC_OFFSET and head[MAGIC_OFFSET] < CURRENT_MAGIC
            if len(head) < (_MIN_ENTRY if legacy else BATCH_HEADER_SIZE):
                raise CleanerError(f"{segment.log_path}: truncated batch at position {pos}")
            (length,) = _INT32.unpack_from(head, LENGTH_OFFSET)
            size = length + LOG_OVERHEAD
            if size < (_MIN_ENTRY if legacy else BATCH_HEADER_SIZE) or pos + size > end:
                raise CleanerError(
                    f"{segment.log_path}: invalid batch length {length} at position {pos}"
                )
            whole = memoryview(os.pread(fd, size, pos))
            throttler.maybe_throttle(size)
            if legacy:
                whole = memoryview(_up_converted(whole, pos, segment))
            yield _validated(whole, 0, pos, segment), whole
            off = size
        pos += off


def _up_converted(entry: memoryview, position: int, segment: LogSegment) -> bytes:
    try:
        return up_convert(entry, 0)
    except InvalidRecordError as exc:
        raise CleanerError(
            f"corrupt message in {segment.log_path} at position {position}: {exc}"
        ) from exc


def _validated(view: memoryview, off: int, base_pos: int, segment: LogSegment) -> BatchHeader:
    try:
        return validate_batch(view, off, strict_offsets=False)
    except InvalidRecordError as exc:
        raise CleanerError(
            f"corrupt batch in {segment.log_path} at position {base_pos + off}: {exc}"
        ) from exc


def empty_batch(header: BatchHeader) -> bytes:
    """A batch with no records spanning ``header``'s offsets, with its producer fields
    (Kafka keeps such batches so that producer state and offset ranges survive)."""
    attributes = header.attributes & ~(_COMPRESSION_MASK | _DELETE_HORIZON_MASK)
    buf = bytearray(
        HEADER_STRUCT.pack(
            header.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch,
            2, 0, attributes, header.last_offset_delta, header.max_timestamp,
            header.max_timestamp, header.producer_id, header.producer_epoch,
            header.base_sequence, 0,
        )
    )
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


class CleanedTransactions:
    """What one pass knows of transactions, fed every batch in offset order from the log's
    first segment on (Kafka's CleanedTransactionMetadata): which data batches are aborted
    (dropped), and which markers no longer guard any data (removable). Per batch, never
    per record.

    A producer is *aborting* from an aborted transaction's first offset up to its marker
    offset (the entry's ``last_offset``) and no further: an entry whose marker is gone
    (written by an older cleaner, module doc) cannot make the producer's later batches,
    committed ones included, look aborted."""

    def __init__(self) -> None:
        self._pending: list[AbortedTxn] = []
        self._next = 0
        self._known: set[tuple[int, int]] = set()
        # producer id -> [its aborted transaction, whether a batch of it was seen this pass]
        self._aborting: dict[int, tuple[AbortedTxn, list[bool]]] = {}
        # producers with a transaction whose (non-aborted) batches were seen this pass
        self._committing: set[int] = set()

    def add_aborted(self, aborted: list[AbortedTxn]) -> None:
        new = [t for t in aborted if (t.producer_id, t.first_offset) not in self._known]
        self._known.update((t.producer_id, t.first_offset) for t in new)
        if new:
            self._pending = sorted([*self._pending[self._next:], *new],
                                   key=lambda t: t.first_offset)
            self._next = 0

    def _start_aborted_up_to(self, offset: int) -> None:
        pending = self._pending
        aborting = self._aborting
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._next += 1
            current = aborting.get(txn.producer_id)
            if current is None or current[0].last_offset < txn.first_offset:
                aborting[txn.producer_id] = (txn, [False])

    def _aborting_at(self, pid: int, offset: int) -> tuple[AbortedTxn, list[bool]] | None:
        """The producer's aborted transaction covering ``offset``; one that ended before
        it (its marker offset passed) is forgotten."""
        current = self._aborting.get(pid)
        if current is not None and offset > current[0].last_offset:
            del self._aborting[pid]
            return None
        return current

    def is_aborted(self, header: BatchHeader) -> bool:
        """A data batch: is it aborted data? (Control batches: :meth:`marker_removable`.)"""
        self._start_aborted_up_to(header.base_offset)
        if not header.is_transactional:
            return False
        pid = header.producer_id
        current = self._aborting_at(pid, header.base_offset)
        if current is not None:
            current[1][0] = True
            return True
        self._committing.add(pid)
        return False

    def end_txn(self, header: BatchHeader) -> None:
        """A control batch, where whether it may go does not matter (the map phase)."""
        self._start_aborted_up_to(header.base_offset)
        self._aborting.pop(header.producer_id, None)
        self._committing.discard(header.producer_id)

    def marker_removable(self, header: BatchHeader, marker: EndTransactionMarker | None) -> bool:
        """A control batch: does no data of its transaction remain? An abort marker stays
        while the pass still saw its transaction's batches (it drops them now; the next
        pass may remove the marker), a commit marker while any of its batches is kept."""
        self._start_aborted_up_to(header.base_offset)
        pid = header.producer_id
        if marker is None:
            return False  # not a transaction marker: kept
        current = self._aborting_at(pid, header.base_offset)
        if marker.control_type is ControlType.ABORT:
            self._aborting.pop(pid, None)
            return current is None or not current[1][0]
        if pid in self._committing:
            self._committing.discard(pid)
            return False
        return True


# -- the pass ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LogToClean:
    """A candidate (Kafka's LogToClean): the dirty section is [first_dirty, first_uncleanable)."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    forced: bool = False  # past max.compaction.lag.ms or an expired tombstone horizon

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.dirty_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.dirty_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(slots=True)
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    records_read: int = 0
    records_written: int = 0
    records_invalid: int = 0
    tombstones_removed: int = 0
    map_records: int = 0
    map_entries: int = 0
    map_slots: int = 0
    segments_cleaned: int = 0
    segments_written: int = 0
    started: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    ended: float = 0.0

    @property
    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def as_dict(self) -> dict[str, float | int]:
        return {
            "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
            "records_read": self.records_read, "records_written": self.records_written,
            "records_invalid": self.records_invalid,
            "tombstones_removed": self.tombstones_removed, "map_entries": self.map_entries,
            "segments_cleaned": self.segments_cleaned,
            "segments_written": self.segments_written,
            "seconds": round(self.elapsed, 4),
        }


@dataclass(frozen=True, slots=True)
class CleanResult:
    end_offset: int  # the new first dirty offset (cleaner checkpoint)
    stats: CleanerStats
    min_delete_horizon_ms: int  # earliest tombstone horizon left in the log, or -1
    old_segments: tuple[LogSegment, ...]


class Cleaner:
    """Runs passes with one offset map (one per cleaner thread)."""

    def __init__(
        self,
        offset_map: SkimpyOffsetMap,
        io_buffer_size: int = 524288,
        max_io_bytes_per_second: float = float("inf"),
        stop: threading.Event | None = None,
    ) -> None:
        self.offset_map = offset_map
        self.io_buffer_size = max(io_buffer_size, BATCH_HEADER_SIZE)
        self.stop = stop or threading.Event()
        self.throttler = Throttler(max_io_bytes_per_second, self.stop)

    def _check_abort(self) -> None:
        if self.stop.is_set():
            raise CleanerAbortedError("the cleaner is shutting down")

    def clean(self, candidate: LogToClean, now_ms: int | None = None) -> CleanResult:
        log = candidate.log
        now = log.time_ms() if now_ms is None else now_ms
        stats = CleanerStats()
        end = self.build_offset_map(
            log, candidate.first_dirty_offset, candidate.first_uncleanable_offset, stats
        )
        stats.map_done = time.monotonic()
        delete_retention = int(log.config["delete.retention.ms"])
        old: list[LogSegment] = []
        min_horizon = -1
        transactions = CleanedTransactions()
        for group in self.group_segments(log, end):
            transactions.add_aborted(
                log.collect_aborted_transactions(group[0].base_offset, end))
            horizon = self._clean_group(log, group, end, now, now + delete_retention, stats,
                                        transactions)
            if horizon >= 0 and (min_horizon < 0 or horizon < min_horizon):
                min_horizon = horizon
            old.extend(group)
        stats.ended = time.monotonic()
        return CleanResult(end, stats, min_horizon, tuple(old))

    # -- phase 1 -----------------------------------------------------------------------
    def build_offset_map(
        self, log: PartitionLog, start: int, end: int, stats: CleanerStats
    ) -> int:
        """Fill the map from the dirty section; returns the offset it covers up to."""
        offset_map = self.offset_map
        offset_map.reset(expected_entries=max(1, end - start))
        try:
            return self._fill(log, start, end, stats)
        finally:
            stats.map_entries = offset_map.size
            stats.map_slots = offset_map.active_slots

    def _fill(self, log: PartitionLog, start: int, end: int, stats: CleanerStats) -> int:
        offset_map = self.offset_map
        covered = start
        tracker = CleanedTransactions()
        tracker.add_aborted(log.collect_aborted_transactions(start, end))
        for segment in list(log.segments):
            if segment.base_offset >= end or segment.next_offset <= start:
                continue
            position = 0
            if segment.base_offset <= start:
                position = segment.offset_index.lookup(start).position
            for header, batch in read_batches(
                segment, position, segment.size, self.io_buffer_size, self.throttler,
                self._check_abort,
            ):
                if header.base_offset >= end:
                    return covered
                stats.map_bytes_read += header.size
                if header.next_offset <= start:
                    continue
                if header.is_control:
                    tracker.end_txn(header)
                elif not tracker.is_aborted(header):
                    if offset_map.size + header.record_count > offset_map.max_entries:
                        if covered > start:
                            return covered  # full: clean up to here, the rest next pass
                        raise CleanerError(
                            f"{log.name}: the offset map holds {offset_map.max_entries} "
                            f"entries, fewer than the {header.record_count} records of the "
                            f"batch at offset {header.base_offset}; raise "
                            "log.cleaner.dedupe.buffer.size or lower log.cleaner.threads"
                        )
                    try:
                        for record in iter_records(batch):
                            stats.map_records += 1
                            if record.key is not None:
                                offset_map.put(record.key, record.offset)
                    except InvalidRecordError as exc:
                        raise CleanerError(
                            f"{log.name}: corrupt records in the batch at offset "
                            f"{header.base_offset}: {exc}"
                        ) from exc
                covered = header.next_offset
        return covered

    # -- phase 2 -----------------------------------------------------------------------
    def group_segments(self, log: PartitionLog, end: int) -> list[list[LogSegment]]:
        """Consecutive segments below ``end`` grouped so that each group fits one segment
        (``segment.bytes``, ``segment.index.bytes``, int32 relative offsets)."""
        segments = [s for s in log.segments[:-1] if s.base_offset < end]
        max_size = log.config.segment_bytes
        max_index = log.config.segment_index_bytes
        groups: list[list[LogSegment]] = []
        i = 0
        while i < len(segments):
            group = [segments[i]]
            size = segments[i].size
            index_size = segments[i].offset_index.size_bytes
            time_size = segments[i].time_index.size_bytes
            i += 1
            while i < len(segments):
                nxt = segments[i]
                if (
                    size + nxt.size > max_size
                    or index_size + nxt.offset_index.size_bytes > max_index
                    or time_size + nxt.time_index.size_bytes > max_index
                    or nxt.next_offset - 1 - group[0].base_offset > _INT32_MAX
                ):
                    break
                group.append(nxt)
                size += nxt.size
                index_size += nxt.offset_index.size_bytes
                time_size += nxt.time_index.size_bytes
                i += 1
            groups.append(group)
        return groups

    def _clean_group(
        self, log: PartitionLog, group: list[LogSegment], end: int, now: int,
        new_horizon: int, stats: CleanerStats, transactions: CleanedTransactions | None = None,
    ) -> int:
        base = group[0].base_offset
        for fn in (files.log_file, files.index_file, files.time_index_file,
                   files.txn_index_file):
            fn(log.dir, base, files.CLEANED_SUFFIX).unlink(missing_ok=True)
        if transactions is None:
            transactions = CleanedTransactions()
            transactions.add_aborted(log.collect_aborted_transactions(base, end))
        cleaned = LogSegment(
            log.dir, base, log.config.index_interval_bytes, log.config.segment_index_bytes,
            suffix=files.CLEANED_SUFFIX, new=True,
        )
        min_horizon = -1
        try:
            out = bytearray()
            headers: list[BatchHeader] = []
            last_dropped: BatchHeader | None = None
            # An aborted transaction's entry goes into the cleaned index only while its
            # abort marker is kept (Kafka's cleanedIndex): keyed by the marker's offset.
            entries = {e.last_offset: e for s in group for e in s.txn_index.entries}
            kept_entries: list[AbortedTxn] = []

            def emit(data: bytes | memoryview) -> None:
                headers.append(BatchHeader.parse(data, 0, at=len(out)))
                out.extend(data)
                if len(out) >= self.io_buffer_size:
                    flush()

            def flush() -> None:
                if out:
                    cleaned.append(out, headers)
                    stats.bytes_written += len(out)
                    self.throttler.maybe_throttle(len(out))
                    out.clear()
                    headers.clear()

            for segment in group:
                for header, batch in read_batches(
                    segment, 0, segment.size, self.io_buffer_size, self.throttler,
                    self._check_abort,
                ):
                    stats.bytes_read += header.size
                    if header.is_control:
                        kept, horizon = self._filter_marker(header, batch, end, now,
                                                            new_horizon, transactions)
                    elif transactions.is_aborted(header) and header.base_offset < end:
                        kept, horizon = None, -1  # aborted data (module doc)
                    else:
                        kept, horizon = self._filter_batch(header, batch, end, now,
                                                           new_horizon, stats)
                    if kept is None:
                        last_dropped = header
                        continue
                    last_dropped = None
                    if header.is_control and entries:
                        entry = entries.get(header.base_offset)
                        if entry is not None and entry.producer_id == header.producer_id:
                            kept_entries.append(entry)
                    if horizon >= 0 and (min_horizon < 0 or horizon < min_horizon):
                        min_horizon = horizon
                    emit(kept)
            if last_dropped is not None:
                # Keep the group's offset range (and the producer's last batch): see header.
                emit(empty_batch(last_dropped))
            flush()
            for entry in kept_entries:
                cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.flush()
        except BaseException:
            cleaned.delete_files()
            raise
        stats.segments_cleaned += len(group)
        stats.segments_written += 1
        # Past this point the files may be committed (``.swap``): an error leaves them for
        # the load path to finish, never deletes them.
        if not log.replace_segments(cleaned, group):
            cleaned.delete_files()
            raise CleanerAbortedError(f"{log.name} changed while it was being cleaned")
        return min_horizon

    @staticmethod
    def _filter_marker(
        header: BatchHeader, batch: memoryview, end: int, now: int, new_horizon: int,
        transactions: CleanedTransactions,
    ) -> tuple[bytes | memoryview | None, int]:
        """A control batch (Kafka's rule, KIP-534): kept while data of its transaction
        remains; once none does, it gets a delete horizon (now + ``delete.retention.ms``)
        and a pass after the horizon removes it, so that a consumer that read the
        transaction's data still reads its marker."""
        try:
            marker = read_end_txn_marker(batch)
        except InvalidRecordError:
            marker = None
        removable = transactions.marker_removable(header, marker)
        if header.base_offset >= end or not removable or marker is None:
            return batch, header.base_timestamp if header.has_delete_horizon else -1
        if header.has_delete_horizon:
            if now >= header.base_timestamp:
                return None, -1
            return batch, header.base_timestamp
        [record] = list(iter_records(batch))
        builder = BatchBuilder(
            base_offset=header.base_offset, timestamp_type=header.timestamp_type,
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            partition_leader_epoch=header.partition_leader_epoch, is_transactional=True,
            is_control=True, delete_horizon_ms=new_horizon,
        )
        builder.append(record.key, record.value, record.timestamp)
        return builder.build(), new_horizon

    def _filter_batch(
        self, header: BatchHeader, batch: memoryview, end: int, now: int, new_horizon: int,
        stats: CleanerStats,
    ) -> tuple[bytes | memoryview | None, int]:
        """(bytes to write or None to drop the batch, its delete horizon or -1)."""
        existing_horizon = header.base_timestamp if header.has_delete_horizon else -1
        if header.base_offset >= end or header.is_control:
            stats.records_written += header.record_count
            return batch, existing_horizon
        offset_map = self.offset_map
        horizon_passed = header.has_delete_horizon and now >= existing_horizon
        kept = []
        removed = False
        tombstones = False
        try:
            records = list(iter_records(batch))
        except InvalidRecordError as exc:
            raise CleanerError(
                f"corrupt records in the batch at offset {header.base_offset}: {exc}"
            ) from exc
        stats.records_read += len(records)
        for record in records:
            if record.key is None:
                stats.records_invalid += 1
                removed = True
                continue
            if offset_map.get(record.key) > record.offset:
                removed = True
                continue
            if record.value is None:
                if horizon_passed:
                    stats.tombstones_removed += 1
                    removed = True
                    continue
                tombstones = True
            kept.append(record)
        stats.records_written += len(kept)
        if not kept:
            return None, -1
        if not removed and (not tombstones or header.has_delete_horizon):
            return batch, existing_horizon
        horizon: int | None = None
        if tombstones:
            horizon = existing_horizon if header.has_delete_horizon else new_horizon
        builder = BatchBuilder(
            compression=header.compression,
            base_offset=header.base_offset,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            delete_horizon_ms=horizon,
            last_offset_delta_override=header.last_offset_delta,
        )
        for record in kept:
            builder.append(record.key, record.value, record.timestamp, record.headers,
                           offset_delta=record.offset - header.base_offset)
        return builder.build(), -1 if horizon is None else horizon
