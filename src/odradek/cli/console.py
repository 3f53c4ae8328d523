"""``odradek produce`` and ``odradek consume``: console tools like Kafka's
kafka-console-producer.sh and kafka-console-consumer.sh.

produce reads one record per line from standard input (``KEY<sep>VALUE`` with
``--key-separator``), picks the partition like Kafka's default partitioner (murmur2 of
the key, else round robin per batch) unless ``--partition`` is given, and sends batches
of up to ``--batch-size`` records. consume prints records from the start offset
(``--from-beginning``, ``--offset``), optionally with key, headers, partition and offset,
until ``--max-messages`` or ``--timeout-ms`` without new data.

``consume --group G`` is kafka-console-consumer.sh's ``--group``: a member of the group that
subscribes to the topic, is assigned partitions by the group, starts from the group's
committed offsets (else the earliest with ``--from-beginning``, the latest without: Kafka's
``auto.offset.reset``), commits what it printed (auto commit, and on exit) and leaves the
group. The member is the project's own (client/consumer.py: JoinGroup, SyncGroup with
Kafka's range assignment, heartbeats, OffsetCommit, LeaveGroup), so joining a group needs
nothing beyond the base install. Records are read from each partition's leader, followed
as leadership moves (client/routing.py). Either way, the end (``--max-messages``,
``--timeout-ms``, Ctrl-C or SIGTERM) prints Kafka's "Processed a total of N messages".

Transaction markers (control batches) are never printed nor counted. ``--isolation-level``
is Kafka's: ``read_uncommitted`` (the default, as kafka-console-consumer.sh) prints every
record, aborted ones included; ``read_committed`` reads up to the last stable offset and
leaves out the batches of the aborted transactions each Fetch answer names
(:class:`~odradek.records.columnar.AbortedFilter`, one decision per batch).

Both ways stop alike on SIGINT and SIGTERM, as Kafka's console consumer does (its JVM runs
the same shutdown hook for either): the record being printed is finished, the summary
printed (and with ``--group`` the offsets committed and the group left), and the exit
status is 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM). A signal ignored
when the command started (a shell's background job ignores SIGINT) stays ignored, as the
JVM and Python leave it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import signal
import sys
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.cli._common import (
    UsageError,
    add_bootstrap,
    parse_pairs,
    run_with_admin,
)
from odradek.text import plural

if TYPE_CHECKING:
    from odradek.client.admin import Admin, FetchedPartition
    from odradek.client.routing import ClusterAdmin

# odradek.records (the batches' codecs, builder and reader) is imported where a command
# runs: every ``odradek`` command builds these parsers (tests/cli/test_main.py)

#: Kafka's console consumer's --isolation-level values -> the Fetch field
_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
#: --compression's values: odradek.records.compression.CompressionType's names, lower case
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
OFFSET_OUT_OF_RANGE = 1
#: Kafka's auto.commit.interval.ms
AUTO_COMMIT_INTERVAL_S = 5.0

T = TypeVar("T")


def add_parser(sub: Any) -> None:
    produce = sub.add_parser("produce", help="send lines of standard input as records")
    add_bootstrap(produce)
    produce.add_argument("--topic", required=True, help="the topic (created if missing, "
                         "when the broker auto-creates topics)")
    produce.add_argument("--partition", type=int, help="default: by key, else round robin")
    produce.add_argument("--key-separator", help="split each line into KEY<sep>VALUE")
    produce.add_argument("--header", action="append", metavar="KEY=VALUE",
                         help="a header added to every record (repeatable)")
    produce.add_argument("--compression", choices=sorted(_CODECS), default="none",
                         help="the batches' codec (default none)")
    produce.add_argument("--acks", type=int, choices=[-1, 0, 1], default=-1,
                         help="-1: every in-sync replica (default), 1: the leader, 0: none")
    produce.add_argument("--batch-size", type=int, default=1000,
                         help="records per batch (default 1000)")
    produce.set_defaults(func=_produce)
    consume = sub.add_parser("consume", help="print records of a topic")
    add_bootstrap(consume)
    consume.add_argument("--topic", required=True, help="the topic to read")
    consume.add_argument("--partition", type=int, help="default: every partition")
    consume.add_argument("--group", help="consume as a member of this consumer group: "
                         "subscribe, start from its committed offsets, commit")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (with --group: when the group "
                            "has no committed offset)")
    start.add_argument("--offset", help="earliest, latest or an offset (needs --partition)")
    consume.add_argument("--max-messages", type=int, help="exit after this many records")
    consume.add_argument("--timeout-ms", type=int,
                         help="exit after this long without a new record")
    consume.add_argument("--print-key", action="store_true", help="print each record's key")
    consume.add_argument("--print-headers", action="store_true",
                         help="print each record's headers (k=v,...)")
    consume.add_argument("--print-offset", action="store_true",
                         help="prefix each record with partition and offset")
    consume.add_argument("--key-separator", default="\t",
                         help="between the printed fields (default a tab)")
    consume.add_argument("--isolation-level", choices=tuple(_ISOLATION_LEVELS),
                         default="read_uncommitted",
                         help="read_committed: only records of committed transactions, up "
                              "to the last stable offset; read_uncommitted (default, as "
                              "Kafka's console consumer): every record")
    consume.set_defaults(func=_consume)


def _produce(args: argparse.Namespace) -> int:
    from odradek.client.connection import ClientError
    from odradek.client.partitioner import partition_for_key

    headers = [(k, v.encode()) for k, v in parse_pairs(args.header, "header").items()]
    from odradek.records.builder import BatchBuilder
    from odradek.records.compression import CompressionType

    codec = CompressionType[args.compression.upper()]

    async def body(admin: Admin) -> int:
        topics = await admin.metadata([args.topic], auto_create=True)
        if not topics or topics[0].error != "none":
            error = topics[0].error.upper() if topics else "no metadata"
            raise ClientError(f"topic {args.topic}: {error}")
        count = len(topics[0].partitions)
        if args.partition is not None and not 0 <= args.partition < count:
            raise ClientError(f"topic {args.topic} has no partition {args.partition}")
        round_robin = itertools.cycle(range(count))
        pending: dict[int, BatchBuilder] = {}
        sent = 0

        async def flush(partition: int) -> None:
            nonlocal sent
            builder = pending.pop(partition)
            await admin.produce(args.topic, partition, builder.build(), args.acks)
            sent += len(builder)

        unkeyed_partition = next(round_robin)
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key: bytes | None = None
            value = line
            if args.key_separator is not None:
                sep = args.key_separator.encode()
                if sep not in line:
                    raise ClientError(f"line without key separator {args.key_separator!r}")
                key, value = line.split(sep, 1)
            if args.partition is not None:
                partition = args.partition
            elif key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = unkeyed_partition
            builder = pending.setdefault(partition, BatchBuilder(compression=codec))
            builder.append(key, value, int(time.time() * 1000), headers)
            if len(builder) >= args.batch_size:
                await flush(partition)
                if key is None and args.partition is None:
                    unkeyed_partition = next(round_robin)
        for partition in list(pending):
            await flush(partition)
        print(f"Sent {plural(sent, 'record')} to {args.topic}.", file=sys.stderr)
        return 0

    return run_with_admin(args, body)


def _format(args: argparse.Namespace, partition: int, offset: int,
            headers: list[tuple[str, bytes | None]], key: bytes | None,
            value: bytes | None) -> bytes:
    parts: list[bytes] = []
    if args.print_offset:
        parts.append(f"{partition}:{offset}".encode())
    if args.print_headers:
        parts.append(b",".join(k.encode() + b"=" + (v or b"") for k, v in headers)
                     or b"NO_HEADERS")
    if args.print_key:
        parts.append(key if key is not None else b"null")
    parts.append(value if value is not None else b"null")
    separator: bytes = args.key_separator.encode()
    return separator.join(parts) + b"\n"


class _StopSignals:
    """SIGINT and SIGTERM while consuming. Once :attr:`deferred` is set (the consume loop
    runs) a signal is only noted in :attr:`signum`, which the loop checks between fetches
    (or polls), so no record is printed uncounted; before that it raises
    KeyboardInterrupt, as Python's default SIGINT handler would. A signal whose
    disposition was SIG_IGN at start is left ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferred = False
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, _frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if not self.deferred:
            raise KeyboardInterrupt

    def __enter__(self) -> _StopSignals:
        for sig in self.SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def exit_status(self) -> int:
        """0, or 128 + the signal's number when a signal ended the loop (a shell's $?)."""
        return 0 if self.signum is None else 128 + self.signum


