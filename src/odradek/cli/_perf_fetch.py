"""The fast read path of ``odradek perf consume``: librdkafka for the group, native batches
for the records.

How it works: through confluent-kafka every record becomes a Python ``Message`` with its
own ``bytes``, which caps a consumer far below what librdkafka itself reads
(bench/README.md, "Perf tools", has the figures). So the group stays with librdkafka (join,
assignment, rebalance time, commits: the consumer subscribes as Kafka's
ConsumerPerformance does) while its partitions are paused, and the records of the assigned
partitions are read with the project's own client: Fetch (v12) to each partition's leader
(followed as it moves, client/routing.py)
from the committed offset (or ``auto.offset.reset``), the returned batches validated
(CRC32C) and decoded in C by :mod:`odradek.records.columnar`, which counts records and
value bytes without a Python object per record. Polling the librdkafka consumer between
fetches serves its callbacks: a rebalance changes the set of partitions read. At the end
the positions are committed for the group, so ``odradek groups describe`` shows its lag.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from odradek.cli._common import UsageError
from odradek.cli._perf_report import (
    CONSUMER_HEADER,
    DETAILED_HEADER,
    LIBRDKAFKA_LOGGER,
    ProgressBar,
    consumer_line,
    print_detailed,
)
from odradek.client.connection import ClientError
from odradek.client.routing import ClusterAdmin
from odradek.client.security import client_security
from odradek.records.batch import InvalidRecordError
from odradek.records.columnar import add_batches, new_builder

EARLIEST = -2
LATEST = -1
#: wait of one Fetch when nothing is there yet
FETCH_WAIT_MS = 100
NO_LIMIT = 2**63 - 1


def _value_bytes(offsets: Any) -> int:
    """Total value bytes of a finished column: the last int32 of its Arrow offsets."""
    raw = memoryview(offsets).cast("B")
    return int.from_bytes(raw[-4:], "little", signed=True) if len(raw) >= 4 else 0


class _Reader:
    """Fetches for the assigned partitions of one topic from their leaders
    (:class:`ClusterAdmin`: one connection per broker, leaders followed as they move)."""

    def __init__(self, bootstrap: str, topic: str, config: dict[str, Any]) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.max_bytes = int(config.get("fetch.max.bytes", 64 * 1024 * 1024))
        self.partition_max_bytes = int(config.get("max.partition.fetch.bytes",
                                                  8 * 1024 * 1024))
        self.reset = EARLIEST if config.get("auto.offset.reset") == "earliest" else LATEST
        self.security = client_security(config)  # TLS and SASL, as librdkafka's settings
        self.admin: ClusterAdmin | None = None
        self.builder = new_builder(False)

    async def _admin(self) -> ClusterAdmin:
        if self.admin is None:
            self.admin = await ClusterAdmin.connect(self.bootstrap,
                                                    client_id="odradek-perf-consumer",
                                                    security=self.security)
        return self.admin

    async def locate(self, partitions: list[int]) -> None:
        admin = await self._admin()
        for p in partitions:
            await admin.leader_of(self.topic, p)

    async def start_offset(self, partition: int) -> int:
        offset, _ = await (await self._admin()).list_offset(self.topic, partition, self.reset)
        return offset

    async def fetch(self, positions: dict[int, int]) -> tuple[int, int, str]:
        """One Fetch per leader; advances ``positions``; (records, value bytes, error)."""
        wanted = dict(positions)
        out = await (await self._admin()).fetch(
            self.topic, wanted, max_wait_ms=FETCH_WAIT_MS, max_bytes=self.max_bytes,
            partition_max_bytes=self.partition_max_bytes)
        count = nbytes = 0
        for p, (code, _hw, records) in out.items():
            if code != 0:
                return count, nbytes, f"fetching {self.topic}-{p}: error code {code}"
            if not records:
                continue
            added = add_batches(self.builder, records, wanted[p], NO_LIMIT)
            if added.next_offset > positions[p]:
                positions[p] = added.next_offset
            cols = self.builder.finish()
            count += cols[0]
            nbytes += _value_bytes(cols[5][1])
        return count, nbytes, ""

    async def close(self) -> None:
        if self.admin is not None:
            await self.admin.close()
            self.admin = None


def consume_fast(args: argparse.Namespace, config: dict[str, Any], ck: Any) -> int:
    try:
        consumer = ck.Consumer({**config, "enable.auto.commit": "false",
                                "logger": LIBRDKAFKA_LOGGER})
    except ck.KafkaException as exc:
        raise UsageError(f"odradek: invalid consumer configuration: {exc}") from None
    assigned_at: list[float] = []
    changed: list[bool] = [False]

    def on_assign(_c: Any, partitions: list[Any]) -> None:
        if partitions and not assigned_at:
            assigned_at.append(time.time())
        changed[0] = True

    def on_revoke(_c: Any, _partitions: list[Any]) -> None:
        changed[0] = True

    reader = _Reader(args.bootstrap_server, args.topic, config)
    loop = asyncio.new_event_loop()
    bar = ProgressBar(args.messages, "records")
    start = time.time()
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    count = nbytes = 0
    positions: dict[int, int] = {}
    last_record = time.monotonic()
    timeout_s = args.timeout / 1000.0
    interval = args.reporting_interval / 1000.0
    if args.show_detailed_stats and not args.hide_header:
        print(DETAILED_HEADER, flush=True)
    win_t, win_count, win_bytes = time.time(), 0, 0
    error = ""
    try:
        while count < args.messages:
            consumer.poll(0)  # group callbacks; its partitions are paused
            if changed[0]:
                changed[0] = False
                error = _reassign(consumer, ck, loop, reader, positions)
                if error:
                    break
            now = time.monotonic()
            if not positions:
                if now - last_record > timeout_s:
                    error = f"no partition assigned within {args.timeout} ms"
                    break
                time.sleep(0.01)
                continue
            got, size, error = loop.run_until_complete(reader.fetch(positions))
            if error:
                break
            now = time.monotonic()
            if got:
                count += got
                nbytes += size
                last_record = now
            elif now - last_record > timeout_s:
                error = (f"no record for {args.timeout} ms: consumed {count} of "
                         f"{args.messages}")
                break
            if args.show_detailed_stats and time.time() - win_t >= interval:
                t = time.time()
                rebalance = (assigned_at[0] - start) if assigned_at else t - start
                print_detailed(t, win_t, count - win_count, nbytes - win_bytes, count, nbytes,
                                rebalance, args.date_format)
                win_t, win_count, win_bytes = t, count, nbytes
            bar.update(count, now)
    except KeyboardInterrupt:
        pass
    except (ClientError, OSError, TimeoutError, InvalidRecordError) as exc:
        error = str(exc) or type(exc).__name__
    end = time.time()
    try:
        if positions:
            consumer.commit(offsets=[ck.TopicPartition(args.topic, p, o)
                                     for p, o in positions.items()], asynchronous=False)
    except ck.KafkaException as exc:
        error = error or f"committing the positions: {exc}"
    finally:
        consumer.close()
        loop.run_until_complete(reader.close())
        loop.close()
    bar.clear()
    rebalance_s = (assigned_at[0] - start) if assigned_at else 0.0
    if not args.show_detailed_stats:
        if not args.hide_header:
            print(CONSUMER_HEADER)
        print(consumer_line(start, end, nbytes, count, rebalance_s, args.date_format),
              flush=True)
    if error:
        print(f"odradek: {error}", file=sys.stderr)
        return 1
    return 0


def _reassign(consumer: Any, ck: Any, loop: asyncio.AbstractEventLoop, reader: _Reader,
              positions: dict[int, int]) -> str:
    """Read the partitions the group assigns now, from their committed offsets."""
    assignment = consumer.assignment()
    if assignment:
        consumer.pause(assignment)
    mine = sorted(tp.partition for tp in assignment if tp.topic == reader.topic)
    for p in list(positions):
        if p not in mine:
            del positions[p]
    new = [p for p in mine if p not in positions]
    if not new:
        return ""
    committed = consumer.committed([ck.TopicPartition(reader.topic, p) for p in new],
                                   timeout=10)
    loop.run_until_complete(reader.locate(new))
    for tp in committed:
        if tp.error is not None:
            return f"committed offset of {reader.topic}-{tp.partition}: {tp.error}"
        positions[tp.partition] = tp.offset if tp.offset >= 0 else \
            loop.run_until_complete(reader.start_offset(tp.partition))
    return ""
