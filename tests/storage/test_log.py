"""PartitionLog: round trips, property test against brute force, bad input, truncation,
retention, log start offset and segment rolls."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.batch import (
    CRC_OFFSET,
    BatchHeader,
    compute_crc,
    iter_batches,
    iter_records,
    validate_batch,
)
from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType
from odradek.storage.errors import (
    CorruptRecordError,
    InvalidRecordBatchError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from odradek.storage.segment import LogSegment

from ._util import NOW, Clock, config, make_batch, open_log, read_all, segment_batches

GOLDEN = sorted((Path(__file__).parent.parent / "records" / "golden").glob("*.bin"))
CODECS = list(CompressionType)


# -- 1. round trip -------------------------------------------------------------------------
def _ids(value: object) -> str:
    return value if isinstance(value, str) else ""


def _client_batches() -> list[tuple[str, bytes]]:
    out = [(f"built-{c.name.lower()}", make_batch(7, NOW, 300, c, ts_step=3)) for c in CODECS]
    out += [(f"golden-{p.stem}", p.read_bytes()) for p in GOLDEN]
    return out


@pytest.mark.parametrize(("name", "batch"), _client_batches(), ids=_ids)
def test_round_trip_byte_for_byte(tmp_path: Path, name: str, batch: bytes) -> None:
    plog = open_log(tmp_path, config(segment_bytes=2048))
    plog.append_as_leader(make_batch(3))  # so the client batch lands at a non-zero offset
    info = plog.append_as_leader(batch)
    assert info.first_offset == 3
    stored = read_all(plog)[-1]
    assert len(stored) == len(batch)
    assert stored[8:] == batch[8:]  # all but the base offset
    assert BatchHeader.parse(stored).base_offset == 3
    validate_batch(stored, 0)  # CRC still valid
    originals = [r[2:] for r in iter_records(batch)]
    assert [r[2:] for r in iter_records(stored)] == originals
    # The same bytes after a reload (clean and unclean).
    plog.close()
    for clean in (True, False):
        again = open_log(tmp_path, config(segment_bytes=2048), had_clean_shutdown=clean)
        assert read_all(again)[-1] == stored
        again.close()


def test_round_trip_with_leader_epoch_and_many_batches(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=1500))
    batches = [
        make_batch(1 + i % 4, NOW + i, 50 + i * 13, CODECS[i % 5], seed=i) for i in range(40)
    ]
    buf = b"".join(batches[:5])
    info = plog.append_as_leader(buf, leader_epoch=7)
    assert (info.first_offset, info.last_offset) == (0, sum(1 + i % 4 for i in range(5)) - 1)
    for b in batches[5:]:
        plog.append_as_leader(b, leader_epoch=7)
    assert len(plog.segments) > 3
    stored = read_all(plog)
    assert stored == segment_batches(plog)
    assert len(stored) == len(batches)
    offset = 0
    for original, got in zip(batches, stored, strict=True):
        h = BatchHeader.parse(got)
        assert h.base_offset == offset and h.partition_leader_epoch == 7
        assert got[8:12] == original[8:12] and got[16:] == original[16:]
        offset = h.next_offset
    assert plog.leader_epoch_cache.entries == [(7, 0)]
    plog.close()


# -- 2. property test -----------------------------------------------------------------------
batch_spec = st.tuples(
    st.lists(st.integers(-5000, 5000), min_size=1, max_size=5),  # record timestamps - NOW
    st.integers(0, 150),  # value size
    st.sampled_from([CompressionType.NONE, CompressionType.GZIP]),
    st.integers(1, 3),  # batches in this append
)


def _build(ts: list[int], size: int, codec: CompressionType, seed: int) -> bytes:
    builder = BatchBuilder(compression=codec)
    for i, t in enumerate(ts):
        builder.append(b"k", bytes([(seed + i) % 256]) * size, NOW + t)
    return builder.build()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    specs=st.lists(batch_spec, min_size=1, max_size=40),
    segment_bytes=st.integers(100, 1500),
    interval=st.integers(0, 400),
    index_bytes=st.sampled_from([24, 64, 4096]),
    data=st.data(),
)
def test_property_reads_and_lookups_match_brute_force(
    tmp_path_factory, specs, segment_bytes, interval, index_bytes, data
) -> None:
    root = tmp_path_factory.mktemp("prop")
    cfg = config(
        segment_bytes=segment_bytes, index_interval_bytes=interval,
        segment_index_bytes=index_bytes,
    )
    plog = open_log(root, cfg)
    seed = 0
    for ts, size, codec, repeat in specs:
        buf = b""
        for _ in range(repeat):
            buf += _build(ts, size, codec, seed)
            seed += 1
        plog.append_as_leader(buf)
    try:
        _check_against_brute_force(plog, data)
        plog.close()
        for clean in (True, False):
            plog = open_log(root, cfg, had_clean_shutdown=clean)
            _check_against_brute_force(plog, data)
            plog.close()
    finally:
        for seg in plog.segments:
            if seg.fd >= 0:
                seg.close()


def _check_against_brute_force(plog, data) -> None:
    batches = segment_batches(plog)
    headers = [BatchHeader.parse(b) for b in batches]
    leo = plog.log_end_offset
    assert headers[0].base_offset == 0 and headers[-1].next_offset == leo
    for a, b in itertools.pairwise(headers):
        assert b.base_offset == a.next_offset
    # read(): the first batch holds the offset and equals a scan.
    offsets = data.draw(st.lists(st.integers(0, leo - 1), min_size=1, max_size=15))
    for off in offsets:
        want = next(
            b for b, h in zip(batches, headers, strict=True)
            if h.base_offset <= off <= h.last_offset
        )
        got = plog.read(off, 1).read()
        assert got == want
    # Index lookups equal brute force over the entries, and each entry is true to the log.
    for seg in plog.segments:
        seg_headers = [h for h in headers if seg.base_offset <= h.base_offset < seg.next_offset]
        pos_of = {}
        pos = 0
        for h in seg_headers:
            pos_of[pos] = h
            pos += h.size
        oi = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
        ti = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
        for off, p in oi:
            assert pos_of[p].last_offset == off
        for ts, off in ti:
            upto = [h.max_timestamp for h in seg_headers if h.base_offset <= off]
            assert max(upto) == ts
        for target in data.draw(st.lists(st.integers(seg.base_offset - 2, leo + 2), max_size=8)):
            le = [e for e in oi if e.offset <= target]
            assert tuple(seg.offset_index.lookup(target)) == (
                tuple(le[-1]) if le else (seg.base_offset, 0)
            )
        for t in data.draw(st.lists(st.integers(-6000, 6000), max_size=8)):
            le = [e for e in ti if e.timestamp <= NOW + t]
            assert tuple(seg.time_index.lookup(NOW + t)) == (
                tuple(le[-1]) if le else (-1, seg.base_offset)
            )
    # fetch_offset_by_timestamp equals the first record (in offset order) with ts ≥ t.
    records = [(r.offset, r.timestamp) for b in batches for r in iter_records(b)]
    for t in data.draw(st.lists(st.integers(-5100, 5100), min_size=1, max_size=10)):
        want = next(((ts, off) for off, ts in records if ts >= NOW + t), None)
        got = plog.fetch_offset_by_timestamp(NOW + t)
        assert (tuple(got) if got else None) == want
    max_ts = max(ts for _, ts in records)
    got = plog.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert got is not None and got.timestamp == max_ts
    # the record itself, the first one at that timestamp (KIP-734), not its batch's last
    # offset (KAFKA-16310)
    assert got.offset == next(off for off, ts in records if ts == max_ts)
    assert plog.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert plog.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == leo


# -- 6. bad input ---------------------------------------------------------------------------
def _recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
    return batch


def _bad_batches() -> list[tuple[str, bytes, type[Exception]]]:
    good = make_batch(3, NOW, 40)
    out: list[tuple[str, bytes, type[Exception]]] = []
    b = bytearray(good)
    b[-1] ^= 0xFF
    out.append(("crc", bytes(b), CorruptRecordError))
    b = bytearray(good)
    b[16] = 1  # magic is outside the CRC
    out.append(("magic", bytes(b), CorruptRecordError))
    b = bytearray(good)
    struct.pack_into(">i", b, 8, 10)
    out.append(("short_length", bytes(b), CorruptRecordError))
    out.append(("truncated", good[:-3], CorruptRecordError))
    out.append(("short_header", good[:40], CorruptRecordError))
    out.append(("empty", b"", CorruptRecordError))
    b = bytearray(good)
    struct.pack_into(">i", b, 57, 1_000_000)  # count way beyond the bytes
    struct.pack_into(">i", b, 23, 999_999)
    out.append(("count_huge", bytes(_recrc(b)), InvalidRecordBatchError))
    b = bytearray(good)
    struct.pack_into(">i", b, 57, 2)  # count != last_offset_delta + 1
    out.append(("count_mismatch", bytes(_recrc(b)), InvalidRecordBatchError))
    b = bytearray(good)
    struct.pack_into(">i", b, 23, -1)
    out.append(("negative_delta", bytes(_recrc(b)), InvalidRecordBatchError))
    out.append(("second_bad", good + out[0][1], CorruptRecordError))
    out.append(("too_large", make_batch(1, NOW, 5000), RecordTooLargeError))
    out.append(("future", make_batch(1, NOW + 3_600_001), InvalidTimestampError))
    return out


@pytest.mark.parametrize(("name", "batch", "error"), _bad_batches(), ids=_ids)
def test_bad_input_refused_and_nothing_written(
    tmp_path: Path, name: str, batch: bytes, error: type[Exception]
) -> None:
    plog = open_log(tmp_path, config(max_message_bytes=4096))
    plog.append_as_leader(make_batch(2))
    leo, size = plog.log_end_offset, plog.active_segment.log_path.stat().st_size
    with pytest.raises(error):
        plog.append_as_leader(batch)
    assert plog.log_end_offset == leo
    assert plog.active_segment.log_path.stat().st_size == size == plog.size_in_bytes
    # The log still works afterwards.
    assert plog.append_as_leader(make_batch(1)).first_offset == leo
    plog.close()


def test_compacted_log_refuses_a_keyless_record(tmp_path: Path) -> None:
    """Kafka's LogValidator rule, in the log's validation: a producer's batch holding a
    record without a key is refused whole on a compacted topic; replicated batches (the
    follower path) are not checked again."""
    plog = open_log(tmp_path, config(cleanup_policy="compact"))
    good = BatchBuilder()
    good.append(b"k", b"v", NOW)
    plog.append_as_leader(good.build())
    bad = BatchBuilder(compression=CompressionType.GZIP)
    bad.append(b"k", b"v", NOW)
    bad.append(None, b"v", NOW)
    with pytest.raises(InvalidRecordBatchError, match="without key"):
        plog.append_as_leader(good.build() + bad.build())
    assert plog.log_end_offset == 1
    plog.close()


def test_coordinator_batch_is_appended_as_built(tmp_path: Path) -> None:
    """A coordinator's own batch (Kafka's AppendOrigin.COORDINATOR): offsets, the leader
    epoch and the index as for a producer's, the CRC still right on disk; the size limit
    still applies, and the buffer must be exactly one batch."""
    clock = Clock()
    plog = open_log(tmp_path, config(cleanup_policy="compact", max_message_bytes=4096),
                    clock)
    plog.append_as_leader(make_batch(2), leader_epoch=3)
    built = BatchBuilder()
    built.append(b"txn-id", b"state", NOW - 7 * 86_400_000)  # outside the timestamp bounds
    info = plog.append_as_coordinator(built.build(), leader_epoch=3)
    assert (info.first_offset, info.last_offset, info.record_count) == (2, 2, 1)
    batches = segment_batches(plog)  # validated: CRC, magic, counts
    assert [BatchHeader.parse(b).base_offset for b in batches] == [0, 2]
    assert BatchHeader.parse(batches[1]).partition_leader_epoch == 3
    with pytest.raises(RecordTooLargeError):
        plog.append_as_coordinator(make_batch(1, NOW, 5000))
    with pytest.raises(ValueError, match="coordinator's batch"):
        plog.append_as_coordinator(make_batch(1) + make_batch(1))
    assert plog.log_end_offset == 3
    plog.close()
    recompressing = open_log(tmp_path, config(compression_type="gzip"), name="gz-0")
    recompressing.append_as_coordinator(built.build())  # through append_as_leader
    [stored] = segment_batches(recompressing)
    assert BatchHeader.parse(stored).compression == CompressionType.GZIP
    recompressing.close()


def test_refused_records_are_named(tmp_path: Path) -> None:
    """KIP-467: the records a rule refuses are named by their index in the batch, with
    Kafka's messages (LogValidator), and nothing is written."""
    plog = open_log(tmp_path, config(cleanup_policy="compact"))
    batch = BatchBuilder(compression=CompressionType.LZ4)
    for i in range(100):
        batch.append(None if i % 10 == 5 else b"k%d" % i, b"v", NOW)
    with pytest.raises(InvalidRecordBatchError) as caught:
        plog.append_as_leader(batch.build())
    keyless = f"Compacted topic cannot accept message without key in topic partition {plog.name}."
    assert caught.value.record_errors == tuple((i, keyless) for i in range(5, 100, 10))
    assert str(caught.value).startswith(
        "One or more records have been rejected due to 10 record errors in total, and only "
        "showing the first three errors at most: [RecordError(batchIndex=5, ")
    assert plog.log_end_offset == 0
    plog.close()