def _summary(printed: int) -> None:
    # Kafka's console consumer's words, "messages" whatever the count (scripts parse it)
    print(f"Processed a total of {printed} messages", file=sys.stderr)


def _consume(args: argparse.Namespace) -> int:
    if args.group is not None:
        if args.partition is not None or args.offset is not None:
            raise UsageError("odradek: --group takes no --partition or --offset: "
                             "the group assigns partitions and keeps the offsets")
        return _consume_group(args)
    if args.offset is not None and args.offset not in ("earliest", "latest") and (
        args.partition is None
    ):
        raise UsageError("odradek: --offset N needs --partition")
    return _consume_partitions(args)


def _print_records(args: argparse.Namespace, out: Any, partition: int,
                   fetched: FetchedPartition, position: int, room: int | None
                   ) -> tuple[int, int]:
    """Print the fetched records of ``partition`` from offset ``position`` on, at most
    ``room`` of them (None: all); (records printed, the offset to read next). Control
    batches (transaction markers) are never records; under read_committed the answer's
    aborted transactions are left out too (per batch, as Kafka's consumer)."""
    from odradek.records.batch import iter_batches, iter_records
    from odradek.records.columnar import AbortedFilter

    printed = 0
    records = fetched.records
    skipper = AbortedFilter(fetched.aborted_transactions)
    for header in iter_batches(records):
        batch = memoryview(records)[header.position : header.position + header.size]
        if skipper.skip(header, batch):
            position = max(position, header.next_offset)
            continue
        for record in iter_records(batch):
            if record.offset < position:
                continue
            if room is not None and printed >= room:
                return printed, position
            out.write(_format(args, partition, record.offset,
                              [(h.key, h.value) for h in record.headers],
                              record.key, record.value))
            printed += 1
            position = record.offset + 1
        position = max(position, header.next_offset)
    return printed, position


