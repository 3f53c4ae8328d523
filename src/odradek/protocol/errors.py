"""Kafka error codes and the exceptions of the protocol layer.

Error codes are Kafka's ``org.apache.kafka.common.protocol.Errors`` table, one-to-one: we
re-export kio's :class:`~kio.schema.errors.ErrorCode` (generated from the same table, each
member knows its wire value and whether it is ``retriable``) instead of keeping a copy.

Two families of exceptions, as in h11:

- :class:`KafkaError` — a request failed with a precise Kafka error code. Handlers raise
  it; the code goes back to the client inside a normal response.
- :class:`RemoteProtocolError` — the peer broke the wire protocol (bad frame size,
  unparsable header or body, unknown API key, unsupported version). Kafka's answer to these
  is to close the connection with a logged reason (``SocketServer.Processor``,
  ``InvalidReceiveException`` / ``InvalidRequestException``); so is ours. The one exception
  is ApiVersions, which is answered even for unsupported versions (KIP-511).
- :class:`LocalProtocolError` — this process misused the API (e.g. registering a handler
  twice); a programming error, never caused by a client.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "FrameTooLargeError",
    "InvalidFrameSizeError",
    "InvalidRequestError",
    "KafkaError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "error_code",
]


def error_code(value: int) -> ErrorCode:
    """The :class:`ErrorCode` for a wire value; ``ValueError`` if Kafka has no such code."""
    return ErrorCode(value)


class KafkaError(Exception):
    """A request failed with a Kafka error code; raise it from a handler.

    ``retriable`` mirrors Kafka's ``RetriableException`` marker for the code.
    """

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code.name} ({int(code)})" + (f": {message}" if message else ""))

    @property
    def retriable(self) -> bool:
        return self.code.retriable


class LocalProtocolError(Exception):
    """This process misused the protocol API (a bug, never caused by a peer)."""


class RemoteProtocolError(Exception):
    """The peer broke the Kafka wire protocol; the connection must be closed.

    ``code`` is the Kafka error closest to the fault, for logs and metrics.
    """

    code: ErrorCode = ErrorCode.invalid_request


class InvalidFrameSizeError(RemoteProtocolError):
    """A frame's size prefix is negative (Kafka's ``InvalidReceiveException``)."""


class FrameTooLargeError(InvalidFrameSizeError):
    """A frame's size prefix exceeds ``socket.request.max.bytes``."""

    def __init__(self, size: int, max_size: int, hint: str = "") -> None:
        self.size = size
        self.max_size = max_size
        super().__init__(
            f"frame size {size} larger than socket.request.max.bytes {max_size}{hint}"
        )


class InvalidRequestError(RemoteProtocolError):
    """A request header or body could not be parsed."""


class UnknownApiKeyError(RemoteProtocolError):
    """The request's API key is not served by this broker."""

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        super().__init__(f"unknown or unserved API key {api_key}")


class UnsupportedVersionError(RemoteProtocolError):
    """The API key is served, but not at the requested version."""

    code = ErrorCode.unsupported_version

    def __init__(self, api_key: int, api_version: int, min_version: int, max_version: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.min_version = min_version
        self.max_version = max_version
        super().__init__(
            f"API key {api_key} version {api_version} not supported "
            f"(supported {min_version}..{max_version})"
        )