def test_records_out_of_the_timestamp_bounds_are_named(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(message_timestamp_after_max_ms=1000))
    batch = BatchBuilder()
    for ts in (NOW + 5000, NOW, NOW + 999, NOW + 7000):
        batch.append(b"k", b"v", ts)
    with pytest.raises(InvalidTimestampError) as caught:
        plog.append_as_leader(batch.build())
    assert [i for i, _ in caught.value.record_errors] == [0, 3]
    assert caught.value.record_errors[0][1].startswith(
        f"Timestamp {NOW + 5000} of message with offset 0 is out of range.")
    assert str(caught.value) == "One or more records have been rejected due to invalid timestamp"
    assert plog.log_end_offset == 0
    plog.close()


def test_past_timestamp_bound(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(message_timestamp_before_max_ms=1000))
    with pytest.raises(InvalidTimestampError):
        plog.append_as_leader(make_batch(1, NOW - 1001))
    assert plog.log_end_offset == 0 and plog.size_in_bytes == 0
    plog.close()


def test_follower_append_refuses_offsets_going_back(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch(5))
    with pytest.raises(InvalidRecordBatchError):
        plog.append_as_follower(make_batch(1))  # base offset 0 < log end 5
    assert plog.log_end_offset == 5
    plog.close()


# -- 7. truncation --------------------------------------------------------------------------
def test_truncate_to_across_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=400, index_interval_bytes=50))
    for i in range(30):
        plog.append_as_leader(make_batch(2, NOW + i, 40, seed=i), leader_epoch=i // 10)
    assert len(plog.segments) > 4
    before = read_all(plog)
    plog.truncate_to(31)  # inside the batch 30..31: it goes
    assert plog.log_end_offset == 30
    assert read_all(plog) == before[:15]
    assert plog.high_watermark == 30 and plog.recovery_point <= 30
    assert plog.leader_epoch_cache.entries == [(0, 0), (1, 20)]
    assert all(s.base_offset < 30 for s in plog.segments)
    leftovers = sorted(p.name for p in plog.dir.glob("*.log"))
    assert leftovers == [s.log_path.name for s in plog.segments]
    assert plog.append_as_leader(make_batch(1)).first_offset == 30
    plog.truncate_to(1000)  # beyond the end: nothing
    assert plog.log_end_offset == 31
    plog.close()
    again = open_log(tmp_path, config(segment_bytes=400, index_interval_bytes=50))
    assert read_all(again)[:15] == before[:15] and again.log_end_offset == 31
    again.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=300))
    for i in range(20):
        plog.append_as_leader(make_batch(2, seed=i), leader_epoch=1)
    plog.truncate_fully_and_start_at(1000)
    assert plog.log_start_offset == plog.log_end_offset == 1000
    assert [s.base_offset for s in plog.segments] == [1000]
    assert sorted(p.name for p in plog.dir.glob("*.log")) == ["00000000000000001000.log"]
    assert plog.leader_epoch_cache.entries == []
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    assert plog.append_as_leader(make_batch(1), leader_epoch=2).first_offset == 1000
    assert plog.leader_epoch_cache.entries == [(2, 1000)]
    plog.close()
    again = open_log(tmp_path, config(segment_bytes=300), log_start_offset=1000)
    assert again.log_start_offset == 1000 and again.log_end_offset == 1001
    again.close()


