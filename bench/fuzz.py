"""The long fuzz run: hostile frames over many connections to a broker in a subprocess.

The broker runs as ``odradek serve`` (this tree's source) with its log at INFO in a file;
the fuzzer (tests/server/fuzzing.py: real clients' captured requests and a request of
every served version, old versions included, mutated) sends ``--frames`` frames from
``--seed`` on, one seed per ``--frames-per-seed``, or stops after ``--minutes``. The
admin and group requests (create, delete and alter topics and partitions, DeleteRecords,
configs, quotas, elections, reassignments, group joins) are ``--admin-weight`` times as
likely as the rest. ``--partitions N`` gives the broker N more partitions (topics of 100)
before the run. Every 10 s it prints progress. At the end it checks what test_fuzz.py
checks (the broker alive, the records produced before the run read back byte for byte, a
fresh produce/consume round trip) and reports frames/s, crashes (the broker process gone,
or a traceback or ERROR line in its log), the event loop's stalls (the watchdog at
``--stall-threshold-ms``: the count, the longest, and what the loop was handling in
each), peak RSS and open descriptors of the broker at start and end, topics created and
log lines written.

Run (about 5 minutes)::

    PYTHONPATH=src .venv/bin/python bench/fuzz.py --minutes 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.server.fuzzing

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.server.fuzzing import FuzzStats, client_frames, fuzz, sample_frames  # noqa: E402

from odradek.client.connection import BrokerConnection  # noqa: E402

PRECIOUS = "precious-before-fuzzing"


# The requests that change the cluster or a group: weighted up in the corpus.
ADMIN_KEYS = frozenset((
    11, 14, 19, 20, 21, 32, 33, 37, 42, 43, 44, 45, 47, 49,
))  # JoinGroup, SyncGroup, Create/DeleteTopics, DeleteRecords, Describe/AlterConfigs,
#     CreatePartitions, DeleteGroups, ElectLeaders, IncrementalAlterConfigs,
#     AlterPartitionReassignments, OffsetDelete, AlterClientQuotas


def start_broker(
    data: Path, log_file: Path, tree: Path = ROOT, max_partitions: int = 1000,
    stall_threshold_ms: int = 1000, metrics_port: int | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    ready = data / "ready"
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    command = [
        sys.executable, "-c", "import sys; from odradek.cli.main import main; sys.exit(main())",
        "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", f"log.dirs={data / 'logs'}",
        "--override", "auto.create.topics.enable=false",
        "--override", f"max.broker.partitions={max_partitions}",
        "--override", f"event.loop.stall.threshold.ms={stall_threshold_ms}",
        "--log-level", "info", "--ready-file", str(ready),
    ]
    if metrics_port is not None:
        command += ["--override", f"metrics.listener=http://127.0.0.1:{metrics_port}"]
    with log_file.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=_more_open_files)
    deadline = time.monotonic() + 120
    while not ready.exists() or not ready.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the broker did not start; see {log_file}")
        time.sleep(0.05)
    # written whole once the broker serves: {"port": P, "listeners": {...}, "metrics": ...}
    return proc, f"127.0.0.1:{json.loads(ready.read_text())['port']}"


def _more_open_files() -> None:
    """In the broker's process before exec: a hard open-files limit for 10,000 partitions
    (a log holds up to four descriptors), where this user may raise it (root)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 18
    if hard != resource.RLIM_INFINITY and hard < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, want))


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) in KiB, and open descriptors, of the broker."""
    values = {"fds": len(os.listdir(f"/proc/{pid}/fd"))}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0])
    return values


def records(seed: int, count: int) -> list[tuple[bytes, bytes, list[Any]]]:
    rng = random.Random(seed)
    return [(rng.randbytes(rng.randrange(1, 20)), rng.randbytes(rng.randrange(0, 3000)),
             [("h", rng.randbytes(rng.randrange(0, 10)))]) for _ in range(count)]


def produce(bootstrap: str, topic: str, batch: list[tuple[bytes, bytes, list[Any]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value, headers in batch:
        producer.produce(topic, key=key, value=value, headers=headers, partition=0)
    if producer.flush(30) != 0:
        raise SystemExit(f"could not produce to {topic}")


def consume(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes, list[Any]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes, bytes, list[Any]]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.key(), message.value(), list(message.headers() or [])))
    consumer.close()
    return got


def create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures are done
    for future in admin.create_topics(topics).values():
        future.result(30)


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def loop_stalls(metrics_port: int) -> tuple[int, float]:
    """(stalls, longest in seconds) from the broker's metrics page."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("odradek_event_loop_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return (int(values["odradek_event_loop_stalls_total"]),
            values["odradek_event_loop_longest_stall_seconds"])


def stall_causes(log_text: str) -> Counter[str]:
    """What the loop was handling in each watchdog warning, by API (or 'no request')."""
    causes: Counter[str] = Counter()
    for line in log_text.splitlines():
        if "event loop blocked for" in line:
            handling = line.split("handling: ", 1)[-1]
            causes[handling.split(" from client id")[0].split(";")[0]] += 1
    return causes


