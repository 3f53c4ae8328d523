"""HandlerRegistry (odradek.protocol.registry), ApiKey and ErrorCode tables."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.index import api_key_map

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import (
    ErrorCode,
    KafkaError,
    LocalProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
    error_code,
)
from odradek.protocol.registry import (
    ApiVersionRange,
    DuplicateHandlerError,
    HandlerRegistry,
    RequestContext,
)


async def _noop(ctx: RequestContext, request: Any) -> Any:
    return None


def test_register_and_lookup() -> None:
    registry = HandlerRegistry()

    async def metadata(ctx: RequestContext, request: Any) -> Any:
        return None

    registry.register(ApiKey.METADATA, 0, 12, metadata)
    registration = registry.lookup(3, 12)
    assert registration.handler is metadata
    assert (registration.min_version, registration.max_version) == (0, 12)
    assert ApiKey.METADATA in registry and len(registry) == 1


def test_duplicate_registration_is_an_error() -> None:
    registry = HandlerRegistry()
    registry.register(ApiKey.METADATA, 0, 12, _noop)
    with pytest.raises(DuplicateHandlerError, match="METADATA"):
        registry.register(ApiKey.METADATA, 0, 1, _noop)


def test_versions_must_have_kio_schemas() -> None:
    registry = HandlerRegistry()
    with pytest.raises(LocalProtocolError):
        registry.register(ApiKey.PRODUCE, 0, 9, _noop)  # kio starts at Produce v3
    with pytest.raises(LocalProtocolError):
        registry.register(ApiKey.API_VERSIONS, 0, 99, _noop)
    with pytest.raises(LocalProtocolError):
        registry.register(4, 0, 0, _noop)  # LeaderAndIsr: gone in Kafka 4
    with pytest.raises(LocalProtocolError):
        registry.register(ApiKey.METADATA, 5, 2, _noop)
    assert len(registry) == 0


def test_lookup_errors_are_precise() -> None:
    registry = HandlerRegistry()
    registry.register(ApiKey.METADATA, 4, 12, _noop)
    with pytest.raises(UnknownApiKeyError):
        registry.lookup(ApiKey.FETCH, 12)
    with pytest.raises(UnsupportedVersionError) as info:
        registry.lookup(ApiKey.METADATA, 13)
    assert info.value.code == ErrorCode.unsupported_version == 35
    assert (info.value.min_version, info.value.max_version) == (4, 12)
    with pytest.raises(UnsupportedVersionError):
        registry.lookup(ApiKey.METADATA, 3)


def test_supported_versions_is_the_table_sorted() -> None:
    registry = HandlerRegistry()
    registry.register(ApiKey.METADATA, 0, 12, _noop)
    registry.register(ApiKey.API_VERSIONS, 0, 4, _noop)
    registry.register(ApiKey.PRODUCE, 3, 11, _noop)
    assert registry.supported_versions() == (
        ApiVersionRange(0, 3, 11),
        ApiVersionRange(3, 0, 12),
        ApiVersionRange(18, 0, 4),
    )


def test_api_key_enum_matches_kio() -> None:
    assert {k.value: k.name.lower() for k in ApiKey} == dict(api_key_map)


def test_error_codes() -> None:
    assert error_code(35) is ErrorCode.unsupported_version
    assert error_code(-1) is ErrorCode.unknown_server_error
    with pytest.raises(ValueError):
        error_code(31_999)
    err = KafkaError(ErrorCode.not_leader_or_follower, "moved")
    assert err.retriable and "NOT_LEADER_OR_FOLLOWER" in str(err).upper()


def test_versions_kio_lacks_need_their_own_decoder_and_error_response() -> None:
    """Produce v0-2 (KIP-896 removed them; kio has no schema) are accepted only with a
    registration's own decode and error_response; older still is refused."""

    def decode(frame: Any, offset: int, version: int) -> Any:
        return None

    def error(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        return None

    registry = HandlerRegistry()
    with pytest.raises(LocalProtocolError, match="own decode"):
        registry.register(ApiKey.PRODUCE, 0, 11, _noop, decode=decode)
    registry.register(ApiKey.PRODUCE, 0, 11, _noop, decode=decode, error_response=error)
    assert registry.supported_versions()[0] == ApiVersionRange(0, 0, 11)
    with pytest.raises(LocalProtocolError):
        registry.register(ApiKey.DESCRIBE_LOG_DIRS, 0, 4, _noop, decode=decode,
                          error_response=error)  # v0 is not among the served old ones


_REGISTER_EVERY_KEY = """
import sys
from kio.schema.index import api_key_map
from odradek.protocol.codec import LEGACY_VERSIONS, decode_request, encode_body, kio_versions
from odradek.protocol.registry import HandlerRegistry

async def noop(ctx, request):
    return None

def legacy_decode(frame, offset, version):
    return None

def legacy_error(ctx, request, code):
    return None

def schemas():
    return {m for m in sys.modules if m.startswith("kio.schema.") and m.count(".") >= 4}

before = schemas()
registry = HandlerRegistry()
for key in api_key_map:
    low, high = kio_versions(key)
    low = min(low, LEGACY_VERSIONS.get(key, (low, high))[0])
    registry.register(key, low, high, noop, decode=legacy_decode, error_response=legacy_error)
imported = sorted(schemas() - before)
assert not imported, f"registration imported {len(imported)} schema modules: {imported[:5]}"
from kio.schema.metadata.v12.request import MetadataRequest
request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
assert decode_request(3, 12, encode_body(request)) == request
print(len(registry), "keys registered")
"""


def test_registration_imports_no_schema_module() -> None:
    """Registering every key kio knows, for every version it has, checks the schemas
    exist without importing one (they cost a broker start ~2 s of CPU); the first decode
    of a version imports its schema. In a fresh interpreter: this one has them all."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _REGISTER_EVERY_KEY],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"{len(api_key_map)} keys registered" in result.stdout
