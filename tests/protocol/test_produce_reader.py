"""The Produce request reader decodes what kio decodes, every version, without copying
records; malformed bodies are InvalidRequestError, never another exception."""

from __future__ import annotations

import datetime
import importlib
import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.produce_reader import MAX_VERSION, MIN_VERSION, read_produce_request

KIO_MIN_VERSION = 3  # kio has no schemas for v0-2 (KIP-896); kafka-python's old ones below

requests = st.fixed_dictionaries({
    "transactional_id": st.one_of(st.none(), st.text(max_size=20)),
    "acks": st.sampled_from([-1, 0, 1, 2, -5]),
    "timeout_ms": st.integers(0, 2**31 - 1),
    "topics": st.lists(st.tuples(
        st.text(min_size=1, max_size=20),
        st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1),
                           st.one_of(st.none(), st.binary(max_size=300))), max_size=4),
    ), max_size=3),
})


def _encode(version: int, r: dict[str, Any]) -> bytes:
    m = importlib.import_module(f"kio.schema.produce.v{version}.request")
    request = m.ProduceRequest(
        transactional_id=r["transactional_id"], acks=i16(r["acks"]),
        timeout=datetime.timedelta(milliseconds=r["timeout_ms"]),
        topic_data=tuple(m.TopicProduceData(name=name, partition_data=tuple(
            m.PartitionProduceData(index=i32(index), records=records)
            for index, records in parts)) for name, parts in r["topics"]),
    )
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


def _kio_decode(version: int, body: bytes) -> Any:
    m = importlib.import_module(f"kio.schema.produce.v{version}.request")
    return entity_reader(m.ProduceRequest)(body, 0)[0]


@pytest.mark.parametrize("version", range(KIO_MIN_VERSION, MAX_VERSION + 1))
@settings(max_examples=60, deadline=None)
@given(r=requests, prefix=st.binary(max_size=5))
def test_decodes_what_kio_decodes(version: int, r: dict[str, Any], prefix: bytes) -> None:
    body = _encode(version, r)
    frame = bytearray(prefix + body)
    got = read_produce_request(frame, len(prefix), version)
    expected = _kio_decode(version, body)
    assert got.transactional_id == expected.transactional_id
    assert got.acks == expected.acks
    assert got.timeout_ms == expected.timeout // datetime.timedelta(milliseconds=1)
    assert [t.name for t in got.topic_data] == [t.name for t in expected.topic_data]
    for topic, kio_topic in zip(got.topic_data, expected.topic_data, strict=True):
        assert [index for index, _ in topic.partition_data] == [
            p.index for p in kio_topic.partition_data]
        for (_, records), kio_p in zip(topic.partition_data, kio_topic.partition_data,
                                       strict=True):
            if kio_p.records is None:
                assert records is None
            else:
                assert records is not None and bytes(records) == kio_p.records
                # A view of the frame, writable: no copy, offsets rewritable in place.
                assert records.obj is frame and not records.readonly


@pytest.mark.parametrize("version", [8, 9, 11])
@pytest.mark.parametrize("count", [126, 127, 200])
def test_lengths_past_one_varint_byte(version: int, count: int) -> None:
    """Compact lengths and counts below 128 are read inline, longer ones as varints: a
    transactional id, topic names, topic and partition counts around that edge."""
    r = {"transactional_id": "x" * count, "acks": 1, "timeout_ms": 5,
         "topics": [("n" * count, [(i, b"r" * (i % 3)) for i in range(count)]),
                    *((f"t{i}", [(0, None)]) for i in range(count))]}
    got = read_produce_request(bytearray(_encode(version, r)), 0, version)
    assert got.transactional_id == r["transactional_id"]
    assert [(t.name, [(i, None if v is None else bytes(v)) for i, v in t.partition_data])
            for t in got.topic_data] == [(name, parts) for name, parts in r["topics"]]


@pytest.mark.parametrize("version", [3, 8, 9, 11])
@settings(max_examples=60, deadline=None)
@given(r=requests, data=st.data())
def test_malformed_bodies_are_invalid_requests(
    version: int, r: dict[str, Any], data: st.DataObject
) -> None:
    """Truncated or corrupted bodies: InvalidRequestError or a request whose records lie
    inside the body, never another exception. (Not compared with kio here: kio's native
    reader aborts the process on some of these, see tests/protocol/test_wire_guard.py.)"""
    body = bytearray(_encode(version, r))
    if data.draw(st.booleans()) and len(body) > 1:
        body = body[: data.draw(st.integers(0, len(body) - 1))]  # truncated
    else:
        for _ in range(data.draw(st.integers(1, 4))):  # bytes flipped
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        request = read_produce_request(body, 0, version)
    except InvalidRequestError:
        return
    for topic in request.topic_data:
        for _, records in topic.partition_data:
            assert records is None or records.obj is body


def test_a_negative_length_and_a_long_varint_are_refused() -> None:
    body = _encode(8, {"transactional_id": None, "acks": 1, "timeout_ms": 10,
                       "topics": [("t", [(0, b"xyz")])]})
    bad = bytearray(body)
    bad[-7:-3] = (-2).to_bytes(4, "big", signed=True)  # records length -2
    with pytest.raises(InvalidRequestError, match="negative"):
        read_produce_request(bad, 0, 8)
    flexible = bytearray(b"\xff\xff\xff\xff\xff\x01")  # transactional id length: 6 bytes
    with pytest.raises(InvalidRequestError, match="varint"):
        read_produce_request(flexible, 0, 9)


@pytest.mark.parametrize("version", range(MIN_VERSION, KIO_MIN_VERSION))
@settings(max_examples=60, deadline=None)
@given(r=requests, prefix=st.binary(max_size=5))
def test_decodes_old_versions_as_kafka_python_encodes_them(
    version: int, r: dict[str, Any], prefix: bytes
) -> None:
    from kafka.protocol.old import produce as old

    cls = getattr(old, f"ProduceRequest_v{version}")
    topics = [(name, [(index, records) for index, records in parts])
              for name, parts in r["topics"]]
    acks = max(min(r["acks"], 32767), -32768)
    body = cls(acks, r["timeout_ms"], topics).encode()
    got = read_produce_request(bytearray(prefix + body), len(prefix), version)
    assert got.transactional_id is None
    assert (got.acks, got.timeout_ms) == (acks, r["timeout_ms"])
    assert [(t.name, [(i, None if rec is None else bytes(rec)) for i, rec in t.partition_data])
            for t in got.topic_data] == topics
