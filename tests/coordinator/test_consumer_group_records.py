"""Byte layouts of KIP-848's consumer group records in __consumer_offsets (Kafka 4.0).

The golden bytes are worked out by hand from Kafka's ConsumerGroup*Key/Value JSON schemas:
key = int16 record type + int16-length strings; value = int16 version 0 + the flexible
encoding (compact lengths are unsigned varint N+1, every struct ends with its tagged
fields, 00 when there are none).
"""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator import group_records
from odradek.coordinator.consumer_group_records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    PartitionMetadata,
    RecordFormatError,
    TopicMetadata,
    TopicPartitions,
    decode_key,
    decode_value,
    kafka_uuid_string,
)

T = uuid.UUID(bytes=bytes(range(16)))
T_BYTES = bytes(range(16))
NO_TAGS = b"\x00"
V0 = b"\x00\x00"


# -- keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "raw"), [
    (ConsumerGroupMetadataKey("g"), b"\x00\x03" b"\x00\x01g"),
    (ConsumerGroupPartitionMetadataKey("g"), b"\x00\x04" b"\x00\x01g"),
    (ConsumerGroupMemberMetadataKey("g", "m1"), b"\x00\x05" b"\x00\x01g" b"\x00\x02m1"),
    (ConsumerGroupTargetAssignmentMetadataKey("grp"), b"\x00\x06" b"\x00\x03grp"),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"), b"\x00\x07" b"\x00\x01g" b"\x00\x01m"),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), b"\x00\x08" b"\x00\x01g" b"\x00\x01m"),
    (ConsumerGroupRegularExpressionKey("g", "t.*"), b"\x00\x10" b"\x00\x01g" b"\x00\x03t.*"),
])
def test_key_golden_bytes(key: object, raw: bytes) -> None:
    assert key.encode() == raw  # type: ignore[attr-defined]
    assert decode_key(raw) == key


def test_record_types_are_kafkas() -> None:
    assert sorted(CONSUMER_GROUP_RECORD_TYPES) == [3, 4, 5, 6, 7, 8, 16]


@pytest.mark.parametrize("record_type", [0, 1, 2, 9, 10, 15, 17, 20, -1])
def test_other_record_types_are_not_ours(record_type: int) -> None:
    assert decode_key(struct.pack(">h", record_type) + b"\x00\x01g\x00\x01t\x00\x00\x00\x00") \
        is None


def test_the_classic_decoder_leaves_consumer_group_keys_alone() -> None:
    """group_records.decode_key returns None for them: loading classic groups skips them."""
    assert group_records.decode_key(ConsumerGroupMetadataKey("g").encode()) is None


@pytest.mark.parametrize("raw", [
    b"\x00",  # half a record type
    b"\x00\x03",  # no group id
    b"\x00\x03\x00\x05ab",  # group id cut short
    b"\x00\x05\x00\x01g",  # member key without a member id
    b"\x00\x03\x00\x01gX",  # trailing byte
    b"\x00\x03\xff\xff",  # null group id
    b"\x00\x03\x00\x02\xff\xfe",  # not UTF-8
])
def test_bad_keys_are_refused(raw: bytes) -> None:
    with pytest.raises(RecordFormatError, match="key"):
        decode_key(raw)


# -- values: golden bytes --------------------------------------------------------------


def test_group_metadata_value() -> None:
    value = ConsumerGroupMetadataValue(epoch=5)
    raw = V0 + b"\x00\x00\x00\x05" + NO_TAGS
    assert value.encode() == raw
    assert decode_value(ConsumerGroupMetadataKey("g"), raw) == value


def test_group_metadata_value_of_kafka_4_1_skips_the_metadata_hash() -> None:
    """4.1 adds MetadataHash as tagged field 0 (int64): read past it."""
    raw = V0 + b"\x00\x00\x00\x05" + b"\x01" + b"\x00\x08" + (1234).to_bytes(8, "big")
    assert decode_value(ConsumerGroupMetadataKey("g"), raw) == ConsumerGroupMetadataValue(5)


def test_partition_metadata_value() -> None:
    value = ConsumerGroupPartitionMetadataValue((
        TopicMetadata(T, "t", 3, (PartitionMetadata(0, ("a",)),)),
    ))
    raw = (
        V0
        + b"\x02"  # one topic
        + T_BYTES
        + b"\x02t"  # compact string "t"
        + b"\x00\x00\x00\x03"  # num partitions
        + b"\x02"  # one partition metadata
        + b"\x00\x00\x00\x00"  # partition 0
        + b"\x02" + b"\x02a"  # racks ["a"]
        + NO_TAGS  # partition metadata
        + NO_TAGS  # topic
        + NO_TAGS  # value
    )
    assert value.encode() == raw
    assert decode_value(ConsumerGroupPartitionMetadataKey("g"), raw) == value


