"""Kafka wire primitives shared by the hot-path readers and writers (fetch, produce, …).

Non-flexible versions use int16-length strings and int32-length arrays; flexible versions
(KIP-482) use "compact" forms: an unsigned varint of length + 1, with 0 meaning null, and
end every struct with tagged fields (an unsigned varint count, then tag, size, bytes).

Every count and length read from the wire is checked against the bytes that remain before
anything loops over it or allocates for it: an array declaring more elements than its
smallest element times that count could fit in is refused at once
(:class:`InvalidRequestError`), so the work of reading a body is bounded by its size, as
Kafka's generated readers bound it (``ByteBufferAccessor`` / "Tried to allocate a
collection of size N, but there are only M bytes remaining").
"""

from __future__ import annotations

import struct

from odradek.protocol.errors import InvalidRequestError

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def refuse_count(what: str, count: int, min_size: int, remaining: int) -> InvalidRequestError:
    """The error for an array of ``count`` elements of at least ``min_size`` bytes where
    only ``remaining`` bytes are left (Kafka's wording)."""
    return InvalidRequestError(
        f"tried to read {what} of {count} elements of at least {min_size} bytes, but only "
        f"{max(remaining, 0)} bytes remain"
    )


class BodyReader:
    """A cursor over a non-flexible body for hand-written decoders and transcoders: each
    read is checked against the end, and :meth:`count` refuses a count the remaining
    bytes cannot hold, so no loop driven by a count from the wire outlives the input."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str = "field") -> bytes | bytearray | memoryview:
        if n < 0 or n > self.end - self.pos:
            raise InvalidRequestError(
                f"{what} of {n} bytes at byte {self.pos}, but only {self.remaining} remain")
        start = self.pos
        self.pos = start + n
        return self.buf[start : self.pos]

    def int16(self) -> int:
        value: int = I16.unpack(self.take(2, "int16"))[0]
        return value

    def int32(self) -> int:
        value: int = I32.unpack(self.take(4, "int32"))[0]
        return value

    def count(self, min_size: int, what: str = "array") -> int:
        """An int32 element count; a null or negative count reads as 0 (the caller's
        schema decides whether null is allowed), one the remaining bytes cannot hold at
        ``min_size`` bytes an element is refused."""
        n = self.int32()
        if n <= 0:
            return 0
        if n * min_size > self.end - self.pos:
            raise refuse_count(what, n, min_size, self.end - self.pos)
        return n

    def skip_string(self, what: str = "string") -> None:
        """An int16-length string (a negative length, null, has no bytes)."""
        n = self.int16()
        if n > 0:
            self.take(n, what)


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