async def served(bootstrap: str) -> dict[int, tuple[int, int]]:
    conn = await BrokerConnection.open(bootstrap)
    try:
        return dict(conn.api_versions)
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=10_000_000)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--frames-per-seed", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="source tree the broker runs from (default: this checkout)")
    parser.add_argument("--partitions", type=int, default=0,
                        help="partitions the broker holds before the run (topics of 100)")
    parser.add_argument("--admin-weight", type=int, default=4,
                        help="how many times as likely an admin or group request is")
    parser.add_argument("--stall-threshold-ms", type=int, default=200,
                        help="the broker's event.loop.stall.threshold.ms")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="odradek-bench-fuzz-"))
    log_file = data / "broker.log"
    metrics_port = free_port()
    proc, bootstrap = start_broker(data, log_file, args.tree, args.partitions + 1000,
                                   args.stall_threshold_ms, metrics_port)
    port = int(bootstrap.rsplit(":", 1)[1])
    try:
        create_topics(bootstrap, [NewTopic("corpus-a", 3, 1),
                                  NewTopic("corpus-b", 1, 1, config={"cleanup.policy": "compact"}),
                                  NewTopic("samples", 1, 1), NewTopic(PRECIOUS, 1, 1)])
        for first in range(0, args.partitions, 1000):
            create_topics(bootstrap, [
                NewTopic(f"load-{i // 100}", min(100, args.partitions - i), 1)
                for i in range(first, min(first + 1000, args.partitions), 100)])
        precious = records(7, 500)
        produce(bootstrap, PRECIOUS, precious)
        samples = sample_frames(asyncio.run(served(bootstrap)))
        admin = [f for f in samples if struct.unpack_from(">h", f, 4)[0] in ADMIN_KEYS]
        corpus = client_frames() + samples + admin * (args.admin_weight - 1)
        stalls_before = loop_stalls(metrics_port)
        topics_before = topic_names(bootstrap)
        start_status = proc_status(proc.pid)
        print(f"corpus {len(corpus)} frames; broker pid {proc.pid}, log {log_file}; "
              f"start: {start_status}", file=sys.stderr)

        total = FuzzStats()
        deadline = time.monotonic() + args.minutes * 60
        seed = args.seed
        started = time.monotonic()
        last = started
        while total.frames < args.frames and time.monotonic() < deadline:
            frames = min(args.frames_per_seed, args.frames - total.frames)
            stats = asyncio.run(fuzz(port, corpus, seed, frames, args.concurrency))
            total.merge(stats)
            seed += 1
            if proc.poll() is not None:
                break
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                status = proc_status(proc.pid)
                print(f"{last - started:6.0f} s  {total.frames:>9,} frames  "
                      f"{total.frames / total.seconds:,.0f} frames/s  rss "
                      f"{status['VmRSS'] / 1024:.0f} MiB  fds {status['fds']}", file=sys.stderr)
        alive = proc.poll() is None
        if not alive:
            raise SystemExit(f"the broker died (exit {proc.returncode}); see {log_file}")
        readback = consume(bootstrap, PRECIOUS, len(precious)) == precious
        create_topics(bootstrap, [NewTopic("after-fuzzing", 1, 1)])
        fresh = records(8, 100)
        produce(bootstrap, "after-fuzzing", fresh)
        round_trip = consume(bootstrap, "after-fuzzing", len(fresh)) == fresh
        created = topic_names(bootstrap) - topics_before - {"after-fuzzing"}
        time.sleep(1)  # the client connections of the checks close
        end_status = proc_status(proc.pid)
        stalls, longest = loop_stalls(metrics_port)
    finally:
        proc.terminate()
        proc.wait(300)  # a clean stop of 10,000 logs takes a while on a busy machine
    log_text = log_file.read_text(errors="replace")
    lines = log_text.splitlines()
    tracebacks = log_text.count("Traceback")
    errors = sum(" ERROR " in line or line.startswith("ERROR") for line in lines)
    peak = end_status["VmHWM"] / 1024
    causes = stall_causes(log_text)
    rows = [
        ("frames sent", f"{total.frames:,} over {total.connections:,} connections "
                        f"(seeds {args.seed} to {seed - 1})"),
        ("broker partitions before the run", f"{args.partitions:,} + 56"),
        ("duration", f"{total.seconds:.0f} s"),
        ("frames/s", f"{total.frames / total.seconds:,.0f}"),
        ("connections the broker closed / answered / reset / slow (> 3 s)",
         f"{total.closed_by_broker:,} / {total.answered:,} / {total.reset:,} / {total.slow:,}"),
        ("crashes: broker exits, tracebacks, ERROR lines", f"0, {tracebacks}, {errors}"),
        (f"event loop stalls over {args.stall_threshold_ms} ms (set-up / run), longest",
         f"{stalls_before[0]} / {stalls - stalls_before[0]}, {longest * 1000:.0f} ms"),
        ("what the loop was handling in each stall",
         ", ".join(f"{what}: {n}" for what, n in causes.most_common()) or "-"),
        ("records produced before the run read back byte for byte", str(readback)),
        ("produce + consume round trip after the run", str(round_trip)),
        ("broker peak RSS", f"{peak:.0f} MiB (start {start_status['VmRSS'] / 1024:.0f} MiB, "
                            f"end {end_status['VmRSS'] / 1024:.0f} MiB)"),
        ("broker open descriptors, start / end", f"{start_status['fds']} / {end_status['fds']}"),
        ("topics created by fuzzed CreateTopics",
         f"{len(created)} (from {total.api_keys[19]:,} CreateTopics frames)"),
        ("broker log lines written", f"{len(lines):,}"),
    ]
    print("\n| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
