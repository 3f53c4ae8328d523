"""Message formats v0/v1 (odradek.records.legacy) against kafka-python's independent
implementation (kafka.record.legacy_records, kafka.codec)."""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import lz4_encode_old_kafka
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from odradek.records import legacy
from odradek.records.batch import BatchHeader, InvalidRecordError, iter_batches, iter_records
from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType, compress

LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                 CompressionType.LZ4]


def kp_build(magic: int, codec: int, items: list[tuple[int, int, bytes | None, bytes | None]],
             ) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 24)
    for offset, timestamp, key, value in items:
        builder.append(offset, timestamp, key, value)
    return bytes(builder.build())


def kp_read(data: bytes) -> list[tuple[int, int | None, int | None, bytes | None, bytes | None]]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        for r in batch:
            assert r.validate_crc()
            out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
    return out


ITEMS = [(i, 1_700_000_000_000 + i, (b"key-%d" % i) if i % 3 else None,
          None if i == 4 else b"value %d " % i * (i + 1)) for i in range(10)]


@pytest.mark.parametrize("data", [b"", b"a", b"\x64\x40", bytes(range(15)), bytes(range(16)),
                                  bytes(range(40)), b"x" * 1000])
def test_xxh32_matches_xxhash(data: bytes) -> None:
    assert legacy.xxh32(data) == xxhash.xxh32(data).intdigest()
    assert legacy.xxh32(data, 7) == xxhash.xxh32(data, seed=7).intdigest()


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_reads_what_kafka_python_writes(magic: int, codec: CompressionType) -> None:
    data = kp_build(magic, int(codec), ITEMS)
    messages = list(legacy.iter_messages(data))
    assert [(m.key, m.value) for m in messages] == [(k, v) for _, _, k, v in ITEMS]
    if magic == 0:
        assert {m.timestamp for m in messages} == {-1}
    else:
        assert [m.timestamp for m in messages] == [t for _, t, _, _ in ITEMS]
    shallow = list(legacy.iter_shallow(data))
    assert len(shallow) == (len(ITEMS) if codec == CompressionType.NONE else 1)
    assert all(m.compression == codec for _, m in shallow)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_reads_what_we_write(magic: int, codec: CompressionType) -> None:
    items = [(100 + o, t, k, v) for o, t, k, v in ITEMS]
    data = legacy.build_message_set(magic, items, codec)
    got = kp_read(data)
    expected_ts = [t if magic == 1 else None for _, t, _, _ in items]
    assert [g[0] for g in got] == [o for o, _, _, _ in items]  # absolute offsets
    assert [g[1] for g in got] == expected_ts
    assert [(g[3], g[4]) for g in got] == [(k, v) for _, _, k, v in items]
    # and we read our own output back the same way
    assert [(m.offset, m.key, m.value) for m in legacy.iter_messages(data)] == [
        (o, k, v) for o, _, k, v in items]


@pytest.mark.parametrize("codec", LEGACY_CODECS[1:])
def test_v1_wrapper_offsets_are_relative(codec: CompressionType) -> None:
    data = legacy.build_message_set(1, [(50 + i, 10 + i, None, b"v") for i in range(3)], codec)
    (_, wrapper), = legacy.iter_shallow(data)
    assert wrapper.offset == 52  # the last inner message's absolute offset
    assert wrapper.timestamp == 12  # the max inner timestamp
    inner_set = legacy._decompress_legacy(codec, 1, wrapper.value or b"", 1 << 20)
    assert [m.offset for _, m in legacy.iter_shallow(inner_set)] == [0, 1, 2]
    data0 = legacy.build_message_set(0, [(50 + i, 10 + i, None, b"v") for i in range(3)], codec)
    (_, wrapper0), = legacy.iter_shallow(data0)
    inner0 = legacy._decompress_legacy(codec, 0, wrapper0.value or b"", 1 << 20)
    assert [m.offset for _, m in legacy.iter_shallow(inner0)] == [50, 51, 52]  # absolute


def test_v1_log_append_time_wrapper_stamps_inner_messages() -> None:
    builder = legacy.LegacyBuilder(1, CompressionType.GZIP, log_append_time=999)
    for i in range(3):
        builder.append(i, 5 + i, None, b"x")
    data = builder.build()
    assert {(g[1], g[2]) for g in kp_read(data)} == {(999, 1)}
    messages = list(legacy.iter_messages(data))
    assert {m.timestamp for m in messages} == {999}
    assert {m.timestamp_type for m in messages} == {legacy.TimestampType.LOG_APPEND_TIME}


