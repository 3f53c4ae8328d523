"""Crash recovery: SIGKILL loops, rebuilt indexes, torn tails, garbage and corruption."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.records.batch import BatchHeader, iter_records
from odradek.storage import files
from odradek.storage.manager import LogManager, TopicPartition
from tests._deadlines import describe, expired

from ._util import NOW, config, make_batch, open_log, payload_digest, read_all, segment_batches

CHILD = Path(__file__).with_name("_crash_child.py")
CHILD_CONFIG = config(segment_bytes=2048, index_interval_bytes=128, segment_index_bytes=64)
TP = TopicPartition("crash", 0)


def _run_child(log_dir: Path, seed: int, out_path: Path, rng: random.Random) -> list[str]:
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(log_dir), str(seed)], stdout=out,
            stderr=subprocess.PIPE,
        )
    try:
        started = time.monotonic()
        while b"ready\n" not in out_path.read_bytes():
            if proc.poll() is not None:
                raise AssertionError(f"child died: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
            assert not expired(started, 20), (
                f"child never became ready in {describe(started, 20)}")
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.12))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    text = out_path.read_bytes().decode()
    lines = text.split("\n")[:-1]  # a line without its newline was never acknowledged
    assert lines[0] == "ready"
    return lines[1:]


@pytest.mark.slow
def test_sigkill_loop_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    rng = random.Random(1234)
    acked: dict[int, tuple[int, str]] = {}
    unclean_restarts = 0
    for cycle in range(24):
        for line in _run_child(log_dir, cycle, tmp_path / f"out-{cycle}.txt", rng):
            first, last, digest = line.split()
            assert int(first) not in acked
            acked[int(first)] = (int(last), digest)
        assert not (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
        manager = LogManager([log_dir])
        manager.startup(lambda _topic: CHILD_CONFIG)
        unclean_restarts += not manager.had_clean_shutdown[log_dir]
        plog = manager.get_log(TP)
        assert plog is not None
        batches = read_all(plog)  # validates each batch and that offsets are contiguous
        assert batches == segment_batches(plog)  # nothing beyond what read() shows
        assert not batches or BatchHeader.parse(batches[0]).base_offset == 0
        stored = {BatchHeader.parse(b).base_offset: b for b in batches}
        for first, (last, digest) in acked.items():
            assert first in stored, f"cycle {cycle}: acknowledged batch at {first} lost"
            batch = stored[first]
            assert BatchHeader.parse(batch).last_offset == last
            assert payload_digest(batch) == digest
        # Anything beyond the acknowledged batches (written, killed before the print) is
        # whole; the log end follows the last stored batch.
        if batches:
            assert plog.log_end_offset == BatchHeader.parse(batches[-1]).next_offset
        segments = len(plog.segments)
        manager.shutdown()
    assert unclean_restarts == 24
    assert len(acked) > 50
    assert segments > 3  # rolls happened during the loop


# -- 4. corrupt or missing indexes ----------------------------------------------------------
CORRUPTIONS = ["delete", "odd_length", "garbage", "zero_fill"]


def _corrupt(path: Path, how: str) -> None:
    if how == "delete":
        path.unlink()
        return
    size = path.stat().st_size
    assert size >= 24
    if how == "odd_length":
        os.truncate(path, size - 3)
    elif how == "garbage":
        path.write_bytes(random.Random(size).randbytes(size))
    elif how == "zero_fill":
        path.write_bytes(b"\x00" * size)


def _build_log(root: Path):
    cfg = config(segment_bytes=700, index_interval_bytes=60)
    plog = open_log(root, cfg)
    for i in range(40):
        plog.append_as_leader(make_batch(1 + i % 3, NOW + i * 10, 30, seed=i, ts_step=1))
    plog.close()
    return cfg


@pytest.mark.parametrize("how", CORRUPTIONS)
@pytest.mark.parametrize("which", [files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX])
@pytest.mark.parametrize("segment", ["closed", "last"])
def test_corrupt_index_rebuilt_on_load(tmp_path: Path, how: str, which: str, segment: str) -> None:
    cfg = _build_log(tmp_path)
    plog = open_log(tmp_path, cfg)
    original_batches = segment_batches(plog)
    pick = plog.segments[1] if segment == "closed" else plog.segments[-1]
    base = pick.base_offset
    original_index = [pick.offset_index.entry(i) for i in range(pick.offset_index.entries)]
    original_times = [pick.time_index.entry(i) for i in range(pick.time_index.entries)]
    assert len(plog.segments) > 3 and len(original_index) >= 3 and len(original_times) >= 3
    plog.close()
    path = (files.index_file if which == files.INDEX_SUFFIX else files.time_index_file)(
        tmp_path / "topic-0", base
    )
    _corrupt(path, how)
    again = open_log(tmp_path, cfg)  # a clean load: the sanity check catches it
    seg = next(s for s in again.segments if s.base_offset == base)
    seg.sanity_check()
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == original_index
    assert [seg.time_index.entry(i) for i in range(seg.time_index.entries)] == original_times
    assert segment_batches(again) == original_batches
    records = [(r.offset, r.timestamp) for b in original_batches for r in iter_records(b)]
    for off, _ts in records:
        got = BatchHeader.parse(again.read(off, 1).read())
        assert got.base_offset <= off <= got.last_offset
    for t in range(NOW - 5, NOW + 420, 7):
        want = next(((ts, off) for off, ts in records if ts >= t), None)
        got = again.fetch_offset_by_timestamp(t)
        assert (tuple(got) if got else None) == want
    again.append_as_leader(make_batch(2, NOW + 500))
    again.close()
    # The rebuilt files are whole again on disk.
    final = open_log(tmp_path, cfg)
    for s in final.segments:
        s.sanity_check()
    final.close()


# -- 4. torn tail, garbage, corruption (unclean restart via LogManager) -----------------------
def _manager_with_data(log_dir: Path, n: int = 30) -> tuple[list[bytes], int]:
    manager = LogManager([log_dir])
    manager.startup()
    plog = manager.get_or_create_log(TP, config(segment_bytes=900, index_interval_bytes=80))
    for i in range(n):
        now = int(time.time() * 1000)
        plog.append_as_leader(make_batch(2, seed=i, value_size=40, timestamp=now))
    batches = read_all(plog)
    active_base = plog.active_segment.base_offset
    manager.shutdown()
    assert (log_dir / files.CLEAN_SHUTDOWN_FILE).exists()
    return batches, active_base


def _restart(log_dir: Path, clean: bool) -> tuple[LogManager, object]:
    if not clean:
        (log_dir / files.CLEAN_SHUTDOWN_FILE).unlink()
    manager = LogManager([log_dir])
    manager.startup(lambda _t: config(segment_bytes=900, index_interval_bytes=80))
    assert manager.had_clean_shutdown[log_dir] == clean
    return manager, manager.get_log(TP)


def test_torn_tail_truncated_after_unclean_restart(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    batches, active_base = _manager_with_data(log_dir)
    active_log = files.log_file(log_dir / "crash-0", active_base)
    size = active_log.stat().st_size
    os.truncate(active_log, size - 7)
    manager, plog = _restart(log_dir, clean=False)
    assert read_all(plog) == batches[:-1]
    assert active_log.stat().st_size == size - len(batches[-1])
    assert plog.log_end_offset == BatchHeader.parse(batches[-2]).next_offset
    assert plog.append_as_leader(make_batch(1, int(time.time() * 1000))).first_offset == (
        plog.log_end_offset - 1
    )
    manager.shutdown()


def test_garbage_after_last_batch_removed(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    batches, active_base = _manager_with_data(log_dir)
    active_log = files.log_file(log_dir / "crash-0", active_base)
    size = active_log.stat().st_size
    with open(active_log, "ab") as f:
        f.write(random.Random(5).randbytes(150))
    manager, plog = _restart(log_dir, clean=False)
    assert read_all(plog) == batches
    assert active_log.stat().st_size == size
    manager.shutdown()


def test_corrupt_byte_in_active_segment_truncates_from_that_batch(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    batches, active_base = _manager_with_data(log_dir)
    in_active = [b for b in batches if BatchHeader.parse(b).base_offset >= active_base]
    assert len(in_active) >= 3
    victim = len(in_active) // 2
    position = sum(len(b) for b in in_active[:victim]) + 70  # inside the records
    active_log = files.log_file(log_dir / "crash-0", active_base)
    with open(active_log, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x5A]))
    manager, plog = _restart(log_dir, clean=False)
    kept = len(batches) - len(in_active) + victim
    assert read_all(plog) == batches[:kept]
    assert plog.log_end_offset == BatchHeader.parse(in_active[victim]).base_offset
    manager.shutdown()


def test_corrupt_closed_segment_drops_later_segments(tmp_path: Path) -> None:
    cfg = config(segment_bytes=500, index_interval_bytes=60)
    plog = open_log(tmp_path, cfg)
    for i in range(30):
        plog.append_as_leader(make_batch(2, NOW + i, 40, seed=i))
    batches = read_all(plog)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 4
    victim_segment = plog.segments[2]
    plog.close()
    in_segment = [b for b in batches if bases[2] <= BatchHeader.parse(b).base_offset < bases[3]]
    position = len(in_segment[0]) + 65  # inside the second batch of segment 2
    with open(victim_segment.log_path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = open_log(tmp_path, cfg, had_clean_shutdown=False, recovery_point=0)
    victim_base = BatchHeader.parse(in_segment[1]).base_offset
    assert again.log_end_offset == victim_base
    assert read_all(again) == [b for b in batches if BatchHeader.parse(b).base_offset < victim_base]
    assert [s.base_offset for s in again.segments] == bases[:3]
    assert sorted(p.name for p in again.dir.glob("*.log")) == [
        s.log_path.name for s in again.segments
    ]
    assert again.append_as_leader(make_batch(1, NOW)).first_offset == victim_base
    again.close()
