"""OffsetIndex / TimeIndex: lookups equal brute force, truncation, fullness, sanity checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.index import IndexCorruptError, OffsetIndex, TimeIndex


def _brute_le(keys: list[int], target: int) -> int:
    """Index of the largest key ≤ target, or -1."""
    best = -1
    for i, k in enumerate(keys):
        if k <= target:
            best = i
    return best


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 50), min_size=0, max_size=3000),
    targets=st.lists(st.integers(-10, 200_000), min_size=1, max_size=20),
)
def test_offset_index_lookup_matches_brute_force(tmp_path_factory, gaps, targets) -> None:
    base = 1000
    path = Path(tmp_path_factory.mktemp("oi")) / "00000000000000001000.index"
    index = OffsetIndex(path, base, 8 * max(1, len(gaps)))
    offsets, positions = [], []
    off, pos = base, 0
    for g in gaps:
        off += g
        pos += g * 3
        index.append(off, pos)
        offsets.append(off)
        positions.append(pos)
    for t in [*targets, *(base + t for t in targets)]:
        i = _brute_le(offsets, t)
        expected = (base, 0) if i < 0 else (offsets[i], positions[i])
        assert tuple(index.lookup(t)) == expected
    index.close()


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 1000), min_size=0, max_size=2000),
    targets=st.lists(st.integers(-5, 2_000_000), min_size=1, max_size=20),
)
def test_time_index_lookup_matches_brute_force(tmp_path_factory, gaps, targets) -> None:
    path = Path(tmp_path_factory.mktemp("ti")) / "00000000000000000000.timeindex"
    index = TimeIndex(path, 0, 12 * max(1, len(gaps)))
    stamps, offsets = [], []
    ts = 0
    for n, g in enumerate(gaps):
        ts += g
        index.maybe_append(ts, n * 2)
        stamps.append(ts)
        offsets.append(n * 2)
    for t in targets:
        i = _brute_le(stamps, t)
        expected = (-1, 0) if i < 0 else (stamps[i], offsets[i])
        assert tuple(index.lookup(t)) == expected
    index.close()


def test_time_index_only_appends_growing_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0, 120)
    index.maybe_append(10, 1)
    index.maybe_append(10, 2)
    index.maybe_append(5, 3)
    index.maybe_append(11, 4)
    assert index.entries == 2
    assert index.last_entry == (11, 4)
    index.close()


def test_offset_index_refuses_non_increasing_and_full(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 100, 16)
    assert index.max_entries == 2
    index.append(101, 0)
    with pytest.raises(IndexCorruptError):
        index.append(101, 10)
    with pytest.raises(IndexCorruptError):
        index.append(99, 10)  # below the base offset
    index.append(105, 20)
    assert index.is_full()
    with pytest.raises(IndexCorruptError):
        index.append(110, 30)
    index.close()


def test_truncate_to(tmp_path: Path) -> None:
    oi = OffsetIndex(tmp_path / "0.index", 0, 800)
    ti = TimeIndex(tmp_path / "0.timeindex", 0, 1200)
    for i in range(1, 11):
        oi.append(i * 10, i * 100)
        ti.maybe_append(i * 1000, i * 10)
    oi.truncate_to(50)
    ti.truncate_to(50)
    assert oi.entries == 4 and oi.last_offset == 40
    assert ti.entries == 4 and ti.last_entry == (4000, 40)
    oi.truncate_to(45)
    assert oi.entries == 4
    oi.truncate_to(0)
    ti.truncate_to(0)
    assert oi.entries == 0 and ti.entries == 0
    assert oi.lookup(1000) == (0, 0)
    oi.close()
    ti.close()


def test_trim_on_close_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1024)
    assert path.stat().st_size == 0 and not index.is_mapped  # lazy: nothing mapped yet
    index.append(3, 100)
    assert path.stat().st_size == 1024  # sized for appends when first mapped
    index.append(7, 200)
    index.close()
    assert path.stat().st_size == 16  # trimmed to its entries
    again = OffsetIndex(path, 0, 1024, preallocate=False)
    assert again.entries == 2
    assert again.lookup(5) == (3, 100)
    again.sanity_check(1000)
    again.close()


def test_sanity_check_rejects_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\x00" * 13)
    index = OffsetIndex(path, 0, 1024, preallocate=False)
    with pytest.raises(IndexCorruptError):
        index.sanity_check(1000)
    index.close(trim=False)
    path.write_bytes(b"\x00" * 32)  # zero-filled: offsets not increasing
    index = OffsetIndex(path, 0, 1024, preallocate=False)
    with pytest.raises(IndexCorruptError):
        index.sanity_check(1000)
    index.close(trim=False)
    tpath = tmp_path / "00000000000000000000.timeindex"
    tpath.write_bytes(b"\x00" * 24)
    tindex = TimeIndex(tpath, 0, 1200, preallocate=False)
    with pytest.raises(IndexCorruptError):
        tindex.sanity_check(100)
    tindex.close(trim=False)


def test_position_beyond_log_fails_sanity(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 64)
    index.append(1, 500)
    with pytest.raises(IndexCorruptError):
        index.sanity_check(400)
    index.sanity_check(501)
    index.close()
