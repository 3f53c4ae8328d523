"""Transactions in the log (producer_state, txn_index, log, cleaner), as Kafka's
ProducerStateManagerTest / TransactionIndexTest / LogCleanerTest do for them: ongoing
transactions and the last stable offset, markers and their fencing, the ``.txnindex``
written, collected, truncated and rebuilt, snapshots and restarts (clean and kill -9
style), and compaction of aborted data."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.records.batch import iter_batches, iter_records
from odradek.records.builder import BatchBuilder
from odradek.records.control import ControlType, build_end_txn_marker, read_end_txn_marker
from odradek.storage import files
from odradek.storage.cleaner import Cleaner, LogToClean
from odradek.storage.errors import InvalidRecordBatchError
from odradek.storage.log import LATEST_TIMESTAMP, PartitionLog
from odradek.storage.offset_map import SkimpyOffsetMap
from odradek.storage.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
    decode_snapshot,
)
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn, TxnIndex
from tests.storage._util import NOW, config, make_batch, open_log, segment_batches

P1, P2 = 1000, 2000


def txn(pid: int, seq: int, count: int = 1, epoch: int = 0, keys: list[bytes] | None = None,
        transactional: bool = True) -> bytes:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=transactional)
    for i in range(count):
        key = keys[i] if keys else b"k%d" % (seq + i)
        builder.append(key, b"%d-%d" % (pid, seq + i), NOW)
    return builder.build()


def end(plog: PartitionLog, pid: int, commit: bool, epoch: int = 0,
        coordinator_epoch: int = 0) -> int:
    return plog.append_control_as_leader(pid, epoch, commit, coordinator_epoch).first_offset


# -- control records ---------------------------------------------------------------------
@pytest.mark.parametrize("commit", [True, False])
def test_marker_round_trip(commit: bool) -> None:
    batch = build_end_txn_marker(P1, 3, commit, 7, NOW)
    [header] = list(iter_batches(batch))
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (P1, 3, -1)
    [record] = list(iter_records(batch))
    assert record.key == b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")
    marker = read_end_txn_marker(batch)
    assert marker is not None and marker.committed is commit
    assert marker.control_type is (ControlType.COMMIT if commit else ControlType.ABORT)
    assert marker.coordinator_epoch == 7


# -- txn index ---------------------------------------------------------------------------
def test_txn_index_format_collect_and_truncate(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path / "00000000000000000000.txnindex")
    entries = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 8), AbortedTxn(3, 30, 40, 50)]
    for entry in entries:
        index.append(entry)
    data = index.path.read_bytes()
    assert len(data) == 3 * ENTRY_SIZE == 102
    assert data[:ENTRY_SIZE] == (b"\x00\x00" + (1).to_bytes(8, "big") + (0).to_bytes(8, "big")
                                 + (10).to_bytes(8, "big") + (11).to_bytes(8, "big"))
    assert TxnIndex(index.path).entries == entries
    found = index.collect(11, 25)
    assert found.aborted == [entries[1]] and found.complete  # entry 2's LSO 50 >= 25
    found = index.collect(11, 60)
    assert found.aborted == entries[1:] and not found.complete
    found = index.collect(0, 9)
    assert found.aborted == entries[:1] and found.complete  # its LSO 11 >= 9: stop
    with pytest.raises(ValueError):
        index.append(AbortedTxn(4, 0, 40, 41))  # not after the last marker
    index.truncate_to(20)
    assert TxnIndex(index.path).entries == entries[:1]
    index.truncate_to(0)
    assert not index.path.exists() and index.entries == []


# -- producer state, LSO -----------------------------------------------------------------
def test_last_stable_offset_follows_ongoing_transactions(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch(2))  # 0-1
    assert plog.last_stable_offset == 2
    plog.append_as_leader(txn(P1, 0, 2))  # 2-3
    plog.append_as_leader(txn(P2, 0))  # 4
    plog.append_as_leader(txn(P1, 2))  # 5
    assert plog.last_stable_offset == 2
    assert plog.producer_state.ongoing == {2: P1, 4: P2}
    assert end(plog, P1, commit=True) == 6
    assert plog.last_stable_offset == 4
    assert end(plog, P2, commit=False) == 7
    assert plog.last_stable_offset == plog.log_end_offset == 8
    [entry] = plog.active_segment.txn_index.entries
    assert entry == AbortedTxn(P2, 4, 7, 8)
    assert plog.collect_aborted_transactions(0, 8) == [entry]
    assert plog.collect_aborted_transactions(5, 8) == [entry]
    assert plog.collect_aborted_transactions(0, 4) == []


def test_a_read_committed_read_names_the_aborted_transactions_it_may_hold(
    tmp_path: Path,
) -> None:
    """Kafka's LocalLog.read with includeAbortedTxns: the transactions aborted in
    [fetch offset, last stable offset), an empty list when nothing is read (read_committed
    answers always carry one), None for read_uncommitted."""
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch(2))  # 0-1
    plog.append_as_leader(txn(P2, 0))  # 2
    end(plog, P2, commit=False)  # 3
    plog.append_as_leader(make_batch(1))  # 4
    lso = plog.last_stable_offset
    assert lso == 5
    aborted = plog.read(0, 1 << 20, lso, include_aborted_txns=True).aborted_transactions
    assert aborted == [(P2, 2)]
    assert plog.read(4, 1 << 20, lso, include_aborted_txns=True).aborted_transactions == []
    # nothing read: at the last stable offset, or no room left in the answer
    assert plog.read(lso, 1 << 20, lso, include_aborted_txns=True).aborted_transactions == []
    empty = plog.read(0, 0, lso, min_one_message=False, include_aborted_txns=True)
    assert empty.size == 0 and empty.aborted_transactions == []
    assert plog.read(0, 1 << 20, lso).aborted_transactions is None


def test_a_read_committed_read_collects_across_segments_past_empty_indexes(
    tmp_path: Path,
) -> None:
    """The read's aborted transactions come from the segment holding the fetch offset
    and every later one until an entry's LSO reaches the bound; a segment no transaction
    was aborted in (its index empty) is passed over, before and after a restart (the
    indexes then read from their files on first use)."""
    plog = open_log(tmp_path)
    plog.append_as_leader(txn(P1, 0))  # 0
    end(plog, P1, commit=False)  # 1
    plog.roll()
    plog.append_as_leader(make_batch(1))  # 2: a segment without aborts
    plog.roll()
    plog.append_as_leader(txn(P2, 0))  # 3
    end(plog, P2, commit=False)  # 4
    plog.append_as_leader(make_batch(1))  # 5
    assert [s.base_offset for s in plog.segments] == [0, 2, 3]
    _assert_aborted_across_segments(plog)
    plog.close()
    _assert_aborted_across_segments(open_log(tmp_path))


def _assert_aborted_across_segments(plog: PartitionLog) -> None:
    lso = plog.last_stable_offset
    assert lso == 6

    def aborted(offset: int) -> object:
        return plog.read(offset, 1 << 20, lso, include_aborted_txns=True).aborted_transactions

    assert aborted(0) == [(P1, 0), (P2, 3)]
    assert aborted(2) == [(P2, 3)]
    assert aborted(5) == []
    assert plog.collect_aborted_transactions(0, lso) == [
        AbortedTxn(P1, 0, 1, 2), AbortedTxn(P2, 3, 4, 5)]


def test_a_new_segment_knows_its_txn_index_empty(tmp_path: Path) -> None:
    """A rolled (new, empty) segment's .txnindex is not read to learn it is empty, and a
    stale file of its name (left by a crash) is removed rather than appended to."""
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch(2))
    stale = files.txn_index_file(plog.dir, 2)
    stale.write_bytes(AbortedTxn(9, 0, 1, 2).encode())
    segment = plog.roll()
    assert segment.base_offset == 2 and not stale.exists()
    assert segment.txn_index.entries == []
    plog.append_as_leader(txn(P1, 0))  # 2
    end(plog, P1, commit=False)  # 3
    assert TxnIndex(stale).entries == [AbortedTxn(P1, 2, 3, 4)]
    plog.close()


def test_last_stable_offset_waits_for_the_high_watermark(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.high_watermark_managed = True  # a partition with followers moves it
    plog.append_as_leader(txn(P1, 0, 2))
    end(plog, P1, commit=True)
    plog.update_high_watermark(1)
    assert plog.last_stable_offset == 0  # the transaction's marker is not replicated yet
    plog.update_high_watermark(3)
    assert plog.last_stable_offset == 3
    assert plog.producer_state.unreplicated == {}
    info = plog.read(0, 1 << 20, plog.last_stable_offset)
    assert info.last_stable_offset == 3


def test_a_follower_forgets_replicated_transactions_as_its_high_watermark_moves(
        tmp_path: Path) -> None:
    # A follower may never compute its last stable offset (nobody reads from it), so the
    # transactions whose markers the high watermark passed are forgotten when it moves
    # (Kafka's ProducerStateManager.onHighWatermarkUpdated), not only by the LSO.
    leader = open_log(tmp_path, name="leader-0")
    follower = open_log(tmp_path, name="follower-0")
    follower.high_watermark_managed = True  # the partition moves it from the leader's
    state = follower.producer_state
    for i in range(50):
        start = leader.log_end_offset
        leader.append_as_leader(txn(P1, 2 * i, 2))
        end(leader, P1, commit=i % 3 != 0)
        follower.append_as_follower(leader.read(start, 1 << 20).read())
        follower.update_high_watermark(follower.log_end_offset - 1)  # short of the last marker
        assert len(state.unreplicated) <= 1, i
    follower.update_high_watermark(follower.log_end_offset)
    assert state.unreplicated == {}
    assert follower.last_stable_offset == follower.log_end_offset
    leader.close()
    follower.close()


def test_last_stable_offset_is_never_below_the_log_start(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(txn(P1, 0))  # 0, open
    plog.append_as_leader(make_batch(3))  # 1-3
    plog.maybe_increment_log_start_offset(2)
    assert plog.last_stable_offset == 2


def test_aborted_entry_lso_is_the_oldest_other_open_transaction(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(txn(P2, 0))  # 0, stays open
    plog.append_as_leader(txn(P1, 0))  # 1
    end(plog, P1, commit=False)  # 2
    assert plog.active_segment.txn_index.entries == [AbortedTxn(P1, 1, 2, 0)]
    assert plog.last_stable_offset == 0


def test_produce_rules(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(txn(P1, 0))
    with pytest.raises(InvalidTxnStateError):
        plog.append_as_leader(txn(P1, 1, transactional=False))
    with pytest.raises(InvalidRecordBatchError, match="control records"):
        plog.append_as_leader(build_end_txn_marker(P1, 0, True, 0, NOW))
    assert plog.log_end_offset == 1


def test_marker_fencing(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(txn(P1, 0, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        end(plog, P1, commit=True, epoch=1)
    end(plog, P1, commit=True, epoch=2, coordinator_epoch=5)
    plog.append_as_leader(txn(P1, 1, epoch=2))
    with pytest.raises(TransactionCoordinatorFencedError):
        end(plog, P1, commit=True, epoch=2, coordinator_epoch=4)
    assert plog.log_end_offset == 3
    # a marker with a newer epoch (a coordinator aborting a fenced producer's transaction)
    end(plog, P1, commit=False, epoch=3, coordinator_epoch=5)
    assert plog.last_stable_offset == 4
    entry = plog.producer_state.last_entry(P1)
    assert entry is not None and entry.producer_epoch == 3 and entry.coordinator_epoch == 5


def test_follower_applies_markers_and_indexes_aborts(tmp_path: Path) -> None:
    leader = open_log(tmp_path, name="leader-0")
    follower = open_log(tmp_path, name="follower-0")
    leader.append_as_leader(txn(P1, 0, 2))
    end(leader, P1, commit=False)
    leader.append_as_leader(txn(P2, 0))
    data = leader.read(0, 1 << 20).read()
    follower.append_as_follower(data)
    assert follower.active_segment.txn_index.entries == [AbortedTxn(P1, 0, 2, 3)]
    assert follower.producer_state.ongoing == {3: P2}
    assert follower.last_stable_offset == 3


# -- restart -----------------------------------------------------------------------------
def test_snapshot_keeps_the_open_transaction(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch())
    plog.append_as_leader(txn(P1, 0, 2))
    end(plog, P1, commit=True, coordinator_epoch=4)
    plog.append_as_leader(txn(P1, 2))  # 4, open
    plog.close()
    [snapshot] = plog.producer_state.snapshot_offsets()
    entry = decode_snapshot(plog.producer_state.snapshot_file(snapshot).read_bytes())[P1]
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (4, 4)
    again = open_log(tmp_path)
    assert again.producer_state.ongoing == {4: P1}
    assert again.last_stable_offset == 4


@pytest.mark.parametrize("damage", ["none", "delete", "garble"])
def test_unclean_restart_rebuilds_state_and_txn_index(tmp_path: Path, damage: str) -> None:
    plog = open_log(tmp_path, config(segment_bytes=150))
    plog.append_as_leader(txn(P1, 0, 2))
    end(plog, P1, commit=False)
    for seq in range(2, 8):
        plog.append_as_leader(txn(P2, seq - 2))
    end(plog, P2, commit=False)
    plog.append_as_leader(txn(P1, 2))  # open
    assert len(plog.segments) > 2
    expected = [e for s in plog.segments for e in s.txn_index.entries]
    assert [e.producer_id for e in expected] == [P1, P2]
    marker_segment = next(s for s in plog.segments if s.txn_index.entries)
    path = marker_segment.txn_index.path
    if damage == "delete":
        path.unlink()
    elif damage == "garble":
        path.write_bytes(path.read_bytes()[:-3])
    lso = plog.last_stable_offset
    # kill -9 style: nothing closed, no clean-shutdown snapshot
    again = open_log(tmp_path, config(segment_bytes=150), had_clean_shutdown=False)
    if damage != "delete":  # a missing index is one without entries (Kafka creates it lazily)
        assert [e for s in again.segments for e in s.txn_index.entries] == expected
    assert again.last_stable_offset == lso
    assert again.producer_state.ongoing == plog.producer_state.ongoing


def test_truncation_drops_index_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(txn(P1, 0, 2))
    marker = end(plog, P1, commit=False)
    assert plog.last_stable_offset == 3
    plog.truncate_to(marker)
    assert plog.active_segment.txn_index.entries == []
    assert not files.txn_index_file(plog.dir, 0).exists()
    assert plog.last_stable_offset == 0


def test_deleted_segment_takes_its_txn_index(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=200, retention_bytes=1))
    plog.append_as_leader(txn(P1, 0))
    end(plog, P1, commit=False)
    path = plog.segments[0].txn_index.path
    assert path.exists()
    plog.roll()
    plog.append_as_leader(make_batch())
    for segment in plog.delete_old_segments():
        segment.delete_files()
    assert not path.exists()
    assert not list(plog.dir.glob("*.txnindex*"))


# -- cleaner -----------------------------------------------------------------------------
def test_cleaner_drops_aborted_data_keeps_markers_and_open_transactions(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(cleanup_policy="compact", segment_bytes=100_000))
    plog.append_as_leader(txn(P1, 0, keys=[b"a"]))  # 0 committed a
    end(plog, P1, commit=True)  # 1
    plog.append_as_leader(txn(P1, 1, keys=[b"a"]))  # 2 aborted a: must not shadow 0
    end(plog, P1, commit=False)  # 3
    plog.append_as_leader(txn(P2, 0, keys=[b"b"]))  # 4 open: not cleaned
    plog.append_as_leader(txn(P1, 2, keys=[b"b"]))  # 5 P1's next transaction, open
    plog.roll()
    plog.append_as_leader(make_batch())
    assert plog.last_stable_offset == 4
    cleaner = Cleaner(SkimpyOffsetMap(1 << 16))
    result = cleaner.clean(LogToClean(plog, 0, plog.last_stable_offset, 0, 1))
    for segment in result.old_segments:
        segment.delete_files()
    kept = [(h.base_offset, h.is_control) for s in segment_batches(plog)
            for h in iter_batches(s)]
    assert kept == [(0, False), (1, True), (3, True), (4, False), (5, False),
                    (plog.log_end_offset - 1, False)]
    assert plog.segments[0].txn_index.entries == [AbortedTxn(P1, 2, 3, 4)]
    assert plog.fetch_offset_by_timestamp(LATEST_TIMESTAMP) is not None


def test_cleaner_removes_markers_once_their_data_is_gone_and_the_horizon_passed(
    tmp_path: Path,
) -> None:
    plog = open_log(tmp_path, config(cleanup_policy="compact", delete_retention_ms=1000))
    plog.append_as_leader(txn(P1, 0, keys=[b"a"]))  # 0
    end(plog, P1, commit=True)  # 1
    plog.append_as_leader(txn(P2, 0, keys=[b"b"]))  # 2 aborted
    end(plog, P2, commit=False)  # 3
    plog.append_as_leader(txn(P1, 1, keys=[b"a"]))  # 4 shadows 0
    end(plog, P1, commit=True)  # 5
    plog.roll()
    plog.append_as_leader(make_batch())
    cleaner = Cleaner(SkimpyOffsetMap(1 << 16))

    def clean(now: int) -> list[tuple[int, bool, bool]]:
        result = cleaner.clean(LogToClean(plog, 0, plog.last_stable_offset, 0, 1), now)
        for segment in result.old_segments:
            segment.delete_files()
        return [(h.base_offset, h.is_control, h.has_delete_horizon)
                for s in segment_batches(plog)[:-1] for h in iter_batches(s)]

    # pass 1: 0 and 2 dropped; both markers saw their transaction's batches in this pass
    # (Kafka's rule): kept as they are
    assert clean(NOW) == [(1, True, False), (3, True, False), (4, False, False),
                          (5, True, False)]
    # pass 2: they guard nothing any more: they get a delete horizon, and stay until it
    assert clean(NOW + 10) == [(1, True, True), (3, True, True), (4, False, False),
                               (5, True, False)]
    assert clean(NOW + 20) == [(1, True, True), (3, True, True), (4, False, False),
                               (5, True, False)]
    # pass 3, past both horizons: both markers go; the last transaction keeps its marker
    assert clean(NOW + 2000) == [(4, False, False), (5, True, False)]
    again = open_log(tmp_path, config(cleanup_policy="compact"), had_clean_shutdown=False)
    assert again.last_stable_offset == again.log_end_offset


def test_verification_guard(tmp_path: Path) -> None:
    """KIP-890's verification guard (Kafka's VerificationStateEntry): a marker for the
    producer while its partition was verified voids the guard; its transactional append
    drops the guard, the open transaction needing none."""
    plog = open_log(tmp_path)
    state = plog.producer_state
    assert not state.has_ongoing_txn(P1, 0)
    guard = state.start_verification(P1)
    assert state.verified(P1, 0, guard)
    end(plog, P1, commit=True)  # a marker came while the coordinator was asked
    assert not state.verified(P1, 0, guard)
    older = state.start_verification(P1)
    guard = state.start_verification(P1)
    assert not state.verified(P1, 0, older)  # replaced by a newer verification
    assert state.verified(P1, 0, guard)
    plog.append_as_leader(txn(P1, 0, 2))
    assert state.has_ongoing_txn(P1, 0) and not state.has_ongoing_txn(P1, 1)
    assert P1 not in state.verifying
    assert state.verified(P1, 0, guard)  # the transaction is open
    end(plog, P1, commit=False)
    assert not state.verified(P1, 0, guard)
    guard = state.start_verification(P1)
    state.end_verification(P1, object())  # another's: kept
    assert state.verified(P1, 0, guard)
    state.end_verification(P1, guard)  # refused, or its append tried: dropped
    assert P1 not in state.verifying
