"""What metrics (``metrics.listener``) cost the broker per Produce request, to a microsecond.

How it works: two brokers of this tree, metrics off and on (and, with ``--tree``, the
same pair of another checkout), run side by side; pre-encoded one-partition Produce
requests (v9, acks=1) are pipelined to one broker at a time, in rounds that alternate
between the brokers (the order rotated and reversed every round), so drift of the machine
falls on all of them alike. A round's cost is the broker's on-CPU time from
``/proc/PID/task/*/schedstat`` (nanoseconds, every thread of the process: no 10 ms clock
tick to average away), divided by its requests. Log dirs are on a tmpfs (``/dev/shm``)
when there is one: writing to the page cache of a disk swung system time by 40-125 us a
38 KB request between rounds (bench/README.md, "Metrics"), which hid a difference of a
few microseconds; what metrics add is CPU on the request path, not on the disk. Segments
roll at 64 MiB and retention keeps 128 MiB, so a long run fits in memory.

``BENCH_LOG=info`` shows the brokers' log (a refused request, say).

Reported per case: each broker's median microseconds a request, and against metrics off
of the same tree the median and mean (with its standard error) of the per-round
differences, and the ratio of medians. The page is not read during the rounds (a scrape's
cost is bench/metrics_scrape.py's).

    .venv/bin/python bench/metrics_cost.py
    .venv/bin/python bench/metrics_cost.py --rounds 60 --tree .bench-tmp/odradek-<sha>
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64
from produce_requests import _free_port, _read_frame, request_frame

from odradek.client.connection import request_class
from odradek.records.builder import build_batch
from odradek.records.compression import CompressionType

ROOT = Path(__file__).resolve().parents[1]

# (name, records of 100 B per batch, lz4, requests a round, fetch)
# - one record: the per-request cost alone;
# - 650 records, lz4 (~38 KB, half of each value random): what librdkafka sends in
#   bench/peers.py's "64 KB batches, lz4" produce cell, the cell with the most requests
#   per GB;
# - 9,000 records (~0.9 MB): the 1 MB batch cells;
# - a Fetch of one such batch (v12, no session, 1 MiB a partition, as the consume cells'
#   librdkafka asks): the consume cells, whose responses are file regions (sendfile).
CASES = (("1 record", 1, False, 20_000, False), ("650 records lz4", 650, True, 2_000, False),
         ("9,000 records", 9_000, False, 200, False), ("Fetch 1 MB", 9_000, False, 2_000, True))


@dataclass
class Broker:
    name: str
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    data: Path
    per_request_us: list[float] = field(default_factory=list)

    def on_cpu_ns(self) -> int:
        total = 0
        for stat in Path(f"/proc/{self.proc.pid}/task").glob("*/schedstat"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # thread ended
                total += int(stat.read_text().split()[0])
        return total

    def stop(self) -> None:
        self.sock.close()
        self.proc.terminate()
        self.proc.wait(120)
        shutil.rmtree(self.data, ignore_errors=True)


def start(name: str, tree: Path, metrics: bool, data_root: Path) -> Broker:
    port = _free_port()
    extra = (["--override", f"metrics.listener=http://127.0.0.1:{_free_port()}"]
             if metrics else [])
    data = Path(tempfile.mkdtemp(dir=data_root))
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "python"), "-c",
         "from odradek.cli.main import main; main()", "serve",
         "--log-level", os.environ.get("BENCH_LOG", "warning"),
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data}",
         "--override", f"log.segment.bytes={64 << 20}",
         "--override", f"log.retention.bytes={128 << 20}",
         "--override", "log.retention.check.interval.ms=1000", *extra],
        env=dict(os.environ, PYTHONPATH=str(tree.resolve() / "src")),
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), 0.5)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{name}: the broker did not start") from None
            time.sleep(0.1)
    sock.settimeout(120)
    create = request_class("create_topics", 5, "CreateTopicsRequest")
    creatable = request_class("create_topics", 5, "CreatableTopic")
    sock.sendall(request_frame(create(
        topics=(creatable(name="t", num_partitions=i32(1), replication_factor=i16(1),
                          assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=60), validate_only=False), 1))
    _read_frame(sock)
    return Broker(name, proc, sock, data)


def make_batch(records: int, lz4: bool) -> bytes:
    if lz4:  # half random, so that lz4 leaves about 60 % of it
        values = [(None, os.urandom(50) + b"x" * 50) for _ in range(records)]
        batch = build_batch(values, timestamp=int(time.time() * 1000),
                            compression=CompressionType.LZ4)
    else:
        batch = build_batch([(None, b"x" * 100)] * records, timestamp=int(time.time() * 1000))
    return batch


def produce_blob(batch: bytes, requests: int) -> bytes:
    produce = request_class("produce", 9, "ProduceRequest")
    topic = request_class("produce", 9, "TopicProduceData")
    partition = request_class("produce", 9, "PartitionProduceData")
    blob = b"".join(request_frame(produce(
        transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=30),
        topic_data=(topic(name="t", partition_data=(
            partition(index=i32(0), records=batch),)),)), 100 + i)
        for i in range(requests))
    return blob


def fetch_blob(requests: int) -> bytes:
    fetch = request_class("fetch", 12, "FetchRequest")
    topic = request_class("fetch", 12, "FetchTopic")
    partition = request_class("fetch", 12, "FetchPartition")
    return b"".join(request_frame(fetch(
        cluster_id=None, replica_id=BrokerId(-1), max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=i32(1), max_bytes=i32(50 << 20), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1),
        topics=(topic(topic=TopicName("t"), partitions=(partition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
            last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
            partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), rack_id=""), 100 + i) for i in range(requests))


def run_round(broker: Broker, blob: bytes, requests: int) -> float:
    before = broker.on_cpu_ns()
    sender = threading.Thread(target=broker.sock.sendall, args=(blob,))
    sender.start()
    for _ in range(requests):
        _read_frame(broker.sock)
    sender.join()
    return (broker.on_cpu_ns() - before) / requests / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tree", type=Path, help="another checkout, measured beside")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--case", action="append", choices=[c[0] for c in CASES],
                        help="only these cases (default: all)")
    args = parser.parse_args()
    shm = Path("/dev/shm")
    data_root = shm if shm.is_dir() and os.access(shm, os.W_OK) else ROOT / ".bench-tmp"
    data_root.mkdir(exist_ok=True)
    pairs = [(ROOT, ROOT.name)] + ([(args.tree, args.tree.name)] if args.tree else [])
    print(f"Command: `{' '.join(['.venv/bin/python bench/metrics_cost.py', *sys.argv[1:]])}`"
          f" (log dirs in {data_root})")
    for name, records, lz4, requests, fetch in CASES:
        if args.case and name not in args.case:
            continue
        batch = make_batch(records, lz4)
        size = len(batch)
        blob = fetch_blob(requests) if fetch else produce_blob(batch, requests)
        brokers = [start(f"{label} metrics {'on' if on else 'off'}", tree, on, data_root)
                   for tree, label in pairs for on in (False, True)]
        try:
            if fetch:  # the batch each Fetch reads
                for broker in brokers:
                    run_round(broker, produce_blob(batch, 1), 1)
            for r in range(args.rounds + 2):  # two rounds warm up (segments, indexes)
                turn = brokers[r % len(brokers):] + brokers[:r % len(brokers)]
                for broker in turn[::-1] if r % 2 else turn:
                    us = run_round(broker, blob, requests)
                    if r >= 2:
                        broker.per_request_us.append(us)
        finally:
            for broker in brokers:
                broker.stop()
        print()
        print(f"{name}: {size:,} B batches, {requests:,} requests a round, "
              f"{args.rounds} rounds")
        print()
        print("| broker | us/request (median) | on - off, per round: median | mean ± s.e. "
              "| on / off (medians) |")
        print("|---|---:|---:|---:|---:|")
        for off, on in zip(brokers[::2], brokers[1::2], strict=True):
            diff = [b - a for a, b in zip(off.per_request_us, on.per_request_us, strict=True)]
            off_median = statistics.median(off.per_request_us)
            on_median = statistics.median(on.per_request_us)
            error = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else 0.0
            print(f"| {off.name} | {off_median:.2f} | | | |")
            print(f"| {on.name} | {on_median:.2f} | {statistics.median(diff):+.2f} "
                  f"| {statistics.mean(diff):+.2f} ± {error:.2f} "
                  f"| {on_median / off_median:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
