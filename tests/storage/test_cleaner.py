"""Log compaction: model-based property test, map-full passes, codecs and producer fields,
tombstones, min lag, crash at every step of the swap, loud failures, thread restarts."""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.batch import CRC_OFFSET, BatchHeader, iter_records
from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType
from odradek.storage import files
from odradek.storage.cleaner_manager import STATUS_FILE, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.log import PartitionLog
from odradek.storage.manager import LogManager, TopicPartition
from odradek.storage.offset_map import ENTRY_SIZE
from tests._deadlines import expired

from ._util import NOW, Clock, segment_batches

RETENTION = 1000


def compact_config(**more: Any) -> LogConfig:
    values: dict[str, Any] = {
        "cleanup.policy": "compact", "segment.bytes": 600, "index.interval.bytes": 64,
        "min.cleanable.dirty.ratio": 0.0, "delete.retention.ms": RETENTION,
        "file.delete.delay.ms": 0,
    }
    values.update({k.replace("_", "."): v for k, v in more.items()})
    return LogConfig.build({}, values)


class Setup:
    def __init__(self, root: Path, map_entries: int = 4096, **cfg: Any) -> None:
        self.clock = Clock()
        self.manager = LogManager([root / "data"], time_ms=self.clock)
        self.manager.startup()
        self.config = compact_config(**cfg)
        self.cleaner = LogCleaner(
            self.manager,
            {"log.cleaner.dedupe.buffer.size": ENTRY_SIZE * map_entries,
             "log.cleaner.backoff.ms": 10, "log.cleaner.io.buffer.size": 4096},
            time_ms=self.clock,
        )

    def log(self, topic: str = "t", partition: int = 0) -> PartitionLog:
        return self.manager.get_or_create_log(TopicPartition(topic, partition), self.config)


def append(plog: PartitionLog, records: list[tuple[bytes | None, bytes | None]],
           codec: CompressionType = CompressionType.NONE, ts: int = NOW, **fields: Any) -> int:
    builder = BatchBuilder(compression=codec, **fields)
    for key, value in records:
        builder.append(key, value, ts)
    return plog.append_as_leader(builder.build()).first_offset


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for batch in segment_batches(plog):
        out.extend((r.offset, r.key, r.value) for r in iter_records(batch))
    return out


# -- 1. model-based property test ----------------------------------------------------------
OP = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 12), st.booleans(), st.integers(1, 4),
              st.sampled_from([CompressionType.NONE, CompressionType.GZIP,
                               CompressionType.LZ4, CompressionType.ZSTD])),
    st.tuples(st.just("clean"), st.just(0), st.just(False), st.just(0),
              st.just(CompressionType.NONE)),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=1, max_size=60), map_entries=st.sampled_from([8, 20, 4096]))
def test_model(tmp_path_factory: pytest.TempPathFactory, ops: list[Any], map_entries: int) -> None:
    s = Setup(tmp_path_factory.mktemp("model"), map_entries=map_entries)
    plog = s.log()
    model: dict[bytes, tuple[int, bytes | None]] = {}
    history: dict[int, tuple[bytes, bytes | None]] = {}
    n = 0
    for op, key, tomb, count, codec in ops:
        if op == "clean":
            plog.roll()
            s.cleaner.clean_until_done()
            check_latest(plog, model, history)
            continue
        batch = []
        for i in range(count):
            k = f"key-{(key + i) % 13}".encode()
            v = None if tomb and i == 0 else f"v{n}".encode()
            n += 1
            batch.append((k, v))
        first = append(plog, batch, codec)
        for i, (k, v) in enumerate(batch):
            model[k] = (first + i, v)
            history[first + i] = (k, v)
    plog.roll()
    s.cleaner.clean_until_done()
    got = check_latest(plog, model, history)
    # Cleaned through: one record per key, exactly the latest.
    assert sorted(got) == sorted((off, k, v) for k, (off, v) in model.items() if
                                 (off, k, v) in got or v is not None)
    live = {k for k, (_, v) in model.items() if v is not None}
    assert {k for _, k, v in got if v is not None} == live
    assert len(got) == len({k for _, k, _ in got})
    # After delete.retention.ms every tombstone is gone, live keys untouched.
    s.clock.now += RETENTION + 1
    s.cleaner.clean_until_done()
    final = check_latest(plog, model, history)
    assert all(v is not None for _, _, v in final)
    assert {k for _, k, _ in final} == live
    s.manager.shutdown()
    reopened = LogManager([s.manager.log_dirs[0]], time_ms=s.clock)
    reopened.startup(lambda _t: s.config)
    assert records(reopened.logs[TopicPartition("t", 0)]) == final
    reopened.shutdown()


