"""Compaction of transactional logs across many passes (issue 46, item 1), as Kafka's
LogCleanerTest does for CleanedTransactionMetadata: a ``.txnindex`` entry lives in a cleaned
segment only while its abort marker does, a producer is "aborting" only up to its entry's
marker offset, an empty transaction leaves no entry, and a log written with stale entries
is repaired when it loads. Committed data must survive every pass, and read_committed
readers (the aborted-transactions list of a fetch, read through Odradek's AbortedFilter)
must see it."""

from __future__ import annotations

import time
from pathlib import Path

from odradek.records.batch import iter_batches, iter_records, validate_batch
from odradek.records.builder import BatchBuilder
from odradek.records.columnar import AbortedFilter
from odradek.storage.cleaner import Cleaner, LogToClean
from odradek.storage.log import PartitionLog
from odradek.storage.offset_map import SkimpyOffsetMap
from odradek.storage.txn_index import AbortedTxn, TxnIndex, decode_entries
from tests.storage._util import NOW, config, make_batch, open_log, segment_batches

P1, P2 = 1000, 2000


def txn(pid: int, seq: int, key: bytes, epoch: int = 0) -> bytes:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True)
    builder.append(key, b"%d-%d" % (pid, seq), NOW)
    return builder.build()


def end(plog: PartitionLog, pid: int, commit: bool, epoch: int = 0) -> int:
    return plog.append_control_as_leader(pid, epoch, commit, 0).first_offset


def clean(plog: PartitionLog, now: int) -> list[tuple[int, bool]]:
    """One cleaning pass over the whole log below the active segment; returns the
    (offset, is control) of every batch left below it."""
    cleaner = Cleaner(SkimpyOffsetMap(1 << 16))
    result = cleaner.clean(LogToClean(plog, 0, plog.last_stable_offset, 0, 1), now)
    for segment in result.old_segments:
        segment.delete_files()
    return [(h.base_offset, h.is_control) for s in segment_batches(plog)[:-1]
            for h in iter_batches(s) if h.record_count]


def read_committed(plog: PartitionLog, offset: int = 0) -> list[int]:
    """The offsets a read_committed consumer gets from ``offset`` on: fetches up to the
    last stable offset, each one's aborted-transactions list applied by AbortedFilter."""
    lso = plog.last_stable_offset
    offsets: list[int] = []
    while offset < lso:
        info = plog.read(offset, 1 << 20, lso, include_aborted_txns=True)
        data = info.read()
        assert data and info.aborted_transactions is not None
        skipper = AbortedFilter(list(info.aborted_transactions))
        pos = 0
        while pos < len(data):
            header = validate_batch(data, pos, strict_offsets=False)
            batch = memoryview(data)[pos : pos + header.size]
            pos += header.size
            if not skipper.skip(header, batch):
                offsets.extend(r.offset for r in iter_records(batch) if r.offset >= offset)
            offset = max(offset, header.next_offset)
    return offsets


def entries(plog: PartitionLog) -> list[AbortedTxn]:
    return [e for s in plog.segments for e in s.txn_index.entries]


def four_pass_log(tmp_path: Path) -> PartitionLog:
    plog = open_log(tmp_path, config(cleanup_policy="compact", delete_retention_ms=1000))
    plog.append_as_leader(txn(P1, 0, b"a"))  # 0 T1, aborted
    assert end(plog, P1, commit=False) == 1
    plog.append_as_leader(txn(P1, 1, b"b"))  # 2 T2, committed: the only value of b
    assert end(plog, P1, commit=True) == 3
    plog.roll()
    plog.append_as_leader(make_batch())  # 4, the active segment
    return plog


def test_committed_data_survives_the_pass_after_its_abort_marker_went(tmp_path: Path) -> None:
    """The issue's reproduction: pass 3 removes abort marker 1; its index entry must go
    with it, so that pass 4 does not take P1's committed record at 2 as aborted data."""
    plog = four_pass_log(tmp_path)
    assert read_committed(plog) == [2, 4]
    # pass 1: aborted data 0 dropped; marker 1 kept (it saw its data), entry kept
    assert clean(plog, NOW) == [(1, True), (2, False), (3, True)]
    assert entries(plog) == [AbortedTxn(P1, 0, 1, 2)]
    # pass 2: marker 1 guards nothing: it gets a delete horizon
    assert clean(plog, NOW + 10) == [(1, True), (2, False), (3, True)]
    # pass 3, past the horizon: marker 1 goes, and its entry with it
    assert clean(plog, NOW + 2000) == [(2, False), (3, True)]
    assert read_committed(plog) == [2, 4]
    # pass 4 (and more): the committed record and its marker stay
    assert clean(plog, NOW + 4000) == [(2, False), (3, True)]
    assert clean(plog, NOW + 6000) == [(2, False), (3, True)]
    assert read_committed(plog) == [2, 4]
    assert entries(plog) == []
    again = open_log(tmp_path, config(cleanup_policy="compact"), had_clean_shutdown=False)
    assert read_committed(again) == [2, 4]


