"""Leader epoch cache: the start offset of each leader epoch (Kafka's LeaderEpochFileCache,
KIP-101, KIP-279).

How it works: each time a new leader epoch appends its first batch, (epoch, start offset)
is added. A follower asks the leader ``end_offset_for(epoch)`` (OffsetForLeaderEpoch) and
truncates to it, so replicas never diverge. Truncating the log truncates the cache
(``truncate_from_end``); advancing the log start offset trims it (``truncate_from_start``).
The cache is persisted in the partition directory's ``leader-epoch-checkpoint``.

When the file is written. Kafka writes it, with an fsync, on every new epoch. Here a new
epoch stays in memory until the log's recovery point is about to pass it: the log calls
:meth:`LeaderEpochCache.write` before it moves the recovery point (the flush of a rolled
segment, ``flush()``, close) and truncations schedule a write. After an unclean shutdown,
recovery re-reads every batch past the recovery point and assigns its epoch again (as
Kafka's ``LogSegment.recover`` does), so an entry the file lacks is rebuilt from the log;
entries below the recovery point were written before it moved. This takes a write, two
fsyncs and a rename off the first append of every partition: 1.3 CPU ms each, 1.3 CPU s
for the first produce to 1,000 new partitions.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from odradek.storage import checkpoint

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_MAX_OFFSET = 2**63 - 1  # sorts after every (epoch, offset) of the same epoch


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        # A damaged checkpoint is a cache lost: the log rebuilds the epochs from its batches
        # (a full recovery, PartitionLog.__init__).
        self.damaged = False
        try:
            self.entries: list[tuple[int, int]] = checkpoint.read_epochs(path)
        except checkpoint.CheckpointError as exc:
            log.warning("ignoring a damaged leader epoch checkpoint, rebuilding it: %s", exc)
            self.entries = []
            self.damaged = True
        # How a truncation's checkpoint write (two fsyncs) is run: the log hands it to its
        # background I/O worker, so that it does not wait on the disk under the log's lock
        # (KAFKA-15046, KAFKA-16541). Inline by default.
        self.schedule: Callable[[Callable[[], None]], None] = lambda fn: fn()
        # Changes made to ``entries``, and how many of them the file holds.
        self._changes = 0
        self._written = 0
        self._write_lock = threading.Lock()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if it is not newer)."""
        if epoch < 0:
            return
        if self.entries and (epoch <= self.entries[-1][0] or start_offset < self.entries[-1][1]):
            return
        self.entries.append((epoch, start_offset))
        self._changes += 1  # written before the recovery point passes it (module doc)

    @property
    def unwritten(self) -> bool:
        """Whether the checkpoint file is behind the entries."""
        return self._changes != self._written

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, Kafka's
        ``LeaderEpochFileCache.endOffsetFor`` branch by branch:

        - no epoch asked (-1: a replica that never had one): -1/-1;
        - the latest epoch: it ends at the log end offset (it is still being written);
        - no cached epoch above the one asked (newer than the latest, or an empty cache):
          -1/-1, which a leader never meets since it caches its own epoch when it leads;
        - older than every cached epoch: the asked epoch, ending where the first cached
          epoch begins. Retention dropped what came before (``truncate_from_start``), so
          the asker keeps its log below that offset and fetches the rest, instead of
          falling back to its high watermark, the rule KIP-101 replaced;
        - otherwise the largest cached epoch at or below the one asked, ending where the
          next cached epoch begins.
        """
        entries = self.entries
        if epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if entries and epoch == entries[-1][0]:
            return epoch, log_end_offset
        # the first cached epoch above the one asked
        higher = bisect.bisect_right(entries, (epoch, _MAX_OFFSET))
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, entries[0][1]
        return entries[higher - 1][0], entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting at or after ``end_offset`` (log truncated to it)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._changes += 1
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start offset moved: the epoch covering it now starts there."""
        if not self.entries or self.entries[0][1] >= start_offset:
            return
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        covering = [(e, o) for e, o in self.entries if o <= start_offset][-1]
        self.entries = [(covering[0], start_offset), *kept]
        self._changes += 1
        self.flush()

    def clear(self) -> None:
        self.entries = []
        self._changes += 1
        self.flush()

    def flush(self) -> None:
        """Write the checkpoint through ``schedule`` (a truncation: the log's lock is held)."""
        self.schedule(self.write)

    def write(self) -> None:
        """Write the checkpoint (write, fsync, rename) if it is behind the entries.

        Any thread may call it: writes are serialised, and each takes its snapshot under
        the lock, so a later write never puts older entries back."""
        with self._write_lock:
            changes = self._changes  # read before the entries: never claims too much
            if changes == self._written:
                return
            checkpoint.write_epochs(self.path, list(self.entries))
            self._written = changes
