"""Byte layouts of __transaction_state records and the transactional id -> partition mapping
(odradek.coordinator.transaction_records), against bytes written by hand from Kafka's
TransactionLogKey.json and TransactionLogValue.json."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.transaction_records import (
    TRANSACTION_STATE_TOPIC,
    TransactionLogFormatError,
    TransactionLogKey,
    TransactionLogValue,
    decode_key,
    decode_value,
    partition_for,
    tombstone,
)
from odradek.coordinator.transaction_state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
)
from tests._own import own_cpu

T0 = 1_700_000_000_000  # 0x0000018BCFE56800


def hexb(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


# -- partitionFor ----------------------------------------------------------------------

# Computed with OpenJDK 17: s.hashCode(), then Kafka's Utils.abs (MIN_VALUE -> 0) % n.
@pytest.mark.parametrize(("transactional_id", "p50", "p7"), [
    ("my-txn", 45, 5),  # hashCode -1061187895
    ("txn-1", 10, 6),  # 110810510
    ("transactional-id-0", 40, 2),  # 1051133890
    ("exactly-once-app-0_1", 31, 5),  # -1609145781
    ("polygenelubricants", 0, 0),  # Integer.MIN_VALUE
    ("\u00e9t\u00e9", 42, 4),  # 227742
    ("\U0001F600", 49, 2),  # a surrogate pair, 1772899
    ("", 0, 0),
])
def test_partition_for_matches_java(transactional_id: str, p50: int, p7: int) -> None:
    assert partition_for(transactional_id, 50) == p50
    assert partition_for(transactional_id, 7) == p7


def test_topic_name() -> None:
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"


# -- key -------------------------------------------------------------------------------


def test_key_layout() -> None:
    raw = hexb("0000 0006 6d792d74786e")  # version 0, "my-txn"
    assert TransactionLogKey("my-txn").encode() == raw
    assert decode_key(raw) == TransactionLogKey("my-txn")


def test_key_of_an_unknown_version_is_skipped() -> None:
    assert decode_key(hexb("0001 0006 6d792d74786e")) is None


def test_key_with_a_null_id_is_refused() -> None:
    with pytest.raises(TransactionLogFormatError, match="null"):
        decode_key(hexb("0000 ffff"))


@pytest.mark.parametrize("cut", range(1, 10))
def test_truncated_key_is_refused(cut: int) -> None:
    with pytest.raises(TransactionLogFormatError):
        decode_key(hexb("0000 0006 6d792d74786e")[:cut])


def test_tombstone_is_the_key_without_a_value() -> None:
    assert tombstone("my-txn") == (hexb("0000 0006 6d792d74786e"), None)
    assert decode_value(None) is None


# -- value v0 --------------------------------------------------------------------------

ONGOING_V0 = hexb("""
0000
00000000000003e8
0005
0000ea60
01
00000002
  0006 6f7264657273  00000002 00000000 00000001
  0008 7061796d656e7473  00000001 00000003
0000018bcfe56801
0000018bcfe56800
""")
ONGOING = TransactionLogValue(
    producer_id=1000, producer_epoch=5, transaction_timeout_ms=60000,
    state=TransactionState.ONGOING,
    topic_partitions=frozenset({("orders", 0), ("orders", 1), ("payments", 3)}),
    last_update_timestamp_ms=T0 + 1, start_timestamp_ms=T0,
)

EMPTY_V0 = hexb("""
0000 0000000000000001 0000 0000ea60 00 ffffffff 0000018bcfe56800 ffffffffffffffff
""")
EMPTY = TransactionLogValue(1, 0, 60000, TransactionState.EMPTY, frozenset(), T0, -1)


def test_value_v0_layout() -> None:
    assert ONGOING.encode() == ONGOING_V0
    assert decode_value(ONGOING_V0) == ONGOING


def test_empty_value_writes_null_partitions() -> None:
    assert EMPTY.encode() == EMPTY_V0
    assert decode_value(EMPTY_V0) == EMPTY


def test_empty_value_read_with_partitions_has_none() -> None:
    raw = hexb("0000 0000000000000001 0000 0000ea60 00 00000001 0001 74 00000001 00000000"
               " 0000018bcfe56800 ffffffffffffffff")
    value = decode_value(raw)
    assert value is not None and value.topic_partitions == frozenset()


def test_complete_value_writes_an_empty_array() -> None:
    value = TransactionLogValue(7, 2, 1000, TransactionState.COMPLETE_COMMIT, frozenset(),
                                T0 + 5, T0)
    raw = value.encode()
    assert raw[2 + 8 + 2 + 4:2 + 8 + 2 + 4 + 5] == hexb("04 00000000")
    assert decode_value(raw) == value


@pytest.mark.parametrize("state", [s for s in TransactionState if s is not TransactionState.DEAD])
def test_every_state_round_trips(state: TransactionState) -> None:
    parts = frozenset() if state is TransactionState.EMPTY else frozenset({("a", 1)})
    value = TransactionLogValue(3, 4, 5000, state, parts, T0, T0)
    for version in (0, 1):
        assert decode_value(value.encode(version)) == value


def test_unknown_value_version_is_refused() -> None:
    with pytest.raises(TransactionLogFormatError, match="version 2"):
        decode_value(b"\x00\x02" + ONGOING_V0[2:])
    with pytest.raises(ValueError, match="version 2"):
        ONGOING.encode(2)


def test_unknown_status_is_refused() -> None:
    raw = bytearray(ONGOING_V0)
    raw[16] = 8
    with pytest.raises(TransactionLogFormatError, match="state id 8"):
        decode_value(bytes(raw))


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    assert decode_value(ONGOING_V0 + b"\x00\x00") == ONGOING


# -- value v1 (flexible) ---------------------------------------------------------------

ONGOING_V1 = hexb("""
0001
00000000000003e8
0005
0000ea60
01
03
  07 6f7264657273  03 00000000 00000001  00
  09 7061796d656e7473  02 00000003  00
