"""Transactional produce against the same load without transactions, with the Java client.

How it works: one ``odradek serve`` (its own data directory, a free port) and one JVM
running ``bench/_tools/TxnBench.java`` (kafka-clients 3.9.1, compiled at run time with
javac into ``bench/_tools/build/``, by the interop tests' ``compile_java_client``). The
Python side creates a fresh topic of ``--partitions`` partitions for every run and tells
the JVM, over its stdin, which run to make: an idempotent producer (acks=all,
enable.idempotence=true, linger.ms=5, batch.size=262144) sending ``--records`` records
of ``--size`` bytes and waiting for every acknowledgement, or a transactional producer
with the same settings (and a transactional.id) committing every ``--per-txn`` records.
The clock runs in the JVM (System.nanoTime) and starts once the producer knows the
topic's partitions and, transactional, has its producer id (initTransactions); the
broker's CPU time (utime + stime from /proc) is read just before and after. After a
warm-up of both modes (the JIT; the broker's ``__transaction_state``), the rounds run
both modes in alternating order. Each figure is the median of the rounds; the ratio
(transactional / idempotent) is the median of the per-round ratios, of records per
second and of the broker's CPU time per record. The JVM also times each transaction's
two parts: the produce loop (beginTransaction and the sends) and commitTransaction (its
flush and EndTxn); their medians are reported per round. ``--base REF`` runs every
round on a second broker with that commit's code as well (a worktree under
``.bench-tmp``, as bench/peers.py's ``odradek@REF``; its own JVM), in alternating order.
``--split-commit`` has the JVM call ``flush()`` before each ``commitTransaction()``
and time it apart (the commit's Produce round trip, then EndTxn's), shown as a column
of the per-round table. ``--linger-ms`` sets both producers' linger.ms (default 5, as
bench/transactions.py). ``--metrics`` turns on each broker's ``metrics.listener`` and
reads its request metrics before and after every transactional run (as
bench/transaction_cost.py does): the requests per transaction of each API and their
mean TotalTimeMs, over all the rounds.

Runs from a fresh clone after ``scripts/bootstrap --test`` and
``scripts/install-java-client`` (the jars and a JDK 11+):

    .venv/bin/python bench/transactions_java.py
    .venv/bin/python bench/transactions_java.py --records 1000000 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _tools.broker import cpu_seconds, free_port, odradek_serve
from confluent_kafka.admin import AdminClient, NewTopic
from peers import odradek_at
from transaction_cost import Page
from transactions import _row

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.interop._broker import compile_java_client  # noqa: E402

TOOLS = Path(__file__).resolve().parent / "_tools"
JAVA_SOURCE = TOOLS / "TxnBench.java"
JAVA_MAIN = "TxnBench"


@dataclass
class Run:
    """One timed run as the JVM reported it."""

    seconds: float
    transactions: int
    loop_ms: float  # median produce loop a transaction (beginTransaction and the sends)
    commit_ms: float  # median commitTransaction
    loop_mean_ms: float
    commit_mean_ms: float
    commit_max_ms: float
    flush_ms: float  # median explicit flush before the commit (--split-commit), else 0
    flush_mean_ms: float


@contextlib.contextmanager
def jvm(bootstrap: str, size: int, per_txn: int,
        linger_ms: int) -> Iterator[subprocess.Popen[str]]:
    """A TxnBench JVM talking to ``bootstrap``; told to quit (or killed) on exit."""
    classes, jars = compile_java_client(TOOLS / "build", JAVA_SOURCE)
    java = shutil.which("java") or "java"
    classpath = os.pathsep.join([str(classes), *(str(j) for j in jars)])
    proc = subprocess.Popen(
        [java, "-Xms512m", "-Xmx1g", "-cp", classpath, JAVA_MAIN, bootstrap, str(size),
         str(per_txn), str(linger_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        yield proc
    finally:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.write("quit\n")
            proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ask(proc: subprocess.Popen[str], line: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    answer = proc.stdout.readline().strip()
    if not answer:
        raise SystemExit(f"the JVM ended (exit {proc.wait()}) after {line!r}")
    return answer


def produce(proc: subprocess.Popen[str], topic: str, records: int, transactional: bool,
            broker_pid: int, split: bool = False) -> tuple[Run, float]:
    """One run in the JVM; returns it and the broker's CPU seconds during it. ``split``:
    an explicit flush before each commit, timed apart."""
    mode = ("txn-flush" if split else "txn") if transactional else "plain"
    ready = _ask(proc, f"run {mode} {topic} {records}")
    assert ready == "ready", ready
    before = cpu_seconds(broker_pid)
    done = _ask(proc, "go").split()
    cpu = cpu_seconds(broker_pid) - before
    assert done[0] == "done", done
    elapsed, transactions, loop, commit, loops, commits, commit_max, flush, flushes = (
        int(w) for w in done[1:])
    per = max(transactions, 1) * 1e6
    return Run(elapsed / 1e9, transactions, loop / 1e6, commit / 1e6, loops / per,
               commits / per, commit_max / 1e6, flush / 1e6, flushes / per), cpu


def _topic(admin: AdminClient, partitions: int) -> str:
    name = f"txn-java-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


@dataclass
class Tree:
    """One broker under test (this checkout's code, or a base commit's) and its figures,
    one entry a round per case."""

    name: str
    source: Path | None
    port: int = field(default_factory=free_port)
    rates: dict[str, list[float]] = field(
        default_factory=lambda: {"plain": [], "txn": []})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"plain": [], "txn": []})
    runs: list[Run] = field(default_factory=list)  # the transactional runs
    metrics_port: int | None = None
    admin: AdminClient | None = None
    # the transactional runs' requests per API and their TotalTimeMs (sum, count)
    requests: dict[str, float] = field(default_factory=dict)
    time_sum: dict[str, float] = field(default_factory=dict)
    time_count: dict[str, float] = field(default_factory=dict)

    def page(self) -> Page | None:
        if self.metrics_port is None:
            return None
        return Page(f"http://127.0.0.1:{self.metrics_port}/metrics")

    def add(self, before: Page | None, after: Page | None) -> None:
        """Add one run's requests (``after`` less ``before``)."""
        if before is None or after is None:
            return
        for total, a, b in ((self.requests, after.requests, before.requests),
                            (self.time_sum, after.time_sum, before.time_sum),
                            (self.time_count, after.time_count, before.time_count)):
            for api, value in a.items():
                total[api] = total.get(api, 0.0) + value - b.get(api, 0.0)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def topic(self, partitions: int) -> str:
        """A fresh topic on this tree's broker."""
        if self.admin is None:
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return _topic(self.admin, partitions)


