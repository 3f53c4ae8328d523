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
it is timed (page cache, connections). ``--base REF`` starts a second broker running that
commit's code (a worktree under ``.bench-tmp``, as bench/peers.py's ``odradek@REF``) and
runs every round on both, in alternating order, then prints each case of this checkout
against the same case of the base; ``--no-fetch`` leaves out the fetch cases. ``--mock``
adds the same produce runs against librdkafka's in-process mock cluster
(``test.mock.num.brokers``, a broker in C in the client's process): what the client's
own transaction protocol costs at this load with a broker of next to no cost.

    .venv/bin/python bench/transactions.py
    .venv/bin/python bench/transactions.py --records 2000000 --rounds 5 --base main
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
from _tools.broker import cpu_seconds, free_port, odradek_serve
from confluent_kafka.admin import AdminClient, NewTopic
from peers import odradek_at

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
        if cpu and all(b > 0 for b in base[1]):  # a short run can round it to 0 ticks
            cpu_ratio = f"{med(c / b for c, b in zip(cpu, base[1], strict=True)):.2f}x"
    cpu_median = f"{med(cpu):.2f}" if cpu else "—"  # none for the mock cluster
    return (f"| {case} | {med(rates):,.0f} | {rate_ratio} | {cpu_median} | {cpu_ratio} | "
            f"{', '.join(f'{r:,.0f}' for r in rates)} |")


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce_one(producer: ck.Producer, topic: str, value: bytes) -> None:
    """One record into the producer's queue, serving delivery reports while it is full."""
    while True:
        try:
            producer.produce(topic, value)
            return
        except BufferError:
            producer.poll(0.01)


def produce(bootstrap: str, topic: str, records: int, value: bytes,
            per_txn: int | None) -> float:
    """Seconds to produce ``records`` records (and have them all acknowledged); with an
    empty ``bootstrap``, to librdkafka's own mock cluster."""
    config: dict[str, object] = {**PRODUCER}
    if bootstrap:
        config["bootstrap.servers"] = bootstrap
    else:  # librdkafka's in-process mock cluster (a topic of 4 partitions on first use)
        config["test.mock.num.brokers"] = 1
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
            produce_one(producer, topic, value)
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


class Tree:
    """One broker under test (this checkout's code, or a base commit's) and its figures:
    records per second and the broker's CPU µs per record, per case, one entry a round."""

    def __init__(self, name: str, source: Path | None, mock: bool = False) -> None:
        self.name = name
        self.source = source
        self.mock = mock  # librdkafka's mock cluster: no broker process, no fetch
        self.port = free_port()
        self.bootstrap = "" if mock else f"127.0.0.1:{self.port}"
        self.rates: dict[str, list[float]] = {"plain": [], "txn": [], "ru": [], "rc": []}
        self.cpu: dict[str, list[float]] = {"plain": [], "txn": [], "ru": [], "rc": []}


def _delete(bootstrap: str, topics: list[str]) -> None:
    """The round's topics deleted, so that every round starts with the same data on disk
    (rounds kept slowing as the runs' gigabytes gathered in the log dir)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result(60)


def _round(tree: Tree, pid: int, n: int, args: argparse.Namespace, value: bytes) -> None:
    if not tree.mock:
        topics: list[str] = []
        try:
            _round_on(tree, pid, n, args, value, topics)
        finally:
            _delete(tree.bootstrap, topics)
    else:
        _round_on(tree, pid, n, args, value, [])


def _round_on(tree: Tree, pid: int, n: int, args: argparse.Namespace, value: bytes,
              made: list[str]) -> None:
    order = [None, args.per_txn] if n % 2 == 0 else [args.per_txn, None]
    written = ""
    topics = [f"txn-bench-{uuid.uuid4().hex[:8]}" if tree.mock
              else _topic(tree.bootstrap, args.partitions) for _ in order]
    made.extend(topics)
    for topic, per_txn in zip(topics, order, strict=True):
        case = "plain" if per_txn is None else "txn"
        before = 0.0 if tree.mock else cpu_seconds(pid)
        seconds = produce(tree.bootstrap, topic, args.records, value, per_txn)
        if not tree.mock:
            tree.cpu[case].append((cpu_seconds(pid) - before) / args.records * 1e6)
        tree.rates[case].append(args.records / seconds)
        if per_txn is not None:
            written = topic
    if args.no_fetch or tree.mock:
        return
    # warm-up: the topic's segments into the page cache, the consumer's start
    consume(tree.bootstrap, written, args.partitions, args.records, "read_uncommitted")
    for isolation in (["read_uncommitted", "read_committed"] if n % 2 == 0
                      else ["read_committed", "read_uncommitted"]):
        case = "rc" if isolation == "read_committed" else "ru"
        before = cpu_seconds(pid)
        seconds = consume(tree.bootstrap, written, args.partitions, args.records, isolation)
        tree.cpu[case].append((cpu_seconds(pid) - before) / args.records * 1e6)
        tree.rates[case].append(args.records / seconds)


def _table(tree: Tree, fetch: bool) -> None:
    fetch = fetch and not tree.mock
    rates, cpu = tree.rates, tree.cpu
    print("| case | records/s | ratio | broker CPU µs a record | CPU ratio | each round |")
    print("|---|---:|---:|---:|---:|---|")
    print(_row("produce, idempotent", rates["plain"], cpu["plain"], None))
    print(_row("produce, transactional", rates["txn"], cpu["txn"],
               (rates["plain"], cpu["plain"])))
    if fetch:
        print(_row("fetch, read_uncommitted", rates["ru"], cpu["ru"], None))
        print(_row("fetch, read_committed", rates["rc"], cpu["rc"],
                   (rates["ru"], cpu["ru"])))


def _against_base(head: Tree, base: Tree, fetch: bool) -> None:
    """Each case of HEAD against the same case of the base, median of per-round ratios."""
    med = statistics.median
    print(f"| case | records/s {head.name} / {base.name} | broker CPU a record "
          f"{head.name} / {base.name} |")
    print("|---|---:|---:|")
    names = {"plain": "produce, idempotent", "txn": "produce, transactional",
             "ru": "fetch, read_uncommitted", "rc": "fetch, read_committed"}
    for case, name in names.items():
        if case in ("ru", "rc") and not fetch:
            continue
        rate = med(h / b for h, b in zip(head.rates[case], base.rates[case], strict=True))
        pairs = [(h, b) for h, b in zip(head.cpu[case], base.cpu[case], strict=True) if b > 0]
        cpu = f"{med(h / b for h, b in pairs):.2f}x" if pairs else "—"
        print(f"| {name} | {rate:.2f}x | {cpu} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--per-txn", type=int, default=1_000,
                        help="records per transaction")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are shown)")
    parser.add_argument("--base", help="also run a base commit's broker, same rounds")
    parser.add_argument("--no-fetch", action="store_true", help="produce cases only")
    parser.add_argument("--mock", action="store_true",
                        help="also produce to librdkafka's in-process mock cluster, same "
                             "rounds: the client's own cost of the same transactions")
    args = parser.parse_args()
    value = b"x" * args.size
    trees = [Tree("HEAD", None)]
    if args.base:
        trees.append(Tree(args.base, odradek_at(args.base).source))
    if args.mock:
        trees.append(Tree("librdkafka mock", None, mock=True))
    with contextlib.ExitStack() as stack:
        pids = {}
        for tree in trees:
            if tree.mock:
                continue
            proc = stack.enter_context(odradek_serve(
                [f"listeners=PLAINTEXT://127.0.0.1:{tree.port}"], tree.port, "txn-bench-",
                source=tree.source))
            pids[tree.name] = proc.pid
            # warm-up: the broker's first transaction creates __transaction_state
            produce(tree.bootstrap, _topic(tree.bootstrap, args.partitions), 10_000, value,
                    args.per_txn)
        for n in range(args.rounds):
            for tree in trees if n % 2 == 0 else trees[::-1]:
                _round(tree, pids.get(tree.name, 0), n, args, value)
                r = tree.rates
                fetched = "" if args.no_fetch or tree.mock else (
                    f"; fetch read_uncommitted {r['ru'][-1]:,.0f}/s, "
                    f"read_committed {r['rc'][-1]:,.0f}/s")
                print(f"  round {n + 1} {tree.name}: produce plain {r['plain'][-1]:,.0f}/s, "
                      f"transactional {r['txn'][-1]:,.0f}/s{fetched}", file=sys.stderr,
                      flush=True)
    print(f"Command: `.venv/bin/python bench/transactions.py {' '.join(sys.argv[1:])}`")
    print()
    print(f"{args.records:,} records of {args.size} B, {args.partitions} partitions, "
          f"{args.per_txn:,} records per transaction, {args.rounds} rounds; ratios are "
          "the median of the per-round ratios")
    for tree in trees:
        print()
        if len(trees) > 1:
            print(f"{tree.name}:")
            print()
        _table(tree, not args.no_fetch)
    if args.base:
        print()
        _against_base(trees[0], trees[1], not args.no_fetch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