def test_a_stale_entry_ends_at_its_marker_offset(tmp_path: Path) -> None:
    """An entry whose marker is gone (left by an older cleaner) names aborted data only up
    to its marker offset: the producer's later committed batches are kept, and the pass
    drops the entry."""
    plog = four_pass_log(tmp_path)
    assert clean(plog, NOW) == [(1, True), (2, False), (3, True)]
    assert clean(plog, NOW + 10) == [(1, True), (2, False), (3, True)]
    segment = plog.segments[0]
    stale = segment.txn_index.entries[0]
    assert clean(plog, NOW + 2000) == [(2, False), (3, True)]
    if not plog.segments[0].txn_index.entries:
        plog.segments[0].txn_index.append(stale)  # what the old cleaner left
    assert clean(plog, NOW + 4000) == [(2, False), (3, True)]
    assert entries(plog) == []
    assert read_committed(plog) == [2, 4]


def test_an_empty_aborted_transaction_leaves_no_entry(tmp_path: Path) -> None:
    """Kafka emits no CompletedTxn for a marker that ends no data (a partition added and
    nothing sent, a fencing abort, a repeated marker): no index entry, no pinned LSO."""
    plog = open_log(tmp_path, config(cleanup_policy="compact", delete_retention_ms=1000))
    plog.high_watermark_managed = True  # held at 0 while the markers go in
    assert end(plog, P1, commit=False) == 0  # empty
    plog.append_as_leader(txn(P1, 0, b"a"))  # 1 committed
    assert end(plog, P1, commit=True) == 2
    assert end(plog, P1, commit=False) == 3  # repeated: empty
    assert end(plog, P2, commit=False) == 4  # never sent anything
    assert entries(plog) == []
    assert plog.producer_state.unreplicated == {1: (P1, 2)}  # only the one with data
    plog.high_watermark_managed = False
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.producer_state.unreplicated == {}  # the high watermark passed it
    plog.roll()
    plog.append_as_leader(make_batch())
    for now in (NOW, NOW + 10, NOW + 2000, NOW + 4000):
        assert [o for o, control in clean(plog, now) if not control] == [1]
        assert entries(plog) == []
        assert read_committed(plog) == [1, 5]


def test_loading_drops_entries_whose_marker_is_gone(tmp_path: Path) -> None:
    """A log an older cleaner wrote: a ``.txnindex`` entry whose marker offset holds no
    abort marker any more is dropped when the log loads, so readers and the next pass
    no longer see the producer's committed data as aborted."""
    plog = four_pass_log(tmp_path)
    plog.append_as_leader(txn(P2, 0, b"c"))  # 5
    assert end(plog, P2, commit=False) == 6  # a live entry in the active segment
    clean(plog, NOW)
    clean(plog, NOW + 10)
    stale = plog.segments[0].txn_index.entries[0]
    clean(plog, NOW + 2000)
    if not plog.segments[0].txn_index.entries:
        plog.segments[0].txn_index.append(stale)  # what the old cleaner left
    live = plog.segments[-1].txn_index.entries
    assert live == [AbortedTxn(P2, 5, 6, 7)]
    path = plog.segments[0].txn_index.path
    plog.close()
    for clean_shutdown in (True, False):
        again = open_log(tmp_path, config(cleanup_policy="compact"),
                         had_clean_shutdown=clean_shutdown)
        assert entries(again) == live
        assert not path.exists() or decode_entries(path.read_bytes()) == []  # on disk
        assert read_committed(again) == [2, 4]
        assert clean(again, NOW + 4000)[:2] == [(2, False), (3, True)]
        assert read_committed(again) == [2, 4]
        again.close()


def test_dropping_many_stale_entries_is_one_pass(tmp_path: Path) -> None:
    """An older cleaner carried every entry into each cleaned segment, so a long-lived
    transactional compacted log (``__consumer_offsets`` with transactional offset
    commits) loads with thousands of stale entries beside live ones: the repair keeps and
    drops them in one pass over the index (a list search per entry took 22 s for 6000
    entries, on every load of such a segment)."""
    index = TxnIndex(tmp_path / "00000000000000000000.txnindex")
    for i in range(6000):
        index.append(AbortedTxn(i % 7, 10 * i, 10 * i + 5, 10 * i + 6))
    started = time.monotonic()
    dropped = index.retain(lambda e: e.first_offset % 20 == 0)
    took = time.monotonic() - started
    assert len(dropped) == 3000 and all(e.first_offset % 20 for e in dropped)
    assert [e.first_offset for e in decode_entries(index.path.read_bytes())] == list(
        range(0, 60000, 20))
    assert took < 5, f"retain took {took:.1f} s"