def test_member_metadata_value() -> None:
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None, rack_id="r", client_id="c", client_host="/h",
        subscribed_topic_names=("t",), subscribed_topic_regex=None,
        rebalance_timeout_ms=300_000, server_assignor="uniform",
    )
    raw = (
        V0
        + b"\x00"  # instance id null
        + b"\x02r"
        + b"\x02c"
        + b"\x03/h"
        + b"\x02" + b"\x02t"  # ["t"]
        + b"\x00"  # regex null
        + b"\x00\x04\x93\xe0"  # 300000
        + b"\x08uniform"
        + NO_TAGS
    )
    assert value.encode() == raw
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), raw) == value


def test_member_metadata_value_with_classic_member_metadata() -> None:
    """Tagged field 0, a nullable struct: size = struct + 1, then varint 1 (present)."""
    value = ConsumerGroupMemberMetadataValue(
        instance_id="i", rack_id=None, client_id="", client_host="",
        subscribed_topic_names=(), subscribed_topic_regex="x.*",
        rebalance_timeout_ms=-1, server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(
            45_000, (ClassicProtocol("range", b"\x01\x02"),)
        ),
    )
    classic = (
        b"\x00\x00\xaf\xc8"  # session timeout 45000
        + b"\x02"  # one protocol
        + b"\x06range" + b"\x03\x01\x02" + NO_TAGS
        + NO_TAGS
    )
    assert len(classic) == 16
    raw = (
        V0 + b"\x02i" + b"\x00" + b"\x01" + b"\x01" + b"\x01" + b"\x04x.*"
        + b"\xff\xff\xff\xff" + b"\x00"
        + b"\x01" + b"\x00" + b"\x11" + b"\x01" + classic  # 1 field, tag 0, size 17
    )
    assert value.encode() == raw
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), raw) == value


def test_member_metadata_value_with_null_classic_member_metadata_in_its_tag() -> None:
    raw = (V0 + b"\x00\x00\x01\x01\x01\x00" + b"\x00\x00\x00\x01" + b"\x00"
           + b"\x01\x00\x01\x00")  # tag 0 present but null
    value = decode_value(ConsumerGroupMemberMetadataKey("g", "m"), raw)
    assert isinstance(value, ConsumerGroupMemberMetadataValue)
    assert value.classic_member_metadata is None


def test_target_assignment_values() -> None:
    meta = ConsumerGroupTargetAssignmentMetadataValue(3)
    assert meta.encode() == V0 + b"\x00\x00\x00\x03" + NO_TAGS
    member = ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(T, (0, 2)),))
    raw = V0 + b"\x02" + T_BYTES + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x02" + NO_TAGS \
        + NO_TAGS
    assert member.encode() == raw
    assert decode_value(ConsumerGroupTargetAssignmentMemberKey("g", "m"), raw) == member
    assert decode_value(ConsumerGroupTargetAssignmentMetadataKey("g"), meta.encode()) == meta


def test_target_assignment_metadata_of_kafka_4_3_skips_the_timestamp() -> None:
    raw = V0 + b"\x00\x00\x00\x03" + b"\x01\x00\x08" + bytes(8)
    assert decode_value(ConsumerGroupTargetAssignmentMetadataKey("g"), raw) == \
        ConsumerGroupTargetAssignmentMetadataValue(3)


def test_current_member_assignment_value() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=7, previous_member_epoch=6, state=1,
        assigned_partitions=(TopicPartitions(T, (0, 2)),),
        partitions_pending_revocation=(TopicPartitions(T, (1,)),),
    )
    raw = (
        V0
        + b"\x00\x00\x00\x07" + b"\x00\x00\x00\x06" + b"\x01"
        + b"\x02" + T_BYTES + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + NO_TAGS
        + b"\x02" + T_BYTES + b"\x02" + b"\x00\x00\x00\x01" + NO_TAGS
        + NO_TAGS
    )
    assert value.encode() == raw
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), raw) == value


def test_regular_expression_value() -> None:
    value = ConsumerGroupRegularExpressionValue(("t1",), version=42, timestamp=1000)
    raw = V0 + b"\x02\x03t1" + (42).to_bytes(8, "big") + (1000).to_bytes(8, "big") + NO_TAGS
    assert value.encode() == raw
    assert decode_value(ConsumerGroupRegularExpressionKey("g", "t.*"), raw) == value


