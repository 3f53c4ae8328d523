"""What metrics (``metrics.listener``) cost the broker per Produce or Fetch request.

How it works: two brokers of this tree, metrics off and on (and, with ``--tree``, the
same pair of another checkout), run side by side; pre-encoded one-partition Produce
requests (v9, acks=1), or Fetch requests, are pipelined to one broker at a time, in
rounds that alternate between the brokers (the order rotated and reversed every round),
so drift of the machine falls on all of them alike. A round's cost is the broker's on-CPU time from
``/proc/PID/task/*/schedstat`` (nanoseconds, every thread of the process: no 10 ms clock
tick to average away), divided by its requests. Log dirs are on a tmpfs (``/dev/shm``)
when there is one: writing to the page cache of a disk swung system time by 40-125 us a
38 KB request between rounds (bench/README.md, "Metrics"), which hid a difference of a
few microseconds; what metrics add is CPU on the request path, not on the disk. Segments
roll at 64 MiB and retention keeps 128 MiB, so a long run fits in memory.

``BENCH_LOG=info`` shows the brokers' log (a refused request, say).

Fresh brokers are started for each of ``--sittings`` sittings: a process's own memory
layout (hash seeds, addresses) moved one broker's cost by more than metrics do for a
whole run of rounds, so one pair of processes is one sample, however many rounds it ran.

Reported per case: each tree's median over the sittings of microseconds a request, off and
on, their difference, and the on / off ratio of each sitting with its median. The page
is not read during the rounds (a scrape's cost is bench/metrics_scrape.py's).

    .venv/bin/python bench/metrics_cost.py
    .venv/bin/python bench/metrics_cost.py --sittings 9 --tree .bench-tmp/odradek-<sha>
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
from kio.static.primitive import i8, i32, i64
from produce_requests import (
    _free_port,
    _read_frame,
    create_topic,
    produce_frames,
    request_frame,
)

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


@dataclass(frozen=True)
class FetchShape:
    """What a Fetch case reads: ``batches`` batches of the case's records produced to each
    of ``partitions`` partitions, fetched from offset 0 of every partition with these
    limits (a case's ``fetch`` element: ``True`` is the one-partition 1 MiB Fetch)."""

    partitions: int = 1
    batches: int = 1
    partition_max_bytes: int = 1 << 20
    max_bytes: int = 50 << 20


ONE_MIB_FETCH = FetchShape()


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


def log_dirs_root() -> Path:
    """Where brokers' log dirs go: a tmpfs (``/dev/shm``) when there is one, else
    ``.bench-tmp`` (see the module's header)."""
    shm = Path("/dev/shm")
    root = shm if shm.is_dir() and os.access(shm, os.W_OK) else ROOT / ".bench-tmp"
    root.mkdir(exist_ok=True)
    return root


def start(name: str, tree: Path, metrics: bool, data_root: Path,
          wrapper: tuple[str, ...] = (), startup_s: float = 60,
          overrides: tuple[str, ...] = (), partitions: int = 1) -> Broker:
    """A broker of ``tree`` (run under ``wrapper``, a command prefix, if given; with
    ``overrides``, ``key=value`` configs, added) with topic ``t`` of ``partitions``
    partitions."""
    port = _free_port()
    extra = (["--override", f"metrics.listener=http://127.0.0.1:{_free_port()}"]
             if metrics else [])
    data = Path(tempfile.mkdtemp(dir=data_root))
    proc = subprocess.Popen(
        [*wrapper, str(ROOT / ".venv" / "bin" / "python"), "-c",
         "from odradek.cli.main import main; main()", "serve",
         "--log-level", os.environ.get("BENCH_LOG", "warning"),
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data}",
         "--override", f"log.segment.bytes={64 << 20}",
         "--override", f"log.retention.bytes={128 << 20}",
         "--override", "log.retention.check.interval.ms=1000", *extra,
         *(arg for kv in overrides for arg in ("--override", kv))],
        env=dict(os.environ, PYTHONPATH=str(tree.resolve() / "src")),
    )
    deadline = time.monotonic() + startup_s
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
    create_topic(sock, partitions)
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
    return produce_frames(batch, 1, requests)


def fetch_blob(requests: int, shape: FetchShape = ONE_MIB_FETCH) -> bytes:
    fetch = request_class("fetch", 12, "FetchRequest")
    topic = request_class("fetch", 12, "FetchTopic")
    partition = request_class("fetch", 12, "FetchPartition")
    return b"".join(request_frame(fetch(
        cluster_id=None, replica_id=BrokerId(-1), max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=i32(1), max_bytes=i32(shape.max_bytes), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1),
        topics=(topic(topic=TopicName("t"), partitions=tuple(partition(
            partition=i32(p), current_leader_epoch=i32(-1), fetch_offset=i64(0),
            last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
            partition_max_bytes=i32(shape.partition_max_bytes))
            for p in range(shape.partitions))),),
        forgotten_topics_data=(), rack_id=""), 100 + i) for i in range(requests))


