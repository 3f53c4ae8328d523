"""Compression codecs of RecordBatch v2 (attributes bits 0-2), through cramjam.

How it works: a compressed batch keeps its 61-byte header in clear and compresses the
concatenated records that follow it. The codec id lives in the low three bits of the
batch attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

- gzip: an RFC 1952 stream.
- snappy: Kafka's Java producer writes the *xerial* framing (magic ``\\x82SNAPPY\\x00``,
  two int32 versions, then blocks of [int32 length][raw snappy]); librdkafka writes raw
  snappy. We read both and write xerial, like Kafka (SnappyOutputStream), which every
  client reads.
- lz4: the LZ4 frame format (KIP-57 fixed the header checksum Kafka once got wrong).
- zstd: a zstd frame (KIP-110).

Decompression is bounded: ``max_size`` caps the output, so a tiny hostile payload cannot
claim unbounded memory.
"""

from __future__ import annotations

import enum
import struct

import cramjam


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """A payload could not be decompressed (corrupt, unknown codec, or over the limit)."""


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_COMPATIBLE = 1
_XERIAL_BLOCK = 32 * 1024  # Kafka's SnappyOutputStream block size
_INT32 = struct.Struct(">i")

# Default cap on one decompressed batch: 2x Kafka's default max fetch/message sizes are far
# below this; it exists only to stop decompression bombs.
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024


def compress(codec: CompressionType, data: bytes | memoryview) -> bytes:
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data)
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CompressionError(f"unknown compression codec {codec}")


def decompress(
    codec: int, data: bytes | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> bytes:
    try:
        if codec == CompressionType.NONE:
            out = bytes(data)
        elif codec == CompressionType.GZIP:
            out = bytes(cramjam.gzip.decompress(data))
        elif codec == CompressionType.SNAPPY:
            out = _snappy_decompress(data)
        elif codec == CompressionType.LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        elif codec == CompressionType.ZSTD:
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise CompressionError(f"unknown compression codec {codec}")
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError types
        name = CompressionType(codec).name.lower()
        raise CompressionError(f"{name} payload is corrupt: {exc}") from exc
    if len(out) > max_size:
        raise CompressionError(f"decompressed batch of {len(out)} bytes exceeds {max_size}")
    return out


def _lz4_compress(data: bytes | memoryview) -> bytes:
    # Independent blocks and no content checksum, as Kafka's KafkaLZ4BlockOutputStream
    # writes: the Java reader rejects linked blocks, cramjam's default frame preference.
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    # the streaming compressor takes bytes only (a memoryview raises TypeError); a topic's
    # compression.type=lz4 recompresses batches from views of the request
    compressor.compress(bytes(data) if isinstance(data, memoryview) else data)
    return bytes(compressor.finish())


def _xerial_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPATIBLE)]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = _XERIAL_HEADER.size
    out = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CompressionError("xerial snappy block length runs past the payload")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CompressionError("xerial snappy block runs past the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(out)
