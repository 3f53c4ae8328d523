"""Message formats v0 and v1 (magic 0 and 1): the message sets of Kafka before 0.11.

Follows Kafka's ``LegacyRecord`` and ``AbstractLegacyRecordBatch`` (and, for conversion,
``LogValidator`` / ``RecordsUtil.downConvert``). Sans I/O: bytes in, values out.

How it works
------------
A message set is a run of entries ``[offset int64][message_size int32][message]`` (the
same 12-byte log overhead as a v2 batch, whose magic byte sits at the same place: byte
16). A message is::

    crc         uint32  CRC32 (IEEE, zlib's) over magic..end
    magic       int8    0 or 1
    attributes  int8    bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4),
                        bit 3 timestamp type (v1 only: 1 = LogAppendTime)
    timestamp   int64   v1 only (added in 0.10.0, KIP-32)
    key         bytes   int32 length, -1 = null
    value       bytes   int32 length, -1 = null

A *wrapper* message (codec != 0) carries in its value a compressed message set of *inner*
messages of the same magic, which must not be compressed themselves. In a v0 wrapper the
inner offsets are absolute and the wrapper's offset is the last of them; in a v1 wrapper
(KIP-31) the inner offsets are relative (0, 1, ...) and the wrapper's offset is the
absolute offset of the last inner message, so inner ``i`` sits at
``wrapper.offset - inner[-1].offset + inner[i].offset``. A v1 wrapper with LogAppendTime
gives every inner message its own timestamp.

lz4 in a magic-0 wrapper uses the framing of Kafka before 0.10 (KAFKA-3160, fixed by KIP-57
for magic 1): the frame descriptor's header checksum was computed over the frame magic too.
Kafka's reader ignores that byte for magic 0 and its writer keeps the broken value; we do
the same (xxHash32 of a few header bytes, computed here in pure Python).

Conversions to and from RecordBatch v2 are here too: :func:`to_record_batch` turns a
producer's message set into one v2 batch (Kafka 3.x stores only v2), and
:func:`down_convert` turns v2 batches into a v0/v1 message set for an old fetcher (control
batches dropped, headers dropped: v0/v1 have none, as with Kafka). Both walk records in
Python: they serve old clients only, never the v2 produce and fetch paths.

Errors are :class:`~odradek.records.batch.InvalidRecordError` with a ``reason``:
``crc``/``truncated``/``short_header``/``magic``/``codec`` (the broker's CORRUPT_MESSAGE)
or ``wrapper``/``inner_*``/``record_length`` (INVALID_RECORD), see :data:`CORRUPT_REASONS`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import cramjam

from odradek.records.batch import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidRecordError,
    TimestampType,
    iter_batches,
    records_payload,
)
from odradek.records.builder import BatchBuilder
from odradek.records.columnar import new_builder
from odradek.records.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CompressionError,
    CompressionType,
    compress,
    decompress,
)

__all__ = [
    "CORRUPT_REASONS",
    "MAGIC_V0",
    "MAGIC_V1",
    "LegacyBuilder",
    "LegacyMessage",
    "down_convert",
    "iter_deep",
    "iter_shallow",
    "magic_of",
    "to_record_batch",
]

MAGIC_V0 = 0
MAGIC_V1 = 1
_MAGIC_POSITION = LOG_OVERHEAD + 4  # offset, size, crc: the magic byte (also of a v2 batch)

_ENTRY = struct.Struct(">qi")  # offset, message size
_HEAD_V0 = struct.Struct(">Ibb")  # crc, magic, attributes
_HEAD_V1 = struct.Struct(">Ibbq")  # crc, magic, attributes, timestamp
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
# Smallest message of each magic: its header plus the two int32 lengths (null key and value).
MESSAGE_OVERHEAD_V0 = _HEAD_V0.size + 8  # 14
MESSAGE_OVERHEAD_V1 = _HEAD_V1.size + 8  # 22

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_MAX_LEGACY_CODEC = int(CompressionType.LZ4)

CORRUPT_REASONS = frozenset({"crc", "truncated", "short_header", "magic", "codec"})
"""Reasons the broker answers CORRUPT_MESSAGE; the others are INVALID_RECORD."""


class LegacyMessage(NamedTuple):
    """One v0/v1 message; ``timestamp`` is -1 (NO_TIMESTAMP) for magic 0."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    crc: int

    @property
    def compression(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & _TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def size(self) -> int:
        """Bytes of the entry, log overhead included."""
        return LOG_OVERHEAD + message_size(self.magic, self.key, self.value)


def message_size(magic: int, key: bytes | None, value: bytes | None) -> int:
    overhead = MESSAGE_OVERHEAD_V0 if magic == MAGIC_V0 else MESSAGE_OVERHEAD_V1
    return overhead + (len(key) if key is not None else 0) + (
        len(value) if value is not None else 0)


def magic_of(records: bytes | bytearray | memoryview) -> int:
    """The magic byte of the first entry (v0/v1 message or v2 batch), -1 if too short."""
    if len(records) <= _MAGIC_POSITION:
        return -1
    return int(records[_MAGIC_POSITION])


# -- reading -------------------------------------------------------------------------------


def _parse_message(buf: memoryview, pos: int, offset: int, size: int) -> LegacyMessage:
    """The message of ``size`` bytes at ``pos`` (after its 12-byte entry header)."""
    if size < MESSAGE_OVERHEAD_V0:
        raise InvalidRecordError(
            "short_header", f"message size {size} is smaller than the smallest message "
            f"({MESSAGE_OVERHEAD_V0} bytes)", pos)
    crc, magic, attributes = _HEAD_V0.unpack_from(buf, pos)
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise InvalidRecordError("magic", f"unsupported magic byte {magic} in a message set", pos)
    actual = zlib.crc32(buf[pos + 4 : pos + size])
    if actual != crc:
        raise InvalidRecordError(
            "crc", f"message at offset {offset} is corrupt: stored CRC {crc}, computed {actual}",
            pos)
    if magic == MAGIC_V1:
        if size < MESSAGE_OVERHEAD_V1:
            raise InvalidRecordError(
                "short_header", f"v1 message size {size} is smaller than its header", pos)
        (timestamp,) = struct.unpack_from(">q", buf, pos + 6)
        cursor = pos + _HEAD_V1.size
    else:
        timestamp = NO_TIMESTAMP
        cursor = pos + _HEAD_V0.size
    if attributes & _CODEC_MASK > _MAX_LEGACY_CODEC:
        raise InvalidRecordError(
            "codec", f"compression codec {attributes & _CODEC_MASK} needs message format v2",
            pos)
    end = pos + size
    key, cursor = _read_bytes(buf, cursor, end)
    value, cursor = _read_bytes(buf, cursor, end)
    if cursor != end:
        raise InvalidRecordError(
            "record_length", f"message at offset {offset} has {end - cursor} bytes after its "
            "value", pos)
    return LegacyMessage(offset, magic, attributes, timestamp, key, value, crc)


def _read_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise InvalidRecordError("record_length", "a length runs past its message", pos)
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise InvalidRecordError("record_length", f"field length {n} runs past its message", pos)
    return bytes(buf[pos : pos + n]), pos + n


def iter_shallow(
    records: bytes | bytearray | memoryview, *, allow_partial: bool = False
) -> Iterator[tuple[int, LegacyMessage]]:
    """(position, message) of each top-level entry. A truncated last entry ends the walk
    when ``allow_partial`` (a fetched or logged set, cut at a size limit) and is an error
    otherwise (a producer's set)."""
    buf = memoryview(records)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    end = len(buf)
    pos = 0
    while pos < end:
        if pos + LOG_OVERHEAD > end:
            if allow_partial:
                return
            raise InvalidRecordError(
                "truncated", f"{end - pos} bytes at the end are not a message entry", pos)
        offset, size = _ENTRY.unpack_from(buf, pos)
        if size < 0 or pos + LOG_OVERHEAD + size > end:
            if allow_partial and size >= 0:
                return
            raise InvalidRecordError(
                "truncated", f"message of {size} bytes at offset {offset} runs past the "
                "message set", pos)
        yield pos, _parse_message(buf, pos + LOG_OVERHEAD, offset, size)
        pos += LOG_OVERHEAD + size


def _decompress_legacy(
    codec: int, magic: int, data: bytes, max_size: int
) -> bytes:
    if codec == CompressionType.LZ4:
        data = fix_lz4_header_checksum(data) if magic == MAGIC_V0 else data
    try:
        return decompress(codec, data, max_size)
    except CompressionError as exc:
        raise InvalidRecordError("wrapper", f"wrapper message does not decompress: {exc}") from exc


def iter_deep(
    wrapper: LegacyMessage, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> list[LegacyMessage]:
    """The inner messages of a wrapper with absolute offsets (Kafka's DeepRecordsIterator);
    a message without a codec is its own only message."""
    codec = wrapper.compression
    if codec == CompressionType.NONE:
        return [wrapper]
    if wrapper.value is None:
        raise InvalidRecordError("wrapper", "a compressed wrapper message has a null value")
    payload = _decompress_legacy(codec, wrapper.magic, wrapper.value, max_size)
    inner: list[LegacyMessage] = []
    for _, message in iter_shallow(payload):
        if message.compression != CompressionType.NONE:
            raise InvalidRecordError(
                "inner_compressed", "Compressed outer record should not have an inner record "
                "with a compression attribute set")
        if message.magic != wrapper.magic:
            raise InvalidRecordError(
                "inner_magic", f"inner message magic {message.magic} differs from its "
                f"wrapper's {wrapper.magic}")
        inner.append(message)
    if not inner:
        raise InvalidRecordError("wrapper", "a wrapper message holds no inner messages")
    if wrapper.magic == MAGIC_V1:
        base = wrapper.offset - inner[-1].offset
        log_append = wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
        inner = [
            m._replace(
                offset=base + m.offset,
                timestamp=wrapper.timestamp if log_append else m.timestamp,
                attributes=(m.attributes | _TIMESTAMP_TYPE_MASK) if log_append else m.attributes,
            )
            for m in inner
        ]
    return inner


def iter_messages(
    records: bytes | bytearray | memoryview, *, allow_partial: bool = False,
    max_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> Iterator[LegacyMessage]:
    """Every message with its absolute offset, wrappers opened (deep iteration)."""
    for _, message in iter_shallow(records, allow_partial=allow_partial):
        yield from iter_deep(message, max_size)


# -- writing -------------------------------------------------------------------------------


def _encode_message(
    magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """The message bytes (no entry header), CRC included."""
    body = bytearray()
    if magic == MAGIC_V0:
        body += struct.pack(">bb", magic, attributes)
    else:
        body += struct.pack(">bbq", magic, attributes, timestamp)
    for field in (key, value):
        if field is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _I32.pack(len(field))
            body += field
    return _U32.pack(zlib.crc32(body)) + bytes(body)


def _entry(offset: int, message: bytes) -> bytes:
    return _ENTRY.pack(offset, len(message)) + message


class LegacyBuilder:
    """Builds a v0/v1 message set: plain messages, or one wrapper when compressed.

    Offsets are absolute; in a v1 wrapper they are written relative to the first, and the
    wrapper takes the last offset and the max timestamp (or the LogAppendTime given)."""

    __slots__ = ("_compression", "_entries", "_log_append_time", "_magic", "_max_timestamp")

    def __init__(
        self, magic: int, compression: CompressionType = CompressionType.NONE,
        log_append_time: int | None = None,
    ) -> None:
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise ValueError(f"magic {magic} is not a legacy message format")
        if int(compression) > _MAX_LEGACY_CODEC:
            raise ValueError(f"{CompressionType(compression).name} needs message format v2")
        self._magic = magic
        self._compression = compression
        self._log_append_time = log_append_time
        self._entries: list[tuple[int, int, bytes | None, bytes | None]] = []
        self._max_timestamp = NO_TIMESTAMP

    def append(
        self, offset: int, timestamp: int, key: bytes | None, value: bytes | None
    ) -> None:
        if self._entries and offset <= self._entries[-1][0]:
            raise ValueError("offsets must increase within a message set")
        if self._magic == MAGIC_V0:
            timestamp = NO_TIMESTAMP
        self._entries.append((offset, timestamp, key, value))
        self._max_timestamp = max(self._max_timestamp, timestamp)

    def __len__(self) -> int:
        return len(self._entries)

    def build(self) -> bytes:
        magic = self._magic
        ts_bit = _TIMESTAMP_TYPE_MASK if (
            magic == MAGIC_V1 and self._log_append_time is not None) else 0
        if self._compression == CompressionType.NONE:
            return b"".join(
                _entry(offset, _encode_message(
                    magic, ts_bit, self._stamp(timestamp), key, value))
                for offset, timestamp, key, value in self._entries
            )
        if not self._entries:
            return b""
        first = self._entries[0][0]
        inner = b"".join(
            _entry(offset - first if magic == MAGIC_V1 else offset,
                   _encode_message(magic, ts_bit, self._stamp(timestamp), key, value))
            for offset, timestamp, key, value in self._entries
        )
        value = compress_legacy(self._compression, magic, inner)
        wrapper_ts = (
            self._log_append_time if self._log_append_time is not None else self._max_timestamp
        )
        wrapper = _encode_message(magic, int(self._compression) | ts_bit,
                                  wrapper_ts if magic == MAGIC_V1 else NO_TIMESTAMP, None, value)
        return _entry(self._entries[-1][0], wrapper)

    def _stamp(self, timestamp: int) -> int:
        return self._log_append_time if self._log_append_time is not None else timestamp


# lz4 level of down-converted wrappers: cramjam's default (4, high compression) runs at a
# fifth of the speed of level 1 for some 10 % smaller output; a fetch pays it per request.
_LZ4_LEVEL = 1


def compress_legacy(codec: CompressionType, magic: int, data: bytes) -> bytes:
    if codec != CompressionType.LZ4:
        return compress(codec, data)
    # Independent blocks, no content checksum, as Kafka's KafkaLZ4BlockOutputStream.
    compressor = cramjam.lz4.Compressor(
        level=_LZ4_LEVEL, content_checksum=False, block_linked=False)
    compressor.compress(data)
    out = bytes(compressor.finish())
    return break_lz4_header_checksum(out) if magic == MAGIC_V0 else out


# -- the lz4 frame header checksum of magic 0 (KAFKA-3160) ---------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_CONTENT_SIZE_FLAG = 0x08


def _lz4_descriptor_end(frame: bytes | bytearray) -> int:
    """Index of the header checksum byte (after magic, FLG, BD and the optional size)."""
    if len(frame) < 7 or bytes(frame[:4]) != _LZ4_MAGIC:
        raise InvalidRecordError("wrapper", "lz4 payload does not start with an lz4 frame")
    return 6 + (8 if frame[4] & _CONTENT_SIZE_FLAG else 0)


def fix_lz4_header_checksum(frame: bytes) -> bytes:
    """The frame with the checksum LZ4 defines (xxh32 of the descriptor, second byte),
    whatever byte was there: Kafka's magic-0 reader ignores it."""
    hc = _lz4_descriptor_end(frame)
    out = bytearray(frame)
    out[hc] = (xxh32(bytes(frame[4:hc])) >> 8) & 0xFF
    return bytes(out)


def break_lz4_header_checksum(frame: bytes) -> bytes:
    """The frame with the checksum old Kafka wrote (xxh32 over the frame magic as well)."""
    hc = _lz4_descriptor_end(frame)
    out = bytearray(frame)
    out[hc] = (xxh32(bytes(frame[:hc])) >> 8) & 0xFF
    return bytes(out)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 (for the few bytes of an lz4 frame descriptor; not for bulk data)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            lanes = struct.unpack_from("<4I", data, pos)
            v1 = (_rotl((v1 + lanes[0] * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + lanes[1] * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + lanes[2] * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + lanes[3] * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# -- conversions ---------------------------------------------------------------------------


class Converted(NamedTuple):
    """A producer's v0/v1 message set as one v2 batch (offsets from 0, to be assigned)."""

    batch: bytes
    record_count: int
    compression: CompressionType


def to_record_batch(
    records: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> Converted:
    """Validate a producer's message set (CRCs, sizes, wrappers) and convert it to one
    RecordBatch v2 with offset deltas 0..n-1, as Kafka's LogValidator converts to v2 before
    storing. v0 messages get NO_TIMESTAMP (-1); v1 messages keep theirs. The batch's codec
    is the wrappers' (the topic's ``compression.type`` applies afterwards, as for v2).
    Inner offsets are not checked: like Kafka ("some older clients do not implement the V1
    internal offsets correctly") the broker assigns offsets anyway."""
    messages: list[LegacyMessage] = []
    codec = CompressionType.NONE
    for _, message in iter_shallow(records):
        if message.compression != CompressionType.NONE:
            codec = CompressionType(message.compression)
        messages.extend(iter_deep(message, max_size))
    if not messages:
        raise InvalidRecordError("empty", "no messages in the message set")
    builder = BatchBuilder(compression=codec)
    for message in messages:
        builder.append(message.key, message.value, message.timestamp)
    return Converted(builder.build(), len(messages), codec)


class DownConverted(NamedTuple):
    data: bytes
    messages: int
    batches: int


def down_convert(
    records: bytes | bytearray | memoryview, magic: int, first_offset: int, max_bytes: int,
    *, min_one: bool = True, max_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> DownConverted:
    """Kafka's ``RecordsUtil.downConvert`` for a fetch: the v2 batches of ``records`` (a
    region of a log, maybe cut inside its last batch) as a v0/v1 message set.

    Records below ``first_offset`` are skipped, control batches dropped, record headers
    dropped (v0/v1 have none). A compressed batch becomes one wrapper with the same codec
    (zstd cannot: :class:`InvalidRecordError` "codec", the fetch answers
    UNSUPPORTED_COMPRESSION_TYPE as Kafka does); an uncompressed one, plain messages. The
    output stops before the batch that would take it past ``max_bytes``, except that the
    first batch is always converted when ``min_one`` (an uncompressed one cut after the
    message that passes ``max_bytes``: whole messages, enough to progress). v0/v1 entries
    found in the region (old segments) are passed on as they are, or converted down from v1
    to v0."""
    out: list[bytes] = []
    total = 0
    count = 0
    batches = 0
    room = [max_bytes]  # what is left, read by the generator as it converts
    for piece, n in _converted_pieces(records, magic, first_offset, max_size, room):
        if total + len(piece) > max_bytes and (out or not min_one):
            break
        out.append(piece)
        total += len(piece)
        room[0] = max_bytes - total
        count += n
        batches += 1
        if room[0] <= 0:
            break
    return DownConverted(b"".join(out), count, batches)


def _converted_pieces(
    records: bytes | bytearray | memoryview, magic: int, first_offset: int, max_size: int,
    room: list[int],
) -> Iterator[tuple[bytes, int]]:
    view = memoryview(records)
    end = len(view)
    pos = 0
    while pos + LOG_OVERHEAD < end:
        entry_magic = int(view[pos + _MAGIC_POSITION]) if pos + _MAGIC_POSITION < end else -1
        if entry_magic >= 2:
            batch_header = next(iter_batches(view[pos:]), None)
            if batch_header is None:
                return  # the region ends inside this batch
            size = batch_header.size
            if pos and batch_header.compression and size > room[0]:
                # A wrapper is never smaller than the batch it comes from (v0/v1
                # messages are larger than v2 records): it would not fit, so it is not
                # converted only to be dropped.
                return
            piece = _batch_to_legacy(view[pos : pos + size], batch_header, magic,
                                     first_offset, max_size, room[0])
            pos += size
        else:
            (_, msg_size) = _ENTRY.unpack_from(view, pos)
            size = LOG_OVERHEAD + msg_size
            if msg_size < 0 or pos + size > end:
                return
            piece = _legacy_to_legacy(view[pos : pos + size], magic, first_offset, max_size)
            pos += size
        if piece is not None:
            yield piece


def _batch_to_legacy(
    batch: memoryview, header: BatchHeader, magic: int, first_offset: int, max_size: int,
    limit: int,
) -> tuple[bytes, int] | None:
    """One v2 batch as plain messages or one wrapper. Records are decoded by the native
    column builder (the Spark connector's), and messages packed with one ``struct`` call
    and one CRC32 each. Uncompressed output stops once it passes ``limit`` (what follows
    would be cut off anyway), so a large batch fetched piecewise is not converted whole
    by every fetch; the first message always goes)."""
    if header.is_control or header.last_offset < first_offset:
        return None
    codec = header.compression
    if int(codec) > _MAX_LEGACY_CODEC:
        raise InvalidRecordError(
            "codec", f"{codec.name} batches cannot be converted to message format v{magic}")
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    builder = new_builder(headers=False)
    try:
        rows = builder.add(
            records_payload(batch, max_size), header.record_count, header.base_offset,
            header.base_timestamp, header.max_timestamp, 1 if log_append else 0,
            first_offset, _NO_LIMIT,
        )
    except ValueError as exc:
        raise InvalidRecordError("record", f"batch at offset {header.base_offset}: {exc}") from None
    if not rows:
        return None
    _, offsets_buf, timestamps_buf, _, keys, values, _ = builder.finish()
    offsets = memoryview(offsets_buf).cast("q")
    timestamps = memoryview(timestamps_buf).cast("q")
    attributes = _TIMESTAMP_TYPE_MASK if (log_append and magic == MAGIC_V1) else 0
    compressed = codec != CompressionType.NONE
    base = offsets[0] if (compressed and magic == MAGIC_V1) else 0
    parts, count = _pack_messages(magic, attributes, rows, offsets, timestamps, keys, values,
                                  base, _NO_LIMIT if compressed else limit)
    inner = b"".join(parts)
    if not compressed:
        return inner, count
    value = compress_legacy(codec, magic, inner)
    wrapper_ts = max(timestamps) if magic == MAGIC_V1 else NO_TIMESTAMP
    wrapper = _encode_message(magic, int(codec) | attributes, wrapper_ts, None, value)
    return _entry(offsets[rows - 1], wrapper), count


_NO_LIMIT = (1 << 62)
_V0_HEAD = struct.Struct(">bbi")  # magic, attributes, key length
_V1_HEAD = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length
_ENTRY_CRC = struct.Struct(">qiI")  # offset, message size, crc


def _pack_messages(
    magic: int, attributes: int, rows: int, offsets: memoryview, timestamps: memoryview,
    keys: tuple[Any, Any, Any, int], values: tuple[Any, Any, Any, int], base: int, limit: int,
) -> tuple[list[bytes], int]:
    kvalid, koffs, kdata, _ = keys
    vvalid, voffs, vdata, _ = values
    kvalid, vvalid = bytes(kvalid), bytes(vvalid)
    kdata, vdata = bytes(kdata), bytes(vdata)
    koff = memoryview(koffs).cast("i")
    voff = memoryview(voffs).cast("i")
    pack_entry = _ENTRY_CRC.pack
    pack_len = _I32.pack
    crc32 = zlib.crc32
    parts: list[bytes] = []
    total = 0
    count = 0
    for i in range(rows):
        bit = 1 << (i & 7)
        if kvalid[i >> 3] & bit:
            key = kdata[koff[i] : koff[i + 1]]
            key_length = len(key)
        else:
            key, key_length = b"", -1
        if vvalid[i >> 3] & bit:
            value = vdata[voff[i] : voff[i + 1]]
            value_length = len(value)
        else:
            value, value_length = b"", -1
        if magic == MAGIC_V1:
            head = _V1_HEAD.pack(1, attributes, timestamps[i], key_length)
        else:
            head = _V0_HEAD.pack(0, attributes, key_length)
        body = head + key + pack_len(value_length) + value
        total += 16 + len(body)
        if total > limit and count:
            break
        parts.append(pack_entry(offsets[i] - base, len(body) + 4, crc32(body)))
        parts.append(body)
        count += 1
    return parts, count


def _legacy_to_legacy(
    entry: memoryview, magic: int, first_offset: int, max_size: int
) -> tuple[bytes, int] | None:
    (_, message), = iter_shallow(entry)
    inner = iter_deep(message, max_size)
    if inner[-1].offset < first_offset:
        return None
    if message.magic <= magic:
        return bytes(entry), len(inner)
    log_append = None  # v1 -> v0: timestamps go
    builder = LegacyBuilder(magic, CompressionType(message.compression), log_append)
    for m in inner:
        builder.append(m.offset, m.timestamp, m.key, m.value)
    return builder.build(), len(inner)


def build_message_set(
    magic: int, messages: Iterable[tuple[int, int, bytes | None, bytes | None]],
    compression: CompressionType = CompressionType.NONE,
) -> bytes:
    """Convenience: (offset, timestamp, key, value) tuples as a message set."""
    builder = LegacyBuilder(magic, compression)
    for offset, timestamp, key, value in messages:
        builder.append(offset, timestamp, key, value)
    return builder.build()



# -- segments of old formats (a log dir left by a Kafka before 0.11) ----------------------


def entry_header(data: bytes | bytearray | memoryview, at: int) -> BatchHeader | None:
    """A :class:`BatchHeader` standing for the v0/v1 entry at the start of ``data`` (read
    from ``at`` in a file), so that the log walks, indexes and reads old entries as it does
    batches: base and last offset are the entry's offset (a wrapper's is its last inner
    message's: Kafka's ``AbstractLegacyRecordBatch.lastOffset``), the max timestamp its
    timestamp (v1) or -1 (v0), no producer, no leader epoch. None if ``data`` is too short."""
    if len(data) < _MAGIC_POSITION + 2:
        return None
    offset, size = _ENTRY.unpack_from(data, 0)
    crc, magic, attributes = _HEAD_V0.unpack_from(data, LOG_OVERHEAD)
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        if len(data) < LOG_OVERHEAD + _HEAD_V1.size:
            return None
        (timestamp,) = struct.unpack_from(">q", data, LOG_OVERHEAD + _HEAD_V0.size)
    if size < MESSAGE_OVERHEAD_V0:
        return None
    return BatchHeader(offset, size, -1, magic, crc, attributes, 0, timestamp, timestamp,
                       -1, -1, -1, 1, at)


def validate_entry(buf: bytes | bytearray | memoryview, position: int) -> BatchHeader:
    """Check the v0/v1 entry at ``position`` (sizes, CRC32 of the shallow message, as
    Kafka's ``LegacyRecord.ensureValid`` on recovery) and return its header."""
    view = memoryview(buf)
    if position + LOG_OVERHEAD > len(view):
        raise InvalidRecordError("truncated", "entry header runs past the end", position)
    (_, size) = _ENTRY.unpack_from(view, position)
    end = position + LOG_OVERHEAD + size
    if size < 0 or end > len(view):
        raise InvalidRecordError("truncated", "message runs past the end", position)
    entry = view[position:end]
    list(iter_shallow(entry))
    header = entry_header(entry, position)
    if header is None:
        raise InvalidRecordError("short_header", "message too short", position)
    return header


def up_convert(records: bytes | bytearray | memoryview, first_offset: int) -> bytes:
    """The v0/v1 entries of a region as RecordBatch v2 (one batch per entry: a wrapper's
    messages with its codec, LogAppendTime kept; v0 messages with timestamp -1), v2
    batches as they are: what a modern fetcher reads from a segment an old Kafka wrote.
    Messages below ``first_offset`` inside a wrapper are kept (clients skip them, as with
    a v2 batch); a trailing partial entry ends the region."""
    view = memoryview(records)
    end = len(view)
    out: list[bytes | memoryview] = []
    pos = 0
    while pos + LOG_OVERHEAD <= end:
        (_, size) = _ENTRY.unpack_from(view, pos)
        stop = pos + LOG_OVERHEAD + size
        if size < 0 or stop > end or pos + _MAGIC_POSITION >= end:
            break
        entry = view[pos:stop]
        if entry[_MAGIC_POSITION] >= 2:
            out.append(entry)
        else:
            ((_, message),) = iter_shallow(entry)
            inner = iter_deep(message)
            if inner[-1].offset >= first_offset:
                log_append = message.timestamp_type == TimestampType.LOG_APPEND_TIME
                builder = BatchBuilder(
                    compression=CompressionType(message.compression),
                    base_offset=inner[0].offset,
                    timestamp_type=(TimestampType.LOG_APPEND_TIME if log_append
                                    else TimestampType.CREATE_TIME),
                )
                try:
                    for m in inner:
                        builder.append(m.key, m.value, m.timestamp,
                                       offset_delta=m.offset - inner[0].offset)
                except ValueError as exc:  # inner offsets going backwards
                    raise InvalidRecordError("inner_offsets", str(exc), pos) from exc
                out.append(builder.build())
        pos = stop
    return b"".join(out)
