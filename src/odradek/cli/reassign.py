"""``odradek reassign``: move partition replicas between brokers, as Kafka's
kafka-reassign-partitions.sh does (AlterPartitionReassignments / ListPartitionReassignments,
KIP-455).

The plan is Kafka's JSON (``{"version":1,"partitions":[{"topic","partition","replicas"}]}``;
``log_dirs`` is accepted and must be ``any``). ``--execute`` prints the current assignment
(save it to roll back) and starts the moves; ``--verify`` says, per partition, whether its
move is completed or still in progress; ``--cancel`` cancels the moves under way, returning
those partitions to their replicas from before; ``--list`` shows every move under way.
``--verify`` exits 1 while a move of the plan is not completed (Kafka's tool exits 0), so a
script can wait on it. The
move copies the log to the new replicas (they fetch from the leader and join the ISR)
before the old ones are dropped. ``--throttle B`` caps that copy (KIP-73): it sets
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (as the
cluster-wide broker default) and names the moving replicas in the topics'
``*.replication.throttled.replicas``; ``--verify`` removes them once every move is done.
``--generate`` proposes a plan moving whole topics (``--topics-to-move-json-file``:
``{"version":1,"topics":[{"topic":...}]}``) onto the brokers of ``--broker-list``: each
topic keeps its partition count and replication factor, and its replicas are placed as
CreateTopics places them (Kafka's ``AdminUtils.assignReplicasToBrokers``: round-robin
from a random broker, rack-aware unless ``--disable-rack-aware``). It prints the current
assignment and the proposed one, and changes nothing (as Kafka's tool).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.cli._common import UsageError, add_bootstrap, run_with_admin

if TYPE_CHECKING:
    from odradek.client.admin import Admin

TIMEOUT = datetime.timedelta(seconds=30)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "reassign", help="move partition replicas between brokers (kafka-reassign-partitions)")
    add_bootstrap(parser)
    parser.add_argument("--reassignment-json-file", type=Path,
                        help="the plan: {\"version\":1,\"partitions\":[{\"topic\":...,"
                             "\"partition\":...,\"replicas\":[...]}]}")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the moves of the plan")
    action.add_argument("--verify", action="store_true",
                        help="whether each move of the plan is completed")
    action.add_argument("--cancel", action="store_true",
                        help="cancel the moves of the plan still under way")
    action.add_argument("--list", action="store_true", help="every move under way")
    action.add_argument("--generate", action="store_true",
                        help="propose a plan moving the topics of --topics-to-move-json-file "
                             "onto the brokers of --broker-list (changes nothing)")
    parser.add_argument("--topics-to-move-json-file", type=Path,
                        help="with --generate: {\"version\":1,\"topics\":[{\"topic\":...}]}")
    parser.add_argument("--broker-list", metavar="IDS",
                        help="with --generate: the brokers to move the topics to, e.g. 1,2,3")
    parser.add_argument("--disable-rack-aware", action="store_true",
                        help="with --generate: place replicas ignoring the brokers' racks")
    parser.add_argument("--throttle", type=int, default=None, metavar="BYTES_PER_S",
                        help="with --execute: cap the moves' replication at this rate "
                             "(KIP-73); --verify removes the throttle once every move is done")
    parser.set_defaults(func=run)


def load_plan(path: Path) -> list[tuple[str, int, list[int]]]:
    try:
        doc = json.loads(path.read_text())
        plan = []
        for entry in doc["partitions"]:
            dirs = entry.get("log_dirs")
            if dirs is not None and any(d != "any" for d in dirs):
                raise UsageError("odradek: log_dirs other than \"any\" are not supported")
            plan.append((str(entry["topic"]), int(entry["partition"]),
                         [int(r) for r in entry["replicas"]]))
        return plan
    except OSError as exc:
        raise UsageError(f"odradek: cannot read {path}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"odradek: {path} is not a reassignment plan ({exc!r}); expected "
                         "{\"version\":1,\"partitions\":[{\"topic\":...,\"partition\":...,"
                         "\"replicas\":[...]}]}") from None


async def alter(admin: Admin, entries: list[tuple[str, int, list[int] | None]]) -> list[str]:
    """AlterPartitionReassignments; the errors, one line each."""
    from odradek.client.admin import check
    from odradek.client.connection import request_class

    req = request_class("alter_partition_reassignments", 0, "AlterPartitionReassignmentsRequest")
    topic_cls = request_class("alter_partition_reassignments", 0, "ReassignableTopic")
    part_cls = request_class("alter_partition_reassignments", 0, "ReassignablePartition")
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, replicas in entries:
        by_topic.setdefault(topic, []).append(part_cls(
            partition_index=partition, replicas=None if replicas is None else tuple(replicas)))
    response = await admin.conn.send(req(timeout=TIMEOUT, topics=tuple(
        topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    check(response.error_code, "AlterPartitionReassignments", response.error_message)
    return [f"{t.name}-{p.partition_index}: {p.error_code.name.upper()}"
            + (f" ({p.error_message})" if p.error_message else "")
            for t in response.responses for p in t.partitions if p.error_code.value]


async def ongoing(admin: Admin) -> dict[tuple[str, int], Any]:
    from odradek.client.admin import check
    from odradek.client.connection import request_class

    req = request_class("list_partition_reassignments", 0, "ListPartitionReassignmentsRequest")
    response = await admin.conn.send(req(timeout=TIMEOUT, topics=None))
    check(response.error_code, "ListPartitionReassignments", response.error_message)
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


def _replicas(described: dict[str, Any], topic: str, partition: int) -> list[int] | None:
    """The partition's replicas in a Metadata answer, or None when it has no such one."""
    found = described.get(topic)
    for p in found.partitions if found is not None else ():
        if p.partition == partition:
            return list(p.replicas)
    return None


