"""``odradek groups list|describe|delete|reset-offsets`` (and export-offsets|import-offsets,
in _group_offsets.py) (Kafka's kafka-consumer-groups.sh).

``describe`` is the successor of Kafka 0.8's ConsumerOffsetChecker: per partition the
committed offset, the log end offset and the lag, with the member that owns the
partition (decoded from the consumer protocol assignment), then the members with their
client ids, hosts and assignments.

``reset-offsets`` plans new committed offsets (``--to-earliest``, ``--to-latest``,
``--to-offset N``, ``--shift-by N``, ``--to-datetime T``), clamped to each partition's
earliest..latest range as Kafka's tool does, prints the plan, and commits it only with
``--execute`` — and only when the group has no active members (Empty, or unknown).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
from typing import Any

from odradek.cli import _group_offsets
from odradek.cli._common import UsageError, add_bootstrap, print_table, run_with_admin
from odradek.client.connection import ClientError
from odradek.client.groups import CommittedOffset, GroupDescription, GroupsClient
from odradek.client.routing import RETRIABLE_CODES, ClusterAdmin
from odradek.text import plural

EARLIEST = -2
LATEST = -1
INACTIVE_STATES = frozenset({"Empty", "Dead"})


def add_parser(sub: Any) -> None:
    groups = sub.add_parser("groups", help="list, describe, delete consumer groups; reset offsets")
    verbs = groups.add_subparsers(dest="verb", required=True)
    lst = verbs.add_parser("list", help="list groups with their state")
    lst.add_argument("--state", action="append", help="only groups in this state (repeatable)")
    lst.set_defaults(func=_list)
    describe = verbs.add_parser("describe", help="offsets, lag, members and assignments")
    describe.add_argument("--group", action="append", required=True, help="(repeatable)")
    describe.set_defaults(func=_describe)
    delete = verbs.add_parser("delete", help="delete inactive groups and their offsets")
    delete.add_argument("--group", action="append", required=True, help="(repeatable)")
    delete.set_defaults(func=_delete)
    reset = verbs.add_parser("reset-offsets", help="plan or apply new committed offsets")
    reset.add_argument("--group", required=True, help="the group whose offsets move")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append",
                       help="TOPIC or TOPIC:P,P,... (repeatable)")
    which.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to the log start")
    how.add_argument("--to-latest", action="store_true", help="to the log end")
    how.add_argument("--to-offset", type=int, help="to this offset (clamped to the log)")
    how.add_argument("--shift-by", type=int,
                     help="by this many records (negative: back)")
    how.add_argument("--to-datetime", help="ISO 8601, e.g. 2024-01-31T12:00:00 (local time "
                                           "unless an offset like +00:00 is given)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(func=_reset)
    for parser in (lst, describe, delete, reset):
        add_bootstrap(parser)
    _group_offsets.add_verbs(verbs, add_bootstrap)


def _list(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        listing = await admin.list_groups_everywhere(args.state)
        print_table([["GROUP", "STATE", "PROTOCOL-TYPE"]] + [
            [g.group_id, g.state or "-", g.protocol_type or "-"] for g in listing
        ])
        return 0

    return run_with_admin(args, body)


async def _described(client: GroupsClient, group_id: str
                     ) -> tuple[GroupDescription, list[CommittedOffset]]:
    """The group's description and committed offsets, from its coordinator."""
    return await client.describe_group(group_id), await client.fetch_offsets(group_id)


async def _delete_one(client: GroupsClient, group_id: str) -> str:
    """DeleteGroups of one group at its coordinator: the error's name ("none": deleted);
    a retriable one (the coordinator moved) is raised, to be retried."""
    error = (await client.delete_groups([group_id]))[group_id]
    code = _error_code(error)
    if code in RETRIABLE_CODES:
        raise ClientError(f"deleting group {group_id} failed with {error.upper()}", code)
    return error


def _error_code(name: str) -> int:
    from kio.schema.errors import ErrorCode

    return int(ErrorCode[name].value)


def _owner(description: GroupDescription) -> dict[tuple[str, int], Any]:
    owners = {}
    for member in description.members:
        for topic, partitions in member.assignment.items():
            for p in partitions:
                owners[(topic, p)] = member
    return owners