def test_tombstone_is_none() -> None:
    assert decode_value(ConsumerGroupMetadataKey("g"), None) is None


def test_kafka_uuid_string() -> None:
    assert kafka_uuid_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID
    assert kafka_uuid_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"  # METADATA_TOPIC_ID
    assert kafka_uuid_string(uuid.UUID(bytes=b"\xff" * 16)) == "_____________________w"


# -- values: bad input -----------------------------------------------------------------

_KEY_OF: dict[int, ConsumerGroupKey] = {
    3: ConsumerGroupMetadataKey("g"),
    4: ConsumerGroupPartitionMetadataKey("g"),
    5: ConsumerGroupMemberMetadataKey("g", "m"),
    6: ConsumerGroupTargetAssignmentMetadataKey("g"),
    7: ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    8: ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    16: ConsumerGroupRegularExpressionKey("g", "r"),
}

_SAMPLES: list[tuple[int, ConsumerGroupValue]] = [
    (3, ConsumerGroupMetadataValue(5)),
    (4, ConsumerGroupPartitionMetadataValue((
        TopicMetadata(T, "t", 3, (PartitionMetadata(0, ("a", "b")),)),))),
    (5, ConsumerGroupMemberMetadataValue(
        "i", "r", "c", "h", ("t", "u"), "x", 5, "range",
        ClassicMemberMetadata(1, (ClassicProtocol("p", b"m"),)))),
    (6, ConsumerGroupTargetAssignmentMetadataValue(3)),
    (7, ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(T, (1, 2)),))),
    (8, ConsumerGroupCurrentMemberAssignmentValue(
        1, 0, 2, (TopicPartitions(T, (1,)),), (TopicPartitions(T, (2,)),))),
    (16, ConsumerGroupRegularExpressionValue(("a",), 1, 2)),
]


@pytest.mark.parametrize(("record_type", "value"), _SAMPLES)
def test_every_truncation_is_refused(record_type: int, value: ConsumerGroupValue) -> None:
    raw = value.encode()
    key = _KEY_OF[record_type]
    assert decode_value(key, raw) == value
    for cut in range(len(raw)):
        with pytest.raises(RecordFormatError, match=f"record type {record_type}"):
            decode_value(key, raw[:cut])


@pytest.mark.parametrize(("record_type", "value"), _SAMPLES)
def test_trailing_bytes_are_refused(record_type: int, value: ConsumerGroupValue) -> None:
    raw = value.encode()
    with pytest.raises(RecordFormatError, match="1 bytes left over"):
        decode_value(_KEY_OF[record_type], raw + b"\x00")


def test_unknown_value_version_is_refused() -> None:
    with pytest.raises(RecordFormatError, match="unknown value version 1 of record type 3"):
        decode_value(ConsumerGroupMetadataKey("g"), b"\x00\x01\x00\x00\x00\x05\x00")


def test_a_huge_count_is_refused_before_anything_is_allocated() -> None:
    # 2^32 - 2 topics (uvarint 0xffffffff) in a 10-byte value
    raw = V0 + b"\xff\xff\xff\xff\x0f" + b"\x00\x00\x00"
    with pytest.raises(RecordFormatError, match="cannot fit"):
        decode_value(ConsumerGroupTargetAssignmentMemberKey("g", "m"), raw)
    # 2^20 partitions of one topic in a few bytes
    raw = V0 + b"\x02" + T_BYTES + b"\x81\x80\x40" + bytes(8)
    with pytest.raises(RecordFormatError, match="int32 cannot fit"):
        decode_value(ConsumerGroupTargetAssignmentMemberKey("g", "m"), raw)
    # 2^21 tagged fields
    raw = V0 + b"\x00\x00\x00\x01" + b"\x80\x80\x80\x01"
    with pytest.raises(RecordFormatError, match="tagged fields cannot fit"):
        decode_value(ConsumerGroupMetadataKey("g"), raw)


def test_an_overlong_varint_is_refused() -> None:
    raw = V0 + b"\xff\xff\xff\xff\xff\xff" + bytes(10)
    with pytest.raises(RecordFormatError, match="longer than 5 bytes"):
        decode_value(ConsumerGroupRegularExpressionKey("g", "r"), raw)


