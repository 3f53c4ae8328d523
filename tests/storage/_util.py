"""Shared helpers for the storage tests: configs, batches, and a whole-log reader."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from odradek.records.batch import BatchHeader, iter_records, validate_batch
from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType
from odradek.storage.config import LogConfig
from odradek.storage.log import PartitionLog

NOW = 1_700_000_000_000


def config(**overrides: object) -> LogConfig:
    """A LogConfig from topic keys written with underscores (segment_bytes=...)."""
    return LogConfig.build({}, {k.replace("_", "."): v for k, v in overrides.items()})


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_batch(
    count: int = 1,
    timestamp: int = NOW,
    value_size: int = 10,
    compression: CompressionType = CompressionType.NONE,
    ts_step: int = 0,
    seed: int = 0,
) -> bytes:
    builder = BatchBuilder(compression=compression)
    for i in range(count):
        value = (f"{seed}-{i}-".encode() * (value_size // 4 + 1))[:value_size]
        builder.append(f"k{i}".encode(), value, timestamp + i * ts_step, [("h", b"v")])
    return builder.build()


def open_log(
    root: Path, cfg: LogConfig | None = None, clock: Callable[[], int] | None = None,
    name: str = "topic-0", **kwargs: object,
) -> PartitionLog:
    return PartitionLog(
        root / name, cfg or config(), time_ms=clock or Clock(), **kwargs  # type: ignore[arg-type]
    )


def segment_batches(plog: PartitionLog) -> list[bytes]:
    """Every batch in every segment file, read straight from disk and validated."""
    out: list[bytes] = []
    for segment in plog.segments:
        data = segment.read_bytes(0, segment.size)
        assert len(data) == segment.size
        pos = 0
        while pos < len(data):
            header = validate_batch(data, pos, strict_offsets=False)
            out.append(data[pos : pos + header.size])
            pos += header.size
    return out


def read_all(plog: PartitionLog) -> list[bytes]:
    """Every batch from log start to log end through PartitionLog.read, validated, with
    contiguous offsets checked."""
    out: list[bytes] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        data = info.read()
        assert data, f"no data at {offset} (end {plog.log_end_offset})"
        pos = 0
        while pos < len(data):
            header = validate_batch(data, pos, strict_offsets=False)
            if out:
                assert header.base_offset == offset, (header.base_offset, offset)
            out.append(data[pos : pos + header.size])
            offset = header.next_offset
            pos += header.size
    return out


def header(batch: bytes) -> BatchHeader:
    return BatchHeader.parse(batch)


def payload_digest(batch: bytes) -> str:
    """Digest of a batch without its base offset and leader epoch (bytes 16..)."""
    return hashlib.sha256(batch[16:]).hexdigest()


def records_of(batch: bytes) -> list[tuple[int, int]]:
    return [(r.offset, r.timestamp) for r in iter_records(batch)]


def file_size(path: Path) -> int:
    return os.stat(path).st_size
