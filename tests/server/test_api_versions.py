"""The ApiVersions handler (odradek.server.handlers.api_versions)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.index import load_request_schema

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import encode_body
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.server.handlers.api_versions import (
    API_VERSIONS_MAX,
    register_api_versions,
    unsupported_version_response,
)


def _ctx(version: int) -> RequestContext:
    return RequestContext(
        correlation_id=1,
        client_id="t",
        api_key=18,
        api_version=version,
        peer=("127.0.0.1", 1),
        connection_id="c",
    )


def _request(version: int, name: str = "odradek-test", sw_version: str = "1.0") -> Any:
    request_type = load_request_schema(18, version)
    if version >= 3:
        return request_type(client_software_name=name, client_software_version=sw_version)
    return request_type()


async def _noop(ctx: RequestContext, request: Any) -> Any:
    return None


def _call(registry: HandlerRegistry, version: int, request: Any) -> Any:
    handler = registry.lookup(18, version).handler
    return asyncio.run(handler(_ctx(version), request))  # type: ignore[arg-type]


def test_serves_v0_to_v4() -> None:
    assert API_VERSIONS_MAX == 4
    registry = HandlerRegistry()
    register_api_versions(registry)
    assert registry.lookup(18, 0) and registry.lookup(18, 4)


@pytest.mark.parametrize("version", range(5))
def test_table_is_derived_from_registry(version: int) -> None:
    registry = HandlerRegistry()
    register_api_versions(registry)
    registry.register(ApiKey.METADATA, 0, 12, _noop)  # registered after: still listed
    response = _call(registry, version, _request(version))
    assert response.__version__ == version
    assert response.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (3, 0, 12),
        (18, 0, 4),
    ]
    if version >= 3:
        assert response.supported_features == ()
        assert response.finalized_features == ()
        assert response.finalized_features_epoch == -1
    encode_body(response)  # encodable as is


@pytest.mark.parametrize(("name", "sw"), [("", "1.0"), ("bad name", "1"), ("ok", "-1")])
def test_invalid_client_software_is_invalid_request(name: str, sw: str) -> None:
    registry = HandlerRegistry()
    register_api_versions(registry)
    response = _call(registry, 3, _request(3, name, sw))
    assert response.error_code == ErrorCode.invalid_request


def test_unsupported_version_response_is_v0() -> None:
    registry = HandlerRegistry()
    register_api_versions(registry)
    response = unsupported_version_response(registry)
    assert response.__version__ == 0
    assert response.error_code == ErrorCode.unsupported_version == 35
    assert [(k.api_key, k.max_version) for k in response.api_keys] == [(18, 4)]
