"""``odradek dump-log``: output lines in Kafka's format, checks, exit codes."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.cli import dump_log
from odradek.records.batch import BatchHeader
from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType
from odradek.storage import LogConfig, PartitionLog

T0 = 1_700_000_000_000
APPEND_TIME = 1_700_000_999_000


def _write_log(dir: Path, topic: str, log_append_time: bool = False) -> list[bytes]:
    """Five batches of three records, one per codec, with headers; returns the batches."""
    overrides: dict[str, object] = {"index.interval.bytes": 100}
    if log_append_time:
        overrides["message.timestamp.type"] = "LogAppendTime"
    log = PartitionLog(dir / f"{topic}-0", LogConfig.build({}, overrides),
                       time_ms=lambda: APPEND_TIME)
    batches = []
    for i, codec in enumerate(CompressionType):
        builder = BatchBuilder(
            compression=codec, producer_id=7, producer_epoch=0, base_sequence=3 * i
        )
        for j in range(3):
            builder.append(f"k{j}".encode(), f"hello{i}{j}".encode(), T0 + 10 * i + j,
                           headers=[("a", b"1"), ("b", None)])
        batch = builder.build()
        batches.append(batch)
        log.append_as_leader(batch, leader_epoch=2)
    log.close()
    return batches


def _segment(dir: Path, topic: str, suffix: str) -> Path:
    return dir / f"{topic}-0" / f"{0:020d}{suffix}"


def _run(*argv: str) -> tuple[int, list[str]]:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="command", required=True)
    dump_log.add_parser(subparsers)
    args = parser.parse_args(["dump-log", *argv])
    out = io.StringIO()
    code = args.func(args, out)
    return code, out.getvalue().splitlines()


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    _write_log(tmp_path, "t")
    return tmp_path


def test_log_batch_lines(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    code, lines = _run("--files", str(path))
    assert code == 0
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == "Log starting offset: 0"
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batch_lines) == 5
    first = batch_lines[0]
    assert first.startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: 0 lastSequence: 2 producerId: 7 "
        "producerEpoch: 0 partitionLeaderEpoch: 2 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000002 size: "
    )
    assert first.endswith("magic: 2 compresscodec: none crc: " + first.split("crc: ")[1])
    assert first.endswith("isvalid: true")
    codecs = [line.split("compresscodec: ")[1].split()[0] for line in batch_lines]
    assert codecs == ["none", "gzip", "snappy", "lz4", "zstd"]
    # Positions chain: each batch starts where the previous one ended.
    position = 0
    for line in batch_lines:
        fields = line.split()
        assert int(fields[fields.index("position:") + 1]) == position
        position += int(fields[fields.index("size:") + 1])
    assert position == path.stat().st_size
    assert not any(line.startswith("|") for line in lines)


def test_log_crc_matches_header(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    header = BatchHeader.parse(path.read_bytes())
    _code, lines = _run("--files", str(path))
    assert f"crc: {header.crc} isvalid: true" in lines[2]


def test_deep_iteration_and_data(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    code, lines = _run("--files", str(path), "--deep-iteration")
    assert code == 0
    records = [line for line in lines if line.startswith("| ")]
    assert len(records) == 15
    assert records[0] == (
        "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 7 sequence: 0 "
        "headerKeys: [a,b]"
    )
    assert records[14].startswith("| offset: 14 CreateTime: 1700000000042 ")
    code, lines = _run("--files", str(path), "--print-data-log")
    assert code == 0
    records = [line for line in lines if line.startswith("| ")]
    assert records[4] == (
        "| offset: 4 CreateTime: 1700000000011 keySize: 2 valueSize: 7 sequence: 4 "
        "headerKeys: [a,b] key: k1 payload: hello11"
    )


def test_log_append_time(tmp_path: Path) -> None:
    _write_log(tmp_path, "lat", log_append_time=True)
    code, lines = _run("--files", str(_segment(tmp_path, "lat", ".log")), "--deep-iteration")
    assert code == 0
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert all(f"LogAppendTime: {APPEND_TIME} " in line for line in batch_lines)
    assert all("isvalid: true" in line for line in batch_lines)
    records = [line for line in lines if line.startswith("| ")]
    assert records[0].startswith(f"| offset: 0 LogAppendTime: {APPEND_TIME} keySize: 2")
    code, lines = _run("--files", str(_segment(tmp_path, "lat", ".timeindex")))
    assert code == 0
    stamps = [line.split()[1] for line in lines if line.startswith("timestamp")]
    assert stamps and all(stamp == str(APPEND_TIME) for stamp in stamps)


def test_index_and_time_index(logdir: Path) -> None:
    index = _segment(logdir, "t", ".index")
    code, lines = _run("--files", str(index))
    assert code == 0
    entries = [line for line in lines if line.startswith("offset:")]
    # index.interval.bytes=100: every batch after the first is indexed by its last offset.
    assert [e.split()[1] for e in entries] == ["5", "8", "11", "14"]
    _code, log_lines = _run("--files", str(_segment(logdir, "t", ".log")))
    positions = [line.split("position: ")[1].split()[0] for line in log_lines
                 if line.startswith("baseOffset:")]
    assert [e.split()[3] for e in entries] == positions[1:]

    code, lines = _run("--files", str(_segment(logdir, "t", ".timeindex")))
    assert code == 0
    assert [line for line in lines if line.startswith("timestamp:")] == [
        "timestamp: 1700000000012 offset: 5",
        "timestamp: 1700000000022 offset: 8",
        "timestamp: 1700000000032 offset: 11",
        "timestamp: 1700000000042 offset: 14",
    ]
    code, lines = _run("--files", str(index), str(_segment(logdir, "t", ".timeindex")),
                       "--index-sanity-check")
    assert code == 0
    assert f"{index} passed sanity check." in lines
    assert not any(line.startswith("offset:") for line in lines)


def test_corrupt_byte_marks_batch_invalid(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    data = bytearray(path.read_bytes())
    second = BatchHeader.parse(data).size
    data[second + 70] ^= 0xFF  # inside the second batch's records
    path.write_bytes(data)
    code, lines = _run("--files", str(path), "--deep-iteration")
    assert code == 1
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert [line.endswith("isvalid: true") for line in batch_lines] == [
        True, False, True, True, True
    ]
    assert any("Invalid batch at position" in line and "CRC32C" in line for line in lines)


def test_torn_tail(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 10)
    code, lines = _run("--files", str(path))
    assert code == 1
    assert len([line for line in lines if line.startswith("baseOffset:")]) == 4
    assert any(line.startswith("Found ") and "invalid bytes at the end of" in line
               for line in lines)


def test_garbage_length_does_not_crash(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    with open(path, "ab") as f:
        f.write(b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"junk")
    code, lines = _run("--files", str(path))
    assert code == 1
    assert "Found 16 invalid bytes at the end of 00000000000000000000.log" in lines


def test_max_bytes_limits_read(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    first = BatchHeader.parse(path.read_bytes()).size
    code, lines = _run("--files", str(path), "--max-bytes", str(first + 5))
    assert code == 0
    assert len([line for line in lines if line.startswith("baseOffset:")]) == 1


def test_corrupt_index_fails_sanity_check(logdir: Path) -> None:
    index = _segment(logdir, "t", ".index")
    data = bytearray(index.read_bytes())
    data[8 + 7] ^= 0x01  # position of the second entry: no batch starts there
    index.write_bytes(data)
    code, lines = _run("--files", str(index), "--index-sanity-check")
    assert code == 1
    assert f"{index} failed sanity check." in lines
    assert any("Index position" in line and "mismatch" in line for line in lines)

    code, lines = _run("--files", str(index), "--verify-index-only")
    assert code == 1
    assert not any(line.startswith("offset:") for line in lines)


def test_index_offset_mismatch(logdir: Path) -> None:
    index = _segment(logdir, "t", ".index")
    data = bytearray(index.read_bytes())
    data[3] += 1  # first entry: relative offset 5 -> 6, the batch at its position ends at 5
    index.write_bytes(data)
    code, lines = _run("--files", str(index))
    assert code == 1
    assert any("index offset 6, log last offset 5" in line for line in lines)


def test_corrupt_time_index(logdir: Path) -> None:
    timeindex = _segment(logdir, "t", ".timeindex")
    data = bytearray(timeindex.read_bytes())
    data[12 + 7] ^= 0x01  # second entry's timestamp
    timeindex.write_bytes(data)
    code, lines = _run("--files", str(timeindex), "--index-sanity-check")
    assert code == 1
    assert any("timestamp mismatch" in line for line in lines)


def test_active_preallocated_index(tmp_path: Path) -> None:
    """An open log's index is preallocated with zeros: the dump stops at them."""
    log = PartitionLog(tmp_path / "t-0", LogConfig.build({}, {"index.interval.bytes": 100}))
    for i in range(3):
        builder = BatchBuilder()
        builder.append(b"k", b"v" * 150, T0 + i)
        log.append_as_leader(builder.build())
    index = tmp_path / "t-0" / f"{0:020d}.index"
    assert index.stat().st_size > 100
    code, lines = _run("--files", str(index), str(tmp_path / "t-0" / f"{0:020d}.timeindex"))
    log.close()
    assert code == 0
    assert [line.split()[1] for line in lines if line.startswith("offset:")] == ["1", "2"]
    assert [line.split()[3] for line in lines if line.startswith("timestamp:")] == ["1", "2"]


