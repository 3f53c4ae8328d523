"""Checkpoint files in Kafka's text format (Kafka's CheckpointFile / OffsetCheckpointFile).

Format: a version line (``0``), an entry-count line, then one entry per line, fields
separated by single spaces. Offset checkpoints hold ``<topic> <partition> <offset>``; the
leader-epoch checkpoint holds ``<epoch> <start offset>``. Written atomically (write, fsync,
rename); a file that does not parse is reported, never silently half-read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from odradek.storage.files import atomic_write

CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    pass


def _write(path: Path, lines: Sequence[str]) -> None:
    body = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    atomic_write(path, body.encode())


def _read(path: Path, fields: int) -> list[list[str]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}: unrecognised checkpoint version")
    try:
        count = int(lines[1])
    except ValueError as exc:
        raise CheckpointError(f"{path}: bad entry count {lines[1]!r}") from exc
    entries = [line.split(" ") for line in lines[2:] if line]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    _write(path, [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())])


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    try:
        return {(t, int(p)): int(o) for t, p, o in _read(path, 3)}
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc


def write_epochs(path: Path, epochs: Sequence[tuple[int, int]]) -> None:
    _write(path, [f"{e} {o}" for e, o in epochs])


def read_epochs(path: Path) -> list[tuple[int, int]]:
    try:
        return [(int(e), int(o)) for e, o in _read(path, 2)]
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc
