"""RecordBatch v2 header view, validation and record iteration (odradek.records.batch)."""

from __future__ import annotations

import struct

import pytest

from odradek.records import batch as batch_mod
from odradek.records.batch import (
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
    CompressionType,
    Header,
    InvalidRecordError,
    Record,
    TimestampType,
    compute_crc,
    iter_batches,
    iter_records,
    records_payload,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
    validate_batches,
)
from odradek.records.builder import BatchBuilder, build_batch
from odradek.records.varint import encode_varint

# Field name -> (offset, struct code), as the Kafka protocol documentation lays them out.
LAYOUT = {
    "base_offset": (0, "q"),
    "batch_length": (8, "i"),
    "partition_leader_epoch": (12, "i"),
    "magic": (16, "b"),
    "crc": (17, "I"),
    "attributes": (21, "h"),
    "last_offset_delta": (23, "i"),
    "base_timestamp": (27, "q"),
    "max_timestamp": (35, "q"),
    "producer_id": (43, "q"),
    "producer_epoch": (51, "h"),
    "base_sequence": (53, "i"),
    "record_count": (57, "i"),
}


def put(buf: bytes, name: str, value: int, fix_crc: bool = True) -> bytes:
    """Overwrite one header field; recompute the CRC unless told not to."""
    offset, code = LAYOUT[name]
    out = bytearray(buf)
    struct.pack_into(">" + code, out, offset, value)
    if fix_crc:
        struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


def sample_batch(compression: CompressionType = CompressionType.NONE, **kwargs: object) -> bytes:
    builder = BatchBuilder(compression=compression, **kwargs)  # type: ignore[arg-type]
    builder.append(b"k0", b"v0", 1000, [("h", b"x")])
    builder.append(None, b"v1", 1005)
    builder.append(b"k2", None, 999, [("a", None), ("b", b"")])
    return builder.build()


def raw_batch(payload: bytes, count: int, last_offset_delta: int | None = None) -> bytes:
    """A NONE batch around hand-written record bytes, with a correct CRC."""
    header = HEADER_STRUCT.pack(
        0,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        -1,
        2,
        0,
        0,
        count - 1 if last_offset_delta is None else last_offset_delta,
        100,
        100,
        -1,
        -1,
        -1,
        count,
    )
    out = bytearray(header + payload)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