def _describe(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        status = 0
        for group_id in args.group:
            description, offsets = await admin.on_coordinator(
                group_id, functools.partial(_described, group_id=group_id))
            committed = {(c.topic, c.partition): c.offset for c in offsets}
            owners = _owner(description)
            if description.state == "Dead" and not committed:
                print(f"Consumer group '{group_id}' does not exist.")
                status = 1
                continue
            print(f"GROUP {group_id}  STATE {description.state}  "
                  f"PROTOCOL {description.protocol_type or '-'}/{description.protocol or '-'}  "
                  f"MEMBERS {len(description.members)}")
            rows: list[list[Any]] = [["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                      "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
            for topic, partition in sorted(set(committed) | set(owners)):
                try:
                    end, _ = await admin.list_offset(topic, partition, LATEST)
                except ClientError:
                    end = -1
                current = committed.get((topic, partition))
                lag: Any = "-" if current is None or end < 0 else max(end - current, 0)
                member = owners.get((topic, partition))
                rows.append([
                    topic, partition, "-" if current is None else current,
                    "-" if end < 0 else end, lag,
                    member.member_id if member else "-", member.client_host if member else "-",
                    member.client_id if member else "-",
                ])
            print_table(rows)
            if description.members:
                print()
                member_rows: list[list[Any]] = [["CONSUMER-ID", "INSTANCE-ID", "HOST",
                                                 "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
                for m in description.members:
                    assigned = "; ".join(
                        f"{t}({','.join(map(str, ps))})" for t, ps in sorted(m.assignment.items())
                    )
                    member_rows.append([
                        m.member_id, m.group_instance_id or "-", m.client_host, m.client_id,
                        sum(len(ps) for ps in m.assignment.values()), assigned or "-",
                    ])
                print_table(member_rows)
            print()
        return status

    return run_with_admin(args, body)


def _delete(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        results = {g: await admin.on_coordinator(g, functools.partial(_delete_one, group_id=g))
                   for g in args.group}
        status = 0
        for group_id, error in results.items():
            if error == "none":
                print(f"Deleted group {group_id}.")
            else:
                print(f"Could not delete group {group_id}: {error.upper()}", file=sys.stderr)
                status = 1
        return status

    return run_with_admin(args, body)


def _parse_topics(specs: list[str]) -> list[tuple[str, list[int] | None]]:
    out: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise UsageError(f"odradek: invalid --topic {spec!r}")
        try:
            out.append((topic, [int(p) for p in parts.split(",")] if sep else None))
        except ValueError:
            raise UsageError(f"odradek: invalid partitions in --topic {spec!r}") from None
    return out


def _parse_datetime(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"odradek: invalid --to-datetime {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def _reset(args: argparse.Namespace) -> int:
    timestamp = _parse_datetime(args.to_datetime) if args.to_datetime else None
    wanted_topics = [] if args.all_topics else _parse_topics(args.topic)  # before connecting

    async def body(admin: ClusterAdmin) -> int:
        description, offsets = await admin.on_coordinator(
            args.group, lambda c: _described(c, args.group))
        if args.execute and description.state not in INACTIVE_STATES:
            print(f"odradek: group {args.group} is {description.state} with "
                  f"{plural(len(description.members), 'member')}; stop its consumers before "
                  "resetting "
                  "offsets", file=sys.stderr)
            return 1
        committed = {(c.topic, c.partition): c.offset for c in offsets}
        if args.all_topics:
            targets = sorted(committed)
        else:
            targets = []
            for topic, partitions in wanted_topics:
                if partitions is None:
                    described = await admin.metadata([topic])
                    if not described or described[0].error != "none":
                        raise ClientError(f"topic {topic} does not exist")
                    partitions = [p.partition for p in described[0].partitions]
                targets.extend((topic, p) for p in partitions)
        plan: dict[tuple[str, int], int] = {}
        for topic, partition in targets:
            earliest, _ = await admin.list_offset(topic, partition, EARLIEST)
            latest, _ = await admin.list_offset(topic, partition, LATEST)
            current = committed.get((topic, partition))
            if args.to_earliest:
                wanted = earliest
            elif args.to_latest:
                wanted = latest
            elif args.to_offset is not None:
                wanted = args.to_offset
            elif args.shift_by is not None:
                wanted = (current if current is not None else latest) + args.shift_by
            else:
                assert timestamp is not None
                found, _ = await admin.list_offset(topic, partition, timestamp)
                wanted = latest if found < 0 else found
            plan[(topic, partition)] = min(max(wanted, earliest), latest)
        rows: list[list[Any]] = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]]
        for (topic, partition), offset in sorted(plan.items()):
            current = committed.get((topic, partition))
            rows.append([args.group, topic, partition, "-" if current is None else current,
                         offset])
        print_table(rows)
        if not args.execute:
            print("(dry run: nothing committed; add --execute to apply)")
            return 0
        if plan:
            await admin.on_coordinator(args.group,
                                       lambda c: c.commit_offsets(args.group, plan))
        print(f"Committed new offsets for {plural(len(plan), 'partition')} of group "
              f"{args.group}.")
        return 0

    return run_with_admin(args, body)
