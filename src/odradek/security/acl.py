"""ACLs and the authorizer's decision, as Kafka's ``AclAuthorizer`` makes it.

How it works: an ACL binding (``AclBinding``) is a resource pattern (type, name, LITERAL or
PREFIXED) and an entry (principal, host, operation, ALLOW or DENY). The authorizer keeps
the entries of each pattern; to decide whether ``principal`` on ``host`` may perform
``operation`` on a resource it gathers the entries of every pattern that covers the
resource's name (the literal name, the literal wildcard ``*``, and every prefix of the name
stored as PREFIXED), then, as ``AclAuthorizer.authorizeAction``:

1. a principal listed in ``super.users`` is allowed everything;
2. no entry at all for the resource: ``allow.everyone.if.no.acl.found`` decides;
3. a matching DENY entry denies (DENY wins);
4. a matching ALLOW entry allows, where asking for Describe is answered by an ALLOW of
   Read, Write, Delete or Alter too, and DescribeConfigs by one of AlterConfigs;
5. anything else is denied.

An entry matches when its principal is the caller's or ``User:*``, its host the caller's
or ``*``, and its operation the one asked or ``All``. Filters (``AclBindingFilter``, of
DescribeAcls and DeleteAcls) match bindings as Kafka's do: ``ANY`` for every enum field,
``None`` for every string, and the pattern type ``MATCH`` for every pattern that covers a
literal name.

Decisions are cached per (principal, host, operation, resource type, name); any change of
the ACLs clears the cache, so the hot paths (Produce, Fetch) pay one dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = [
    "CLUSTER_NAME",
    "KNOWN_AUTHORIZERS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclAuthorizer",
    "AclBinding",
    "AclBindingFilter",
    "AclEntry",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "parse_super_users",
    "supported_operations",
]

# The resource name, and host, that stands for all (ResourcePattern.WILDCARD_RESOURCE).
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name (Resource.CLUSTER_NAME)
# authorizer.class.name values that enable this authorizer: Kafka's ZooKeeper-mode class,
# its pre-2.0 name, KRaft's, and Odradek's own.
KNOWN_AUTHORIZERS = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "odradek.security.acl.AclAuthorizer",
})
# Cached decisions kept at most (cleared when full, and on every ACL change).
MAX_CACHED_DECISIONS = 65_536


class ResourceType(IntEnum):
    """``org.apache.kafka.common.resource.ResourceType``."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def title(self) -> str:
        """The name in ZooKeeper paths and tools (``Topic``, ``TransactionalId``)."""
        return _TITLES[self]

    @classmethod
    def from_title(cls, text: str) -> ResourceType:
        for rt, title in _TITLES.items():
            if title.lower() == text.lower() or rt.name.lower() == text.lower():
                return rt
        raise ValueError(f"unknown resource type {text!r}")


_TITLES = {
    ResourceType.UNKNOWN: "Unknown", ResourceType.ANY: "Any", ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User",
}


class PatternType(IntEnum):
    """``org.apache.kafka.common.resource.PatternType``: LITERAL and PREFIXED are stored;
    ANY and MATCH only filter."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """``org.apache.kafka.common.acl.AclOperation``; ANY only filters."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def title(self) -> str:
        """Kafka's name in ZooKeeper JSON and tools (``Read``, ``ClusterAction``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_title(cls, text: str) -> AclOperation:
        key = text.replace("_", "").replace("-", "").lower()
        for op in cls:
            if op.name.replace("_", "").lower() == key:
                return op
        raise ValueError(f"unknown operation {text!r}")


class AclPermissionType(IntEnum):
    """``org.apache.kafka.common.acl.AclPermissionType``; ANY only filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def title(self) -> str:
        return self.name.capitalize()

    @classmethod
    def from_title(cls, text: str) -> AclPermissionType:
        return cls[text.upper()]


# The operations each resource type has (Kafka's AclEntry.supportedOperations), which the
# KIP-430 authorized-operations fields are computed over.
_SUPPORTED: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (
        AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS,
    ),
}
_STORED_TYPES = frozenset(_SUPPORTED)


