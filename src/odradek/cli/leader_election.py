"""``odradek leader-election`` (Kafka's kafka-leader-election.sh, ``LeaderElectionCommand``).

How it works: the partitions come from exactly one of ``--all-topic-partitions`` (the
request names none: every partition of the cluster), ``--topic`` with ``--partition`` (or
without it, an Odradek extension: every partition of the topic, read from Metadata) or
``--path-to-json-file`` (``{"partitions": [{"topic": "t", "partition": 0}, ...]}``, the
file kafka-leader-election.sh takes). The tool asks the bootstrap broker who the
controller is, sends it one ElectLeaders request and, on NOT_CONTROLLER (the controller
moved), asks again until ``--timeout`` passes. It prints what kafka-leader-election.sh
prints: the partitions elected, those whose preferred replica already led ("Valid replica
already elected"), and one line per failure; it exits 1 if any partition failed.

``--election-type unclean`` gives partitions whose leader is gone a leader even out of the
ISR (KIP-460; see docs/operations.md for what that loses).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.cli._common import UsageError, add_bootstrap, security_of

if TYPE_CHECKING:
    from odradek.client.admin import Admin

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
#: Kafka's error codes (kio's ErrorCode, imported where the command runs: every ``odradek``
#: command builds this parser, tests/cli/test_main.py)
NONE = 0
NOT_CONTROLLER = 41
ELECTION_NOT_NEEDED = 84
RETRY_BACKOFF_S = 0.5


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leader-election",
                       help="move leadership to preferred replicas (kafka-leader-election.sh)")
    add_bootstrap(p)
    p.add_argument("--election-type", required=True, type=str.upper,
                   choices=sorted(ELECTION_TYPES),
                   help="PREFERRED: the first replica of the assignment leads again; "
                        "UNCLEAN: a leaderless partition gets a leader even out of the ISR")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of the cluster")
    which.add_argument("--topic", help="a topic (with --partition: one of its partitions)")
    which.add_argument("--path-to-json-file", type=Path, metavar="FILE",
                       help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
    p.add_argument("--partition", type=int, help="a partition of --topic")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the elections (default 60)")
    p.set_defaults(func=_run)


def _json_partitions(path: Path) -> list[tuple[str, int]]:
    try:
        doc = json.loads(path.read_text())
        out = [(str(e["topic"]), int(e["partition"])) for e in doc["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"odradek: cannot read partitions from {path}: {exc}") from None
    if len(set(out)) != len(out):
        raise UsageError(f"odradek: {path} names a partition more than once")
    return out


def _run(args: argparse.Namespace) -> int:
    import asyncio

    if args.partition is not None and args.topic is None:
        print("odradek leader-election: --partition needs --topic", file=sys.stderr)
        return 2
    listed = _json_partitions(args.path_to_json_file) if args.path_to_json_file else None
    try:
        return asyncio.run(_elect(args, listed))
    except KeyboardInterrupt:
        return 130


async def _partitions(args: argparse.Namespace, admin: Admin,
                      listed: list[tuple[str, int]] | None) -> list[tuple[str, int]] | None:
    from odradek.client.connection import ClientError

    if listed is not None:
        return listed
    if args.all_topic_partitions:
        return None
    if args.partition is not None:
        return [(args.topic, args.partition)]
    topics = await admin.metadata([args.topic])
    if not topics or topics[0].error != "none":
        raise ClientError(f"topic {args.topic}: "
                          f"{topics[0].error.upper() if topics else 'not found'}")
    return [(args.topic, p.partition) for p in topics[0].partitions]


async def _elect(args: argparse.Namespace, listed: list[tuple[str, int]] | None) -> int:
    import asyncio

    from odradek.client.admin import Admin
    from odradek.client.connection import BrokerConnection, ClientError

    election = args.election_type
    deadline = time.monotonic() + args.timeout
    security = security_of(args)
    try:
        bootstrap = await BrokerConnection.open(args.bootstrap_server,
                                                client_id="odradek-leader-election",
                                                security=security)
    except (ClientError, TimeoutError, OSError) as exc:
        print(f"odradek: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    try:
        admin = Admin(bootstrap)
        wanted = await _partitions(args, admin, listed)
        while True:
            _, host, port = await admin.controller()
            async with await BrokerConnection.open(
                f"{host}:{port}", client_id="odradek-leader-election", security=security
            ) as conn:
                remaining = max(0.0, deadline - time.monotonic())
                top, results = await Admin(conn).elect_leaders(
                    ELECTION_TYPES[election], wanted,
                    datetime.timedelta(seconds=remaining))
            if top != NOT_CONTROLLER or time.monotonic() + RETRY_BACKOFF_S > deadline:
                break
            await asyncio.sleep(RETRY_BACKOFF_S)  # the controller moved: ask who it is now
    except ClientError as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return 1
    finally:
        await bootstrap.close()
    return _report(election, top, results)


def _report(election: str, top: int, results: list[tuple[str, int, int, str | None]]) -> int:
    from kio.schema.errors import ErrorCode

    results = sorted(results)
    succeeded = [f"{t}-{p}" for t, p, code, _ in results if code == NONE]
    noop = [f"{t}-{p}" for t, p, code, _ in results if code == ELECTION_NOT_NEEDED]
    failed = [(f"{t}-{p}", code, message) for t, p, code, message in results
              if code not in (NONE, ELECTION_NOT_NEEDED)]
    if succeeded:
        print(f"Successfully completed leader election ({election}) for partitions "
              f"{', '.join(succeeded)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for tp, code, message in failed:
        print(f"Error completing leader election ({election}) for partition: {tp}: "
              f"{ErrorCode(code).name.upper()}: {message or ''}")
    if failed:
        print(f"odradek: {len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    if top != NONE:
        print(f"odradek: leader election failed with {ErrorCode(top).name.upper()}",
              file=sys.stderr)
        return 1
    return 0