def record_bytes(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def reason_of(buf: bytes, strict: bool = True) -> str:
    with pytest.raises(InvalidRecordError) as info:
        validate_batches(buf, strict_offsets=strict)
    return info.value.reason


# --- layout ----------------------------------------------------------------------------


def test_header_is_61_bytes_and_log_overhead_12() -> None:
    assert BATCH_HEADER_SIZE == HEADER_STRUCT.size == 61
    assert LOG_OVERHEAD == 12
    assert batch_mod.RECORDS_OFFSET == 61


def test_field_offset_constants() -> None:
    assert LAYOUT["base_offset"][0] == batch_mod.BASE_OFFSET_OFFSET
    assert LAYOUT["batch_length"][0] == batch_mod.LENGTH_OFFSET
    assert LAYOUT["partition_leader_epoch"][0] == batch_mod.PARTITION_LEADER_EPOCH_OFFSET
    assert LAYOUT["magic"][0] == batch_mod.MAGIC_OFFSET
    assert LAYOUT["crc"][0] == batch_mod.CRC_OFFSET
    assert LAYOUT["attributes"][0] == batch_mod.ATTRIBUTES_OFFSET
    assert LAYOUT["max_timestamp"][0] == batch_mod.MAX_TIMESTAMP_OFFSET


@pytest.mark.parametrize("name", list(LAYOUT))
def test_each_field_is_read_from_its_offset(name: str) -> None:
    base = bytes(BATCH_HEADER_SIZE)
    value = 2 if name == "magic" else 0x1234 if LAYOUT[name][1] in "hb" else 0x12345678
    buf = put(base, name, value, fix_crc=False)
    header = BatchHeader.parse(buf)
    assert getattr(header, name) == value
    for other in LAYOUT:
        if other != name:
            assert getattr(header, other) == 0, other


def test_parse_at_position() -> None:
    one = sample_batch()
    header = BatchHeader.parse(b"\x00" * 7 + one, 7)
    assert header.position == 7
    assert header._replace(position=0) == BatchHeader.parse(one)


def test_header_properties() -> None:
    buf = sample_batch(
        compression=CompressionType.GZIP,
        base_offset=100,
        producer_id=7,
        producer_epoch=3,
        base_sequence=2**31 - 2,
        is_transactional=True,
    )
    header = BatchHeader.parse(buf)
    assert header.size == len(buf)
    assert header.batch_length == len(buf) - 12
    assert header.magic == 2
    assert header.record_count == 3
    assert header.last_offset_delta == 2
    assert header.last_offset == 102
    assert header.next_offset == 103
    assert header.compression == CompressionType.GZIP
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.is_transactional
    assert not header.is_control
    assert not header.has_delete_horizon
    assert header.base_timestamp == 1000
    assert header.max_timestamp == 1005
    assert (header.producer_id, header.producer_epoch) == (7, 3)
    # Sequence numbers wrap at int32 max.
    assert header.last_sequence == 0


def test_last_sequence_without_producer() -> None:
    assert BatchHeader.parse(sample_batch()).last_sequence == -1


@pytest.mark.parametrize(
    ("bit", "prop"),
    [
        (0x08, "timestamp_type"),
        (0x10, "is_transactional"),
        (0x20, "is_control"),
        (0x40, "has_delete_horizon"),
    ],
)
def test_attribute_bits(bit: int, prop: str) -> None:
    header = BatchHeader.parse(put(sample_batch(), "attributes", bit))
    value = getattr(header, prop)
    assert value == (TimestampType.LOG_APPEND_TIME if bit == 0x08 else True)
    assert header.compression == CompressionType.NONE


# --- validation ------------------------------------------------------------------------


def test_valid_batch_passes() -> None:
    buf = sample_batch()
    info = validate_batches(buf)
    assert info.shallow_count == 1
    assert info.record_count == 3
    assert info.max_timestamp == 1005
    assert info.offset_of_max_timestamp_delta == 0
    assert info.size == len(buf)
    assert info.batches[0] == BatchHeader.parse(buf)


def test_several_batches() -> None:
    first = build_batch([(b"a", b"1")], timestamp=50)
    second = build_batch([(b"b", b"2"), (b"c", b"3")], timestamp=70, base_offset=1)
    third = build_batch([(b"d", b"4")], timestamp=60, base_offset=3)
    info = validate_batches(first + second + third)
    assert info.record_count == 4
    assert [b.position for b in info.batches] == [0, len(first), len(first) + len(second)]
    assert info.max_timestamp == 70
    assert info.offset_of_max_timestamp_delta == 1


def test_validate_accepts_bytearray_and_memoryview() -> None:
    buf = sample_batch()
    assert validate_batches(bytearray(buf)).record_count == 3
    assert validate_batches(memoryview(buf)).record_count == 3


def test_empty() -> None:
    assert reason_of(b"") == "empty"


@pytest.mark.parametrize("size", [1, 12, 60])
def test_short_header(size: int) -> None:
    assert reason_of(sample_batch()[:size]) == "short_header"


def test_short_header_for_trailing_bytes_after_a_batch() -> None:
    buf = sample_batch()
    with pytest.raises(InvalidRecordError) as info:
        validate_batches(buf + b"\x00" * 10)
    assert info.value.reason == "short_header"
    assert info.value.position == len(buf)


@pytest.mark.parametrize("length", [-1, 0, 48])
def test_short_length(length: int) -> None:
    assert reason_of(put(sample_batch(), "batch_length", length)) == "short_length"


def test_minimum_length_is_not_short() -> None:
    # 49 = header minus log overhead: no records; it fails later (record_count), not here.
    assert reason_of(put(sample_batch(), "batch_length", 49)) != "short_length"


def test_truncated() -> None:
    buf = sample_batch()
    assert reason_of(buf[:-1]) == "truncated"
    assert reason_of(put(buf, "batch_length", len(buf))) == "truncated"


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_magic(magic: int) -> None:
    assert reason_of(put(sample_batch(), "magic", magic)) == "magic"


def test_magic_checked_before_crc() -> None:
    assert reason_of(put(sample_batch(), "magic", 1, fix_crc=False)) == "magic"


def test_crc_mismatch_in_records() -> None:
    buf = bytearray(sample_batch())
    buf[-1] ^= 0xFF
    assert reason_of(bytes(buf)) == "crc"


@pytest.mark.parametrize(
    "name",
    [
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
    ],
)
def test_crc_covers_field(name: str) -> None:
    buf = sample_batch()
    current = getattr(BatchHeader.parse(buf), name)
    assert reason_of(put(buf, name, current + 1, fix_crc=False)) == "crc"


def test_crc_field_itself() -> None:
    buf = sample_batch()
    crc = BatchHeader.parse(buf).crc
    assert reason_of(put(buf, "crc", crc ^ 1, fix_crc=False)) == "crc"


def test_crc_is_crc32c_over_attributes_to_end() -> None:
    import crc32c

    buf = sample_batch()
    assert BatchHeader.parse(buf).crc == crc32c.crc32c(buf[21:]) == compute_crc(buf)


def test_crc_error_carries_position() -> None:
    good = sample_batch()
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(InvalidRecordError) as info:
        validate_batches(good + bytes(bad))
    assert info.value.reason == "crc"
    assert info.value.position == len(good)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec(codec: int) -> None:
    assert reason_of(put(sample_batch(), "attributes", codec)) == "codec"


@pytest.mark.parametrize(
    ("name", "value"), [("record_count", -1), ("last_offset_delta", -1), ("record_count", -(2**31))]
)
def test_negative_counts(name: str, value: int) -> None:
    assert reason_of(put(sample_batch(), name, value)) == "record_count"
    assert reason_of(put(sample_batch(), name, value), strict=False) == "record_count"


def test_strict_count_must_match_last_offset_delta() -> None:
    buf = sample_batch()
    assert reason_of(put(buf, "record_count", 2)) == "record_count"
    assert reason_of(put(buf, "last_offset_delta", 3)) == "record_count"
    assert reason_of(put(put(buf, "record_count", 0), "last_offset_delta", -1)) == ("record_count")


def test_strict_zero_records() -> None:
    buf = put(put(sample_batch(), "record_count", 0), "last_offset_delta", 0)
    assert reason_of(buf) == "record_count"


def test_lenient_allows_offset_gaps_but_not_excess_records() -> None:
    builder = BatchBuilder()
    builder.append(b"a", b"1", 10, offset_delta=0)
    builder.append(b"b", b"2", 10, offset_delta=5)
    buf = builder.build()
    assert reason_of(buf) == "record_count"
    assert validate_batches(buf, strict_offsets=False).record_count == 2
    assert reason_of(put(buf, "record_count", 7), strict=False) == "record_count"


@pytest.mark.parametrize("count", [10, 1000, 2**31 - 1])
def test_impossible_record_count_for_payload(count: int) -> None:
    buf = put(put(sample_batch(), "record_count", count), "last_offset_delta", count - 1)
    assert reason_of(buf) == "record_count"
    assert reason_of(buf, strict=False) == "record_count"


def test_impossible_count_not_checked_for_compressed_payload() -> None:
    # A compressed payload may hold far more than its size suggests; only iteration knows.
    buf = sample_batch(CompressionType.GZIP)
    buf = put(put(buf, "record_count", 1000), "last_offset_delta", 999)
    assert validate_batches(buf).record_count == 1000
    with pytest.raises(InvalidRecordError):
        list(iter_records(buf))


def test_validate_batch_single() -> None:
    buf = b"\xff" * 3 + sample_batch()
    header = validate_batch(buf, 3)
    assert header.position == 3
    assert header.record_count == 3


def test_invalid_record_error_is_value_error() -> None:
    err = InvalidRecordError("crc", "message", 5)
    assert isinstance(err, ValueError)
    assert (err.reason, err.position, str(err)) == ("crc", 5, "message")


# --- CRC rule ----------------------------------------------------------------------------


def test_rewriting_base_offset_keeps_crc_valid() -> None:
    buf = bytearray(sample_batch())
    crc = BatchHeader.parse(buf).crc
    set_base_offset(buf, 0, 123456789)
    header = validate_batches(buf).batches[0]
    assert header.base_offset == 123456789
    assert header.crc == crc
    assert [r.offset for r in iter_records(buf)] == [123456789, 123456790, 123456791]


def test_rewriting_partition_leader_epoch_keeps_crc_valid() -> None:
    buf = bytearray(sample_batch())
    set_partition_leader_epoch(buf, 0, 42)
    assert validate_batches(buf).batches[0].partition_leader_epoch == 42


def test_rewrites_at_position_in_a_multi_batch_buffer() -> None:
    first = sample_batch()
    buf = bytearray(first + sample_batch())
    set_base_offset(buf, len(first), 3)
    set_partition_leader_epoch(buf, len(first), 9)
    info = validate_batches(buf)
    assert [(b.base_offset, b.partition_leader_epoch) for b in info.batches] == [(0, -1), (3, 9)]


def test_set_log_append_time_recomputes_crc() -> None:
    first = sample_batch()
    buf = bytearray(first + sample_batch(CompressionType.SNAPPY))
    set_log_append_time(buf, len(first), 5_000_000)
    info = validate_batches(buf)
    header = info.batches[1]
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 5_000_000
    assert header.compression == CompressionType.SNAPPY
    assert info.max_timestamp == 5_000_000
    second = bytes(buf[len(first) :])
    assert [r.timestamp for r in iter_records(second)] == [5_000_000] * 3
    # The first batch is untouched.
    assert bytes(buf[: len(first)]) == first


def test_manual_log_append_time_without_crc_is_rejected() -> None:
    buf = sample_batch()
    assert reason_of(put(buf, "attributes", 0x08, fix_crc=False)) == "crc"


# --- iter_batches --------------------------------------------------------------------------


def test_iter_batches_walks_headers_and_stops_at_partial() -> None:
    a, b = sample_batch(), sample_batch(base_offset=3)
    buf = a + b + b[:30]
    headers = list(iter_batches(buf))
    assert [h.position for h in headers] == [0, len(a)]
    assert list(iter_batches(buf, len(a))) == headers[1:]
    assert list(iter_batches(a + b[:-1])) == headers[:1]
    assert list(iter_batches(put(a, "batch_length", 10))) == []


# --- iteration ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType))
def test_iter_records(codec: CompressionType) -> None:
    records = list(iter_records(sample_batch(codec, base_offset=10)))
    assert records == [
        Record(10, 1000, b"k0", b"v0", (Header("h", b"x"),), 0),
        Record(11, 1005, None, b"v1", (), 0),
        Record(12, 999, b"k2", None, (Header("a", None), Header("b", b"")), 0),
    ]
    assert isinstance(records[0].headers[0], Header)


def test_iter_records_is_lazy() -> None:
    it = iter_records(sample_batch())
    assert next(it).key == b"k0"


def test_records_payload_uncompressed_is_a_view() -> None:
    buf = sample_batch()
    payload = records_payload(buf)
    assert bytes(payload) == buf[61:]


def test_iter_records_ignores_bytes_after_the_batch() -> None:
    buf = sample_batch()
    assert len(list(iter_records(buf + b"garbage"))) == 3


def test_empty_key_and_value_differ_from_null() -> None:
    builder = BatchBuilder()
    builder.append(b"", b"", 0)
    builder.append(None, None, 0)
    first, second = iter_records(builder.build())
    assert (first.key, first.value) == (b"", b"")
    assert (second.key, second.value) == (None, None)


def test_record_attributes_are_exposed() -> None:
    body = b"\x05" + encode_varint(0) + encode_varint(0) + encode_varint(-1) * 2 + b"\x00"
    (record,) = iter_records(raw_batch(record_bytes(body), 1))
    assert record.attributes == 5


def _body(key: bytes = b"k", headers: bytes = b"\x00") -> bytes:
    return (
        b"\x00"
        + encode_varint(0)
        + encode_varint(0)
        + encode_varint(len(key))
        + key
        + (encode_varint(-1) + headers)
    )


def test_hand_written_record_parses() -> None:
    (record,) = iter_records(raw_batch(record_bytes(_body()), 1))
    assert record == Record(0, 100, b"k", None, (), 0)


def _iter_reason(buf: bytes) -> str:
    with pytest.raises(InvalidRecordError) as info:
        list(iter_records(buf))
    return info.value.reason


def test_record_length_too_small() -> None:
    payload = encode_varint(5) + b"\x00" * 5 + b"\x00" * 3
    assert _iter_reason(raw_batch(payload, 1)) == "record_length"


def test_record_length_negative() -> None:
    assert _iter_reason(raw_batch(encode_varint(-1) + b"\x00" * 8, 1)) == "record_length"


def test_record_length_past_payload() -> None:
    body = _body()
    payload = encode_varint(len(body) + 1) + body
    assert _iter_reason(raw_batch(payload, 1)) == "record_length"


def test_record_length_longer_than_fields() -> None:
    body = _body() + b"\x00"
    assert _iter_reason(raw_batch(record_bytes(body), 1)) == "record_length"


def test_key_runs_past_record() -> None:
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(50) + b"k" * 4
    assert _iter_reason(raw_batch(record_bytes(body), 1)) == "record_length"


def test_header_count_negative_or_impossible() -> None:
    assert _iter_reason(raw_batch(record_bytes(_body(headers=encode_varint(-1))), 1)) == ("headers")
    assert _iter_reason(raw_batch(record_bytes(_body(headers=encode_varint(100))), 1)) == (
        "headers"
    )


def test_null_header_key() -> None:
    headers = encode_varint(1) + encode_varint(-1) + encode_varint(-1)
    assert _iter_reason(raw_batch(record_bytes(_body(headers=headers)), 1)) == "headers"


def test_bad_varint_in_record() -> None:
    body = b"\x00" + b"\x80" * 11
    assert _iter_reason(raw_batch(record_bytes(body), 1)) == "varint"


def test_bytes_after_last_record() -> None:
    payload = record_bytes(_body()) + b"\x00" * 7
    buf = raw_batch(payload, 1)
    validate_batches(buf)
    assert _iter_reason(buf) == "record_count"


def test_fewer_records_than_count() -> None:
    payload = record_bytes(_body()) * 2
    buf = raw_batch(payload, 3)
    with pytest.raises(InvalidRecordError):
        list(iter_records(buf))


def test_non_utf8_header_key_is_replaced_not_rejected() -> None:
    headers = encode_varint(1) + encode_varint(1) + b"\xff" + encode_varint(0)
    (record,) = iter_records(raw_batch(record_bytes(_body(headers=headers)), 1))
    assert record.headers == (Header("\ufffd", b""),)


def test_corrupt_compressed_payload() -> None:
    buf = bytearray(sample_batch(CompressionType.ZSTD))
    buf[61] ^= 0xFF  # the zstd frame magic
    struct.pack_into(">I", buf, 17, compute_crc(buf))
    validate_batches(buf)
    assert _iter_reason(bytes(buf)) == "compression"
