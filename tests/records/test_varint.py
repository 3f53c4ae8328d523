"""Zig-zag varints/varlongs (odradek.records.varint), checked against known vectors and
kafka-python's own encoder/decoder."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from odradek.records.varint import (
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    VarintError,
    encode_varint,
    encode_varlong,
    read_varint,
    read_varlong,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

VECTORS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (-65, b"\x81\x01"),
    (150, b"\xac\x02"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
    (-(2**63), b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), VECTORS)
def test_known_vectors(value: int, encoded: bytes) -> None:
    assert encode_varlong(value) == encoded
    assert read_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "encoded"), [v for v in VECTORS if -(2**31) <= v[0] < 2**31])
def test_int32_vectors_fit_in_five_bytes(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert len(encoded) <= MAX_VARINT_BYTES
    assert read_varint(encoded, 0) == (value, len(encoded))


def test_read_at_offset_returns_next_position() -> None:
    buf = b"\xaa\xbb" + encode_varint(300) + encode_varint(-7) + b"\xcc"
    value, pos = read_varint(buf, 2)
    assert value == 300
    value, pos = read_varint(buf, pos)
    assert value == -7
    assert buf[pos:] == b"\xcc"


def test_reads_bytearray_and_memoryview() -> None:
    data = encode_varlong(-123456789)
    assert read_varlong(bytearray(data), 0)[0] == -123456789
    assert read_varlong(memoryview(b"x" + data), 1)[0] == -123456789


@pytest.mark.parametrize("buf", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_varint_raises(buf: bytes) -> None:
    with pytest.raises(VarintError, match="past the end"):
        read_varint(buf, 0)


def test_read_past_end_position_raises() -> None:
    with pytest.raises(VarintError):
        read_varint(b"\x02", 1)


def test_varint_longer_than_five_bytes_raises() -> None:
    with pytest.raises(VarintError, match="longer than 5"):
        read_varint(b"\x80" * 5 + b"\x01", 0)


def test_varlong_accepts_ten_bytes_but_not_eleven() -> None:
    assert read_varlong(b"\xff" * 9 + b"\x01", 0)[1] == MAX_VARLONG_BYTES
    with pytest.raises(VarintError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)


def test_varint_error_is_a_value_error() -> None:
    assert issubclass(VarintError, ValueError)


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) <= MAX_VARLONG_BYTES
    assert read_varlong(encoded, 0) == (value, len(encoded))


@given(INT32)
def test_varint_matches_kafka_python(value: int) -> None:
    out = io.BytesIO()
    kp_encode_varint(value, lambda b: out.write(bytes([b])))
    theirs = out.getvalue()
    assert encode_varint(value) == theirs
    assert read_varint(theirs, 0) == kp_decode_varint(theirs, 0)


@given(st.lists(INT64, max_size=20))
def test_concatenated_varlongs_decode_in_sequence(values: list[int]) -> None:
    buf = b"".join(encode_varlong(v) for v in values)
    pos = 0
    decoded = []
    for _ in values:
        value, pos = read_varlong(buf, pos)
        decoded.append(value)
    assert decoded == values
    assert pos == len(buf)
