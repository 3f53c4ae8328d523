"""A topic's compression.type recompresses batches on append; preallocate is refused;
segment.jitter.ms is a per-segment random amount."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from odradek.records.batch import BatchHeader, iter_records
from odradek.records.builder import build_batch
from odradek.records.compression import CompressionType
from odradek.storage.config import ConfigError, LogConfig
from odradek.storage.log import PartitionLog

RECORDS = [(f"k{i}".encode(), f"value-{i}".encode() * 20) for i in range(50)]


def _log(tmp_path: Path, **overrides: str) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", LogConfig.build({}, overrides))


@pytest.mark.parametrize(
    ("topic_codec", "sent", "stored"),
    [
        ("gzip", CompressionType.NONE, CompressionType.GZIP),
        ("uncompressed", CompressionType.LZ4, CompressionType.NONE),
        ("zstd", CompressionType.SNAPPY, CompressionType.ZSTD),
        ("producer", CompressionType.LZ4, CompressionType.LZ4),
        ("lz4", CompressionType.LZ4, CompressionType.LZ4),
    ],
)
def test_compression_type_is_applied(
    tmp_path: Path, topic_codec: str, sent: CompressionType, stored: CompressionType
) -> None:
    log = _log(tmp_path, **{"compression.type": topic_codec})
    now = int(time.time() * 1000)
    batch = build_batch(RECORDS, timestamp=now, compression=sent)
    info = log.append_as_leader(batch)
    assert (info.first_offset, info.last_offset) == (0, len(RECORDS) - 1)
    data = log.read(0, 1 << 20).read()
    header = BatchHeader.parse(data)
    assert header.compression == stored
    assert [(r.key, r.value) for r in iter_records(data)] == RECORDS
    assert log.log_end_offset == len(RECORDS)


def test_preallocate_is_refused() -> None:
    with pytest.raises(ConfigError, match="preallocate"):
        LogConfig.build({}, {"preallocate": "true"})
    assert LogConfig.build({}, {"preallocate": "false"})["preallocate"] is False


def test_segment_jitter_is_random_per_segment(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"segment.jitter.ms": "100000", "segment.bytes": "200"})
    now = int(time.time() * 1000)
    for i in range(30):
        log.append_as_leader(build_batch([(b"k", b"v" * 100)], timestamp=now + i))
    jitters = {s.roll_jitter_ms for s in log.segments}
    assert len(log.segments) > 5
    assert all(0 <= j <= 100000 for j in jitters)
    assert len(jitters) > 1
