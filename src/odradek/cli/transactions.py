"""``odradek transactions list|describe`` (Kafka's kafka-transactions.sh, KIP-664).

``list`` asks every broker of the cluster for the transactions it coordinates
(ListTransactions; ``--state``, ``--producer-id`` and ``--duration-filter`` are passed
through) and prints one line per transactional id with its coordinator, producer id and
state. ``describe`` finds the id's coordinator (FindCoordinator, key type TRANSACTION) and
prints what DescribeTransactions answers: producer id and epoch, state, timeout, the
current transaction's start time, duration and partitions.

``describe-producers`` asks a partition's leader for its active producers
(DescribeProducers): producer id and epoch, the coordinator epoch of its last marker, its
last sequence and timestamp, and the start offset of its open transaction.

``abort`` ends a *hanging* transaction (data written in a transaction no coordinator will
ever finish: its last stable offset holds read_committed consumers back) the way
``kafka-transactions.sh abort`` does: the producer whose open transaction starts at
``--start-offset`` is found with DescribeProducers (or given with ``--producer-id``,
``--producer-epoch`` and ``--coordinator-epoch``), and an abort marker for it is written by
sending WriteTxnMarkers to the partition's leader, which needs ClusterAction on the
cluster.

``find-hanging`` looks, as Kafka's tool does, at the partitions a broker leads (or one
topic's): the producers DescribeProducers reports with a transaction open for longer than
``--max-transaction-timeout`` minutes (measured from their last timestamp) are candidates;
ListTransactions on every broker names their transactional ids, DescribeTransactions on
each id's coordinator tells whether it still has that partition in an ongoing (or
completing) transaction of the same producer id. A candidate no coordinator owns that way
is hanging.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import TYPE_CHECKING, Any

from odradek.cli._common import add_bootstrap, print_table, run_with_admin

if TYPE_CHECKING:
    from odradek.client.admin import Admin
    from odradek.client.connection import BrokerConnection
    from odradek.client.routing import ClusterAdmin

LIST_TRANSACTIONS = 66
KEY_TYPE_TRANSACTION = 1
#: Kafka's default for find-hanging's --max-transaction-timeout (minutes): the default
#: transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
#: coordinator states in which a transaction's partitions will still get their markers
_LIVE_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def add_parser(sub: Any) -> None:
    txn = sub.add_parser("transactions",
                         help="list, describe and abort transactions, find hanging ones")
    verbs = txn.add_subparsers(dest="verb", required=True)
    lst = verbs.add_parser("list", help="every transactional id, its coordinator and state")
    lst.add_argument("--state", action="append", default=[],
                     help="only ids in this state, e.g. Ongoing (repeatable)")
    lst.add_argument("--producer-id", action="append", type=int, default=[],
                     help="only this producer id (repeatable)")
    lst.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                     help="only transactions running longer than MS milliseconds")
    lst.set_defaults(func=_list)
    describe = verbs.add_parser("describe", help="one transactional id's state")
    describe.add_argument("--transactional-id", required=True,
                          help="the transactional id to describe")
    describe.set_defaults(func=_describe)
    producers = verbs.add_parser("describe-producers",
                                 help="the active producers of one partition")
    producers.add_argument("--topic", required=True, help="the topic of the partition")
    producers.add_argument("--partition", type=int, required=True,
                           help="the partition whose leader is asked")
    producers.set_defaults(func=_describe_producers)
    abort = verbs.add_parser("abort", help="abort a hanging transaction on one partition")
    abort.add_argument("--topic", required=True, help="the topic of the partition")
    abort.add_argument("--partition", type=int, required=True,
                       help="the partition holding the transaction")
    abort.add_argument("--start-offset", type=int,
                       help="the offset the transaction starts at (its producer is found "
                            "with DescribeProducers)")
    abort.add_argument("--producer-id", type=int,
                       help="instead of --start-offset: the transaction's producer id")
    abort.add_argument("--producer-epoch", type=int,
                       help="with --producer-id: the producer's epoch")
    abort.add_argument("--coordinator-epoch", type=int,
                       help="with --producer-id: the coordinator epoch for the marker")
    abort.set_defaults(func=_abort)
    hanging = verbs.add_parser("find-hanging",
                               help="transactions open longer than the maximum timeout "
                                    "that no coordinator knows")
    hanging.add_argument("--broker-id", type=int,
                         help="look at the partitions this broker leads")
    hanging.add_argument("--topic", help="look at this topic's partitions instead")
    hanging.add_argument("--partition", type=int,
                         help="with --topic: only this partition")
    hanging.add_argument("--max-transaction-timeout", type=int,
                         default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
                         help="a transaction open longer than this many minutes is a "
                              f"candidate (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN}, "
                              "the default transaction.max.timeout.ms)")
    hanging.set_defaults(func=_find_hanging)
    for parser in (lst, describe, producers, abort, hanging):
        add_bootstrap(parser)


def _request(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


async def _list_one(conn: BrokerConnection, args: argparse.Namespace) -> Any:
    from odradek.client.connection import ClientError

    version = conn.version(LIST_TRANSACTIONS, (0, 1))
    m = _request("list_transactions", version)
    fields: dict[str, Any] = {"state_filters": tuple(args.state),
                              "producer_id_filters": tuple(args.producer_id)}
    if version >= 1:
        fields["duration_filter"] = args.duration_filter
    elif args.duration_filter >= 0:
        raise ClientError("the broker does not serve --duration-filter (ListTransactions v1)")
    return await conn.send(m.ListTransactionsRequest(**fields))


def _list(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        brokers, _ = await admin.cluster_metadata([])
        rows: list[list[Any]] = [["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]]
        status = 0
        unknown: set[str] = set()
        for broker_id in sorted(brokers):
            response = await _list_one(await admin.broker(broker_id), args)
            if response.error_code != 0:
                print(f"broker {broker_id}: {response.error_code.name.upper()}")
                status = 1
                continue
            unknown.update(response.unknown_state_filters)
            for s in response.transaction_states:
                rows.append([s.transactional_id, broker_id, s.producer_id,
                             s.transaction_state])
        rows[1:] = sorted(rows[1:], key=lambda r: str(r[0]))
        print_table(rows)
        if unknown:
            print(f"unknown states: {', '.join(sorted(unknown))}")
        return status

    return run_with_admin(args, body)


def _describe(args: argparse.Namespace) -> int:
    txn_id = args.transactional_id

    async def body(admin: ClusterAdmin) -> int:
        await admin.cluster_metadata([])
        fc = _request("find_coordinator", 4)
        found: Any = await (await admin._any()).send(fc.FindCoordinatorRequest(
            key_type=KEY_TYPE_TRANSACTION, coordinator_keys=(txn_id,)))
        [coordinator] = found.coordinators
        if coordinator.error_code != 0:
            print(f"odradek: no coordinator for {txn_id!r}: "
                  f"{coordinator.error_code.name.upper()}")
            return 1
        node = int(coordinator.node_id)
        dt = _request("describe_transactions", 0)
        response: Any = await (await admin.broker(node)).send(
            dt.DescribeTransactionsRequest(transactional_ids=(txn_id,)))
        [state] = response.transaction_states
        if state.error_code != 0:
            print(f"odradek: {txn_id!r}: {state.error_code.name.upper()}")
            return 1
        start_ms = round(state.transaction_start_time.timestamp() * 1000)
        duration: Any = "-" if start_ms < 0 else max(0, int(time.time() * 1000) - start_ms)
        partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
        print_table([
            ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE",
             "TIMEOUT-MS", "START-TIME-MS", "DURATION-MS", "PARTITIONS"],
            [node, txn_id, state.producer_id, state.producer_epoch, state.transaction_state,
             round(state.transaction_timeout.total_seconds() * 1000),
             "-" if start_ms < 0 else start_ms, duration, partitions or "-"],
        ])
        return 0

    return run_with_admin(args, body)


# -- describe-producers / abort / find-hanging (DescribeProducers, KIP-664) --------------
async def _producers_of(conn: BrokerConnection, partitions: dict[str, list[int]]
                        ) -> dict[tuple[str, int], tuple[int, list[Any]]]:
    """DescribeProducers on one broker: (topic, partition) -> (error code, producers)."""
    dp = _request("describe_producers", 0)
    response: Any = await conn.send(dp.DescribeProducersRequest(topics=tuple(
        dp.TopicRequest(name=topic, partition_indexes=tuple(indexes))
        for topic, indexes in partitions.items())))
    return {(t.name, int(p.partition_index)): (p.error_code.value, list(p.active_producers))
            for t in response.topics for p in t.partitions}


async def _leader_producers(admin: ClusterAdmin, topic: str, partition: int) -> list[Any]:
    """The producers of ``topic-partition``, asked of its leader (retried while it moves)."""
    from odradek.client.connection import ClientError

    async def call(leader: Admin) -> list[Any]:
        code, producers = (await _producers_of(leader.conn, {topic: [partition]}))[
            (topic, partition)]
        if code != 0:
            raise ClientError(f"describing the producers of {topic}-{partition} failed with "
                              f"{_name(code)}", code)
        return producers

    return await admin.on_leader(topic, partition, call)


def _name(code: int) -> str:
    from odradek.protocol.errors import ErrorCode

    return ErrorCode(code).name.upper()


def _describe_producers(args: argparse.Namespace) -> int:
    async def body(admin: ClusterAdmin) -> int:
        producers = await _leader_producers(admin, args.topic, args.partition)
        rows: list[list[Any]] = [["PRODUCER-ID", "PRODUCER-EPOCH", "LATEST-COORDINATOR-EPOCH",
                                  "LAST-SEQUENCE", "LAST-TIMESTAMP",
                                  "CURRENT-TRANSACTION-START-OFFSET"]]
        for p in sorted(producers, key=lambda p: int(p.producer_id)):
            rows.append([p.producer_id, p.producer_epoch, p.coordinator_epoch,
                         p.last_sequence, p.last_timestamp, p.current_txn_start_offset])
        print_table(rows)
        return 0

    return run_with_admin(args, body)


def _abort(args: argparse.Namespace) -> int:
    from odradek.client.connection import ClientError

    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if (args.start_offset is None) == all(v is None for v in by_producer):
        print("odradek: give either --start-offset or --producer-id, --producer-epoch and "
              "--coordinator-epoch", file=sys.stderr)
        return 2
    if args.start_offset is None and any(v is None for v in by_producer):
        print("odradek: --producer-id needs --producer-epoch and --coordinator-epoch",
              file=sys.stderr)
        return 2
    topic, partition = args.topic, args.partition

    async def body(admin: ClusterAdmin) -> int:
        if args.start_offset is not None:
            found = [p for p in await _leader_producers(admin, topic, partition)
                     if int(p.current_txn_start_offset) == args.start_offset]
            if not found:
                print(f"odradek: no open transaction starts at offset {args.start_offset} "
                      f"of {topic}-{partition}", file=sys.stderr)
                return 1
            [p] = found
            # Kafka's tool: the coordinator epoch of the producer's last marker, else 0
            pid, epoch = int(p.producer_id), int(p.producer_epoch)
            coordinator_epoch = max(0, int(p.coordinator_epoch))
        else:
            pid, epoch, coordinator_epoch = by_producer
        wm = _request("write_txn_markers", 1)

        async def call(leader: Admin) -> int:
            response: Any = await leader.conn.send(wm.WriteTxnMarkersRequest(markers=(
                wm.WritableTxnMarker(
                    producer_id=pid, producer_epoch=epoch, transaction_result=False,
                    coordinator_epoch=coordinator_epoch,
                    topics=(wm.WritableTxnMarkerTopic(name=topic,
                                                      partition_indexes=(partition,)),)),)))
            code = int(response.markers[0].topics[0].partitions[0].error_code.value)
            if code != 0:
                raise ClientError(f"writing the abort marker to {topic}-{partition} failed "
                                  f"with {_name(code)}", code)
            return code

        await admin.on_leader(topic, partition, call)
        print(f"aborted the transaction of producer {pid} (epoch {epoch}) on "
              f"{topic}-{partition}")
        return 0

    return run_with_admin(args, body)


def _find_hanging(args: argparse.Namespace) -> int:
    if (args.broker_id is None) == (args.topic is None):
        print("odradek: give either --broker-id or --topic", file=sys.stderr)
        return 2
    if args.partition is not None and args.topic is None:
        print("odradek: --partition needs --topic", file=sys.stderr)
        return 2
    max_timeout_ms = args.max_transaction_timeout * 60_000

    async def body(admin: ClusterAdmin) -> int:
        brokers, described = await admin.cluster_metadata(
            None if args.topic is None else [args.topic])
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in described:
            if t.error != "none":
                print(f"odradek: {t.name}: {t.error.upper()}", file=sys.stderr)
                return 1
            for p in t.partitions:
                if args.broker_id is not None and p.leader != args.broker_id:
                    continue
                if args.partition is not None and p.partition != args.partition:
                    continue
                by_leader.setdefault(p.leader, {}).setdefault(t.name, []).append(p.partition)
        now = int(time.time() * 1000)
        # (topic, partition, producer state) of each transaction open past the timeout
        candidates: list[tuple[str, int, Any]] = []
        status = 0
        for leader, partitions in sorted(by_leader.items()):
            answers = await _producers_of(await admin.broker(leader), partitions)
            for (topic, partition), (code, producers) in sorted(answers.items()):
                if code != 0:
                    print(f"{topic}-{partition}: {_name(code)}", file=sys.stderr)
                    status = 1
                    continue
                candidates.extend(
                    (topic, partition, p) for p in producers
                    if int(p.current_txn_start_offset) >= 0
                    and now - int(p.last_timestamp) > max_timeout_ms)
        hanging = await _not_known_to_coordinators(admin, sorted(brokers), candidates)
        if not hanging:
            print("no hanging transactions")
            return status
        rows: list[list[Any]] = [["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH",
                                  "COORDINATOR-EPOCH", "START-OFFSET", "LAST-TIMESTAMP",
                                  "DURATION-MIN"]]
        for topic, partition, p in hanging:
            rows.append([topic, partition, p.producer_id, p.producer_epoch,
                         p.coordinator_epoch, p.current_txn_start_offset, p.last_timestamp,
                         (now - int(p.last_timestamp)) // 60_000])
        print_table(rows)
        return status

    return run_with_admin(args, body)


async def _not_known_to_coordinators(
    admin: ClusterAdmin, brokers: list[int], candidates: list[tuple[str, int, Any]]
) -> list[tuple[str, int, Any]]:
    """The candidates whose partition is in no coordinator's live transaction of their
    producer id (Kafka's FindHangingTransactionsCommand)."""
    if not candidates:
        return []
    pids = sorted({int(p.producer_id) for _, _, p in candidates})
    owners: dict[int, tuple[str, int]] = {}  # producer id -> (transactional id, coordinator)
    for broker_id in brokers:
        m = _request("list_transactions", 0)
        listed: Any = await (await admin.broker(broker_id)).send(m.ListTransactionsRequest(
            state_filters=(), producer_id_filters=tuple(pids)))
        for s in listed.transaction_states:
            owners[int(s.producer_id)] = (s.transactional_id, broker_id)
    live: dict[int, set[tuple[str, int]]] = {}  # producer id -> its partitions
    dt = _request("describe_transactions", 0)
    for pid, (txn_id, broker_id) in owners.items():
        response: Any = await (await admin.broker(broker_id)).send(
            dt.DescribeTransactionsRequest(transactional_ids=(txn_id,)))
        [state] = response.transaction_states
        if (state.error_code.value == 0 and int(state.producer_id) == pid
                and state.transaction_state in _LIVE_STATES):
            live[pid] = {(t.topic, int(i)) for t in state.topics for i in t.partitions}
    return [(topic, partition, p) for topic, partition, p in candidates
            if (topic, partition) not in live.get(int(p.producer_id), set())]
