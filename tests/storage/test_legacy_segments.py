"""A log dir whose older segments hold message formats v0/v1, as an old Kafka left it:
opened, recovered (CRC32 of every old message), indexed, read and up-converted for
fetchers, searched by timestamp, appended to in v2, and compacted into v2. The old
segments are written by an independent writer, kafka-python's legacy record builder."""

from __future__ import annotations

from pathlib import Path

from kafka.record.legacy_records import LegacyRecordBatchBuilder

from odradek.records.batch import iter_batches, iter_records
from odradek.records.builder import BatchBuilder
from odradek.records.legacy import up_convert
from odradek.storage import files
from odradek.storage.manager import LogManager, TopicPartition

from ._util import NOW, Clock, segment_batches
from .test_cleaner import compact_config, records

T0 = 1_600_000_000_000


def _entries(magic: int, codec: int, first: int, items: list[tuple[bytes | None, bytes]],
             ) -> bytes:
    """Entries as an old broker stored them: absolute offsets; a v1 wrapper with relative
    inner offsets and the last absolute offset as its own."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, (key, value) in enumerate(items):
        offset = i if (codec and magic == 1) else first + i
        builder.append(offset, T0 + first + i, key, value)
    data = bytearray(builder.build())
    if codec and magic == 1:
        data[0:8] = (first + len(items) - 1).to_bytes(8, "big")
    return bytes(data)


def _old_log(root: Path, topic: str = "t") -> Path:
    directory = root / "data" / f"{topic}-0"
    directory.mkdir(parents=True)
    (directory / files.log_file(directory, 0).name).write_bytes(
        _entries(0, 0, 0, [(b"a", b"v0-a"), (b"b", b"v0-b")])
        + _entries(1, 0, 2, [(b"c", b"v1-c")])
        + _entries(1, 1, 3, [(b"a", b"w-a"), (b"d", b"w-d"), (b"b", b"w-b"), (None, b"w-x")])
        + _entries(1, 2, 7, [(b"c", b"s-c"), (b"e", b"s-e")])
    )
    return directory


def _fetched(plog: object, offset: int) -> list[tuple[int, bytes | None, bytes | None]]:
    info = plog.read(offset, 1 << 20)  # type: ignore[attr-defined]
    assert info.legacy
    data = up_convert(info.read(), offset)
    return [(r.offset, r.key, r.value) for h in iter_batches(data)
            for r in iter_records(data[h.position : h.position + h.size])]


EXPECTED = [(0, b"a", b"v0-a"), (1, b"b", b"v0-b"), (2, b"c", b"v1-c"), (3, b"a", b"w-a"),
            (4, b"d", b"w-d"), (5, b"b", b"w-b"), (6, None, b"w-x"), (7, b"c", b"s-c"),
            (8, b"e", b"s-e")]


def test_opened_recovered_read_and_appended(tmp_path: Path) -> None:
    directory = _old_log(tmp_path)
    manager = LogManager([tmp_path / "data"], time_ms=Clock())
    manager.startup()  # no clean-shutdown marker: the old segment is recovered
    try:
        plog = manager.get_or_create_log(TopicPartition("t", 0), compact_config())
        assert plog.log_end_offset == 9
        assert files.index_file(directory, 0).exists()  # rebuilt over the old entries
        assert files.time_index_file(directory, 0).exists()
        assert _fetched(plog, 0) == EXPECTED
        assert _fetched(plog, 4)[0][0] == 3  # the wrapper holding 4, from its first message
        found = plog.fetch_offset_by_timestamp(T0 + 2)
        assert found is not None and (found.offset, found.timestamp) == (2, T0 + 2)
        builder = BatchBuilder()
        builder.append(b"f", b"v2-f", NOW)
        assert plog.append_as_leader(builder.build()).first_offset == 9
        assert _fetched(plog, 0)[-1] == (9, b"f", b"v2-f")  # v2 batches pass as they are
    finally:
        manager.shutdown()
    assert (directory / files.log_file(directory, 0).name).exists()


def test_a_corrupt_old_message_is_truncated_on_recovery(tmp_path: Path) -> None:
    directory = _old_log(tmp_path)
    path = directory / files.log_file(directory, 0).name
    data = bytearray(path.read_bytes())
    first = 12 + int.from_bytes(data[8:12], "big")
    second = first + 12 + int.from_bytes(data[first + 8 : first + 12], "big")
    data[second + 30] ^= 0xFF  # inside the v1 message at offset 2
    path.write_bytes(bytes(data))
    manager = LogManager([tmp_path / "data"], time_ms=Clock())
    manager.startup()
    try:
        plog = manager.get_or_create_log(TopicPartition("t", 0), compact_config())
        assert plog.log_end_offset == 2
        assert _fetched(plog, 0) == EXPECTED[:2]
    finally:
        manager.shutdown()


def test_compaction_rewrites_old_segments_in_v2(tmp_path: Path) -> None:
    from odradek.storage.cleaner_manager import LogCleaner
    from odradek.storage.offset_map import ENTRY_SIZE

    _old_log(tmp_path)
    clock = Clock()
    manager = LogManager([tmp_path / "data"], time_ms=clock)
    manager.startup()
    try:
        config = compact_config()
        plog = manager.get_or_create_log(TopicPartition("t", 0), config)
        plog.update_config(config)  # loaded at startup with the defaults
        builder = BatchBuilder()
        builder.append(b"a", b"v2-a", NOW)
        plog.append_as_leader(builder.build())
        plog.roll()
        cleaner = LogCleaner(manager, {"log.cleaner.dedupe.buffer.size": ENTRY_SIZE * 4096,
                                       "log.cleaner.backoff.ms": 10,
                                       "log.cleaner.io.buffer.size": 4096}, time_ms=clock)
        cleaner.clean_until_done()
        # every segment now reads as v2 (segment_batches validates v2 batches only)
        assert len(segment_batches(plog)) > 0
        got = records(plog)
        latest = {key: (offset, value) for offset, key, value in
                  [*EXPECTED, (9, b"a", b"v2-a")] if key is not None}
        assert sorted((o, k, v) for o, k, v in got if k is not None) == sorted(
            (o, k, v) for k, (o, v) in latest.items())
    finally:
        manager.shutdown()