def test_null_where_required_is_refused() -> None:
    # client id null
    raw = V0 + b"\x00\x00" + b"\x00" + b"\x01" + b"\x01" + b"\x00" + bytes(4) + b"\x00" + NO_TAGS
    with pytest.raises(RecordFormatError, match="null where a string is required"):
        decode_value(ConsumerGroupMemberMetadataKey("g", "m"), raw)
    # null topics array
    raw = V0 + b"\x00" + bytes(16) + NO_TAGS
    with pytest.raises(RecordFormatError, match="null where an array is required"):
        decode_value(ConsumerGroupRegularExpressionKey("g", "r"), raw)


def test_tags_out_of_order_are_refused() -> None:
    raw = V0 + b"\x00\x00\x00\x01" + b"\x02" + b"\x01\x00" + b"\x01\x00"
    with pytest.raises(RecordFormatError, match="tags must increase"):
        decode_value(ConsumerGroupMetadataKey("g"), raw)


def test_a_tagged_field_must_use_all_its_bytes() -> None:
    classic = ClassicMemberMetadata(1, ()).encode()
    raw = (V0 + b"\x00\x00\x01\x01\x01\x00" + b"\x00\x00\x00\x01" + b"\x00"
           + b"\x01\x00" + bytes([len(classic) + 2]) + b"\x01" + classic + b"\x00")
    with pytest.raises(RecordFormatError, match="left over"):
        decode_value(ConsumerGroupMemberMetadataKey("g", "m"), raw)


# -- properties ------------------------------------------------------------------------

_text = st.text(max_size=12)
_uuids = st.uuids()
_tps = st.lists(
    st.builds(TopicPartitions, _uuids,
              st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5).map(tuple)),
    max_size=4,
).map(tuple)
_i32 = st.integers(-(2**31), 2**31 - 1)
_values = st.one_of(
    st.builds(ConsumerGroupMetadataValue, _i32),
    st.builds(ConsumerGroupPartitionMetadataValue, st.lists(st.builds(
        TopicMetadata, _uuids, _text, _i32,
        st.lists(st.builds(PartitionMetadata, _i32, st.lists(_text, max_size=3).map(tuple)),
                 max_size=3).map(tuple),
    ), max_size=3).map(tuple)),
    st.builds(ConsumerGroupMemberMetadataValue, st.none() | _text, st.none() | _text, _text,
              _text, st.lists(_text, max_size=4).map(tuple), st.none() | _text, _i32,
              st.none() | _text, st.none() | st.builds(
                  ClassicMemberMetadata, _i32,
                  st.lists(st.builds(ClassicProtocol, _text, st.binary(max_size=20)),
                           max_size=3).map(tuple))),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, _i32),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, _tps),
    st.builds(ConsumerGroupCurrentMemberAssignmentValue, _i32, _i32,
              st.integers(-128, 127), _tps, _tps),
    st.builds(ConsumerGroupRegularExpressionValue, st.lists(_text, max_size=4).map(tuple),
              st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
)
_VALUE_TYPE: dict[type, int] = {
    ConsumerGroupMetadataValue: 3, ConsumerGroupPartitionMetadataValue: 4,
    ConsumerGroupMemberMetadataValue: 5, ConsumerGroupTargetAssignmentMetadataValue: 6,
    ConsumerGroupTargetAssignmentMemberValue: 7, ConsumerGroupCurrentMemberAssignmentValue: 8,
    ConsumerGroupRegularExpressionValue: 16,
}


@given(_values)
@settings(max_examples=300, deadline=None)
def test_values_round_trip(value: ConsumerGroupValue) -> None:
    key = _KEY_OF[_VALUE_TYPE[type(value)]]
    assert decode_value(key, value.encode()) == value


@given(st.sampled_from(sorted(_KEY_OF)), _text, _text)
def test_keys_round_trip(record_type: int, group_id: str, other: str) -> None:
    cls = type(_KEY_OF[record_type])
    key = cls(group_id) if record_type in (3, 4, 6) else cls(group_id, other)  # type: ignore[call-arg]
    assert decode_key(key.encode()) == key


@given(_values, st.data())
@settings(max_examples=300, deadline=None)
def test_corrupted_values_only_raise_record_format_error(
    value: ConsumerGroupValue, data: st.DataObject
) -> None:
    raw = bytearray(value.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    key = _KEY_OF[data.draw(st.sampled_from(sorted(_KEY_OF)))]
    with contextlib.suppress(RecordFormatError):
        decode_value(key, bytes(raw))


@given(st.binary(max_size=64))
def test_random_keys_only_raise_record_format_error(raw: bytes) -> None:
    with contextlib.suppress(RecordFormatError):
        decode_key(raw)