def test_magic0_lz4_uses_the_broken_header_checksum() -> None:
    payload = b"some payload " * 100
    ours = legacy.compress_legacy(CompressionType.LZ4, 0, payload)
    hc = legacy._lz4_descriptor_end(ours)
    # kafka-python's formula for the old checksum: xxh32 over magic..BD, second byte
    assert ours[hc] == xxhash.xxh32(ours[:hc]).digest()[-2]
    with pytest.raises(RuntimeError):  # a strict LZ4 reader refuses it ...
        lz4.frame.decompress(ours)
    assert lz4.frame.decompress(legacy.fix_lz4_header_checksum(ours)) == payload
    # ... and we read kafka-python's old framing
    theirs = lz4_encode_old_kafka(payload)
    assert legacy._decompress_legacy(CompressionType.LZ4, 0, theirs, 1 << 20) == payload
    # magic 1 writes a standard frame
    assert lz4.frame.decompress(legacy.compress_legacy(CompressionType.LZ4, 1, payload)) == payload


@settings(max_examples=60, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(LEGACY_CODECS),
    values=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=30)),
                              st.one_of(st.none(), st.binary(max_size=200)),
                              st.integers(0, 2**41)), min_size=1, max_size=20),
)
def test_round_trip_against_kafka_python(magic: int, codec: CompressionType,
                                         values: list[tuple[bytes | None, bytes | None, int]],
                                         ) -> None:
    items = [(i, ts, k, v) for i, (k, v, ts) in enumerate(values)]
    theirs = kp_build(magic, int(codec), items)
    ours = legacy.build_message_set(magic, items, codec)
    if codec == CompressionType.NONE:
        assert ours == theirs  # byte for byte
    assert [(m.offset, m.key, m.value) for m in legacy.iter_messages(ours)] == [
        (o, k, v) for o, _, k, v in items]
    assert [(g[0], g[3], g[4]) for g in kp_read(ours)] == [(o, k, v) for o, _, k, v in items]


# -- bad input ------------------------------------------------------------------------------


def _reason(data: bytes) -> str:
    with pytest.raises(InvalidRecordError) as info:
        legacy.to_record_batch(data)
    return info.value.reason


def test_bad_crc_is_corrupt() -> None:
    data = bytearray(kp_build(1, 0, ITEMS[:2]))
    data[-1] ^= 0xFF
    assert _reason(bytes(data)) == "crc"
    assert "crc" in legacy.CORRUPT_REASONS


def test_wrapper_holding_a_wrapper_is_invalid() -> None:
    inner = kp_build(1, 1, ITEMS[:2])  # a gzip wrapper ...
    body = struct.pack(">bbq", 1, 1, 0) + b"\xff\xff\xff\xff"
    value = compress(CompressionType.GZIP, inner)  # ... inside another gzip wrapper
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    data = struct.pack(">qi", 0, len(message)) + message
    reason = _reason(data)
    assert reason == "inner_compressed" and reason not in legacy.CORRUPT_REASONS


def test_truncated_inner_message_is_corrupt() -> None:
    inner = kp_build(0, 0, ITEMS[:3])[:-5]
    body = struct.pack(">bb", 0, 1) + b"\xff\xff\xff\xff"
    value = compress(CompressionType.GZIP, inner)
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    assert _reason(struct.pack(">qi", 0, len(message)) + message) == "truncated"


def test_truncated_message_set_is_corrupt_for_producers_not_for_fetches() -> None:
    data = kp_build(1, 0, ITEMS[:3])
    assert _reason(data[:-3]) == "truncated"
    assert len(list(legacy.iter_shallow(data[:-3], allow_partial=True))) == 2


def test_inner_magic_must_match_wrapper() -> None:
    inner = kp_build(0, 0, ITEMS[:2])
    body = struct.pack(">bbq", 1, 1, 0) + b"\xff\xff\xff\xff"
    value = compress(CompressionType.GZIP, inner)
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    assert _reason(struct.pack(">qi", 0, len(message)) + message) == "inner_magic"


def test_zstd_codec_needs_v2() -> None:
    body = struct.pack(">bbq", 1, 4, 0) + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00"
    message = struct.pack(">I", zlib.crc32(body)) + body
    assert _reason(struct.pack(">qi", 0, len(message)) + message) == "codec"


