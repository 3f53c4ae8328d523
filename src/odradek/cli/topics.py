"""``odradek topics create|list|describe|alter|delete`` (Kafka's kafka-topics.sh)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from odradek.cli._common import UsageError, add_bootstrap, parse_pairs, print_table, run_with_admin
from odradek.client.admin import Admin, PartitionInfo
from odradek.client.connection import ClientError
from odradek.text import plural


def add_parser(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    verbs = topics.add_subparsers(dest="verb", required=True)
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
        status = 0
        for topic in sorted(topics, key=lambda t: t.name):
            if topic.error != "none":
                print(f"Topic: {topic.name}\tError: {topic.error.upper()}")
                status = 1
                continue
            try:
                configs = await admin.describe_topic_configs(topic.name)
            except ClientError as exc:
                print(f"(configs unavailable: {exc})")
                configs = []
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

    return run_with_admin(args, body)


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