# -- 5. retention, log start offset ---------------------------------------------------------
def _filled(tmp_path: Path, clock: Clock, n: int = 30, ts=lambda i: NOW, **cfg):
    plog = open_log(tmp_path, config(segment_bytes=400, **cfg), clock)
    for i in range(n):
        plog.append_as_leader(make_batch(2, ts(i), 40, seed=i))
    return plog


def test_retention_by_time_only_closed_segments(tmp_path: Path) -> None:
    clock = Clock()
    plog = _filled(tmp_path, clock, ts=lambda i: NOW - 100_000 if i < 15 else NOW,
                   retention_ms=50_000)
    old = [s for s in plog.segments if s.largest_timestamp < NOW]
    assert 1 < len(old) < len(plog.segments) - 1
    removed = plog.delete_old_segments()
    assert [s.base_offset for s in removed] == [s.base_offset for s in old]
    assert plog.log_start_offset == plog.segments[0].base_offset
    for s in removed:
        assert s.log_path.name.endswith(".log.deleted") and s.log_path.exists()
    # Everything old: all closed segments go, never the active one.
    clock.now += 10**9
    active = plog.active_segment
    plog.delete_old_segments()
    assert plog.segments == [active]
    assert plog.log_start_offset == active.base_offset
    assert plog.append_as_leader(make_batch(1, clock.now)).first_offset == 60
    bases = [s.base_offset for s in plog.segments]  # (that append rolled on segment.ms)
    plog.close()
    # A restart before the delayed delete: .deleted files go, nothing comes back.
    again = open_log(tmp_path, config(segment_bytes=400, retention_ms=50_000), clock)
    assert list(again.dir.glob("*.deleted")) == []
    assert [s.base_offset for s in again.segments] == bases
    assert again.log_start_offset == active.base_offset
    again.close()


