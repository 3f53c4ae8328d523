"""Producer state (odradek.storage.producer_state) through PartitionLog, as Kafka's
ProducerStateManagerTest does: duplicates, gaps, epoch fencing, wrap, the 5-batch window,
snapshots, restart (clean and kill -9 style) and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.records.builder import BatchBuilder
from odradek.storage import files
from odradek.storage.errors import InvalidRecordBatchError
from odradek.storage.log import PartitionLog
from odradek.storage.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateEntry,
    SnapshotCorruptError,
    decode_snapshot,
    encode_snapshot,
)
from tests.storage._util import NOW, Clock, config, make_batch, open_log, read_all

INT32_MAX = (1 << 31) - 1
PID = 1000


def idem(seq: int, count: int = 1, epoch: int = 0, pid: int = PID, ts: int = NOW) -> bytes:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(count):
        builder.append(b"k", b"v%d" % (seq + i), ts)
    return builder.build()


def snapshots(plog: PartitionLog) -> list[int]:
    return plog.producer_state.snapshot_offsets()


def test_in_sequence_batches_are_appended(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert plog.append_as_leader(idem(0, 3)).first_offset == 0
    assert plog.append_as_leader(idem(3, 2)).first_offset == 3
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 4 and entry.last_offset == 4


def test_duplicate_answers_original_offsets_without_writing(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch(2))  # a non-idempotent batch first: offsets 0-1
    first = plog.append_as_leader(idem(0, 3))
    plog.append_as_leader(idem(3, 1))
    end = plog.log_end_offset
    again = plog.append_as_leader(idem(0, 3))
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert again.first_offset == 2
    assert plog.log_end_offset == end
    assert len(read_all(plog)) == 3


def test_window_of_five_batches(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for seq in range(6):
        plog.append_as_leader(idem(seq))
    end = plog.log_end_offset
    # Batches 1..5 are retained: duplicates; batch 0 fell out of the window.
    for seq in range(1, 6):
        assert plog.append_as_leader(idem(seq)).first_offset == seq
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(idem(0))
    assert plog.log_end_offset == end


def test_gap_is_out_of_order_and_writes_nothing(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(0, 2))
    with pytest.raises(OutOfOrderSequenceError) as err:
        plog.append_as_leader(idem(3))
    assert err.value.kafka_error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert plog.log_end_offset == 2
    # One refused batch refuses the whole partition's data.
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(idem(2) + idem(4))
    assert plog.log_end_offset == 2
    plog.append_as_leader(idem(2) + idem(3))
    assert plog.log_end_offset == 4


def test_old_epoch_is_fenced(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(0, epoch=0))
    plog.append_as_leader(idem(0, epoch=1))
    with pytest.raises(InvalidProducerEpochError) as err:
        plog.append_as_leader(idem(1, epoch=0))
    assert err.value.kafka_error == "INVALID_PRODUCER_EPOCH"
    assert plog.log_end_offset == 2


def test_new_epoch_must_start_at_zero(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(0, 5, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(idem(5, epoch=1))
    plog.append_as_leader(idem(0, epoch=1))
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1


def test_unknown_producer_accepted_at_any_sequence(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(42))
    plog.append_as_leader(idem(43))
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(idem(45))


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(INT32_MAX - 1, 2))
    plog.append_as_leader(idem(0))
    # A batch spanning the wrap.
    plog.append_as_leader(idem(INT32_MAX - 1, 4, pid=7))
    entry = plog.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 1
    plog.append_as_leader(idem(2, pid=7))
    assert plog.append_as_leader(idem(INT32_MAX - 1, 4, pid=7)).first_offset == 3


def test_producer_id_without_sequence_is_invalid(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    with pytest.raises(InvalidRecordBatchError):
        plog.append_as_leader(idem(-1))
    assert plog.log_end_offset == 0


def test_producers_are_independent(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(0, pid=1) + idem(0, pid=2) + make_batch(1))
    plog.append_as_leader(idem(1, pid=2))
    plog.append_as_leader(idem(1, pid=1))
    assert len(plog.producer_state.producers) == 2


def test_snapshot_on_roll_keeps_two(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=200))
    for seq in range(0, 16, 2):
        plog.append_as_leader(idem(seq, 2))
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 3
    assert snapshots(plog) == bases[-2:]
    for offset in snapshots(plog):
        assert (tmp_path / "topic-0" / f"{offset:020d}{files.SNAPSHOT_SUFFIX}").exists()


def test_clean_restart_keeps_state(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for seq in range(0, 6, 2):
        plog.append_as_leader(idem(seq, 2, epoch=3))
    plog.close()
    assert snapshots(plog) == [6]
    plog = open_log(tmp_path)
    assert plog.append_as_leader(idem(4, 2, epoch=3)).first_offset == 4  # duplicate
    assert plog.log_end_offset == 6
    with pytest.raises(InvalidProducerEpochError):
        plog.append_as_leader(idem(6, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(idem(7, epoch=3))
    plog.append_as_leader(idem(6, epoch=3))


def test_unclean_restart_rebuilds_from_log(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for seq in range(6):
        plog.append_as_leader(idem(seq))
    plog.flush()
    # kill -9: no close, no snapshot; the log is reopened as after a crash.
    assert snapshots(plog) == []
    again = open_log(tmp_path, had_clean_shutdown=False)
    for seq in range(1, 6):  # the whole 5-batch window is rebuilt from batch headers
        assert again.append_as_leader(idem(seq)).first_offset == seq
    assert again.log_end_offset == 6
    with pytest.raises(OutOfOrderSequenceError):
        again.append_as_leader(idem(7))


def test_restart_replays_after_snapshot(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=300))
    for seq in range(10):
        plog.append_as_leader(idem(seq))
    assert snapshots(plog)
    assert snapshots(plog)[-1] < plog.log_end_offset
    plog.flush()
    again = open_log(tmp_path, config(segment_bytes=300), had_clean_shutdown=False)
    entry = again.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 9
    assert again.append_as_leader(idem(9)).first_offset == 9
    again.append_as_leader(idem(10))


def test_snapshots_above_log_end_are_dropped_on_load(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(0))
    plog.close()
    directory = tmp_path / "topic-0"
    bogus = directory / f"{50:020d}{files.SNAPSHOT_SUFFIX}"
    bogus.write_bytes((directory / f"{1:020d}{files.SNAPSHOT_SUFFIX}").read_bytes())
    open_log(tmp_path)
    assert not bogus.exists()


def test_corrupt_snapshot_falls_back_to_log(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(idem(0, 3))
    plog.close()
    path = tmp_path / "topic-0" / f"{3:020d}{files.SNAPSHOT_SUFFIX}"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    again = open_log(tmp_path)
    assert again.append_as_leader(idem(0, 3)).first_offset == 0
    assert not path.exists()


def test_truncate_drops_state_above_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=300))
    for seq in range(8):
        plog.append_as_leader(idem(seq))
    plog.truncate_to(3)
    assert all(offset <= 3 for offset in snapshots(plog))
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 2
    assert plog.append_as_leader(idem(2)).first_offset == 2
    assert plog.append_as_leader(idem(3)).first_offset == 3
    plog.truncate_fully_and_start_at(100)
    assert plog.producer_state.producers == {} and snapshots(plog) == []


def test_expiration(tmp_path: Path) -> None:
    clock = Clock()
    plog = open_log(tmp_path, clock=clock)
    plog.append_as_leader(idem(0, pid=1, ts=NOW - 10_000))
    plog.append_as_leader(idem(0, pid=2, ts=NOW))
    assert plog.producer_state.remove_expired(NOW, 5_000) == 1
    assert set(plog.producer_state.producers) == {2}
    plog.append_as_leader(idem(7, pid=1))  # forgotten: accepted as a new producer


def test_snapshot_round_trip() -> None:
    plog_entries = []
    for pid in range(3):
        entry = ProducerStateEntry(pid)
        plog_entries.append(entry)
    data = encode_snapshot(plog_entries)
    assert set(decode_snapshot(data)) == {0, 1, 2}
    with pytest.raises(SnapshotCorruptError):
        decode_snapshot(data[:-1])
    with pytest.raises(SnapshotCorruptError):
        decode_snapshot(b"\x00\x02" + data[2:])
