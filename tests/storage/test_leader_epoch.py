"""Leader epoch cache: assign, end_offset_for, truncation and its checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage import checkpoint, files
from odradek.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

from ._util import config, make_batch, open_log


def test_assign_and_file_format(tmp_path: Path) -> None:
    path = tmp_path / files.LEADER_EPOCH_CHECKPOINT
    cache = LeaderEpochCache(path)
    assert cache.latest_epoch == UNDEFINED_EPOCH
    cache.assign(1, 0)
    cache.assign(1, 10)  # same epoch: no-op
    cache.assign(0, 20)  # older epoch: no-op
    cache.assign(3, 40)
    cache.assign(4, 39)  # start offset going back: no-op
    cache.assign(-1, 50)  # no epoch
    assert cache.entries == [(1, 0), (3, 40)]
    assert not path.exists() and cache.unwritten  # a new epoch is not written at once
    cache.write()
    assert path.read_text() == "0\n2\n1 0\n3 40\n" and not cache.unwritten
    assert LeaderEpochCache(path).entries == [(1, 0), (3, 40)]


def test_write_only_when_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[list[tuple[int, int]]] = []
    real_write = checkpoint.write_epochs

    def counting(path: Path, entries: list[tuple[int, int]]) -> None:
        if Path(path).is_relative_to(tmp_path):  # not another test's leftover broker
            writes.append(entries)
        else:
            real_write(path, entries)

    monkeypatch.setattr(checkpoint, "write_epochs", counting)
    cache = LeaderEpochCache(tmp_path / "c")
    cache.write()
    assert writes == []
    cache.assign(1, 0)
    cache.write()
    cache.write()
    assert writes == [[(1, 0)]]
    cache.truncate_from_start(5)  # a truncation writes (through schedule) at once
    assert writes == [[(1, 0)], [(1, 5)]]
    cache.write()
    assert len(writes) == 2


def _cache(tmp_path: Path) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "c")
    for epoch, start in ((2, 0), (4, 30), (7, 80)):
        cache.assign(epoch, start)
    return cache


# end_offset_for, one test per branch of Kafka's LeaderEpochFileCache.endOffsetFor


def test_end_offset_for_no_epoch_asked(tmp_path: Path) -> None:
    assert _cache(tmp_path).end_offset_for(UNDEFINED_EPOCH, 100) == (
        UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_end_offset_for_latest_epoch_is_the_log_end(tmp_path: Path) -> None:
    assert _cache(tmp_path).end_offset_for(7, 100) == (7, 100)


def test_end_offset_for_no_epoch_above(tmp_path: Path) -> None:
    assert _cache(tmp_path).end_offset_for(9, 100) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    empty = LeaderEpochCache(tmp_path / "empty")
    assert empty.end_offset_for(0, 100) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_end_offset_for_epoch_older_than_the_cache(tmp_path: Path) -> None:
    """Retention dropped the epochs before the first cached one: the asked epoch ends
    where the first cached epoch begins (not -1, which sent the follower back to its
    high watermark)."""
    cache = _cache(tmp_path)
    assert cache.end_offset_for(1, 100) == (1, 0)
    cache.truncate_from_start(50)  # log start offset moved into epoch 4
    assert cache.entries == [(4, 50), (7, 80)]
    assert cache.end_offset_for(2, 100) == (2, 50)
    assert cache.end_offset_for(3, 100) == (3, 50)


def test_end_offset_for_epoch_between_cached_ones(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert cache.end_offset_for(2, 100) == (2, 30)
    assert cache.end_offset_for(3, 100) == (2, 30)  # unknown epoch: the one before it
    assert cache.end_offset_for(4, 100) == (4, 80)
    assert cache.end_offset_for(6, 100) == (4, 80)


def test_truncation(tmp_path: Path) -> None:
    path = tmp_path / "c"
    cache = LeaderEpochCache(path)
    for epoch, start in ((1, 0), (2, 10), (3, 20), (4, 30)):
        cache.assign(epoch, start)
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(15)
    assert cache.entries == [(2, 15)]
    cache.truncate_from_start(5)  # never backwards
    assert cache.entries == [(2, 15)]
    assert path.read_text() == "0\n1\n2 15\n"
    cache.clear()
    assert cache.entries == [] and path.read_text() == "0\n0\n"


def test_cache_follows_the_log(tmp_path: Path) -> None:
    cfg = config(segment_bytes=300)
    plog = open_log(tmp_path, cfg)
    for i in range(12):
        plog.append_as_leader(make_batch(2, seed=i), leader_epoch=i // 4)
    assert plog.leader_epoch_cache.entries == [(0, 0), (1, 8), (2, 16)]
    plog.truncate_to(12)
    assert plog.leader_epoch_cache.entries == [(0, 0), (1, 8)]
    plog.maybe_increment_log_start_offset(10)
    assert plog.leader_epoch_cache.entries == [(1, 10)]
    plog.close()
    text = (plog.dir / files.LEADER_EPOCH_CHECKPOINT).read_text()
    assert text == "0\n1\n1 10\n"
    again = open_log(tmp_path, cfg, log_start_offset=10)
    assert again.leader_epoch_cache.entries == [(1, 10)]
    assert again.leader_epoch_cache.end_offset_for(1, again.log_end_offset) == (1, 12)
    again.close()


def test_follower_append_assigns_epochs_from_batches(tmp_path: Path) -> None:
    leader = open_log(tmp_path, name="l-0")
    follower = open_log(tmp_path, name="f-0")
    for i in range(6):
        leader.append_as_leader(make_batch(1, seed=i), leader_epoch=5 + i // 3)
    for i in range(6):
        follower.append_as_follower(leader.read(i, 1).read())
    assert follower.leader_epoch_cache.entries == [(5, 0), (6, 3)]
    assert follower.log_end_offset == 6
    leader.close()
    follower.close()


@pytest.mark.parametrize("rolled", [False, True])
def test_epochs_unwritten_at_a_crash_are_rebuilt_by_recovery(
    tmp_path: Path, rolled: bool
) -> None:
    """kill -9 before any flush: the checkpoint file lacks the epochs (or holds only those
    below the recovery point), and recovery assigns them again from the batches."""
    cfg = config(segment_bytes=300 if rolled else 1 << 20)
    plog = open_log(tmp_path, cfg)
    for i in range(12):
        plog.append_as_leader(make_batch(2, seed=i), leader_epoch=i // 4)
    assert plog.leader_epoch_cache.entries == [(0, 0), (1, 8), (2, 16)]
    path = plog.dir / files.LEADER_EPOCH_CHECKPOINT
    written = checkpoint.read_epochs(path) if path.exists() else []
    # What is on disk never runs ahead of the recovery point's coverage.
    assert all(offset < plog.recovery_point for _, offset in written)
    if not rolled:
        assert written == []
    # No close(): the process dies here.
    again = open_log(tmp_path, cfg, recovery_point=plog.recovery_point,
                     had_clean_shutdown=False)
    assert again.leader_epoch_cache.entries == [(0, 0), (1, 8), (2, 16)]
    assert again.leader_epoch_cache.end_offset_for(1, again.log_end_offset) == (1, 16)
    assert checkpoint.read_epochs(path) == [(0, 0), (1, 8), (2, 16)]  # written at recovery
    again.close()
    plog.close()


def test_flush_writes_epochs_before_moving_the_recovery_point(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append_as_leader(make_batch(3), leader_epoch=4)
    assert plog.leader_epoch_cache.unwritten
    plog.flush()
    assert plog.recovery_point == 3
    assert checkpoint.read_epochs(plog.dir / files.LEADER_EPOCH_CHECKPOINT) == [(4, 0)]
    assert not plog.leader_epoch_cache.unwritten
    plog.close()
