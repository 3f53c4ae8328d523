"""The aborted-transaction index of a segment, ``<base offset>.txnindex`` (Kafka's
TransactionIndex, KIP-98).

How it works: one entry per transaction aborted by a marker in this segment, appended
when the abort marker is appended (on the leader and on followers alike), in marker
order. A ``read_committed`` fetch asks the segments it touches for the aborted
transactions that overlap the offsets it returns (:meth:`TxnIndex.collect`), and the
consumer drops their records. Entries are 34 bytes, big-endian, as Kafka writes them::

    version             int16  0
    producer_id         int64
    first_offset        int64  the transaction's first offset in this partition
    last_offset         int64  the abort marker's offset
    last_stable_offset  int64  the partition's LSO once this transaction ended

The ``last_stable_offset`` tells a reader when to stop: once an entry's LSO reaches the
upper bound of the fetch, no transaction aborted later can have begun below it.

Like the other indexes it is a cache of the log: rebuilt on recovery from the markers
(:mod:`odradek.storage.producer_state`), truncated with its segment, renamed and deleted
with it. An entry lives only as long as its abort marker: the cleaner writes into a
cleaned segment only the entries of the markers it keeps, and the loader drops an entry
whose marker offset holds no abort marker of its producer (an older cleaner left such
entries behind; a reader would take the producer's later committed data as aborted).
It is small (a line per abort) and kept in memory once read; the file is appended to and
fsynced with its segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.storage import files
from odradek.storage.index import IndexCorruptError

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TxnIndex", "TxnSearchResult"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset,
                           self.last_offset, self.last_stable_offset)


@dataclass(frozen=True, slots=True)
class TxnSearchResult:
    """The aborted transactions found, and whether the search may stop (Kafka's
    TxnIndexSearchResult)."""

    aborted: list[AbortedTxn]
    complete: bool


def decode_entries(data: bytes, path: Path | None = None) -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise IndexCorruptError(
            f"{path}: {len(data)} bytes is not a whole number of {ENTRY_SIZE}-byte entries")
    entries = []
    for position in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, position)
        if version != CURRENT_VERSION:
            raise IndexCorruptError(f"{path}: entry of unknown version {version}")
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


class TxnIndex:
    def __init__(self, path: Path, empty: bool = False) -> None:
        """``empty``: the index of a segment being created with nothing in it yet, known
        to be empty without reading the file (a stale file of that name is removed, as
        Kafka's roll deletes a new segment's leftover index files)."""
        self.path = path
        # Held while the file is read by ``path`` (the segment renames it under it, as
        # the offset index's ``path_lock``).
        self.path_lock: AbstractContextManager[Any] = contextlib.nullcontext()
        self._entries: list[AbortedTxn] | None = None
        if empty:
            path.unlink(missing_ok=True)
            self._entries = []
        self._unflushed = False
        self._lock = threading.Lock()
        #: set by the loader when the file was missing or damaged: the producer state's
        #: replay refills it (producer_state.py)
        self.rebuilding = False

    def __repr__(self) -> str:
        return f"TxnIndex({self.path.name})"

    @property
    def entries(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is None:
            try:
                with self.path_lock:
                    data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            entries = self._entries = decode_entries(data, self.path)
        return entries

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset (-1: none)."""
        entries = self.entries
        return entries[-1].last_offset if entries else -1

    def append(self, entry: AbortedTxn) -> None:
        with self._lock:
            entries = self.entries
            if entries and entry.last_offset <= entries[-1].last_offset:
                raise ValueError(
                    f"{self.path.name}: entry at {entry.last_offset} is not after the last "
                    f"one at {entries[-1].last_offset}")
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, entry.encode())
            finally:
                os.close(fd)
            entries.append(entry)
            self._unflushed = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset)
        (Kafka's ``collectAbortedTxns``)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnSearchResult(found, True)
        return TxnSearchResult(found, False)

    def sanity_check(self) -> None:
        """Raises IndexCorruptError when the file does not decode."""
        self._entries = None
        _ = self.entries

    def reset(self) -> None:
        """Empty the index (it is about to be rebuilt)."""
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._entries = []
            self._unflushed = False

    def retain(self, keep: Callable[[AbortedTxn], bool]) -> list[AbortedTxn]:
        """Keep only the entries ``keep`` accepts, the file rewritten atomically when
        some go (the loader's repair of entries whose marker is gone, log_loader.py);
        returns the entries dropped."""
        with self._lock:
            kept: list[AbortedTxn] = []
            dropped: list[AbortedTxn] = []
            for entry in self.entries:  # one pass (an older cleaner left thousands)
                (kept if keep(entry) else dropped).append(entry)
            if not dropped:
                return []
            if kept:
                files.atomic_write(self.path, b"".join(e.encode() for e in kept))
            else:
                self.path.unlink(missing_ok=True)
            self._entries = kept
            self._unflushed = False
            return dropped

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at ``offset`` and after."""
        with self._lock:
            entries = self.entries
            keep = [e for e in entries if e.last_offset < offset]
            if len(keep) == len(entries):
                return
            if keep:
                with open(self.path, "r+b") as f:
                    f.truncate(len(keep) * ENTRY_SIZE)
                    os.fsync(f.fileno())
            else:
                self.path.unlink(missing_ok=True)
            self._entries = keep

    def flush(self) -> None:
        if not self._unflushed:
            return
        self._unflushed = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # renamed or deleted since
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            self.path.rename(path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
