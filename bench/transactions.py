"""Transactions against the same load without them: produce and read_committed fetch.

How it works: one ``odradek serve`` (its own data directory, a free port). The bench
produces ``--records`` records of ``--size`` bytes with confluent-kafka twice per round, to
fresh topics of ``--partitions`` partitions: once with an idempotent producer (acks=all,
the settings a transactional producer implies) and once with a transactional producer
committing every ``--per-txn`` records (``begin_transaction``, produce,
``commit_transaction``: AddPartitionsToTxn, EndTxn and the markers are in the time,
InitProducerId is not). The order alternates between rounds. Then it reads one
transactionally written topic from the start to its end with a confluent-kafka consumer, once with
``isolation.level=read_uncommitted`` and once with ``read_committed`` (alternating again),
taking the records with ``consume(num_messages=...)``. Each figure is the median of the
rounds; the ratios (transactional / plain, read_committed / read_uncommitted) are the
median of the per-round ratios, of records per second and of the broker's CPU time per
record (utime + stime from /proc: on a shared machine it moves less than the wall
clock). The clock starts once a producer is connected and knows the topic's
leaders (and, transactional, has its producer id). Each round reads the topic once before
it is timed (page cache, connections).

    .venv/bin/python bench/transactions.py
    .venv/bin/python bench/transactions.py --records 500000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

import confluent_kafka as ck
from _tools.broker import cpu_seconds, free_port, odradek_serve
from confluent_kafka.admin import AdminClient, NewTopic

PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.size": 256 * 1024, "queue.buffering.max.messages": 1_000_000}


def _row(case: str, rates: list[float], cpu: list[float], base: tuple[list[float],
         list[float]] | None) -> str:
    """A table row: medians of the rates and of the broker's CPU µs per record, and (with
    ``base``, the same case's baseline) the median of the per-round ratios."""
    med = statistics.median
    rate_ratio = cpu_ratio = "—"
    if base is not None:
        rate_ratio = f"{med(r / b for r, b in zip(rates, base[0], strict=True)):.2f}x"
        if all(b > 0 for b in base[1]):  # a short run can round the base's CPU to 0 ticks
            cpu_ratio = f"{med(c / b for c, b in zip(cpu, base[1], strict=True)):.2f}x"
    return (f"| {case} | {med(rates):,.0f} | {rate_ratio} | {med(cpu):.2f} | {cpu_ratio} | "
            f"{', '.join(f'{r:,.0f}' for r in rates)} |")


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce(bootstrap: str, topic: str, records: int, value: bytes,
            per_txn: int | None) -> float:
    """Seconds to produce ``records`` records (and have them all acknowledged)."""
    config = {"bootstrap.servers": bootstrap, **PRODUCER}
    if per_txn is not None:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = ck.Producer(config)
    producer.list_topics(topic, timeout=30)  # connected, the topic's leaders known
    if per_txn is not None:
        producer.init_transactions(30)
    step = per_txn or 10_000
    started = time.monotonic()
    for first in range(0, records, step):
        if per_txn is not None:
            producer.begin_transaction()
        for _ in range(min(step, records - first)):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.01)
        if per_txn is not None:
            producer.commit_transaction(60)
        else:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not acknowledged"
    return time.monotonic() - started


def consume(bootstrap: str, topic: str, partitions: int, records: int,
            isolation: str) -> float:
    """Seconds to read ``records`` records of ``topic`` from the start."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                            "isolation.level": isolation, "enable.auto.commit": False,
                            "fetch.max.bytes": 8 * 1024 * 1024})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.monotonic()
    deadline = started + 300
    try:
        while seen < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"{isolation}: {seen} of {records} records after 300 s")
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is None:
                    seen += 1
        return time.monotonic() - started
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--per-txn", type=int, default=1_000,
                        help="records per transaction")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are shown)")
    args = parser.parse_args()
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    value = b"x" * args.size
    with odradek_serve([f"listeners=PLAINTEXT://127.0.0.1:{port}"], port,
                       "txn-bench-") as proc:
        # warm-up: the broker's first transaction creates __transaction_state
        produce(bootstrap, _topic(bootstrap, args.partitions), 10_000, value, args.per_txn)
        plain: list[float] = []
        txn: list[float] = []
        uncommitted: list[float] = []
        committed: list[float] = []
        # the broker's CPU µs per record of each run, same lists
        cpu: dict[str, list[float]] = {"plain": [], "txn": [], "ru": [], "rc": []}
        for n in range(args.rounds):
            order = [None, args.per_txn] if n % 2 == 0 else [args.per_txn, None]
            written = ""
            topics = [_topic(bootstrap, args.partitions) for _ in order]
            for topic, per_txn in zip(topics, order, strict=True):
                before = cpu_seconds(proc.pid)
                seconds = produce(bootstrap, topic, args.records, value, per_txn)
                cpu["plain" if per_txn is None else "txn"].append(
                    (cpu_seconds(proc.pid) - before) / args.records * 1e6)
                (plain if per_txn is None else txn).append(args.records / seconds)
                if per_txn is not None:
                    written = topic
            # warm-up: the topic's segments into the page cache, the consumer's start
            consume(bootstrap, written, args.partitions, args.records, "read_uncommitted")
            for isolation in (["read_uncommitted", "read_committed"] if n % 2 == 0
                              else ["read_committed", "read_uncommitted"]):
                before = cpu_seconds(proc.pid)
                seconds = consume(bootstrap, written, args.partitions, args.records, isolation)
                cpu["rc" if isolation == "read_committed" else "ru"].append(
                    (cpu_seconds(proc.pid) - before) / args.records * 1e6)
                (committed if isolation == "read_committed" else uncommitted).append(
                    args.records / seconds)
            print(f"  round {n + 1}: produce plain {plain[-1]:,.0f}/s, transactional "
                  f"{txn[-1]:,.0f}/s; fetch read_uncommitted {uncommitted[-1]:,.0f}/s, "
                  f"read_committed {committed[-1]:,.0f}/s", file=sys.stderr, flush=True)
        print(f"Command: `.venv/bin/python bench/transactions.py {' '.join(sys.argv[1:])}`")
        print()
        print(f"{args.records:,} records of {args.size} B, {args.partitions} partitions, "
              f"{args.per_txn:,} records per transaction, {args.rounds} rounds; ratios are "
              "the median of the per-round ratios")
        print()
        print("| case | records/s | ratio | broker CPU µs a record | CPU ratio | each round |")
        print("|---|---:|---:|---:|---:|---|")
        print(_row("produce, idempotent", plain, cpu["plain"], None))
        print(_row("produce, transactional", txn, cpu["txn"], (plain, cpu["plain"])))
        print(_row("fetch, read_uncommitted", uncommitted, cpu["ru"], None))
        print(_row("fetch, read_committed", committed, cpu["rc"], (uncommitted, cpu["ru"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
