"""``odradek transactions list|describe`` (Kafka's kafka-transactions.sh, KIP-664).

``list`` asks every broker of the cluster for the transactions it coordinates
(ListTransactions; ``--state``, ``--producer-id`` and ``--duration-filter`` are passed
through) and prints one line per transactional id with its coordinator, producer id and
state. ``describe`` finds the id's coordinator (FindCoordinator, key type TRANSACTION) and
prints what DescribeTransactions answers: producer id and epoch, state, timeout, the
current transaction's start time, duration and partitions.
"""

from __future__ import annotations

import argparse
import importlib
import time
from typing import Any

from odradek.cli._common import add_bootstrap, print_table, run_with_admin
from odradek.client.connection import BrokerConnection, ClientError
from odradek.client.routing import ClusterAdmin

LIST_TRANSACTIONS = 66
KEY_TYPE_TRANSACTION = 1


def add_parser(sub: Any) -> None:
    txn = sub.add_parser("transactions", help="list and describe transactions")
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
    for parser in (lst, describe):
        add_bootstrap(parser)


def _request(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


async def _list_one(conn: BrokerConnection, args: argparse.Namespace) -> Any:
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
