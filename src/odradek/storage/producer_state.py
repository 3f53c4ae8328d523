"""Per-partition producer state for idempotent producers (Kafka's ProducerStateManager, KIP-98).

How it works:
- **State.** For each producer id the partition has seen: its epoch, the metadata of its
  last :data:`NUM_BATCHES_TO_RETAIN` batches (first/last sequence, first/last offset, max
  timestamp) and its last timestamp. That is all idempotence needs: a retried batch is one
  of the last five (the client keeps at most five requests in flight per partition).
- **Append (leader, client origin).** Before anything is written, :meth:`analyze` checks
  every batch that carries a producer id — per batch, from its header, never per record —
  against the state, in order, and returns either the duplicate or the updated entries that
  :meth:`commit` installs once the bytes are in the log. Kafka's rules
  (``UnifiedLog.analyzeAndValidateProducerState``, ``ProducerAppendInfo``):

  ===============================================  =========================================
  situation                                        answer
  ===============================================  =========================================
  same epoch, sequence range equals one of the     duplicate: the append is skipped and the
  last five batches                                ORIGINAL offsets are answered, error NONE
                                                   (DUPLICATE_SEQUENCE_NUMBER is not sent)
  epoch lower than the current one                 INVALID_PRODUCER_EPOCH (KIP-588)
  epoch higher than the current one                sequence must be 0, else OUT_OF_ORDER_...
  same epoch                                       sequence must be last + 1 (0 after
                                                   int32 max), else OUT_OF_ORDER_SEQUENCE
  producer id unknown to the partition             accepted at any sequence (Kafka ≥ 2.5,
                                                   KIP-360: UNKNOWN_PRODUCER_ID is no longer
                                                   returned; the producer's state may have
                                                   been removed by retention or expiration)
  producer id set but base sequence < 0            INVALID_RECORD
  ===============================================  =========================================

  A refused batch refuses the whole partition's data: nothing of it is written.
- **Replicated / recovered batches** update the state without checks (replication origin).
- **Snapshots** ``<20-digit offset>.snapshot`` hold the state of every batch below that
  offset. They are written on log roll (the old segment was just flushed) and on clean
  shutdown; the two newest are kept. On load, snapshots above the log end are deleted, the
  newest readable one is loaded and the batches from its offset to the log end are replayed
  from their headers alone. Without a usable snapshot (kill -9 before any roll) the whole
  log is replayed. Producers whose last batch lies below the log start offset are dropped
  on load. Truncation reloads the same way from the newest snapshot at or below the new end.
- **Expiration.** A producer idle for ``producer.id.expiration.ms`` (measured from its last
  batch's max timestamp, as Kafka does) is forgotten by :meth:`remove_expired`, which the
  log manager runs every ``producer.id.expiration.check.interval.ms``.

Snapshot format — the layout of Kafka's version-1 producer snapshot, big-endian::

    version                int16   1
    crc                    uint32  CRC32C of every byte after this field
    entry count            int32
    entries, each:
      producer_id          int64
      producer_epoch       int16
      last_sequence        int32   of the producer's last batch (-1: none)
      last_offset          int64   of that batch
      offset_delta         int32   last_offset - first_offset of that batch
      timestamp            int64   the producer's last timestamp
      coordinator_epoch    int32   -1 (no transactions yet)
      current_txn_first_offset int64  -1 (no transactions yet)

Like Kafka, a snapshot keeps only each producer's last batch; the replay after it restores
the later ones.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c

from odradek.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from odradek.storage import files
from odradek.storage.errors import InvalidRecordBatchError, StorageError

if TYPE_CHECKING:
    from odradek.storage.segment import LogSegment

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "AppendAnalysis",
    "BatchMetadata",
    "InvalidProducerEpochError",
    "OutOfOrderSequenceError",
    "ProducerStateEntry",
    "ProducerStateManager",
    "SnapshotCorruptError",
]

log = logging.getLogger(__name__)

# A producer keeps at most 5 requests in flight per partition (max.in.flight.requests.per.
# connection <= 5 with idempotence), so a retry is always one of the last 5 batches.
NUM_BATCHES_TO_RETAIN = 5
# Snapshots kept on disk: the newest, plus one in case the newest is unreadable.
SNAPSHOTS_TO_KEEP = 2
# Kafka's producer.id.expiration.ms default (one day).
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
# Sequence numbers are int32 and wrap from this value to 0.
_SEQUENCE_WRAP = 1 << 31
_INT32_MAX = _SEQUENCE_WRAP - 1

SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _SNAPSHOT_HEAD.size


class InvalidProducerEpochError(StorageError):
    """A batch's producer epoch is older than the partition's (a fenced zombie)."""

    kafka_error = "INVALID_PRODUCER_EPOCH"


class OutOfOrderSequenceError(StorageError):
    """A batch's sequence does not follow the producer's last one (a gap or a replay of a
    batch older than the retained window)."""

    kafka_error = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class SnapshotCorruptError(StorageError):
    pass


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def _first_sequence(last_seq: int, offset_delta: int) -> int:
    return (last_seq - offset_delta) % _SEQUENCE_WRAP


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN), self.last_timestamp,
            self.coordinator_epoch, self.current_txn_first_offset,
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


def _metadata(header: BatchHeader, first_offset: int) -> BatchMetadata:
    return BatchMetadata(
        header.base_sequence, header.last_sequence, first_offset,
        first_offset + header.last_offset_delta, header.max_timestamp,
    )


@dataclass(frozen=True, slots=True)
class AppendAnalysis:
    """What :meth:`ProducerStateManager.analyze` found: a duplicate (skip the append and
    answer its offsets) or the entries to install after the append."""

    duplicate: BatchMetadata | None = None
    updates: dict[int, ProducerStateEntry] = field(default_factory=dict)


_NOTHING = AppendAnalysis()


class ProducerStateManager:
    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.producers: dict[int, ProducerStateEntry] = {}
        # Appends run on the event loop; expiration runs in a worker thread.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.dir.name}, producers={len(self.producers)})"

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- leader append -------------------------------------------------------------------
    def analyze(self, headers: Sequence[BatchHeader], first_offset: int) -> AppendAnalysis:
        """Check a client's batches (to be written from ``first_offset`` on) against the
        state; raises on a refused batch, writes nothing."""
        for h in headers:
            if h.producer_id >= 0:
                break
        else:  # no idempotent batch (a loop, not all(): this runs per partition append)
            return _NOTHING
        updates: dict[int, ProducerStateEntry] = {}
        offset = first_offset
        for header in headers:
            batch_first = offset
            offset += header.last_offset_delta + 1
            pid = header.producer_id
            if pid < 0:
                continue
            epoch = header.producer_epoch
            first_seq = header.base_sequence
            current = self.producers.get(pid)
            if current is not None:
                duplicate = current.find_duplicate(epoch, first_seq, header.last_sequence)
                if duplicate is not None:
                    return AppendAnalysis(duplicate=duplicate)
            if first_seq < 0:
                raise InvalidRecordBatchError(
                    f"batch of producer {pid} has producer id set but no sequence number"
                )
            entry = updates.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(pid)
                updates[pid] = entry
            self._check(entry, current, epoch, first_seq)
            entry.add_batch(epoch, _metadata(header, batch_first))
        return AppendAnalysis(updates=updates)

    @staticmethod
    def _check(
        entry: ProducerStateEntry, current: ProducerStateEntry | None, epoch: int,
        first_seq: int,
    ) -> None:
        pid = entry.producer_id
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {pid} is older than the current epoch "
                f"{entry.producer_epoch}"
            )
        if current is None:
            return  # unknown producer: any sequence (see the module docstring)
        if epoch != entry.producer_epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid}: new epoch {epoch} must start at sequence 0, "
                    f"not {first_seq}"
                )
        elif not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {pid}: out of order sequence {first_seq} (epoch {epoch}), "
                f"expected {(entry.last_seq + 1) % _SEQUENCE_WRAP}"
            )

    def commit(self, analysis: AppendAnalysis) -> None:
        if analysis.updates:
            with self._lock:
                self.producers.update(analysis.updates)

    # -- replication, recovery -----------------------------------------------------------
    def apply(self, headers: Iterable[BatchHeader]) -> None:
        """Install batches whose offsets are assigned, without checks (replication)."""
        with self._lock:
            for header in headers:
                self._apply_one(header)

    def _apply_one(self, header: BatchHeader) -> None:
        pid = header.producer_id
        if pid < 0 or header.is_control:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        entry.add_batch(header.producer_epoch, _metadata(header, header.base_offset))

    # -- expiration ----------------------------------------------------------------------
    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms``; returns how many."""
        with self._lock:
            expired = [
                pid for pid, entry in self.producers.items()
                if entry.current_txn_first_offset < 0
                and now_ms - entry.last_timestamp >= expiration_ms
            ]
            for pid in expired:
                del self.producers[pid]
        return len(expired)

    # -- snapshots -----------------------------------------------------------------------
    def snapshot_file(self, offset: int) -> Path:
        return self.dir / (files.filename_prefix(offset) + files.SNAPSHOT_SUFFIX)

    def snapshot_offsets(self) -> list[int]:
        found = []
        for path in self.dir.glob("*" + files.SNAPSHOT_SUFFIX):
            try:
                found.append(files.offset_from_filename(path.name))
            except ValueError:
                continue
        return sorted(found)

    def take_snapshot(self, offset: int) -> None:
        """Write the state of every batch below ``offset``; keep the newest two."""
        self.snapshot_writer(offset)()

    def snapshot_writer(self, offset: int) -> Callable[[], None]:
        """Capture the state now; the returned function writes it (fsyncs) later, e.g.
        off the event loop after a roll."""
        with self._lock:
            data = encode_snapshot(self.producers.values())

        def write() -> None:
            files.atomic_write(self.snapshot_file(offset), data)
            for old in self.snapshot_offsets()[:-SNAPSHOTS_TO_KEEP]:
                self.snapshot_file(old).unlink(missing_ok=True)

        return write

    def delete_snapshots(self, above: int = -1) -> None:
        for offset in self.snapshot_offsets():
            if offset > above:
                self.snapshot_file(offset).unlink(missing_ok=True)

    def reset(self) -> None:
        with self._lock:
            self.producers.clear()
        self.delete_snapshots()

    def load(
        self, segments: Sequence[LogSegment], log_start_offset: int, log_end_offset: int
    ) -> None:
        """Rebuild the state: newest snapshot at or below the log end, then replay the
        batch headers after it."""
        self.delete_snapshots(above=log_end_offset)
        producers: dict[int, ProducerStateEntry] = {}
        start = segments[0].base_offset if segments else log_start_offset
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_file(offset)
            try:
                producers = decode_snapshot(path.read_bytes())
                start = offset
                break
            except (OSError, SnapshotCorruptError) as exc:
                log.warning("%s: ignoring producer snapshot %s: %s", self.dir.name, path.name, exc)
                path.unlink(missing_ok=True)
        with self._lock:
            self.producers = producers
            replayed = 0
            for segment in segments:
                if segment.next_offset <= start:
                    continue
                found = segment.translate_offset(start) if start > segment.base_offset else None
                position = found.position if found is not None else 0
                for header in segment._walk(position):
                    if header.base_offset >= start:
                        self._apply_one(header)
                        replayed += 1
            for pid in [p for p, e in producers.items() if e.last_offset < log_start_offset
                        and e.batches]:
                del producers[pid]
        log.debug("%s: producer state from offset %d, %d batches replayed, %d producers",
                  self.dir.name, start, replayed, len(self.producers))


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    items = list(entries)
    body = bytearray(_COUNT.pack(len(items)))
    for e in items:
        last = e.batches[-1] if e.batches else None
        body += _ENTRY.pack(
            e.producer_id, e.producer_epoch,
            last.last_seq if last else NO_SEQUENCE,
            last.last_offset if last else -1,
            (last.last_offset - last.first_offset) if last else 0,
            e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset,
        )
    return _SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, crc32c.crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    if len(data) < _ENTRIES_OFFSET + _COUNT.size:
        raise SnapshotCorruptError(f"snapshot of {len(data)} bytes is too short")
    version, crc = _SNAPSHOT_HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise SnapshotCorruptError(f"unknown snapshot version {version}")
    body = memoryview(data)[_ENTRIES_OFFSET:]
    if crc32c.crc32c(body) != crc:
        raise SnapshotCorruptError("CRC mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
        raise SnapshotCorruptError(f"{count} entries do not fill {len(body)} bytes")
    producers: dict[int, ProducerStateEntry] = {}
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, timestamp, coord_epoch, txn_first = (
            _ENTRY.unpack_from(body, _COUNT.size + i * _ENTRY.size)
        )
        entry = ProducerStateEntry(pid, epoch, last_timestamp=timestamp,
                                   coordinator_epoch=coord_epoch,
                                   current_txn_first_offset=txn_first)
        if last_seq >= 0:
            entry.batches.append(BatchMetadata(
                _first_sequence(last_seq, delta), last_seq, last_offset - delta, last_offset,
                timestamp,
            ))
        producers[pid] = entry
    return producers
