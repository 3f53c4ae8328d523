"""Descriptors a LogManager holds per partition: idle, after a produce, after fetching
every old segment, and after a restart. Run with either tree first on PYTHONPATH to
compare; figures are in docs/architecture.md (storage)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from odradek.records.builder import BatchBuilder
from odradek.storage.config import LogConfig
from odradek.storage.manager import LogManager, TopicPartition

PARTITIONS = 200
BATCHES = 40  # ~10 segments per partition at segment.bytes=2048


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def batch(i: int) -> bytes:
    builder = BatchBuilder()
    for n in range(5):
        builder.append(f"k{n}".encode(), b"v" * 40, 1_700_000_000_000 + i)
    return builder.build()


def main() -> None:
    cfg = LogConfig.build({}, {"segment.bytes": 2048, "index.interval.bytes": 128})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manager = LogManager([root], {})
        manager.startup()
        base = fds()
        logs = [manager.get_or_create_log(TopicPartition("t", p), cfg) for p in range(PARTITIONS)]
        idle = fds() - base
        for plog in logs:
            for i in range(BATCHES):
                plog.append_as_leader(batch(i))
        produced = fds() - base
        for plog in logs:
            offset = 0
            while offset < plog.log_end_offset:
                info = plog.read(offset, 1 << 20)
                info.read()
                offset = info.log_end_offset if not info.size else offset + 5
        fetched = fds() - base
        segments = sum(len(plog.segments) for plog in logs)
        del logs, plog, info
        manager.shutdown()
        after_shutdown = fds() - base
        restarted = LogManager([root], {})
        restarted.startup()
        loaded = fds() - base
        restarted.shutdown()
    p = PARTITIONS
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'this tree'}: {p} partitions, "
          f"{segments} segments")
    for name, n in (("idle", idle), ("after produce", produced),
                    ("after fetch of old segments", fetched), ("after restart", loaded),
                    ("after shutdown", after_shutdown)):
        print(f"  {name:30s} {n:6d} fds  {n / p:5.2f} per partition")


if __name__ == "__main__":
    main()