def supported_operations(resource_type: ResourceType) -> tuple[AclOperation, ...]:
    return _SUPPORTED[resource_type]


# Asking for the key is answered by an ALLOW of any of the values (AclAuthorizer's
# implied operations); every other operation is answered by its own ALLOW only.
_IMPLYING: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                            AclOperation.DELETE, AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AclEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry

    def invalid_reason(self) -> str | None:
        """Why Kafka refuses to store this binding (None: valid). The caller answers
        INVALID_REQUEST with the reason (``AclAuthorizer.createAcls``'s checks)."""
        p, e = self.pattern, self.entry
        if p.resource_type not in _STORED_TYPES:
            return f"invalid resource type {p.resource_type.name}"
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"invalid pattern type {p.pattern_type.name}"
        if not p.name:
            return "resource name must not be empty"
        if p.pattern_type is PatternType.PREFIXED and p.name == WILDCARD:
            return "a PREFIXED pattern cannot be the wildcard '*'"
        if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            return f"the cluster resource's name must be {CLUSTER_NAME!r}"
        if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return f"invalid operation {e.operation.name}"
        if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"invalid permission type {e.permission.name}"
        if ":" not in e.principal or not e.principal.split(":", 1)[1]:
            return f"invalid principal {e.principal!r}: expected 'Type:name'"
        if not e.host:
            return "host must not be empty"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter of DescribeAcls / DeleteAcls: ``None`` strings and ``ANY`` enums match
    everything; the pattern type ``MATCH`` matches every pattern that covers the literal
    name (the name itself, ``*``, and its prefixes)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def invalid_reason(self) -> str | None:
        """Why the filter cannot match anything valid (Kafka answers INVALID_REQUEST)."""
        for field, value in (("resource type", self.resource_type),
                             ("pattern type", self.pattern_type),
                             ("operation", self.operation),
                             ("permission type", self.permission)):
            if value == 0:  # UNKNOWN
                return f"invalid {field} UNKNOWN in filter"
        return None

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if (self.resource_type is not ResourceType.ANY
                and pattern.resource_type is not self.resource_type):
            return False
        ptype = self.pattern_type
        if ptype is PatternType.ANY:
            return self.name is None or pattern.name == self.name
        if ptype is PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type is PatternType.LITERAL:
                return pattern.name in (self.name, WILDCARD)
            return self.name.startswith(pattern.name)
        if pattern.pattern_type is not ptype:
            return False
        return self.name is None or pattern.name == self.name

    def matches_entry(self, entry: AclEntry) -> bool:
        return ((self.principal is None or entry.principal == self.principal)
                and (self.host is None or entry.host == self.host)
                and (self.operation is AclOperation.ANY or entry.operation is self.operation)
                and (self.permission is AclPermissionType.ANY
                     or entry.permission is self.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:alice;User:bob``)."""
    return frozenset(part.strip() for part in text.split(";") if part.strip())


_Key = tuple[str, str, int, int, str]


class AclAuthorizer:
    """The ACLs of every resource pattern and the decisions drawn from them.

    Not thread-safe: the broker changes and reads it on its event loop only.
    """

    __slots__ = ("_acls", "_cache", "_prefixed", "allow_if_no_acl", "super_users")

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False,
                 new_dict: Callable[[], dict[Any, Any]] = dict) -> None:
        """``new_dict`` makes the containers (the broker's event loop owns them: it
        passes ``loop_dict``, which checks that in the thread-ownership debug mode)."""
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: dict[ResourcePattern, frozenset[AclEntry]] = new_dict()
        # PREFIXED patterns by resource type, for the prefix scan of a decision
        self._prefixed: dict[ResourceType, dict[str, frozenset[AclEntry]]] = new_dict()
        self._cache: dict[_Key, bool] = new_dict()

    # -- the ACLs ----------------------------------------------------------------------
    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> None:
        """Replace the entries of ``pattern`` (none: forget it); clears the decisions."""
        stored = frozenset(entries)
        if stored:
            self._acls[pattern] = stored
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type is PatternType.PREFIXED:
            by_name = self._prefixed.setdefault(pattern.resource_type, {})
            if stored:
                by_name[pattern.name] = stored
            else:
                by_name.pop(pattern.name, None)
        self._cache.clear()

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AclEntry]]) -> None:
        """Replace every ACL (a reload, at start or after a lost store session)."""
        self._acls.clear()
        self._prefixed.clear()
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)
        self._cache.clear()

    def bindings(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every stored binding matching ``flt`` (all with None), in a stable order."""
        out = []
        for pattern in sorted(self._acls, key=_pattern_order):
            if flt is not None and not flt.matches_pattern(pattern):
                continue
            for entry in sorted(self._acls[pattern], key=_entry_order):
                if flt is None or flt.matches_entry(entry):
                    out.append(AclBinding(pattern, entry))
        return out

    # -- decisions ---------------------------------------------------------------------
    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """May ``principal`` connecting from ``host`` perform ``operation`` on the
        resource ``name`` of ``resource_type``? (``AclAuthorizer.authorizeAction``)"""
        key = (principal, host, operation, resource_type, name)
        cache = self._cache
        found = cache.get(key)
        if found is None:
            found = self._decide(principal, host, operation, resource_type, name)
            if len(cache) >= MAX_CACHED_DECISIONS:
                cache.clear()
            cache[key] = found
        return found

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching_entries(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        relevant = [e for e in entries if e.principal in principals and e.host in hosts]
        for e in relevant:
            if e.permission is AclPermissionType.DENY and e.operation in (
                    operation, AclOperation.ALL):
                return False
        allowing = _IMPLYING.get(operation, (operation,))
        return any(
            e.permission is AclPermissionType.ALLOW
            and (e.operation is AclOperation.ALL or e.operation in allowing)
            for e in relevant
        )

    def _matching_entries(self, resource_type: ResourceType, name: str) -> list[AclEntry]:
        out: list[AclEntry] = []
        acls = self._acls
        for candidate in (ResourcePattern(resource_type, name),
                          ResourcePattern(resource_type, WILDCARD)):
            found = acls.get(candidate)
            if found:
                out.extend(found)
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for prefix, entries in prefixed.items():
                if name.startswith(prefix):
                    out.extend(entries)
        return out

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """May the principal perform ``operation`` on at least one resource of the type?
        (``Authorizer.authorizeByResourceType``: an ALLOW, literal or prefixed, that no
        DENY of the same or a covering pattern takes back.)"""
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        ops = (operation, AclOperation.ALL)
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(),
                                               PatternType.PREFIXED: set()}
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(),
                                              PatternType.PREFIXED: set()}
        for pattern, entries in self._acls.items():
            if pattern.resource_type is not resource_type:
                continue
            for e in entries:
                if e.principal in principals and e.host in hosts and e.operation in ops:
                    side = allow if e.permission is AclPermissionType.ALLOW else deny
                    side[pattern.pattern_type].add(pattern.name)
        if WILDCARD in deny[PatternType.LITERAL]:
            return False
        if self.allow_if_no_acl:
            return True

        def denied(name: str, prefixed: bool) -> bool:
            if not prefixed and name in deny[PatternType.LITERAL]:
                return True
            return any(name.startswith(p) for p in deny[PatternType.PREFIXED])

        return (any(not denied(n, False) for n in allow[PatternType.LITERAL])
                or any(not denied(n, True) for n in allow[PatternType.PREFIXED]))

    def authorized_operations(self, principal: str, host: str,
                              resource_type: ResourceType, name: str) -> int:
        """The KIP-430 bit field: bit ``op`` set for each supported operation allowed."""
        bits = 0
        for op in _SUPPORTED[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def _pattern_order(p: ResourcePattern) -> tuple[int, str, int]:
    return (p.resource_type, p.name, p.pattern_type)


def _entry_order(e: AclEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, e.operation, e.permission)
