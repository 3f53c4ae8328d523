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
"""

from __future__ import annotations

import abc
import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

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
        """``preallocate``: size the file for appends (a new or the active segment); an
        existing closed index is mapped at its own length."""
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._mmap: mmap.mmap | None = None
        exists = path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            self.misaligned = length % self.entry_size != 0
            if not exists or length == 0:
                self.entries = 0
            else:
                self.entries = length // self.entry_size
            if preallocate:
                self.entries = min(self.entries, self.max_entries)
                os.ftruncate(fd, self._capacity_for(self.entries))
            size = os.fstat(fd).st_size
            if size > 0:
                self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)

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
        if self._mmap is None or (self.entries + 1) * self.entry_size > len(self._mmap):
            self.resize(self._capacity_for(self.entries))
        assert self._mmap is not None
        self.ENTRY.pack_into(self._mmap, self.entries * self.entry_size, *fields)
        self.entries += 1

    def truncate_entries(self, entries: int) -> None:
        self.entries = max(0, min(entries, self.entries))

    def reset(self) -> None:
        self.entries = 0

    def flush(self) -> None:
        if self._mmap is not None:
            self._mmap.flush()

    def trim(self) -> None:
        """Shrink the file to its entries (on roll and close)."""
        self.resize(self.entries * self.entry_size)

    def resize(self, size: int) -> None:
        # Closing the map loses nothing: its dirty pages stay in the page cache. Durability
        # comes from flush() (msync) with the segment's fsync.
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, size)
            self.misaligned = size % self.entry_size != 0
            if size > 0:
                self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def reopen_writable(self) -> None:
        self.resize(self._capacity_for(self.entries))

    def close(self, trim: bool = True) -> None:
        if trim:
            self.trim()
        if self._mmap is not None:
            self._mmap.flush()
            self._mmap.close()
            self._mmap = None

    def delete(self) -> None:
        self.close(trim=False)
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    ENTRY = struct.Struct(">ii")  # relative offset, position

    def _key(self, n: int) -> int:
        assert self._mmap is not None
        rel: int = self.ENTRY.unpack_from(self._mmap, n * 8)[0]
        return rel

    def entry(self, n: int) -> OffsetPosition:
        assert self._mmap is not None
        rel, pos = self.ENTRY.unpack_from(self._mmap, n * 8)
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
        assert self._mmap is not None or self.entries == 0
        for n in range(self.entries):
            rel, pos = self.ENTRY.unpack_from(self._mmap, n * 8)  # type: ignore[arg-type]
            if (rel <= last_rel and n > 0) or pos < last_pos or pos >= max(log_size, 1) or rel < 0:
                raise IndexCorruptError(f"{self.path}: entry {n} ({rel}, {pos}) is out of order")
            last_rel, last_pos = rel, pos


class TimeIndex(_Index):
    ENTRY = struct.Struct(">qi")  # timestamp, relative offset

    def _key(self, n: int) -> int:
        assert self._mmap is not None
        ts: int = self.ENTRY.unpack_from(self._mmap, n * 12)[0]
        return ts

    def entry(self, n: int) -> TimestampOffset:
        assert self._mmap is not None
        ts, rel = self.ENTRY.unpack_from(self._mmap, n * 12)
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
