"""Old API versions served by transcoding to the oldest version kio knows.

How it works: Kafka 4.0 removed the oldest versions of many APIs (KIP-896), and kio,
generated from Kafka 4.0's schemas, has no classes for them. Where an old version's
request is a newer version's request with fewer fields (CreateTopics v0 is v2 without
``validate_only``; DeleteTopics v0 is v1), its bytes are rewritten into that newer
version (:attr:`OldVersions.request_to_new`) and decoded by kio; the handler runs as for
the newer version (``ctx.api_version`` set to it), and its kio response is written back
in the old layout (:attr:`OldVersions.response_to_old`), as a pre-encoded ``Send``. The
error response goes the same way. The registry accepts the old versions because the
registration brings this decode and error response (``codec.LEGACY_VERSIONS``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.protocol.codec import decode_request
from odradek.protocol.error_response import build_error_response
from odradek.protocol.errors import ErrorCode, InvalidRequestError
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    ErrorResponseBuilder,
    Handler,
    HandlerRegistry,
    RequestContext,
    RequestDecoder,
)
from odradek.protocol.send import Send

__all__ = ["OldVersions", "register_with_old_versions"]


@dataclass(frozen=True, slots=True)
class OldVersions:
    first: int  # the oldest version served
    kio_version: int  # the version old requests are transcoded to
    request_to_new: Callable[[bytes, int], bytes]  # (old body, old version) -> new body
    response_to_old: Callable[[Any, int], bytes]  # (new response, old version) -> old body


def register_with_old_versions(
    registry: HandlerRegistry, api_key: int, max_version: int, handler: Handler,
    old: OldVersions, serial: bool = False,
) -> None:
    new = old.kio_version

    def decode(frame: bytes | bytearray | memoryview, offset: int, version: int) -> Any:
        if version >= new:
            return decode_request(api_key, version, frame, offset)
        try:
            body = old.request_to_new(bytes(memoryview(frame)[offset:]), version)
        except (struct.error, IndexError, ValueError) as exc:
            raise InvalidRequestError(
                f"cannot decode API {api_key} v{version} request body: {exc!r}") from exc
        return decode_request(api_key, new, body, 0)

    async def dispatch(ctx: RequestContext, request: Any) -> Any:
        if ctx.api_version >= new:
            return await handler(ctx, request)
        response = await handler(ctx._replace(api_version=new), request)
        return Send((old.response_to_old(response, ctx.api_version),),
                    getattr(response, "error_code", 0))

    def error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        if ctx.api_version >= new:
            return GENERIC_ERROR_RESPONSE
        response = build_error_response(ctx.api_key, new, request, code)
        return Send((old.response_to_old(response, ctx.api_version),),
                    getattr(response, "error_code", 0))

    decoder: RequestDecoder = decode
    errors: ErrorResponseBuilder = error_response
    registry.register(api_key, old.first, max_version, dispatch, decode=decoder,
                      error_response=errors, serial=serial)