def _room(args: argparse.Namespace, printed: int) -> int | None:
    return None if args.max_messages is None else args.max_messages - printed


def _check_topic(topics: list[Any], topic: str) -> list[int]:
    """The partitions of ``topic`` from its Metadata (ClientError when it has none)."""
    from odradek.client.connection import ClientError

    if not topics or topics[0].error != "none":
        error = topics[0].error.upper() if topics else "no metadata"
        raise ClientError(f"topic {topic}: {error}")
    return [p.partition for p in topics[0].partitions]


def _consume_partitions(args: argparse.Namespace) -> int:
    # ListOffsets' timestamps, from the storage layer where the command runs: every
    # odradek command builds this parser (tests/cli/test_main.py)
    import asyncio

    from odradek.client.connection import ClientError
    from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

    stop = _StopSignals()

    async def body(admin: Admin) -> int:
        partitions = _check_topic(await admin.metadata([args.topic]), args.topic)
        if args.partition is not None:
            if args.partition not in partitions:
                raise ClientError(f"topic {args.topic} has no partition {args.partition}")
            partitions = [args.partition]
        offsets: dict[int, int] = {}
        for p in partitions:
            if args.offset not in (None, "earliest", "latest"):
                offsets[p] = int(args.offset)
            else:
                ts = EARLIEST_TIMESTAMP if args.from_beginning or args.offset == "earliest" \
                    else LATEST_TIMESTAMP
                offsets[p], _ = await admin.list_offset(args.topic, p, ts)
        printed = 0
        last_data = time.monotonic()
        out = sys.stdout.buffer
        stop.deferred = True
        try:
            while stop.signum is None and (
                args.max_messages is None or printed < args.max_messages
            ):
                wait = 500 if args.timeout_ms is None else min(500, args.timeout_ms)
                result = await admin.fetch_partitions(
                    args.topic, offsets, max_wait_ms=wait,
                    isolation_level=_ISOLATION_LEVELS[args.isolation_level])
                got = False
                for p, fetched in sorted(result.items()):
                    code = fetched.error_code
                    if code == OFFSET_OUT_OF_RANGE:
                        offsets[p], _ = await admin.list_offset(args.topic, p, EARLIEST_TIMESTAMP)
                        continue
                    if code:
                        raise ClientError(f"fetch from partition {p} failed with error {code}")
                    count, offsets[p] = _print_records(args, out, p, fetched, offsets[p],
                                                       _room(args, printed))
                    printed += count
                    got = got or count > 0
                out.flush()
                if got:
                    last_data = time.monotonic()
                elif args.timeout_ms is not None and (
                    time.monotonic() - last_data
                ) * 1000 >= args.timeout_ms:
                    break
                await asyncio.sleep(0)
        finally:
            _summary(printed)
        return stop.exit_status()

    with stop:
        status = run_with_admin(args, body)
    return status if stop.signum is None else stop.exit_status()


