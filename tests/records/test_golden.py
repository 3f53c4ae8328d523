"""Golden batches written by real clients (see golden/capture.py for how they were made).

Each ``golden/<client>-<codec>.bin`` holds the record bytes one client produced and
``<client>-<codec>.json`` the records it was asked to send.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch

from odradek.records.batch import (
    BatchHeader,
    CompressionType,
    Header,
    Record,
    TimestampType,
    iter_records,
    records_payload,
    validate_batches,
)
from odradek.records.builder import BatchBuilder
from odradek.records.compression import XERIAL_MAGIC

GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDENS = sorted(GOLDEN_DIR.glob("*.bin"))
CODEC_NAMES = {c.name.lower(): c for c in CompressionType}


def _unhex(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


def load(path: Path) -> tuple[bytes, list[Record]]:
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["encoding"] == "hex"
    records = [
        Record(
            r["offset"],
            r["timestamp"],
            _unhex(r["key"]),
            _unhex(r["value"]),
            tuple(Header(k, _unhex(v)) for k, v in r["headers"]),
            0,
        )
        for r in sidecar["records"]
    ]
    return path.read_bytes(), records


def codec_of(path: Path) -> CompressionType:
    return CODEC_NAMES[path.stem.rsplit("-", 1)[1]]


def test_golden_set_is_complete() -> None:
    names = {p.stem for p in GOLDENS}
    for codec in CODEC_NAMES:
        assert f"aiokafka-{codec}" in names
        assert f"confluent-kafka-{codec}" in names
    # kafka-python needs optional libraries for snappy/lz4/zstd, absent here.
    assert {"kafka-python-none", "kafka-python-gzip"} <= names
    for path in GOLDENS:
        assert path.with_suffix(".json").exists()


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_golden_validates_and_reads(path: Path) -> None:
    data, want = load(path)
    info = validate_batches(data)
    assert info.shallow_count == 1
    assert info.size == len(data)
    header = info.batches[0]
    assert header.size == len(data)
    assert header.magic == 2
    assert header.compression == codec_of(path)
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert not header.is_transactional and not header.is_control
    # No idempotence: no producer id, epoch or sequence.
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.base_offset == 0
    assert header.record_count == len(want)
    assert header.last_offset_delta == len(want) - 1
    assert header.base_timestamp == want[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in want)
    assert info.record_count == len(want)
    assert list(iter_records(data)) == want


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_golden_rebuilt_by_our_builder(path: Path) -> None:
    data, want = load(path)
    header = BatchHeader.parse(data)
    builder = BatchBuilder(
        compression=CompressionType.NONE,
        base_offset=header.base_offset,
        base_timestamp=header.base_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
    )
    for record in want:
        builder.append(
            record.key,
            record.value,
            record.timestamp,
            record.headers,
            offset_delta=record.offset - header.base_offset,
        )
    rebuilt = builder.build()
    assert bytes(records_payload(rebuilt)) == bytes(records_payload(data))
    if header.compression == CompressionType.NONE:
        assert rebuilt == data
    else:
        # Same header apart from codec bits, length and CRC.
        ours = BatchHeader.parse(rebuilt)
        for name in (
            "base_offset",
            "partition_leader_epoch",
            "magic",
            "last_offset_delta",
            "base_timestamp",
            "max_timestamp",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "record_count",
        ):
            assert getattr(ours, name) == getattr(header, name), name
        assert ours.attributes == header.attributes & ~0x07


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_golden_agrees_with_aiokafka_parser(path: Path) -> None:
    data, want = load(path)
    theirs = AioBatch(data)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in want]


def test_snappy_framings_differ_by_client() -> None:
    """librdkafka writes raw snappy, the Java-compatible clients xerial; we read both."""
    confluent = (GOLDEN_DIR / "confluent-kafka-snappy.bin").read_bytes()
    aiokafka = (GOLDEN_DIR / "aiokafka-snappy.bin").read_bytes()
    assert confluent[61:69] != XERIAL_MAGIC
    assert aiokafka[61:69] == XERIAL_MAGIC
    assert bytes(records_payload(confluent)) == bytes(records_payload(aiokafka))


def test_partition_leader_epoch_conventions() -> None:
    """What each client puts in the field the broker overwrites."""
    epochs = {p.stem: BatchHeader.parse(p.read_bytes()).partition_leader_epoch for p in GOLDENS}
    assert {epochs[n] for n in epochs if n.startswith("aiokafka")} == {-1}
    assert {epochs[n] for n in epochs if n.startswith("kafka-python")} == {0}
    assert {epochs[n] for n in epochs if n.startswith("confluent-kafka")} == {0}


def test_uncompressed_goldens_are_identical_across_clients() -> None:
    """Same records, same layout: only the partition leader epoch may differ."""
    bodies = {p.stem: p.read_bytes()[17:] for p in GOLDENS if p.stem.endswith("-none")}
    # CRC covers attributes..end, so equal CRCs + equal tails mean equal batches.
    assert len(set(bodies.values())) == 1, sorted(bodies)