def test_wrong_inner_offsets_are_reassigned_as_kafka_does() -> None:
    data = kp_build(1, 1, [(7, 1, None, b"a"), (3, 2, None, b"b"), (9, 3, None, b"c")])
    converted = legacy.to_record_batch(data)
    assert [(r.offset, r.value) for r in iter_records(converted.batch)] == [
        (0, b"a"), (1, b"b"), (2, b"c")]


# -- conversions ----------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_up_conversion_to_v2(magic: int, codec: CompressionType) -> None:
    converted = legacy.to_record_batch(kp_build(magic, int(codec), ITEMS))
    header = BatchHeader.parse(converted.batch)
    assert header.magic == 2 and header.compression == codec
    assert header.record_count == converted.record_count == len(ITEMS)
    records = list(iter_records(converted.batch))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (i, k, v) for i, (_, _, k, v) in enumerate(ITEMS)]
    expected = [-1] * len(ITEMS) if magic == 0 else [t for _, t, _, _ in ITEMS]
    assert [r.timestamp for r in records] == expected


def _v2_log() -> bytes:
    out = bytearray()
    offset = 0
    for codec in list(CompressionType)[:4]:
        builder = BatchBuilder(compression=codec, base_offset=offset)
        for i in range(4):
            builder.append(b"k%d" % (offset + i), b"v%d" % (offset + i), 1000 + offset + i,
                           headers=[("h", b"dropped")])
        out += builder.build()
        offset += 4
    control = BatchBuilder(base_offset=offset, is_control=True)
    control.append(b"\x00\x00\x00\x00", b"", 5000)
    out += control.build()
    return bytes(out)


@pytest.mark.parametrize("magic", [0, 1])
def test_down_conversion_read_by_kafka_python(magic: int) -> None:
    log = _v2_log()
    result = legacy.down_convert(log, magic, 0, 1 << 20)
    got = kp_read(result.data)
    assert [(g[0], g[3], g[4]) for g in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(16)]  # the control batch is dropped
    assert [g[1] for g in got] == [1000 + i if magic else None for i in range(16)]
    assert result.messages == 16 and result.batches == 4


def test_down_conversion_skips_records_below_the_fetch_offset_and_stops_at_max_bytes() -> None:
    log = _v2_log()
    result = legacy.down_convert(log, 1, 6, 1 << 20)
    assert [g[0] for g in kp_read(result.data)] == list(range(6, 16))
    one = legacy.down_convert(log, 1, 0, 10)  # the first message, over the limit alone
    assert one.batches == 1 and [g[0] for g in kp_read(one.data)] == [0]
    assert legacy.down_convert(log, 1, 0, 10, min_one=False).data == b""
    # an uncompressed batch is cut after whole messages; a compressed one is never cut
    two = legacy.down_convert(log, 1, 0, 2 * 37 + 5)
    assert [g[0] for g in kp_read(two.data)] == [0, 1]
    more = legacy.down_convert(log, 1, 0, 4 * 37 + 10)
    assert [g[0] for g in kp_read(more.data)] == [0, 1, 2, 3]
    # a region cut inside its last batch: the whole batches before it
    cut = legacy.down_convert(log[:-20], 1, 0, 1 << 20)
    assert cut.messages == 16


def test_zstd_batches_cannot_be_down_converted() -> None:
    builder = BatchBuilder(compression=CompressionType.ZSTD)
    builder.append(None, b"x", 1)
    with pytest.raises(InvalidRecordError) as info:
        legacy.down_convert(builder.build(), 1, 0, 1 << 20)
    assert info.value.reason == "codec"


def test_old_entries_pass_through_or_go_down_to_v0() -> None:
    v1 = legacy.build_message_set(1, [(i, 10 + i, None, b"x%d" % i) for i in range(3)],
                                  CompressionType.SNAPPY)
    v2 = BatchBuilder(base_offset=3)
    v2.append(None, b"x3", 13)
    mixed = v1 + v2.build()
    same = legacy.down_convert(mixed, 1, 0, 1 << 20)
    assert same.data.startswith(v1)
    to_v0 = legacy.down_convert(mixed, 0, 0, 1 << 20)
    got = kp_read(to_v0.data)
    assert [(g[0], g[1], g[4]) for g in got] == [(i, None, b"x%d" % i) for i in range(4)]


def test_magic_of() -> None:
    assert legacy.magic_of(kp_build(0, 0, ITEMS[:1])) == 0
    assert legacy.magic_of(kp_build(1, 0, ITEMS[:1])) == 1
    assert legacy.magic_of(next(iter([_v2_log()]))) == 2
    assert legacy.magic_of(b"\x00" * 5) == -1
    assert len(list(iter_batches(_v2_log()))) == 5
