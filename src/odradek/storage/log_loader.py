"""Loading and recovering a partition log from its directory (Kafka's LogLoader).

How it works, run once when a :class:`~odradek.storage.log.PartitionLog` opens:

1. **Leftovers**: ``.tmp``, ``.cleaned`` and ``.deleted`` files are removed (an
   interrupted checkpoint write, cleaning, or deletion). A ``.swap`` log is a cleaner swap
   interrupted after its commit point: it replaces the segments it covers
   (:func:`complete_swaps`); a ``.swap`` index without its log was not committed and goes.
2. **Segments**: each ``.log`` becomes a segment. Indexes are caches: one that is missing
   or fails its sanity check is rebuilt from the log (:func:`recover_segment`); a
   ``.txnindex`` that does not decode is emptied and refilled by the producer state's
   replay (step 4; a missing one is a segment without aborted transactions). Orphan
   indexes (no ``.log``) are removed.
3. **Recovery** after an unclean shutdown (or a lost recovery-point or leader-epoch
   checkpoint): every segment from the one holding the recovery point on is revalidated
   batch by batch, its indexes and the leader epochs rebuilt, a torn or corrupt tail
   truncated; later segments are dropped (they cannot follow a hole)
   (:func:`recover_from`).
4. **Offsets**: the log start offset is at least the first segment's base offset, the
   recovery point at most the log end offset; the leader epoch cache and the producer
   state are brought in line with them (producer state from its snapshots and the batches
   after them, which also appends to each ``.txnindex`` the aborted transactions it
   lacks). Before that, a ``.txnindex`` entry whose marker offset no longer holds an
   abort marker of its producer is dropped (:func:`drop_stale_txn_entries`): cleaners
   before issue 46 kept entries after removing their markers, and such an entry makes
   readers and later passes take the producer's committed data as aborted.

Kafka's LogLoader does the same in ``load``, ``completeSwapOperations``,
``recoverSegment`` and ``recoverLog``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from odradek.records.batch import BatchHeader, InvalidRecordError
from odradek.records.control import ControlType, read_end_txn_marker
from odradek.storage import files
from odradek.storage.config import LogConfig
from odradek.storage.index import IndexCorruptError
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.segment import LogSegment
from odradek.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


class LoadableLog(Protocol):
    """What loading needs of the log it loads (:class:`~odradek.storage.log.PartitionLog`,
    which calls this module: a protocol here rather than an import back)."""

    dir: Path
    config: LogConfig
    log_start_offset: int
    recovery_point: int
    leader_epoch_cache: LeaderEpochCache
    producer_state: ProducerStateManager

    @property
    def name(self) -> str: ...

    @property
    def segments(self) -> list[LogSegment]: ...

    @property
    def active_segment(self) -> LogSegment: ...

    @property
    def log_end_offset(self) -> int: ...

    def _publish(self, segments: list[LogSegment]) -> None: ...

    def _new_segment(self, base_offset: int) -> LogSegment: ...

    def _assign_jitter(self, segment: LogSegment) -> None: ...

    def _add_segment(self, segment: LogSegment) -> None: ...

    def _segment_for(self, offset: int) -> int: ...

    def _flush_segments(self, segments: list[LogSegment]) -> None: ...


def load(plog: LoadableLog, had_clean_shutdown: bool) -> int:
    """Load ``plog``; returns how many segments had their indexes rebuilt. After an
    unclean shutdown that is expected (the active segment's indexes were not trimmed, or
    not written), so it is logged at DEBUG and counted in the log manager's summary; after
    a clean one it means damage, a WARNING."""
    rebuilt = 0
    for path in list(plog.dir.iterdir()):
        name = path.name
        if name.endswith((files.TMP_SUFFIX, files.CLEANED_SUFFIX, files.DELETED_SUFFIX)):
            path.unlink(missing_ok=True)
    complete_swaps(plog)
    for path in list(plog.dir.glob("*" + files.SWAP_SUFFIX)):
        path.unlink()  # an index renamed .swap before its log was: not committed
    for path in sorted(plog.dir.glob("*" + files.LOG_SUFFIX)):
        base = files.offset_from_filename(path.name)
        # Checked before opening the segment, which creates missing index files.
        index_missing = not files.index_file(plog.dir, base).exists() or (
            not files.time_index_file(plog.dir, base).exists()
        )
        segment = LogSegment(
            plog.dir, base, plog.config.index_interval_bytes,
            plog.config.segment_index_bytes, new=False,
        )
        try:
            if index_missing:
                raise IndexCorruptError("missing index")
            segment.sanity_check()
            segment.load_timestamps()
        except IndexCorruptError as exc:
            log.log(logging.WARNING if had_clean_shutdown else logging.DEBUG,
                    "%s: rebuilding indexes of segment %d (%s)", plog.name, base, exc)
            recover_segment(plog, segment)
            rebuilt += 1
        plog._add_segment(segment)
    for path in plog.dir.glob("*" + files.INDEX_SUFFIX):
        if not files.log_file(plog.dir, files.offset_from_filename(path.name)).exists():
            path.unlink()  # an orphan index without its log
    for suffix in (files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX):
        for path in plog.dir.glob("*" + suffix):
            if not files.log_file(plog.dir, files.offset_from_filename(path.name)).exists():
                path.unlink()
    if not plog.segments:
        plog._add_segment(plog._new_segment(plog.log_start_offset))
    elif not had_clean_shutdown:
        recover_from(plog, plog.recovery_point)
    plog.active_segment.make_active()
    plog._assign_jitter(plog.active_segment)
    leo = plog.log_end_offset
    plog.log_start_offset = min(max(plog.log_start_offset, plog.segments[0].base_offset), leo)
    plog.recovery_point = min(plog.recovery_point, leo)
    if not had_clean_shutdown:
        plog._flush_segments(plog.segments)
        plog.leader_epoch_cache.write()  # the epochs recovery rebuilt
        plog.recovery_point = leo
    plog.leader_epoch_cache.truncate_from_end(leo)
    plog.leader_epoch_cache.truncate_from_start(plog.log_start_offset)
    for segment in plog.segments:
        drop_stale_txn_entries(plog, segment)
    plog.producer_state.load(plog.segments, plog.log_start_offset, leo)
    return rebuilt


def drop_stale_txn_entries(plog: LoadableLog, segment: LogSegment) -> int:
    """Drop the ``.txnindex`` entries of ``segment`` whose marker offset holds no abort
    marker of their producer any more (step 4); returns how many went. One index lookup
    and one read of a small control batch per entry: entries are one per abort."""
    index = segment.txn_index
    if not index.entries:
        return 0

    def marker_kept(entry: AbortedTxn) -> bool:
        found = segment.translate_offset(entry.last_offset)
        if found is None or found.offset != entry.last_offset:
            return False
        batch = segment.read_bytes(found.position, found.size)
        try:
            header = BatchHeader.parse(batch)
            marker = read_end_txn_marker(batch) if header.is_control else None
        except InvalidRecordError:
            return False
        return (marker is not None and marker.control_type is ControlType.ABORT
                and header.producer_id == entry.producer_id)

    dropped = index.retain(marker_kept)
    if dropped:
        log.warning("%s: dropped %d aborted-transaction index entries of segment %d whose "
                    "abort marker is gone (left by an older cleaner): %s", plog.name,
                    len(dropped), segment.base_offset, dropped)
    return len(dropped)

def complete_swaps(plog: LoadableLog) -> None:
    """Finish a cleaner swap interrupted by a crash: a ``.swap`` log replaces the
    segments it covers (the cleaner writes the swap only once complete)."""
    for swap in sorted(plog.dir.glob("*" + files.LOG_SUFFIX + files.SWAP_SUFFIX)):
        base = files.offset_from_filename(swap.name)
        segment = LogSegment(
            plog.dir, base, plog.config.index_interval_bytes,
            plog.config.segment_index_bytes, suffix=files.SWAP_SUFFIX, new=False,
        )
        segment.recover(plog.config.max_message_bytes)
        end = segment.next_offset
        for path in plog.dir.glob("*" + files.LOG_SUFFIX):
            other = files.offset_from_filename(path.name)
            if base <= other < end:
                files.log_file(plog.dir, other).unlink(missing_ok=True)
                files.index_file(plog.dir, other).unlink(missing_ok=True)
                files.time_index_file(plog.dir, other).unlink(missing_ok=True)
                files.txn_index_file(plog.dir, other).unlink(missing_ok=True)
        segment.close()
        for fn in (files.txn_index_file, files.index_file, files.time_index_file,
                   files.log_file):
            src = fn(plog.dir, base, files.SWAP_SUFFIX)
            if src.exists():
                src.rename(fn(plog.dir, base))
        files.fsync_dir(plog.dir)

def recover_segment(plog: LoadableLog, segment: LogSegment) -> int:
    truncated = segment.recover(
        plog.config.max_message_bytes, plog.leader_epoch_cache.assign
    )
    if truncated:
        log.warning(
            "%s: truncated %d invalid bytes at the end of segment %d",
            plog.name, truncated, segment.base_offset,
        )
    return truncated

def recover_from(plog: LoadableLog, recovery_point: int) -> None:
    """Revalidate segments from the one holding ``recovery_point``; after a corrupt
    tail, later segments are deleted (they cannot follow a hole)."""
    start = plog._segment_for(recovery_point)
    for i in range(start, len(plog.segments)):
        segment = plog.segments[i]
        if recover_segment(plog, segment) and i + 1 < len(plog.segments):
            for later in plog.segments[i + 1 :]:
                log.warning("%s: deleting segment %d after a corrupt one",
                            plog.name, later.base_offset)
                later.delete_files()
            plog._publish(plog.segments[: i + 1])
            break
    # A segment emptied by recovery (other than the first) is dropped.
    while len(plog.segments) > 1 and plog.segments[-1].size == 0 and (
        plog.segments[-1].base_offset > plog.segments[-2].next_offset
    ):
        plog.segments[-1].delete_files()
        plog._publish(plog.segments[:-1])