def test_retention_by_size(tmp_path: Path) -> None:
    plog = _filled(tmp_path, Clock(), retention_bytes=1000)
    total = plog.size_in_bytes
    removed = plog.delete_old_segments()
    assert removed
    remaining = plog.size_in_bytes
    assert remaining == total - sum(s.size for s in removed)
    assert remaining - 1000 < plog.segments[0].size or len(plog.segments) == 1
    assert plog.log_start_offset == plog.segments[0].base_offset
    plog.close()


def test_retention_never_deletes_active_segment(tmp_path: Path) -> None:
    clock = Clock()
    plog = _filled(tmp_path, clock, n=2, retention_ms=1, retention_bytes=0)
    assert len(plog.segments) == 1
    clock.now += 10**9
    assert plog.delete_old_segments() == []
    assert plog.log_end_offset == 4
    plog.close()


def test_log_start_offset_advance_and_retention(tmp_path: Path) -> None:
    plog = _filled(tmp_path, Clock())
    bases = [s.base_offset for s in plog.segments]
    with pytest.raises(OffsetOutOfRangeError):
        plog.maybe_increment_log_start_offset(plog.log_end_offset + 1)
    target = bases[3] + 1
    plog.maybe_increment_log_start_offset(target)
    assert plog.log_start_offset == target
    plog.maybe_increment_log_start_offset(2)  # never backwards
    assert plog.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(target - 1, 100)
    assert BatchHeader.parse(plog.read(target, 1).read()).base_offset <= target
    removed = plog.delete_old_segments()
    assert [s.base_offset for s in removed] == bases[:3]
    assert plog.segments[0].base_offset == bases[3]
    assert plog.log_start_offset == target
    plog.close()


