"""BatchBuilder (odradek.records.builder), round trips and cross-checks against the
record-batch code of kafka-python and aiokafka (both directions)."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from odradek.records.batch import (
    BatchHeader,
    Header,
    InvalidRecordError,
    Record,
    TimestampType,
    iter_records,
    validate_batches,
)
from odradek.records.builder import BatchBuilder, build_batch, build_one_record_batch
from odradek.records.compression import CompressionType

CODECS = list(CompressionType)
# kafka-python compresses through optional libraries; only gzip is available in this venv.
KP_CODECS = [CompressionType.NONE, CompressionType.GZIP]

Row = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]

ROWS: list[Row] = [
    (b"k0", b"v0", 1_600_000_000_000, [("h1", b"a"), ("h2", None)]),
    (None, b"value without key", 1_600_000_000_010, []),
    (b"k2", None, 1_599_999_999_990, [("", b"")]),
    (b"", b"", 1_600_000_000_005, [("\u00fc", b"\x00" * 300)]),
    (b"k4", bytes(range(256)) * 4, 1_600_000_000_001, []),
]


def build_ours(
    rows: list[Row], codec: CompressionType = CompressionType.NONE, **kw: object
) -> bytes:
    builder = BatchBuilder(compression=codec, **kw)  # type: ignore[arg-type]
    for key, value, ts, headers in rows:
        builder.append(key, value, ts, headers)
    return builder.build()


def expected(rows: list[Row], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(Header(k, v) for k, v in headers), 0)
        for i, (key, value, ts, headers) in enumerate(rows)
    ]


# --- builder basics ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_build_round_trip(codec: CompressionType) -> None:
    buf = build_ours(ROWS, codec, base_offset=500)
    info = validate_batches(buf)
    header = info.batches[0]
    assert header.compression == codec
    assert header.record_count == len(ROWS)
    assert header.last_offset_delta == len(ROWS) - 1
    assert header.base_timestamp == ROWS[0][2]
    assert header.max_timestamp == max(r[2] for r in ROWS)
    assert list(iter_records(buf)) == expected(ROWS, 500)


def test_defaults() -> None:
    header = BatchHeader.parse(build_batch([(b"k", b"v")], timestamp=7))
    assert header.base_offset == 0
    assert header.partition_leader_epoch == -1
    assert header.magic == 2
    assert header.attributes == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.base_timestamp == header.max_timestamp == 7


def test_producer_fields_and_flags() -> None:
    buf = build_ours(
        ROWS[:2],
        CompressionType.LZ4,
        producer_id=99,
        producer_epoch=4,
        base_sequence=10,
        partition_leader_epoch=3,
        is_transactional=True,
        is_control=True,
    )
    header = validate_batches(buf).batches[0]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 4, 10)
    assert header.partition_leader_epoch == 3
    assert header.is_transactional and header.is_control
    assert header.attributes == 0x10 | 0x20 | 3
    assert header.last_sequence == 11


def test_log_append_time_attribute() -> None:
    buf = build_ours(ROWS[:1], timestamp_type=TimestampType.LOG_APPEND_TIME)
    header = BatchHeader.parse(buf)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in iter_records(buf)] == [header.max_timestamp]


def test_delete_horizon_becomes_base_timestamp() -> None:
    builder = BatchBuilder(delete_horizon_ms=2_000_000)
    builder.append(b"k", None, 1_000_000)
    builder.append(b"k2", b"v", 1_000_050)
    buf = builder.build()
    header = validate_batches(buf).batches[0]
    assert header.has_delete_horizon
    assert header.base_timestamp == 2_000_000
    assert header.max_timestamp == 1_000_050
    assert [r.timestamp for r in iter_records(buf)] == [1_000_000, 1_000_050]


def test_explicit_base_timestamp_allows_negative_deltas() -> None:
    builder = BatchBuilder(base_timestamp=100)
    builder.append(b"a", b"1", 50)
    builder.append(b"b", b"2", 150)
    buf = builder.build()
    assert BatchHeader.parse(buf).base_timestamp == 100
    assert [r.timestamp for r in iter_records(buf)] == [50, 150]


def test_offset_gaps() -> None:
    builder = BatchBuilder(base_offset=10)
    for delta in (0, 3, 4, 9):
        builder.append(b"k%d" % delta, b"v", 0, offset_delta=delta)
    assert len(builder) == 4
    buf = builder.build()
    header = validate_batches(buf, strict_offsets=False).batches[0]
    assert (header.record_count, header.last_offset_delta) == (4, 9)
    assert [r.offset for r in iter_records(buf)] == [10, 13, 14, 19]


def test_auto_offset_follows_explicit_one() -> None:
    builder = BatchBuilder()
    builder.append(b"a", b"1", 0, offset_delta=5)
    builder.append(b"b", b"2", 0)
    assert [r.offset for r in iter_records(builder.build())] == [5, 6]


@pytest.mark.parametrize("delta", [0, 2])
def test_offset_deltas_must_increase(delta: int) -> None:
    builder = BatchBuilder()
    builder.append(b"a", b"1", 0, offset_delta=2)
    with pytest.raises(ValueError, match="increase"):
        builder.append(b"b", b"2", 0, offset_delta=delta)


def test_empty_builder_refuses_to_build() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        BatchBuilder().build()


def test_headers_accept_header_tuples() -> None:
    builder = BatchBuilder()
    builder.append(b"k", b"v", 0, [Header("x", b"1"), ("y", None)])
    (record,) = iter_records(builder.build())
    assert record.headers == (Header("x", b"1"), Header("y", None))


def test_build_is_repeatable() -> None:
    builder = BatchBuilder(compression=CompressionType.GZIP)
    builder.append(b"k", b"v", 1)
    assert builder.build() == builder.build()


def test_build_batch_helper() -> None:
    buf = build_batch(
        [(b"a", b"1"), (None, None)], timestamp=5, compression=CompressionType.ZSTD, base_offset=2
    )
    assert list(iter_records(buf)) == [
        Record(2, 5, b"a", b"1", (), 0),
        Record(3, 5, None, None, (), 0),
    ]


def test_large_batch_spans_several_compression_blocks() -> None:
    rows: list[Row] = [(b"k%d" % i, bytes([i % 256]) * 1000, i, []) for i in range(300)]
    for codec in CODECS:
        buf = build_ours(rows, codec)
        assert list(iter_records(buf)) == expected(rows)
        assert len(list(AioBatch(buf))) == 300


# --- hypothesis round trip -----------------------------------------------------------------

keys = st.none() | st.binary(max_size=40)
header_lists = st.lists(
    st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=4
)
timestamps = st.integers(0, 2**50)
rows_strategy = st.lists(st.tuples(keys, keys, timestamps, header_lists), min_size=1, max_size=15)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=rows_strategy,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    gaps=st.lists(st.integers(1, 1000), min_size=15, max_size=15),
)
def test_builder_iter_records_property(
    rows: list[Row], codec: CompressionType, base_offset: int, gaps: list[int]
) -> None:
    builder = BatchBuilder(compression=codec, base_offset=base_offset)
    deltas = []
    delta = -1
    for (key, value, ts, headers), gap in zip(rows, gaps, strict=False):
        delta += gap
        deltas.append(delta)
        builder.append(key, value, ts, headers, offset_delta=delta)
    buf = builder.build()
    info = validate_batches(buf, strict_offsets=False)
    assert info.record_count == len(rows)
    assert info.max_timestamp == max(r[2] for r in rows)
    got = list(iter_records(buf))
    assert [r.offset for r in got] == [base_offset + d for d in deltas]
    assert [(r.key, r.value, r.timestamp) for r in got] == [(k, v, t) for k, v, t, _ in rows]
    assert [r.headers for r in got] == [tuple(Header(*h) for h in r[3]) for r in rows]
    if all(g == 1 for g in gaps[: len(rows)]):
        validate_batches(buf)


# --- cross-checks: ours parsed by kafka-python / aiokafka --------------------------------


def _their_rows(batch: object) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    return [
        (r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
        for r in batch  # type: ignore[attr-defined]
    ]


def _plain(
    rows: list[Row], base: int = 0
) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    return [(base + i, ts, k, v, list(h)) for i, (k, v, ts, h) in enumerate(rows)]


@pytest.mark.parametrize("codec", KP_CODECS)
def test_ours_parsed_by_kafka_python(codec: CompressionType) -> None:
    buf = build_ours(ROWS, codec, base_offset=42, producer_id=5, producer_epoch=1, base_sequence=3)
    theirs = KpBatch(bytearray(buf))
    assert theirs.validate_crc()
    assert theirs.base_offset == 42
    assert theirs.compression_type == codec
    assert theirs.last_offset_delta == len(ROWS) - 1
    assert theirs.max_timestamp == max(r[2] for r in ROWS)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (5, 1, 3)
    assert _their_rows(theirs) == _plain(ROWS, 42)


@pytest.mark.parametrize("codec", CODECS)
def test_ours_parsed_by_aiokafka(codec: CompressionType) -> None:
    buf = build_ours(ROWS, codec, base_offset=7)
    theirs = AioBatch(buf)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert _their_rows(theirs) == _plain(ROWS, 7)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, codec=st.sampled_from(CODECS))
def test_ours_parsed_by_aiokafka_property(rows: list[Row], codec: CompressionType) -> None:
    buf = build_ours(rows, codec)
    theirs = AioBatch(buf)
    assert theirs.validate_crc()
    assert _their_rows(theirs) == _plain(rows)


# --- cross-checks: theirs parsed by ours ---------------------------------------------------


def _build_theirs(cls: type, rows: list[Row], codec: CompressionType) -> bytes:
    builder = cls(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, (key, value, ts, headers) in enumerate(rows):
        builder.append(offset, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


@pytest.mark.parametrize(
    ("cls", "codec"),
    [(KpBuilder, c) for c in KP_CODECS] + [(AioBuilder, c) for c in CODECS],
    ids=lambda x: getattr(x, "__module__", "").split(".")[0] or str(x),
)
def test_theirs_parsed_by_ours(cls: type, codec: CompressionType) -> None:
    buf = _build_theirs(cls, ROWS, codec)
    header = validate_batches(buf).batches[0]
    assert header.compression == codec
    assert list(iter_records(buf)) == expected(ROWS)


@pytest.mark.parametrize(("cls", "epoch"), [(KpBuilder, 0), (AioBuilder, -1)])
def test_uncompressed_batches_are_byte_identical(cls: type, epoch: int) -> None:
    theirs = _build_theirs(cls, ROWS, CompressionType.NONE)
    assert build_ours(ROWS, partition_leader_epoch=epoch) == theirs


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, codec=st.sampled_from(CODECS))
def test_aiokafka_parsed_by_ours_property(rows: list[Row], codec: CompressionType) -> None:
    buf = _build_theirs(AioBuilder, rows, codec)
    validate_batches(buf)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in iter_records(buf)] == [
        (k, v, ts, tuple(Header(*x) for x in h)) for k, v, ts, h in rows
    ]
    if codec == CompressionType.NONE:
        assert build_ours(rows) == buf


def test_corrupted_theirs_rejected_by_ours() -> None:
    buf = bytearray(_build_theirs(AioBuilder, ROWS, CompressionType.NONE))
    buf[-3] ^= 0x01
    with pytest.raises(InvalidRecordError) as info:
        validate_batches(bytes(buf))
    assert info.value.reason == "crc"


@given(
    key=st.none() | st.binary(max_size=300),
    value=st.none() | st.binary(max_size=70_000),
    timestamp=st.integers(min_value=-1, max_value=2**62),
    producer=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1)),
    flags=st.tuples(st.booleans(), st.booleans()),
    leader_epoch=st.integers(-1, 2**31 - 1),
)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_one_record_batch_is_the_builders(
    key: bytes | None, value: bytes | None, timestamp: int, producer: tuple[int, int],
    flags: tuple[bool, bool], leader_epoch: int,
) -> None:
    """The coordinators' and markers' one-record batch is BatchBuilder's, byte for byte."""
    builder = BatchBuilder(producer_id=producer[0], producer_epoch=producer[1],
                           is_transactional=flags[0], is_control=flags[1],
                           partition_leader_epoch=leader_epoch)
    builder.append(key, value, timestamp)
    assert build_one_record_batch(
        key, value, timestamp, producer_id=producer[0], producer_epoch=producer[1],
        transactional=flags[0], control=flags[1],
        partition_leader_epoch=leader_epoch) == builder.build()
