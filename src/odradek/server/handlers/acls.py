"""DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31), v1-3.

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
notifications, every broker's authorizer; this broker's takes them at once. Version 0
(without pattern types; Kafka 1.0 clients) is not served: kio has no schema for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode, KafkaError
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

if TYPE_CHECKING:
    from odradek.cluster.acl_store import AclStore
    from odradek.security.acl import AclAuthorizer
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

VERSIONS = (1, 3)
NO_AUTHORIZER = "No Authorizer is configured on the broker"
T = TypeVar("T")


def register_acls(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.DESCRIBE_ACLS, *VERSIONS, bind(describe_acls, services))
    registry.register(ApiKey.CREATE_ACLS, *VERSIONS, bind(create_acls, services))
    registry.register(ApiKey.DELETE_ACLS, *VERSIONS, bind(delete_acls, services))


def _enum(cls: Callable[[int], T], value: int) -> T | None:
    try:
        return cls(value)
    except ValueError:
        return None


def _filter(f: Any) -> AclBindingFilter | str:
    """The request's filter, or why it is invalid."""
    rtype = _enum(ResourceType, f.resource_type_filter)
    ptype = _enum(PatternType, f.pattern_type_filter)
    op = _enum(AclOperation, f.operation)
    perm = _enum(AclPermissionType, f.permission_type)
    if rtype is None or ptype is None or op is None or perm is None:
        return "the filter has an unknown resource, pattern, operation or permission type"
    flt = AclBindingFilter(rtype, f.resource_name_filter, ptype, f.principal_filter,
                           f.host_filter, op, perm)
    return flt.invalid_reason() or flt


def _binding(c: Any) -> AclBinding | str:
    """The creation's binding, or why it cannot be stored."""
    rtype = _enum(ResourceType, c.resource_type)
    ptype = _enum(PatternType, c.resource_pattern_type)
    op = _enum(AclOperation, c.operation)
    perm = _enum(AclPermissionType, c.permission_type)
    if rtype is None or ptype is None or op is None or perm is None:
        return "the ACL has an unknown resource, pattern, operation or permission type"
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


async def _write(services: BrokerServices, work: Callable[[], T]) -> T:
    """Run the store writes off the loop in cluster mode (ZooKeeper), on it otherwise."""
    if services.metadata.remote:
        return await asyncio.to_thread(work)
    return work()


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
    outcomes: list[str | None] = []
    adds: dict[ResourcePattern, set[AclEntry]] = {}
    for creation in request.creations:
        binding = _binding(creation)
        if isinstance(binding, str):
            outcomes.append(binding)
            continue
        outcomes.append(None)
        adds.setdefault(binding.pattern, set()).add(binding.entry)

    def write() -> dict[ResourcePattern, frozenset[AclEntry]]:
        return {p: store.update(p, add=entries) for p, entries in adds.items()}

    written = await _write(services, write)
    for pattern, entries in written.items():
        authorizer.set_acls(pattern, entries)
        log.info("ACLs added to %s by %s: %s", pattern, ctx.principal,
                 sorted(f"{e.permission.title} {e.principal} {e.operation.title} from "
                        f"{e.host}" for e in adds[pattern]))
    return make(m.CreateAclsResponse, throttle_time=ZERO_THROTTLE, results=tuple(
        make(m.AclCreationResult,
             error_code=ErrorCode.none if reason is None else ErrorCode.invalid_request,
             error_message=reason)
        for reason in outcomes))


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

    def write() -> dict[ResourcePattern, frozenset[AclEntry]]:
        return {p: store.update(p, remove=entries) for p, entries in removals.items()}

    written = await _write(services, write)
    for pattern, entries in written.items():
        authorizer.set_acls(pattern, entries)
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
