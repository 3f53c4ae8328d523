"""Request/response body codecs per (API key, version), backed by kio (sans-I/O).

Plays the part of Kafka's generated ``*RequestData.read`` / ``*ResponseData.write`` plus
``ApiKeys.requestHeaderVersion`` / ``responseHeaderVersion``: kio generates one frozen
dataclass per message and version from Kafka's JSON schemas, and its native
``entity_reader`` decodes them. This module only looks the right class up and caches the
reader and writer for every (key, version), so the hot path is one dict lookup.

Schema modules are imported on first use, not up front: kio has one module per message
and version (300+), and importing them all cost every broker start about 2 s of CPU. What
must fail early (a handler registered for a version kio has no schema for) asks
:func:`has_kio_schema` instead, which reads kio's index and looks for the two modules'
files in kio's package directories without importing them.

Header versions come from the schemas, never from a hand-kept table: a request uses header
v2 (tagged fields) when its version is flexible, v1 otherwise; a response header v1 when
flexible, v0 otherwise — except ApiVersions, whose response header is always v0 so that a
client can parse it before knowing which versions the broker speaks (KIP-511).

For a version above the newest kio knows (a client newer than our schemas), the header
version of the newest known version is used: flexibility, once introduced, is never
removed ("flexibleVersions": "N+"). This is what lets us read the header of an
ApiVersions request we cannot parse and still answer it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal

import kio.schema
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import (
    InvalidRequestError,
    LocalProtocolError,
    UnknownApiKeyError,
)
from odradek.protocol.wire_guard import check_body

__all__ = [
    "LEGACY_VERSIONS",
    "ApiSchema",
    "LegacyBody",
    "decode_request",
    "encode_body",
    "has_kio_schema",
    "kio_versions",
    "request_header_version",
    "response_header_version",
    "schema",
]

HeaderVersion = Literal[0, 1, 2]

_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)


@dataclass(frozen=True, slots=True)
class ApiSchema:
    """Everything needed to decode a request and encode a response of one (key, version)."""

    api_key: int
    api_version: int
    request_type: type[Any]
    response_type: type[Any]
    request_header_version: HeaderVersion
    response_header_version: HeaderVersion
    read_request: Callable[[bytes | bytearray | memoryview, int], tuple[Any, int]]
    write_response: Callable[[Any, Any], None]


def kio_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) versions kio has schemas for, or ``None`` for an unknown key."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name]
    return min(versions), max(versions)


@cache
def has_kio_schema(api_key: int, api_version: int) -> bool:
    """Whether kio has the request and response schemas of (key, version), known without
    importing them: kio's index names both modules and their files are in kio's package
    directories. A module found nowhere on disk (a packaging kio does not ship with) is
    imported to decide, so the answer is the one :func:`schema` would give."""
    name = api_key_map.get(api_key)
    if name is None:
        return False
    entities = schema_name_map[name].get(api_version)
    if entities is None:
        return False
    for entity_type in (EntityType.request, EntityType.response):
        path = entities.get(entity_type)
        if path is None or not _module_present(path.split(":", 1)[0]):
            return False
    return True


def _module_present(module: str) -> bool:
    if module in sys.modules:
        return True
    package, _, leaf = module.rpartition(".")
    parts = package.split(".")[2:]  # below kio.schema
    directories = [os.path.join(root, *parts) for root in kio.schema.__path__]
    if importlib.machinery.PathFinder.find_spec(leaf, directories) is not None:
        return True
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


# Versions Kafka 3.9 still served that kio has no schemas for: Kafka 4.0 removed them from
# its JSON schemas (KIP-896) and kio is generated from those. They are served by readers
# and writers of their own (protocol/legacy_api.py) or transcoded to a newer version
# (server/handlers/_transcode.py); all are non-flexible (request header
# v1, response header v0).
LEGACY_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    int(ApiKey.PRODUCE): (0, 2),
    int(ApiKey.FETCH): (0, 3),
    int(ApiKey.LIST_OFFSETS): (0, 0),
    int(ApiKey.OFFSET_COMMIT): (0, 1),
    int(ApiKey.OFFSET_FETCH): (0, 0),
    int(ApiKey.CREATE_TOPICS): (0, 1),
    int(ApiKey.DELETE_TOPICS): (0, 0),
    int(ApiKey.OFFSET_FOR_LEADER_EPOCH): (0, 1),
    int(ApiKey.DESCRIBE_CONFIGS): (0, 0),
    int(ApiKey.DESCRIBE_ACLS): (0, 0),
    int(ApiKey.CREATE_ACLS): (0, 0),
    int(ApiKey.DELETE_ACLS): (0, 0),
    int(ApiKey.WRITE_TXN_MARKERS): (0, 0),
}


class LegacyBody:
    """Stands for the request and response types of a version kio has no schema for: a
    registration serving one brings its own ``decode`` and ``error_response`` and answers
    with a pre-encoded ``Send``."""


def _no_kio(*_args: Any) -> Any:
    raise LocalProtocolError("no kio schema for this version: the handler decodes/encodes it")


@cache
def schema(api_key: int, api_version: int) -> ApiSchema:
    """The cached :class:`ApiSchema`; ``LocalProtocolError`` if kio has no such schema
    (and it is not one of the :data:`LEGACY_VERSIONS`). The first call for a (key,
    version) imports its kio modules; the next ones are one dict lookup."""
    try:
        request_type: type[Any] = load_request_schema(api_key, api_version)
        response_type: type[Any] = load_response_schema(api_key, api_version)
    except Exception as e:  # kio.index.KioIndexError and dynamic-import failures
        legacy = LEGACY_VERSIONS.get(api_key)
        if legacy is not None and legacy[0] <= api_version <= legacy[1]:
            return ApiSchema(api_key, api_version, LegacyBody, LegacyBody, 1, 0, _no_kio,
                             _no_kio)
        raise LocalProtocolError(f"kio has no schema for API {api_key} v{api_version}") from e
    flexible = bool(request_type.__flexible__)
    response_header: HeaderVersion = (
        0 if api_key == _API_VERSIONS or not response_type.__flexible__ else 1
    )
    return ApiSchema(
        api_key=api_key,
        api_version=api_version,
        request_type=request_type,
        response_type=response_type,
        request_header_version=2 if flexible else 1,
        response_header_version=response_header,
        read_request=entity_reader(request_type),
        write_response=entity_writer(response_type),
    )


@cache
def request_header_version(api_key: int, api_version: int) -> HeaderVersion:
    """Request header version (1 or 2) for a key/version, derived from kio's schemas.

    Versions above kio's newest use the newest's header version (see module docstring);
    ``UnknownApiKeyError`` for a key kio does not know.
    """
    known = kio_versions(api_key)
    if known is None:
        raise UnknownApiKeyError(api_key)
    low, high = known
    return schema(api_key, min(max(api_version, low), high)).request_header_version


def response_header_version(api_key: int, api_version: int) -> HeaderVersion:
    """Response header version (0 or 1); always 0 for ApiVersions."""
    if api_key == _API_VERSIONS:
        return 0
    return schema(api_key, api_version).response_header_version


def decode_request(
    api_key: int, api_version: int, data: bytes | bytearray | memoryview, offset: int = 0
) -> Any:
    """Decode the request body that starts at ``offset`` in ``data``.

    Any decoding failure (truncated body, bad string length, bad UTF-8 ...) becomes
    :class:`InvalidRequestError`. Trailing bytes after the body are tolerated, as Kafka does.
    """
    api_schema = schema(api_key, api_version)
    reader = api_schema.read_request
    if not isinstance(data, bytes):
        data = memoryview(data).toreadonly()  # kio's native readers refuse writable ones
    # Lengths first: kio aborts the process on an array that declares more elements
    # than memory can hold (see wire_guard).
    check_body(api_schema.request_type, data, offset)
    try:
        entity, _size = reader(data, offset)
    except Exception as e:  # kio raises DecodeError subclasses, ValueError, ...
        raise InvalidRequestError(
            f"cannot decode API {api_key} v{api_version} request body: {e!r}"
        ) from e
    return entity


def encode_body(entity: Any) -> bytes:
    """Encode a kio request/response entity (body only, no header, no size prefix)."""
    entity_type = type(entity)
    if entity_type.__type__ not in (EntityType.response, EntityType.request):
        raise LocalProtocolError(f"{entity_type.__name__} is not a request or response")
    buf = io.BytesIO()
    entity_writer(entity_type)(buf, entity)
    return buf.getvalue()
