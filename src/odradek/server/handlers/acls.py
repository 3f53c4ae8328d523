"""DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31), v0-3.

Follows Kafka's ``AclApis`` (``handleDescribeAcls``, ``handleCreateAcls``,
``handleDeleteAcls``) over ``AclAuthorizer``:

- No authorizer configured: every answer is SECURITY_DISABLED ("No Authorizer is
  configured"), as Kafka's.
- Describe needs Describe on the Cluster, Create and Delete need Alter on it; refused, the
  whole request is answered CLUSTER_AUTHORIZATION_FAILED.
- Create: each creation is checked on its own (known resource, pattern and permission
  types, an operation other than ANY/UNKNOWN, a non-empty name, ``kafka-cluster`` as the
  Cluster's name, a ``Type:name`` principal) and answers INVALID_REQUEST with the reason
  when it fails; the valid ones are written, one compare-and-set per pattern.
- Delete: each filter removes every stored binding it matches and lists them; a filter
  with an UNKNOWN field answers INVALID_REQUEST.
- Describe: the bindings matching the filter, grouped by resource pattern; a filter with
  an UNKNOWN field answers INVALID_REQUEST.

The changes reach the store (:mod:`odradek.cluster.acl_store`) and, through its change
notifications, every broker's authorizer; this broker's takes them at once.

Version 0 (Kafka 1.0 clients: no pattern types; KIP-896 removed it from Kafka 4.0, kio
lacks it) is transcoded to v1 (``_transcode.py``) with the pattern type LITERAL, as Kafka
reads a v0 request, and answered in v0's layout (no pattern type per resource).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.cluster.store import RequestTooLargeError, shown_path
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import encode_body
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.primitives import BodyReader
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.server.authorization import allowed_on_cluster
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._transcode import OldVersions, register_with_old_versions

if TYPE_CHECKING:
    from odradek.cluster.acl_store import AclStore
    from odradek.security.acl import AclAuthorizer
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

VERSIONS = (0, 3)
NO_AUTHORIZER = "No Authorizer is configured on the broker"
T = TypeVar("T")


def register_acls(registry: HandlerRegistry, services: BrokerServices) -> None:
    register_with_old_versions(registry, ApiKey.DESCRIBE_ACLS, VERSIONS[1],
                               bind(describe_acls, services),
                               OldVersions(0, 1, _describe_v0, _described_v0))
    register_with_old_versions(registry, ApiKey.CREATE_ACLS, VERSIONS[1],
                               bind(create_acls, services),
                               OldVersions(0, 1, _entries_v0, _created_v0))
    register_with_old_versions(registry, ApiKey.DELETE_ACLS, VERSIONS[1],
                               bind(delete_acls, services),
                               OldVersions(0, 1, _entries_v0, _deleted_v0))


# -- version 0: v1 without the pattern types ------------------------------------------
_LITERAL = struct.pack(">b", PatternType.LITERAL)
# A v0 creation or filter: resource type (int8), three strings, operation, permission.
_ENTRY_MIN = 1 + 3 * 2 + 2


def _describe_v0(body: bytes, version: int) -> bytes:
    """DescribeAcls v0: the pattern type filter (LITERAL) goes after the resource name."""
    reader = BodyReader(body)
    reader.take(1, "resource_type")
    reader.skip_string("resource_name")
    return body[: reader.pos] + _LITERAL + body[reader.pos :]


def _entries_v0(body: bytes, version: int) -> bytes:
    """CreateAcls v0 creations / DeleteAcls v0 filters: the pattern type (LITERAL) after
    each resource name."""
    reader = BodyReader(body)
    out = bytearray(body[:4])
    for _ in range(reader.count(_ENTRY_MIN, "entries")):
        start = reader.pos
        reader.take(1, "resource_type")
        reader.skip_string("resource_name")
        out += body[start : reader.pos] + _LITERAL
        start = reader.pos
        reader.skip_string("principal")
        reader.skip_string("host")
        reader.take(2, "operation and permission")
        out += body[start : reader.pos]
    out += body[reader.pos :]
    return bytes(out)


def _string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _throttle(response: Any) -> bytes:
    return struct.pack(">i", int(response.throttle_time.total_seconds() * 1000))


def _described_v0(response: Any, version: int) -> bytes:
    out = bytearray(_throttle(response))
    out += struct.pack(">h", int(response.error_code.value)) + _string(response.error_message)
    out += struct.pack(">i", len(response.resources))
    for r in response.resources:
        out += struct.pack(">b", r.resource_type) + _string(r.resource_name)
        out += struct.pack(">i", len(r.acls))
        for a in r.acls:
            out += _string(a.principal) + _string(a.host)
            out += struct.pack(">bb", a.operation, a.permission_type)
    return bytes(out)


def _created_v0(response: Any, version: int) -> bytes:
    return encode_body(response)  # v0 and v1 answers are laid out alike


def _deleted_v0(response: Any, version: int) -> bytes:
    out = bytearray(_throttle(response))
    out += struct.pack(">i", len(response.filter_results))
    for f in response.filter_results:
        out += struct.pack(">h", int(f.error_code.value)) + _string(f.error_message)
        out += struct.pack(">i", len(f.matching_acls))
        for m in f.matching_acls:
            out += struct.pack(">h", int(m.error_code.value)) + _string(m.error_message)
            out += struct.pack(">b", m.resource_type) + _string(m.resource_name)
            out += _string(m.principal) + _string(m.host)
            out += struct.pack(">bb", m.operation, m.permission_type)
    return bytes(out)


def _enum(cls: Callable[[int], T], value: int) -> T | None:
    try:
        return cls(value)
    except ValueError:
        return None


_Kinds = tuple[ResourceType, PatternType, AclOperation, AclPermissionType]


def _kinds(resource_type: int, pattern_type: int, operation: int,
           permission: int) -> _Kinds | None:
    """The four enum fields of a filter or a creation, or None if one is unknown."""
    rtype = _enum(ResourceType, resource_type)
    ptype = _enum(PatternType, pattern_type)
    op = _enum(AclOperation, operation)
    perm = _enum(AclPermissionType, permission)
    if rtype is None or ptype is None or op is None or perm is None:
        return None
    return rtype, ptype, op, perm


def _filter(f: Any) -> AclBindingFilter | str:
    """The request's filter, or why it is invalid."""
    kinds = _kinds(f.resource_type_filter, f.pattern_type_filter, f.operation,
                   f.permission_type)
    if kinds is None:
        return "the filter has an unknown resource, pattern, operation or permission type"
    rtype, ptype, op, perm = kinds
    flt = AclBindingFilter(rtype, f.resource_name_filter, ptype, f.principal_filter,
                           f.host_filter, op, perm)
    return flt.invalid_reason() or flt


