"""Codecs of RecordBatch v2 (odradek.records.compression)."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records.batch import InvalidRecordError, iter_records, records_payload
from odradek.records.builder import BatchBuilder
from odradek.records.compression import (
    XERIAL_MAGIC,
    CompressionError,
    CompressionType,
    compress,
    decompress,
)

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]
DATA = b"".join(b"record %d " % i for i in range(5000))  # ~50 KB, compressible


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", DATA, bytes(range(256)) * 1000])
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_compresses_a_memoryview(codec: CompressionType) -> None:
    # a topic's compression.type recompresses batches from views of the request
    view = memoryview(b"xx" + DATA)[2:]
    assert decompress(codec, compress(codec, view)) == DATA


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compresses(codec: CompressionType) -> None:
    assert len(compress(codec, DATA)) < len(DATA) // 2


def test_none_is_identity() -> None:
    assert compress(CompressionType.NONE, memoryview(b"abc")) == b"abc"


def test_gzip_is_rfc1952() -> None:
    packed = compress(CompressionType.GZIP, DATA)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == DATA
    assert decompress(CompressionType.GZIP, gzip.compress(DATA)) == DATA


def test_zstd_frame() -> None:
    packed = compress(CompressionType.ZSTD, DATA)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert bytes(cramjam.zstd.decompress(packed)) == DATA


def test_lz4_frame_uses_independent_blocks_without_content_checksum() -> None:
    # Kafka's Java reader (KafkaLZ4BlockInputStream) rejects linked blocks.
    packed = compress(CompressionType.LZ4, DATA * 3)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg = packed[4]
    assert flg >> 6 == 0b01  # version
    assert flg & 0x20, "block independence flag must be set"
    assert not flg & 0x04, "content checksum must be off"
    assert not flg & 0x08, "no content size"
    assert bytes(cramjam.lz4.decompress(packed)) == DATA * 3


def test_lz4_reads_linked_blocks_too() -> None:
    packed = bytes(cramjam.lz4.compress(DATA * 3))
    assert not packed[4] & 0x20
    assert decompress(CompressionType.LZ4, packed) == DATA * 3


def test_snappy_writes_xerial() -> None:
    packed = compress(CompressionType.SNAPPY, DATA)
    magic, version, compatible = struct.unpack_from(">8sii", packed)
    assert (magic, version, compatible) == (XERIAL_MAGIC, 1, 1)
    assert XERIAL_MAGIC == b"\x82SNAPPY\x00"


def _xerial_blocks(packed: bytes) -> list[bytes]:
    pos = 16
    blocks = []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        blocks.append(packed[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(packed)
    return blocks


def test_xerial_uses_32k_blocks() -> None:
    data = bytes(range(256)) * 300  # 76800 bytes -> 3 blocks
    blocks = _xerial_blocks(compress(CompressionType.SNAPPY, data))
    assert len(blocks) == 3
    decoded = [bytes(cramjam.snappy.decompress_raw(b)) for b in blocks]
    assert [len(d) for d in decoded] == [32768, 32768, 76800 - 65536]
    assert b"".join(decoded) == data


def test_xerial_empty_has_no_blocks() -> None:
    packed = compress(CompressionType.SNAPPY, b"")
    assert len(packed) == 16
    assert decompress(CompressionType.SNAPPY, packed) == b""


def test_raw_snappy_decodes() -> None:
    raw = bytes(cramjam.snappy.compress_raw(DATA))
    assert raw[:8] != XERIAL_MAGIC
    assert decompress(CompressionType.SNAPPY, raw) == DATA


def test_hand_made_xerial_decodes() -> None:
    chunks = [DATA[:1000], DATA[1000:1500], DATA[1500:]]
    packed = struct.pack(">8sii", XERIAL_MAGIC, 1, 1) + b"".join(
        struct.pack(">i", len(c)) + c
        for c in (bytes(cramjam.snappy.compress_raw(x)) for x in chunks)
    )
    assert decompress(CompressionType.SNAPPY, packed) == DATA


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00\x00",  # block length cut short
        struct.pack(">i", 100) + b"abc",  # block runs past the payload
        struct.pack(">i", -1),  # negative block length
    ],
)
def test_broken_xerial_framing(tail: bytes) -> None:
    packed = compress(CompressionType.SNAPPY, b"hello") + tail
    with pytest.raises(CompressionError, match="xerial"):
        decompress(CompressionType.SNAPPY, packed)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_corrupt_payload(codec: CompressionType) -> None:
    packed = bytearray(compress(codec, DATA))
    packed[:4] = b"\xde\xad\xbe\xef" if codec != CompressionType.SNAPPY else packed[:4]
    if codec == CompressionType.SNAPPY:
        packed[20:40] = b"\xff" * 20
    with pytest.raises(CompressionError, match="corrupt"):
        decompress(codec, bytes(packed))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_payload(codec: CompressionType) -> None:
    packed = compress(codec, DATA)
    with pytest.raises(CompressionError):
        decompress(codec, packed[: len(packed) // 2])


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(CompressionError, match="unknown"):
        decompress(codec, b"abc")
    with pytest.raises(CompressionError, match="unknown"):
        compress(codec, b"abc")  # type: ignore[arg-type]


def test_compression_error_is_value_error() -> None:
    assert issubclass(CompressionError, ValueError)


@pytest.mark.parametrize("codec", CODECS)
def test_max_size_enforced(codec: CompressionType) -> None:
    packed = compress(codec, DATA)
    assert decompress(codec, packed, max_size=len(DATA)) == DATA
    with pytest.raises(CompressionError, match="exceeds"):
        decompress(codec, packed, max_size=len(DATA) - 1)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_bomb_is_capped(codec: CompressionType) -> None:
    bomb = compress(codec, bytes(4 * 1024 * 1024))
    assert len(bomb) < 300_000
    with pytest.raises(CompressionError, match="exceeds"):
        decompress(codec, bomb, max_size=1024 * 1024)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_batch_max_size_becomes_invalid_record(codec: CompressionType) -> None:
    builder = BatchBuilder(compression=codec)
    builder.append(b"k", b"v" * 10_000, 0)
    buf = builder.build()
    size = len(records_payload(buf))
    assert len(list(iter_records(buf, max_size=size))) == 1
    with pytest.raises(InvalidRecordError) as info:
        list(iter_records(buf, max_size=size - 1))
    assert info.value.reason == "compression"
    with pytest.raises(InvalidRecordError):
        records_payload(buf, max_size=100)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=5000))
def test_round_trip_property(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data