class _Stopped(Exception):
    """A stop signal arrived while waiting for the group."""


async def _unless_stopped(stop: _StopSignals, coro: Awaitable[T]) -> T:
    """``await coro``, given up (cancelled) when a stop signal arrives meanwhile: joining
    a group waits for the others, and Ctrl-C must not wait with it."""
    import asyncio

    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.wait({task}, timeout=0.1)
        if stop.signum is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise _Stopped
    return task.result()


def _consume_group(args: argparse.Namespace) -> int:
    import asyncio

    from odradek.client.connection import ClientError
    from odradek.client.consumer import GroupMember
    from odradek.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

    stop = _StopSignals()
    reset = EARLIEST_TIMESTAMP if args.from_beginning else LATEST_TIMESTAMP

    async def body(admin: ClusterAdmin) -> int:
        _check_topic(await admin.metadata([args.topic]), args.topic)
        member = GroupMember(admin, args.group, [args.topic])
        printed = 0
        positions: dict[int, int] = {}
        committed: dict[int, int] = {}
        out = sys.stdout.buffer

        async def commit() -> None:
            changed = {(args.topic, p): o for p, o in positions.items()
                       if committed.get(p) != o}
            if changed:
                await member.commit(changed)
                committed.update({p: o for (_, p), o in changed.items()})

        stop.deferred = True
        last_data = last_commit = time.monotonic()
        try:
            while stop.signum is None and (
                args.max_messages is None or printed < args.max_messages
            ):
                if member.needs_rejoin:
                    if positions:  # what was printed stays committed across the rebalance
                        with contextlib.suppress(ClientError):
                            await commit()
                    assignment = await _unless_stopped(stop, member.join())
                    stored = await member.committed()
                    positions = {}
                    for p in assignment.get(args.topic, ()):
                        if (args.topic, p) in stored:
                            positions[p] = stored[(args.topic, p)]
                        else:
                            positions[p], _ = await admin.list_offset(args.topic, p, reset)
                    committed = {p: o for (_, p), o in stored.items()}
                    last_data = time.monotonic()  # --timeout-ms counts from the join
                    continue
                got = False
                if not positions:  # no partition for this member: heartbeats go on
                    await asyncio.sleep(0.1)
                else:
                    wait = 500 if args.timeout_ms is None else min(500, args.timeout_ms)
                    result = await admin.fetch_partitions(
                        args.topic, positions, max_wait_ms=wait,
                        isolation_level=_ISOLATION_LEVELS[args.isolation_level])
                    for p, fetched in sorted(result.items()):
                        code = fetched.error_code
                        if p not in positions:
                            continue
                        if code == OFFSET_OUT_OF_RANGE:  # auto.offset.reset
                            positions[p], _ = await admin.list_offset(args.topic, p, reset)
                            continue
                        if code:
                            raise ClientError(f"fetch from partition {p} failed with error "
                                              f"{code}")
                        count, positions[p] = _print_records(
                            args, out, p, fetched, positions[p], _room(args, printed))
                        printed += count
                        got = got or count > 0
                    out.flush()
                now = time.monotonic()
                if got:
                    last_data = now
                elif args.timeout_ms is not None and (now - last_data) * 1000 >= args.timeout_ms:
                    break
                if now - last_commit >= AUTO_COMMIT_INTERVAL_S:
                    await commit()
                    last_commit = now
        except _Stopped:
            pass
        finally:
            try:
                if not member.needs_rejoin:
                    await commit()  # what was printed, as enable.auto.commit does on close
            finally:
                await member.leave()
                _summary(printed)
        return stop.exit_status()

    with stop:
        status = run_with_admin(args, body)
    return status if stop.signum is None else stop.exit_status()