def check_latest(plog: PartitionLog, model: dict[bytes, tuple[int, bytes | None]],
                 history: dict[int, tuple[bytes, bytes | None]]) -> list[Any]:
    got = records(plog)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets increase strictly"
    for offset, key, value in got:
        assert history[offset] == (key, value), "every record is the one written there"
    latest_seen: dict[bytes, int] = {}
    for offset, key, _ in got:
        assert key is not None
        latest_seen[key] = offset
    for key, (offset, value) in model.items():
        if value is not None:
            assert latest_seen.get(key) == offset, f"latest value of {key!r} lost"
        else:
            assert latest_seen.get(key, offset) == offset, f"{key!r} resurrected"
    assert plog.log_end_offset == (max(history) + 1 if history else 0)
    return got


# -- 2. behaviour details ------------------------------------------------------------------
def test_partial_passes_when_map_is_small(tmp_path: Path) -> None:
    s = Setup(tmp_path, map_entries=40, segment_bytes=4096)
    plog = s.log()
    for round_ in range(3):
        for i in range(0, 200, 4):
            append(plog, [(f"k{i + j}".encode(), f"{round_}".encode()) for j in range(4)])
    plog.roll()
    passes = s.cleaner.clean_until_done()
    assert passes > 5  # 200 keys through a 36-entry map
    got = records(plog)
    assert sorted(k for _, k, _ in got) == sorted(f"k{i}".encode() for i in range(200))
    assert all(v == b"2" for _, _, v in got)


def test_codec_and_producer_fields_kept(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    plog = s.log()
    append(plog, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], CompressionType.ZSTD,
           producer_id=7, producer_epoch=3, base_sequence=0)
    append(plog, [(b"a", b"2")], CompressionType.NONE, producer_id=7, producer_epoch=3,
           base_sequence=3)
    plog.roll()
    s.cleaner.clean_until_done()
    batches = [BatchHeader.parse(b) for b in segment_batches(plog)]
    first = batches[0]
    assert first.compression == CompressionType.ZSTD
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 3, 0)
    assert (first.base_offset, first.last_offset_delta, first.record_count) == (0, 2, 2)
    assert records(plog) == [(1, b"b", b"1"), (2, b"c", b"1"), (3, b"a", b"2")]


def test_active_segment_and_min_lag_respected(tmp_path: Path) -> None:
    s = Setup(tmp_path, min_compaction_lag_ms=5000)
    plog = s.log()
    for i in range(40):
        append(plog, [(b"same", str(i).encode())], ts=NOW)
    assert len(plog.segments) > 2
    s.cleaner.clean_until_done()
    assert len(records(plog)) == 40  # younger than min.compaction.lag.ms
    s.clock.now += 6000
    s.cleaner.clean_until_done()
    got = records(plog)
    active = plog.active_segment
    in_active = [r for r in got if r[0] >= active.base_offset]
    assert got[-1] == (39, b"same", b"39")
    assert len(got) == 1 + len(in_active) or len(got) == len(in_active)