0000018bcfe56801
0000018bcfe56800
00
""")


def test_value_v1_layout_without_tags() -> None:
    assert ONGOING.encode(1) == ONGOING_V1
    assert decode_value(ONGOING_V1) == ONGOING


def test_value_v1_tagged_fields() -> None:
    raw = hexb("""
    0001 00000000000007d0 0000 0000ea60 00 00
    0000018bcfe56800 ffffffffffffffff
    03  00 08 00000000000003e8  01 08 0000000000000bb8  02 02 0002
    """)
    value = TransactionLogValue(2000, 0, 60000, TransactionState.EMPTY, frozenset(), T0, -1,
                                previous_producer_id=1000, next_producer_id=3000,
                                client_transaction_version=2)
    assert value.encode(1) == raw
    assert decode_value(raw) == value


def test_value_v1_skips_unknown_tags() -> None:
    raw = ONGOING_V1[:-1] + hexb("02 00 08 00000000000003e7 09 03 aabbcc")
    value = decode_value(raw)
    assert value is not None and value.previous_producer_id == 999
    assert value.topic_partitions == ONGOING.topic_partitions


def test_value_v1_tag_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(TransactionLogFormatError, match="previous producer id"):
        decode_value(ONGOING_V1[:-1] + hexb("01 00 02 0001"))


# -- bounded decoding ------------------------------------------------------------------


@pytest.mark.parametrize("raw", [ONGOING_V0, ONGOING_V1, EMPTY_V0])
def test_every_truncation_is_refused(raw: bytes) -> None:
    for cut in range(len(raw)):
        with pytest.raises(TransactionLogFormatError):
            decode_value(raw[:cut])


def _refused_quickly(raw: bytes, match: str) -> None:
    """Refused before any work the inflated count asks for (looping or allocating for
    2^30 elements is seconds of CPU)."""
    with own_cpu() as spent, pytest.raises(TransactionLogFormatError, match=match):
        decode_value(raw)
    assert spent.seconds < 0.05, f"{spent.seconds:.3f} s of CPU to refuse it"


HEAD_V0 = hexb("0000 00000000000003e8 0005 0000ea60 01")
HEAD_V1 = b"\x00\x01" + HEAD_V0[2:]


def test_inflated_topic_count_is_refused_at_once() -> None:
    _refused_quickly(HEAD_V0 + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 30, "elements")


def test_inflated_partition_count_is_refused_at_once() -> None:
    raw = HEAD_V0 + hexb("00000001 0001 74") + struct.pack(">i", 1 << 30) + b"\x00" * 40
    _refused_quickly(raw, "partition ids")


def test_inflated_compact_count_is_refused_at_once() -> None:
    _refused_quickly(HEAD_V1 + hexb("ffffffff07") + b"\x00" * 30, "elements")


def test_inflated_tagged_field_count_is_refused_at_once() -> None:
    _refused_quickly(ONGOING_V1[:-1] + hexb("ffffffff07 0000"), "tagged fields")


def test_a_varint_longer_than_five_bytes_is_refused() -> None:
    _refused_quickly(HEAD_V1 + hexb("8080808080 01") + b"\x00" * 20, "varint")


def test_inflated_string_length_is_refused() -> None:
    _refused_quickly(HEAD_V0 + hexb("00000001 7fff 74") + b"\x00" * 20, "ends early")


def test_invalid_utf8_is_refused() -> None:
    with pytest.raises(TransactionLogFormatError, match="UTF-8"):
        decode_key(hexb("0000 0002 c328"))


# -- from the state machine ------------------------------------------------------------


def test_a_transit_is_written_as_the_coordinator_prepares_it() -> None:
    m = TransactionMetadata("txn-1", 1000, producer_epoch=5, txn_timeout_ms=60000,
                            txn_last_update_timestamp=T0)
    transit = m.prepare_add_partitions({("orders", 0), ("orders", 1), ("payments", 3)}, T0)
    value = TransactionLogValue.from_transit(transit)
    assert value.encode() == ONGOING_V0[:-8 * 2] + hexb("0000018bcfe56800 0000018bcfe56800")
    assert value.previous_producer_id == 1000


def test_dead_and_empty_with_partitions_are_never_written() -> None:
    m = TransactionMetadata("txn-1", 1000, producer_epoch=5, txn_last_update_timestamp=T0)
    with pytest.raises(ValueError, match="tombstone"):
        TransactionLogValue.from_transit(m.prepare_dead())
    m.cancel_pending_transition()
    transit = m.prepare_transition_to(TransactionState.EMPTY, topic_partitions={("a", 0)})
    with pytest.raises(ValueError, match="no partitions"):
        TransactionLogValue.from_transit(transit)


def test_a_loaded_value_becomes_the_metadata_it_was_written_from() -> None:
    m = TransactionMetadata("txn-1", 1000, producer_epoch=5, last_producer_epoch=4,
                            txn_timeout_ms=60000, txn_last_update_timestamp=T0)
    transit = m.prepare_add_partitions({("orders", 0), ("payments", 3)}, T0 + 1)
    m.complete_transition_to(transit)
    for version in (0, 1):
        value = decode_value(TransactionLogValue.from_transit(transit).encode(version))
        assert value is not None
        loaded = value.to_metadata("txn-1")
        assert loaded.state is TransactionState.ONGOING and loaded.pending_state is None
        assert loaded.topic_partitions == m.topic_partitions
        assert (loaded.producer_id, loaded.producer_epoch, loaded.txn_timeout_ms) == (
            1000, 5, 60000)
        assert (loaded.txn_start_timestamp, loaded.txn_last_update_timestamp) == (
            T0 + 1, T0 + 1)
        assert loaded.last_producer_epoch == NO_PRODUCER_EPOCH  # not in the log
        # the previous producer id survives only in the flexible version's tag
        assert loaded.previous_producer_id == (1000 if version == 1 else NO_PRODUCER_ID)


# -- property tests --------------------------------------------------------------------

VALUES = st.builds(
    TransactionLogValue,
    producer_id=st.integers(0, (1 << 63) - 1),
    producer_epoch=st.integers(-1, (1 << 15) - 1),
    transaction_timeout_ms=st.integers(1, (1 << 31) - 1),
    state=st.sampled_from([s for s in TransactionState if s is not TransactionState.EMPTY]),
    topic_partitions=st.frozensets(st.tuples(st.text(max_size=8), st.integers(0, 1 << 20)),
                                   max_size=6),
    last_update_timestamp_ms=st.integers(-1, 1 << 50),
    start_timestamp_ms=st.integers(-1, 1 << 50),
    previous_producer_id=st.integers(-1, 1 << 40),
    next_producer_id=st.integers(-1, 1 << 40),
    client_transaction_version=st.integers(0, 2),
)


@settings(max_examples=200, deadline=None)
@given(value=VALUES)
def test_values_round_trip(value: TransactionLogValue) -> None:
    assert decode_value(value.encode(1)) == value
    legacy = decode_value(value.encode(0))
    assert legacy is not None and legacy.topic_partitions == value.topic_partitions
    assert (legacy.previous_producer_id, legacy.next_producer_id) == (-1, -1)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120))
def test_any_bytes_decode_or_are_refused(data: bytes) -> None:
    for raw in (data, b"\x00\x00" + data, b"\x00\x01" + data):
        with contextlib.suppress(TransactionLogFormatError):
            decode_value(raw)
        with contextlib.suppress(TransactionLogFormatError):
            decode_key(raw)


@settings(max_examples=200, deadline=None)
@given(value=VALUES, version=st.sampled_from([0, 1]), where=st.integers(0, 10_000),
       byte=st.integers(0, 255))
def test_a_corrupted_value_decodes_or_is_refused(
    value: TransactionLogValue, version: int, where: int, byte: int
) -> None:
    raw = bytearray(value.encode(version))
    raw[where % len(raw)] = byte
    with contextlib.suppress(TransactionLogFormatError):
        decode_value(bytes(raw))
