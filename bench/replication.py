"""Replication cost and failover time on one machine: three broker processes over a real
ZooKeeper (the tests' harness), one load generator (librdkafka through confluent-kafka).

Usage: ``.venv/bin/python bench/replication.py [--records 300000] [--size 100]
[--idle-partitions 1000] [--idle-seconds 30] [--skip-failover]``

Measured in the same run, same producer settings (linger.ms 5, batch 1 MB, lz4 off):
- RF 1, acks=1: a 3-partition topic whose partitions are spread over the 3 brokers;
- RF 3, acks=all, min.insync.replicas 2: the same load; every record reaches all three
  logs before its acknowledgement;
- failover: with the RF 3 topic under a steady load, kill -9 of partition 0's leader, to
  the first acknowledgement of a record of partition 0 sent after the kill (the session
  timeout, 6 s in the harness, bounds the detection).
- idle cost (with ``--idle-partitions N``): a topic of N partitions with replication factor
  3, every ISR full, nothing produced; the CPU seconds each broker process used (user +
  system, every thread, from /proc) over ``--idle-seconds``, as a share of one core. CPU
  seconds, not wall time, so that other work on the machine does not count.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.interop._cluster import SESSION_TIMEOUT_MS, running_cluster
from tests.interop._faults import partition_state


def create(bootstrap: str, topic: str, rf: int, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, rf, config=config)])[topic].result(60)


def throughput(bootstrap: str, topic: str, acks: str, records: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "batch.size": 1048576, "queue.buffering.max.messages": 1000000,
                         "log_level": 3})
    value = b"x" * size
    for i in range(1000):  # warm-up: connections, metadata
        producer.produce(topic, value=value, partition=i % 3)
    producer.flush(60)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % 3)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return records / (time.perf_counter() - started)


def failover(cluster: object, bootstrap: str, topic: str) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 1, "log_level": 3})
    acked_after: list[float] = []
    killed_at = [0.0]
    stop = threading.Event()

    def on_delivery(err: object, msg: object, sent: float = 0.0) -> None:
        if err is None and killed_at[0] and sent > killed_at[0] and not acked_after:
            acked_after.append(time.monotonic())

    def load() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            producer.produce(topic, value=b"f", partition=0,
                             on_delivery=lambda e, m, s=sent: on_delivery(e, m, s))
            producer.poll(0.002)
        producer.flush(60)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    time.sleep(2)  # a steady load before the fault (a benchmark, not a test)
    state = partition_state(cluster, topic, 0)  # type: ignore[arg-type]
    assert state is not None
    killed_at[0] = time.monotonic()
    cluster.kill9(state["leader"])  # type: ignore[attr-defined]
    deadline = time.monotonic() + 4 * SESSION_TIMEOUT_MS / 1000 + 30
    while not acked_after and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(90)
    return acked_after[0] - killed_at[0] if acked_after else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cost(cluster: object, partitions: int, seconds: float) -> dict[str, float]:
    """Each broker's share of one core over ``seconds`` with ``partitions`` idle RF 3
    partitions (every ISR full first)."""
    topic = f"idle-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # type: ignore[attr-defined]
    admin.create_topics([NewTopic(topic, partitions, 3)],
                        operation_timeout=120, request_timeout=120)[topic].result(180)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = [partition_state(cluster, topic, p) for p in range(partitions)]  # type: ignore[arg-type]
        if all(s is not None and len(s["isr"]) == 3 for s in states):
            break
        time.sleep(1)
    time.sleep(10)  # settled: logs created, followers caught up (a benchmark, not a test)
    brokers = cluster.brokers  # type: ignore[attr-defined]
    before = {b: cpu_seconds(p.pid) for b, p in brokers.items()}
    time.sleep(seconds)
    return {str(b): round((cpu_seconds(p.pid) - before[b]) / seconds, 4)
            for b, p in brokers.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--idle-partitions", type=int, default=0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--skip-failover", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_cluster(
        Path(tmp), 3, {"offsets.topic.replication.factor": 3, "replica.lag.time.max.ms": 10000}
    ) as cluster:
        bootstrap = cluster.bootstrap
        rf1, rf3 = f"rf1-{uuid.uuid4().hex[:6]}", f"rf3-{uuid.uuid4().hex[:6]}"
        create(bootstrap, rf1, 1, {})
        create(bootstrap, rf3, 3, {"min.insync.replicas": "2"})
        time.sleep(2)  # states propagated (a benchmark, not a test)
        one = throughput(bootstrap, rf1, "1", args.records, args.size)
        three = throughput(bootstrap, rf3, "all", args.records, args.size)
        took = float("nan") if args.skip_failover else failover(cluster, bootstrap, rf3)
        idle = (idle_cost(cluster, args.idle_partitions, args.idle_seconds)
                if args.idle_partitions else {})
    print(json.dumps({
        "records": args.records, "record_size": args.size,
        "rf1_acks1_records_per_s": round(one), "rf3_acksall_records_per_s": round(three),
        "ratio": round(three / one, 2), "failover_s": round(took, 2),
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "idle_partitions": args.idle_partitions, "idle_seconds": args.idle_seconds,
        "idle_cores_per_broker": idle,
    }, indent=2))


if __name__ == "__main__":
    main()
