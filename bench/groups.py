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
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "groups.md"
PARTITIONS = 6
TIMEOUT_S = 60.0


def start_broker(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = data / "ready"
    exe = ROOT / ".venv" / "bin" / "odradek"
    proc = subprocess.Popen(
        [str(exe), "serve", "--config", str(ROOT / "config" / "server.properties"),
         "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={data / 'logs'}", "--log-level", "warning",
         "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the broker did not start")
        time.sleep(0.05)
    return proc, f"127.0.0.1:{ready.read_text().strip()}"


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="odradek-bench-groups-"))
    proc, bootstrap = start_broker(data)
    rows: list[tuple[str, list[float]]] = []
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
    import confluent_kafka

    lines = [
        f"Python {sys.version.split()[0]}, librdkafka {confluent_kafka.libversion()[0]}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, broker with the shipped config "
        "(group.initial.rebalance.delay.ms=0)",
        "",
        f"Command: `.venv/bin/python bench/groups.py --rounds {args.rounds}`",
        "",
        "| case | median ms | min ms | max ms | rounds |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, samples in rows:
        ms = [s * 1000 for s in samples]
        lines.append(f"| {name} | {statistics.median(ms):.0f} | {min(ms):.0f} | {max(ms):.0f} "
                     f"| {len(ms)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
