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

A group is a classic one or a consumer group (KIP-848). ``list`` names each group's type
(ListGroups v5) and ``--type classic|consumer`` filters on it; ``describe`` asks the
coordinator with the API of the group's type, as Kafka's admin client does
(ConsumerGroupDescribe, falling back to DescribeGroups for a classic group), and for a
consumer group also shows the group epoch, the target assignment epoch, the server-side
assignor and each member's epoch with its current and target assignment (and, when a
member subscribes with one, its ``SubscribedTopicRegex``: a TOPIC-REGEX column).

kafka-consumer-groups.sh's own command line is taken too, so its scripts run unchanged:
``--list [--type [T,...]] [--state [S,...]]``, ``--describe (--group G ... | --all-groups)
[--offsets | --members | --state] [--verbose]`` and ``--delete (--group G | --all-groups)``,
with its columns (``--members --verbose``: CURRENT-EPOCH, CURRENT-ASSIGNMENT, TARGET-EPOCH,
TARGET-ASSIGNMENT; ``--state --verbose``: GROUP-EPOCH, TARGET-ASSIGNMENT-EPOCH).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.cli import _group_offsets
from odradek.cli._common import UsageError, add_bootstrap, print_table, run_with_admin
from odradek.text import plural

if TYPE_CHECKING:
    from odradek.client.groups import (
        CommittedOffset,
        ConsumerGroupDescription,
        GroupDescription,
        GroupsClient,
    )
    from odradek.client.routing import ClusterAdmin

EARLIEST = -2
LATEST = -1
INACTIVE_STATES = frozenset({"Empty", "Dead"})
#: --type's values: odradek.client.groups.CLASSIC and CONSUMER (imported where the command
#: runs: every ``odradek`` command builds this parser, tests/cli/test_main.py)
GROUP_TYPES = ("classic", "consumer")
#: kafka-consumer-groups.sh's actions (those this form takes)
ACTIONS = ("list", "describe", "delete")
MISSING = "-"


def add_parser(sub: Any) -> None:
    groups = sub.add_parser(
        "groups", help="list, describe, delete consumer groups; reset offsets",
        description="Kafka's kafka-consumer-groups.sh: a sub-command (odradek groups describe "
                    "--group G), or its own flags (odradek groups --describe --group G).")
    _add_kafka_form(groups)
    verbs = groups.add_subparsers(dest="verb", required=False, metavar="{list,describe,delete,"
                                  "reset-offsets,export-offsets,import-offsets}")
    lst = verbs.add_parser("list", help="list groups with their state and type")
    lst.add_argument("--state", action="append", help="only groups in this state (repeatable)")
    lst.add_argument("--type", action="append", choices=GROUP_TYPES,
                     help="only groups of this type (repeatable)")
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


def _add_kafka_form(groups: argparse.ArgumentParser) -> None:
    """kafka-consumer-groups.sh's flags on ``odradek groups`` itself (a sub-command's own
    flags win when one is given)."""
    action = groups.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true",
                        help="describe groups: offsets and lag (default), --members or --state")
    action.add_argument("--delete", action="store_true", help="delete inactive groups")
    groups.add_argument("--group", action="append", help="the group (repeatable)")
    groups.add_argument("--all-groups", action="store_true",
                        help="with --describe, --delete: every group")
    what = groups.add_mutually_exclusive_group()
    what.add_argument("--offsets", action="store_true",
                      help="with --describe: offsets and lag per partition (the default)")
    what.add_argument("--members", action="store_true", help="with --describe: the members")
    groups.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE]",
                        help="with --describe: the group's state; with --list: show states, "
                             "or only groups in these states")
    groups.add_argument("--type", nargs="?", const="", metavar="TYPE[,TYPE]",
                        help="with --list: show types, or only groups of these types "
                             "(classic, consumer)")
    groups.add_argument("--verbose", action="store_true",
                        help="with --describe: epochs and target assignments")
    add_bootstrap(groups)
    groups.set_defaults(func=_kafka_form)


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _check_kafka_form(args: argparse.Namespace) -> str:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError("odradek: groups needs a sub-command (list, describe, delete, "
                         "reset-offsets, export-offsets, import-offsets) or exactly one "
                         "action: --list, --describe or --delete")
    action = actions[0]
    if action != "list" and not args.group and not args.all_groups:
        raise UsageError(f"odradek: Option [{action}] takes one of these options: "
                         "[all-groups], [group]")
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise UsageError(f"odradek: Option \"[members]\", \"[offsets]\" and "
                         f"\"[verbose]\" can't be used with option \"[{action}]\"")
    if action != "list" and args.type is not None:
        raise UsageError(f"odradek: Option \"[type]\" can't be used with option "
                         f"\"[{action}]\"")
    if action == "describe" and args.state is not None and (args.members or args.offsets):
        raise UsageError("odradek: --state, --members and --offsets cannot be used together")
    if action == "describe" and args.state:
        raise UsageError("odradek: --state takes no value with --describe")
    for t in _split(args.type):
        if t.lower() not in GROUP_TYPES:
            raise UsageError(f"odradek: Invalid types list '{args.type}'. Valid types are: "
                             f"{', '.join(GROUP_TYPES)}")
    return action


