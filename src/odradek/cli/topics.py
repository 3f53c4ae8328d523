"""``odradek topics`` (Kafka's kafka-topics.sh), in two forms that do the same:

    odradek topics create|list|describe|alter|delete [--topic T] ...
    odradek topics --create|--list|--describe|--alter|--delete [--topic T] ...

The second is kafka-topics.sh's own command line, so a script written for Kafka runs
unchanged: exactly one action; ``--topic`` a regular expression for every action but
``--create`` (Kafka's IncludeList: a comma stands for ``|``, the whole name must match);
``--if-not-exists`` with ``--create``, ``--if-exists`` with ``--alter``, ``--delete`` and
``--describe`` (without it, a ``--topic`` that matches nothing is an error);
``--exclude-internal`` with ``--list`` and ``--describe``; ``--topics-with-overrides`` and the
partition filters with ``--describe``. As kafka-topics.sh, ``--create`` prints ``Created
topic T.``, ``--alter`` and ``--delete`` print nothing. A flag given with an action it does
not go with is refused with Kafka's words (exit status 2). Beyond kafka-topics.sh (which
sends topic configs to kafka-configs.sh), ``--alter`` also takes ``--config`` and
``--delete-config``, as ``topics alter`` does.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.cli._common import UsageError, add_bootstrap, parse_pairs, print_table, run_with_admin
from odradek.text import plural

if TYPE_CHECKING:
    from odradek.client.admin import Admin, PartitionInfo, TopicDescription

#: kafka-topics.sh's actions, in the order its usage names them
ACTIONS = ("list", "describe", "create", "alter", "delete")
#: kafka-topics.sh's partition filters of --describe (TopicCommand's replication reports)
REPORTS = ("under_replicated_partitions", "unavailable_partitions",
           "under_min_isr_partitions", "at_min_isr_partitions")
#: the flags of the kafka-topics.sh form, and the actions each goes with (TopicCommand's
#: checkInvalidArgs)
_FLAG_ACTIONS: dict[str, tuple[str, ...]] = {
    "partitions": ("create", "alter"),
    "replication_factor": ("create",),
    "config": ("create", "alter"),
    "delete_config": ("alter",),
    "if_exists": ("alter", "delete", "describe"),
    "if_not_exists": ("create",),
    "exclude_internal": ("list", "describe"),
    "topics_with_overrides": ("describe",),
    **{report: ("describe",) for report in REPORTS},
}


def add_parser(sub: Any) -> None:
    topics = sub.add_parser(
        "topics", help="create, list, describe, alter and delete topics (kafka-topics.sh)",
        description="Kafka's kafka-topics.sh: a sub-command (odradek topics create --topic "
                    "T), or kafka-topics.sh's own flags (odradek topics --create --topic T).",
    )
    _add_kafka_form(topics)
    verbs = topics.add_subparsers(dest="verb", required=False, metavar="{create,list,"
                                  "describe,alter,delete}")
    create = verbs.add_parser("create", help="create a topic")
    create.add_argument("--topic", required=True, help="the topic to create")
    create.add_argument("--partitions", type=int, default=-1,
                        help="default: the broker's num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="default: the broker's default.replication.factor")
    create.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="a topic config, e.g. cleanup.policy=compact (repeatable)")
    create.set_defaults(func=_create)
    lst = verbs.add_parser("list", help="list topic names")
    lst.add_argument("--exclude-internal", action="store_true",
                     help="leave out internal topics (__consumer_offsets)")
    lst.set_defaults(func=_list)
    describe = verbs.add_parser("describe", help="partitions, leaders, replicas, configs")
    describe.add_argument("--topic", help="default: every topic")
    only = describe.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only partitions whose ISR is smaller than their replicas")
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only partitions without a leader")
    only.add_argument("--under-min-isr-partitions", action="store_true",
                      help="only partitions whose ISR is smaller than min.insync.replicas")
    only.add_argument("--at-min-isr-partitions", action="store_true",
                      help="only partitions whose ISR is exactly min.insync.replicas")
    describe.set_defaults(func=_describe)
    alter = verbs.add_parser("alter", help="add partitions or change configs")
    alter.add_argument("--topic", required=True, help="the topic to change")
    alter.add_argument("--partitions", type=int, help="new, larger partition count")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a config")
    alter.add_argument("--delete-config", action="append", metavar="KEY",
                       help="remove a config override")
    alter.set_defaults(func=_alter)
    delete = verbs.add_parser("delete", help="delete a topic")
    delete.add_argument("--topic", required=True, help="the topic to delete")
    delete.set_defaults(func=_delete)
    for parser in (create, lst, describe, alter, delete):
        add_bootstrap(parser)


def _add_kafka_form(topics: argparse.ArgumentParser) -> None:
    """kafka-topics.sh's flags on ``odradek topics`` itself (a sub-command's own flags win
    when one is given)."""
    action = topics.add_mutually_exclusive_group()
    action.add_argument("--create", action="store_true", help="create a new topic")
    action.add_argument("--list", action="store_true", help="list topics")
    action.add_argument("--describe", action="store_true", help="describe topics")
    action.add_argument("--alter", action="store_true",
                        help="add partitions (or change configs) of topics")
    action.add_argument("--delete", action="store_true", help="delete topics")
    topics.add_argument("--topic", help="the topic; a regular expression but with --create")
    topics.add_argument("--partitions", type=int,
                        help="partitions to create, or the new count (default: the broker's "
                             "num.partitions)")
    topics.add_argument("--replication-factor", type=int,
                        help="with --create (default: the broker's default.replication.factor)")
    topics.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="a topic config override (repeatable)")
    topics.add_argument("--delete-config", action="append", metavar="KEY",
                        help="with --alter: remove a config override (repeatable)")
    topics.add_argument("--if-exists", action="store_true",
                        help="with --alter, --delete, --describe: only if the topic exists")
    topics.add_argument("--if-not-exists", action="store_true",
                        help="with --create: only if the topic does not exist")
    topics.add_argument("--exclude-internal", action="store_true",
                        help="with --list, --describe: leave out internal topics")
    topics.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics with config overrides")
    topics.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than "
                             "their replicas")
    topics.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions without a leader")
    topics.add_argument("--under-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than "
                             "min.insync.replicas")
    topics.add_argument("--at-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is exactly "
                             "min.insync.replicas")
    add_bootstrap(topics)
    topics.set_defaults(func=_kafka_form)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_kafka_form(args: argparse.Namespace) -> str:
    """The one action of a kafka-topics.sh command line, its flags checked as TopicCommand
    checks them; a :class:`UsageError` with Kafka's words otherwise."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError("odradek: topics needs a sub-command (create, list, describe, alter, "
                         "delete) or exactly one action: --list, --describe, --create, "
                         "--alter or --delete")
    action = actions[0]
    if action not in ("list", "describe") and not args.topic:
        raise UsageError(f"odradek: Missing required argument \"[topic]\" (with --{action})")
    for name, allowed in _FLAG_ACTIONS.items():
        value = getattr(args, name)
        if value not in (None, False) and action not in allowed:
            raise UsageError(f"odradek: Option \"[{_flag(name)[2:]}]\" can't be used with "
                             f"option \"[{action}]\"")
    reports = [r for r in REPORTS if getattr(args, r)]
    if len(reports) + bool(args.topics_with_overrides) > 1:
        shown = [_flag(r) for r in [*reports, *(["topics_with_overrides"]
                                               if args.topics_with_overrides else [])]]
        raise UsageError(f"odradek: {' and '.join(shown)} cannot be used together")
    if action == "alter" and args.partitions is None and not args.config \
            and not args.delete_config:
        raise UsageError('odradek: Missing required argument "[partitions]" (with --alter)')
    if action == "create" and args.partitions is not None and args.partitions < 1:
        raise UsageError("odradek: The partitions must be greater than 0")
    if action == "create" and args.replication_factor is not None and not (
            1 <= args.replication_factor <= 32767):
        raise UsageError("odradek: The replication factor must be between 1 and 32767 "
                         "inclusive")
    return action


