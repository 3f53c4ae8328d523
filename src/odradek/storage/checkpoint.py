"""Checkpoint files in Kafka's text format (Kafka's CheckpointFile / OffsetCheckpointFile).

Format: a version line (``0``), an entry-count line, then one entry per line, fields
separated by single spaces. Offset checkpoints hold ``<topic> <partition> <offset>``; the
leader-epoch checkpoint holds ``<epoch> <start offset>``. Written atomically (write, fsync,
rename); a file that does not parse is reported, never silently half-read.

Damage. Every checkpoint is a cache of the logs: a file that does not parse (garbage, not
UTF-8, wrong counts) raises :class:`CheckpointError`, and its reader (the log manager, the
leader epoch cache) warns once naming the file and rebuilds what it held from the logs —
recovery from offset 0, log start offsets from the first segments, leader epochs from the
batches. ``meta.properties`` is not a cache (it names the broker and its cluster):
:func:`read_meta_properties` refuses a damaged one with :class:`MetaPropertiesError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from odradek.storage.files import atomic_write

CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    pass


class MetaPropertiesError(ValueError):
    """A damaged ``meta.properties``: the broker refuses to start (one clear line)."""


def _write(path: Path, lines: Sequence[str]) -> None:
    body = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    atomic_write(path, body.encode())


def _read(path: Path, fields: int) -> list[list[str]]:
    if not path.exists():
        return []
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not text ({exc.reason} at byte {exc.start})") from exc
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
    entries = _read(path, 3)
    try:
        return {(t, int(p)): int(o) for t, p, o in entries}
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc


def write_epochs(path: Path, epochs: Sequence[tuple[int, int]]) -> None:
    _write(path, [f"{e} {o}" for e, o in epochs])


def read_epochs(path: Path) -> list[tuple[int, int]]:
    entries = _read(path, 2)
    try:
        return [(int(e), int(o)) for e, o in entries]
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc


def read_meta_properties(path: Path) -> dict[str, str]:
    """The properties of ``meta.properties`` (empty if absent); raises
    :class:`MetaPropertiesError` naming the file and the damage."""
    if not path.exists():
        return {}

    def damaged(why: str) -> MetaPropertiesError:
        return MetaPropertiesError(
            f"{path} is damaged ({why}); it identifies this broker and its cluster, so the "
            f"broker will not start: restore it, or remove it to start this log dir afresh"
        )

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise damaged(f"not text: {exc.reason} at byte {exc.start}") from exc
    props: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise damaged(f"line {n} is not key=value")
        props[key.strip()] = value.strip()
    for key in ("version", "broker.id"):
        if key in props and not props[key].lstrip("-").isdigit():
            raise damaged(f"{key}={props[key]!r} is not a number")
    if "version" not in props:
        raise damaged("no version")
    return props
