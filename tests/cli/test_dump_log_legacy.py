"""``odradek dump-log`` on segments holding message formats v0/v1, as an old Kafka left
them: the segment files are written by an independent writer (kafka-python's legacy
record builder), a magic-0 set, a magic-1 set and a gzip-compressed magic-1 wrapper."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from odradek.cli import dump_log
from odradek.records.builder import BatchBuilder

T0 = 1_600_000_000_000


def _set(magic: int, codec: int, first: int, values: list[bytes], key: bytes | None = None,
         ) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, value in enumerate(values):
        # a broker-written v1 wrapper: relative inner offsets, the wrapper at the last one
        offset = i if (codec and magic == 1) else first + i
        builder.append(offset, T0 + first + i, key, value)
    data = bytearray(builder.build())
    if codec and magic == 1:
        data[0:8] = (first + len(values) - 1).to_bytes(8, "big")
    return bytes(data)


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "old-0" / f"{0:020d}.log"
    path.parent.mkdir()
    v2 = BatchBuilder(base_offset=7)
    v2.append(b"k", b"after the upgrade", T0 + 7)
    path.write_bytes(
        _set(0, 0, 0, [b"zero", b"one"])
        + _set(1, 0, 2, [b'{"name": "Travis"}'], key=b"user")
        + _set(1, 1, 3, [b"a", b"b", b"c", b"d"])
        + v2.build()  # a v2 batch after the old messages, as after an upgrade
    )
    return path


def _run(*argv: str) -> tuple[int, list[str]]:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="command", required=True)
    dump_log.add_parser(subparsers)
    args = parser.parse_args(["dump-log", *argv])
    out = io.StringIO()
    code = args.func(args, out)
    return code, out.getvalue().splitlines()


def _crc(data: bytes, position: int) -> int:
    return int.from_bytes(data[position + 12 : position + 16], "big")


def test_shallow(segment: Path) -> None:
    code, lines = _run("--files", str(segment))
    assert code == 0, lines
    data = segment.read_bytes()
    assert lines[1] == "Log starting offset: 0"
    assert lines[2] == (f"offset: 0 position: 0 isvalid: true payloadsize: 4 magic: 0 "
                        f"compresscodec: NoCompressionCodec crc: {_crc(data, 0)}")
    assert lines[3].startswith("offset: 1 position: 30 isvalid: true payloadsize: 3 magic: 0")
    assert lines[4].startswith("offset: 2 position: 59 isvalid: true payloadsize: 18 magic: 1 "
                               "compresscodec: NoCompressionCodec crc: ")
    assert lines[4].endswith(" keysize: 4")
    assert "offset: 6 " in lines[5] and "compresscodec: GZIPCompressionCodec" in lines[5]
    assert lines[6].startswith("baseOffset: 7 lastOffset: 7 count: 1 ")
    assert len(lines) == 7


def test_deep_iteration_and_payloads(segment: Path) -> None:
    code, lines = _run("--files", str(segment), "--deep-iteration", "--print-data-log")
    assert code == 0, lines
    assert lines[4].endswith(' keysize: 4 key: user payload: {"name": "Travis"}')
    inner = [line for line in lines if "compresscodec: NoCompressionCodec" in line][3:]
    assert [line.split(" position:")[0] for line in inner] == [
        "offset: 3", "offset: 4", "offset: 5", "offset: 6"]
    assert all(line.endswith(f"payload: {v}") for line, v in zip(inner, "abcd", strict=True))
    assert any("payload: after the upgrade" in line for line in lines)


def test_bad_crc_is_reported(segment: Path) -> None:
    data = bytearray(segment.read_bytes())
    data[28] ^= 0xFF  # in the first message's value (bytes 26-29)
    segment.write_bytes(bytes(data))
    code, lines = _run("--files", str(segment))
    assert code == 1
    assert "position: 0 magic: 0 isvalid: false" in lines