def _round(tree: Tree, proc: subprocess.Popen[str], pid: int, n: int,
           args: argparse.Namespace) -> None:
    order = [False, True] if n % 2 == 0 else [True, False]
    for transactional in order:
        case = "txn" if transactional else "plain"
        topic = tree.topic(args.partitions)
        before = tree.page() if transactional else None
        run, cpu = produce(proc, topic, args.records, transactional, pid,
                           args.split_commit)
        tree.add(before, tree.page() if transactional else None)
        tree.rates[case].append(args.records / run.seconds)
        tree.cpu[case].append(cpu / args.records * 1e6)
        if transactional:
            tree.runs.append(run)


def _table(tree: Tree, per_txn: int, split: bool) -> None:
    rates, cpu = tree.rates, tree.cpu
    print("| case | records/s | ratio | broker CPU µs a record | CPU ratio | each round |")
    print("|---|---:|---:|---:|---:|---|")
    print(_row("produce, idempotent", rates["plain"], cpu["plain"], None))
    print(_row("produce, transactional", rates["txn"], cpu["txn"],
               (rates["plain"], cpu["plain"])))
    print()
    print(f"Each transactional round, a transaction of {per_txn:,} records (ms): wall "
          "(run time / transactions); the produce loop (beginTransaction and the sends) "
          "and commitTransaction (its flush and EndTxn), mean and median; the slowest "
          "commit; and the idempotent run's time for the same number of records."
          + (" The commit includes an explicit flush() before commitTransaction, also "
             "shown apart." if split else ""))
    print()
    flush_head, flush_rule = (" of which flush, mean / median |", "---:|") if split else ("", "")
    print("| round | wall a transaction | produce loop, mean / median | commit, "
          f"mean / median |{flush_head} slowest commit | idempotent, the same records |")
    print(f"|---:|---:|---:|---:|{flush_rule}---:|---:|")
    for n, (run, plain) in enumerate(zip(tree.runs, rates["plain"], strict=True)):
        wall = run.seconds / run.transactions * 1e3
        flush = f" {run.flush_mean_ms:.3f} / {run.flush_ms:.3f} |" if split else ""
        print(f"| {n + 1} | {wall:.3f} | {run.loop_mean_ms:.3f} / {run.loop_ms:.3f} | "
              f"{run.commit_mean_ms:.3f} / {run.commit_ms:.3f} |{flush} "
              f"{run.commit_max_ms:.1f} | {per_txn / plain * 1e3:.3f} |")
    transactions = sum(run.transactions for run in tree.runs)
    if not tree.requests or not transactions:
        return
    print()
    print("The transactional runs' requests (the broker's metrics), all rounds:")
    print()
    print("| request | per transaction | mean TotalTimeMs |")
    print("|---|---:|---:|")
    for api in sorted(tree.requests):
        if tree.requests[api] <= 0:
            continue
        count = tree.time_count.get(api, 0.0)
        mean = f"{tree.time_sum.get(api, 0.0) / count:.3f}" if count else "—"
        print(f"| {api} | {tree.requests[api] / transactions:.3f} | {mean} |")