# -- 8. rolls -------------------------------------------------------------------------------
def test_roll_on_segment_bytes(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_bytes=500))
    for i in range(40):
        plog.append_as_leader(make_batch(1, NOW, 60 + i % 5, seed=i))
    assert len(plog.segments) > 5
    for seg in plog.segments:
        assert seg.size <= 500
    names = sorted(p.name for p in plog.dir.glob("*.log"))
    assert names == [s.log_path.name for s in plog.segments]
    plog.close()


def test_roll_on_segment_ms(tmp_path: Path) -> None:
    clock = Clock(NOW + 100_000)
    plog = open_log(tmp_path, config(segment_ms=10_000), clock)
    for ts in (NOW, NOW + 5_000, NOW + 9_000):
        plog.append_as_leader(make_batch(1, ts))
    assert len(plog.segments) == 1
    plog.append_as_leader(make_batch(1, NOW + 10_001))
    assert [s.base_offset for s in plog.segments] == [0, 3]
    plog.append_as_leader(make_batch(1, NOW + 15_000))
    assert len(plog.segments) == 2
    plog.append_as_leader(make_batch(1, NOW + 20_002))
    assert [s.base_offset for s in plog.segments] == [0, 3, 5]
    plog.close()


def test_roll_when_index_full(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(20):
        plog.append_as_leader(make_batch(1, NOW + i, seed=i))
    assert len(plog.segments) > 3
    for seg in plog.segments:
        assert seg.offset_index.entries <= 3 and seg.time_index.entries <= 2
    assert len(read_all(plog)) == 20
    plog.close()


def test_multi_batch_append_with_tiny_index(tmp_path: Path) -> None:
    plog = open_log(tmp_path, config(segment_index_bytes=24, index_interval_bytes=0))
    buf = b"".join(make_batch(1, NOW + i, seed=i) for i in range(10))
    plog.append_as_leader(buf)
    plog.append_as_leader(buf)
    assert plog.log_end_offset == 20
    assert len(read_all(plog)) == 20
    plog.close()
    again = open_log(tmp_path, config(segment_index_bytes=24, index_interval_bytes=0),
                     had_clean_shutdown=False)
    assert len(read_all(again)) == 20
    again.close()


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(NOW + 5)
    plog = open_log(tmp_path, config(message_timestamp_type="LogAppendTime"), clock)
    original = make_batch(3, NOW - 10**9)  # far in the past: no bound for LogAppendTime
    info = plog.append_as_leader(original)
    assert info.log_append_time == NOW + 5
    stored = read_all(plog)[0]
    header = validate_batch(stored, 0)  # the CRC was recomputed
    assert header.max_timestamp == NOW + 5 and header.timestamp_type == 1
    assert stored[61:] == original[61:]  # the records themselves are untouched
    found = plog.fetch_offset_by_timestamp(NOW)
    assert found is not None and tuple(found) == (NOW + 5, 0)
    plog.close()


def _segment_state(segment: LogSegment) -> tuple[object, ...]:
    return (
        segment.size, segment.next_offset, segment.max_timestamp_so_far,
        segment.offset_of_max_timestamp_so_far, segment.rolling_based_timestamp,
        segment.bytes_since_last_index_entry,
        [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)],
        [segment.time_index.entry(i) for i in range(segment.time_index.entries)],
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    appends=st.lists(
        st.lists(st.tuples(st.integers(1, 4), st.integers(-500, 500)), min_size=1, max_size=4),
        min_size=1, max_size=12,
    ),
    interval=st.integers(0, 400),
    log_append_time=st.booleans(),
)
def test_leader_append_indexes_like_the_written_headers(
    tmp_path_factory: pytest.TempPathFactory, appends: list[list[tuple[int, int]]],
    interval: int, log_append_time: bool,
) -> None:
    """The leader describes the batches it writes without re-parsing them (AppendedBatch);
    the segment must end up exactly as if fed the headers parsed from the written bytes."""
    root = tmp_path_factory.mktemp("leader")
    timestamp_type = "LogAppendTime" if log_append_time else "CreateTime"
    clock = Clock(NOW + 1000)
    plog = open_log(root, config(index_interval_bytes=interval,
                                 message_timestamp_type=timestamp_type), clock)
    reference = LogSegment(root, 0, interval, 1 << 20)
    seed = 0
    for batches in appends:
        buf = b""
        for count, skew in batches:
            buf += make_batch(count, NOW + skew, ts_step=7, seed=seed)
            seed += 1
        clock.now += 3
        before = plog.active_segment.size
        info = plog.append_as_leader(buf, leader_epoch=0)
        written = plog.active_segment.read_bytes(before, plog.active_segment.size - before)
        headers = [validate_batch(written, h.position) for h in iter_batches(written)]
        reference.append(written, headers)
        assert info.first_offset == headers[0].base_offset
        assert info.last_offset == headers[-1].last_offset
    assert len(plog.segments) == 1
    assert _segment_state(plog.active_segment) == _segment_state(reference)
    reference.close()
    plog.close()


