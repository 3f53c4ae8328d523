"""Hot-path decoder for Produce request bodies (versions 0-11), without copying records.

How it works
------------
kio decodes each partition's records into a fresh ``bytes`` object: a copy of every
produced byte, before the log copies it again to rewrite offsets. This reader walks the
same layout with ``struct`` and hands each partition's records out as a ``memoryview`` of
the request frame. When the frame is a ``bytearray`` (as :class:`FrameDecoder` gives),
the view is writable and the log rewrites base offsets and leader epochs in it. A
produced byte is then copied three times: from the socket into a received chunk, from the
chunks into the frame, from the frame into the page cache (it was five).

Layout (Kafka's ``ProduceRequest.json``; "flexible" = v9+: compact strings and arrays,
tagged fields after every struct)::

    ProduceRequest
      transactional_id     nullable string       v3+
      acks                 int16
      timeout_ms           int32
      topic_data           array of
        name                 string
        partition_data       array of
          index                int32
          records              nullable bytes (int32 length; compact from v9)
          <tagged fields>      v9+
        <tagged fields>      v9+
      <tagged fields>      v9+

Tagged fields are skipped (none is defined for these versions). Anything malformed —
truncated, a negative length other than null, a length past the frame, an array count
its smallest elements could not fit in the bytes left, bad UTF-8 — is
:class:`InvalidRequestError`, as kio's decoding failures are. The unit tests check the
result against kio's decoding of the same bytes for every version.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, NoReturn

from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import read_uvarint, refuse_count, skip_tagged_fields

__all__ = [
    "PartitionProduceData",
    "ProduceRequestView",
    "TopicProduceData",
    "read_produce_request",
]

MIN_VERSION = 0
_TRANSACTIONAL_ID = 3
MAX_VERSION = 11
_FLEXIBLE = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")  # ... and the topic array's length (v3-8)
_INDEX_LENGTH = struct.Struct(">ii")  # partition index, records length (v3-8)
# The smallest array elements: a topic is a name length and a partition count (and
# tagged fields when flexible); a partition an index, a records length (and tags).
_TOPIC_MIN = 6
_COMPACT_TOPIC_MIN = 3
_COMPACT_PARTITION_MIN = 6


PartitionProduceData = tuple[int, "memoryview | None"]
"""(index, records): a plain tuple, the cheapest object to make once per partition."""


class TopicProduceData(NamedTuple):
    name: str
    partition_data: tuple[PartitionProduceData, ...]


class ProduceRequestView(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def read_produce_request(
    frame: bytes | bytearray | memoryview, offset: int, version: int
) -> ProduceRequestView:
    """Decode the Produce request body starting at ``offset`` of ``frame``."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce request v{version} is not supported by this reader")
    view = memoryview(frame)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    try:
        if version >= _FLEXIBLE:
            return _read_flexible(view, offset)
        return _read_legacy(view, offset, version >= _TRANSACTIONAL_ID)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot decode Produce v{version} request: {exc!r}") from exc


# The two layouts are read by two straight-line functions, not one generic walker: this
# runs for every partition of every Produce request, and call overhead per field made a
# generic reader several times slower than kio's native one.


def _read_legacy(view: memoryview, pos: int, with_transactional_id: bool) -> ProduceRequestView:
    end = len(view)
    transactional_id = None
    if with_transactional_id:
        (n,) = _I16.unpack_from(view, pos)
        pos += 2
        if n >= 0:
            transactional_id = _text(view, pos, n, end)
            pos += n
        elif n != -1:
            raise InvalidRequestError(f"negative string length {n} in a Produce request")
    acks, timeout_ms, topic_count = _ACKS_TIMEOUT_COUNT.unpack_from(view, pos)
    pos += _ACKS_TIMEOUT_COUNT.size
    if topic_count < 0 or topic_count * _TOPIC_MIN > end - pos:
        _refuse_count(topic_count, _TOPIC_MIN, end - pos)
    topics = []
    for _ in range(topic_count):
        (n,) = _I16.unpack_from(view, pos)
        pos += 2
        if n < 0:
            raise InvalidRequestError("null topic name in a Produce request")
        name = _text(view, pos, n, end)
        pos += n
        (count,) = _I32.unpack_from(view, pos)
        pos += 4
        if count < 0 or count * _INDEX_LENGTH.size > end - pos:
            _refuse_count(count, _INDEX_LENGTH.size, end - pos)
        partitions = []
        for _ in range(count):
            index, n = _INDEX_LENGTH.unpack_from(view, pos)
            pos += 8
            records = None
            if n >= 0:
                if n > end - pos:
                    raise InvalidRequestError(f"records of {n} bytes run past the request")
                records = view[pos : pos + n]
                pos += n
            elif n != -1:
                raise InvalidRequestError(f"negative records length {n} in a Produce request")
            partitions.append((index, records))
        topics.append(TopicProduceData(name, tuple(partitions)))
    return ProduceRequestView(transactional_id, acks, timeout_ms, tuple(topics))


