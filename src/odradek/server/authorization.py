"""Which operations a caller may perform on a resource: the ``authorized_operations``
fields of Metadata (v8+), DescribeCluster and DescribeGroups (v3+), asked for with their
``include_*_authorized_operations`` flags (KIP-430).

How it works: Kafka answers them from its authorizer (``AuthHelper.authorizedOperations``)
as a 32-bit field where bit ``n`` stands for the ``AclOperation`` of code ``n``. Without an
authorizer, which is Odradek's case until ACLs are built, every operation that applies to
the resource type is allowed (``AclEntry.supportedOperations``), and that is the answer.
A field the request did not ask for carries the marker ``-2147483648``.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["NOT_REQUESTED", "AclOperation", "ResourceType", "authorized_operations"]

NOT_REQUESTED = -(1 << 31)


class AclOperation(IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclOperation`` codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class ResourceType(IntEnum):
    """Kafka's ``org.apache.kafka.common.resource.ResourceType`` codes (those answered)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE,
                                   AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    }),
}
_FIELDS = {rt: sum(1 << op for op in ops) for rt, ops in _SUPPORTED.items()}


def authorized_operations(resource_type: ResourceType, name: str | None = None) -> int:
    """The operations allowed on the resource ``name`` of ``resource_type``, as Kafka's
    bit field. With no authorizer every supported operation is allowed, whatever the name
    and whoever asks."""
    return _FIELDS[resource_type]
