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
coordinator sends its markers over the network (to another broker). The requests' mean
TotalTimeMs times their count is the broker's share of a transaction's wall time (the
client waits for each of them in turn: see bench/README.md, "Transactions"); the rest of
``commit_transaction`` is the client's.

``--instructions`` counts instead of timing: the broker runs under valgrind's callgrind
(bench/metrics_instructions.py has the method and its caveats), the counters are zeroed
after the warm-up, ``--txns`` transactions run, the counters are dumped; then the same
records go through an idempotent producer (acks=all, the same settings) between a second
zeroing and dump. Instructions a transaction, a thousand idempotent records' worth
(``--per-txn`` of them), and the difference: what a transaction adds on the broker,
repeatable to about 1 % on a shared machine where its CPU time is not. Callgrind runs
the broker about 50 times slower: use a few hundred transactions.

    .venv/bin/python bench/transaction_cost.py
    .venv/bin/python bench/transaction_cost.py --base main --txns 3000
    .venv/bin/python bench/transaction_cost.py --size 1000 --instructions --txns 200
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import confluent_kafka as ck
from _tools.broker import CLK_TCK, free_port, odradek_serve
from confluent_kafka.admin import AdminClient, NewTopic
from peers import odradek_at
from transactions import PRODUCER, produce_one

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
            produce_one(producer, topic, value)
        produced = time.monotonic()
        producer.commit_transaction(60)
        loops.append(produced - started)
        commits.append(time.monotonic() - produced)
    return loops, commits


def _idempotent(producer: ck.Producer, topic: str, records: int, value: bytes) -> None:
    """``records`` records through an idempotent producer, all acknowledged."""
    for n in range(records):
        produce_one(producer, topic, value)
        if n % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(600)
    assert remaining == 0, f"{remaining} records not acknowledged"


_SUMMARY = re.compile(rb"^summary: (\d+)$", re.MULTILINE)
# The event-loop watchdog off: under callgrind a turn of the loop passes its threshold
# (bench/hot_path_instructions.py); a tree without the key starts all the same.
_QUIET = ("event.loop.stall.threshold.ms=0",)


class _Callgrind:
    """Zero and dump the counters of a broker running under callgrind."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out

    def _control(self, *command: str) -> None:
        subprocess.run(["callgrind_control", *command, str(self.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def zero(self) -> None:
        self._control("-i", "on")
        self._control("-z")

    def dump(self) -> int:
        """The instructions counted since the last zeroing."""
        before = set(self.out.glob("callgrind.*"))
        self._control("-d")
        new = sorted(set(self.out.glob("callgrind.*")) - before)
        if len(new) != 1:
            raise SystemExit(f"expected one new callgrind dump in {self.out}, found {new}")
        found = _SUMMARY.search(new[0].read_bytes())
        if found is None:
            raise SystemExit(f"no summary line in {new[0]}")
        return int(found.group(1))


def _instructions(args: argparse.Namespace, source: Path | None) -> int:
    """The ``--instructions`` run (module docstring)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt-get install valgrind")
    os.environ["PYTHONHASHSEED"] = "0"  # the same dict layouts from run to run
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    value = b"x" * args.size
    with tempfile.TemporaryDirectory(prefix="txn-callgrind-") as scratch:
        out = Path(scratch)
        wrapper = ("valgrind", "--quiet", "--tool=callgrind", "--dump-instr=no",
                   "--instr-atstart=no", f"--callgrind-out-file={out}/callgrind.%p")
        with odradek_serve([f"listeners=PLAINTEXT://127.0.0.1:{port}", *_QUIET], port,
                           "txn-cost-", source=source, wrapper=wrapper,
                           start_timeout_s=600) as proc:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topics = [f"txn-cost-{uuid.uuid4().hex[:8]}" for _ in range(2)]
            for topic in topics:
                admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(120)
            producer = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER,
                                    "transactional.id": f"txn-cost-{uuid.uuid4().hex[:8]}"})
            producer.list_topics(topics[0], timeout=120)
            producer.init_transactions(120)
            idempotent = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER})
            idempotent.list_topics(topics[1], timeout=120)
            _transactions(producer, topics[0], 20, args.per_txn, value)  # warm-up
            _idempotent(idempotent, topics[1], 20 * args.per_txn, value)
            counter = _Callgrind(proc.pid, out)
            counter.zero()
            _transactions(producer, topics[0], args.txns, args.per_txn, value)
            txn = counter.dump() / args.txns
            counter.zero()
            _idempotent(idempotent, topics[1], args.txns * args.per_txn, value)
            plain = counter.dump() / args.txns
    print(f"Command: `.venv/bin/python bench/transaction_cost.py {' '.join(sys.argv[1:])}`")
    print()
    print(f"{args.txns:,} transactions of {args.per_txn:,} records of {args.size} B, then "
          "the same records idempotent; broker instructions (callgrind):")
    print()
    print("| a transaction | its records, idempotent | what the transaction adds |")
    print("|---:|---:|---:|")
    print(f"| {txn:,.0f} | {plain:,.0f} | {txn - plain:,.0f} |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--txns", type=int, default=2_000, help="transactions measured")
    parser.add_argument("--per-txn", type=int, default=1_000, help="records a transaction")
    parser.add_argument("--size", type=int, default=100, help="bytes a record")
    parser.add_argument("--base", help="run this commit's broker instead of the checkout's")
    parser.add_argument("--instructions", action="store_true",
                        help="count the broker's instructions (callgrind) instead of timing")
    args = parser.parse_args()
    source = odradek_at(args.base).source if args.base else None
    if args.instructions:
        return _instructions(args, source)
    port, metrics_port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    url = f"http://127.0.0.1:{metrics_port}/metrics"
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
    broker_ms = 0.0
    for api in sorted(after.requests):
        count = after.requests[api] - before.requests.get(api, 0.0)
        if count <= 0:
            continue
        timed = after.time_count.get(api, 0.0) - before.time_count.get(api, 0.0)
        total = after.time_sum.get(api, 0.0) - before.time_sum.get(api, 0.0)
        mean = f"{total / timed:.3f}" if timed else "—"
        print(f"| {api} | {count / n:.3f} | {mean} |")
        broker_ms += total / n
    print()
    print(f"The broker's answer time a transaction (its requests' TotalTimeMs): "
          f"{broker_ms:.3f} ms of the {wall / n * 1e3:.3f} ms; the mean commit_transaction "
          f"{statistics.mean(commits) * 1e3:.3f} ms, produce loop "
          f"{statistics.mean(loops) * 1e3:.3f} ms.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
