"""Compaction throughput and memory, beside a plain sequential read of the same log.

Builds a compacted partition log (uncompressed batches of 50 records, 100-byte values,
``--keys`` distinct keys updated over ``--records`` records, 1 MiB segments), then in the
same run measures:

- a plain sequential read of every segment (``os.pread`` 1 MiB at a time, page cache warm),
- a sequential read that also decodes every record (what phase 1 must at least do),
- one cleaning pass with a map large enough for the dirty section (MB/s of log cleaned =
  bytes read by both phases / wall time),
- the offset map's bytes per entry (slot size, and per entry at the load factor),
- with ``--memory-check``: a log with many more distinct keys than a small map holds,
  cleaned in several passes, reporting the peak RSS growth (VmHWM reset before cleaning)
  against the map budget. Prints one JSON line with every figure.

    .venv/bin/python bench/compaction.py [--quick] [--memory-check]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from odradek.records.batch import iter_batches, iter_records
from odradek.records.builder import BatchBuilder
from odradek.storage.cleaner import Cleaner, LogToClean
from odradek.storage.config import LogConfig
from odradek.storage.log import PartitionLog
from odradek.storage.offset_map import ENTRY_SIZE, SkimpyOffsetMap

MiB = 1 << 20


def build_log(root: Path, records: int, keys: int, name: str = "bench-0") -> PartitionLog:
    cfg = LogConfig.build({}, {"cleanup.policy": "compact", "segment.bytes": MiB})
    plog = PartitionLog(root / name, cfg)
    value = b"v" * 100
    n = 0
    while n < records:
        builder = BatchBuilder()
        for _ in range(min(50, records - n)):
            builder.append(f"key-{(n * 7919) % keys:09d}".encode(), value, 1_700_000_000_000)
            n += 1
        plog.append_as_leader(builder.build())
    plog.roll()
    return plog


def sequential_read(plog: PartitionLog, decode: bool) -> tuple[int, float]:
    started = time.perf_counter()
    total = 0
    for segment in plog.segments:
        pos = 0
        while pos < segment.size:
            data = os.pread(segment.fd, MiB, pos)
            used = 0
            for header in iter_batches(data):
                if decode:
                    for _ in iter_records(memoryview(data)[header.position : header.position
                                                           + header.size]):
                        pass
                used = header.position + header.size
            pos += used or len(data)
            total += used or len(data)
    return total, time.perf_counter() - started


def candidate(plog: PartitionLog, first_dirty: int) -> LogToClean:
    end = plog.active_segment.base_offset
    return LogToClean(plog, first_dirty, end, 0, plog.size_in_bytes)


def vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def reset_hwm() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def memory_check(root: Path, records: int, keys: int, budget: int) -> dict[str, float | int]:
    plog = build_log(root, records, keys, name="memory-0")
    cleaner = Cleaner(SkimpyOffsetMap(budget), io_buffer_size=256 * 1024)
    reset_hwm()
    before = vm_hwm_kib()
    first_dirty = 0
    passes = 0
    while first_dirty < plog.active_segment.base_offset:
        result = cleaner.clean(candidate(plog, first_dirty))
        for segment in result.old_segments:
            segment.delete_files()
        first_dirty = result.end_offset
        passes += 1
    after = vm_hwm_kib()
    distinct = len({r.key for s in plog.segments for b in iter_batches(
        s.read_bytes(0, s.size)) for r in iter_records(s.read_bytes(b.position, b.size))})
    return {"memory_keys": keys, "memory_records": records, "map_budget_bytes": budget,
            "map_capacity_entries": cleaner.offset_map.capacity, "passes": passes,
            "distinct_keys_after": distinct,
            "peak_rss_growth_bytes": (after - before) * 1024}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=40_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory-check", action="store_true")
    parser.add_argument("--memory-only", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.records, args.keys = 60_000, 6_000
    scratch = Path(".bench-tmp").absolute()
    scratch.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="compaction-", dir=scratch))
    out: dict[str, float | int | str] = {"python": sys.version.split()[0]}
    try:
        if not args.memory_only:
            plog = build_log(root, args.records, args.keys)
            size = plog.size_in_bytes
            sequential_read(plog, False)  # warm the page cache
            _, plain = sequential_read(plog, False)
            _, decoded = sequential_read(plog, True)
            cleaner = Cleaner(SkimpyOffsetMap(ENTRY_SIZE * args.keys * 4))
            result = cleaner.clean(candidate(plog, 0))
            s = result.stats
            cleaned_mb = (s.map_bytes_read + s.bytes_read) / MiB
            out.update({
                "log_bytes": size, "records": args.records, "keys": args.keys,
                "plain_read_MBps": round(size / MiB / plain, 1),
                "decoding_read_MBps": round(size / MiB / decoded, 1),
                "clean_MBps_of_log": round(size / MiB / s.elapsed, 2),
                "clean_MBps_read_both_phases": round(cleaned_mb / s.elapsed, 2),
                "clean_seconds": round(s.elapsed, 3),
                "phase1_seconds": round(s.map_done - s.started, 3),
                "bytes_after": s.bytes_written,
                "records_after": s.records_written,
                "map_bytes_per_slot": cleaner.offset_map.bytes_per_entry,
                "map_bytes_per_entry_at_load_factor": round(
                    ENTRY_SIZE / cleaner.offset_map.load_factor, 2),
                "clean_vs_plain_read": round(plain / s.elapsed, 4),
            })
        if args.memory_check or args.memory_only:
            out.update(memory_check(root, 150_000 if not args.quick else 60_000,
                                    100_000 if not args.quick else 40_000, 240 * 1024))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
