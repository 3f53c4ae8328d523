"""What each API asks of the authorizer, and the helpers handlers ask it through.

How it works: :data:`API_CHECKS` is the one table of API key -> the (resource type,
operation, error) checks Kafka's ``KafkaApis`` makes for that request; every API the broker
serves has a row (a test walks the live registry). Handlers make the checks with
:func:`allowed` (one resource), :func:`filter_refused` (many) and :func:`require` (the
whole request), answering the row's error code for what is refused. With no
``authorizer.class.name`` the broker's authorizer is None and every helper answers
"allowed" after one ``is None`` test: nothing is checked and nothing is paid.

The ``authorized_operations`` fields of Metadata (v8+), DescribeCluster and DescribeGroups
(v3+), asked for with their ``include_*_authorized_operations`` flags (KIP-430), come from
the authorizer as a 32-bit field where bit ``n`` stands for the ``AclOperation`` of code
``n`` (``AuthHelper.authorizedOperations``); without an authorizer every operation the
resource type supports is set. A field the request did not ask for carries the marker
``-2147483648``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.registry import RequestContext
from odradek.security.acl import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclOperation,
    ResourceType,
    supported_operations,
)

__all__ = [
    "API_CHECKS",
    "NOT_REQUESTED",
    "AclOperation",
    "Check",
    "ResourceType",
    "allowed",
    "allowed_on_any",
    "allowed_on_cluster",
    "authorized_operations",
    "cluster_operations",
    "filter_refused",
    "require",
    "require_on_cluster",
]

NOT_REQUESTED = -(1 << 31)

_Op = AclOperation
_R = ResourceType


@dataclass(frozen=True, slots=True)
class Check:
    """One check an API makes: ``operation`` on resources of ``resource_type``, refused
    with ``error`` (a Kafka error name); ``when`` says which requests it applies to.
    ``hides``: what is refused is left out of the answer rather than answered with the
    error."""

    resource_type: ResourceType
    operation: AclOperation
    error: str
    when: str = ""
    hides: bool = False


_TOPIC = "TOPIC_AUTHORIZATION_FAILED"
_GROUP = "GROUP_AUTHORIZATION_FAILED"
_CLUSTER = "CLUSTER_AUTHORIZATION_FAILED"
_TXN = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"

API_CHECKS: dict[ApiKey, tuple[Check, ...]] = {
    ApiKey.PRODUCE: (
        Check(_R.TOPIC, _Op.WRITE, _TOPIC, "each topic"),
        Check(_R.TRANSACTIONAL_ID, _Op.WRITE, _TXN, "a transactional produce"),
    ),
    ApiKey.FETCH: (
        Check(_R.TOPIC, _Op.READ, _TOPIC, "each topic of a consumer's fetch"),
        Check(_R.CLUSTER, _Op.CLUSTER_ACTION, _TOPIC,
              "a follower's fetch (replica_id >= 0): every partition refused"),
    ),
    ApiKey.LIST_OFFSETS: (Check(_R.TOPIC, _Op.DESCRIBE, _TOPIC, "each topic"),),
    ApiKey.METADATA: (
        Check(_R.TOPIC, _Op.DESCRIBE, _TOPIC,
              "each topic; left out of an all-topics answer"),
        Check(_R.CLUSTER, _Op.CREATE, _TOPIC,
              "auto-creation (or Create on the topic)"),
    ),
    ApiKey.OFFSET_COMMIT: (
        Check(_R.GROUP, _Op.READ, _GROUP),
        Check(_R.TOPIC, _Op.READ, _TOPIC, "each topic"),
    ),
    ApiKey.OFFSET_FETCH: (
        Check(_R.GROUP, _Op.DESCRIBE, _GROUP),
        Check(_R.TOPIC, _Op.DESCRIBE, _TOPIC, "each topic; left out of an all-offsets answer"),
    ),
    ApiKey.OFFSET_DELETE: (
        Check(_R.GROUP, _Op.DELETE, _GROUP),
        Check(_R.TOPIC, _Op.READ, _TOPIC, "each topic"),
    ),
    ApiKey.FIND_COORDINATOR: (
        Check(_R.GROUP, _Op.DESCRIBE, _GROUP, "key type GROUP"),
        Check(_R.TRANSACTIONAL_ID, _Op.DESCRIBE, _TXN, "key type TRANSACTION"),
    ),
    ApiKey.JOIN_GROUP: (Check(_R.GROUP, _Op.READ, _GROUP),),
    ApiKey.HEARTBEAT: (Check(_R.GROUP, _Op.READ, _GROUP),),
    ApiKey.LEAVE_GROUP: (Check(_R.GROUP, _Op.READ, _GROUP),),
    ApiKey.SYNC_GROUP: (Check(_R.GROUP, _Op.READ, _GROUP),),
    ApiKey.DESCRIBE_GROUPS: (Check(_R.GROUP, _Op.DESCRIBE, _GROUP, "each group"),),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (Check(_R.GROUP, _Op.READ, _GROUP),),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (
        Check(_R.GROUP, _Op.DESCRIBE, _GROUP, "each group"),
        Check(_R.TOPIC, _Op.DESCRIBE, _TOPIC,
              "each topic the group's members subscribe to or are assigned"),
    ),
    ApiKey.LIST_GROUPS: (
        Check(_R.CLUSTER, _Op.DESCRIBE, _CLUSTER,
              "all groups; else only the groups Described", hides=True),
        Check(_R.GROUP, _Op.DESCRIBE, _GROUP, "each group, without Describe on the cluster",
              hides=True),
    ),
    ApiKey.DELETE_GROUPS: (Check(_R.GROUP, _Op.DELETE, _GROUP, "each group"),),
    ApiKey.API_VERSIONS: (),
    ApiKey.SASL_HANDSHAKE: (),
    ApiKey.SASL_AUTHENTICATE: (),
    ApiKey.CREATE_TOPICS: (
        Check(_R.CLUSTER, _Op.CREATE, _TOPIC, "or Create on each topic"),
        Check(_R.TOPIC, _Op.DESCRIBE_CONFIGS, _TOPIC,
              "v5+: the configs in the answer (else left out, TOPIC_AUTHORIZATION_FAILED)"),
    ),
    ApiKey.DELETE_TOPICS: (Check(_R.TOPIC, _Op.DELETE, _TOPIC, "each topic"),),
    ApiKey.DELETE_RECORDS: (Check(_R.TOPIC, _Op.DELETE, _TOPIC, "each topic"),),
    ApiKey.INIT_PRODUCER_ID: (
        Check(_R.TRANSACTIONAL_ID, _Op.WRITE, _TXN, "with a transactional id"),
        Check(_R.CLUSTER, _Op.IDEMPOTENT_WRITE, _CLUSTER,
              "without one: or Write on any topic"),
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        Check(_R.TRANSACTIONAL_ID, _Op.WRITE, _TXN, "v0-3"),
        Check(_R.TOPIC, _Op.WRITE, _TOPIC, "v0-3, each topic (the others OPERATION_NOT_ATTEMPTED)"),
        Check(_R.CLUSTER, _Op.CLUSTER_ACTION, _CLUSTER, "v4 (from brokers)"),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        Check(_R.TRANSACTIONAL_ID, _Op.WRITE, _TXN),
        Check(_R.GROUP, _Op.READ, _GROUP),
    ),
    ApiKey.END_TXN: (Check(_R.TRANSACTIONAL_ID, _Op.WRITE, _TXN),),
    ApiKey.TXN_OFFSET_COMMIT: (
        Check(_R.TRANSACTIONAL_ID, _Op.WRITE, _TXN),
        Check(_R.GROUP, _Op.READ, _GROUP),
        Check(_R.TOPIC, _Op.READ, _TOPIC, "each topic"),
    ),
    ApiKey.DESCRIBE_PRODUCERS: (Check(_R.TOPIC, _Op.READ, _TOPIC, "each topic"),),
    ApiKey.DESCRIBE_TRANSACTIONS: (Check(_R.TRANSACTIONAL_ID, _Op.DESCRIBE, _TXN, "each id"),),
    ApiKey.LIST_TRANSACTIONS: (
        Check(_R.TRANSACTIONAL_ID, _Op.DESCRIBE, _TXN, "each id; left out", hides=True),
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        Check(_R.TOPIC, _Op.DESCRIBE, _TOPIC, "each topic, without ClusterAction"),
    ),
    ApiKey.DESCRIBE_ACLS: (Check(_R.CLUSTER, _Op.DESCRIBE, _CLUSTER),),
    ApiKey.CREATE_ACLS: (Check(_R.CLUSTER, _Op.ALTER, _CLUSTER),),
    ApiKey.DELETE_ACLS: (Check(_R.CLUSTER, _Op.ALTER, _CLUSTER),),
    ApiKey.DESCRIBE_CONFIGS: (
        Check(_R.TOPIC, _Op.DESCRIBE_CONFIGS, _TOPIC, "topic resources"),
        Check(_R.CLUSTER, _Op.DESCRIBE_CONFIGS, _CLUSTER, "broker and broker-logger resources"),
        Check(_R.GROUP, _Op.DESCRIBE_CONFIGS, _GROUP, "group resources"),
    ),
    ApiKey.ALTER_CONFIGS: (
        Check(_R.TOPIC, _Op.ALTER_CONFIGS, _TOPIC, "topic resources"),
        Check(_R.CLUSTER, _Op.ALTER_CONFIGS, _CLUSTER, "broker resources"),
        Check(_R.GROUP, _Op.ALTER_CONFIGS, _GROUP, "group resources"),
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        Check(_R.TOPIC, _Op.ALTER_CONFIGS, _TOPIC, "topic resources"),
        Check(_R.CLUSTER, _Op.ALTER_CONFIGS, _CLUSTER, "broker and broker-logger resources"),
        Check(_R.GROUP, _Op.ALTER_CONFIGS, _GROUP, "group resources"),
    ),
    ApiKey.CREATE_PARTITIONS: (Check(_R.TOPIC, _Op.ALTER, _TOPIC, "each topic"),),
    ApiKey.ELECT_LEADERS: (Check(_R.CLUSTER, _Op.ALTER, _CLUSTER),),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (Check(_R.CLUSTER, _Op.ALTER, _CLUSTER),),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (Check(_R.CLUSTER, _Op.DESCRIBE, _CLUSTER),),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (Check(_R.CLUSTER, _Op.DESCRIBE_CONFIGS, _CLUSTER),),
    ApiKey.ALTER_CLIENT_QUOTAS: (Check(_R.CLUSTER, _Op.ALTER_CONFIGS, _CLUSTER),),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (Check(_R.CLUSTER, _Op.DESCRIBE, _CLUSTER),),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (Check(_R.CLUSTER, _Op.ALTER, _CLUSTER),),
    ApiKey.DESCRIBE_CLUSTER: (),  # answered to all; KIP-430's field from the authorizer
    ApiKey.WRITE_TXN_MARKERS: (
        Check(_R.CLUSTER, _Op.CLUSTER_ACTION, _CLUSTER, "without Alter on the cluster"),
    ),
}


def allowed(authorizer: AclAuthorizer | None, ctx: RequestContext, operation: AclOperation,
            resource_type: ResourceType, name: str) -> bool:
    """May the caller of ``ctx`` perform ``operation`` on the resource? (No authorizer:
    yes.)"""
    return authorizer is None or authorizer.authorize(
        ctx.principal, ctx.peer[0], operation, resource_type, name)


def allowed_on_cluster(authorizer: AclAuthorizer | None, ctx: RequestContext,
                       operation: AclOperation) -> bool:
    return authorizer is None or authorizer.authorize(
        ctx.principal, ctx.peer[0], operation, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_on_any(authorizer: AclAuthorizer | None, ctx: RequestContext,
                   operation: AclOperation, resource_type: ResourceType) -> bool:
    """May the caller perform ``operation`` on some resource of the type?"""
    return authorizer is None or authorizer.authorize_any(
        ctx.principal, ctx.peer[0], operation, resource_type)


def filter_refused(authorizer: AclAuthorizer | None, ctx: RequestContext,
                   operation: AclOperation, resource_type: ResourceType,
                   names: Iterable[str]) -> set[str]:
    """The names among ``names`` the caller may NOT perform ``operation`` on (no
    authorizer: none, and nothing is looked at)."""
    if authorizer is None:
        return set()
    principal, host = ctx.principal, ctx.peer[0]
    return {n for n in set(names)
            if not authorizer.authorize(principal, host, operation, resource_type, n)}


_ALL_SUPPORTED = {rt: sum(1 << op for op in supported_operations(rt))
                  for rt in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER)}


def authorized_operations(authorizer: AclAuthorizer | None, ctx: RequestContext,
                          resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """The operations the caller may perform on the resource, as Kafka's bit field."""
    if authorizer is None:
        return _ALL_SUPPORTED[resource_type]
    return authorizer.authorized_operations(ctx.principal, ctx.peer[0], resource_type, name)


def cluster_operations(authorizer: AclAuthorizer | None, ctx: RequestContext) -> int:
    """The cluster's authorized operations as Metadata and DescribeCluster answer them: 0
    to a caller who may not Describe the cluster (Kafka's ``handleDescribeCluster``)."""
    if not allowed_on_cluster(authorizer, ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(authorizer, ctx, ResourceType.CLUSTER)


_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}


def require(authorizer: AclAuthorizer | None, ctx: RequestContext, operation: AclOperation,
            resource_type: ResourceType, name: str) -> None:
    """Raise the resource type's authorization error unless the caller may perform
    ``operation`` on the resource: the request is answered with it as a whole."""
    if not allowed(authorizer, ctx, operation, resource_type, name):
        raise KafkaError(_ERRORS[resource_type],
                         f"{operation.title} on {resource_type.title} {name!r} is not "
                         "authorized")


def require_on_cluster(authorizer: AclAuthorizer | None, ctx: RequestContext,
                       operation: AclOperation) -> None:
    if not allowed_on_cluster(authorizer, ctx, operation):
        raise KafkaError(ErrorCode.cluster_authorization_failed,
                         f"{operation.title} on the cluster is not authorized")