def include_list(pattern: str) -> re.Pattern[str]:
    """kafka-topics.sh's ``--topic`` outside ``--create`` (Kafka's IncludeList): a regular
    expression whose commas stand for ``|``, spaces and surrounding quotes dropped, that
    must match the whole name."""
    text = pattern.strip().replace(",", "|").replace(" ", "")
    text = re.sub(r"^[\"']+", "", text)
    text = re.sub(r"[\"']+$", "", text)
    try:
        return re.compile(text)
    except re.error as exc:
        raise UsageError(f"odradek: --topic {pattern!r} is not a valid regular expression: "
                         f"{exc}") from None


def _kafka_form(args: argparse.Namespace) -> int:
    action = _check_kafka_form(args)
    if action == "create":
        return _create_kafka(args)
    chosen = include_list(args.topic) if args.topic else None

    async def body(admin: Admin) -> int:
        topics = [t for t in sorted(await admin.metadata(), key=lambda t: t.name)
                  if (chosen is None or chosen.fullmatch(t.name))
                  and not (args.exclude_internal and t.internal)]
        if args.topic and not topics and not args.if_exists and action != "list":
            print(f"odradek: Topic '{args.topic}' does not exist as expected",
                  file=sys.stderr)
            return 1
        if action == "list":
            for topic in topics:
                print(topic.name)
            return 0
        if action == "describe":
            return await _print_descriptions(admin, topics, _partition_filter(args),
                                             args.topics_with_overrides)
        if action == "alter":
            configs = parse_pairs(args.config, "config")
            for topic in topics:
                if args.partitions is not None:
                    await admin.create_partitions(topic.name, args.partitions)
                if configs or args.delete_config:
                    await admin.alter_topic_configs(topic.name, configs,
                                                    args.delete_config or [])
            return 0
        for topic in topics:
            await admin.delete_topic(topic.name)
        return 0

    return run_with_admin(args, body)