def _kafka_form(args: argparse.Namespace) -> int:
    action = _check_kafka_form(args)

    async def body(admin: ClusterAdmin) -> int:
        if action == "list":
            return await _kafka_list(admin, args)
        group_ids = (args.group or []) if not args.all_groups else [
            g.group_id for g in await admin.list_groups_everywhere()]
        if action == "delete":
            return await _kafka_delete(admin, group_ids)
        status = 0
        for group_id in group_ids:
            view = await _view(admin, group_id, offsets=not (args.members or args.state
                                                             is not None))
            if view.state == "Dead" and not view.committed:
                print(f"\nError: Consumer group '{group_id}' does not exist.")
                status = 1
                continue
            if view.state == "Empty":
                print(f"\nConsumer group '{group_id}' has no active members.", file=sys.stderr)
            elif view.state not in ("Stable", "Dead"):
                print(f"\nWarning: Consumer group '{group_id}' is rebalancing.",
                      file=sys.stderr)
            if args.members:
                _print_members_kafka(view, args.verbose)
            elif args.state is not None:
                _print_state_kafka(view, args.verbose)
            else:
                _print_offsets_kafka(view)
        return status

    return run_with_admin(args, body)


async def _kafka_list(admin: ClusterAdmin, args: argparse.Namespace) -> int:
    listing = await admin.list_groups_everywhere(_split(args.state) or None,
                                                 [t.lower() for t in _split(args.type)] or None)
    if args.type is None and args.state is None:
        for g in listing:
            print(g.group_id)
        return 0
    header = ["GROUP"] + (["TYPE"] if args.type is not None else []) + (
        ["STATE"] if args.state is not None else [])
    rows: list[list[Any]] = [header]
    for g in listing:
        rows.append([g.group_id] + ([_type_name(g.group_type)] if args.type is not None
                                    else []) + ([g.state] if args.state is not None else []))
    print_table(rows)
    return 0


def _type_name(group_type: str) -> str:
    """Kafka's GroupType as its tools print it (Classic, Consumer)."""
    return group_type.capitalize() if group_type else "Unknown"


async def _kafka_delete(admin: ClusterAdmin, group_ids: list[str]) -> int:
    results = {g: await admin.on_coordinator(g, functools.partial(_delete_one, group_id=g))
               for g in group_ids}
    failed = {g: e for g, e in results.items() if e != "none"}
    deleted = [g for g, e in results.items() if e == "none"]
    if not failed:
        print("Deletion of requested consumer groups ("
              + ", ".join(f"'{g}'" for g in deleted) + ") was successful.")
        return 0
    print("\nError: Deletion of some consumer groups failed:")
    for group_id, error in failed.items():
        print(f"* Group '{group_id}' could not be deleted due to: {error.upper()}")
    if deleted:
        print("\nThese consumer groups were deleted successfully: "
              + ", ".join(f"'{g}'" for g in deleted))
    return 1


@dataclass(frozen=True, slots=True)
class MemberView:
    """A member of either kind of group, as the tools show it."""

    member_id: str
    group_instance_id: str | None
    client_host: str
    client_id: str
    assignment: dict[str, tuple[int, ...]]
    #: a consumer group's member only (KIP-848): its epoch and target assignment
    member_epoch: int | None = None
    target_assignment: dict[str, tuple[int, ...]] | None = None
    #: a consumer group's member: False while it still speaks the classic protocol (a
    #: group being migrated), True when it speaks KIP-848's, None unknown
    upgraded: bool | None = None
    #: a consumer group's member: its SubscribedTopicRegex (None or "": none)
    topic_regex: str | None = None


