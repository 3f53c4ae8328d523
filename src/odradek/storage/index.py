"""Sparse, memory-mapped segment indexes (Kafka's AbstractIndex, OffsetIndex, TimeIndex).

How it works: an index file holds fixed-size entries sorted by key. While its segment is
active the file is sized ahead of its entries (from 4 KiB, doubling as it fills, never
above ``segment.index.bytes``) and memory-mapped; entries are appended in place and
``entries`` counts the valid ones; the index is full at ``segment.index.bytes``.
When the segment rolls or the log closes, the file is trimmed to exactly its entries, so a
closed index's length tells its entry count — the format Kafka's own tools read.

- OffsetIndex (``.index``): 8-byte entries, 4-byte offset relative to the segment's base
  offset + 4-byte position of a batch in the ``.log``. Entries are sparse: one every
  ``index.interval.bytes`` of log. ``lookup(t)`` returns the largest entry whose offset is
  ≤ t; the caller scans the log forward from its position.
- TimeIndex (``.timeindex``): 12-byte entries, 8-byte timestamp + 4-byte relative offset,
  appended only when the timestamp grows. ``lookup(ts)`` returns the largest entry whose
  timestamp is ≤ ts.

Lookups are binary searches. As in Kafka's AbstractIndex, they first search the "warm"
tail (the last 8 KiB of entries) where most lookups land (consumers near the head), so the
pages touched stay in memory; only then the whole index.

Indexes are caches of their log: a missing index, or one that fails :meth:`sanity_check`,
is rebuilt from the log on load.

Lazy mapping (Kafka's LazyIndex, KAFKA-7283). An index is not opened or mapped when it is
constructed: the entry count comes from the file's length (a ``stat``), and the file is
mapped on first use (a lookup, an append). In CPython every ``mmap`` holds a duplicate of
its file's descriptor, so a mapped index costs one descriptor; :meth:`_Index.release`
gives it back for a cold segment. Releasing only drops the index's reference to the map:
a lookup running on another thread keeps its own reference, and the map (and its
descriptor) goes when the last one does, so a release never pulls a map from under a
reader.
"""

from __future__ import annotations

import abc
import contextlib
import mmap
import os
import struct
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

WARM_BYTES = 8192  # Kafka's warm section: the tail that stays in the page cache
GROW_START_BYTES = 4096  # first allocation of an index file; doubled as it fills


