"""Request header parsing and response framing (sans-I/O).

Follows Kafka's ``RequestHeader.parse`` and ``RequestContext`` / ``RequestChannel``
``buildResponseSend``. A request frame is::

    request_api_key      int16   \\
    request_api_version  int16    } fixed offsets in every header version
    correlation_id       int32   /
    client_id            nullable string, int16 length (not compact, even in v2)
    tagged fields        (header v2 only: flexible versions)
    body

Which header version applies is derived from kio's schemas (see :mod:`codec`). The
first three fields sit at fixed offsets, so :func:`peek_request` can read them before the
version is known: the network layer needs the key and version to decide between
answering and closing, and the correlation id to log either way.

A response frame is ``int32 size``, ``correlation_id int32``, an empty tagged-field
section in header v1 (``0x00``), then the body. Both header versions are written by hand:
they are a struct pack, and a test checks them against kio's writer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader

from odradek.protocol.codec import encode_body, request_header_version, response_header_version
from odradek.protocol.errors import InvalidRequestError, LocalProtocolError

__all__ = [
    "RequestHeader",
    "encode_response",
    "encode_response_prefix",
    "parse_request_header",
    "peek_request",
]

_PEEK: Final = struct.Struct(">hhi")
_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")

_read_header_v1: Final = entity_reader(RequestHeaderV1)
_read_header_v2: Final = entity_reader(RequestHeaderV2)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A parsed request header; ``size`` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    size: int


def peek_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of any request header."""
    if len(frame) < _PEEK.size:
        raise InvalidRequestError(f"request of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _PEEK.unpack_from(frame)
    return key, version, correlation_id


def parse_request_header(
    frame: bytes | bytearray | memoryview, header_version: int | None = None
) -> RequestHeader:
    """Parse the request header at the start of ``frame`` (a frame without size prefix).

    ``header_version`` defaults to the one kio's schemas give the key and version.
    Raises :class:`InvalidRequestError` when the header is malformed and
    :class:`~odradek.protocol.errors.UnknownApiKeyError` when the version cannot be
    derived because kio does not know the key.
    """
    key, version, _ = peek_request(frame)
    if not isinstance(frame, bytes):
        frame = memoryview(frame).toreadonly()  # kio's native readers refuse writable ones
    if header_version is None:
        header_version = request_header_version(key, version)
    reader: Callable[[bytes | memoryview, int], tuple[Any, int]]
    if header_version == 1:
        reader = _read_header_v1
    elif header_version == 2:
        reader = _read_header_v2
    else:
        raise LocalProtocolError(f"unsupported request header version {header_version}")
    try:
        header, size = reader(frame, 0)
    except Exception as e:  # kio DecodeError and friends
        raise InvalidRequestError(f"malformed request header v{header_version}: {e!r}") from e
    return RequestHeader(
        api_key=int(header.request_api_key),
        api_version=int(header.request_api_version),
        correlation_id=int(header.correlation_id),
        client_id=header.client_id,
        header_version=header_version,
        size=size,
    )


def encode_response_prefix(correlation_id: int, header_version: int, body_size: int) -> bytes:
    """Size prefix + response header for a body of ``body_size`` bytes."""
    if header_version == 0:
        return _SIZE_AND_CORRELATION.pack(4 + body_size, correlation_id)
    if header_version == 1:
        return _SIZE_AND_CORRELATION.pack(5 + body_size, correlation_id) + b"\x00"
    raise LocalProtocolError(f"unsupported response header version {header_version}")


def encode_response(
    correlation_id: int, response: Any, header_version: int | None = None
) -> bytes:
    """A complete response frame (size + header + body) for a kio response entity.

    ``header_version`` defaults to the one the response's key and version call for.
    """
    if header_version is None:
        header_version = response_header_version(
            int(response.__api_key__), int(response.__version__)
        )
    body = encode_body(response)
    return encode_response_prefix(correlation_id, header_version, len(body)) + body