def test_tombstone_survives_one_cleaning(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    plog = s.log()
    append(plog, [(b"a", b"1"), (b"b", b"1")])
    append(plog, [(b"a", None)])
    plog.roll()
    s.cleaner.clean_until_done()
    assert records(plog) == [(1, b"b", b"1"), (2, b"a", None)]
    tomb = [BatchHeader.parse(b) for b in segment_batches(plog)][-1]
    assert tomb.has_delete_horizon and tomb.base_timestamp == NOW + RETENTION
    s.clock.now += RETENTION - 1
    s.cleaner.clean_until_done()
    assert records(plog) == [(1, b"b", b"1"), (2, b"a", None)]
    s.clock.now += 2
    s.cleaner.clean_until_done()
    assert records(plog) == [(1, b"b", b"1")]
    assert plog.log_end_offset == 3


def test_cleaner_checkpoint_written(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    plog = s.log()
    append(plog, [(b"a", b"1")])
    append(plog, [(b"a", b"2")])
    plog.roll()
    s.cleaner.clean_until_done()
    text = (s.manager.log_dirs[0] / files.CLEANER_OFFSET_CHECKPOINT).read_text()
    assert text == "0\n1\nt 0 2\n"


# -- 3. crash at every step of the swap ----------------------------------------------------
class Crash(BaseException):  # not caught by the cleaner loop
    pass


def test_crash_during_swap_at_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    step = 0
    while True:
        root = tmp_path / f"run{step}"
        s = Setup(root)
        plog = s.log()
        for i in range(30):
            append(plog, [(f"k{i % 5}".encode(), str(i).encode())])
        plog.roll()
        before = records(plog)
        calls = 0
        real_rename = Path.rename

        def rename(self: Path, target: Any, _step: int = step, _root: Path = root,
                   real_rename: Any = real_rename) -> Any:
            nonlocal calls
            if self.is_relative_to(_root) and target.__str__().endswith(
                (".swap", ".log", ".index", ".timeindex", ".deleted")
            ):  # (Path.rename is process-wide: another test's leftover broker renames too)
                calls += 1
                if calls > _step:
                    raise Crash()
            return real_rename(self, target)

        monkeypatch.setattr(Path, "rename", rename)
        try:
            s.cleaner.clean_until_done()
            finished = True
        except Crash:
            finished = False
        finally:
            monkeypatch.setattr(Path, "rename", real_rename)
        # "Crash": reopen from disk without a clean shutdown.
        reopened = PartitionLog(plog.dir, s.config, had_clean_shutdown=False,
                                time_ms=s.clock)
        got = records(reopened)
        latest = {k: (o, v) for o, k, v in before}
        seen = {k: (o, v) for o, k, v in got}
        assert seen == latest, f"step {step}"
        assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
        assert not list(reopened.dir.glob("*.swap")) and not list(reopened.dir.glob("*.cleaned"))
        for segment in reopened.segments:
            segment.sanity_check()
        if finished and calls <= step:
            break
        step += 1
    assert step >= 5


# -- 4. failures are loud, other logs keep being cleaned ------------------------------------
def corrupt_first_batch(plog: PartitionLog) -> None:
    segment = plog.segments[0]
    data = bytearray(segment.read_bytes(0, 70))
    struct.pack_into(">I", data, CRC_OFFSET, 12345)
    import os

    os.pwrite(segment.fd, bytes(data[CRC_OFFSET:CRC_OFFSET + 4]), CRC_OFFSET)


def test_corrupt_log_reported_others_cleaned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Setup(tmp_path)
    bad, good = s.log("bad"), s.log("good")
    for plog in (bad, good):
        for i in range(20):
            append(plog, [(b"k", str(i).encode())])
        plog.roll()
    corrupt_first_batch(bad)
    s.cleaner.startup()
    try:
        started = time.monotonic()
        while not expired(started, 10):
            status = json.loads((s.manager.log_dirs[0] / STATUS_FILE).read_text())
            if "good-0" in status["last_cleaned"] and "bad-0" in status["uncleanable"]:
                break
            time.sleep(0.05)
        assert status["healthy"] is False
        assert "CRC" in status["uncleanable"]["bad-0"]["reason"]
        assert status["metrics"]["uncleanable-partitions-count"] == 1
        assert [v for _, _, v in records(good)] == [b"19"]
        assert "failed to clean bad-0" in caplog.text
        # Retried with backoff: failures keep being counted while it stays broken.
        s.clock.now += 100
        time.sleep(0.3)
        assert s.cleaner.manager.uncleanable[TopicPartition("bad", 0)].failures >= 2
    finally:
        s.cleaner.shutdown()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_thread_restarted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(tmp_path)
    plog = s.log()
    real = s.cleaner.clean_one
    died = threading.Event()

    def boom(cleaner: Any) -> bool:
        if not died.is_set():
            died.set()
            raise SystemExit("simulated thread death")
        return real(cleaner)

    s.cleaner.clean_one = boom  # type: ignore[method-assign]
    s.cleaner.startup()
    try:
        died.wait(5)
        time.sleep(0.1)
        assert s.cleaner.status()["metrics"]["DeadThreadCount"] == 1
        assert s.cleaner.check_threads() == 1
        for i in range(10):
            append(plog, [(b"k", str(i).encode())])
        plog.roll()
        started = time.monotonic()
        while len(records(plog)) > 1 and not expired(started, 5):
            time.sleep(0.05)
        assert records(plog) == [(9, b"k", b"9")]
        assert "died; restarting" in caplog.text
        assert s.cleaner.status()["thread_crashes"] == 1
    finally:
        s.cleaner.shutdown()