def run_round(broker: Broker, blob: bytes, requests: int) -> float:
    before = broker.on_cpu_ns()
    sender = threading.Thread(target=broker.sock.sendall, args=(blob,))
    sender.start()
    for _ in range(requests):
        _read_frame(broker.sock)
    sender.join()
    return (broker.on_cpu_ns() - before) / requests / 1e3


def warm_up(broker: Broker, case: tuple[str, int, bool, int, bool | FetchShape],
            warm_up: int, requests: int) -> bytes:
    """Ready ``broker`` for counting ``requests`` requests of ``case``: produce the batches
    a fetch case reads, run ``warm_up`` requests, and return the counted round's frames."""
    _name, records, lz4, _round, fetch = case
    batch = make_batch(records, lz4)
    if fetch:  # something to fetch: the batches, produced once
        shape = fetch if isinstance(fetch, FetchShape) else ONE_MIB_FETCH
        n = shape.partitions * shape.batches
        run_round(broker, produce_frames(batch, shape.partitions, n), n)
        run_round(broker, fetch_blob(warm_up, shape), warm_up)
        return fetch_blob(requests, shape)
    run_round(broker, produce_blob(batch, warm_up), warm_up)
    return produce_blob(batch, requests)


def response_bytes(broker: Broker, case: tuple[str, int, bool, int, bool | FetchShape]) -> int:
    """The size of one answer to ``case``'s request (its frame, size prefix included)."""
    fetch = case[4]
    shape = fetch if isinstance(fetch, FetchShape) else ONE_MIB_FETCH
    broker.sock.sendall(fetch_blob(1, shape) if fetch else
                        produce_blob(make_batch(case[1], case[2]), 1))
    return 4 + len(_read_frame(broker.sock))


def sitting(pairs: list[tuple[Path, str]], data_root: Path, batch: bytes, blob: bytes,
            requests: int, fetch: bool, rounds: int) -> list[float]:
    """Fresh brokers (off, on per tree), ``rounds`` interleaved rounds: each one's median
    microseconds a request."""
    brokers = [start(f"{label} metrics {'on' if on else 'off'}", tree, on, data_root)
               for tree, label in pairs for on in (False, True)]
    try:
        if fetch:  # the batch each Fetch reads
            for broker in brokers:
                run_round(broker, produce_blob(batch, 1), 1)
        for r in range(rounds + 2):  # two rounds warm up (segments, indexes)
            turn = brokers[r % len(brokers):] + brokers[:r % len(brokers)]
            for broker in turn[::-1] if r % 2 else turn:
                us = run_round(broker, blob, requests)
                if r >= 2:
                    broker.per_request_us.append(us)
    finally:
        for broker in brokers:
            broker.stop()
    return [statistics.median(broker.per_request_us) for broker in brokers]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tree", type=Path, help="another checkout, measured beside")
    parser.add_argument("--sittings", type=int, default=5,
                        help="fresh brokers this many times a case")
    parser.add_argument("--rounds", type=int, default=12, help="rounds a sitting")
    parser.add_argument("--case", action="append", choices=[c[0] for c in CASES],
                        help="only these cases (default: all)")
    args = parser.parse_args()
    data_root = log_dirs_root()
    pairs = [(ROOT, ROOT.name)] + ([(args.tree, args.tree.name)] if args.tree else [])
    print(f"Command: `{' '.join(['.venv/bin/python bench/metrics_cost.py', *sys.argv[1:]])}`"
          f" (log dirs in {data_root})")
    for name, records, lz4, requests, fetch in CASES:
        if args.case and name not in args.case:
            continue
        batch = make_batch(records, lz4)
        blob = fetch_blob(requests) if fetch else produce_blob(batch, requests)
        medians = [sitting(pairs, data_root, batch, blob, requests, fetch, args.rounds)
                   for _ in range(args.sittings)]
        print()
        print(f"{name}: {len(batch):,} B batches, {requests:,} requests a round, "
              f"{args.sittings} sittings of {args.rounds} rounds")
        print()
        print("| tree | off us/request | on us/request | on - off | on / off, each sitting "
              "| on / off (median) |")
        print("|---|---:|---:|---:|---|---:|")
        for i, (_, label) in enumerate(pairs):
            off = [m[2 * i] for m in medians]
            on = [m[2 * i + 1] for m in medians]
            ratios = [b / a for a, b in zip(off, on, strict=True)]
            print(f"| {label} | {statistics.median(off):.2f} | {statistics.median(on):.2f} "
                  f"| {statistics.median(b - a for a, b in zip(off, on, strict=True)):+.2f} "
                  f"| {', '.join(f'{r:.3f}' for r in ratios)} "
                  f"| {statistics.median(ratios):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
