"""Which log to clean next, cleaner threads and their health (Kafka's LogCleanerManager and
LogCleaner).

How it works:
- **Selection** (:class:`LogCleanerManager`): among logs whose ``cleanup.policy`` includes
  ``compact`` and that are neither being cleaned nor backing off after a failure, the
  dirty section runs from the log's entry in ``cleaner-offset-checkpoint`` (Kafka's file,
  one per log dir; reset to the log start offset when out of range) to the first
  uncleanable offset: the active segment's base, the last stable offset (at most the high
  watermark: no open transaction is compacted), or the first segment
  whose newest record is younger than ``min.compaction.lag.ms``. The log with the highest
  dirty ratio (dirty bytes / total bytes, by whole segments) at or above
  ``min.cleanable.dirty.ratio`` wins; a log whose oldest dirty record is older than
  ``max.compaction.lag.ms``, or whose earliest tombstone delete horizon has passed, is
  taken first whatever its ratio. After a pass the checkpoint moves to the offset the
  pass covered (less than the dirty end when the offset map filled).
- **Threads** (:class:`LogCleaner`): ``log.cleaner.threads`` daemon threads, each with its
  own offset map of ``log.cleaner.dedupe.buffer.size / threads`` bytes, loop: grab the
  filthiest log, clean it, sleep ``log.cleaner.backoff.ms`` when there is nothing to do.
  CPU-heavy decoding and copying run there, never on the broker's event loop.
- **Failure is loud** (never a silently dead thread). A pass that fails is logged
  at ERROR with the partition and the cause, counted, and the log is marked *uncleanable*
  with an exponential backoff (from ``log.cleaner.backoff.ms``, capped at 10 minutes)
  before it is retried; other logs keep being cleaned. The thread loop itself catches
  everything; should a thread die anyway, :meth:`LogCleaner.check_threads` (run by the
  broker every few seconds) logs it at CRITICAL, counts it and starts a replacement.
- **Dynamic configs**: :meth:`LogCleaner.reconfigure` applies new ``log.cleaner.*`` values
  (threads, backoff, buffers, I/O rate) as Kafka's LogCleaner.reconfigure does: the threads
  stop (a pass in progress is aborted and redone later), new ones start.
- **Health view**: ``cleaner-status.json`` in the first online log dir, rewritten
  atomically after every pass or failure and by ``check_threads``: threads alive/dead,
  passes, failures, uncleanable partitions with their reason, Kafka's metric names
  (``max-dirty-percent``, ``uncleanable-partitions-count``, ``DeadThreadCount`` …) and
  ``healthy``. ``odradek status --data-dir DIR`` prints it and exits non-zero when unhealthy.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.storage import checkpoint, files
from odradek.storage.cleaner import (
    Cleaner,
    CleanerAbortedError,
    CleanResult,
    LogToClean,
)
from odradek.storage.errors import KafkaStorageError, StorageError
from odradek.storage.log import PartitionLog
from odradek.storage.manager import LogManager, TopicPartition
from odradek.storage.offset_map import SkimpyOffsetMap

log = logging.getLogger(__name__)

STATUS_FILE = "cleaner-status.json"
MAX_RETRY_BACKOFF_MS = 600_000
# Kafka caps one thread's map at 2 GiB (a Java array); we keep the same bound.
MAX_MAP_BYTES_PER_THREAD = (1 << 31) - 1


@dataclass(slots=True)
class Uncleanable:
    reason: str
    failures: int
    since_ms: int
    retry_at_ms: int


class LogCleanerManager:
    def __init__(self, log_manager: LogManager, time_ms: Callable[[], int]) -> None:
        self.log_manager = log_manager
        self.time_ms = time_ms
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self.uncleanable: dict[TopicPartition, Uncleanable] = {}
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._horizons: dict[TopicPartition, int] = {}
        self.max_dirty_ratio = 0.0

    # -- checkpoints ---------------------------------------------------------------------
    def checkpoints(self, log_dir: Path) -> dict[TopicPartition, int]:
        found = self._checkpoints.get(log_dir)
        if found is None:
            path = log_dir / files.CLEANER_OFFSET_CHECKPOINT
            try:
                raw = checkpoint.read_offsets(path)
            except (checkpoint.CheckpointError, OSError) as exc:
                log.error("%s is unreadable, every log there starts dirty: %s", path, exc)
                raw = {}
            found = {TopicPartition(t, p): o for (t, p), o in raw.items()}
            self._checkpoints[log_dir] = found
        return found

    def first_dirty_offset(self, tp: TopicPartition, partition_log: PartitionLog) -> int:
        offset = self.checkpoints(partition_log.log_dir).get(tp, partition_log.log_start_offset)
        if not partition_log.log_start_offset <= offset <= partition_log.log_end_offset:
            return partition_log.log_start_offset
        return offset

    def _write_checkpoint(self, log_dir: Path) -> None:
        offsets = self.checkpoints(log_dir)
        # list() copies in one step: the loop thread may add a log meanwhile.
        live = {tp for tp, lg in list(self.log_manager.logs.items()) if lg.log_dir == log_dir}
        for tp in [tp for tp in offsets if tp not in live]:
            del offsets[tp]
        with self.log_manager.failure_channel.guard(log_dir, "writing the cleaner checkpoint"):
            checkpoint.write_offsets(
                log_dir / files.CLEANER_OFFSET_CHECKPOINT,
                {(tp.topic, tp.partition): o for tp, o in offsets.items()},
            )

    # -- selection -----------------------------------------------------------------------
    def candidate(
        self, tp: TopicPartition, partition_log: PartitionLog, now: int
    ) -> LogToClean | None:
        config = partition_log.config
        segments = list(partition_log.segments)
        first_dirty = self.first_dirty_offset(tp, partition_log)
        # The last stable offset: an open transaction's records are never compacted (they
        # may still be aborted), as Kafka's firstUnstableOffset bound.
        uncleanable = min(segments[-1].base_offset, partition_log.last_stable_offset)
        min_lag = int(config["min.compaction.lag.ms"])
        if min_lag > 0:
            for segment in segments[:-1]:
                if segment.next_offset > first_dirty and segment.largest_timestamp > now - min_lag:
                    uncleanable = min(uncleanable, segment.base_offset)
                    break
        first_dirty = min(first_dirty, uncleanable)
        clean_bytes = sum(s.size for s in segments if s.next_offset <= first_dirty)
        dirty_segments = [
            s for s in segments[:-1] if s.next_offset > first_dirty and s.base_offset < uncleanable
        ]
        dirty_bytes = sum(s.size for s in dirty_segments)
        forced = False
        max_lag = int(config["max.compaction.lag.ms"])
        if dirty_segments and dirty_bytes:
            first = dirty_segments[0]
            born = first.rolling_based_timestamp
            if born is None or born < 0:
                born = first.created_ms
            forced = now - born > max_lag
        horizon = self._horizons.get(tp, -1)
        if 0 <= horizon <= now and clean_bytes:
            forced = True
        if not forced and not dirty_bytes:
            return None
        return LogToClean(partition_log, first_dirty, uncleanable, clean_bytes, dirty_bytes,
                          forced)

    def grab_filthiest_log(self) -> tuple[TopicPartition, LogToClean] | None:
        now = self.time_ms()
        with self._lock:
            best: tuple[TopicPartition, LogToClean] | None = None
            max_ratio = 0.0
            for tp, partition_log in list(self.log_manager.logs.items()):
                if not partition_log.config.compact or tp in self._in_progress:
                    continue
                failed = self.uncleanable.get(tp)
                if failed is not None and now < failed.retry_at_ms:
                    continue
                try:
                    found = self.candidate(tp, partition_log, now)
                except (OSError, KafkaStorageError, IndexError) as exc:
                    log.debug("skipping %s this round: %s", tp, exc)
                    continue
                if found is None:
                    continue
                ratio = found.cleanable_ratio
                max_ratio = max(max_ratio, ratio)
                threshold = float(partition_log.config["min.cleanable.dirty.ratio"])
                if not found.forced and ratio < threshold:
                    continue
                if best is None or (found.forced, ratio) > (best[1].forced,
                                                            best[1].cleanable_ratio):
                    best = (tp, found)
            self.max_dirty_ratio = max_ratio
            if best is not None:
                self._in_progress.add(best[0])
            return best

    # -- outcome -------------------------------------------------------------------------
    def done_cleaning(self, tp: TopicPartition, partition_log: PartitionLog,
                      result: CleanResult) -> None:
        with self._lock:
            self._in_progress.discard(tp)
            self.uncleanable.pop(tp, None)
            if result.min_delete_horizon_ms >= 0:
                self._horizons[tp] = result.min_delete_horizon_ms
            else:
                self._horizons.pop(tp, None)
            if self.log_manager.logs.get(tp) is partition_log:
                self.checkpoints(partition_log.log_dir)[tp] = result.end_offset
                self._write_checkpoint(partition_log.log_dir)

    def abort(self, tp: TopicPartition) -> None:
        with self._lock:
            self._in_progress.discard(tp)

    def mark_failed(self, tp: TopicPartition, reason: str, backoff_ms: int) -> Uncleanable:
        now = self.time_ms()
        with self._lock:
            self._in_progress.discard(tp)
            previous = self.uncleanable.get(tp)
            failures = previous.failures + 1 if previous else 1
            delay = min(max(backoff_ms, 1) * (1 << min(failures - 1, 20)), MAX_RETRY_BACKOFF_MS)
            entry = Uncleanable(reason, failures, previous.since_ms if previous else now,
                                now + delay)
            self.uncleanable[tp] = entry
            return entry


class LogCleaner:
    def __init__(
        self,
        log_manager: LogManager,
        broker_config: Mapping[str, Any] | None = None,
        time_ms: Callable[[], int] | None = None,
    ) -> None:
        self.log_manager = log_manager
        self._read_config(broker_config)
        self.time_ms = time_ms or log_manager.time_ms
        self.manager = LogCleanerManager(log_manager, self.time_ms)
        self.stop_event = threading.Event()
        self._threads: list[threading.Thread | None] = []
        self._cleaners: list[Cleaner] = []
        self._status_lock = threading.Lock()
        # Guards starting threads (startup, check_threads, reconfigure) against each other;
        # held only briefly, never while joining threads.
        self._lifecycle_lock = threading.Lock()
        self._reconfigure_lock = threading.Lock()
        self._closed = False
        self.passes = 0
        self.failures = 0
        self.thread_crashes = 0
        self.last_cleaned: dict[str, dict[str, Any]] = {}
        self.last_run_ms = -1
        self.max_clean_seconds = 0.0
        self.max_buffer_utilization = 0.0
        self.last_recopy_ratio = 0.0
        self.last_error: str | None = None

    def _read_config(self, broker_config: Mapping[str, Any] | None) -> None:
        cfg = dict(broker_config or {})

        def get(key: str, default: Any, kind: Callable[[Any], Any]) -> Any:
            value = cfg.get(key, default)
            if isinstance(value, str) and kind is bool:
                return value.strip().lower() == "true"
            return kind(value)

        self.enabled: bool = get("log.cleaner.enable", True, bool)
        self.num_threads: int = get("log.cleaner.threads", 1, int)
        self.backoff_ms: int = get("log.cleaner.backoff.ms", 15000, int)
        self.dedupe_buffer_size: int = get("log.cleaner.dedupe.buffer.size", 134217728, int)
        self.io_buffer_size: int = get("log.cleaner.io.buffer.size", 524288, int)
        self.load_factor: float = get("log.cleaner.io.buffer.load.factor", 0.9, float)
        self.max_io_bytes_per_second: float = get(
            "log.cleaner.io.max.bytes.per.second", 1.7976931348623157e308, float
        )

    # -- life cycle ----------------------------------------------------------------------
    @property
    def map_bytes_per_thread(self) -> int:
        per = self.dedupe_buffer_size // max(1, self.num_threads)
        return min(per, MAX_MAP_BYTES_PER_THREAD)

    def new_cleaner(self) -> Cleaner:
        return Cleaner(
            SkimpyOffsetMap(self.map_bytes_per_thread, self.load_factor),
            self.io_buffer_size // 2,  # Kafka splits it between the read and write buffers
            self.max_io_bytes_per_second,
            self.stop_event,
        )

    def startup(self) -> None:
        with self._lifecycle_lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if not self.enabled or self.num_threads < 1:
            log.info("log cleaner disabled (log.cleaner.enable=%s, log.cleaner.threads=%d)",
                     self.enabled, self.num_threads)
            self.write_status()
            return
        for i in range(self.num_threads):
            self._cleaners.append(self.new_cleaner())
            self._threads.append(None)
            self._start_thread(i)
        log.info("log cleaner started: %d thread(s), %d-byte offset map each",
                 self.num_threads, self.map_bytes_per_thread)
        self.write_status()

    def _start_thread(self, i: int) -> None:
        thread = threading.Thread(target=self._run, args=(i,), daemon=True,
                                  name=f"kafka-log-cleaner-thread-{i}")
        self._threads[i] = thread
        thread.start()

    def shutdown(self, timeout: float = 30.0) -> None:
        with self._lifecycle_lock:
            self._closed = True
        self._stop_threads(timeout)
        self.write_status()

    def _stop_threads(self, timeout: float) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    def reconfigure(self, broker_config: Mapping[str, Any], timeout: float = 30.0) -> None:
        """New cleaner configs at runtime (dynamic broker configs), as Kafka's
        LogCleaner.reconfigure: stop the threads (a cleaning in progress is aborted and
        redone later, as at shutdown), read the configs again, start new threads. Blocks
        while the threads stop: call it off the event loop."""
        with self._reconfigure_lock:
            self._stop_threads(timeout)
            with self._lifecycle_lock:
                if self._closed:
                    return
                self._read_config(broker_config)
                self.stop_event = threading.Event()
                self._threads = []
                self._cleaners = []
                self._start_locked()
            log.info("log cleaner reconfigured: %d thread(s), %d-byte offset map each",
                     self.num_threads, self.map_bytes_per_thread)

    def check_threads(self) -> int:
        """Restart dead cleaner threads (logged, counted); rewrite the status file.
        Returns the number restarted."""
        restarted = 0
        with self._lifecycle_lock:
            if not self.stop_event.is_set():
                for i, thread in enumerate(self._threads):
                    if thread is not None and not thread.is_alive():
                        self.thread_crashes += 1
                        log.critical("log cleaner thread %s died; restarting it (%d deaths so "
                                     "far)", thread.name, self.thread_crashes)
                        self._start_thread(i)
                        restarted += 1
        self.write_status()
        return restarted

    # -- the thread ----------------------------------------------------------------------
    def _run(self, i: int) -> None:
        cleaner = self._cleaners[i]
        stop = self.stop_event  # this thread's: reconfigure gives new threads a new one
        while not stop.is_set():
            try:
                did_work = self.clean_one(cleaner)
            except Exception:  # clean_one handles per-log failures; this is a bug
                log.exception("log cleaner thread %d hit an unexpected error", i)
                self.failures += 1
                did_work = False
            if not did_work:
                stop.wait(self.backoff_ms / 1000)

    def clean_one(self, cleaner: Cleaner) -> bool:
        """Clean the filthiest log once; False when no log needs it."""
        grabbed = self.manager.grab_filthiest_log()
        if grabbed is None:
            self.last_run_ms = self.time_ms()
            return False
        tp, candidate = grabbed
        partition_log = candidate.log
        try:
            result = cleaner.clean(candidate)
        except CleanerAbortedError as exc:
            log.info("cleaning of %s stopped: %s", tp, exc)
            self.manager.abort(tp)
            return False
        except Exception as exc:
            if self.log_manager.logs.get(tp) is not partition_log:
                log.info("%s was removed while being cleaned (%s)", tp, exc)
                self.manager.abort(tp)
                return True
            self.failures += 1
            reason = f"{type(exc).__name__}: {exc}"
            self.last_error = f"{tp}: {reason}"
            entry = self.manager.mark_failed(tp, reason, self.backoff_ms)
            log.error(
                "log cleaner failed to clean %s (failure %d, retry in %d ms): %s",
                tp, entry.failures, entry.retry_at_ms - self.time_ms(), reason,
                exc_info=exc,
            )
            self.write_status()
            return True
        self.log_manager.schedule_delete(partition_log, list(result.old_segments))
        try:
            self.manager.done_cleaning(tp, partition_log, result)
        except StorageError as exc:
            log.error("could not checkpoint the cleaning of %s: %s", tp, exc)
        self._record(tp, candidate, result, cleaner)
        return True

    def _record(self, tp: TopicPartition, candidate: LogToClean, result: CleanResult,
                cleaner: Cleaner) -> None:
        stats = result.stats
        self.passes += 1
        self.last_run_ms = self.time_ms()
        self.max_clean_seconds = max(self.max_clean_seconds, stats.elapsed)
        self.max_buffer_utilization = max(
            self.max_buffer_utilization, stats.map_entries / max(1, cleaner.offset_map.slots)
        )
        self.last_recopy_ratio = stats.bytes_written / stats.bytes_read if stats.bytes_read else 0
        self.last_cleaned[str(tp)] = {
            "at_ms": self.last_run_ms,
            "first_dirty_offset": candidate.first_dirty_offset,
            "end_offset": result.end_offset,
            "dirty_ratio": round(candidate.cleanable_ratio, 4),
            **stats.as_dict(),
        }
        log.info(
            "cleaned %s: offsets up to %d, %d -> %d bytes, %d -> %d records, %.3f s",
            tp, result.end_offset, stats.bytes_read, stats.bytes_written, stats.records_read,
            stats.records_written, stats.elapsed,
        )
        self.write_status()

    def clean_until_done(self, max_passes: int = 1000) -> int:
        """Run passes on the caller's thread until no log needs one (tests, tools)."""
        cleaner = self._cleaners[0] if self._cleaners else self.new_cleaner()
        passes = 0
        while passes < max_passes and self.clean_one(cleaner):
            passes += 1
        return passes

    # -- health --------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        now = self.time_ms()
        threads = [
            {"name": t.name, "alive": t.is_alive()} for t in self._threads if t is not None
        ]
        dead = sum(1 for t in threads if not t["alive"]) if not self.stop_event.is_set() else 0
        uncleanable = {
            str(tp): {"reason": u.reason, "failures": u.failures, "since_ms": u.since_ms,
                      "retry_at_ms": u.retry_at_ms}
            for tp, u in list(self.manager.uncleanable.items())
        }
        return {
            "updated_ms": now,
            "enabled": self.enabled,
            "stopped": self.stop_event.is_set(),
            "healthy": dead == 0 and not uncleanable,
            "threads": threads,
            "passes": self.passes,
            "failures": self.failures,
            "thread_crashes": self.thread_crashes,
            "last_error": self.last_error,
            "metrics": {
                "DeadThreadCount": dead,
                "uncleanable-partitions-count": len(uncleanable),
                "max-dirty-percent": round(100 * self.manager.max_dirty_ratio, 2),
                "max-buffer-utilization-percent": round(100 * self.max_buffer_utilization, 2),
                "cleaner-recopy-percent": round(100 * self.last_recopy_ratio, 2),
                "max-clean-time-secs": round(self.max_clean_seconds, 3),
                "time-since-last-run-ms": now - self.last_run_ms if self.last_run_ms >= 0 else -1,
            },
            "uncleanable": uncleanable,
            "last_cleaned": dict(self.last_cleaned),
        }

    def write_status(self) -> None:
        online = self.log_manager.online_dirs
        if not online:
            return
        body = json.dumps(self.status(), indent=2, sort_keys=True).encode()
        with self._status_lock:
            try:
                files.atomic_write(online[0] / STATUS_FILE, body)
            except OSError as exc:
                log.error("could not write %s: %s", online[0] / STATUS_FILE, exc)
