"""Damaged checkpoints are caches lost: warn once naming the file, rebuild, start
(checkpoint.py "Damage"). A damaged meta.properties refuses the start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.storage import files
from odradek.storage.checkpoint import MetaPropertiesError, read_epochs
from odradek.storage.manager import LogManager, TopicPartition

from ._util import NOW, Clock, make_batch, read_all

GARBAGE = b"\xff\xfe garbage \x00\n\xff"
TP = TopicPartition("t", 0)


def _start(root: Path) -> LogManager:
    manager = LogManager([root], {}, time_ms=Clock())
    manager.startup()
    return manager


def _fill(root: Path) -> list[bytes]:
    manager = _start(root)
    plog = manager.get_or_create_log(TP)
    for epoch in (0, 1, 2):
        plog.append_as_leader(make_batch(3, NOW, seed=epoch), leader_epoch=epoch)
    plog.roll()
    plog.append_as_leader(make_batch(3, NOW, seed=9), leader_epoch=3)
    plog.maybe_increment_log_start_offset(3)
    plog.delete_old_segments()
    batches = read_all(plog)
    manager.shutdown()
    return batches


@pytest.mark.parametrize("name", [files.RECOVERY_POINT_CHECKPOINT,
                                  files.LOG_START_OFFSET_CHECKPOINT])
def test_damaged_offset_checkpoint_warns_and_rebuilds(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    batches = _fill(tmp_path)
    (tmp_path / name).write_bytes(GARBAGE)
    with caplog.at_level(logging.WARNING):
        manager = _start(tmp_path)
    warnings = [r for r in caplog.records if name in r.getMessage()]
    assert len(warnings) == 1
    plog = manager.get_log(TP)
    assert plog is not None
    assert read_all(plog)[-len(batches):] == batches
    if name == files.LOG_START_OFFSET_CHECKPOINT:  # from the first segment
        assert plog.log_start_offset == plog.segments[0].base_offset == 0
    else:
        assert not manager.had_clean_shutdown[tmp_path.absolute()]  # fully recovered
    manager.shutdown()
    _start(tmp_path).shutdown()  # rewritten: no warning needed again


def test_damaged_leader_epoch_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _fill(tmp_path)
    path = tmp_path / str(TP) / files.LEADER_EPOCH_CHECKPOINT
    expected = read_epochs(path)
    assert [e for e, _ in expected][-1] == 3
    path.write_bytes(GARBAGE)
    with caplog.at_level(logging.WARNING):
        manager = _start(tmp_path)
    assert len([r for r in caplog.records if str(path) in r.getMessage()]) == 1
    plog = manager.get_log(TP)
    assert plog is not None
    assert plog.leader_epoch_cache.entries == expected
    assert read_epochs(path) == expected
    manager.shutdown()


@pytest.mark.parametrize("body", [GARBAGE, b"version=0\nbroker.id=x\n", b"just words\n"])
def test_damaged_meta_properties_refuses_with_one_clear_line(tmp_path: Path, body: bytes) -> None:
    _fill(tmp_path)
    (tmp_path / files.META_PROPERTIES).write_bytes(body)
    manager = LogManager([tmp_path], {}, time_ms=Clock())
    with pytest.raises(MetaPropertiesError) as info:
        manager.startup()
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / files.META_PROPERTIES) in message and "damaged" in message


def test_good_meta_properties_is_accepted(tmp_path: Path) -> None:
    (tmp_path / files.META_PROPERTIES).write_text("version=0\nbroker.id=1\ncluster.id=abc\n")
    _start(tmp_path).shutdown()
