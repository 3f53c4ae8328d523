"""Broker CPU per Produce request, without a client in the way.

Starts ``odradek serve`` from one or more source trees (this checkout by default; other
checkouts or ``git worktree``s with ``--tree``), creates a topic, and pipelines
pre-encoded one-partition Produce requests (v9, acks=1) over one connection, round robin
over the partitions, as librdkafka does when each partition's batch goes in a request of
its own. The client only sends bytes it encoded beforehand and reads the answers, so the
broker's CPU time (utime + stime from /proc) per request is what is measured. Each case
is repeated ``--rounds`` times and the median reported; trees run side by side in one
invocation so their ratio compares like with like. A second table keeps the batch size
(~19 KB) and grows the partition count from 1 to 1,000: what the partition count alone
costs the broker, apart from the smaller batches clients make when load is spread thin.

    .venv/bin/python bench/produce_requests.py
    .venv/bin/python bench/produce_requests.py --tree /tmp/old-checkout --rounds 9
    .venv/bin/python bench/produce_requests.py --metrics   # + this tree with metrics.listener
    .venv/bin/python bench/produce_requests.py --acls      # + this tree with the authorizer

``--metrics`` adds a column per tree: that tree with ``metrics.listener`` set (the request
metrics counted; the page is not read during the rounds). ``--acls`` adds one with the ACL
authorizer on (``authorizer.class.name``, and ``allow.everyone.if.no.acl.found`` so that
the requests pass): each request's Write check on its topic is made, from the decision
cache after the first.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from odradek.client.connection import request_class
from odradek.records.builder import build_batch

ROOT = Path(__file__).resolve().parents[1]

# (partitions, records of 100 B per batch): 1,000 partitions with ~19 KB batches is what
# librdkafka sends in bench/peers.py's 1,000-partition cell.
# One record of 100 B per request is the per-request cost alone (what metrics add, say).
CASES = ((1000, 170), (8, 600), (1, 9000), (1, 1))
# The same ~19 KB batches over more and more partitions: what the partition count alone
# costs, apart from the smaller batches a client makes when its load is spread thin.
SWEEP = (1, 10, 100, 1000)
SWEEP_RECORDS = 170
ROUND_CPU_S = 1.0  # broker CPU a round is sized for (from ~30 us + 0.7 ns/B a request)


def request_frame(request: Any, correlation_id: int) -> bytes:
    """Size prefix, request header v2 (both requests here are flexible), body."""
    client = b"bench"
    header = struct.pack(">hhih", request.__api_key__, request.__version__, correlation_id,
                         len(client)) + client + b"\x00"
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    payload = header + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


def create_topic(sock: socket.socket, partitions: int) -> None:
    """Topic ``t`` with ``partitions`` partitions, replication factor 1."""
    create = request_class("create_topics", 5, "CreateTopicsRequest")
    creatable = request_class("create_topics", 5, "CreatableTopic")
    sock.sendall(request_frame(create(
        topics=(creatable(name="t", num_partitions=i32(partitions),
                          replication_factor=i16(1), assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=60), validate_only=False), 1))
    _read_frame(sock)


def produce_frames(batch: bytes, partitions: int, requests: int) -> bytes:
    """``requests`` Produce requests (v9, acks=1) of ``batch`` to topic ``t``, one
    partition each, round robin over the partitions, encoded back to back."""
    produce = request_class("produce", 9, "ProduceRequest")
    topic = request_class("produce", 9, "TopicProduceData")
    partition = request_class("produce", 9, "PartitionProduceData")
    return b"".join(request_frame(produce(
        transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=30),
        topic_data=(topic(name="t", partition_data=(
            partition(index=i32(i % partitions), records=batch),)),)), 100 + i)
        for i in range(requests))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        body += chunk
    return bytes(body)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


VARIANTS = {
    "": (),
    "metrics on": ("metrics.listener=http://127.0.0.1:{port}",),
    "acls on": ("authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found=true"),
}


def measure(tree: Path, partitions: int, records: int, requests: int, rounds: int,
            variant: str = "", repeat: int = 1) -> float:
    """Median broker CPU seconds per request; a round sends the ``requests`` encoded
    requests ``repeat`` times."""
    port = _free_port()
    extra = [part for override in VARIANTS[variant]
             for part in ("--override", override.format(port=_free_port()))]
    data = Path(tempfile.mkdtemp(dir=ROOT / ".bench-tmp"))
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "python"), "-c",
         "from odradek.cli.main import main; main()", "serve", "--log-level", "warning",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={data}", *extra], env=env,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        sock = socket.create_connection(("127.0.0.1", port))
        create_topic(sock, partitions)
        batch = build_batch([(None, b"x" * 100)] * records, timestamp=int(time.time() * 1000))
        blob = produce_frames(batch, partitions, requests)
        per_request = []
        for _ in range(rounds + 1):  # the first round warms up (new segments, indexes)
            before = _cpu_seconds(proc.pid)
            sender = threading.Thread(target=_send_repeatedly, args=(sock, blob, repeat))
            sender.start()
            for _ in range(requests * repeat):
                _read_frame(sock)
            sender.join()
            per_request.append((_cpu_seconds(proc.pid) - before) / (requests * repeat))
        sock.close()
        return statistics.median(per_request[1:])
    finally:
        proc.terminate()
        proc.wait(120)
        shutil.rmtree(data, ignore_errors=True)


def _send_repeatedly(sock: socket.socket, blob: bytes, repeat: int) -> None:
    for _ in range(repeat):
        sock.sendall(blob)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tree", action="append", type=Path, default=[],
                        help="another source tree to measure beside this one")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--metrics", action="store_true",
                        help="also each tree with metrics.listener set")
    parser.add_argument("--acls", action="store_true",
                        help="also each tree with the ACL authorizer on")
    args = parser.parse_args()
    (ROOT / ".bench-tmp").mkdir(exist_ok=True)
    trees: list[tuple[Path, str]] = []
    for tree in (ROOT, *args.tree):
        trees.append((tree, ""))
        if args.metrics:
            trees.append((tree, "metrics on"))
        if args.acls:
            trees.append((tree, "acls on"))
    command = " ".join([".venv/bin/python bench/produce_requests.py", *sys.argv[1:]])
    print(f"Command: `{command}`")
    print()
    print(_header(trees))
    print("|---:|---:|" + "---:|" * len(trees))
    for partitions, records in CASES:
        print(_row(trees, partitions, records, args.rounds), flush=True)
    size = len(build_batch([(None, b"x" * 100)] * SWEEP_RECORDS, timestamp=0))
    print()
    print(f"Partition count alone ({size:,} B batches, one partition per request):")
    print()
    print(_header(trees))
    print("|---:|---:|" + "---:|" * len(trees))
    for partitions in SWEEP:
        print(_row(trees, partitions, SWEEP_RECORDS, args.rounds), flush=True)
    return 0


def _header(trees: list[tuple[Path, str]]) -> str:
    return "| partitions | batch | " + " | ".join(
        f"{t.name}{' ' + v if v else ''} us/request (CPU s/GB)" for t, v in trees) + " |"


def _row(trees: list[tuple[Path, str]], partitions: int, records: int, rounds: int) -> str:
    size = len(build_batch([(None, b"x" * 100)] * records, timestamp=0))
    # About ROUND_CPU_S of broker CPU a round, so that /proc's 10 ms clock ticks are
    # under 1 % of it; the encoded requests held in memory stay under ~60 MB, sent
    # again as often as it takes.
    wanted = max(50, int(ROUND_CPU_S / (30e-6 + size * 0.7e-9)))
    requests = max(50, min(wanted, 60_000_000 // size))
    repeat = -(-wanted // requests)
    cells = []
    for tree, variant in trees:
        seconds = measure(tree, partitions, records, requests, rounds, variant, repeat)
        cells.append(f"{seconds * 1e6:,.1f} ({seconds / size * 1e9:.2f})")
    return f"| {partitions} | {size:,} B | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    raise SystemExit(main())
