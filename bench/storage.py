"""Storage throughput against ``dd`` on the same disk, in the same run.

Usage: ``.venv/bin/python bench/storage.py [--quick] [--mib N] [--dir D] [--profile]``

What it measures (MB/s = 10^6 bytes per second, as dd prints):
- write: ``dd if=/dev/zero of=F bs=1M count=N`` (buffered, and with ``conv=fdatasync``)
  against ``PartitionLog.append_as_leader`` of pre-built batches of 1 KiB, 16 KiB, 64 KiB
  and 1 MiB (the batches are built before the clock starts; the append validates each batch
  — CRC32C over all its bytes — copies the request once, rewrites offsets and ``pwrite``s
  it), plus the 1 MiB case followed by a flush (``fsync``) against dd's fdatasync variant.
- read: ``dd if=F of=/dev/null bs=1M`` against walking the whole log with
  ``PartitionLog.read(offset, max_bytes=1 MiB)`` + ``os.pread`` of the region (the consumer
  then parses the batch headers to find the next offset), and the same walk with
  ``os.sendfile`` to /dev/null instead of ``pread`` (what the broker does for a fetch).
  Each read is measured cold (pages evicted with ``posix_fadvise(DONTNEED)`` after an
  fsync) and warm (from the page cache).

Files live under ``/work/main/.bench-tmp`` (a real disk; /tmp may be tmpfs), removed at the
end. The table is printed and written to ``bench/results/storage.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from odradek.records.batch import iter_batches
from odradek.records.builder import BatchBuilder
from odradek.storage import LogConfig, PartitionLog

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".bench-tmp"
RESULTS = ROOT / "bench" / "results" / "storage.md"
KIB = 1024
MIB = 1024 * 1024
BATCH_SIZES = (1 * KIB, 16 * KIB, 64 * KIB, 1 * MIB)
RECORD_VALUE = 1000  # bytes per record value; a batch holds size // 1 KiB records
POOL = 8  # distinct pre-built batches per size, appended round robin
# max.message.bytes is 1048588 by default: a "1 MiB" batch is just under 1 MiB.


@dataclass
class Row:
    section: str
    case: str
    mib: float
    seconds: float
    baseline: float | None = None  # MB/s of the dd case it is compared with
    note: str = ""

    @property
    def mbps(self) -> float:
        return self.mib * MIB / self.seconds / 1e6

    @property
    def ratio(self) -> str:
        if self.baseline is None:
            return "1.00 (baseline)"
        return f"{self.mbps / self.baseline:.2f}"


def _sync() -> None:
    os.sync()


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _dd(args: list[str]) -> float:
    _sync()
    start = time.perf_counter()
    subprocess.run(["dd", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def build_pool(target: int) -> list[bytes]:
    """POOL batches of about ``target`` bytes: target // 1 KiB records of ~1000 bytes."""
    count = max(1, target // KIB)
    now = int(time.time() * 1000)
    pool: list[bytes] = []
    for i in range(POOL):
        # Size the values so the whole batch lands just under target.
        value_len = RECORD_VALUE
        for _ in range(3):
            builder = BatchBuilder(producer_id=-1)
            value = bytes([65 + i]) * value_len
            for n in range(count):
                builder.append(b"key-%06d" % n, value, now)
            batch = builder.build()
            if len(batch) <= target and target - len(batch) < count * 2 + 16:
                break
            value_len += (target - len(batch)) // count
            value_len = max(1, value_len)
        pool.append(batch)
    return pool


def open_log(base: Path, name: str) -> PartitionLog:
    config = LogConfig.build({}, {"segment.bytes": 1 << 30})
    return PartitionLog(base / f"{name}-0", config)


def append_case(base: Path, pool: list[bytes], total: int, flush: bool,
                profile: cProfile.Profile | None) -> tuple[float, int, PartitionLog]:
    """Append pre-built batches of ``pool`` round robin until ``total`` bytes; returns the
    time taken, the bytes appended and the (open) log."""
    batch_size = len(pool[0])
    appends = max(1, total // batch_size)
    log = open_log(base, f"append{batch_size}{'f' if flush else ''}")
    append = log.append_as_leader
    _sync()
    if profile is not None:
        profile.enable()
    start = time.perf_counter()
    for n in range(appends):
        append(pool[n % POOL])
    if flush:
        log.flush()
    elapsed = time.perf_counter() - start
    if profile is not None:
        profile.disable()
    return elapsed, appends * batch_size, log


def read_walk(log: PartitionLog, max_bytes: int) -> tuple[float, int, list[int]]:
    """Walk the log with read + pread; returns time, bytes, and the fetch offsets used."""
    offsets: list[int] = []
    end = log.log_end_offset
    offset = log.log_start_offset
    total = 0
    read = log.read
    pread = os.pread
    start = time.perf_counter()
    while offset < end:
        offsets.append(offset)
        info = read(offset, max_bytes)
        data = pread(info.fd, info.size, info.position)
        total += len(data)
        last = None
        for header in iter_batches(data):
            last = header
        if last is None:
            break
        offset = last.next_offset
    return time.perf_counter() - start, total, offsets


def sendfile_walk(log: PartitionLog, max_bytes: int, offsets: list[int]) -> tuple[float, int]:
    out = os.open(os.devnull, os.O_WRONLY)
    read = log.read
    total = 0
    try:
        start = time.perf_counter()
        for offset in offsets:
            info = read(offset, max_bytes)
            sent = 0
            while sent < info.size:
                n = os.sendfile(out, info.fd, info.position + sent, info.size - sent)
                if n == 0:
                    break
                sent += n
            total += sent
        return time.perf_counter() - start, total
    finally:
        os.close(out)


def _segment_files(log: PartitionLog) -> list[Path]:
    return [s.log_path for s in log.segments]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _spread(values: list[float], nbytes: float) -> str:
    fastest, slowest = min(values), max(values)
    return f"{nbytes / slowest / 1e6:.0f}-{nbytes / fastest / 1e6:.0f} MB/s over {len(values)} runs"


def _warm_memory(base: Path, mib: int) -> None:
    """Write and delete a file twice the case size first: in a VM, pages the guest never
    touched cost a host fault each on first use, which would slow whichever case runs first."""
    warm = base / "warm.bin"
    subprocess.run(["dd", "if=/dev/zero", f"of={warm}", "bs=1M", f"count={2 * mib}"],
                   check=True, capture_output=True)
    _sync()
    warm.unlink()


def run(args: argparse.Namespace) -> list[Row]:
    mib = args.mib if args.mib else (64 if args.quick else 256)
    rounds = args.rounds if args.rounds else (1 if args.quick else 3)
    total = mib * MIB
    base = Path(args.dir) / f"storage-{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    profiles: dict[str, cProfile.Profile] = {}
    pools = {size: build_pool(size) for size in BATCH_SIZES}
    try:
        _warm_memory(base, mib)
        dd_file = base / "dd.bin"
        times: dict[str, list[float]] = {}
        written: dict[str, int] = {}
        # Interleaved rounds: every case runs once per round, in the same conditions; each
        # file is deleted after its case so the next one reuses the same page-cache pages.
        for r in range(rounds):
            for sync_variant in (False, True):
                extra = ["conv=fdatasync"] if sync_variant else []
                t = _dd(["if=/dev/zero", f"of={dd_file}", "bs=1M", f"count={mib}", *extra])
                times.setdefault(f"dd{sync_variant}", []).append(t)
                dd_file.unlink()
                _sync()
            for size in BATCH_SIZES:
                for flush in (False, True) if size == MIB else (False,):
                    prof = None
                    if args.profile and r == 0 and not flush:
                        prof = cProfile.Profile()
                        profiles[f"append {size // KIB} KiB"] = prof
                    elapsed, nbytes, log = append_case(base, pools[size], total, flush, prof)
                    key = f"{size}{flush}"
                    times.setdefault(key, []).append(elapsed)
                    written[key] = nbytes
                    log.close()
                    log.delete_files()
                    _sync()
        dd_write = Row("write", f"dd if=/dev/zero bs=1M count={mib} (buffered)", mib,
                       _median(times["ddFalse"]), None, _spread(times["ddFalse"], total))
        dd_sync = Row("write", f"dd if=/dev/zero bs=1M count={mib} conv=fdatasync", mib,
                      _median(times["ddTrue"]), None, _spread(times["ddTrue"], total))
        rows += [dd_write, dd_sync]
        for size in BATCH_SIZES:
            label = f"{size // KIB} KiB" if size < MIB else "1 MiB"
            batch = len(pools[size][0])
            for flush in (False, True) if size == MIB else (False,):
                key = f"{size}{flush}"
                nbytes = written[key]
                case = f"PartitionLog.append_as_leader, {label} batches ({batch} B)"
                if flush:
                    case += " + flush (fsync)"
                rows.append(Row(
                    "write", case, nbytes / MIB, _median(times[key]),
                    (dd_sync if flush else dd_write).mbps,
                    f"{nbytes // batch} appends; {_spread(times[key], nbytes)}"
                    + ("; vs dd conv=fdatasync" if flush else ""),
                ))

        logs: dict[int, PartitionLog] = {}
        for size in (MIB, 16 * KIB):
            logs[size] = append_case(base, pools[size], total, False, None)[2]
        # -- reads ---------------------------------------------------------------------
        for size in (MIB, 16 * KIB):
            log = logs[size]
            log.flush()
            label = "1 MiB" if size == MIB else f"{size // KIB} KiB"
            seg = _segment_files(log)[0]
            seg_bytes = seg.stat().st_size
            for state in ("cold", "warm"):
                cold = state == "cold"
                dd_t: list[float] = []
                pread_t: list[float] = []
                send_t: list[float] = []
                offsets: list[int] = []
                nbytes = 0
                send_error = ""
                for r in range(rounds):
                    if cold:
                        _evict(seg)
                    dd_t.append(_dd([f"if={seg}", "of=/dev/null", "bs=1M"]))
                    if cold:
                        _evict(seg)
                    prof = None
                    if args.profile and not cold and r == 0:
                        prof = cProfile.Profile()
                        profiles[f"read+pread {label} batches (warm)"] = prof
                        prof.enable()
                    t, nbytes, offsets = read_walk(log, MIB)
                    if prof is not None:
                        prof.disable()
                    pread_t.append(t)
                    if cold:
                        _evict(seg)
                    try:
                        send_t.append(sendfile_walk(log, MIB, offsets)[0])
                    except OSError as exc:
                        send_error = str(exc)
                dd_read = Row("read", f"dd if=<{label}-batch segment> of=/dev/null bs=1M "
                              f"({state})", seg_bytes / MIB, _median(dd_t), None,
                              _spread(dd_t, seg_bytes))
                rows.append(dd_read)
                rows.append(Row("read", f"PartitionLog.read(1 MiB) + pread, {label} batches "
                                f"({state})", nbytes / MIB, _median(pread_t), dd_read.mbps,
                                f"{len(offsets)} fetches; {_spread(pread_t, nbytes)}"))
                if send_t:
                    rows.append(Row("read", f"PartitionLog.read(1 MiB) + sendfile→/dev/null, "
                                    f"{label} batches ({state})", nbytes / MIB,
                                    _median(send_t), dd_read.mbps,
                                    f"{len(offsets)} fetches; {_spread(send_t, nbytes)}"))
                else:
                    rows.append(Row("read", f"sendfile ({state})", 0.0, 1.0, dd_read.mbps,
                                    f"n/a: {send_error}"))
        for log in logs.values():
            log.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if profiles:
        for name, prof in profiles.items():
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
            print(f"\n### profile: {name}\n{buf.getvalue()}", file=sys.stderr)
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| section | case | MiB | seconds | MB/s | ratio to dd | note |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.section} | {r.case} | {r.mib:.0f} | {r.seconds:.3f} | {r.mbps:.0f} | "
            f"{r.ratio} | {r.note} |"
        )
    return "\n".join(lines)


def environment(dir: Path) -> str:
    df = subprocess.run(["df", "-hT", str(dir)], capture_output=True, text=True).stdout
    device = df.strip().splitlines()[-1].split()[:2] if df.strip() else ["?", "?"]
    return (
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, files under {dir} "
        f"({device[0]}, {device[1]}), {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true",
                        help="64 MiB per case and one round instead of 256 MiB and three")
    parser.add_argument("--rounds", type=int, default=0,
                        help="write rounds (the median is reported)")
    parser.add_argument("--mib", type=int, default=0, help="MiB per case (overrides --quick)")
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help="where the files go")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the appends and the warm reads (to stderr)")
    parser.add_argument("--no-write-results", action="store_true",
                        help=f"do not write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    rows = run(args)
    command = " ".join([".venv/bin/python", "bench/storage.py", *(argv or sys.argv[1:])])
    report = f"{environment(Path(args.dir))}\n\nCommand: `{command}`\n\n{table(rows)}\n"
    print(report)
    if not args.no_write_results:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text("# Storage benchmark\n\n" + report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