@dataclass(frozen=True, slots=True)
class GroupView:
    """What ``describe`` shows of one group, whichever its type."""

    group_id: str
    group_type: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: tuple[int, str, int]
    members: tuple[MemberView, ...]
    committed: dict[tuple[str, int], int]
    log_end: dict[tuple[str, int], int]
    #: a consumer group's only
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    def owners(self) -> dict[tuple[str, int], MemberView]:
        return {(t, p): m for m in self.members for t, ps in m.assignment.items() for p in ps}


async def _described_any(client: GroupsClient, group_id: str
                         ) -> tuple[tuple[int, str, int],
                                    ConsumerGroupDescription | GroupDescription,
                                    list[CommittedOffset]]:
    return (await client.find_coordinator(group_id), await client.describe_any(group_id),
            await client.fetch_offsets(group_id))


async def _view(admin: ClusterAdmin, group_id: str, offsets: bool = True) -> GroupView:
    """The group described by the API of its type, with its committed offsets and (with
    ``offsets``) the log end offset of every partition it owns or has committed."""
    from odradek.client.connection import ClientError
    from odradek.client.groups import CLASSIC, CONSUMER, ConsumerGroupDescription

    coordinator, described, fetched = await admin.on_coordinator(
        group_id, functools.partial(_described_any, group_id=group_id))
    committed = {(c.topic, c.partition): c.offset for c in fetched}
    if isinstance(described, ConsumerGroupDescription):
        view = GroupView(
            group_id, CONSUMER, described.state, "consumer", described.assignor, coordinator,
            tuple(MemberView(m.member_id, m.group_instance_id, m.client_host, m.client_id,
                             m.assignment, m.member_epoch, m.target_assignment, m.upgraded,
                             m.subscribed_topic_regex)
                  for m in described.members),
            committed, {}, described.group_epoch, described.assignment_epoch)
    else:
        view = GroupView(
            group_id, CLASSIC, described.state, described.protocol_type, described.protocol,
            coordinator,
            tuple(MemberView(m.member_id, m.group_instance_id, m.client_host, m.client_id,
                             m.assignment) for m in described.members),
            committed, {})
    if offsets:
        for topic, partition in sorted(set(committed) | set(view.owners())):
            try:
                end, _ = await admin.list_offset(topic, partition, LATEST)
            except ClientError:
                continue
            if end >= 0:
                view.log_end[(topic, partition)] = end
    return view


def _assignment_text(assignment: dict[str, tuple[int, ...]] | None) -> str:
    """kafka-consumer-groups.sh's form: ``topic:0,1;other:2``; "-" for none."""
    if not assignment:
        return MISSING
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}"
                    for t, ps in sorted(assignment.items()) if ps) or MISSING


def _opt(value: int | None) -> Any:
    return MISSING if value is None else value


def _offset_rows(view: GroupView) -> list[list[Any]]:
    owners = view.owners()
    rows = []
    for topic, partition in sorted(set(view.committed) | set(owners)):
        end = view.log_end.get((topic, partition))
        current = view.committed.get((topic, partition))
        lag: Any = MISSING if current is None or end is None else max(end - current, 0)
        member = owners.get((topic, partition))
        rows.append([topic, partition, _opt(current), _opt(end), lag,
                     member.member_id if member else MISSING,
                     member.client_host if member else MISSING,
                     member.client_id if member else MISSING])
    return rows


