"""The length check before kio: it refuses bodies whose declared lengths exceed the bytes
there are (kio's native reader aborts the process on them) and accepts every well-formed
body. Each case here would abort the test process if the check let it through."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import i8, i32, i64

from odradek.protocol.codec import decode_request, schema
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import uvarint
from odradek.protocol.wire_guard import check_body


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _requests() -> list[tuple[int, int, Any]]:
    """Well-formed requests of several shapes: nested arrays, nullable strings, tagged
    fields, fixed-size runs, arrays of strings and of ints."""
    md = importlib.import_module("kio.schema.metadata.v12.request")
    md4 = importlib.import_module("kio.schema.metadata.v4.request")
    f12 = importlib.import_module("kio.schema.fetch.v12.request")
    f4 = importlib.import_module("kio.schema.fetch.v4.request")
    jg = importlib.import_module("kio.schema.join_group.v9.request")
    lo = importlib.import_module("kio.schema.list_offsets.v7.request")
    return [
        (3, 12, md.MetadataRequest(
            topics=(md.MetadataRequestTopic(topic_id=None, name="a"),
                    md.MetadataRequestTopic(topic_id=None, name=None)),
            allow_auto_topic_creation=False, include_topic_authorized_operations=True)),
        (3, 12, md.MetadataRequest(topics=None, allow_auto_topic_creation=True,
                                   include_topic_authorized_operations=False)),
        (3, 4, md4.MetadataRequest(topics=(md4.MetadataRequestTopic(name="t"),),
                                   allow_auto_topic_creation=True)),
        (1, 12, f12.FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=100),
            min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1),
            topics=(f12.FetchTopic(topic="t", partitions=tuple(
                f12.FetchPartition(partition=i32(p), current_leader_epoch=i32(0),
                                   fetch_offset=i64(p * 10), last_fetched_epoch=i32(-1),
                                   log_start_offset=i64(-1), partition_max_bytes=i32(1000))
                for p in range(5))),),
            forgotten_topics_data=(f12.ForgottenTopic(topic="old", partitions=(i32(1),)),),
            rack_id="")),
        (1, 4, f4.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=i32(1),
            max_bytes=i32(1 << 20), isolation_level=i8(0),
            topics=(f4.FetchTopic(topic="t", partitions=(
                f4.FetchPartition(partition=i32(0), fetch_offset=i64(0),
                                  partition_max_bytes=i32(1000)),)),))),
        (11, 9, jg.JoinGroupRequest(
            group_id="g", session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=30),
            member_id="", group_instance_id=None, protocol_type="consumer",
            protocols=(jg.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01xyz"),),
            reason=None)),
        (2, 7, lo.ListOffsetsRequest(
            replica_id=-1, isolation_level=i8(0), topics=(lo.ListOffsetsTopic(
                name="t", partitions=(lo.ListOffsetsPartition(
                    partition_index=i32(0), current_leader_epoch=i32(-1),
                    timestamp=i64(-1)),)),))),
    ]


@pytest.mark.parametrize("case", range(7))
def test_well_formed_bodies_pass_and_decode(case: int) -> None:
    api_key, version, request = _requests()[case]
    body = _encode(request)
    check_body(type(request), body, 0)
    assert decode_request(api_key, version, body) == request


def test_a_huge_compact_array_is_refused_before_kio() -> None:
    body = uvarint(2**32) + bytes(20)  # Metadata v12: topics declares 2^32 - 1 entries
    with pytest.raises(InvalidRequestError, match="array topics declares 4294967295"):
        decode_request(3, 12, body)


def test_a_huge_legacy_array_and_nested_arrays_are_refused() -> None:
    body = (2**31 - 1).to_bytes(4, "big") + bytes(8)  # Metadata v4 topics
    with pytest.raises(InvalidRequestError, match="array topics"):
        decode_request(3, 4, body)
    fetch = _encode(_requests()[3][2])
    # The partition count of the first topic: after the fixed header fields and the name.
    at = fetch.index(b"\x02t") + 2
    assert fetch[at] == 6  # five partitions, compact
    bad = fetch[:at] + uvarint(2**33) + fetch[at + 1 :]
    with pytest.raises(InvalidRequestError, match="array partitions"):
        decode_request(1, 12, bad)


def test_a_tagged_field_larger_than_the_body_is_refused() -> None:
    body = uvarint(1) + b"\x00\x00" + uvarint(1) + uvarint(9) + uvarint(2**30)
    with pytest.raises(InvalidRequestError, match="tagged field 9 size"):
        decode_request(3, 12, body)


@pytest.mark.parametrize("case", range(7))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutated_bodies_never_abort(case: int, data: st.DataObject) -> None:
    """Flipped bytes and truncations: kio answers with an exception or a request, and
    the process survives."""
    api_key, version, request = _requests()[case]
    body = bytearray(_encode(request))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF,
                                                    data.draw(st.integers(0, 255))]))
    if data.draw(st.booleans()):
        body = body[: data.draw(st.integers(0, len(body)))]
    with contextlib.suppress(InvalidRequestError):
        decode_request(api_key, version, bytes(body))


def test_every_request_schema_compiles() -> None:
    """A walker is built for every request kio knows (no unknown field type)."""
    from odradek.protocol.codec import kio_versions

    for api_key in range(100):
        versions = kio_versions(api_key)
        if versions is None:
            continue
        for version in range(versions[0], versions[1] + 1):
            check_body(schema(api_key, version).request_type, b"", 0)
