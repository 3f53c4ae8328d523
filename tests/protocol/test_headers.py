"""Request header parsing, header-version derivation and response framing
(odradek.protocol.headers, odradek.protocol.codec)."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from odradek.protocol import codec
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode, InvalidRequestError, UnknownApiKeyError
from odradek.protocol.headers import (
    encode_response,
    encode_response_prefix,
    parse_request_header,
    peek_request,
)
from odradek.protocol.primitives import uvarint
from tests.protocol.wire import decode_response, raw_header, request_payload


def test_header_v1() -> None:
    data = raw_header(ApiKey.PRODUCE, 3, 77, "client-a", flexible=False) + b"body"
    header = parse_request_header(data)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 3, 77)
    assert header.client_id == "client-a"
    assert header.header_version == 1
    assert data[header.size :] == b"body"


def test_header_v2_skips_tagged_fields() -> None:
    data = raw_header(ApiKey.METADATA, 12, -5, "client-b", flexible=True)
    assert data[-1:] == b"\x00"  # empty tagged fields
    header = parse_request_header(data + b"rest")
    assert header.header_version == 2
    assert header.correlation_id == -5
    assert header.size == len(data)


def test_null_client_id() -> None:
    data = raw_header(ApiKey.METADATA, 1, 1, None, flexible=False)
    assert parse_request_header(data).client_id is None


@pytest.mark.parametrize(
    ("key", "version", "expected"),
    [
        (ApiKey.PRODUCE, 8, 1),
        (ApiKey.PRODUCE, 9, 2),
        (ApiKey.METADATA, 8, 1),
        (ApiKey.METADATA, 9, 2),
        (ApiKey.API_VERSIONS, 2, 1),
        (ApiKey.API_VERSIONS, 3, 2),
        (ApiKey.API_VERSIONS, 99, 2),  # newer than kio: flexibility is kept
        (ApiKey.FETCH, 12, 2),
    ],
)
def test_request_header_version_from_schemas(key: int, version: int, expected: int) -> None:
    assert codec.request_header_version(key, version) == expected


def test_response_header_versions() -> None:
    assert codec.response_header_version(ApiKey.METADATA, 8) == 0
    assert codec.response_header_version(ApiKey.METADATA, 9) == 1
    # ApiVersions always answers with header v0, even when flexible (v3+).
    assert codec.response_header_version(ApiKey.API_VERSIONS, 3) == 0


def test_unknown_key_has_no_header_version() -> None:
    with pytest.raises(UnknownApiKeyError):
        codec.request_header_version(999, 0)


def test_header_v2_skips_unknown_tagged_fields() -> None:
    """Kafka's RequestHeaderData keeps unknown tags unread; the body starts after them."""
    data = bytearray(raw_header(ApiKey.METADATA, 12, 3, "c", flexible=True))
    del data[-1]
    data += uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(200) + uvarint(0)
    header = parse_request_header(bytes(data) + b"body")
    assert header.size == len(data)
    with pytest.raises(InvalidRequestError):
        parse_request_header(bytes(data[:-3]))


def test_truncated_header() -> None:
    with pytest.raises(InvalidRequestError):
        peek_request(b"\x00\x03\x00")
    data = raw_header(ApiKey.METADATA, 12, 1, "abcdef", flexible=True)
    with pytest.raises(InvalidRequestError):
        parse_request_header(data[:-3])


def test_response_prefix_matches_kio() -> None:
    for header_type, version in ((ResponseHeaderV0, 0), (ResponseHeaderV1, 1)):
        buf = io.BytesIO()
        entity_writer(header_type)(buf, header_type(correlation_id=i32(1234)))
        header = buf.getvalue()
        prefix = encode_response_prefix(1234, version, 10)
        assert prefix == struct.pack(">i", len(header) + 10) + header


def test_request_body_round_trip() -> None:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="t"),),  # type: ignore[arg-type]
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    payload = request_payload(request, 9)
    header = parse_request_header(payload)
    assert codec.decode_request(3, 12, payload, header.size) == request


def test_truncated_body_is_invalid_request() -> None:
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    payload = request_payload(request, 9)
    header = parse_request_header(payload)
    with pytest.raises(InvalidRequestError):
        codec.decode_request(18, 3, payload[:-2], header.size)


def test_encode_response_uses_header_v0_for_api_versions() -> None:
    response = ApiVersionsResponse(
        error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0)
    )
    data = encode_response(42, response)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    assert decode_response(data[4:], 18, 3, header_version=0) == (42, response)


def test_encode_response_flexible_metadata() -> None:
    response = MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=-1,  # type: ignore[arg-type]
        topics=(),
    )
    data = encode_response(7, response)
    assert data[8] == 0  # header v1 tagged-field byte
    assert decode_response(data[4:], 3, 12) == (7, response)


def test_schema_cache() -> None:
    assert codec.schema(3, 12) is codec.schema(3, 12)
    assert codec.schema(3, 12).response_type is MetadataResponse


_KIO_HEADER_READERS = {
    1: entity_reader(RequestHeaderV1),
    2: entity_reader(RequestHeaderV2),
}


class _UnknownTag(Exception):
    pass


def _kio_header(frame: bytes, version: int) -> tuple[int, int, int, str | None, int] | None:
    try:
        header, size = _KIO_HEADER_READERS[version](frame, 0)
    except KeyError as e:  # kio refuses unknown tagged fields; Kafka skips them
        raise _UnknownTag from e
    except Exception:
        return None
    return (int(header.request_api_key), int(header.request_api_version),
            int(header.correlation_id), header.client_id, size)


@settings(max_examples=400, deadline=None)
@given(
    version=st.sampled_from([1, 2]),
    client_id=st.one_of(st.none(), st.text(max_size=20)),
    tags=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=200)), max_size=3),
    cut=st.integers(0, 400),
    flip=st.one_of(st.none(), st.tuples(st.integers(0, 400), st.integers(0, 255))),
)
def test_hand_parser_agrees_with_kio(
    version: int, client_id: str | None, tags: list[tuple[int, bytes]], cut: int,
    flip: tuple[int, int] | None,
) -> None:
    """Well-formed, truncated and corrupted headers: the same fields and body position as
    kio's reader, or InvalidRequestError exactly where kio refuses. kio also refuses any
    tagged field it does not know, where Kafka (RequestHeaderData) keeps it unread: there
    the hand parser must skip the fields, or refuse only a section running past the end,
    and read the fields before it as header v1 would."""
    frame = bytearray(raw_header(ApiKey.METADATA, 12, 9, client_id, flexible=version == 2))
    if version == 2:
        del frame[-1]  # replace the empty tagged-field section
        frame += uvarint(len(tags))
        for tag, data in sorted(tags):
            frame += uvarint(tag) + uvarint(len(data)) + data
    frame += b"body"
    frame = frame[:cut] if cut < len(frame) else frame
    if flip is not None and flip[0] < len(frame):
        frame[flip[0]] = flip[1]
    try:
        expected = _kio_header(bytes(frame), version)
    except _UnknownTag:
        assert version == 2
        try:
            header = parse_request_header(frame, version)
        except InvalidRequestError:
            return
        v1 = parse_request_header(frame, 1)
        assert (header.api_key, header.api_version, header.correlation_id,
                header.client_id) == (v1.api_key, v1.api_version, v1.correlation_id,
                                      v1.client_id)
        assert v1.size < header.size <= len(frame)
        return
    if expected is None:
        with pytest.raises(InvalidRequestError):
            parse_request_header(frame, version)
        return
    header = parse_request_header(frame, version)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id,
            header.size) == expected
