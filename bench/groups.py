"""Consumer group latencies with a real client (confluent-kafka / librdkafka).

Usage: ``.venv/bin/python bench/groups.py [--rounds N]``

The broker runs as ``odradek serve`` in a subprocess with the shipped
``config/server.properties`` (only the listener port and the data directory are set;
``group.initial.rebalance.delay.ms`` is 0 there, Kafka's default being 3000). Each round
uses a fresh group on a 6-partition topic. Timed:

- *first group ever*: subscribe -> first assignment on a broker that has no
  ``__consumer_offsets`` yet (FindCoordinator creates its 50 partitions);
- *join, 1 member*: subscribe -> first non-empty assignment;
- *join, 3 members*: three consumers subscribe at once -> all three hold a share. With
  the delay at 0 the first member gets a generation alone and learns about the others on
  its next heartbeat, so this depends on the client's ``heartbeat.interval.ms`` (3000 by
  default; also measured at 100);
- *rebalance after a leave*: one of three closes (LeaveGroup) -> the other two cover
  every partition again (also heartbeat-bound: the survivors learn on their next one).

Each case runs ``--rounds`` times; the median and the range are printed as a table and
written to ``bench/results/groups.md``.

*A fourth member joins* (issue 50, what KIP-848 is for): three members of a group share a
12-partition topic that a producer thread writes steadily (one record per partition every
``--interval-ms``, 20 by default: 600 records/s); each member is polled on a thread of its
own, which notes when each record arrives. After ``STEADY_S`` a fourth member subscribes.
Measured: the newcomer's time from ``subscribe`` to its first assigned partition (and to
its first record), and the longest gap between two records of one partition received by
one of the first three, over the partitions it owns both before and after the join (from
the join until every partition is owned once and ``SETTLED_S`` more); beside it the same
longest gap in the steady window before the join, the floor set by the stream and the
polling. Cases, in one run: the consumer protocol (``group.protocol=consumer``, the
server's ``uniform`` assignor), and the classic one with ``cooperative-sticky`` and with
librdkafka's default eager ``range,roundrobin``; on a broker with the shipped config
(``group.consumer.heartbeat.interval.ms`` 5000, librdkafka's ``heartbeat.interval.ms``
3000, both defaults) and on one with both at 250 ms. librdkafka's ``fetch.wait.max.ms`` is
its default, 500.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "groups.md"
PARTITIONS = 6
TIMEOUT_S = 60.0
#: the fourth-member case: partitions, members before the join, steady seconds before the
#: join and after the group settled
JOIN_PARTITIONS = 12
JOIN_MEMBERS = 3
STEADY_S = 3.0
SETTLED_S = 1.0
FAST_HEARTBEAT_MS = 250
FAST_BROKER = {"group.consumer.heartbeat.interval.ms": FAST_HEARTBEAT_MS,
               "group.consumer.min.heartbeat.interval.ms": 100}


def start_broker(data: Path, overrides: dict[str, Any] | None = None
                 ) -> tuple[subprocess.Popen[bytes], str]:
    ready = data / "ready"
    exe = ROOT / ".venv" / "bin" / "odradek"
    extra = [arg for k, v in (overrides or {}).items() for arg in ("--override", f"{k}={v}")]
    proc = subprocess.Popen(
        [str(exe), "serve", "--config", str(ROOT / "config" / "server.properties"),
         "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={data / 'logs'}", "--log-level", "warning",
         "--ready-file", str(ready), *extra],
        stdout=subprocess.DEVNULL, stderr=(data / "broker.err").open("wb"),
    )
    deadline = time.monotonic() + 120  # a loaded machine starts it slowly
    while not ready.exists() or not ready.read_text().endswith("}"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = (data / "broker.err").read_text(errors="replace")[-2000:]
            raise SystemExit(f"the broker did not start:\n{tail}")
        time.sleep(0.05)
    # the ready file, written whole once the broker serves: {"port": P, "listeners": ...}
    port = json.loads(ready.read_text())["port"]
    return proc, f"127.0.0.1:{port}"


def consumer(bootstrap: str, group: str, topic: str, **conf: Any) -> Any:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    return c


def wait(consumers: list[Any], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("no assignment in time")
        for c in consumers:
            c.poll(0.01)


def covering(consumers: list[Any]) -> Callable[[], bool]:
    def check() -> bool:
        sets = [{tp.partition for tp in c.assignment()} for c in consumers]
        return all(sets) and set().union(*sets) == set(range(PARTITIONS))
    return check


def join_latency(bootstrap: str, topic: str, members: int, **conf: Any) -> float:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    consumers = [consumer(bootstrap, group, topic, **conf) for _ in range(members)]
    wait(consumers, covering(consumers))
    took = time.monotonic() - started
    for c in consumers:
        c.close()
    return took


def leave_latency(bootstrap: str, topic: str, **conf: Any) -> float:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    consumers = [consumer(bootstrap, group, topic, **conf) for _ in range(3)]
    wait(consumers, covering(consumers))
    leaving = consumers.pop()
    started = time.monotonic()
    leaving.close()
    wait(consumers, covering(consumers))
    took = time.monotonic() - started
    for c in consumers:
        c.close()
    return took


class Stream:
    """A producer thread writing one record to every partition each ``interval_s``."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.topic, self.interval_s = topic, interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tick = time.monotonic()
        while not self.stop.is_set():
            for p in range(JOIN_PARTITIONS):
                self.producer.produce(self.topic, b"x", partition=p)
            self.producer.poll(0)
            tick += self.interval_s
            time.sleep(max(0.0, tick - time.monotonic()))
        self.producer.flush(10)

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