#: The longest resource name, principal or host an ACL is stored with: Kafka's longest
#: STRING, all a non-flexible CreateAcls (v0, v1) can carry. Flexible versions carry longer
#: (compact strings), but the ACLs of a resource are one ZooKeeper node, its name the
#: resource's: megabytes there would be a request ZooKeeper drops the broker's connection for
#: (``jute.maxbuffer``). Kafka sets no bound (ZooKeeper mode fails the write; KRaft takes it).
MAX_ACL_STRING_BYTES = 32767


def _too_long(c: Any) -> str | None:
    for field, value in (("Resource name", c.resource_name), ("Principal", c.principal),
                         ("Host", c.host)):
        if len(value.encode()) > MAX_ACL_STRING_BYTES:
            return f"{field} is longer than {MAX_ACL_STRING_BYTES} bytes"
    return None


def _binding(c: Any) -> AclBinding | str:
    """The creation's binding, or why it cannot be stored."""
    too_long = _too_long(c)
    if too_long is not None:
        return too_long
    kinds = _kinds(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
    if kinds is None:
        return "the ACL has an unknown resource, pattern, operation or permission type"
    rtype, ptype, op, perm = kinds
    binding = AclBinding(ResourcePattern(rtype, c.resource_name, ptype),
                         AclEntry(c.principal, c.host, op, perm))
    if "/" in c.resource_name:
        return "a resource name with '/' cannot be stored in Kafka's ZooKeeper layout"
    return binding.invalid_reason() or binding


def _check(services: BrokerServices, ctx: RequestContext,
           operation: AclOperation) -> tuple[AclAuthorizer, AclStore] | tuple[ErrorCode, str]:
    authorizer, store = services.authorizer, services.acl_store
    if authorizer is None or store is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    if not allowed_on_cluster(authorizer, ctx, operation):
        raise KafkaError(ErrorCode.cluster_authorization_failed,
                         f"{operation.title} on the cluster is not authorized")
    return authorizer, store


async def _store(services: BrokerServices, authorizer: AclAuthorizer, store: AclStore,
                 changes: dict[ResourcePattern, set[AclEntry]], *, add: bool,
                 refused: dict[ResourcePattern, str] | None = None,
                 ) -> dict[ResourcePattern, frozenset[AclEntry]]:
    """Write the changes to the store (off the loop in cluster mode: ZooKeeper), then give
    the authorizer each pattern's ACLs as stored. A pattern whose ACLs would be more than one
    store write carries (``jute.maxbuffer``: every ACL of a resource is one node) is not
    written: its reason goes to ``refused``."""
    def work() -> dict[ResourcePattern, frozenset[AclEntry]]:
        written: dict[ResourcePattern, frozenset[AclEntry]] = {}
        for p, entries in changes.items():
            try:
                written[p] = (store.update(p, add=entries) if add
                              else store.update(p, remove=entries))
            except RequestTooLargeError:
                if refused is None:
                    raise
                refused[p] = (f"The ACLs of {p.resource_type.title} {shown_path(p.name)} "
                              "would be more than one metadata store write may carry "
                              f"(jute.maxbuffer: {services.metadata.store.max_request_bytes}"
                              " bytes)")
        return written

    written = await asyncio.to_thread(work) if services.metadata.remote else work()
    for pattern, entries in written.items():
        authorizer.set_acls(pattern, entries)
    return written


async def describe_acls(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("describe_acls", ctx.api_version)
    checked = _check(services, ctx, AclOperation.DESCRIBE)
    if isinstance(checked[0], ErrorCode):
        return make(m.DescribeAclsResponse, throttle_time=ZERO_THROTTLE,
                    error_code=checked[0], error_message=checked[1], resources=())
    authorizer = checked[0]
    flt = _filter(request)
    if isinstance(flt, str):
        return make(m.DescribeAclsResponse, throttle_time=ZERO_THROTTLE,
                    error_code=ErrorCode.invalid_request, error_message=flt, resources=())
    by_pattern: dict[ResourcePattern, list[Any]] = {}
    for b in authorizer.bindings(flt):
        by_pattern.setdefault(b.pattern, []).append(make(
            m.AclDescription, principal=b.entry.principal, host=b.entry.host,
            operation=b.entry.operation.value, permission_type=b.entry.permission.value))
    resources = tuple(
        make(m.DescribeAclsResource, resource_type=p.resource_type.value,
             resource_name=p.name, pattern_type=p.pattern_type.value, acls=tuple(acls))
        for p, acls in by_pattern.items()
    )
    return make(m.DescribeAclsResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, resources=resources)


async def create_acls(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("create_acls", ctx.api_version)
    checked = _check(services, ctx, AclOperation.ALTER)
    if isinstance(checked[0], ErrorCode):
        code, message = checked
        return make(m.CreateAclsResponse, throttle_time=ZERO_THROTTLE, results=tuple(
            make(m.AclCreationResult, error_code=code, error_message=message)
            for _ in request.creations))
    authorizer, store = checked
    outcomes: list[str | ResourcePattern] = []
    adds: dict[ResourcePattern, set[AclEntry]] = {}
    for creation in request.creations:
        binding = _binding(creation)
        if isinstance(binding, str):
            outcomes.append(binding)
            continue
        outcomes.append(binding.pattern)
        adds.setdefault(binding.pattern, set()).add(binding.entry)

    refused: dict[ResourcePattern, str] = {}
    for pattern in await _store(services, authorizer, store, adds, add=True, refused=refused):
        log.info("ACLs added to %s by %s: %s", pattern, ctx.principal,
                 sorted(f"{e.permission.title} {e.principal} {e.operation.title} from "
                        f"{e.host}" for e in adds[pattern]))
    reasons = [o if isinstance(o, str) else refused.get(o) for o in outcomes]
    return make(m.CreateAclsResponse, throttle_time=ZERO_THROTTLE, results=tuple(
        make(m.AclCreationResult,
             error_code=ErrorCode.none if reason is None else ErrorCode.invalid_request,
             error_message=reason)
        for reason in reasons))


async def delete_acls(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("delete_acls", ctx.api_version)
    checked = _check(services, ctx, AclOperation.ALTER)
    if isinstance(checked[0], ErrorCode):
        code, message = checked
        return make(m.DeleteAclsResponse, throttle_time=ZERO_THROTTLE, filter_results=tuple(
            make(m.DeleteAclsFilterResult, error_code=code, error_message=message,
                 matching_acls=()) for _ in request.filters))
    authorizer, store = checked
    filters = [_filter(f) for f in request.filters]
    matched: list[list[AclBinding]] = [
        [] if isinstance(flt, str) else authorizer.bindings(flt) for flt in filters]
    removals: dict[ResourcePattern, set[AclEntry]] = {}
    for bindings in matched:
        for b in bindings:
            removals.setdefault(b.pattern, set()).add(b.entry)

    for pattern in await _store(services, authorizer, store, removals, add=False):
        log.info("ACLs removed from %s by %s: %d", pattern, ctx.principal,
                 len(removals[pattern]))
    results = []
    for flt, bindings in zip(filters, matched, strict=True):
        if isinstance(flt, str):
            results.append(make(m.DeleteAclsFilterResult, error_code=ErrorCode.invalid_request,
                                error_message=flt, matching_acls=()))
            continue
        results.append(make(m.DeleteAclsFilterResult, error_code=ErrorCode.none,
                            error_message=None, matching_acls=tuple(
            make(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                 resource_type=b.pattern.resource_type.value, resource_name=b.pattern.name,
                 pattern_type=b.pattern.pattern_type.value, principal=b.entry.principal,
                 host=b.entry.host, operation=b.entry.operation.value,
                 permission_type=b.entry.permission.value)
            for b in bindings)))
    return make(m.DeleteAclsResponse, throttle_time=ZERO_THROTTLE,
                filter_results=tuple(results))
