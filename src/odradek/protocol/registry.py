"""The handler registry: API key -> (version range, async handler). ApiVersions comes from it.

Replaces the giant ``match`` of Kafka's ``KafkaApis.handle`` with a table, as Tansu does:
each API family registers its handler once, registering a key twice is an error, and the
ApiVersions answer (Kafka's ``ApiVersionsResponse.collectApis``) is built from the table,
so the broker can never advertise a version it does not serve. Every registered version
must have a kio schema (request and response), checked at registration (from kio's index
and package files: the schema modules themselves are imported on a version's first
request, see :mod:`~odradek.protocol.codec`), except the old
versions kio lacks (``codec.LEGACY_VERSIONS``), whose registration brings its own
``decode`` and ``error_response`` and whose handler answers with a ``Send``.

A handler is ``async def handler(ctx: RequestContext, request) -> response``, where the
response is a kio response entity, a pre-encoded :class:`~odradek.protocol.send.Send`, or
``None`` for "no response" (Produce with acks=0). When it fails — a
:class:`~odradek.protocol.errors.KafkaError`, or any other exception, answered
UNKNOWN_SERVER_ERROR — the network layer answers with the API's error response (Kafka's
``AbstractRequest.getErrorResponse``), built for every API from its schema by
:func:`~odradek.protocol.error_response.build_error_response`. A registration may bring its
own ``error_response`` builder instead (ApiVersions does, and the old versions kio lacks);
a builder returning :data:`GENERIC_ERROR_RESPONSE` gets the generic one for that request
(with the error's message).

``serial=True`` asks the network layer not to start the request until every earlier
request of the same connection has completed — Kafka's one-request-at-a-time channel
muting, needed where execution order matters (Produce with idempotence).

``decode`` replaces kio's decoding of the request body (the hot-path Produce reader); the
generic error response reads what it returns by kio field names or positions.

Handlers are module-level functions that take what they need of the broker first
(``handler(services, ctx, request)``); :func:`bind` fixes that first argument once, at
registration. Usage::

    registry = HandlerRegistry()

    async def metadata(services: BrokerServices, ctx: RequestContext, request: Any) -> Any: ...

    registry.register(ApiKey.METADATA, 0, 12, bind(metadata, services))
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar, cast

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import LEGACY_VERSIONS, has_kio_schema, kio_versions
from odradek.protocol.errors import (
    ErrorCode,
    LocalProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)

__all__ = [
    "GENERIC_ERROR_RESPONSE",
    "ApiVersionRange",
    "Channel",
    "DuplicateHandlerError",
    "ErrorResponseBuilder",
    "Handler",
    "HandlerRegistry",
    "Registration",
    "RequestContext",
    "RequestDecoder",
    "Response",
    "bind",
]


class Channel(Protocol):
    """What a handler may ask of the connection its request came on."""

    def throttle(self, throttle_ms: int) -> None:
        """Mute the connection (read nothing more from it) for ``throttle_ms`` (KIP-219)."""


class RequestContext(NamedTuple):
    """Per-request state handed to handlers (Kafka's ``RequestContext`` + ``RequestHeader``).

    ``peer`` is (host, port); ``connection_id`` is Kafka-style
    ``"localHost:localPort-peerHost:peerPort-index"``; ``received_ns`` is
    ``time.monotonic_ns()`` when the frame was complete; ``size`` the frame's length (what
    a produce quota counts); ``channel`` the connection, to throttle (client quotas);
    ``principal`` the authenticated caller in Kafka's ``KafkaPrincipal`` string form
    (``"User:alice"``; ``"User:ANONYMOUS"`` on an unauthenticated listener) and
    ``listener_name`` the listener the request came in on. A NamedTuple, built in C: one
    is made per request, and a frozen dataclass costs several times more to build.
    """

    correlation_id: int
    client_id: str | None
    api_key: int
    api_version: int
    peer: tuple[str, int]
    connection_id: str
    header_version: int = 1
    received_ns: int = 0
    size: int = 0
    channel: Channel | None = None
    principal: str = "User:ANONYMOUS"
    listener_name: str = "PLAINTEXT"


GENERIC_ERROR_RESPONSE: Any = object()
"""Returned by a registration's ``error_response``: build the generic error response."""

Response: TypeAlias = Any
"""A kio response entity, a :class:`Send` (pre-encoded body), or ``None`` (no response)."""

