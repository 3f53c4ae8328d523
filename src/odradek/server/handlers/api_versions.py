"""ApiVersions (key 18), answered from the handler registry.

Follows Kafka's ``ApiVersionsResponse`` (``collectApis`` / ``createApiVersionsResponse``)
and the ApiVersions branch of ``KafkaApis``:

- The ``api_keys`` table is exactly :meth:`HandlerRegistry.supported_versions`, so we never
  advertise a (key, version) that is not served.
- v3+ requests are flexible and carry ``client_software_name`` / ``client_software_version``
  (KIP-511); if either fails Kafka's validation pattern the answer is INVALID_REQUEST.
- v3+ responses have the feature fields (KIP-584) as tagged fields; we have no features,
  so ``supported_features`` and ``finalized_features`` are empty and
  ``finalized_features_epoch`` is -1.
- A request at a version we do not serve is answered (not dropped) with a v0 response
  carrying UNSUPPORTED_VERSION (35) and our ranges, so the client can retry with a version
  we know (old librdkafka relies on this). That answer is built here by
  :func:`unsupported_version_response` but sent by the network layer, because the body of
  such a request cannot be parsed.
"""

from __future__ import annotations

import datetime
import importlib
import re
from dataclasses import fields
from typing import Any, Final

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import kio_versions, schema
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import (
    ApiVersionRange,
    HandlerRegistry,
    Registration,
    RequestContext,
    bind,
)

__all__ = [
    "API_VERSIONS_MAX",
    "API_VERSIONS_MIN",
    "build_api_versions_response",
    "register_api_versions",
    "unsupported_version_response",
]

API_VERSIONS_MIN: Final = 0
API_VERSIONS_MAX: Final = min(4, (kio_versions(ApiKey.API_VERSIONS) or (0, 0))[1])
"""Kafka 4.x serves ApiVersions v0..v4."""

_SOFTWARE_PATTERN: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
"""Kafka's ``ApiVersionsRequest.isValid`` pattern for client software name and version."""

_ZERO: Final = datetime.timedelta(0)


def build_api_versions_response(
    version: int,
    table: tuple[ApiVersionRange, ...],
    error_code: ErrorCode = ErrorCode.none,
) -> Any:
    """An ApiVersions response entity of ``version`` listing ``table``."""
    module = importlib.import_module(f"kio.schema.api_versions.v{version}.response")
    response_type = schema(ApiKey.API_VERSIONS, version).response_type
    api_version_type = module.ApiVersion
    api_keys = tuple(
        api_version_type(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
        for r in table
    )
    kwargs: dict[str, Any] = {"error_code": error_code, "api_keys": api_keys}
    names = {f.name for f in fields(response_type)}
    if "throttle_time" in names:
        kwargs["throttle_time"] = _ZERO
    if "finalized_features_epoch" in names:
        kwargs["supported_features"] = ()
        kwargs["finalized_features_epoch"] = -1
        kwargs["finalized_features"] = ()
    return response_type(**kwargs)


def unsupported_version_response(registry: HandlerRegistry) -> Any:
    """The v0 UNSUPPORTED_VERSION answer to an ApiVersions request we cannot parse.

    Kafka lists only ApiVersions' own range here; we list every served range, a superset
    that clients read the same way.
    """
    return build_api_versions_response(
        0, registry.supported_versions(), ErrorCode.unsupported_version
    )


def register_api_versions(
    registry: HandlerRegistry,
    min_version: int = API_VERSIONS_MIN,
    max_version: int = API_VERSIONS_MAX,
) -> Registration:
    """Register the ApiVersions handler; its table is read from ``registry`` per request,
    so APIs registered later are included."""
    return registry.register(
        ApiKey.API_VERSIONS, min_version, max_version, bind(api_versions, _Answers(registry)),
        error_response=error_response,
    )


class _Answers:
    """The ApiVersions responses of one registry. Responses are immutable: they are cached
    per (version, table, error code). The table is part of the key, so registrations made
    later still show up."""

    __slots__ = ("_cache", "_registry")

    def __init__(self, registry: HandlerRegistry) -> None:
        self._registry = registry
        self._cache: dict[tuple[int, tuple[ApiVersionRange, ...], ErrorCode], Any] = {}

    def respond(self, version: int, code: ErrorCode) -> Any:
        key = (version, self._registry.supported_versions(), code)
        response = self._cache.get(key)
        if response is None:
            if len(self._cache) > 64:
                self._cache.clear()
            response = self._cache[key] = build_api_versions_response(version, key[1], code)
        return response


async def api_versions(answers: _Answers, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 3 and not (
        _SOFTWARE_PATTERN.fullmatch(request.client_software_name)
        and _SOFTWARE_PATTERN.fullmatch(request.client_software_version)
    ):
        return answers.respond(ctx.api_version, ErrorCode.invalid_request)
    return answers.respond(ctx.api_version, ErrorCode.none)


def error_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    return build_api_versions_response(ctx.api_version, (), code)
