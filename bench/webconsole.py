"""How fast the web console answers on a big topic and a big group.

Usage: ``.venv/bin/python bench/webconsole.py [--partitions 1000] [--members 100]
[--rounds 20]``

A broker (``odradek serve`` in a subprocess, shipped configuration) gets a topic of
``--partitions`` partitions with a few records in each, a group ``bench`` whose offsets are
committed for every partition, then ``--members`` librdkafka consumers join that group and
stay in it (each holds about 10 partitions at 1,000/100). ``odradek console`` runs in a
subprocess, and each page is fetched over HTTP ``--rounds`` times (after one warm-up): the
overview, the topic list, the topic page (1,000 partitions: metadata, earliest and latest
offsets of every partition, configs), the message browser (50 records of one partition),
the group list, the group page (100 members, committed offset, log end and lag of 1,000
partitions) and the lag endpoint. The median, p95 and max per page are printed and written
to ``bench/results/webconsole.md``. Target: every page under 300 ms.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.interop._broker import start_broker  # noqa: E402
from tests.webconsole._console import running_console  # noqa: E402

TOPIC = "big"
GROUP = "bench"
TARGET_MS = 300.0


def seed(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p in range(partitions):
        for i in range(3):
            producer.produce(TOPIC, key=f"{p}-{i}", value=f'{{"p": {p}, "i": {i}}}',
                             partition=p)
    assert producer.flush(120) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(TOPIC, p, 1) for p in range(partitions)],
             asynchronous=False)
    c.close()


def join_members(bootstrap: str, members: int, partitions: int,
                 stop: threading.Event) -> list[threading.Thread]:
    """``members`` consumers in the group, polling until ``stop``; returns once every
    partition is assigned to someone and the group is stable."""
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                           "enable.auto.commit": False, "client.id": f"member-{i}",
                           "heartbeat.interval.ms": 500, "session.timeout.ms": 30000})
                 for i in range(members)]
    for c in consumers:
        c.subscribe([TOPIC])

    def run(c: Consumer) -> None:
        while not stop.is_set():
            c.poll(0.2)
        c.close()

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        g = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
        owned = sum(len(m.assignment.topic_partitions) for m in g.members)
        if g.state.name == "STABLE" and len(g.members) == members and owned == partitions:
            return threads
        time.sleep(0.5)
    raise SystemExit(f"the group never settled with {members} members")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    pages = {
        "overview": "/",
        "topics": "/topics",
        f"topic ({args.partitions} partitions)": f"/topics/{TOPIC}",
        "messages (50 records)": f"/topics/{TOPIC}/messages?partition=7&offset=0&limit=50",
        "groups": "/groups",
        f"group ({args.members} members, {args.partitions} partitions)": f"/groups/{GROUP}",
        "lag endpoint": f"/api/groups/{GROUP}/lag",
    }
    rows = []
    stop = threading.Event()
    with tempfile.TemporaryDirectory(dir=ROOT / ".bench-tmp" if (ROOT / ".bench-tmp").exists()
                                     else None) as tmp, start_broker(Path(tmp)) as broker:
        seed(broker.bootstrap, args.partitions)
        threads = join_members(broker.bootstrap, args.members, args.partitions, stop)
        try:
            with running_console(broker.bootstrap) as url, \
                        httpx.Client(base_url=url, timeout=30) as http:
                for name, path in pages.items():
                    r = http.get(path)  # warm-up, and a check that the page works
                    assert r.status_code == 200, (path, r.status_code, r.text[:500])
                    times = []
                    for _ in range(args.rounds):
                        t0 = time.perf_counter()
                        r = http.get(path)
                        times.append((time.perf_counter() - t0) * 1000)
                        assert r.status_code == 200
                    times.sort()
                    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
                    rows.append((name, statistics.median(times), p95, times[-1],
                                 len(r.content)))
                g = http.get(f"/api/groups/{GROUP}/lag").json()
                assert g["state"] == "STABLE", g
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    lines = [
        f"Python {platform.python_version()}, {platform.machine()}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `.venv/bin/python bench/webconsole.py --partitions {args.partitions} "
        f"--members {args.members} --rounds {args.rounds}`",
        "",
        "| page | median ms | p95 ms | max ms | bytes | under 300 ms |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, med, p95, mx, size in rows:
        lines.append(f"| {name} | {med:.1f} | {p95:.1f} | {mx:.1f} | {size:,} | "
                     f"{'yes' if p95 < TARGET_MS else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results" / "webconsole.md").write_text(text)
    return 0 if all(r[2] < TARGET_MS for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