def load_topics(path: Path) -> list[str]:
    """The topics of Kafka's --topics-to-move-json-file; duplicates refused as Kafka's."""
    try:
        topics = [str(entry["topic"]) for entry in json.loads(path.read_text())["topics"]]
    except OSError as exc:
        raise UsageError(f"odradek: cannot read {path}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"odradek: {path} is not a list of topics to move ({exc!r}); "
                         "expected {\"version\":1,\"topics\":[{\"topic\":...}]}") from None
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise UsageError("odradek reassign: List of topics to reassign contains duplicate "
                         f"entries: {', '.join(twice)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(b) for b in text.split(",")]
    except ValueError:
        raise UsageError("odradek reassign: --broker-list takes broker ids separated by "
                         f"commas, e.g. 1,2,3 (got {text!r})") from None
    twice = sorted({b for b in ids if ids.count(b) > 1})
    if twice:
        raise UsageError("odradek reassign: Broker list contains duplicate entries: "
                         + ", ".join(map(str, twice)))
    return ids


async def cluster_brokers(admin: Admin) -> dict[int, str | None]:
    """Every live broker's id and rack (a Metadata request for no topic)."""
    from odradek.client.connection import request_class

    cls = request_class("metadata", 12, "MetadataRequest")
    response = await admin.conn.send(cls(topics=(), allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False))
    return {int(b.node_id): b.rack for b in response.brokers}


def _plan_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]})


