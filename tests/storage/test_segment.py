"""LogSegment: append/read regions, translate_offset, recovery and truncation."""

from __future__ import annotations

from pathlib import Path

from odradek.records.batch import BatchHeader, set_base_offset
from odradek.storage import files
from odradek.storage.segment import AppendedBatch, LogSegment

from ._util import NOW, make_batch


def _fill(segment: LogSegment, n: int, first: int = 0, count: int = 3) -> list[bytes]:
    out = []
    offset = first
    for i in range(n):
        batch = bytearray(make_batch(count, NOW + i, value_size=20 + i % 7, seed=i))
        set_base_offset(batch, 0, offset)
        header = BatchHeader.parse(batch)
        segment.append(batch, [header])
        out.append(bytes(batch))
        offset = header.next_offset
    return out


def test_append_translate_read(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 100, index_interval_bytes=150, max_index_size=4096)
    batches = _fill(seg, 30, first=100)
    assert seg.next_offset == 100 + 30 * 3
    assert seg.offset_index.entries > 3
    pos = 0
    for b in batches:
        h = BatchHeader.parse(b)
        for off in range(h.base_offset, h.next_offset):
            found = seg.translate_offset(off)
            assert found is not None
            assert (found.offset, found.position, found.size) == (h.base_offset, pos, h.size)
        pos += h.size
    assert seg.translate_offset(seg.next_offset) is None
    region = seg.read(103, 1)  # not min-one-message: capped to max_size
    assert region is not None and region[1] == 1
    region = seg.read(103, 1, min_one_message=True)
    assert region is not None and region[1] == len(batches[1])
    assert seg.read_bytes(region[0].position, region[1]) == batches[1]
    seg.close()


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100, max_index_size=4096)
    _fill(seg, 20)  # batch i: 3 records with timestamp NOW + i
    found = seg.find_offset_by_timestamp(NOW + 7, 0)
    assert found is not None and tuple(found) == (NOW + 7, 21)
    assert seg.find_offset_by_timestamp(NOW + 100, 0) is None
    found = seg.find_offset_by_timestamp(NOW + 7, 25)  # start offset bounds the answer
    assert found is not None and found.offset == 25
    seg.close()


def test_recover_rebuilds_missing_index(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100, max_index_size=4096)
    _fill(seg, 40)
    expected = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    seg.close()
    files.index_file(tmp_path, 0).unlink()
    files.time_index_file(tmp_path, 0).unlink()
    again = LogSegment(tmp_path, 0, index_interval_bytes=100, max_index_size=4096, new=False)
    assert again.recover(1 << 20) == 0
    assert [again.offset_index.entry(i) for i in range(again.offset_index.entries)] == expected
    again.sanity_check()
    assert again.next_offset == 120
    assert again.max_timestamp_so_far == NOW + 39
    again.close()


def test_recover_truncates_torn_tail(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100, max_index_size=4096)
    batches = _fill(seg, 10)
    seg.close()
    log_path = files.log_file(tmp_path, 0)
    size = log_path.stat().st_size
    with open(log_path, "r+b") as f:
        f.truncate(size - 5)
    again = LogSegment(tmp_path, 0, index_interval_bytes=100, max_index_size=4096, new=False)
    assert again.recover(1 << 20) == len(batches[-1]) - 5
    assert again.size == size - len(batches[-1])
    assert again.next_offset == 27
    again.close()


def test_truncate_to(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, index_interval_bytes=50, max_index_size=4096)
    batches = _fill(seg, 10)
    removed = seg.truncate_to(16)  # inside batch 5 (offsets 15..17): the batch goes
    assert removed == sum(len(b) for b in batches[5:])
    assert seg.next_offset == 15
    assert seg.max_timestamp_so_far == NOW + 4
    seg.sanity_check()
    assert seg.truncate_to(100) == 0
    seg.close()


def test_append_with_appended_batch_descriptions(tmp_path: Path) -> None:
    """A leader describes what it writes with AppendedBatch instead of parsed headers; the
    segment accounts both the same way."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    by_header = LogSegment(tmp_path / "a", 0, index_interval_bytes=100, max_index_size=4096)
    by_extent = LogSegment(tmp_path / "b", 0, index_interval_bytes=100, max_index_size=4096)
    offset = 0
    for i in range(20):
        batch = bytearray(make_batch(2, NOW + 5 * (i % 4), value_size=30, ts_step=1, seed=i))
        set_base_offset(batch, 0, offset)
        header = BatchHeader.parse(batch)
        by_header.append(batch, [header])
        by_extent.append(batch, [AppendedBatch(0, header.size, header.last_offset,
                                               header.max_timestamp)])
        offset = header.next_offset
    for seg in (by_header, by_extent):
        assert seg.next_offset == offset
    assert by_extent.size == by_header.size
    assert (by_extent.max_timestamp_so_far, by_extent.offset_of_max_timestamp_so_far) == (
        by_header.max_timestamp_so_far, by_header.offset_of_max_timestamp_so_far
    )
    assert by_extent.offset_index.entries == by_header.offset_index.entries > 2
    assert [by_extent.offset_index.entry(n) for n in range(by_extent.offset_index.entries)] == [
        by_header.offset_index.entry(n) for n in range(by_header.offset_index.entries)
    ]
    assert [by_extent.time_index.entry(n) for n in range(by_extent.time_index.entries)] == [
        by_header.time_index.entry(n) for n in range(by_header.time_index.entries)
    ]
    by_header.close()
    by_extent.close()
