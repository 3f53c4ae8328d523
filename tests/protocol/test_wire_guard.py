"""The length check before kio: it refuses bodies whose declared lengths exceed the bytes
there are (kio's native reader aborts the process on them) and accepts every well-formed
body. Each case here would abort the test process if the check let it through."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import io
from collections.abc import Iterator
from typing import Any, get_args, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import i8, i32, i64

from odradek.protocol.codec import decode_request, schema
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.primitives import uvarint
from odradek.protocol.produce_reader import MAX_VERSION as PRODUCE_READER_MAX
from odradek.protocol.produce_reader import read_produce_request
from odradek.protocol.wire_guard import check_body
from tests.protocol.samples import is_entity, sample_request, unwrap_optional


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


# -- nulls where the schema forbids them ---------------------------------------------------

Path = tuple[str, ...]


def _all_request_versions() -> list[tuple[int, int]]:
    from odradek.protocol.codec import kio_versions

    pairs = []
    for api_key in range(100):
        versions = kio_versions(api_key)
        if versions is not None:
            pairs.extend((api_key, v) for v in range(versions[0], versions[1] + 1))
    return pairs


def _non_nullable(entity: Any, path: Path = ()) -> Iterator[tuple[Path, Any, Any]]:
    """(path, short value, long value) of every non-nullable array, string or byte field
    on the wire: the short value encodes its length prefix as 0, the long one as 1.
    A path step "*" is the one element of an array of strings."""
    for field in dataclasses.fields(entity):
        if "tag" in field.metadata:
            continue
        field_type, nullable = unwrap_optional(field.type)
        value = getattr(entity, field.name)
        here = (*path, field.name)
        if get_origin(field_type) is tuple:
            if not nullable:
                yield here, (), value
            inner, inner_nullable = unwrap_optional(get_args(field_type)[0])
            if is_entity(inner):
                yield from _non_nullable(value[0], here)
            elif inner is str and not inner_nullable:
                yield (*here, "*"), ("",), ("a",)
            elif inner is bytes and not inner_nullable:
                yield (*here, "*"), (b"",), (b"a",)
        elif is_entity(field_type):
            if value is not None:
                yield from _non_nullable(value, here)
        elif field.metadata["kafka_type"] in ("string", "bytes", "records") and not nullable:
            empty = "" if field.metadata["kafka_type"] == "string" else b""
            yield here, empty, "a" if empty == "" else b"a"


def _replace(entity: Any, path: Path, value: Any) -> Any:
    name, rest = path[0], path[1:]
    if rest == ("*",) or not rest:
        return dataclasses.replace(entity, **{name: value})
    child = getattr(entity, name)
    if isinstance(child, tuple):
        return dataclasses.replace(entity, **{name: (_replace(child[0], rest, value),)})
    return dataclasses.replace(entity, **{name: _replace(child, rest, value)})


def _with_null(request: Any, path: Path, short: Any, long: Any) -> bytes:
    """The encoded request with the length prefix of the field at ``path`` made null."""
    low, high = _encode(_replace(request, path, short)), _encode(_replace(request, path, long))
    first = next(i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b)
    if type(request).__flexible__:
        return low[:first] + b"\x00" + low[first + 1 :]  # compact: length + 1, 0 is null
    width = 2 if isinstance(short, str) or short == ("",) else 4  # string: int16
    start = first - (width - 1)
    return low[:start] + b"\xff" * width + low[start + width :]


def _parse(api_key: int, version: int, body: bytes) -> Any:
    """What the broker does with a body: Produce goes through its hot-path reader."""
    if api_key == 0 and version <= PRODUCE_READER_MAX:
        return read_produce_request(bytearray(body), 0, version)
    return decode_request(api_key, version, body)


@pytest.mark.parametrize(("api_key", "version"), _all_request_versions())
def test_a_null_is_refused_wherever_the_schema_forbids_one(api_key: int, version: int) -> None:
    request = sample_request(api_key, version)
    body = _encode(request)
    assert decode_request(api_key, version, body) == request  # valid: parses identically
    _parse(api_key, version, body)
    targets = list(_non_nullable(request))
    for path, short, long in targets:
        bad = _with_null(request, path, short, long)
        with pytest.raises(InvalidRequestError, match=f"non-nullable field {path[-1]}"
                           if path[-1] != "*" else "non-nullable field"):
            decode_request(api_key, version, bad)
        if api_key == 0 and version <= PRODUCE_READER_MAX:  # and by Produce's own reader
            with pytest.raises(InvalidRequestError):
                _parse(api_key, version, bad)


def test_nullable_fields_still_take_null() -> None:
    md = importlib.import_module("kio.schema.metadata.v12.request")
    request = md.MetadataRequest(topics=None, allow_auto_topic_creation=True,
                                 include_topic_authorized_operations=False)
    assert decode_request(3, 12, _encode(request)) == request
    md4 = importlib.import_module("kio.schema.metadata.v4.request")
    request4 = md4.MetadataRequest(topics=None, allow_auto_topic_creation=True)
    assert decode_request(3, 4, _encode(request4)) == request4


def test_offset_commit_v8_with_null_topics_is_refused() -> None:
    """The fuzzing report's case: it reached the handler as ``topics=None``."""
    request = sample_request(8, 8)
    body = _with_null(request, ("topics",), (), request.topics)
    with pytest.raises(InvalidRequestError, match="non-nullable field topics"):
        decode_request(8, 8, body)