async def generate(admin: Admin, topics: list[str], broker_ids: list[int],
                   rack_aware: bool) -> int:
    """Kafka's --generate: each topic's partitions placed afresh on the listed brokers
    (those of them that are live; Kafka's tool leaves unknown ids out too)."""
    # the controller's placement, imported where it runs: every odradek command builds
    # this parser (tests/cli/test_main.py)
    from odradek.cluster.metadata import MetadataError, assign_replicas

    described = {t.name: t for t in await admin.metadata(topics)}
    current: dict[tuple[str, int], list[int]] = {}
    for topic in topics:
        found = described.get(topic)
        if found is None or found.error != "none" or not found.partitions:
            print(f"Topic {topic} not found.", file=sys.stderr)
            return 1
        for p in found.partitions:
            current[(topic, p.partition)] = list(p.replicas)
    live = await cluster_brokers(admin)
    brokers = sorted(b for b in broker_ids if b in live)
    racks = {b: rack for b in brokers if (rack := live[b]) is not None} if rack_aware else {}
    if racks and len(racks) < len(brokers):
        print("Not all brokers have rack information. Add --disable-rack-aware in command "
              "line to make replica assignment without rack information.", file=sys.stderr)
        return 1
    proposed: dict[tuple[str, int], list[int]] = {}
    for topic in topics:
        partitions = described[topic].partitions
        try:
            placed = assign_replicas(brokers, len(partitions), len(partitions[0].replicas),
                                     racks=racks or None)
        except MetadataError as exc:
            print(f"Error: {exc} (--broker-list names {len(brokers)} live broker(s): "
                  f"{brokers})", file=sys.stderr)
            return 1
        proposed.update(((topic, p), r) for p, r in placed.items())
    print(f"Current partition replica assignment\n{_plan_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{_plan_json(proposed)}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.generate:
        if args.topics_to_move_json_file is None or args.broker_list is None:
            raise UsageError("odradek reassign: --generate needs --topics-to-move-json-file "
                             "and --broker-list")
        topics = load_topics(args.topics_to_move_json_file)
        broker_ids = parse_broker_list(args.broker_list)
        return run_with_admin(args, lambda admin: generate(
            admin, topics, broker_ids, not args.disable_rack_aware))
    if not args.list and args.reassignment_json_file is None:
        raise UsageError("odradek reassign: --reassignment-json-file is required with "
                         "--execute, --verify and --cancel")
    plan = load_plan(args.reassignment_json_file) if not args.list else []

    async def body(admin: Admin) -> int:
        if args.list:
            for (topic, partition), p in sorted((await ongoing(admin)).items()):
                print(f"{topic}-{partition}: replicas {list(p.replicas)}, adding "
                      f"{list(p.adding_replicas)}, removing {list(p.removing_replicas)}")
            return 0
        if args.execute:
            described = {t.name: t for t in await admin.metadata(sorted({p[0] for p in plan}))}
            current = []
            for topic, partition, _ in plan:
                now = _replicas(described, topic, partition)
                if now is not None:
                    current.append({"topic": topic, "partition": partition, "replicas": now,
                                    "log_dirs": ["any"] * len(now)})
            print("Current partition replica assignment\n")
            print(json.dumps({"version": 1, "partitions": current}))
            print("\nSave this to use as the --reassignment-json-file option during rollback")
            if args.throttle is not None:
                await throttle(admin, plan, described, args.throttle)
            errors = await alter(admin, [(t, p, r) for t, p, r in plan])
            if errors:
                print("Error reassigning partitions:\n" + "\n".join(errors), file=sys.stderr)
                return 1
            print("Successfully started partition reassignments for "
                  + ",".join(f"{t}-{p}" for t, p, _ in plan))
            return 0
        if args.cancel:
            under_way = await ongoing(admin)
            wanted: list[tuple[str, int, list[int] | None]] = [
                (t, p, None) for t, p, _ in plan if (t, p) in under_way]
            errors = await alter(admin, wanted) if wanted else []
            if errors:
                print("Error cancelling reassignments:\n" + "\n".join(errors), file=sys.stderr)
                return 1
            print("Successfully cancelled partition reassignments for: "
                  + ",".join(f"{t}-{p}" for t, p, _ in wanted))
            return 0
        under_way = await ongoing(admin)
        described = {t.name: t for t in await admin.metadata(sorted({p[0] for p in plan}))}
        print("Status of partition reassignment:")
        pending = 0
        for topic, partition, replicas in plan:
            now = _replicas(described, topic, partition)
            if (topic, partition) in under_way:
                pending += 1
                print(f"Reassignment of partition {topic}-{partition} is still in progress.")
            elif now == replicas:
                print(f"Reassignment of partition {topic}-{partition} is completed.")
            else:
                pending += 1
                print(f"There is no active reassignment of partition {topic}-{partition}, "
                      f"but replica set is {now or []} rather than {replicas}.")
        if not pending:
            await unthrottle(admin, plan)
        return 1 if pending else 0

    return run_with_admin(args, body)


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas",
                      "follower.replication.throttled.replicas")


async def throttle(admin: Admin, plan: list[tuple[str, int, list[int]]],
                   described: dict[str, Any], rate: int) -> None:
    """Kafka's --throttle: the rate (set here as the cluster-wide broker default, which one
    connection can change; Kafka's tool sets it on each broker of the moves), the current
    replicas throttled as leaders and the new ones as followers, per topic."""
    from odradek.client.admin import BROKER_RESOURCE

    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for topic, partition, target in plan:
        now = _replicas(described, topic, partition) or []
        leaders.setdefault(topic, []).extend(f"{partition}:{b}" for b in now)
        followers.setdefault(topic, []).extend(
            f"{partition}:{b}" for b in target if b not in now)
    await admin.alter_configs(BROKER_RESOURCE, "", dict.fromkeys(THROTTLE_RATES, str(rate)),
                              [])
    for topic in sorted(leaders):
        await admin.alter_topic_configs(topic, {
            THROTTLED_REPLICAS[0]: ",".join(leaders[topic]),
            THROTTLED_REPLICAS[1]: ",".join(followers[topic]),
        }, [])
    print(f"The inter-broker throttle limit was set to {rate} B/s")


async def unthrottle(admin: Admin, plan: list[tuple[str, int, list[int]]]) -> None:
    """--verify, every move done: the throttle configs of the plan's topics and the
    cluster-wide rates are removed."""
    from odradek.client.admin import BROKER_RESOURCE

    await admin.alter_configs(BROKER_RESOURCE, "", {}, list(THROTTLE_RATES))
    for topic in sorted({t for t, _, _ in plan}):
        await admin.alter_topic_configs(topic, {}, list(THROTTLED_REPLICAS))
    print("Throttle was removed.")
