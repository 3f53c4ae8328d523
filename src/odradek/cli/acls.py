"""``odradek acls`` (Kafka's kafka-acls.sh): add, remove and list ACLs.

    odradek acls --bootstrap-server H:P --add|--remove|--list
        [--allow-principal P ...] [--deny-principal P ...] [--allow-host H ...]
        [--deny-host H ...] [--operation OP ...]
        [--topic T ...] [--group G ...] [--cluster] [--transactional-id ID ...]
        [--resource-pattern-type literal|prefixed|any|match]
        [--producer [--idempotent]] [--consumer] [--principal P] [--force]

As Kafka's ``AclCommand``: a principal given without a host gets host ``*``; ``--operation``
defaults to All; each operation must apply to each resource type named (``Read`` on a
Cluster is refused before anything is sent); ``--producer`` stands for Write, Describe
and Create on the topics (IdempotentWrite on the cluster with ``--idempotent``, Write and
Describe on the transactional ids), ``--consumer`` for Read and Describe on the topics
and Read on the groups. ``--remove`` asks for confirmation unless ``--force``; without
principals it removes every ACL of the resources. ``--list`` prints every ACL, or those
of the resources named (with the pattern type ``match``: every ACL that applies to them),
or those of ``--principal``. Everything goes through CreateAcls, DeleteAcls and
DescribeAcls, so the broker needs ``authorizer.class.name``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from odradek.cli._common import add_bootstrap, run_with_admin

if TYPE_CHECKING:
    from odradek.client.admin import Admin
    from odradek.security.acl import (
        AclBinding,
        AclBindingFilter,
        AclEntry,
        AclOperation,
        PatternType,
        ResourcePattern,
    )

PATTERN_TYPES = ("literal", "prefixed", "any", "match")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "acls", help="add, remove and list ACLs (kafka-acls.sh)",
        description="Kafka's kafka-acls.sh: ACLs of topics, groups, the cluster and "
                    "transactional ids, through CreateAcls, DeleteAcls and DescribeAcls "
                    "(the broker needs authorizer.class.name).",
    )
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="P",
                        help="principal allowed, Type:name (User:alice, User:*)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="P",
                        help="principal denied")
    parser.add_argument("--allow-host", action="append", default=[], metavar="H",
                        help="host the allowed principals connect from (default *)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="H",
                        help="host the denied principals connect from (default *)")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                             "DescribeConfigs, AlterConfigs, IdempotentWrite, All "
                             "(default All)")
    parser.add_argument("--topic", action="append", default=[], help="a topic ('*': all)")
    parser.add_argument("--group", action="append", default=[], help="a consumer group")
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="a transactional id")
    parser.add_argument("--resource-pattern-type", default="literal", choices=PATTERN_TYPES,
                        type=str.lower,
                        help="literal or prefixed to add; any or match too to list or remove "
                             "(default literal)")
    parser.add_argument("--producer", action="store_true",
                        help="the ACLs of a producer: Write, Describe, Create on the topics")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--consumer", action="store_true",
                        help="the ACLs of a consumer: Read, Describe on the topics, Read on "
                             "the groups")
    parser.add_argument("--principal", action="append", default=[],
                        help="with --list: only the ACLs of this principal")
    parser.add_argument("--force", action="store_true", help="remove without asking")
    parser.set_defaults(func=_run)


class _Usage(Exception):
    pass


def _resources(args: argparse.Namespace, ptype: PatternType) -> list[ResourcePattern]:
    from odradek.security.acl import CLUSTER_NAME, ResourcePattern, ResourceType

    out = [ResourcePattern(ResourceType.TOPIC, t, ptype) for t in args.topic]
    out += [ResourcePattern(ResourceType.GROUP, g, ptype) for g in args.group]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, ptype)
            for t in args.transactional_id]
    if args.cluster:
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, ptype))
    return out


def _operations(names: list[str]) -> list[AclOperation]:
    from odradek.security.acl import AclOperation

    ops: list[AclOperation] = []
    for name in names or ["All"]:
        try:
            op = AclOperation.from_title(name)
        except ValueError:
            raise _Usage(f"unknown operation {name!r}") from None
        if op in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise _Usage(f"invalid operation {name!r}")
        ops.append(op)
    return ops


def _principals(names: list[str]) -> list[str]:
    for name in names:
        kind, sep, who = name.partition(":")
        if not sep or not kind or not who:
            raise _Usage(f"invalid principal {name!r}: expected Type:name, as User:alice")
    return names


def _entries(args: argparse.Namespace, ops: list[AclOperation]) -> list[AclEntry]:
    from odradek.security.acl import AclEntry, AclPermissionType

    out: list[AclEntry] = []
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in _principals(principals):
            for host in hosts or ["*"]:
                out.extend(AclEntry(principal, host, op, perm) for op in ops)
    return out


def _bindings(args: argparse.Namespace, ptype: PatternType) -> list[AclBinding]:
    """What --add adds (or --remove with principals removes)."""
    from odradek.security.acl import AclBinding, AclOperation, supported_operations

    resources = _resources(args, ptype)
    if args.producer or args.consumer:
        return _shortcut_bindings(args, ptype)
    if not resources:
        raise _Usage("name a resource: --topic, --group, --cluster or --transactional-id")
    ops = _operations(args.operation)
    for pattern in resources:
        allowed = supported_operations(pattern.resource_type)
        bad = [op.title for op in ops if op is not AclOperation.ALL and op not in allowed]
        if bad:
            raise _Usage(f"ResourceType {pattern.resource_type.title} only supports operations "
                         + ", ".join(sorted(o.title for o in (*allowed, AclOperation.ALL)))
                         + f" (not {', '.join(bad)})")
    entries = _entries(args, ops)
    if not entries:
        raise _Usage("give --allow-principal or --deny-principal")
    return [AclBinding(p, e) for p in resources for e in entries]


def _shortcut_bindings(args: argparse.Namespace, ptype: PatternType) -> list[AclBinding]:
    from odradek.security.acl import (
        CLUSTER_NAME,
        AclBinding,
        AclOperation,
        PatternType,
        ResourcePattern,
        ResourceType,
    )

    if not args.topic:
        raise _Usage("--producer and --consumer need --topic")
    if args.consumer and not args.group:
        raise _Usage("--consumer needs --group")
    wanted: list[tuple[ResourcePattern, AclOperation]] = []
    topics = [ResourcePattern(ResourceType.TOPIC, t, ptype) for t in args.topic]
    if args.producer:
        wanted += [(t, op) for t in topics
                   for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)]
        wanted += [(ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, ptype), op)
                   for t in args.transactional_id
                   for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        if args.idempotent:
            wanted.append((ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME,
                                           PatternType.LITERAL), AclOperation.IDEMPOTENT_WRITE))
    if args.consumer:
        wanted += [(t, op) for t in topics for op in (AclOperation.READ, AclOperation.DESCRIBE)]
        wanted += [(ResourcePattern(ResourceType.GROUP, g, ptype), AclOperation.READ)
                   for g in args.group]
    out = []
    for pattern, op in wanted:
        for entry in _entries(args, [op]):
            out.append(AclBinding(pattern, entry))
    if not out:
        raise _Usage("give --allow-principal or --deny-principal")
    return out


def _entry_text(e: AclEntry) -> str:
    return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission.name})")


def _print_by_resource(title: str, bindings: list[AclBinding]) -> None:
    by: dict[ResourcePattern, list[AclEntry]] = {}
    for b in bindings:
        by.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by.items():
        print(f"{title} `{pattern}`: ")
        for e in entries:
            print(f" \t{_entry_text(e)} ")
        print()


def _filter(pattern: ResourcePattern | None, ptype: PatternType,
            principal: str | None = None) -> AclBindingFilter:
    from odradek.security.acl import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    if pattern is None:
        return AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, principal, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    return AclBindingFilter(pattern.resource_type, pattern.name, ptype, principal, None,
                            AclOperation.ANY, AclPermissionType.ANY)


def _run(args: argparse.Namespace) -> int:
    from odradek.security.acl import PatternType

    ptype = PatternType[args.resource_pattern_type.upper()]
    try:
        if args.add:
            if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise _Usage("--add needs --resource-pattern-type literal or prefixed")
            bindings = _bindings(args, ptype)
            return run_with_admin(args, lambda admin: _add(admin, bindings))
        if args.remove:
            resources = _resources(args, ptype)
            if not resources:
                raise _Usage("name a resource: --topic, --group, --cluster or "
                             "--transactional-id")
            removing: list[AclBindingFilter]
            if args.allow_principal or args.deny_principal or args.producer or args.consumer:
                removing = [_exact(b) for b in _bindings(args, ptype)]
            else:
                removing = [_filter(p, ptype) for p in resources]
            if not args.force and not _confirm(resources):
                return 1
            return run_with_admin(args, lambda admin: _remove(admin, removing))
        principals: list[str | None] = [*_principals(args.principal)] or [None]
        patterns: list[ResourcePattern | None] = [*_resources(args, ptype)] or [None]
        filters = [_filter(p, ptype, who) for p in patterns for who in principals]
        return run_with_admin(args, lambda admin: _list(admin, filters))
    except _Usage as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return 2


def _exact(b: AclBinding) -> AclBindingFilter:
    from odradek.security.acl import AclBindingFilter

    return AclBindingFilter(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type,
                            b.entry.principal, b.entry.host, b.entry.operation,
                            b.entry.permission)


def _confirm(resources: list[ResourcePattern]) -> bool:
    names = ", ".join(f"`{r}`" for r in resources)
    try:
        answer = input(f"Are you sure you want to remove ACLs: {names} ? (y/n) ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


async def _add(admin: Admin, bindings: list[AclBinding]) -> int:
    _print_by_resource("Adding ACLs for resource", bindings)
    await admin.create_acls(bindings)
    patterns = list(dict.fromkeys(b.pattern for b in bindings))
    current: list[AclBinding] = []
    for pattern in patterns:
        current += await admin.describe_acls(_filter(pattern, pattern.pattern_type))
    _print_by_resource("Current ACLs for resource", current)
    return 0


async def _remove(admin: Admin, filters: list[AclBindingFilter]) -> int:
    removed = await admin.delete_acls(filters)
    _print_by_resource("Removed ACLs for resource", removed)
    if not removed:
        print("No ACL matched.")
    return 0


async def _list(admin: Admin, filters: list[AclBindingFilter]) -> int:
    found: list[AclBinding] = []
    for flt in filters:
        for b in await admin.describe_acls(flt):
            if b not in found:
                found.append(b)
    _print_by_resource("Current ACLs for resource", found)
    return 0