def test_read_passes_segments_left_with_only_an_empty_batch(tmp_path: Path) -> None:
    """The cleaner keeps one empty batch (header only) where it emptied a group of segments.
    A fetch landing there reads on into the next segment, as Kafka reads past an empty
    segment: a response holding nothing but empty batches made librdkafka double its fetch
    size on every fetch until it failed with MSG_SIZE_TOO_LARGE."""
    from odradek.records.batch import BATCH_HEADER_SIZE, BatchHeader
    from odradek.storage.cleaner import empty_batch

    log = open_log(tmp_path, config(segment_bytes=100))  # every append rolls a segment

    def batch(base: int, n: int = 10) -> bytes:
        b = BatchBuilder(base_offset=base)
        for _ in range(n):
            b.append(b"k", b"v" * 20, NOW)
        return b.build()

    log.append_as_follower(batch(0))
    for base in (10, 20):  # two consecutive segments emptied by compaction
        log.append_as_follower(empty_batch(BatchHeader.parse(batch(base))))
    log.append_as_follower(batch(30))
    assert len(log.segments) >= 4
    for offset in (10, 15, 20, 29):
        data = log.read(offset, 1 << 20).read()
        header = BatchHeader.parse(data)
        assert (header.base_offset, header.record_count, len(data)) == (30, 10, header.size)
    # with nothing after it below the high watermark, the empty batch itself is served
    log.update_high_watermark(20)
    data = log.read(10, 1 << 20, max_offset=20).read()
    assert (len(data), BatchHeader.parse(data).base_offset) == (BATCH_HEADER_SIZE, 10)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_max_timestamp_names_the_record_not_its_batch(tmp_path: Path,
                                                      codec: CompressionType) -> None:
    """ListOffsets -3 (KIP-734) on a batch whose timestamps are out of offset order."""
    plog = open_log(tmp_path)
    builder = BatchBuilder(compression=codec)
    for i, dt in enumerate([5, 900, 30, 900, 7]):
        builder.append(f"k{i}".encode(), b"v", NOW + dt, [])
    plog.append_as_leader(make_batch(3, timestamp=NOW - 50))
    plog.append_as_leader(builder.build())
    got = plog.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert got is not None and (got.timestamp, got.offset) == (NOW + 900, 3 + 1)
    plog.close()