def _print_offsets_kafka(view: GroupView) -> None:
    print()
    print_table([["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]]
                + [[view.group_id, *row] for row in _offset_rows(view)])


def _print_members_kafka(view: GroupView, verbose: bool) -> None:
    with_instance = any(m.group_instance_id for m in view.members)
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + [
        "HOST", "CLIENT-ID", "#PARTITIONS"]
    # a group with members of both protocols (a migration) shows which is which
    migrating = {m.upgraded for m in view.members} >= {True, False}
    with_regex = any(m.topic_regex for m in view.members)
    header += ["TOPIC-REGEX"] if with_regex else []
    if verbose:
        header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        header += ["UPGRADED"] if migrating else []
    rows: list[list[Any]] = [header]
    for m in view.members:
        row: list[Any] = [view.group_id, m.member_id] + (
            [m.group_instance_id or ""] if with_instance else []) + [
            m.client_host, m.client_id, sum(len(ps) for ps in m.assignment.values())]
        if with_regex:
            row.append(m.topic_regex or MISSING)
        if verbose:
            row += [_opt(m.member_epoch), _assignment_text(m.assignment),
                    _opt(view.assignment_epoch), _assignment_text(m.target_assignment)]
            if migrating:
                row.append(MISSING if m.upgraded is None else str(m.upgraded).lower())
        rows.append(row)
    print()
    print_table(rows)


def _print_state_kafka(view: GroupView, verbose: bool) -> None:
    node, host, port = view.coordinator
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row: list[Any] = [view.group_id, f"{host}:{port}  ({node})", view.protocol or MISSING,
                      view.state]
    if verbose:
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [_opt(view.group_epoch), _opt(view.assignment_epoch)]
    print()
    print_table([[*header, "#MEMBERS"], [*row, len(view.members)]])


def _list(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        listing = await admin.list_groups_everywhere(args.state, args.type)
        print_table([["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"]] + [
            [g.group_id, g.state or MISSING, g.group_type or MISSING, g.protocol_type or MISSING]
            for g in listing
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
    from odradek.client.connection import ClientError
    from odradek.client.routing import RETRIABLE_CODES

    error = (await client.delete_groups([group_id]))[group_id]
    code = _error_code(error)
    if code in RETRIABLE_CODES:
        raise ClientError(f"deleting group {group_id} failed with {error.upper()}", code)
    return error


def _error_code(name: str) -> int:
    from kio.schema.errors import ErrorCode

    return int(ErrorCode[name].value)


def _member_protocol(member: MemberView) -> str:
    """``consumer`` (KIP-848), ``classic`` (a classic member in a consumer group being
    migrated), ``-`` when the broker does not say (ConsumerGroupDescribe v0)."""
    if member.upgraded is None:
        return MISSING
    return "consumer" if member.upgraded else "classic"


def _describe(args: argparse.Namespace) -> int:
    from odradek.client.groups import CONSUMER

    async def body(admin: ClusterAdmin) -> int:
        status = 0
        for group_id in args.group:
            view = await _view(admin, group_id)
            if view.state == "Dead" and not view.committed:
                print(f"Consumer group '{group_id}' does not exist.")
                status = 1
                continue
            kind = (f"ASSIGNOR {view.protocol or MISSING}  GROUP-EPOCH {view.group_epoch}  "
                    f"TARGET-ASSIGNMENT-EPOCH {view.assignment_epoch}"
                    if view.group_type == CONSUMER else
                    f"PROTOCOL {view.protocol_type or MISSING}/{view.protocol or MISSING}")
            print(f"GROUP {group_id}  TYPE {view.group_type}  STATE {view.state}  {kind}  "
                  f"MEMBERS {len(view.members)}")
            print_table([["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                          "CONSUMER-ID", "HOST", "CLIENT-ID"], *_offset_rows(view)])
            if view.members:
                print()
                header = ["CONSUMER-ID", "INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
                consumer = view.group_type == CONSUMER
                with_regex = any(m.topic_regex for m in view.members)
                header += ["TOPIC-REGEX"] if with_regex else []
                # a consumer group's member speaks the consumer protocol, or the classic
                # one during a migration (ConsumerGroupDescribe v1's member type)
                header += (["PROTOCOL", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                            "TARGET-EPOCH", "TARGET-ASSIGNMENT"] if consumer
                           else ["ASSIGNMENT"])
                member_rows: list[list[Any]] = [header]
                for m in view.members:
                    row: list[Any] = [m.member_id, m.group_instance_id or MISSING,
                                      m.client_host, m.client_id,
                                      sum(len(ps) for ps in m.assignment.values())]
                    row += [m.topic_regex or MISSING] if with_regex else []
                    row += ([_member_protocol(m), _opt(m.member_epoch),
                             _assignment_text(m.assignment),
                             _opt(view.assignment_epoch),
                             _assignment_text(m.target_assignment)] if consumer
                            else [_assignment_text(m.assignment)])
                    member_rows.append(row)
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
    from odradek.client.connection import ClientError

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