def test_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        dump_log.main([])
    assert exc.value.code == 2
    assert dump_log.main(["--files", str(tmp_path / "missing.log")]) == 2


def test_subprocess_entry_point(logdir: Path) -> None:
    path = _segment(logdir, "t", ".log")
    env = dict(os.environ)
    result = subprocess.run(
        [sys.executable, "-m", "odradek.cli.dump_log", "--files", str(path),
         str(_segment(logdir, "t", ".index")), "--print-data-log"],
        capture_output=True, text=True, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "payload: hello42" in result.stdout
    help_text = subprocess.run(
        [sys.executable, "-m", "odradek.cli.dump_log", "--help"],
        capture_output=True, text=True, check=False,
    ).stdout
    assert "1 when any corruption" in " ".join(help_text.split())


def test_transactions_markers_and_txn_index(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "tx-0", LogConfig.build({}, {}), time_ms=lambda: T0)
    builder = BatchBuilder(producer_id=42, producer_epoch=3, base_sequence=0,
                           is_transactional=True)
    builder.append(b"k", b"v", T0)
    log.append_as_leader(builder.build())
    log.append_control_as_leader(42, 3, False, 9)
    log.close()
    code, lines = _run("--files", str(_segment(tmp_path, "tx", ".log")), "--deep-iteration")
    assert code == 0
    assert "producerId: 42 producerEpoch: 3" in lines[2] and "isTransactional: true" in lines[2]
    assert "isControl: true" in lines[4] and "producerId: 42" in lines[4]
    assert lines[5].endswith("endTxnMarker: ABORT coordinatorEpoch: 9")
    txn_index = _segment(tmp_path, "tx", ".txnindex")
    code, lines = _run("--files", str(txn_index))
    assert code == 0
    assert lines[1:] == [
        "version: 0 producerId: 42 firstOffset: 0 lastOffset: 1 lastStableOffset: 2"]
    txn_index.write_bytes(txn_index.read_bytes()[:-1])
    code, lines = _run("--files", str(txn_index))
    assert code == 1 and "34-byte entries" in lines[-1]
