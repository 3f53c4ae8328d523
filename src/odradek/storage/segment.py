"""One segment of a partition log: a ``.log`` file plus its indexes (Kafka's LogSegment).

How it works: batches are appended to the ``.log`` exactly as given (their offsets already
assigned). For each batch, once more than ``index.interval.bytes`` were written since the
last index entry, the offset index gets (batch last offset, batch position) and the time
index gets (largest timestamp so far, its offset). A read for an offset looks up the index
for the nearest earlier batch position and walks batch headers forward (a few ``pread``s,
never records) to the batch that holds the offset; the answer is a *file region*
(position, size) that the network layer can ``sendfile``.

Recovery (after an unclean shutdown) re-reads the log through a read-only mmap, validates
every batch (length, magic, CRC32C, offsets increasing), rebuilds both indexes and truncates
the file at the first torn or corrupt batch. The aborted-transaction index (``.txnindex``,
:mod:`odradek.storage.txn_index`) is written by the log when an abort marker is appended;
the segment truncates, renames, flushes and deletes it with its other files.

Descriptors (Kafka's LazyIndex, KAFKA-7283; bounded further here). A segment costs up to
three descriptors: its ``.log`` and one per mapped index (a CPython ``mmap`` holds a dup of
its file's descriptor). The active segment is *pinned*: its ``.log`` stays open, so
appends never reopen anything, and its indexes are mapped on first use. Every other
segment is *cold*: its files are opened and mapped when first needed and it joins
:data:`OPEN_COLD_SEGMENTS`, a process-wide LRU of :data:`MAX_OPEN_COLD_SEGMENTS`; the
least recently used one is released (``.log`` descriptor and index maps dropped) when
another one opens. So a broker's descriptors grow with the partitions in use (about one
per idle partition), not with the segments on disk.

A released descriptor is never one a reader still uses: the ``.log`` descriptor is owned
by a :class:`FileHandle`, closed when its last reference goes (CPython's reference
counting), and a reader holds the handle (a fetch answer keeps it until the network
layer has its own ``dup``). Releasing only drops the segment's reference.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    InvalidRecordError,
    TimestampType,
    iter_records,
    validate_batch,
)
from odradek.records.legacy import (
    MESSAGE_OVERHEAD_V0,
    entry_header,
    iter_messages,
    validate_entry,
)
from odradek.storage import files
from odradek.storage.errors import StorageError
from odradek.storage.index import IndexCorruptError, OffsetIndex, TimeIndex, TimestampOffset
from odradek.storage.txn_index import TxnIndex

# Cold segments kept open at once, process-wide: at most three descriptors each. Enough for
# consumers catching up on a few hundred partitions without reopening per fetch, small
# next to a default soft limit of 1,024 descriptors.
MAX_OPEN_COLD_SEGMENTS = 128
# The smallest entry a segment can hold: a v0 message with null key and value (segments
# of a Kafka before 0.11 hold message sets of formats v0/v1, see records/legacy.py).
_MIN_ENTRY = LOG_OVERHEAD + MESSAGE_OVERHEAD_V0


class FileHandle:
    """An open descriptor closed when the last reference to it goes (or by :meth:`close`).

    Hold it, not the bare ``fd``, for as long as the descriptor is used: a segment that
    releases its handle never closes a descriptor a reader still has."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()


class OpenSegments:
    """An LRU of open cold segments (module doc); releases the least recently used one
    beyond ``capacity``. Thread-safe: readers on the event loop, the cleaner's and the
    log manager's threads all open cold segments."""

    def __init__(self, capacity: int = MAX_OPEN_COLD_SEGMENTS) -> None:
        self.capacity = capacity
        self._open: OrderedDict[int, LogSegment] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def touch(self, segment: LogSegment) -> None:
        """``segment`` was just used: most recent; release the oldest beyond capacity."""
        key = id(segment)
        evicted: list[LogSegment] = []
        with self._lock:
            if key in self._open:
                self._open.move_to_end(key)
            else:
                self._open[key] = segment
            while len(self._open) > self.capacity:
                evicted.append(self._open.popitem(last=False)[1])
        for old in evicted:
            old.release()

    def discard(self, segment: LogSegment) -> None:
        with self._lock:
            self._open.pop(id(segment), None)

    def release_all(self) -> int:
        """Release every cold segment (out of descriptors: give back what can be)."""
        with self._lock:
            evicted = list(self._open.values())
            self._open.clear()
        for old in evicted:
            old.release()
        return len(evicted)


