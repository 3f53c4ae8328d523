"""SkimpyOffsetMap: fixed memory, latest offset per key, full at the load factor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.storage.offset_map import ENTRY_SIZE, OffsetMapFullError, SkimpyOffsetMap


def test_put_get_overwrite() -> None:
    m = SkimpyOffsetMap(ENTRY_SIZE * 100)
    m.reset()
    assert m.get(b"a") == -1
    m.put(b"a", 1)
    m.put(b"b", 2)
    m.put(b"a", 7)
    assert (m.get(b"a"), m.get(b"b"), len(m)) == (7, 2, 2)
    assert m.latest_offset == 7
    assert b"a" in m and b"zz" not in m


def test_fixed_memory_and_full() -> None:
    m = SkimpyOffsetMap(ENTRY_SIZE * 10 + 5, load_factor=0.9)
    assert m.memory == ENTRY_SIZE * 10 and m.bytes_per_entry == ENTRY_SIZE
    m.reset()
    for i in range(m.max_entries):
        m.put(str(i).encode(), i)
    assert m.is_full and m.max_entries == 9
    m.put(b"10", 10)  # the tenth slot is still free: put never loops
    with pytest.raises(OffsetMapFullError):
        m.put(b"11", 11)
    assert len(m._buf) == m.memory  # fixed at creation


def test_reset_bounds_active_slots() -> None:
    m = SkimpyOffsetMap(ENTRY_SIZE * 100_000)
    m.reset(expected_entries=10)
    assert m.active_slots == 1024
    m.put(b"x", 3)
    m.reset(expected_entries=10)
    assert m.get(b"x") == -1 and len(m) == 0


@given(st.lists(st.tuples(st.binary(max_size=8), st.integers(0, 1000)), max_size=200))
def test_matches_dict(pairs: list[tuple[bytes, int]]) -> None:
    m = SkimpyOffsetMap(ENTRY_SIZE * 512, load_factor=1.0)
    m.reset()
    model: dict[bytes, int] = {}
    for offset, (key, _) in enumerate(pairs):
        m.put(key, offset)
        model[key] = offset
    assert len(m) == len(model)
    for key, offset in model.items():
        assert m.get(key) == offset