def _read_flexible(view: memoryview, pos: int) -> ProduceRequestView:
    end = len(view)
    # Varints inline where they fit in one byte (every length and count below 128),
    # counts checked inline (the refusal alone is a call): this runs on every request.
    n = view[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(view, pos)
    transactional_id = None
    if n:
        n -= 1
        transactional_id = _text(view, pos, n, end)
        pos += n
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(view, pos)
    pos += _ACKS_TIMEOUT.size
    topic_count = view[pos]
    if topic_count < 0x80:
        pos += 1
    else:
        topic_count, pos = read_uvarint(view, pos)
    if not topic_count:
        raise InvalidRequestError("null array in a Produce request")
    if (topic_count - 1) * _COMPACT_TOPIC_MIN > end - pos:
        _refuse_count(topic_count - 1, _COMPACT_TOPIC_MIN, end - pos)
    topics = []
    for _ in range(topic_count - 1):
        n = view[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_uvarint(view, pos)
        if not n:
            raise InvalidRequestError("null topic name in a Produce request")
        n -= 1
        if n > end - pos:
            raise InvalidRequestError(f"string of {n} bytes runs past the request")
        name = str(view[pos : pos + n], "utf-8")
        pos += n
        count = view[pos]
        if count < 0x80:
            pos += 1
        else:
            count, pos = read_uvarint(view, pos)
        if not count:
            raise InvalidRequestError("null array in a Produce request")
        if (count - 1) * _COMPACT_PARTITION_MIN > end - pos:
            _refuse_count(count - 1, _COMPACT_PARTITION_MIN, end - pos)
        partitions = []
        for _ in range(count - 1):
            (index,) = _I32.unpack_from(view, pos)
            # The records length, inline for one and two bytes (batches below 16 KiB).
            n = view[pos + 4]
            if n < 0x80:
                pos += 5
            elif (second := view[pos + 5]) < 0x80:
                n = (n & 0x7F) | (second << 7)
                pos += 6
            else:
                n, pos = read_uvarint(view, pos + 4)
            records = None
            if n:
                n -= 1
                if n > end - pos:
                    raise InvalidRequestError(f"records of {n} bytes run past the request")
                records = view[pos : pos + n]
                pos += n
            partitions.append((index, records))
            pos = skip_tagged_fields(view, pos, end) if view[pos] else pos + 1
        topics.append(TopicProduceData(name, tuple(partitions)))
        pos = skip_tagged_fields(view, pos, end) if view[pos] else pos + 1
    pos = skip_tagged_fields(view, pos, end) if view[pos] else pos + 1
    return ProduceRequestView(transactional_id, acks, timeout_ms, tuple(topics))


def _text(view: memoryview, pos: int, n: int, end: int) -> str:
    if n > end - pos:
        raise InvalidRequestError(f"string of {n} bytes runs past the request")
    return str(view[pos : pos + n], "utf-8")


def _refuse_count(count: int, min_size: int, remaining: int) -> NoReturn:
    """Refuse a negative count, or one whose elements (``min_size`` bytes at least)
    could not fit in the bytes that remain, before looping over it (the callers test
    ``count < 0 or count * min_size > remaining`` inline)."""
    if count < 0:
        raise InvalidRequestError(f"array length {count} in a Produce request")
    raise refuse_count("a Produce request's array", count, min_size, remaining)

