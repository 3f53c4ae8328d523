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
from typing import Any, Final, NamedTuple

from odradek.protocol.codec import encode_body, request_header_version, response_header_version
from odradek.protocol.errors import InvalidRequestError, LocalProtocolError
from odradek.protocol.primitives import skip_tagged_fields

__all__ = [
    "RequestHeader",
    "encode_response",
    "encode_response_prefix",
    "parse_request_header",
    "peek_request",
]

_PEEK: Final = struct.Struct(">hhi")
_FIXED: Final = struct.Struct(">hhih")  # the peeked fields and the client_id length
_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")

class RequestHeader(NamedTuple):
    """A parsed request header; ``size`` is where the body starts in the frame. A
    NamedTuple, built in C (one per request)."""

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

    Read by hand, straight through (it runs for every request, and kio's reader plus the
    conversion cost more: bench/README.md has the figures); a hypothesis test holds it to
    kio's reader.
    """
    if len(frame) < _FIXED.size:
        raise InvalidRequestError(f"request of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id, length = _FIXED.unpack_from(frame)
    if header_version is None:
        header_version = request_header_version(key, version)
    if header_version != 1 and header_version != 2:
        raise LocalProtocolError(f"unsupported request header version {header_version}")
    pos = _FIXED.size
    client_id: str | None = None
    if length >= 0:
        end = pos + length
        if end > len(frame):
            raise InvalidRequestError(
                f"malformed request header v{header_version}: client_id of {length} bytes "
                "runs past the end of the frame"
            )
        try:
            client_id = bytes(frame[pos:end]).decode()
        except UnicodeDecodeError as e:
            raise InvalidRequestError(
                f"malformed request header v{header_version}: client_id is not UTF-8"
            ) from e
        pos = end
    elif length != -1:
        raise InvalidRequestError(
            f"malformed request header v{header_version}: client_id length {length}"
        )
    if header_version == 2:
        try:
            pos = skip_tagged_fields(frame, pos, len(frame))
        except (IndexError, InvalidRequestError):
            raise InvalidRequestError(
                f"malformed request header v{header_version}: tagged fields run past the "
                "end of the frame"
            ) from None
    return RequestHeader(key, version, correlation_id, client_id, header_version, pos)


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