@dataclass
class Member:
    """A consumer polled on its own thread, noting each record's arrival per partition and
    the moment it first held a partition."""

    consumer: Any
    subscribed: float = 0.0
    first_assigned: float | None = None
    first_record: float | None = None
    current: frozenset[int] = frozenset()
    arrivals: dict[int, list[float]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self, topic: str) -> None:
        self.subscribed = time.monotonic()
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(num_messages=500, timeout=0.005):
                if msg.error() is None:
                    now = time.monotonic()
                    self.arrivals.setdefault(msg.partition(), []).append(now)
                    if self.first_record is None:
                        self.first_record = now
            # read here, on the polling thread: assignment() from another thread can wait
            # on a rebalance that this thread's consume() is serving
            self.current = frozenset(tp.partition for tp in self.consumer.assignment())
            if self.first_assigned is None and self.current:
                self.first_assigned = time.monotonic()

    def owned(self) -> set[int]:
        return set(self.current)

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)
        self.consumer.close()


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """Longest time between two arrivals within [start, end], counting from the last
    arrival before ``start`` (a partition silent across the whole window: end - start)."""
    before = [t for t in times if t < start]
    inside = [t for t in times if start <= t <= end]
    points = ([before[-1]] if before else [start]) + inside + [end]
    return max(b - a for a, b in itertools.pairwise(points))


def fourth_member(bootstrap: str, topic: str, conf: dict[str, Any]
                  ) -> tuple[float, float, float, float]:
    """One round: (newcomer to first partition, newcomer to first record, longest gap of
    the first three on the partitions they keep, the same in the steady window before)."""
    group = f"bench-join-{uuid.uuid4().hex[:8]}"
    base = {"bootstrap.servers": bootstrap, "group.id": group,
            "auto.offset.reset": "latest", **conf}
    members = [Member(Consumer(base)) for _ in range(JOIN_MEMBERS)]
    try:
        for m in members:
            m.start(topic)
        deadline = time.monotonic() + TIMEOUT_S

        def split(ms: list[Member]) -> bool:
            sets = [m.owned() for m in ms]
            return (all(sets) and sum(len(x) for x in sets) == JOIN_PARTITIONS
                    and set().union(*sets) == set(range(JOIN_PARTITIONS)))

        while not split(members):
            if time.monotonic() > deadline:
                raise TimeoutError("the first three never shared the partitions: "
                                   f"{[sorted(m.owned()) for m in members]}")
            time.sleep(0.01)
        steady_from = time.monotonic()
        time.sleep(STEADY_S)
        before = [m.owned() for m in members]
        newcomer = Member(Consumer(base))
        members.append(newcomer)
        joined = time.monotonic()
        newcomer.start(topic)
        while not (split(members) and newcomer.first_record is not None):
            if time.monotonic() > deadline:
                raise TimeoutError("the fourth member never got its share: "
                                   f"{[sorted(m.owned()) for m in members]}, first record "
                                   f"{newcomer.first_record}")
            time.sleep(0.01)
        settled = time.monotonic()
        time.sleep(SETTLED_S)
        end = time.monotonic()
        gap = steady = 0.0
        for m, owned_before in zip(members[:JOIN_MEMBERS], before, strict=True):
            for p in owned_before & m.owned():
                times = m.arrivals.get(p, [])
                gap = max(gap, _longest_gap(times, joined, end))
                steady = max(steady, _longest_gap(times, steady_from, joined))
        del settled
        assert newcomer.first_assigned is not None and newcomer.first_record is not None
        return (newcomer.first_assigned - joined, newcomer.first_record - joined, gap, steady)
    finally:
        for m in members:
            m.close()


