"""Zig-zag varints as used inside Kafka records (protobuf encoding, KIP-98).

A record's fields are zig-zag varints (int32) and varlongs (int64): each byte carries seven
bits, low bits first, the high bit set while more bytes follow. Zig-zag maps signed to
unsigned so that small negative numbers stay short: ``(n << 1) ^ (n >> 63)``.
"""

from __future__ import annotations

MAX_VARINT_BYTES = 5  # int32
MAX_VARLONG_BYTES = 10  # int64


class VarintError(ValueError):
    """A varint ran past its buffer or past its maximum length."""


def read_varlong(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = MAX_VARLONG_BYTES
) -> tuple[int, int]:
    """Decode a zig-zag varint at ``pos``; return (value, position after it)."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise VarintError("varint runs past the end of its buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise VarintError(f"varint longer than {max_bytes} bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return read_varlong(buf, pos, MAX_VARINT_BYTES)


def encode_varlong(value: int) -> bytes:
    """Encode a signed int64 as a zig-zag varint."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


encode_varint = encode_varlong
