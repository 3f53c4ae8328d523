"""Client-side helpers for tests: build request frames and read response frames with kio."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32


def request_payload(request: Any, correlation_id: int, client_id: str | None = "test") -> bytes:
    """Header (version taken from the request's schema) + body, without size prefix."""
    header_type = request.__header_schema__
    header = header_type(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(header_type)(buf, header)
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


def request_frame(request: Any, correlation_id: int, client_id: str | None = "test") -> bytes:
    payload = request_payload(request, correlation_id, client_id)
    return struct.pack(">i", len(payload)) + payload


def raw_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    header_type = RequestHeaderV2 if flexible else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_type)(
        buf,
        header_type(
            request_api_key=i16(api_key),
            request_api_version=i16(api_version),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    return buf.getvalue()


def decode_response(
    payload: bytes, api_key: int, api_version: int, header_version: int | None = None
) -> tuple[int, Any]:
    """(correlation_id, response entity) from a response payload (no size prefix)."""
    response_type = load_response_schema(api_key, api_version)
    if header_version is None:
        header_version = 1 if response_type.__flexible__ and api_key != 18 else 0
    (correlation_id,) = struct.unpack_from(">i", payload)
    offset = 4
    if header_version == 1:
        assert payload[4] == 0, "expected empty tagged fields in response header v1"
        offset = 5
    entity, size = entity_reader(response_type)(payload, offset)
    assert offset + size == len(payload), "trailing bytes after response body"
    return correlation_id, entity
