"""Cost of down-converted fetches (Fetch v2, message format v1) against zero-copy ones (v4).

How it works: one `odradek serve` subprocess per cell; a partition is filled by
confluent-kafka (RecordBatch v2, 100 B or 1 KB records, none or lz4); then the whole
partition is read from offset 0 to the end twice: once with Fetch v4 (the broker sends
the segment bytes with sendfile), once with Fetch v2 (the broker reads them, decodes
every record and writes a v1 message set). Each request asks 1 MiB of the partition, on
a raw socket; the client walks only the entry headers, to find the next offset.
Reported per kind: MB/s and broker CPU seconds (utime+stime from /proc) per GB, both of
record payload (values), so that compressed and uncompressed cells compare.

    .venv/bin/python bench/downconversion.py                    # 100 B and 1 KB, none and lz4
    .venv/bin/python bench/downconversion.py --mb 50 --quick    # one cell
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tools.broker import cpu_seconds, free_port

REPO = Path(__file__).resolve().parents[1]


def _records(body: bytes, topic: str, version: int) -> memoryview:
    """The one partition's records in a Fetch v2/v4 response body (after the header)."""
    pos = 4 + 4 + 2 + len(topic) + 4  # throttle, topics, name, partitions
    pos += 4
    (error,) = struct.unpack_from(">h", body, pos)
    assert error == 0, error
    pos += 2 + 8
    if version >= 4:
        pos += 8 + 4  # last_stable_offset, aborted_transactions (null)
    (size,) = struct.unpack_from(">i", body, pos)
    return memoryview(body)[pos + 4 : pos + 4 + size]


def _next_offset(records: memoryview) -> int:
    """After the last whole entry: a v2 batch's last offset is base + last_offset_delta,
    a v0/v1 entry's (a wrapper's too) is its own offset."""
    pos = 0
    nxt = -1
    while pos + 12 <= len(records):
        offset, size = struct.unpack_from(">qi", records, pos)
        if pos + 12 + size > len(records):
            break
        if records[pos + 16] == 2:
            (delta,) = struct.unpack_from(">i", records, pos + 23)
            nxt = offset + delta + 1
        else:
            nxt = offset + 1
        pos += 12 + size
    assert nxt >= 0
    return nxt


def read_all(port: int, topic: str, end: int, version: int) -> None:
    name = topic.encode()
    head_v2 = struct.pack(">iii", -1, 100, 1)
    head_v4 = struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    offset = 0
    correlation = 0
    while offset < end:
        correlation += 1
        body = (head_v4 if version == 4 else head_v2) + struct.pack(
            ">ih", 1, len(name)) + name + struct.pack(">iiqi", 1, 0, offset, 1 << 20)
        header = struct.pack(">hhih", 1, version, correlation, 5) + b"bench"
        frame = header + body
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", _read(sock, 4))
        data = _read(sock, size)
        offset = _next_offset(_records(data[4:], topic, version))
    sock.close()


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("closed")
        got += k
    return bytes(buf)


def cell(mb: int, record_size: int, codec: str) -> dict[str, float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    data_dir = Path(tempfile.mkdtemp(prefix="downconv-"))
    port = free_port()
    broker = subprocess.Popen(
        [str(REPO / ".venv/bin/odradek"), "serve", "--override",
         f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data_dir}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        bootstrap = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        topic = "downconv"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                             "linger.ms": 20, "batch.size": 1 << 20})
        pool = [os.urandom(record_size // 2 + 1).hex().encode()[:record_size]
                for _ in range(1000)]  # hex of random bytes: lz4 halves it
        n = mb * 1_000_000 // record_size
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, pool[i % 1000])
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(120) == 0
        payload = n * record_size
        out: dict[str, float] = {}
        for version, name in ((4, "zero-copy (Fetch v4)"), (2, "down-converted (Fetch v2)")):
            cpu0 = cpu_seconds(broker.pid)
            t0 = time.monotonic()
            read_all(port, topic, n, version)
            elapsed = time.monotonic() - t0
            cpu = cpu_seconds(broker.pid) - cpu0
            out[f"{name} MB/s"] = payload / 1e6 / elapsed
            out[f"{name} CPU s/GB"] = cpu / (payload / 1e9)
        return out
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of payload per cell")
    parser.add_argument("--quick", action="store_true", help="one cell: 1 KB, none")
    args = parser.parse_args()
    cells = [(1000, "none")] if args.quick else [(100, "none"), (100, "lz4"), (1000, "none"),
                                                  (1000, "lz4")]
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.mb} MB per cell, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC\n")
    print("| record | codec | zero-copy MB/s | down-converted MB/s | ratio | zero-copy CPU s/GB "
          "| down-converted CPU s/GB |")
    print("|---|---|---|---|---|---|---|")
    for size, codec in cells:
        r = cell(args.mb, size, codec)
        zc, dc = r["zero-copy (Fetch v4) MB/s"], r["down-converted (Fetch v2) MB/s"]
        print(f"| {size} B | {codec} | {zc:.0f} | {dc:.1f} | {dc / zc:.3f} | "
              f"{r['zero-copy (Fetch v4) CPU s/GB']:.2f} | "
              f"{r['down-converted (Fetch v2) CPU s/GB']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
