"""Byte layouts of __consumer_offsets records and the group -> partition mapping."""

from __future__ import annotations

import struct

import pytest

from odradek.coordinator.group_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from odradek.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_value,
    java_string_hash,
    partition_for,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),  # Java's well-known collision: "Aa".hashCode() == "BB".hashCode()
    ("BB", 2112),
    ("polygenelubricants", -(1 << 31)),  # the classic Integer.MIN_VALUE string
    ("\u00e9t\u00e9", (0xE9 * 31 + 0x74) * 31 + 0xE9),
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # surrogate pair: two UTF-16 units
])
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_hash_wraps_like_an_int() -> None:
    h = 0
    for ch in "consumer-group-with-a-long-name-1234567890":
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    assert java_string_hash("consumer-group-with-a-long-name-1234567890") == signed


def test_partition_for_uses_kafkas_abs() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    names = (f"consumer-group-{i}" for i in range(1000))
    negative = next(g for g in names if java_string_hash(g) < 0)
    assert partition_for(negative, 50) == abs(java_string_hash(negative)) % 50


def test_offset_commit_key_layout() -> None:
    key = OffsetCommitKey("grp", "topic", 7)
    raw = key.encode()
    assert raw == (struct.pack(">h", 1) + struct.pack(">h", 3) + b"grp"
                   + struct.pack(">h", 5) + b"topic" + struct.pack(">i", 7))
    assert decode_key(raw) == key
    assert decode_key(struct.pack(">h", 0) + raw[2:]) == key  # version 0: same fields


def test_group_metadata_key_layout() -> None:
    raw = GroupMetadataKey("grp").encode()
    assert raw == struct.pack(">hh", 2, 3) + b"grp"
    assert decode_key(raw) == GroupMetadataKey("grp")
    assert decode_key(struct.pack(">hh", 3, 3) + b"grp") is None  # not a classic record


def test_offset_commit_value_v3_layout() -> None:
    value = OffsetCommitValue(42, 5, "meta", 1700000000000)
    raw = value.encode()
    assert raw == (struct.pack(">hqi", 3, 42, 5) + struct.pack(">h", 4) + b"meta"
                   + struct.pack(">q", 1700000000000))
    assert decode_value(OffsetCommitKey("g", "t", 0), raw) == value


def test_offset_value_with_expire_timestamp_is_written_as_v1() -> None:
    value = OffsetCommitValue(42, -1, "", 10, 99)
    raw = value.encode()
    assert raw == struct.pack(">hq", 1, 42) + struct.pack(">h", 0) + struct.pack(">qq", 10, 99)
    assert decode_value(OffsetCommitKey("g", "t", 0), raw) == value


def test_older_offset_values_decode() -> None:
    key = OffsetCommitKey("g", "t", 0)
    v1 = struct.pack(">hq", 1, 9) + struct.pack(">h", 0) + struct.pack(">qq", 10, 20)
    assert decode_value(key, v1) == OffsetCommitValue(9, -1, "", 10, 20)
    v0 = struct.pack(">hq", 0, 9) + struct.pack(">h", 1) + b"m" + struct.pack(">q", 10)
    assert decode_value(key, v0) == OffsetCommitValue(9, -1, "m", 10)
    v4 = struct.pack(">hqi", 4, 9, 2) + bytes([2]) + b"m" + struct.pack(">q", 10) + bytes([0])
    assert decode_value(key, v4) == OffsetCommitValue(9, 2, "m", 10)


def _group_value() -> GroupMetadataValue:
    return GroupMetadataValue(
        protocol_type="consumer", generation=3, protocol="range", leader="m1",
        current_state_timestamp=123,
        members=(
            MemberMetadataValue("m1", None, "c1", "/127.0.0.1", 300000, 10000, b"sub", b"asg"),
            MemberMetadataValue("m2", "inst", "c2", "/10.0.0.1", 300000, 10000, b"", b""),
        ),
    )


def test_group_metadata_value_v3_round_trip_and_layout() -> None:
    value = _group_value()
    raw = value.encode()
    assert raw[:2] == struct.pack(">h", 3)
    assert raw[2:4 + 8] == struct.pack(">h", 8) + b"consumer"
    assert decode_value(GroupMetadataKey("g"), raw) == value


def test_group_metadata_value_v4_flexible_decodes() -> None:
    def cs(text: str | None) -> bytes:
        return bytes([0]) if text is None else bytes([len(text) + 1]) + text.encode()

    raw = (struct.pack(">h", 4) + cs("consumer") + struct.pack(">i", 3) + cs("range") + cs("m1")
           + struct.pack(">q", 123) + bytes([2])
           + cs("m1") + cs(None) + cs("c1") + cs("/127.0.0.1") + struct.pack(">ii", 300000, 10000)
           + bytes([4]) + b"sub" + bytes([4]) + b"asg" + bytes([1, 7, 1, 0])  # one unknown tag
           + bytes([0]))
    decoded = decode_value(GroupMetadataKey("g"), raw)
    assert isinstance(decoded, GroupMetadataValue)
    assert decoded.members == (
        MemberMetadataValue("m1", None, "c1", "/127.0.0.1", 300000, 10000, b"sub", b"asg"),)
    assert decoded.leader == "m1" and decoded.generation == 3


def test_truncated_records_are_rejected() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01\x00\x05ab")
    with pytest.raises(RecordFormatError):
        decode_value(GroupMetadataKey("g"), _group_value().encode()[:-3])
    with pytest.raises(RecordFormatError):
        decode_value(OffsetCommitKey("g", "t", 0), struct.pack(">h", 9))


def test_consumer_protocol_assignment_and_subscription() -> None:
    raw = encode_assignment({"a": [0, 1, 2], "b": [4]})
    assert decode_assignment(raw).partitions == {"a": (0, 1, 2), "b": (4,)}
    assert decode_assignment(b"").partitions == {}
    sub = (struct.pack(">hi", 1, 2) + struct.pack(">h", 1) + b"x" + struct.pack(">h", 1) + b"y"
           + struct.pack(">i", -1) + struct.pack(">i", 0))
    assert decode_subscription(sub).topics == ("x", "y")
