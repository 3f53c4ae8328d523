"""Kafka wire primitives shared by the hot-path readers and writers (fetch, produce, …).

Non-flexible versions use int16-length strings and int32-length arrays; flexible versions
(KIP-482) use "compact" forms: an unsigned varint of length + 1, with 0 meaning null, and
end every struct with tagged fields (an unsigned varint count, then tag, size, bytes).
"""

from __future__ import annotations

import struct

from odradek.protocol.errors import InvalidRequestError

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it. A varint is at most five
    bytes (32 bits, KIP-482): a longer one is :class:`InvalidRequestError`; running off
    the end of ``buf`` is ``IndexError``, for the caller to report as truncation."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise InvalidRequestError("varint longer than 5 bytes")


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    """The position after the tagged-field section at ``pos``, none of whose tags the
    reader knows (Kafka keeps such fields unread). A field running past ``end`` is
    :class:`InvalidRequestError`; running off ``buf`` in a varint is ``IndexError``, as
    for :func:`read_uvarint`."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if size > end - pos:
            raise InvalidRequestError("tagged field runs past the end of the buffer")
        pos += size
    return pos


def string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    if flexible:
        return uvarint(len(raw) + 1) + raw
    return I16.pack(len(raw)) + raw


def nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else I16.pack(-1)
    return string(value, flexible)


def array_length(n: int | None, flexible: bool) -> bytes:
    if flexible:
        return uvarint(0 if n is None else n + 1)
    return I32.pack(-1 if n is None else n)


def tagged(tag: int, payload: bytes) -> bytes:
    return uvarint(tag) + uvarint(len(payload)) + payload