def _create_kafka(args: argparse.Namespace) -> int:
    from odradek.client.connection import ClientError
    from odradek.protocol.errors import ErrorCode

    configs = parse_pairs(args.config, "config")
    partitions = -1 if args.partitions is None else args.partitions
    factor = -1 if args.replication_factor is None else args.replication_factor

    async def body(admin: Admin) -> int:
        try:
            await admin.create_topic(args.topic, partitions, factor, configs)
        except ClientError as exc:
            if args.if_not_exists and exc.error_code == ErrorCode.topic_already_exists:
                return 0
            raise
        print(f"Created topic {args.topic}.")
        return 0

    return run_with_admin(args, body)


def _create(args: argparse.Namespace) -> int:
    configs = parse_pairs(args.config, "config")

    async def body(admin: Admin) -> int:
        await admin.create_topic(args.topic, args.partitions, args.replication_factor, configs)
        print(f"Created topic {args.topic}.")
        return 0

    return run_with_admin(args, body)


def _list(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        for topic in sorted(await admin.metadata(), key=lambda t: t.name):
            if not (args.exclude_internal and topic.internal):
                print(topic.name)
        return 0

    return run_with_admin(args, body)


def _partition_filter(
    args: argparse.Namespace,
) -> Callable[[PartitionInfo, int], bool] | None:
    """kafka-topics.sh's partition filters: (partition, min.insync.replicas) -> shown?
    None: no filter (the topic header and configs are printed too)."""
    if args.under_replicated_partitions:
        return lambda p, _m: len(p.isr) < len(p.replicas)
    if args.unavailable_partitions:
        return lambda p, _m: p.leader < 0
    if args.under_min_isr_partitions:
        return lambda p, m: len(p.isr) < m
    if args.at_min_isr_partitions:
        return lambda p, m: len(p.isr) == m
    return None


def _describe(args: argparse.Namespace) -> int:
    keep = _partition_filter(args)

    async def body(admin: Admin) -> int:
        topics = await admin.metadata([args.topic] if args.topic else None)
        return await _print_descriptions(admin, sorted(topics, key=lambda t: t.name), keep)

    return run_with_admin(args, body)


async def _print_descriptions(admin: Admin, topics: list[TopicDescription],
                              keep: Callable[[PartitionInfo, int], bool] | None,
                              overrides_only: bool = False) -> int:
    """kafka-topics.sh's description of each topic: a header line with the config
    overrides, then a line per partition (only those ``keep`` shows, with no header, when
    a partition filter is given; only topics with overrides when ``overrides_only``)."""
    from odradek.client.connection import ClientError

    status = 0
    for topic in topics:
        if topic.error != "none":
            print(f"Topic: {topic.name}\tError: {topic.error.upper()}")
            status = 1
            continue
        try:
            configs = await admin.describe_topic_configs(topic.name)
        except ClientError as exc:
            print(f"(configs unavailable: {exc})")
            configs = []
        if overrides_only and not any(dynamic for _, _, dynamic in configs):
            continue
        shown = list(topic.partitions)
        if keep is not None:
            min_isr = next((int(v) for k, v, _ in configs
                            if k == "min.insync.replicas" and v is not None), 1)
            shown = [p for p in shown if keep(p, min_isr)]
        else:
            overrides = ",".join(f"{k}={v}" for k, v, dynamic in configs if dynamic)
            rf = len(topic.partitions[0].replicas) if topic.partitions else 0
            print(f"Topic: {topic.name}\tTopicId: {topic.topic_id}\t"
                  f"PartitionCount: {len(topic.partitions)}\tReplicationFactor: {rf}\t"
                  f"Configs: {overrides}")
        print_table([
            ["", f"Topic: {topic.name}", f"Partition: {p.partition}",
             f"Leader: {p.leader if p.leader >= 0 else 'none'}",
             f"Replicas: {','.join(map(str, p.replicas))}",
             f"Isr: {','.join(map(str, p.isr))}"]
            for p in shown
        ])
    return status


def _alter(args: argparse.Namespace) -> int:
    configs = parse_pairs(args.config, "config")
    if args.partitions is None and not configs and not args.delete_config:
        raise UsageError("odradek: topics alter needs --partitions, --config or --delete-config")

    async def body(admin: Admin) -> int:
        if args.partitions is not None:
            await admin.create_partitions(args.topic, args.partitions)
            print(f"Topic {args.topic} now has {plural(args.partitions, 'partition')}.")
        if configs or args.delete_config:
            await admin.alter_topic_configs(args.topic, configs, args.delete_config or [])
            print(f"Updated configs of topic {args.topic}.")
        return 0

    return run_with_admin(args, body)


def _delete(args: argparse.Namespace) -> int:
    async def body(admin: Admin) -> int:
        await admin.delete_topic(args.topic)
        print(f"Deleted topic {args.topic}.")
        return 0

    return run_with_admin(args, body)
