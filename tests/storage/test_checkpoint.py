"""Checkpoint files: Kafka's text format, round trips, refusal of bad files, atomic writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.storage import checkpoint, files


def test_offsets_format_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / files.RECOVERY_POINT_CHECKPOINT
    offsets = {("b-topic", 1): 42, ("a.topic", 0): 0, ("a.topic", 10): 1 << 40}
    checkpoint.write_offsets(path, offsets)
    assert path.read_text() == "0\n3\na.topic 0 0\na.topic 10 1099511627776\nb-topic 1 42\n"
    assert checkpoint.read_offsets(path) == offsets
    checkpoint.write_offsets(path, {})
    assert path.read_text() == "0\n0\n"
    assert checkpoint.read_offsets(path) == {}


def test_epochs_format_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / files.LEADER_EPOCH_CHECKPOINT
    checkpoint.write_epochs(path, [(0, 0), (3, 120), (4, 500)])
    assert path.read_text() == "0\n3\n0 0\n3 120\n4 500\n"
    assert checkpoint.read_epochs(path) == [(0, 0), (3, 120), (4, 500)]


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert checkpoint.read_offsets(tmp_path / "nope") == {}
    assert checkpoint.read_epochs(tmp_path / "nope") == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1\n0\n",  # unknown version
        "0\n",  # no count
        "0\nx\n",  # bad count
        "0\n2\nt 0 1\n",  # fewer entries than announced
        "0\n1\nt 0\n",  # too few fields
        "0\n1\nt zero 1\n",  # not a number
    ],
)
def test_bad_offset_files_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.read_offsets(path)


def test_bad_epoch_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n1\n1 2 3\n")
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.read_epochs(path)


def test_atomic_write_keeps_old_file_on_failure(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "cp"
    checkpoint.write_offsets(path, {("t", 0): 1})
    old = path.read_text()

    real_replace = os.replace

    def boom(src: str | Path, dst: str | Path) -> None:
        # os.replace is process-wide: another test's leftover broker keeps its own
        if not Path(dst).is_relative_to(tmp_path):
            return real_replace(src, dst)
        raise OSError(5, "EIO")

    monkeypatch.setattr(files.os, "replace", boom)
    with pytest.raises(OSError):
        checkpoint.write_offsets(path, {("t", 0): 2})
    monkeypatch.undo()
    assert path.read_text() == old
    checkpoint.write_offsets(path, {("t", 0): 3})
    assert checkpoint.read_offsets(path) == {("t", 0): 3}
    assert not (tmp_path / ("cp" + files.TMP_SUFFIX)).exists()


def test_atomic_write_goes_through_a_temporary_file(tmp_path: Path, monkeypatch) -> None:
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str | Path, dst: str | Path) -> None:
        if Path(dst).is_relative_to(tmp_path):  # (as above)
            seen.append((Path(src).name, Path(dst).name))
            assert Path(src).read_bytes() == b"0\n0\n"
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", spy)
    files.atomic_write(tmp_path / "x", b"0\n0\n")
    ((src, dst),) = seen
    assert dst == "x"
    assert src.startswith("x.") and src.endswith(files.TMP_SUFFIX)  # a tmp of its own
