"""Kafka wire primitives shared by the hot-path response writers (fetch, produce).

Non-flexible versions use int16-length strings and int32-length arrays; flexible versions
(KIP-482) use "compact" forms: an unsigned varint of length + 1, with 0 meaning null, and
end every struct with tagged fields (an unsigned varint count, then tag, size, bytes).
"""

from __future__ import annotations

import struct

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
