"""Sans-I/O Kafka wire protocol: framing, headers, handler registry, error codes, codecs,
error responses.

No module here imports ``socket`` or ``asyncio``; the network layer (``odradek.server``)
drives it. Bodies are kio entities (generated from Kafka's JSON schemas); the hot Fetch
path may instead return a :class:`Send` of buffers and file regions.
"""

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import (
    ApiSchema,
    decode_request,
    encode_body,
    kio_versions,
    request_header_version,
    response_header_version,
    schema,
)
from odradek.protocol.error_response import build_error_response
from odradek.protocol.errors import (
    ErrorCode,
    FrameTooLargeError,
    InvalidFrameSizeError,
    InvalidRequestError,
    KafkaError,
    LocalProtocolError,
    RemoteProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from odradek.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, frame
from odradek.protocol.headers import (
    RequestHeader,
    encode_response,
    encode_response_prefix,
    parse_request_header,
    peek_request,
)
from odradek.protocol.registry import (
    ApiVersionRange,
    DuplicateHandlerError,
    Handler,
    HandlerRegistry,
    Registration,
    RequestContext,
)
from odradek.protocol.send import Chunk, FileRegion, Send

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ApiKey",
    "ApiSchema",
    "ApiVersionRange",
    "Chunk",
    "DuplicateHandlerError",
    "ErrorCode",
    "FileRegion",
    "FrameDecoder",
    "FrameTooLargeError",
    "Handler",
    "HandlerRegistry",
    "InvalidFrameSizeError",
    "InvalidRequestError",
    "KafkaError",
    "LocalProtocolError",
    "Registration",
    "RemoteProtocolError",
    "RequestContext",
    "RequestHeader",
    "Send",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "build_error_response",
    "decode_request",
    "encode_body",
    "encode_response",
    "encode_response_prefix",
    "frame",
    "kio_versions",
    "parse_request_header",
    "peek_request",
    "request_header_version",
    "response_header_version",
    "schema",
]
