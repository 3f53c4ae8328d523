"""Descriptors: lazy indexes, the cold-segment LRU, and running out of descriptors
(segment.py "Descriptors", dir_failure.py). Mirrors the outage from the fuzzing issue
"Stay up under hostile load": EMFILE took the log dir offline."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from odradek.storage import segment as segment_module
from odradek.storage.dir_failure import LogDirFailureChannel
from odradek.storage.errors import KafkaStorageError, ResourceLimitError
from odradek.storage.manager import LogManager, TopicPartition

from ._util import NOW, Clock, config, make_batch

SRC = Path(__file__).resolve().parents[2] / "src"


def open_fds(root: Path) -> int:
    """Descriptors this process holds on files under ``root``, after collecting garbage
    (a file an earlier test left unreferenced would otherwise be closed by the collector
    in the middle of a count). Only ``root``'s: a thread an earlier test of the same
    worker left running (a broker, a client) opens and closes descriptors of its own
    meanwhile; a whole run once counted 19 for 20 so."""
    gc.collect()
    prefix = str(root)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        count += target.startswith(prefix)
    return count


CONFIG = config(segment_bytes=2048, index_interval_bytes=128)


def _manager(root: Path) -> LogManager:
    manager = LogManager([root], {}, time_ms=Clock())
    manager.startup()
    return manager


def test_resource_errors_fail_the_operation_disk_errors_take_the_dir_offline(
    tmp_path: Path,
) -> None:
    channel = LogDirFailureChannel()
    for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        with pytest.raises(ResourceLimitError) as info, channel.guard(tmp_path, "opening"):
            raise OSError(code, os.strerror(code))
        assert info.value.kafka_error == "REQUEST_TIMED_OUT"
        assert not channel.is_offline(tmp_path)
    assert channel.resource_errors == 3
    with pytest.raises(KafkaStorageError), channel.guard(tmp_path, "appending"):
        raise OSError(errno.EIO, "Input/output error")
    assert channel.is_offline(tmp_path)


def test_descriptors_grow_with_partitions_not_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment_module.OPEN_COLD_SEGMENTS, "capacity", 16)
    segment_module.OPEN_COLD_SEGMENTS.release_all()
    manager = _manager(tmp_path)
    try:
        before = open_fds(tmp_path)
        logs = [manager.get_or_create_log(TopicPartition("t", p), CONFIG) for p in range(20)]
        assert open_fds(tmp_path) - before == 20  # one per partition: the active .log
        for plog in logs:  # ~10 segments each
            for i in range(40):
                plog.append_as_leader(make_batch(5, NOW, value_size=40, seed=i))
        assert all(len(plog.segments) >= 5 for plog in logs)
        produced = open_fds(tmp_path) - before
        # The active segment's .log and its two index maps, plus the cold LRU's share.
        cold = len(segment_module.OPEN_COLD_SEGMENTS)
        assert produced <= 20 * 3 + cold * 3
        for plog in logs:  # fetch every old segment
            offset = 0
            while offset < plog.log_end_offset:
                info = plog.read(offset, 1 << 20)
                assert info.read()
                offset = plog.segments[plog._segment_for(offset)].next_offset
        cold = len(segment_module.OPEN_COLD_SEGMENTS)
        assert cold == 16
        assert open_fds(tmp_path) - before <= 20 * 3 + cold * 3
        segments = sum(len(plog.segments) for plog in logs)
        assert open_fds(tmp_path) - before < segments  # fewer than one per segment on disk
    finally:
        manager.shutdown()


def test_a_released_descriptor_is_never_one_a_fetch_still_uses(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    try:
        plog = manager.get_or_create_log(TopicPartition("t", 0), CONFIG)
        batches = [make_batch(5, NOW, value_size=40, seed=i) for i in range(40)]
        for batch in batches:
            plog.append_as_leader(batch)
        info = plog.read(0, 1 << 20)  # in the first, cold segment
        expected = info.read()
        segment_module.OPEN_COLD_SEGMENTS.release_all()
        assert not plog.segments[0].is_open
        others = [os.open(os.devnull, os.O_RDONLY) for _ in range(8)]  # reuse freed numbers
        try:
            assert info.read() == expected  # the answer's handle kept its descriptor
        finally:
            for fd in others:
                os.close(fd)
        assert plog.read(0, 1 << 20).read() == expected  # reopened on use
    finally:
        manager.shutdown()


CHILD = """
import os, resource, sys
from pathlib import Path
from odradek.storage import segment as segment_module
from odradek.storage.errors import ResourceLimitError
from odradek.storage.manager import LogManager, TopicPartition

root = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
manager = LogManager([root], {})
manager.startup()
created, failed = [], 0
for n in range(1000):
    tp = TopicPartition("grow", n)
    try:
        manager.get_or_create_log(tp)
        created.append(tp)
    except ResourceLimitError:
        failed += 1
        if failed >= 20:
            break
assert failed >= 20, failed
assert manager.online_dirs == [root.absolute()], manager.failure_channel.offline_dirs
assert not manager.failure_channel.offline_dirs
# A half-made log is set aside (``-delete``, removed now or at the next start).
on_disk = {p.name for p in root.iterdir() if p.is_dir() and not p.name.endswith("-delete")}
assert on_disk == {str(tp) for tp in created}, sorted(on_disk - {str(tp) for tp in created})
for tp in created[:60]:
    manager.delete_log(tp)
manager.delete_pending(force=True)
for n in range(1000, 1040):
    manager.get_or_create_log(TopicPartition("grow", n))
manager.shutdown()
restarted = LogManager([root], {})
restarted.startup()
assert not [p for p in root.iterdir() if p.name.endswith("-delete")]
assert len(restarted.logs) == len(created) - 60 + 40, len(restarted.logs)
assert not restarted.failure_channel.offline_dirs
restarted.shutdown()
print("created", len(created), "failed", failed)
"""


def test_out_of_descriptors_fails_operations_and_the_dir_stays_online(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(tmp_path / "logs")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "created" in result.stdout
