"""LogManager: placement, dir lock, clean-shutdown marker, checkpoints, retention and
delayed deletion, and disk errors taking one dir offline while others keep working."""

from __future__ import annotations

import errno
import os
import types
from pathlib import Path

import pytest

from odradek.storage import checkpoint, files
from odradek.storage import segment as segment_module
from odradek.storage.errors import KafkaStorageError
from odradek.storage.manager import LogManager, TopicPartition

from ._util import NOW, Clock, config, make_batch, read_all


def _manager(dirs: list[Path], clock: Clock | None = None) -> LogManager:
    manager = LogManager(dirs, time_ms=clock or Clock())
    manager.startup()
    return manager


def test_new_partition_goes_to_dir_with_fewest(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    manager = _manager(dirs)
    placed = [manager.get_or_create_log(TopicPartition("t", p)).log_dir for p in range(7)]
    assert placed == [d.absolute() for d in (*dirs, *dirs, dirs[0])]
    assert manager.get_or_create_log(TopicPartition("t", 0)).log_dir == dirs[0].absolute()
    manager.shutdown()
    # After a restart the existing partitions count: the next one goes to d1.
    manager = _manager(dirs)
    assert len(manager.logs) == 7
    assert manager.get_or_create_log(TopicPartition("u", 0)).log_dir == dirs[1].absolute()
    manager.shutdown()


def test_second_manager_on_same_dir_fails(tmp_path: Path) -> None:
    first = _manager([tmp_path / "d"])
    second = LogManager([tmp_path / "d"])
    with pytest.raises(KafkaStorageError, match="locked"):
        second.startup()
    first.shutdown()
    third = _manager([tmp_path / "d"])  # the lock is released on shutdown
    third.shutdown()


def test_clean_shutdown_marker_and_checkpoints(tmp_path: Path) -> None:
    log_dir = tmp_path / "d"
    manager = _manager([log_dir])
    assert manager.had_clean_shutdown[log_dir.absolute()] is False
    tp = TopicPartition("t", 3)
    plog = manager.get_or_create_log(tp, config(segment_bytes=300))
    for i in range(10):
        plog.append_as_leader(make_batch(2, seed=i))
    plog.maybe_increment_log_start_offset(4)
    manager.checkpoint()
    assert checkpoint.read_offsets(log_dir / files.LOG_START_OFFSET_CHECKPOINT) == {("t", 3): 4}
    assert not (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
    manager.shutdown()
    assert (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
    assert checkpoint.read_offsets(log_dir / files.RECOVERY_POINT_CHECKPOINT) == {("t", 3): 20}
    assert (log_dir / files.RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\nt 3 20\n"
    manager = LogManager([log_dir])
    manager.startup(lambda _t: config(segment_bytes=300))
    assert manager.had_clean_shutdown[log_dir.absolute()] is True
    assert not (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()  # removed once loaded
    again = manager.get_log(tp)
    assert again is not None
    assert (again.log_start_offset, again.log_end_offset, again.recovery_point) == (4, 20, 20)
    manager.shutdown()


def test_retention_then_delayed_delete(tmp_path: Path) -> None:
    clock = Clock()
    manager = LogManager([tmp_path / "d"], time_ms=clock)
    manager.startup()
    cfg = config(segment_bytes=300, retention_ms=1000, file_delete_delay_ms=5000)
    plog = manager.get_or_create_log(TopicPartition("t", 0), cfg)
    for i in range(12):
        plog.append_as_leader(make_batch(2, NOW, seed=i))
    segments = len(plog.segments)
    assert segments > 2
    assert manager.cleanup_logs() == 0
    clock.now += 2000
    assert manager.cleanup_logs() == segments - 1
    deleted = sorted(p.name for p in plog.dir.glob("*.deleted"))
    assert len(deleted) == 3 * (segments - 1)
    assert plog.log_start_offset == plog.active_segment.base_offset
    manager.delete_pending()
    assert len(list(plog.dir.glob("*.deleted"))) == len(deleted)  # not due yet
    clock.now += 5000
    manager.delete_pending()
    assert list(plog.dir.glob("*.deleted")) == []
    assert sorted(p.name for p in plog.dir.glob("*.log")) == [plog.active_segment.log_path.name]
    manager.shutdown()


def test_delete_log(tmp_path: Path) -> None:
    clock = Clock()
    manager = LogManager([tmp_path / "d"], time_ms=clock)
    manager.startup()
    tp = TopicPartition("gone", 0)
    manager.get_or_create_log(tp, config(file_delete_delay_ms=10)).append_as_leader(make_batch())
    manager.delete_log(tp)
    assert manager.get_log(tp) is None
    assert not (tmp_path / "d" / "gone-0").exists()
    assert len(list((tmp_path / "d").glob("gone-0.*-delete"))) == 1
    clock.now += 10
    manager.delete_pending()
    assert list((tmp_path / "d").glob("gone-0*")) == []
    manager.shutdown()


def test_delete_log_of_a_topic_with_the_longest_name(tmp_path: Path) -> None:
    """A 249-character topic (the longest Kafka allows): ``<tp>.<uuid>-delete`` would be
    291 bytes, past a file name's 255 (ENAMETOOLONG took the whole log dir offline); the
    topic part is cut to fit, as Kafka's LocalLog.logDeleteDirName does."""
    clock = Clock()
    manager = LogManager([tmp_path / "d"], time_ms=clock)
    manager.startup()
    tp = TopicPartition("x" * 249, 0)
    other = TopicPartition("kept", 0)
    manager.get_or_create_log(tp, config(file_delete_delay_ms=10)).append_as_leader(make_batch())
    manager.get_or_create_log(other, config())
    manager.delete_log(tp)
    assert manager.get_log(tp) is None
    assert manager.online_dirs == [tmp_path / "d"]
    (pending,) = (tmp_path / "d").glob("x*-delete")
    assert len(pending.name) == 255 and pending.name.startswith("x" * 200)
    assert manager.get_log(other) is not None
    clock.now += 10
    manager.delete_pending()
    assert list((tmp_path / "d").glob("x*")) == []
    manager.shutdown()


def test_deleting_many_logs_syncs_each_log_dir_once(tmp_path: Path, monkeypatch) -> None:
    """A deleted topic's partitions are renamed, then each log dir synced once: an fsync
    per partition held the event loop for seconds on a large topic."""
    manager = LogManager([tmp_path / "a", tmp_path / "b"], time_ms=Clock())
    manager.startup()
    tps = [TopicPartition("big", i) for i in range(20)]
    for tp in tps:
        manager.get_or_create_log(tp, config())
    synced: list[Path] = []
    real_fsync_dir = files.fsync_dir
    # the patch is process-wide: a broker another test of the worker left running syncs
    # its own dirs meanwhile (Q31), so only this test's dirs are counted
    monkeypatch.setattr(files, "fsync_dir", lambda d: (
        synced.append(Path(d)) if Path(d).is_relative_to(tmp_path) else None,
        real_fsync_dir(d)))
    manager.delete_logs(tps)
    assert sorted(synced) == [tmp_path / "a", tmp_path / "b"]
    assert all(manager.get_log(tp) is None for tp in tps)
    assert list((tmp_path / "a").glob("big-*")) == list((tmp_path / "a").glob("big-*-delete"))
    assert len(list((tmp_path / "a").glob("big-*-delete"))) == 10
    manager.shutdown()


def test_disk_error_takes_one_dir_offline(tmp_path: Path, monkeypatch) -> None:
    bad, good = (tmp_path / "bad").absolute(), (tmp_path / "good").absolute()
    manager = _manager([bad, good])
    log_a = manager.get_or_create_log(TopicPartition("a", 0))
    log_b = manager.get_or_create_log(TopicPartition("b", 0))
    assert (log_a.log_dir, log_b.log_dir) == (bad, good)
    log_a.append_as_leader(make_batch())
    log_b.append_as_leader(make_batch())

    real_pwrite = os.pwrite

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(bad)):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_pwrite(fd, data, offset)

    fake_os = types.SimpleNamespace(
        **{k: getattr(os, k) for k in dir(os) if not k.startswith("__")}
    )
    fake_os.pwrite = failing_pwrite
    monkeypatch.setattr(segment_module, "os", fake_os)

    with pytest.raises(KafkaStorageError):
        log_a.append_as_leader(make_batch())
    assert bad in manager.failure_channel.offline_dirs
    assert good not in manager.failure_channel.offline_dirs
    assert manager.online_dirs == [good]
    assert manager.get_log(TopicPartition("a", 0)) is None  # dropped from service
    with pytest.raises(KafkaStorageError):
        log_a.read(0, 100)  # the offline dir refuses further I/O
    # The other dir keeps working, and new partitions go there.
    assert log_b.append_as_leader(make_batch()).first_offset == 1
    assert len(read_all(log_b)) == 2
    log_c = manager.get_or_create_log(TopicPartition("c", 0))
    assert log_c.log_dir == good
    log_c.append_as_leader(make_batch())
    manager.checkpoint()
    manager.shutdown()
    monkeypatch.undo()
    assert (good / files.CLEAN_SHUTDOWN_FILE).exists()
    assert not (bad / files.CLEAN_SHUTDOWN_FILE).exists()
    for seg in log_a.segments:  # close what the offline log left open
        if seg.fd >= 0:
            seg.close()


def test_unusable_dir_at_startup_goes_offline_others_load(tmp_path: Path) -> None:
    broken = (tmp_path / "not-a-dir").absolute()
    broken.write_bytes(b"")  # a file where a log dir should be: mkdir fails
    good = (tmp_path / "good").absolute()
    manager = _manager([broken, good])
    assert broken in manager.failure_channel.offline_dirs
    assert manager.online_dirs == [good]
    plog = manager.get_or_create_log(TopicPartition("t", 0))
    assert plog.log_dir == good
    plog.append_as_leader(make_batch())
    manager.shutdown()


def test_each_checkpoint_has_its_own_interval(tmp_path: Path) -> None:
    """log.flush.offset.checkpoint.interval.ms drives the recovery points,
    log.flush.start.offset.checkpoint.interval.ms the log start offsets (Kafka's two tasks)."""
    log_dir = tmp_path / "d"
    manager = _manager([log_dir])
    manager.broker_config = {"log.flush.offset.checkpoint.interval.ms": 1000,
                             "log.flush.start.offset.checkpoint.interval.ms": 2500}
    plog = manager.get_or_create_log(TopicPartition("t", 0), config(segment_bytes=300))
    for i in range(10):
        plog.append_as_leader(make_batch(2, seed=i))
    plog.maybe_increment_log_start_offset(4)
    tasks = {name: (interval, fn) for name, interval, fn in manager.periodic_tasks()}
    assert tasks["recovery-point-checkpoint"][0] == 1000
    assert tasks["log-start-offset-checkpoint"][0] == 2500
    for path in (files.RECOVERY_POINT_CHECKPOINT, files.LOG_START_OFFSET_CHECKPOINT):
        (log_dir / path).unlink(missing_ok=True)
    tasks["log-start-offset-checkpoint"][1]()
    assert checkpoint.read_offsets(log_dir / files.LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 4}
    assert not (log_dir / files.RECOVERY_POINT_CHECKPOINT).exists()
    (log_dir / files.LOG_START_OFFSET_CHECKPOINT).unlink()
    tasks["recovery-point-checkpoint"][1]()
    assert (log_dir / files.RECOVERY_POINT_CHECKPOINT).exists()
    assert not (log_dir / files.LOG_START_OFFSET_CHECKPOINT).exists()
    manager.shutdown()
