"""DescribeClientQuotas (key 48, v0-1) and AlterClientQuotas (key 49, v0-1), KIP-546.

Follows Kafka's ``KafkaApis.handleDescribeClientQuotasRequest`` /
``handleAlterClientQuotasRequest`` and ``ZkAdminManager``'s quota code:

- An entity is a set of (entity type, name) components; a null name is the type's default
  entity. Only ``client-id`` entities can be stored: ``user`` entities need authenticated
  principals, which Odradek does not have yet, and ``ip`` entities (KIP-612 connection
  rates) are not served; both are refused with INVALID_REQUEST and a message saying so.
- Alter: each entry is checked on its own (known entity types, no type twice, known quota
  keys, no key twice, a positive value, a whole number for the byte rates) and answers
  with its own error; ``validate_only`` checks without writing. What is written lands in
  the metadata store (``/config/clients/<client id>``) and from there in every broker's
  quota managers (:mod:`odradek.server.client_quotas`).
- Describe: the filter's components match an entity's by type (exact name, the default,
  or any specified name); ``strict`` leaves out entities with types the filter does not
  name. A malformed filter is an INVALID_REQUEST answer for the whole request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.server.authorization import AclOperation, require_on_cluster
from odradek.server.client_quotas import (
    CLIENT_ID,
    CLIENT_QUOTA_KEYS,
    DEFAULT_ENTITY,
    ENTITY_TYPES,
    IP,
    USER,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

VERSIONS = (0, 1)
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

_UNSUPPORTED_ENTITY = {
    USER: "user quotas need authenticated users, which Odradek does not have yet (no SASL); "
          "set client-id quotas instead",
    IP: "ip quotas (connection_creation_rate, KIP-612) are not supported; use the broker's "
        "max.connection.creation.rate and max.connections.per.ip",
}


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _client_entity(components: Any) -> str:
    """The stored entity an alter entry names: a client id or :data:`DEFAULT_ENTITY`."""
    types = Counter(c.entity_type for c in components)
    for entity_type, n in types.items():
        if entity_type not in ENTITY_TYPES:
            raise _Refused(ErrorCode.invalid_request, f"unknown entity type {entity_type!r}")
        if n > 1:
            raise _Refused(ErrorCode.invalid_request,
                           f"duplicate entity type {entity_type!r} in the entity")
    for entity_type, message in _UNSUPPORTED_ENTITY.items():
        if entity_type in types:
            raise _Refused(ErrorCode.invalid_request, message)
    if not components:
        raise _Refused(ErrorCode.invalid_request, "the entity names no component")
    name = components[0].entity_name
    if name == DEFAULT_ENTITY:  # where the default entity is stored
        raise _Refused(ErrorCode.invalid_request,
                       f"the client id {DEFAULT_ENTITY} is reserved for the default entity")
    return DEFAULT_ENTITY if name is None else str(name)


def _altered(current: dict[str, str], ops: Any) -> dict[str, str]:
    keys = Counter(op.key for op in ops)
    repeated = sorted(k for k, n in keys.items() if n > 1)
    if repeated:
        raise _Refused(ErrorCode.invalid_request, f"duplicate quota keys: {repeated}")
    out = dict(current)
    for op in ops:
        whole = CLIENT_QUOTA_KEYS.get(op.key)
        if whole is None:
            raise _Refused(
                ErrorCode.invalid_request,
                f"invalid quota key {op.key!r} for a client-id entity (supported: "
                f"{', '.join(sorted(CLIENT_QUOTA_KEYS))})",
            )
        if op.remove:
            out.pop(op.key, None)
            continue
        value = float(op.value)
        if not value > 0 or value == float("inf"):
            raise _Refused(ErrorCode.invalid_request,
                           f"quota {op.key} must be a positive number, not {value}")
        if whole:
            if value != int(value):
                raise _Refused(ErrorCode.invalid_request,
                               f"quota {op.key} must be a whole number, not {value}")
            out[op.key] = str(int(value))
        else:
            out[op.key] = repr(value)
    return out


def _matches(filters: list[Any], strict: bool, name: str) -> bool:
    """Does the client-id entity ``name`` pass the filter components?"""
    for f in filters:
        if f.entity_type != CLIENT_ID:
            return False  # the entity has no component of that type
        if f.match_type == MATCH_EXACT and (name == DEFAULT_ENTITY or name != f.match):
            return False
        if f.match_type == MATCH_DEFAULT and name != DEFAULT_ENTITY:
            return False
        if f.match_type == MATCH_SPECIFIED and name == DEFAULT_ENTITY:
            return False
    return not (strict and not any(f.entity_type == CLIENT_ID for f in filters))


def _check_filter(filters: list[Any]) -> None:
    types = Counter(f.entity_type for f in filters)
    for entity_type, n in types.items():
        if n > 1:
            raise _Refused(ErrorCode.invalid_request,
                           f"duplicate filter component entity type {entity_type!r}")
    for f in filters:
        if f.entity_type not in ENTITY_TYPES:
            raise _Refused(ErrorCode.invalid_request,
                           f"unknown entity type {f.entity_type!r}")
        if f.match_type == MATCH_EXACT:
            if f.match is None:
                raise _Refused(ErrorCode.invalid_request,
                               "an exact-name filter component needs a name to match")
        elif f.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if f.match is not None:
                raise _Refused(ErrorCode.invalid_request,
                               f"filter match type {f.match_type} takes no name to match")
        else:
            raise _Refused(ErrorCode.invalid_request, f"unknown match type {f.match_type}")


def register_client_quotas(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.DESCRIBE_CLIENT_QUOTAS, VERSIONS[0], VERSIONS[1],
                      bind(describe_client_quotas, services))
    registry.register(ApiKey.ALTER_CLIENT_QUOTAS, VERSIONS[0], VERSIONS[1],
                      bind(alter_client_quotas, services))


async def describe_client_quotas(
    services: BrokerServices, ctx: RequestContext, request: Any,
) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.DESCRIBE_CONFIGS)
    metadata = services.metadata
    m = response_module("describe_client_quotas", ctx.api_version)
    filters = list(request.components)
    try:
        _check_filter(filters)
    except _Refused as exc:
        return make(m.DescribeClientQuotasResponse, throttle_time=ZERO_THROTTLE,
                    error_code=exc.code, error_message=str(exc), entries=None)
    entries = []
    for name, configs in sorted(metadata.client_quotas.items()):
        if not _matches(filters, request.strict, name):
            continue
        values = tuple(
            make(m.ValueData, key=key, value=float(text))
            for key, text in sorted(configs.items()) if key in CLIENT_QUOTA_KEYS
        )
        if not values:
            continue
        entity = (make(m.EntityData, entity_type=CLIENT_ID,
                       entity_name=None if name == DEFAULT_ENTITY else name),)
        entries.append(make(m.EntryData, entity=entity, values=values))
    return make(m.DescribeClientQuotasResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, entries=tuple(entries))


async def alter_client_quotas(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.ALTER_CONFIGS)
    metadata = services.metadata
    m = response_module("alter_client_quotas", ctx.api_version)
    results = []
    # entity -> its quotas after this request's earlier entries
    writes: dict[str, dict[str, str]] = {}
    for entry in request.entries:
        code, message = ErrorCode.none, None
        try:
            entity = _client_entity(entry.entity)
            current = writes.get(entity, metadata.client_quotas.get(entity, {}))
            configs = _altered(current, entry.ops)
            if not request.validate_only:
                writes[entity] = configs
        except _Refused as exc:
            code, message = exc.code, str(exc)
        results.append(make(
            m.EntryData, error_code=code, error_message=message,
            entity=tuple(make(m.EntityData, entity_type=c.entity_type,
                              entity_name=c.entity_name) for c in entry.entity),
        ))

    def write() -> None:
        for entity, configs in writes.items():
            metadata.set_client_quotas(entity, configs)
            log.info("client quotas of client-id %s are now %s", entity, configs)

    if writes:
        if metadata.remote:  # cluster mode: the ZooKeeper writes off the loop
            await asyncio.to_thread(write)
        else:
            write()
    return make(m.AlterClientQuotasResponse, throttle_time=ZERO_THROTTLE,
                entries=tuple(results))


