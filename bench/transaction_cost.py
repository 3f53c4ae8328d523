"""What one transaction costs: requests per API, their broker time, the client's split, and
the broker's CPU.

How it works: one ``odradek serve`` with ``metrics.listener`` on (this checkout's code, or
``--base REF``'s, a worktree under ``.bench-tmp`` as bench/peers.py's ``odradek@REF``)
and a 4-partition topic. A confluent-kafka transactional producer with bench/
transactions.py's settings runs ``--txns`` transactions of ``--per-txn`` records of
``--size`` bytes (after 20 untimed ones), timing for each the ``produce()`` loop and
``commit_transaction()`` apart. The broker's Prometheus page is read before and after:
the requests answered per API (Kafka's RequestMetrics RequestsPerSec) divided by the
transactions, and their mean TotalTimeMs; the broker's CPU (utime and stime from /proc)
per transaction. Comparing two trees, run it once for each, in turn, several times: the
counts and the CPU move less than the times on a shared machine.

A request per transaction above 1 for AddPartitionsToTxn are its retries (librdkafka
retries CONCURRENT_TRANSACTIONS after 20 ms); WriteTxnMarkers appears only when the
coordinator sends its markers over the network (to another broker).

    .venv/bin/python bench/transaction_cost.py
    .venv/bin/python bench/transaction_cost.py --base main --txns 3000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import confluent_kafka as ck
from _tools.broker import CLK_TCK, free_port, odradek_serve
from confluent_kafka.admin import AdminClient, NewTopic
from peers import odradek_at
from transactions import PRODUCER

_REQUESTS = re.compile(
    r'^kafka_network_requestmetrics_requests_total\{request="(\w+)",version="\d+"\} (\S+)$')
_TIME = re.compile(
    r'^kafka_network_requestmetrics_totaltimems_(sum|count)\{request="(\w+)"\} (\S+)$')


class Page:
    """The request counts and total times of one read of the broker's /metrics."""

    def __init__(self, url: str) -> None:
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        self.requests: dict[str, float] = {}
        self.time_sum: dict[str, float] = {}
        self.time_count: dict[str, float] = {}
        for line in text.splitlines():
            if (m := _REQUESTS.match(line)) is not None:
                self.requests[m[1]] = self.requests.get(m[1], 0.0) + float(m[2])
            elif (m := _TIME.match(line)) is not None:
                (self.time_sum if m[1] == "sum" else self.time_count)[m[2]] = float(m[3])


def _cpu(pid: int) -> tuple[float, float]:
    """utime and stime of ``pid`` in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def _transactions(producer: ck.Producer, topic: str, count: int, per_txn: int,
                  value: bytes) -> tuple[list[float], list[float]]:
    """Seconds of each transaction's produce loop and of its commit."""
    loops: list[float] = []
    commits: list[float] = []
    for _ in range(count):
        started = time.monotonic()
        producer.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.01)
        produced = time.monotonic()
        producer.commit_transaction(60)
        loops.append(produced - started)
        commits.append(time.monotonic() - produced)
    return loops, commits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--txns", type=int, default=2_000, help="transactions measured")
    parser.add_argument("--per-txn", type=int, default=1_000, help="records a transaction")
    parser.add_argument("--size", type=int, default=100, help="bytes a record")
    parser.add_argument("--base", help="run this commit's broker instead of the checkout's")
    args = parser.parse_args()
    port, metrics_port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    source = odradek_at(args.base).source if args.base else None
    value = b"x" * args.size
    with odradek_serve([f"listeners=PLAINTEXT://127.0.0.1:{port}",
                        f"metrics.listener=http://127.0.0.1:{metrics_port}"], port,
                       "txn-cost-", source=source) as proc:
        topic = f"txn-cost-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
        producer = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER,
                                "transactional.id": f"txn-cost-{uuid.uuid4().hex[:8]}"})
        producer.list_topics(topic, timeout=30)
        producer.init_transactions(30)
        _transactions(producer, topic, 20, args.per_txn, value)  # warm-up
        before, cpu_before = Page(url), _cpu(proc.pid)
        started = time.monotonic()
        loops, commits = _transactions(producer, topic, args.txns, args.per_txn, value)
        wall = time.monotonic() - started
        after, cpu_after = Page(url), _cpu(proc.pid)
    n = args.txns
    user, system = ((a - b) / n * 1e3 for a, b in zip(cpu_after, cpu_before, strict=True))
    commits.sort()
    print(f"Command: `.venv/bin/python bench/transaction_cost.py {' '.join(sys.argv[1:])}`"
          f" (load average {os.getloadavg()[0]:.1f})")
    print()
    print(f"{n:,} transactions of {args.per_txn:,} records of {args.size} B: "
          f"{n * args.per_txn / wall:,.0f} records/s, {wall / n * 1e3:.3f} ms a transaction; "
          f"produce loop {statistics.median(loops) * 1e3:.3f} ms, commit_transaction "
          f"{commits[n // 2] * 1e3:.3f} ms (p90 {commits[n * 9 // 10] * 1e3:.3f}, p99 "
          f"{commits[n * 99 // 100] * 1e3:.3f}, over 15 ms: "
          f"{sum(1 for c in commits if c > 0.015)}) as medians; broker CPU "
          f"{user + system:.3f} ms a transaction (user {user:.3f}, system {system:.3f})")
    print()
    print("| request | per transaction | mean TotalTimeMs |")
    print("|---|---:|---:|")
    for api in sorted(after.requests):
        count = after.requests[api] - before.requests.get(api, 0.0)
        if count <= 0:
            continue
        timed = after.time_count.get(api, 0.0) - before.time_count.get(api, 0.0)
        total = after.time_sum.get(api, 0.0) - before.time_sum.get(api, 0.0)
        mean = f"{total / timed:.3f}" if timed else "—"
        print(f"| {api} | {count / n:.3f} | {mean} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
