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
- **Transactions** (Kafka's ``ProducerAppendInfo`` / ``ProducerStateManager``). A producer's
  first transactional batch opens its transaction: the entry's ``current_txn_first_offset``
  is that batch's first offset, and the transaction is *ongoing*. A non-transactional batch
  from a producer with an ongoing transaction is INVALID_TXN_STATE. A control batch (a
  commit or abort marker, :mod:`odradek.records.control`) ends it: on the leader it is
  fenced first, INVALID_PRODUCER_EPOCH for an epoch older than the producer's and
  TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the last marker's;
  then the transaction is *unreplicated* until the high watermark passes its marker, and
  forgotten when the high watermark moves past it (:meth:`on_high_watermark_updated`, on
  leaders and followers alike). The **first unstable offset** is the smallest first
  offset of the ongoing and unreplicated transactions; the log's last stable offset
  (LSO) is that, bounded by the high watermark. An ended transaction is answered as a
  :class:`CompletedTxn`; for an aborted one the log writes an :class:`AbortedTxn` into the
  segment's ``.txnindex``, whose last stable offset is the first offset of the oldest
  transaction of another producer still ongoing (else the marker's offset + 1), as
  Kafka's ``lastStableOffset(completedTxn)``. A marker that ends no data (a partition
  added and nothing sent, a fencing abort, a repeated marker) completes nothing: no
  :class:`CompletedTxn`, no index entry, no hold on the LSO (Kafka's
  ``ProducerAppendInfo.appendEndTxnMarker`` emits none for empty transactions).
- **Verification guards** (KIP-890, Kafka's ``VerificationStateEntry``). Before a leader
  appends a producer's first transactional batch it asks the transaction coordinator
  whether the partition is in the producer's transaction; :meth:`start_verification`
  hands out a guard for the producer first, and a marker for the producer (or its
  transactional append) drops it, as does :meth:`end_verification` once the append was
  tried or refused. :meth:`verified` says whether the guard is still the
  producer's (or its transaction is open by now), so a marker written while the
  coordinator was being asked cannot be followed by an append that reopens a transaction
  nobody will end.
- **Replicated / recovered batches** update the state without checks (replication origin),
  markers included.
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
      coordinator_epoch    int32   of the producer's last marker (-1: none)
      current_txn_first_offset int64  first offset of its ongoing transaction (-1: none)

Like Kafka, a snapshot keeps only each producer's last batch; the replay after it restores
the later ones. The ongoing transactions are rebuilt from ``current_txn_first_offset``, so
the last stable offset holds at an open transaction across a restart.

While replaying, each abort marker's :class:`AbortedTxn` is appended to its segment's
``.txnindex`` when the index does not have it yet (an index lost, or behind its log after
an unclean shutdown: Kafka rebuilds the index in ``LogSegment.recover`` the same way). A
segment whose index had to be rebuilt whole is replayed from the log's start, without the
snapshots (the state its first batch needs is not in them).
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

from odradek.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader, InvalidRecordError
from odradek.records.control import EndTransactionMarker, read_end_txn_marker
from odradek.storage import files
from odradek.storage.errors import InvalidRecordBatchError, StorageError
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.storage.segment import LogSegment

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "AppendAnalysis",
    "BatchMetadata",
    "CompletedTxn",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerStateEntry",
    "ProducerStateManager",
    "SnapshotCorruptError",
    "TransactionCoordinatorFencedError",
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
# Batch attribute bits (records/batch.py), tested without building a property per batch.
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20


class InvalidProducerEpochError(StorageError):
    """A batch's producer epoch is older than the partition's (a fenced zombie)."""

    kafka_error = "INVALID_PRODUCER_EPOCH"


class OutOfOrderSequenceError(StorageError):
    """A batch's sequence does not follow the producer's last one (a gap or a replay of a
    batch older than the retained window)."""

    kafka_error = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is open."""

    kafka_error = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(StorageError):
    """A marker from a transaction coordinator older than the one that wrote the last."""

    kafka_error = "TRANSACTION_COORDINATOR_FENCED"


class SnapshotCorruptError(StorageError):
    pass


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction its marker ended (Kafka's CompletedTxn): its first offset, the
    marker's offset, and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


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
        #: first offset -> producer id of each ongoing transaction
        self.ongoing: dict[int, int] = {}
        #: first offset -> (producer id, marker offset) of each transaction ended by a
        #: marker the high watermark has not passed yet
        self.unreplicated: dict[int, tuple[int, int]] = {}
        #: producer id -> the guard of its transaction verification in progress
        self.verifying: dict[int, object] = {}
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
            if header.attributes & _TRANSACTIONAL_MASK:
                if entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = batch_first
            elif entry.current_txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"producer {pid} sent a non-transactional batch while its transaction "
                    f"from offset {entry.current_txn_first_offset} is open"
                )
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
        updates = analysis.updates
        if updates:
            with self._lock:
                self.producers.update(updates)
                for pid, entry in updates.items():
                    if entry.current_txn_first_offset >= 0:
                        self.ongoing[entry.current_txn_first_offset] = pid
                        if self.verifying:
                            self.verifying.pop(pid, None)

    # -- transaction verification (KIP-890) ------------------------------------------------
    def has_ongoing_txn(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer, at this epoch, has a transaction open here (Kafka's
        ``UnifiedLog.hasOngoingTransaction``): its batches need no verification."""
        entry = self.producers.get(producer_id)
        return (entry is not None and entry.current_txn_first_offset >= 0
                and entry.producer_epoch == producer_epoch)

    def start_verification(self, producer_id: int) -> object:
        """A new guard for the producer's verification (replacing an older one)."""
        guard = object()
        self.verifying[producer_id] = guard
        return guard

    def end_verification(self, producer_id: int, guard: object) -> None:
        """The verification under ``guard`` is over (refused, or its append was tried)."""
        if self.verifying.get(producer_id) is guard:
            del self.verifying[producer_id]

    def verified(self, producer_id: int, producer_epoch: int, guard: object) -> bool:
        """Whether an append verified under ``guard`` may go on: the guard is still the
        producer's (no marker came meanwhile), or its transaction is open by now."""
        return (self.verifying.get(producer_id) is guard
                or self.has_ongoing_txn(producer_id, producer_epoch))

    # -- markers (leader) ------------------------------------------------------------------
    def check_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Fence a marker the coordinator asks the leader to write (Kafka's
        ``checkProducerEpoch`` and ``checkCoordinatorEpoch``, coordinator origin)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {producer_epoch} of producer {producer_id} is older than "
                f"the current epoch {entry.producer_epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than the last marker's {entry.coordinator_epoch}"
            )

    def complete_txn(
        self, header: BatchHeader, marker: EndTransactionMarker
    ) -> CompletedTxn | None:
        """Install a marker at ``header.base_offset`` (offsets assigned): the producer's
        transaction ends, and waits for the high watermark to pass the marker. None for a
        marker that ends no data (module doc)."""
        with self._lock:
            return self._complete(header, marker)

    def _complete(
        self, header: BatchHeader, marker: EndTransactionMarker
    ) -> CompletedTxn | None:
        pid = header.producer_id
        offset = header.base_offset
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if header.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        self.verifying.pop(pid, None)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = header.max_timestamp
        if first < 0:
            return None  # an empty transaction: nothing to index, no LSO to hold
        self.ongoing.pop(first, None)
        self.unreplicated[first] = (pid, offset)
        return CompletedTxn(pid, first, offset, not marker.committed)

    def aborted_txn(self, completed: CompletedTxn) -> AbortedTxn:
        """The ``.txnindex`` entry of an aborted transaction (module doc)."""
        lso = completed.last_offset + 1
        for first, pid in self.ongoing.items():
            if pid != completed.producer_id and first < lso:
                lso = first
        return AbortedTxn(completed.producer_id, completed.first_offset,
                          completed.last_offset, lso)

    # -- last stable offset ----------------------------------------------------------------
    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the transactions whose marker the high watermark passed (Kafka's
        ``onHighWatermarkUpdated``), so that a follower, which may never compute its last
        stable offset, does not keep them. Markers are installed in offset order, so they
        go from the front of :attr:`unreplicated`."""
        unreplicated = self.unreplicated
        if not unreplicated:
            return
        with self._lock:
            while unreplicated:
                first = next(iter(unreplicated))
                if unreplicated[first][1] >= high_watermark:
                    break
                del unreplicated[first]

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest ongoing or unreplicated transaction (None: none);
        forgets the transactions whose marker the high watermark passed. Under the lock:
        a fetch on the loop and the cleaner's thread both ask (issue 52)."""
        if not (self.ongoing or self.unreplicated):
            return None
        with self._lock:
            unreplicated = self.unreplicated
            done = [f for f, (_pid, last) in unreplicated.items() if last < high_watermark]
            for f in done:
                del unreplicated[f]
            firsts = [*self.ongoing, *unreplicated]
        return min(firsts) if firsts else None

    # -- replication, recovery -----------------------------------------------------------
    def apply(
        self, headers: Iterable[BatchHeader], records: bytes | bytearray | memoryview
    ) -> list[CompletedTxn]:
        """Install batches whose offsets are assigned, without checks (replication);
        ``records`` holds them (at their headers' positions). Returns the transactions
        their markers ended."""
        completed: list[CompletedTxn] = []
        view = memoryview(records)
        with self._lock:
            for header in headers:
                if header.producer_id < 0:
                    continue
                marker = None
                if header.attributes & _CONTROL_MASK:
                    marker = _marker(view[header.position : header.position + header.size])
                    if marker is None:
                        continue
                done = self._apply_one(header, marker)
                if done is not None:
                    completed.append(done)
        return completed

    def _apply_one(
        self, header: BatchHeader, marker: EndTransactionMarker | None = None
    ) -> CompletedTxn | None:
        pid = header.producer_id
        if pid < 0:
            return None
        if header.attributes & _CONTROL_MASK:
            return self._complete(header, marker) if marker is not None else None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if header.attributes & _TRANSACTIONAL_MASK and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = header.base_offset
            self.ongoing[header.base_offset] = pid
        entry.add_batch(header.producer_epoch, _metadata(header, header.base_offset))
        return None

    def active_producers(self) -> list[ProducerStateEntry]:
        """A copy of every producer's entry (DescribeProducers, KIP-664), taken under the
        lock expiration holds."""
        with self._lock:
            return [entry.copy() for entry in self.producers.values()]

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
            self.ongoing.clear()
            self.unreplicated.clear()
            self.verifying.clear()
        self.delete_snapshots()

    def load(
        self, segments: Sequence[LogSegment], log_start_offset: int, log_end_offset: int
    ) -> None:
        """Rebuild the state: newest snapshot at or below the log end, then replay the
        batch headers after it."""
        self.delete_snapshots(above=log_end_offset)
        producers: dict[int, ProducerStateEntry] = {}
        start = segments[0].base_offset if segments else log_start_offset
        # A segment whose .txnindex was rebuilt whole needs the state at its start, which
        # only a replay from the log's start gives (module doc).
        rebuild = min((s.base_offset for s in segments if s.txn_index.rebuilding),
                      default=None)
        for offset in reversed(self.snapshot_offsets()):
            if rebuild is not None:
                break
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
            self.verifying.clear()
            self.ongoing = {e.current_txn_first_offset: pid for pid, e in producers.items()
                            if e.current_txn_first_offset >= 0}
            self.unreplicated = {}
            replayed = 0
            for segment in segments:
                if segment.next_offset <= start:
                    segment.txn_index.rebuilding = False
                    continue
                found = segment.translate_offset(start) if start > segment.base_offset else None
                position = found.position if found is not None else 0
                txn_index = segment.txn_index
                for header in segment._walk(position):
                    if header.base_offset < start or header.producer_id < 0:
                        continue
                    marker = None
                    if header.attributes & _CONTROL_MASK:
                        marker = _marker(segment.read_bytes(header.position, header.size))
                        if marker is None:
                            continue
                    completed = self._apply_one(header, marker)
                    replayed += 1
                    if completed is not None and completed.is_aborted and (
                        completed.last_offset > txn_index.last_offset
                    ):
                        txn_index.append(self.aborted_txn(completed))
                txn_index.rebuilding = False
            for pid in [p for p, e in producers.items() if e.last_offset < log_start_offset
                        and e.batches and e.current_txn_first_offset < 0]:
                del producers[pid]
        log.debug("%s: producer state from offset %d, %d batches replayed, %d producers",
                  self.dir.name, start, replayed, len(self.producers))


def _marker(batch: bytes | bytearray | memoryview) -> EndTransactionMarker | None:
    """A stored control batch's marker; one that does not decode is skipped, as Kafka
    skips a control record of an unknown type."""
    try:
        return read_end_txn_marker(batch)
    except InvalidRecordError as exc:
        log.warning("ignoring a control batch that does not decode: %s", exc)
        return None


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
