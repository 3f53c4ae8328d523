"""``odradek mirror`` between two local brokers: throughput and end-to-end delay.

    .venv/bin/python bench/mirror.py [--records 500000] [--size 100] [--partitions 4]
                                     [--rate 2000] [--seconds 30] [--master local[2]]

Two ``odradek serve`` processes (free ports, data under .bench-tmp/) and ``odradek mirror``
as deployed (its own process and Spark, ``--master``).

* Throughput: ``--records`` records of ``--size`` random bytes are written to the source
  first; the mirror starts, and the target's end offsets are sampled every 0.2 s. The rate
  is taken from the sample where 5 % of the records are on the target to the one where all
  are (so Spark's start-up is not counted), in records/s and MB/s of values.
* Delay: then ``--rate`` records/s are written for ``--seconds`` s. Both topics use
  LogAppendTime (the target topic is created beforehand, and the mirror adopts it), so
  record i of a partition carries its append time on the source and on the target; the
  delay is the difference (same machine, same clock). The first 5 s are warm-up.
The table is printed and written to bench/results/mirror.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

REPO = Path(__file__).resolve().parents[1]
TOPIC = "bench-mirror"
WARMUP_S = 5.0


@contextmanager
def serve_broker(tmp: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = tempfile.mkdtemp(dir=tmp)
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "serve",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("broker did not start") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def total(c: ck.Consumer, topic: str, partitions: int) -> int:
    try:
        return sum(c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    except ck.KafkaException:
        return 0


def stamps(boot: str, topic: str, partition: int, start: int) -> list[int]:
    c = ck.Consumer({"bootstrap.servers": boot, "group.id": "bench-read",
                     "enable.auto.commit": False})
    _, high = c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)
    c.assign([ck.TopicPartition(topic, partition, start)])
    out: list[int] = []
    while start + len(out) < high:
        for m in c.consume(10_000, timeout=1):
            if m.error() is None:
                out.append(m.timestamp()[1])
    c.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=int, default=2000, help="records/s for the delay run")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    tmp = REPO / ".bench-tmp"
    tmp.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="mirror-"))
    n_parts = args.partitions
    with serve_broker(work) as src, serve_broker(work) as dst:
        conf = {"message.timestamp.type": "LogAppendTime"}
        for boot in (src, dst):
            admin = AdminClient({"bootstrap.servers": boot})
            admin.create_topics([NewTopic(TOPIC, n_parts, 1, config=conf)])[TOPIC].result(30)
        p = ck.Producer({"bootstrap.servers": src, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000})
        payload = os.urandom(args.size)
        for i in range(args.records):
            while True:
                try:
                    p.produce(TOPIC, payload, None, i % n_parts)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
        watch = ck.Consumer({"bootstrap.servers": dst, "group.id": "bench-watch"})
        log = open(work / "mirror.log", "wb")  # noqa: SIM115 (closed below)
        mirror = subprocess.Popen(
            [sys.executable, "-m", "odradek", "mirror",
             "--source-bootstrap-server", src, "--target-bootstrap-server", dst,
             "--include", TOPIC, "--checkpoint-dir", str(work / "ckpt"),
             "--master", args.master, "--sync-interval", "5"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            samples: list[tuple[float, int]] = []
            deadline = time.monotonic() + 1800
            while not samples or samples[-1][1] < args.records:
                if mirror.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"mirror stopped or too slow; see {work / 'mirror.log'}")
                samples.append((time.monotonic(), total(watch, TOPIC, n_parts)))
                time.sleep(0.2)
            t0, c0 = next(s for s in samples if s[1] >= args.records * 0.05)
            t1, c1 = samples[-1]
            rate = (c1 - c0) / (t1 - t0)
            mb = rate * args.size / 1e6
            # steady rate: delay from source append to target append
            base = [c.get_watermark_offsets(ck.TopicPartition(TOPIC, q), timeout=10)[1]
                    for q in range(n_parts) for c in [watch]]
            stop = threading.Event()

            def paced() -> None:
                start = time.monotonic()
                i = 0
                while not stop.is_set():
                    due = start + i / args.rate
                    now = time.monotonic()
                    if due > now:
                        time.sleep(due - now)
                    p.produce(TOPIC, payload, None, i % n_parts)
                    p.poll(0)
                    i += 1
                p.flush(60)

            th = threading.Thread(target=paced)
            th.start()
            time.sleep(args.seconds)
            stop.set()
            th.join()
            src_c = ck.Consumer({"bootstrap.servers": src, "group.id": "bench-watch"})
            want = total(src_c, TOPIC, n_parts)
            src_c.close()
            end = time.monotonic() + 300
            while total(watch, TOPIC, n_parts) < want and time.monotonic() < end:
                time.sleep(0.2)
            delays: list[float] = []
            for q in range(n_parts):
                s = stamps(src, TOPIC, q, base[q])
                d = stamps(dst, TOPIC, q, base[q])
                skip = int(len(s) * WARMUP_S / args.seconds)
                delays.extend(b - a for a, b in zip(s[skip:], d[skip:], strict=False))
        finally:
            mirror.send_signal(signal.SIGTERM)
            try:
                mirror.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(mirror.pid, signal.SIGKILL)
                mirror.wait(30)
            log.close()
            watch.close()
    delays.sort()

    def pct(x: float) -> float:
        return delays[min(len(delays) - 1, int(len(delays) * x))]

    rows: list[tuple[str, Any]] = [
        ("records x size, partitions", f"{args.records:,} x {args.size} B, {n_parts}"),
        ("mirror throughput (backlog)", f"{rate:,.0f} records/s, {mb:.1f} MB/s"),
        (f"delay at {args.rate} records/s (ms)",
         f"p50 {pct(0.5):.0f}, p99 {pct(0.99):.0f}, max {delays[-1]:.0f}, "
         f"mean {statistics.mean(delays):.0f} ({len(delays):,} records)"),
        ("master", args.master),
    ]
    table = "| measure | value |\n|---|---|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows)
    print(table)
    out = REPO / "bench" / "results" / "mirror.md"
    out.write_text(f"# bench/mirror.py, {time.strftime('%Y-%m-%d %H:%M')} UTC\n\n{table}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