def fourth_member_cases(data: Path, rounds: int, interval_s: float
                        ) -> list[tuple[str, list[tuple[float, float, float, float]]]]:
    out: list[tuple[str, list[tuple[float, float, float, float]]]] = []
    for label, overrides, client_heartbeat in (
            ("defaults: group.consumer.heartbeat.interval.ms=5000, "
             "heartbeat.interval.ms=3000", {}, {}),
            (f"heartbeats {FAST_HEARTBEAT_MS} ms", FAST_BROKER,
             {"heartbeat.interval.ms": FAST_HEARTBEAT_MS})):
        where = data / ("fast" if overrides else "default")
        where.mkdir()
        proc, bootstrap = start_broker(where, overrides)
        try:
            topic = "bench-fourth-member"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, JOIN_PARTITIONS, 1)])[topic].result(30)
            cases: list[tuple[str, dict[str, Any]]] = [
                ("consumer protocol (KIP-848, uniform)", {"group.protocol": "consumer"}),
                ("classic, cooperative-sticky",
                 {"group.protocol": "classic",
                  "partition.assignment.strategy": "cooperative-sticky", **client_heartbeat}),
                ("classic, eager (range,roundrobin)",
                 {"group.protocol": "classic", **client_heartbeat}),
            ]
            with Stream(bootstrap, topic, interval_s):
                for name, conf in cases:
                    samples = []
                    for _ in range(rounds):
                        samples.append(fourth_member(bootstrap, topic, conf))
                        print(f"{name}; {label}: " + ", ".join(
                            f"{x * 1000:.0f} ms" for x in samples[-1]), file=sys.stderr,
                            flush=True)
                    out.append((f"{name}; {label}", samples))
        finally:
            proc.terminate()
            proc.wait(30)
    return out


def _cell(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    if len(ms) == 1:
        return f"{ms[0]:.0f}"
    return f"{statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--join-rounds", type=int, default=3,
                        help="rounds of each fourth-member case")
    parser.add_argument("--interval-ms", type=float, default=20.0,
                        help="the stream: one record per partition this often")
    parser.add_argument("--only", choices=("latencies", "fourth-member"),
                        help="run one part only (default: both)")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="odradek-bench-groups-"))
    rows: list[tuple[str, list[float]]] = []
    joins: list[tuple[str, list[tuple[float, float, float, float]]]] = []
    if args.only != "latencies":
        try:
            joins = fourth_member_cases(data, args.join_rounds, args.interval_ms / 1000)
        finally:
            if args.only == "fourth-member":
                shutil.rmtree(data, ignore_errors=True)
    if args.only == "fourth-member":
        return _report(args, rows, joins)
    (data / "latencies").mkdir()
    proc, bootstrap = start_broker(data / "latencies")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = "bench-groups"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        rows.append(("first group ever (creates __consumer_offsets), 1 member",
                     [join_latency(bootstrap, topic, 1)]))
        fast = {"heartbeat.interval.ms": 100}
        cases: list[tuple[str, Callable[[], float]]] = [
            ("join, 1 member", lambda: join_latency(bootstrap, topic, 1)),
            ("join, 3 members (heartbeat.interval.ms=3000, default)",
             lambda: join_latency(bootstrap, topic, 3)),
            ("join, 3 members (heartbeat.interval.ms=100)",
             lambda: join_latency(bootstrap, topic, 3, **fast)),
            ("rebalance after a leave, 3 -> 2 (heartbeat.interval.ms=3000, default)",
             lambda: leave_latency(bootstrap, topic)),
            ("rebalance after a leave, 3 -> 2 (heartbeat.interval.ms=100)",
             lambda: leave_latency(bootstrap, topic, **fast)),
        ]
        for name, case in cases:
            rows.append((name, [case() for _ in range(args.rounds)]))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    return _report(args, rows, joins)


def _report(args: argparse.Namespace, rows: list[tuple[str, list[float]]],
            joins: list[tuple[str, list[tuple[float, float, float, float]]]]) -> int:
    import confluent_kafka

    command = (f".venv/bin/python bench/groups.py --rounds {args.rounds} --join-rounds "
               f"{args.join_rounds}" + (f" --only {args.only}" if args.only else ""))
    lines = [
        f"Python {sys.version.split()[0]}, librdkafka {confluent_kafka.libversion()[0]}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, broker with the shipped config "
        "(group.initial.rebalance.delay.ms=0)",
        "",
        f"Command: `{command}`",
    ]
    if rows:
        lines += ["", "| case | median ms | min ms | max ms | rounds |",
                  "|---|---:|---:|---:|---:|"]
        for name, samples in rows:
            ms = [s * 1000 for s in samples]
            lines.append(f"| {name} | {statistics.median(ms):.0f} | {min(ms):.0f} | "
                         f"{max(ms):.0f} | {len(ms)} |")
    if joins:
        lines += ["", f"A fourth member joins {JOIN_MEMBERS} on {JOIN_PARTITIONS} partitions "
                  f"(a record per partition every {args.interval_ms:g} ms); median (min-max) "
                  f"of {args.join_rounds} rounds, ms:", "",
                  "| case | newcomer: first partition | newcomer: first record | "
                  "longest gap, kept partitions | steady gap before the join |",
                  "|---|---:|---:|---:|---:|"]
        for name, rounds in joins:
            lines.append(f"| {name} | " + " | ".join(
                _cell([r[i] for r in rounds]) for i in range(4)) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
