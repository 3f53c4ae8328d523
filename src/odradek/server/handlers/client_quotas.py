"""DescribeClientQuotas (key 48, v0-1) and AlterClientQuotas (key 49, v0-1), KIP-546.

Follows Kafka's ``KafkaApis.handleDescribeClientQuotasRequest`` /
``handleAlterClientQuotasRequest`` and ``ZkAdminManager``'s quota code:

- An entity is a set of (entity type, name) components; a null name is the type's default
  entity. ``client-id``, ``user`` and ``user`` + ``client-id`` entities are stored (KIP-55;
  how they combine is :data:`~odradek.server.client_quotas.PRECEDENCE`); ``ip`` entities
  (KIP-612 connection rates) are not served, and are refused with INVALID_REQUEST and a
  message saying so, as is any other combination or type.
- Alter: each entry is checked on its own (known entity types, no type twice, known quota
  keys, no key twice, a positive value, a whole number for the byte rates) and answers
  with its own error; ``validate_only`` checks without writing. What is written lands in
  the metadata store (``/config/clients/<client id>``, ``/config/users/<user>``,
  ``/config/users/<user>/clients/<client id>``; a user's SCRAM credentials in the same
  node are kept) and from there in every broker's quota managers
  (:mod:`odradek.server.client_quotas`). The entries' operations are applied to the quotas
  the store holds at the write, compare-and-set (``MetadataStore.update_config``), not to
  this broker's view, which hears of another broker's change only from its notification.
- Describe: the filter's components match an entity's by type (exact name, the default,
  or any specified name); an entity without a component the filter names is left out, and
  ``strict`` leaves out entities with types the filter does not name either. A malformed
  filter (an unknown type or match type, a type twice, ``ip`` with another type) is an
  INVALID_REQUEST answer for the whole request.
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
    QuotaEntity,
)
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

VERSIONS = (0, 1)
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

_IP_REFUSED = ("ip quotas (connection_creation_rate, KIP-612) are not supported; use the "
               "broker's max.connection.creation.rate and max.connections.per.ip")


#: The longest user or client id a quota is stored for: Kafka's longest STRING, all that
#: AlterClientQuotas v0 carries. v1's compact strings carry longer, but the name, URL-encoded
#: (up to 3 bytes a byte), is a ZooKeeper node name: a megabyte path is a request ZooKeeper
#: drops the broker's connection for (``jute.maxbuffer``). Kafka sets no bound (ZooKeeper
#: mode fails the write; KRaft takes it); a principal or client id that long cannot match
#: a connection anyway (a client's own id is a STRING in every request header).
MAX_ENTITY_NAME_BYTES = 32767


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _entity(components: Any) -> QuotaEntity:
    """The stored entity an alter entry names: (user, client id), a name,
    :data:`DEFAULT_ENTITY`, or None where the entry has no such component."""
    types = Counter(c.entity_type for c in components)
    for entity_type, n in types.items():
        if entity_type not in ENTITY_TYPES:
            raise _Refused(ErrorCode.invalid_request, f"unknown entity type {entity_type!r}")
        if n > 1:
            raise _Refused(ErrorCode.invalid_request,
                           f"duplicate entity type {entity_type!r} in the entity")
    if IP in types:
        raise _Refused(ErrorCode.invalid_request, _IP_REFUSED)
    if not components:
        raise _Refused(ErrorCode.invalid_request, "the entity names no component")
    names: dict[str, str] = {}
    for c in components:
        name = c.entity_name
        if name is not None and len(name.encode()) > MAX_ENTITY_NAME_BYTES:
            raise _Refused(ErrorCode.invalid_request,
                           f"Entity name is longer than {MAX_ENTITY_NAME_BYTES} bytes")
        if name == DEFAULT_ENTITY:  # where the default entity is stored
            raise _Refused(ErrorCode.invalid_request,
                           f"the {c.entity_type} {DEFAULT_ENTITY} is reserved for the "
                           "default entity")
        names[c.entity_type] = DEFAULT_ENTITY if name is None else str(name)
    return names.get(USER), names.get(CLIENT_ID)


def _shown(entity: QuotaEntity) -> str:
    user, client_id = entity
    parts = [] if user is None else [f"user {user}"]
    if client_id is not None:
        parts.append(f"client-id {client_id}")
    return ", ".join(parts)


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
                f"invalid quota key {op.key!r} (supported: "
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


def _matches(filters: list[Any], strict: bool, entity: QuotaEntity) -> bool:
    """Does ``entity`` pass the filter components (Kafka's ``ClientQuotaFilter``)?"""
    user, client_id = entity
    components = {t: n for t, n in ((USER, user), (CLIENT_ID, client_id)) if n is not None}
    for f in filters:
        name = components.get(f.entity_type)
        if name is None:
            return False  # the entity has no component of that type
        if f.match_type == MATCH_EXACT and (name == DEFAULT_ENTITY or name != f.match):
            return False
        if f.match_type == MATCH_DEFAULT and name != DEFAULT_ENTITY:
            return False
        if f.match_type == MATCH_SPECIFIED and name == DEFAULT_ENTITY:
            return False
    return not (strict and set(components) - {f.entity_type for f in filters})


def _check_filter(filters: list[Any]) -> None:
    types = Counter(f.entity_type for f in filters)
    for entity_type, n in types.items():
        if n > 1:
            raise _Refused(ErrorCode.invalid_request,
                           f"duplicate filter component entity type {entity_type!r}")
    if IP in types and len(types) > 1:
        raise _Refused(ErrorCode.invalid_request,
                       "an ip filter component cannot be combined with user or client-id")
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


def _order(item: tuple[QuotaEntity, Any]) -> tuple[str, str]:
    user, client_id = item[0]
    return (user or "", client_id or "")


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
    for entity, configs in sorted(metadata.client_quotas.items(), key=_order):
        if not _matches(filters, request.strict, entity):
            continue
        values = tuple(
            make(m.ValueData, key=key, value=float(text))
            for key, text in sorted(configs.items()) if key in CLIENT_QUOTA_KEYS
        )
        if not values:
            continue
        components = tuple(
            make(m.EntityData, entity_type=entity_type,
                 entity_name=None if name == DEFAULT_ENTITY else name)
            for entity_type, name in ((USER, entity[0]), (CLIENT_ID, entity[1]))
            if name is not None
        )
        entries.append(make(m.EntryData, entity=components, values=values))
    return make(m.DescribeClientQuotasResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, entries=tuple(entries))


async def alter_client_quotas(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.ALTER_CONFIGS)
    metadata = services.metadata
    m = response_module("alter_client_quotas", ctx.api_version)
    results = []
    # entity -> the operations of this request's entries on it, in order: applied to the
    # quotas the store holds when they are written (another broker's change, which this
    # broker's view may not have heard of yet, is kept)
    changes: dict[QuotaEntity, list[Any]] = {}
    for entry in request.entries:
        code, message = ErrorCode.none, None
        try:
            entity = _entity(entry.entity)
            _altered({}, entry.ops)  # the checks: none depends on the stored quotas
            if not request.validate_only:
                changes.setdefault(entity, []).append(entry.ops)
        except _Refused as exc:
            code, message = exc.code, str(exc)
        results.append(make(
            m.EntryData, error_code=code, error_message=message,
            entity=tuple(make(m.EntityData, entity_type=c.entity_type,
                              entity_name=c.entity_name) for c in entry.entity),
        ))

    def write() -> None:
        for entity, op_lists in changes.items():
            def change(quotas: dict[str, str], op_lists: list[Any] = op_lists) -> dict[str, str]:
                for ops in op_lists:
                    quotas = _altered(quotas, ops)
                return quotas

            configs = metadata.update_client_quotas(entity, change)
            log.info("client quotas of %s are now %s", _shown(entity), configs)

    if changes:
        if metadata.remote:  # cluster mode: the ZooKeeper writes off the loop
            await asyncio.to_thread(write)
        else:
            write()
    return make(m.AlterClientQuotasResponse, throttle_time=ZERO_THROTTLE,
                entries=tuple(results))