def _load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.1f}" for x in load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=1_000_000, help="records per run")
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--per-txn", type=int, default=1_000,
                        help="records per transaction")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are shown)")
    parser.add_argument("--warmup", type=int, default=300_000,
                        help="records of each mode's untimed warm-up run (twice each)")
    parser.add_argument("--base", help="also run a base commit's broker, same rounds")
    parser.add_argument("--linger-ms", type=int, default=5,
                        help="the producers' linger.ms (both modes; transactions.py's 5)")
    parser.add_argument("--split-commit", action="store_true",
                        help="flush() before each commitTransaction(), timed apart")
    parser.add_argument("--metrics", action="store_true",
                        help="the transactional runs' requests from the brokers' metrics")
    args = parser.parse_args()
    load_start = os.getloadavg()
    trees = [Tree("HEAD", None)]
    if args.base:
        trees.append(Tree(args.base, odradek_at(args.base).source))
    with contextlib.ExitStack() as stack:
        pids: dict[str, int] = {}
        jvms: dict[str, subprocess.Popen[str]] = {}
        for tree in trees:
            overrides = [f"listeners=PLAINTEXT://127.0.0.1:{tree.port}"]
            if args.metrics:
                tree.metrics_port = free_port()
                overrides.append(f"metrics.listener=http://127.0.0.1:{tree.metrics_port}")
            broker = stack.enter_context(odradek_serve(overrides, tree.port, "txn-java-",
                                                       source=tree.source))
            pids[tree.name] = broker.pid
            jvms[tree.name] = stack.enter_context(jvm(tree.bootstrap, args.size, args.per_txn,
                                                      args.linger_ms))
            # warm-up: the JIT, the broker's first transaction (__transaction_state)
            for _ in range(2):
                for transactional in (True, False):
                    produce(jvms[tree.name], tree.topic(args.partitions),
                            args.warmup, transactional, broker.pid)
        for n in range(args.rounds):
            for tree in trees if n % 2 == 0 else trees[::-1]:
                _round(tree, jvms[tree.name], pids[tree.name], n, args)
                r, run = tree.rates, tree.runs[-1]
                print(f"  round {n + 1} {tree.name}: idempotent {r['plain'][-1]:,.0f}/s, "
                      f"transactional {r['txn'][-1]:,.0f}/s "
                      f"({r['txn'][-1] / r['plain'][-1]:.2f}x; a transaction: produce loop "
                      f"{run.loop_ms:.3f} ms, commit {run.commit_ms:.3f} ms)",
                      file=sys.stderr, flush=True)
    print(f"Command: `.venv/bin/python bench/transactions_java.py {' '.join(sys.argv[1:])}`")
    print()
    print(f"kafka-clients 3.9.1, linger.ms={args.linger_ms}; {args.records:,} records of "
          f"{args.size} B, "
          f"{args.partitions} partitions, {args.per_txn:,} records per transaction, "
          f"{args.rounds} rounds; ratios are the median of the per-round ratios; load "
          f"average (1, 5, 15 min) at the start {_load(load_start)}, at the end "
          f"{_load(os.getloadavg())}")
    for tree in trees:
        print()
        if len(trees) > 1:
            print(f"{tree.name}:")
            print()
        _table(tree, args.per_txn, args.split_commit)
    if args.base:
        head, base = trees
        med = statistics.median
        print()
        print(f"| case | records/s {head.name} / {base.name} | broker CPU a record "
              f"{head.name} / {base.name} |")
        print("|---|---:|---:|")
        for case, name in (("plain", "produce, idempotent"), ("txn", "produce, transactional")):
            rate = med(h / b for h, b in zip(head.rates[case], base.rates[case], strict=True))
            pairs = [(h, b) for h, b in zip(head.cpu[case], base.cpu[case], strict=True)
                     if b > 0]
            cpu = f"{med(h / b for h, b in pairs):.2f}x" if pairs else "—"
            print(f"| {name} | {rate:.2f}x | {cpu} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