def test_a_read_with_no_room_answers_empty_without_searching_the_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fetch whose answer is full reads its other partitions with 0 bytes (and no
    first batch owed): they answer empty with the log's offsets, and an offset out of
    range is still refused, without the batch walk that would locate the offset."""
    plog = open_log(tmp_path)
    for _ in range(4):
        plog.append_as_leader(make_batch(3))
    plog.update_high_watermark(plog.log_end_offset)
    searched: list[int] = []
    translate = LogSegment.translate_offset

    def counting(segment: LogSegment, offset: int, starting_position: int = 0) -> object:
        if segment.log_path.is_relative_to(tmp_path):  # not another test's leftover broker
            searched.append(offset)
        return translate(segment, offset, starting_position)

    monkeypatch.setattr(LogSegment, "translate_offset", counting)
    info = plog.read(5, 0, plog.high_watermark, min_one_message=False)
    assert (info.size, info.fetch_offset, info.high_watermark) == (0, 5, 12)
    assert (info.log_start_offset, info.log_end_offset, info.last_stable_offset) == (0, 12, 12)
    assert info.read() == b"" and info.aborted_transactions is None
    assert searched == []
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(13, 0, plog.high_watermark, min_one_message=False)
    # the first partition with data still gets its first batch whole (KIP-74)
    info = plog.read(5, 0, plog.high_watermark, min_one_message=True)
    assert info.size > 0 and searched
    assert BatchHeader.parse(info.read()).base_offset == 3
    plog.close()


def test_a_read_tells_whether_its_first_batch_was_cut(tmp_path: Path) -> None:
    """Kafka's firstEntryIncomplete: without min_one_message, a limit inside the first
    batch cuts it (the fetch then answers the partition empty); a limit past it, or
    min_one_message, does not."""
    plog = open_log(tmp_path)
    for _ in range(3):
        plog.append_as_leader(make_batch(3))
    plog.update_high_watermark(plog.log_end_offset)
    first = BatchHeader.parse(plog.read(3, 1 << 20, plog.high_watermark).read()).size
    cut = plog.read(3, first - 1, plog.high_watermark, min_one_message=False)
    assert cut.size == first - 1 and cut.first_entry_incomplete
    whole = plog.read(3, first - 1, plog.high_watermark, min_one_message=True)
    assert whole.size == first and not whole.first_entry_incomplete
    # a cut inside the second batch is not the first's: the client drops the partial one
    more = plog.read(3, first + 5, plog.high_watermark, min_one_message=False)
    assert more.size == first + 5 and not more.first_entry_incomplete
    at_end = plog.read(9, 10, plog.high_watermark, min_one_message=False)
    assert at_end.size == 0 and not at_end.first_entry_incomplete
    plog.close()
