"""The mirror's offset syncs and plans (odradek.spark.offset_sync): translation checked
against a direct model (first mirrored record at or after the committed offset)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.spark.offset_sync import MAX_RUNS_PER_TASK, MirrorState, SyncStore, runs_of


def model(offsets: list[int], committed: int) -> int:
    """Target offset of the first mirrored record with source offset >= committed."""
    return next((i for i, o in enumerate(offsets) if o >= committed), len(offsets))


def test_runs_of_contiguous_and_gaps() -> None:
    assert runs_of([5, 6, 7], 10) == [(5, 10, 3)]
    assert runs_of([0, 1, 4, 5, 9], 0) == [(0, 0, 2), (4, 2, 2), (9, 4, 1)]
    assert runs_of([], 3) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=200), st.integers(1, 50),
       st.randoms(use_true_random=False))
def test_translation_matches_the_model(steps: list[int], batch: int, rnd: random.Random) -> None:
    offsets, o = [], 0
    for step in steps:  # gaps of 0..3 offsets, as compaction leaves
        o += step
        offsets.append(o)
    store = SyncStore()
    t = 0
    for i in range(0, len(offsets), batch):  # one task per micro-batch
        chunk = offsets[i : i + batch]
        store.add(("t", 0), runs_of(chunk, t))
        if rnd.random() < 0.3:  # a replayed micro-batch reports its runs again
            store.add(("t", 0), runs_of(chunk, t))
        t += len(chunk)
    for c in range(0, offsets[-1] + 3):
        assert store.translate(("t", 0), c) == model(offsets, c), c
    assert store.mirrored_end(("t", 0)) == len(offsets)


def test_contiguous_partition_keeps_one_run() -> None:
    store = SyncStore()
    for i in range(100):
        store.add(("t", 1), runs_of(list(range(i * 10, i * 10 + 10)), i * 10))
    assert store.runs[("t", 1)] == [(0, 0, 1000)]
    assert store.translate(("t", 1), 537) == 537


def test_dropped_runs_translate_earlier_never_later() -> None:
    offsets = list(range(0, 6 * MAX_RUNS_PER_TASK, 2))  # a gap after every record
    runs = runs_of(offsets, 0)
    assert len(runs) == MAX_RUNS_PER_TASK  # thinned
    store = SyncStore()
    store.add(("t", 0), runs)
    for c in range(0, offsets[-1] + 2, 7):
        got = store.translate(("t", 0), c)
        assert got is not None and got <= model(offsets, c)


def test_unknown_before_pruned_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import odradek.spark.offset_sync as mod

    monkeypatch.setattr(mod, "MAX_RUNS", 3)
    store = SyncStore()
    for i in range(5):
        store.add(("t", 0), [(i * 10, i, 1)])
    assert store.translate(("t", 0), 0) is None  # before the kept runs: not told
    assert store.translate(("t", 0), 20) == 2
    assert store.translate(("x", 0), 0) is None


def test_state_round_trip(tmp_path: Path) -> None:
    state = MirrorState(tmp_path)
    assert state.load_plan(0) is None
    for b in range(12):
        state.save_plan(b, {("a", 0): b, ("b", 2): 7})
    assert state.load_plan(11) == {("a", 0): 11, ("b", 2): 7}
    assert state.load_plan(0) is None  # old plans are removed
    store = SyncStore()
    store.add(("a", 0), [(0, 0, 5), (9, 5, 2)])
    state.save_syncs(store)
    assert state.load_syncs().runs == store.runs
    state.save_topics({"x", "y"})
    assert state.load_topics() == {"x", "y"}