class IndexCorruptError(Exception):
    """An index failed its sanity check; the caller rebuilds it from the log."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class _Index(abc.ABC):
    ENTRY: struct.Struct

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int, preallocate: bool = True
    ) -> None:
        """``preallocate``: the index takes appends (a new or the active segment) and is
        sized for them when first mapped; an existing closed index is mapped at its own
        length. Nothing is mapped here (module doc: lazy mapping)."""
        self.path = path
        # Held while the file is opened by ``path``: its segment renames it under the same
        # lock (LogSegment.change_suffix), so a reopen never falls between a rename and
        # the new path.
        self.path_lock: AbstractContextManager[Any] = contextlib.nullcontext()
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._mmap: mmap.mmap | None = None
        self.writable = preallocate
        # Entries written or trimmed since the file was last flushed while unmapped.
        self._dirty = False
        try:
            length = path.stat().st_size
        except FileNotFoundError:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
            length = 0
        self.misaligned = length % self.entry_size != 0
        self.entries = length // self.entry_size
        if preallocate:
            self.entries = min(self.entries, self.max_entries)

    @property
    def is_mapped(self) -> bool:
        return self._mmap is not None

    def _map(self) -> mmap.mmap:
        """The index's map, made now if it is not mapped (module doc: lazy mapping). A
        writable index is sized for appends first."""
        m = self._mmap
        if m is not None:
            return m
        with self.path_lock:
            fd = os.open(self.path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if self.writable:
                capacity = self._capacity_for(self.entries)
                if size != capacity:
                    os.ftruncate(fd, capacity)
                    size = capacity
                    self.misaligned = False
            if size == 0:
                raise IndexCorruptError(f"{self.path}: mapping an empty index")
            m = self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return m

    def release(self) -> None:
        """Give back a cold index's map and its descriptor; the next use maps it again.
        A writable (active) index keeps its map."""
        if not self.writable:
            self._mmap = None  # closed by the last reference (a lookup in flight may hold it)

    @abc.abstractmethod
    def _key(self, n: int) -> int:
        """The sort key of entry ``n``: relative offset or timestamp."""

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    def _search(self, target: int) -> int:
        """Index of the largest entry with key ≤ target, or -1."""
        n = self.entries
        if n == 0 or self._key(0) > target:
            return -1
        warm_first = max(0, n - 1 - WARM_BYTES // self.entry_size)
        lo, hi = (warm_first, n - 1) if self._key(warm_first) <= target else (0, warm_first)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _capacity_for(self, entries: int) -> int:
        """File size for ``entries`` plus room to grow: at least GROW_START_BYTES, doubled
        as needed, never above ``segment.index.bytes``. Growing lazily keeps the cost of
        a new segment (and of thousands of partitions) small; Kafka preallocates the
        whole file, which costs a page-fault storm on the first writes here."""
        cap = max(GROW_START_BYTES, self.entry_size)
        while cap < (entries + 1) * self.entry_size:
            cap *= 2
        return min(cap - cap % self.entry_size, self.max_entries * self.entry_size)

    def _append_entry(self, *fields: int) -> None:
        if self.is_full():
            raise IndexCorruptError(f"index {self.path} is full ({self.entries} entries)")
        m = self._mmap
        if m is None or (self.entries + 1) * self.entry_size > len(m):
            self.writable = True
            self.resize(self._capacity_for(self.entries))
            m = self._mmap
            assert m is not None
        self.ENTRY.pack_into(m, self.entries * self.entry_size, *fields)
        self.entries += 1

    def truncate_entries(self, entries: int) -> None:
        self.entries = max(0, min(entries, self.entries))

    def reset(self) -> None:
        self.entries = 0

    def flush(self) -> None:
        m = self._mmap
        if m is not None:
            m.flush()
            self._dirty = False
        elif self._dirty:  # written, then unmapped (trimmed at roll): fsync the file
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return  # renamed .deleted meanwhile (retention): nothing to keep
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dirty = False

    def trim(self) -> None:
        """Shrink the file to its entries and unmap it (on roll and close): the index is
        closed for appends; a later lookup maps it at its length."""
        size = self.entries * self.entry_size
        # Dropping the map loses nothing: its pages stay in the page cache (a shared map),
        # and the segment's flush fsyncs the file (``_dirty``), off the appending thread.
        self._mmap = None
        # By path: no descriptor is needed to trim a file.
        os.truncate(self.path, size)
        self.misaligned = False
        self.writable = False
        self._dirty = True

    def resize(self, size: int) -> None:
        # Dropping the map loses nothing: its dirty pages stay in the page cache. Durability
        # comes from flush() (msync) with the segment's fsync.
        self._mmap = None
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, size)
            self.misaligned = size % self.entry_size != 0
            if size > 0:
                self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._dirty = True

    def reopen_writable(self) -> None:
        """Take appends again (the segment became active); mapped at first use."""
        self._mmap = None
        self.writable = True

    def close(self, trim: bool = True) -> None:
        if trim:
            self.trim()
        m, self._mmap = self._mmap, None
        if m is not None:
            m.flush()
        self.writable = False

    def release_for_delete(self) -> None:
        """The files are about to go: drop the map, nothing to trim or flush."""
        self._mmap = None
        self.writable = False
        self._dirty = False

    def delete(self) -> None:
        self._mmap = None
        self.writable = False
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    ENTRY = struct.Struct(">ii")  # relative offset, position

    def _key(self, n: int) -> int:
        rel: int = self.ENTRY.unpack_from(self._mmap or self._map(), n * 8)[0]
        return rel

    def entry(self, n: int) -> OffsetPosition:
        rel, pos = self.ENTRY.unpack_from(self._mmap or self._map(), n * 8)
        return OffsetPosition(self.base_offset + rel, pos)

    @property
    def last_offset(self) -> int:
        return self.entry(self.entries - 1).offset if self.entries else self.base_offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        n = self._search(target_offset - self.base_offset)
        if n < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(n)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if not 0 <= rel < (1 << 31):
            raise IndexCorruptError(f"offset {offset} is out of range for base {self.base_offset}")
        if self.entries and rel <= self._key(self.entries - 1):
            raise IndexCorruptError(
                f"offset {offset} is not larger than the last indexed {self.last_offset}"
            )
        self._append_entry(rel, position)

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is ≥ ``offset``."""
        n = self._search(offset - self.base_offset)
        if n >= 0 and self.entry(n).offset == offset:
            n -= 1
        self.truncate_entries(n + 1)

    def sanity_check(self, log_size: int) -> None:
        """Every entry increasing in offset and position, inside the log."""
        if self.misaligned:
            raise IndexCorruptError(f"{self.path}: length is not a multiple of {self.entry_size}")
        last_rel, last_pos = -1, -1
        m = self._map() if self.entries else None
        for n in range(self.entries):
            rel, pos = self.ENTRY.unpack_from(m, n * 8)  # type: ignore[arg-type]
            if (rel <= last_rel and n > 0) or pos < last_pos or pos >= max(log_size, 1) or rel < 0:
                raise IndexCorruptError(f"{self.path}: entry {n} ({rel}, {pos}) is out of order")
            last_rel, last_pos = rel, pos


class TimeIndex(_Index):
    ENTRY = struct.Struct(">qi")  # timestamp, relative offset

    def _key(self, n: int) -> int:
        ts: int = self.ENTRY.unpack_from(self._mmap or self._map(), n * 12)[0]
        return ts

    def entry(self, n: int) -> TimestampOffset:
        ts, rel = self.ENTRY.unpack_from(self._mmap or self._map(), n * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    @property
    def last_entry(self) -> TimestampOffset:
        if not self.entries:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(self.entries - 1)

    def lookup(self, timestamp: int) -> TimestampOffset:
        n = self._search(timestamp)
        if n < 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(n)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append when ``timestamp`` is larger than the last entry's (Kafka's rule)."""
        if self.entries and timestamp <= self.last_entry.timestamp:
            return
        if self.is_full() and skip_full_check:
            return
        rel = offset - self.base_offset
        if not 0 <= rel < (1 << 31):
            raise IndexCorruptError(f"offset {offset} is out of range for base {self.base_offset}")
        self._append_entry(timestamp, rel)

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is ≥ ``offset`` (offsets grow with timestamps)."""
        keep = self.entries
        while keep > 0 and self.entry(keep - 1).offset >= offset:
            keep -= 1
        self.truncate_entries(keep)

    def sanity_check(self, last_offset: int) -> None:
        if self.misaligned:
            raise IndexCorruptError(f"{self.path}: length is not a multiple of {self.entry_size}")
        last_ts, last_off = -(1 << 63), -1
        for n in range(self.entries):
            ts, off = self.entry(n)
            if ts <= last_ts or off < last_off or off > last_offset:
                raise IndexCorruptError(f"{self.path}: entry {n} ({ts}, {off}) is out of order")
            last_ts, last_off = ts, off