OPEN_COLD_SEGMENTS = OpenSegments()


class BatchExtent(Protocol):
    """What appending needs to know of a batch: a :class:`BatchHeader` is one."""

    @property
    def position(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


class AppendedBatch(NamedTuple):
    """A batch as written by a leader append (offsets assigned): cheaper to build than
    re-parsing the rewritten 61-byte header."""

    position: int
    size: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class LogOffsetPosition:
    """Where a batch sits: its first offset, its position in the file and its size."""

    offset: int
    position: int
    size: int


class LogSegment:
    def __init__(
        self,
        dir: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        suffix: str = "",
        new: bool = True,
    ) -> None:
        """``new``: a segment being created (indexes preallocated for appends); a segment
        loaded from disk maps its indexes as they are until :meth:`make_active`."""
        self.dir = dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = files.log_file(dir, base_offset, suffix)
        self.open_segments = OPEN_COLD_SEGMENTS
        # Active (pinned): the .log stays open. Cold: opened on use, in the LRU.
        self.pinned = new
        self._closed = False
        self._deleted = False
        self._file: FileHandle | None = None
        if new:
            handle = FileHandle(os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
            self.size = os.fstat(handle.fd).st_size
        else:
            handle = None
            self.size = self.log_path.stat().st_size
        self.offset_index = OffsetIndex(
            files.index_file(dir, base_offset, suffix), base_offset, max_index_size, new
        )
        self.time_index = TimeIndex(
            files.time_index_file(dir, base_offset, suffix), base_offset, max_index_size, new
        )
        # A new, empty segment's .txnindex is known empty: a read_committed fetch does not
        # open the file to find out.
        self.txn_index = TxnIndex(files.txn_index_file(dir, base_offset, suffix),
                                  empty=new and self.size == 0)
        self._file = handle
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = base_offset
        self.rolling_based_timestamp: int | None = None
        self.roll_jitter_ms = 0  # set by the log from segment.jitter.ms
        self.created_ms = int(time.time() * 1000)
        self._next_offset: int | None = None if self.size else base_offset
        self._legacy: bool | None = None if self.size else False
        self._flushed_size = self.size
        # Serialises fsync with close/delete: a rolled segment is flushed by a worker
        # thread and may be deleted (truncation, retention) meanwhile.
        self._fd_lock = threading.Lock()
        # Held while a file is opened by its path and while the files are renamed
        # (change_suffix): retention and the cleaner rename a segment ``.deleted`` on their
        # threads while a fetch on the loop, holding the segment list from before, may
        # reopen its released files (issue 52). Taken after ``_fd_lock``, never before.
        self.path_lock: AbstractContextManager[Any] = threading.Lock()
        self.offset_index.path_lock = self.time_index.path_lock = self.path_lock
        self.txn_index.path_lock = self.path_lock

    # -- descriptors ---------------------------------------------------------------------
    def file_handle(self) -> FileHandle:
        """The ``.log``'s open handle, opened if released (module doc). Hold it for as
        long as its descriptor is used."""
        handle = self._file
        if handle is None:
            return self._open_file()
        if not self.pinned:
            self.open_segments.touch(self)
        return handle

    def _open_file(self) -> FileHandle:
        with self._fd_lock:
            handle = self._file
            if handle is None:
                if self._closed or self._deleted:
                    raise StorageError(f"segment {self.log_path} is closed or deleted")
                with self.path_lock:
                    handle = self._file = FileHandle(os.open(self.log_path, os.O_RDWR))
        if not self.pinned:
            self.open_segments.touch(self)
        return handle

    @property
    def fd(self) -> int:
        """The ``.log``'s descriptor (-1 once closed). Valid while the segment holds its
        handle: a caller that uses it past the current call holds :meth:`file_handle`."""
        if self._closed or self._deleted:
            handle = self._file
            return handle.fd if handle is not None else -1
        return self.file_handle().fd

    @property
    def is_open(self) -> bool:
        """Whether the ``.log`` descriptor is open (for tests and the descriptor count)."""
        return self._file is not None

    def release(self) -> None:
        """A cold segment gives back its descriptor and index maps (module doc); the next
        use opens them again. Readers holding the handle or a map keep theirs."""
        if self.pinned:
            return
        self._file = None
        self.offset_index.release()
        self.time_index.release()

    # -- state ---------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """The offset after this segment's last batch (its base offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    def _read_next_offset(self) -> int:
        start = self.offset_index.lookup(1 << 62).position if self.offset_index.entries else 0
        next_offset = self.base_offset
        for header in self._walk(start):
            next_offset = header.next_offset
        return next_offset

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when it has none (Kafka's rule)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        with self.path_lock:
            return int(self.log_path.stat().st_mtime * 1000)

    def load_timestamps(self) -> None:
        """Recover the largest timestamp from the time index and the batches after it."""
        last = self.time_index.last_entry
        self.max_timestamp_so_far = last.timestamp
        self.offset_of_max_timestamp_so_far = last.offset
        start = self.offset_index.lookup(last.offset).position
        for header in self._walk(start):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp_so_far = header.last_offset
        first = self._read_header(0)
        if first is not None and first.max_timestamp >= 0:
            self.rolling_based_timestamp = first.max_timestamp

    def make_active(self) -> None:
        """Pin the segment (its ``.log`` stays open) and let both indexes take appends
        again (sized for them when first mapped)."""
        self.open_segments.discard(self)
        self.pinned = True
        self.file_handle()
        self.offset_index.reopen_writable()
        self.time_index.reopen_writable()

    def is_full(self) -> bool:
        return self.offset_index.is_full() or self.time_index.is_full()

    # -- append --------------------------------------------------------------------------
    def append(
        self, buf: bytes | bytearray | memoryview, batches: Sequence[BatchExtent]
    ) -> None:
        """Append ``buf`` (whole batches with offsets assigned); ``batches`` describe its
        batches (headers or :class:`AppendedBatch`) with positions relative to ``buf``."""
        position = self.size
        size = len(buf)
        handle = self._file or self.file_handle()
        fd = handle.fd
        written = os.pwrite(fd, buf, position)
        if written < size:  # a short write: retry the rest
            view = memoryview(buf)
            while written < size:
                written += os.pwrite(fd, view[written:], position + written)
        index_batch = self._index_batch
        for batch in batches:
            index_batch(batch.last_offset, batch.max_timestamp, batch.size,
                        position + batch.position)
        self.size = position + size
        if batches:
            self._next_offset = batches[-1].last_offset + 1

    # -- read ----------------------------------------------------------------------------
    def _read_header(self, position: int) -> BatchHeader | None:
        if position + _MIN_ENTRY > self.size:
            return None
        data = os.pread(self.file_handle().fd, BATCH_HEADER_SIZE, position)
        if len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] < CURRENT_MAGIC:
            return entry_header(data, position)  # a v0/v1 entry of an old Kafka
        if len(data) < BATCH_HEADER_SIZE:
            return None
        header = BatchHeader.parse(data, 0, at=position)
        if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            return None
        return header

    def _walk(self, start: int) -> Iterator[BatchHeader]:
        handle = self.file_handle()  # held for the walk
        fd = handle.fd
        position = start
        size = self.size
        magic_at = MAGIC_OFFSET
        while position + _MIN_ENTRY <= size:
            data = os.pread(fd, BATCH_HEADER_SIZE, position)
            if len(data) < BATCH_HEADER_SIZE or data[magic_at] < 2:
                # A v0/v1 entry (a segment written by a Kafka before 0.11), or the end.
                if len(data) <= magic_at or data[magic_at] >= CURRENT_MAGIC:
                    return
                legacy = entry_header(data, position)
                if legacy is None or position + legacy.size > size:
                    return
                yield legacy
                position += legacy.size
                continue
            header = BatchHeader.parse(data, 0, at=position)
            if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                return
            if position + header.size > size:
                return
            yield header
            position += header.size

    @property
    def legacy(self) -> bool:
        """Does the segment start with a v0/v1 entry (written by a Kafka before 0.11)?
        Such a segment is up-converted for fetchers (read once, then cached)."""
        if self._legacy is None:
            head = os.pread(self.file_handle().fd, MAGIC_OFFSET + 1, 0) if self.size else b""
            self._legacy = len(head) > MAGIC_OFFSET and head[MAGIC_OFFSET] < CURRENT_MAGIC
        return self._legacy

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is ≥ ``offset`` (Kafka's translateOffset)."""
        start = max(self.offset_index.lookup(offset).position, starting_position)
        for header in self._walk(start):
            if header.last_offset >= offset:
                return LogOffsetPosition(header.base_offset, header.position, header.size)
        return None

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None,
        min_one_message: bool = False,
    ) -> tuple[LogOffsetPosition, int] | None:
        """Region to send for a fetch from ``start_offset``: (first batch, byte count).

        At most ``max_size`` bytes and never past ``max_position`` (the high watermark's
        position); with ``min_one_message`` the first batch is returned whole even when it
        is larger than ``max_size`` (Kafka's KIP-74 rule). None when past the end.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        limit = self.size if max_position is None else max_position
        if found.position >= limit:
            return found, 0
        size = min(max_size, limit - found.position)
        if min_one_message and size < found.size:
            size = min(found.size, limit - found.position)
        return found, max(0, size)

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self.file_handle().fd, size, position)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> TimestampOffset | None:
        """The first record with timestamp ≥ ``timestamp`` and offset ≥ ``start_offset``."""
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, start_offset)).position
        for header in self._walk(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            batch = self.read_bytes(header.position, header.size)
            if header.magic < CURRENT_MAGIC:  # a v0/v1 entry of an old Kafka
                for message in iter_messages(batch):
                    if message.timestamp >= timestamp and message.offset >= start_offset:
                        return TimestampOffset(message.timestamp, message.offset)
                continue
            for record in iter_records(batch):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
                        return TimestampOffset(header.max_timestamp, record.offset)
                    return TimestampOffset(record.timestamp, record.offset)
        return None

    # -- recovery ------------------------------------------------------------------------
    def recover(
        self, max_message_size: int,
        assign_epoch: Callable[[int, int], None] | None = None,
    ) -> int:
        """Revalidate the whole log, rebuild both indexes, truncate a torn or corrupt tail.
        ``assign_epoch(partition_leader_epoch, base_offset)`` is told of every valid batch
        (the leader epoch cache is rebuilt from the log, as in Kafka's
        ``LogSegment.recover``). Returns the number of bytes truncated."""
        self.offset_index.reset()
        self.time_index.reset()
        # Rebuilt by appends: writable while rebuilding, trimmed to their entries after.
        self.offset_index.reopen_writable()
        self.time_index.reopen_writable()
        handle = self.file_handle()
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = None
        valid = 0
        next_offset = self.base_offset
        if self.size:
            with mmap.mmap(handle.fd, self.size, prot=mmap.PROT_READ) as m:
                view = memoryview(m)
                try:
                    while valid < self.size:
                        try:
                            if valid + MAGIC_OFFSET < self.size and (
                                view[valid + MAGIC_OFFSET] < CURRENT_MAGIC
                            ):
                                header = validate_entry(view, valid)  # v0/v1, old Kafka
                            else:
                                header = validate_batch(view, valid, strict_offsets=False)
                        except InvalidRecordError:
                            break
                        if header.base_offset < next_offset or header.size > max_message_size + (
                            BATCH_HEADER_SIZE
                        ):
                            break
                        self._index_batch(header.last_offset, header.max_timestamp,
                                          header.size, header.position)
                        if assign_epoch is not None:
                            assign_epoch(header.partition_leader_epoch, header.base_offset)
                        next_offset = header.next_offset
                        valid += header.size
                finally:
                    view.release()
        truncated = self.size - valid
        if truncated:
            os.ftruncate(handle.fd, valid)
            self.size = valid
        self._next_offset = next_offset
        try:
            self.txn_index.truncate_to(next_offset)
        except IndexCorruptError:
            self.txn_index.reset()
            self.txn_index.rebuilding = True
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                skip_full_check=True,
            )
        self.offset_index.trim()
        self.time_index.trim()
        return truncated

    def _index_batch(self, last_offset: int, max_timestamp: int, size: int, position: int) -> None:
        """Account one batch now at ``position``: timestamps, and an index entry every
        ``index.interval.bytes``. A full index takes no more entries (the next append
        rolls), so an append never fails after its bytes are written."""
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp_so_far = last_offset
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_timestamp
        if (
            self.bytes_since_last_index_entry > self.index_interval_bytes
            and not self.offset_index.is_full()
        ):
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                skip_full_check=True,
            )
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def sanity_check(self) -> None:
        """Cheap-enough checks of the indexes against the log; raises IndexCorruptError."""
        self.offset_index.sanity_check(self.size)
        try:
            self.txn_index.sanity_check()
        except IndexCorruptError:
            # Rebuilt from the markers by the producer state's replay (not from this
            # segment alone: its entries need the state before it).
            self.txn_index.reset()
            self.txn_index.rebuilding = True
        self.time_index.sanity_check(self.next_offset - 1 if self.size else self.base_offset)
        if self.offset_index.entries:
            last = self.offset_index.entry(self.offset_index.entries - 1)
            header = self._read_header(last.position)
            if header is None or header.last_offset != last.offset:
                raise IndexCorruptError(
                    f"{self.offset_index.path}: last entry {last} does not point at its batch"
                )

    # -- truncation, roll, flush, close --------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is ≥ ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - found.position
        os.ftruncate(self.file_handle().fd, found.position)
        self.size = found.position
        self._flushed_size = min(self._flushed_size, self.size)
        self._next_offset = None
        # Timestamps and the index cadence must be recomputed from what remains.
        self.load_timestamps() if self.size else self._reset_timestamps()
        self.bytes_since_last_index_entry = 0
        return removed

    def _reset_timestamps(self) -> None:
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = None

    def on_become_inactive(self) -> None:
        """At roll: record the final max timestamp and trim both indexes (Kafka's rule);
        the segment turns cold (module doc)."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                skip_full_check=True,
            )
        self.offset_index.trim()
        self.time_index.trim()
        self.pinned = False
        if self._file is not None:
            self.open_segments.touch(self)

    def flush(self) -> None:
        handle = self._file  # the flush of a rolled segment holds it (if not released)
        if handle is None and self._flushed_size != self.size:
            try:
                handle = self._open_file()
            except (StorageError, FileNotFoundError):
                return  # deleted or renamed .deleted since the flush was scheduled
        with self._fd_lock:
            if self._closed or self._deleted:
                return  # closed or deleted since the flush was scheduled
            if self._flushed_size != self.size:
                assert handle is not None
                os.fsync(handle.fd)
                self._flushed_size = self.size
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()

    def close(self) -> None:
        if self._closed:
            return
        if self.max_timestamp_so_far >= 0 and not self.time_index.is_full():
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
            )
        self.open_segments.discard(self)
        with self._fd_lock:
            self.offset_index.close()
            self.time_index.close()
            self._closed = True
            # Closed now, or when the last reader lets go (a fetch answer may hold it).
            self._file = None

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the segment's files (``.deleted``, ``.swap`` …), under the path lock: a
        reader reopening one by path waits for the rename and the new path together."""
        with self.path_lock:
            for path_fn in (files.log_file, files.index_file, files.time_index_file):
                src = path_fn(self.dir, self.base_offset, old)
                if src.exists():
                    src.rename(path_fn(self.dir, self.base_offset, new))
            self.log_path = files.log_file(self.dir, self.base_offset, new)
            self.offset_index.path = files.index_file(self.dir, self.base_offset, new)
            self.time_index.path = files.time_index_file(self.dir, self.base_offset, new)
            self.txn_index.rename(files.txn_index_file(self.dir, self.base_offset, new))

    def abandon(self) -> None:
        """The segment is going (its files are deleted, or its whole directory is): drop
        its descriptor and index maps now. A fetch answer still holding the
        :class:`FileHandle` keeps reading the right bytes, and the descriptor number is
        not reused under it, until it lets go."""
        self.open_segments.discard(self)
        with self._fd_lock:
            self._deleted = True
            self._file = None
            self.offset_index.release_for_delete()
            self.time_index.release_for_delete()

    def delete_files(self) -> None:
        """Unlink the segment's files (after :meth:`abandon`)."""
        self.abandon()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.path.unlink(missing_ok=True)
        self.time_index.path.unlink(missing_ok=True)
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
