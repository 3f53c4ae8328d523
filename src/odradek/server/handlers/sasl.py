"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2).

How it works: as in Kafka, these requests are the connection's authentication, which the
network layer owns (``server/network/sasl.py``, Kafka's ``SaslServerAuthenticator``); the
handlers here carry them to the connection's authenticator (the request's channel) and
put its answers in Kafka's responses. On a connection with no authenticator (a listener
without SASL) both answer ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis`` does for a SASL
request that reaches it. A failed authentication is SASL_AUTHENTICATION_FAILED with the
mechanism's message; SaslAuthenticate v1+ answers the session's lifetime (KIP-368).
"""

from __future__ import annotations

import datetime
from typing import Any, NamedTuple, Protocol

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.handlers._entities import make, response_module

__all__ = ["register_sasl", "sasl_authenticate", "sasl_handshake"]

HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)


class _Result(NamedTuple):
    error: ErrorCode
    message: str | None
    token: bytes
    session_lifetime_ms: int


class Authenticator(Protocol):
    """What the handlers ask of a connection's SASL authenticator."""

    def handshake(self, version: int, mechanism: str) -> tuple[ErrorCode, tuple[str, ...]]:
        ...

    async def authenticate(self, token: bytes) -> _Result: ...


def register_sasl(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.SASL_HANDSHAKE, *HANDSHAKE_VERSIONS, sasl_handshake)
    registry.register(ApiKey.SASL_AUTHENTICATE, *AUTHENTICATE_VERSIONS, sasl_authenticate)


def _authenticator(ctx: RequestContext) -> Authenticator | None:
    return getattr(ctx.channel, "authenticator", None)


async def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    m = response_module("sasl_handshake", ctx.api_version)
    auth = _authenticator(ctx)
    if auth is None:
        return make(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state,
                    mechanisms=())
    error, mechanisms = auth.handshake(ctx.api_version, request.mechanism)
    return make(m.SaslHandshakeResponse, error_code=error, mechanisms=tuple(mechanisms))


async def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    m = response_module("sasl_authenticate", ctx.api_version)
    auth = _authenticator(ctx)
    if auth is None:
        return make(m.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                    error_message="SaslAuthenticate request received on a listener without "
                    "SASL", auth_bytes=b"", session_lifetime=datetime.timedelta(0))
    result = await auth.authenticate(bytes(request.auth_bytes))
    return make(m.SaslAuthenticateResponse, error_code=result.error,
                error_message=result.message, auth_bytes=result.token,
                session_lifetime=datetime.timedelta(milliseconds=result.session_lifetime_ms))