Handler: TypeAlias = Callable[[RequestContext, Any], Awaitable[Any]]
ErrorResponseBuilder: TypeAlias = Callable[[RequestContext, Any, ErrorCode], Any]
RequestDecoder: TypeAlias = Callable[[bytes | bytearray | memoryview, int, int], Any]
"""(frame, offset of the body, version) -> request; raises InvalidRequestError."""


S = TypeVar("S")


def bind(handler: Callable[[S, RequestContext, Any], Awaitable[Any]], first: S) -> Handler:
    """``handler`` with ``first`` (the services it uses) as its first argument, fixed once.

    A bound method rather than :func:`functools.partial`: the interpreter unpacks a bound
    method at the call site and calls the function as cheaply as a plain one, where a
    ``partial`` adds a call through C to every request.
    """
    return cast(Handler, types.MethodType(handler, first))


class DuplicateHandlerError(LocalProtocolError):
    """An API key was registered twice."""


@dataclass(frozen=True, slots=True)
class ApiVersionRange:
    """One row of the ApiVersions table."""

    api_key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    error_response: ErrorResponseBuilder | None = None  # None: build_error_response
    serial: bool = False
    decode: RequestDecoder | None = None  # None: kio's decoding

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class HandlerRegistry:
    """The table of served APIs. Not thread-safe; fill it before the server starts."""

    __slots__ = ("_by_key", "_table")

    def __init__(self) -> None:
        self._by_key: dict[int, Registration] = {}
        self._table: tuple[ApiVersionRange, ...] | None = None

    def register(
        self,
        api_key: int,
        min_version: int,
        max_version: int,
        handler: Handler,
        *,
        error_response: ErrorResponseBuilder | None = None,
        serial: bool = False,
        decode: RequestDecoder | None = None,
    ) -> Registration:
        """Serve ``api_key`` versions ``min_version..max_version`` with ``handler``.

        ``decode`` replaces kio's decoding of the request body (a hot-path reader).

        Raises :class:`DuplicateHandlerError` if the key is already registered and
        :class:`LocalProtocolError` if the range is empty or kio lacks a schema in it.
        """
        key = int(api_key)
        if key in self._by_key:
            raise DuplicateHandlerError(f"API key {_name(key)} is already registered")
        known = kio_versions(key)
        if known is None:
            raise LocalProtocolError(f"kio has no schemas for API key {key}")
        if min_version > max_version:
            raise LocalProtocolError(f"empty version range {min_version}..{max_version}")
        low = min(known[0], LEGACY_VERSIONS.get(key, known)[0])
        if min_version < low or max_version > known[1]:
            raise LocalProtocolError(
                f"{_name(key)} versions {min_version}..{max_version} outside the versions "
                f"kio has schemas for ({known[0]}..{known[1]})"
            )
        legacy = LEGACY_VERSIONS.get(key, (0, -1))
        for version in range(min_version, max_version + 1):
            # fails loudly now rather than on the first request, without importing the
            # schema (that waits for the first request of the version)
            if has_kio_schema(key, version):
                continue
            if not legacy[0] <= version <= legacy[1]:
                raise LocalProtocolError(f"kio has no schema for {_name(key)} v{version}")
            if decode is None or error_response is None:
                raise LocalProtocolError(
                    f"{_name(key)} v{version} has no kio schema: the registration must "
                    "bring its own decode and error_response"
                )
        registration = Registration(
            key, min_version, max_version, handler, error_response, serial, decode
        )
        self._by_key[key] = registration
        self._table = None
        return registration

    def lookup(self, api_key: int, api_version: int) -> Registration:
        """The registration serving this request.

        Raises :class:`UnknownApiKeyError` for an unserved key and
        :class:`UnsupportedVersionError` (UNSUPPORTED_VERSION, 35) for a served key at a
        version outside its range.
        """
        registration = self._by_key.get(api_key)
        if registration is None:
            raise UnknownApiKeyError(api_key)
        if not registration.min_version <= api_version <= registration.max_version:
            raise UnsupportedVersionError(
                api_key, api_version, registration.min_version, registration.max_version
            )
        return registration

    def get(self, api_key: int) -> Registration | None:
        return self._by_key.get(int(api_key))

    def supported_versions(self) -> tuple[ApiVersionRange, ...]:
        """The ApiVersions table: every served key with its range, sorted by key."""
        if self._table is None:
            self._table = tuple(
                ApiVersionRange(r.api_key, r.min_version, r.max_version)
                for _, r in sorted(self._by_key.items())
            )
        return self._table

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key)


def _name(api_key: int) -> str:
    try:
        return f"{ApiKey(api_key).name}({api_key})"
    except ValueError:
        return str(api_key)

