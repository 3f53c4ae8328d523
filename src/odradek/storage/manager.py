"""The log manager: every partition log across ``log.dirs`` (Kafka's LogManager).

How it works:
- **Start**: lock each log dir (``.lock``, flock) so two brokers never share one; read its
  checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``); if
  the clean-shutdown marker ``.kafka_cleanshutdown`` is present, skip recovery, else every
  log recovers from its recovery point. The marker is removed once loaded, so a crash from
  then on is seen as unclean.
- **Placement**: a new partition goes to the online dir with the fewest partitions (seed
  000 "Partition Allocation").
- **Background work** is exposed as plain methods the broker schedules (the manager owns
  no threads): retention (``log.retention.check.interval.ms``), time-based flush
  (``flush.ms``), checkpoints (``log.flush.offset.checkpoint.interval.ms`` and
  ``log.flush.start.offset.checkpoint.interval.ms``), and removal of
  ``.deleted`` files after ``file.delete.delay.ms``.
- **Shutdown**: flush and close every log, write checkpoints, then the clean-shutdown marker.
  The broker removes what is pending deletion first, in a worker (:meth:`delete_pending`
  with ``force``): a deleted topic's gigabytes held its event loop for seconds.
- **Disk errors** go through one :class:`LogDirFailureChannel`; a failed dir goes offline
  and its logs are dropped from service, other dirs keep working.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from odradek.clock import now_ms
from odradek.storage import checkpoint, files
from odradek.storage.config import LogConfig
from odradek.storage.dir_failure import LogDirFailureChannel
from odradek.storage.errors import KafkaStorageError, LogDirNotFoundError, StorageError
from odradek.storage.log import PartitionLog, parse_topic_partition
from odradek.storage.segment import LogSegment
from odradek.text import plural

log = logging.getLogger(__name__)


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True)
class _PendingDelete:
    due_ms: int
    segments: list[LogSegment] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[Path | str],
        broker_config: Mapping[str, Any] | None = None,
        time_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.log_dirs = [Path(d).absolute() for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("log.dirs is empty")
        self.broker_config = dict(broker_config or {})
        self.time_ms = time_ms
        self.failure_channel = LogDirFailureChannel()
        self.failure_channel.add_listener(self._on_dir_offline)
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self._locks: dict[Path, int] = {}
        self._lock = threading.RLock()
        self._pending: list[_PendingDelete] = []
        self.had_clean_shutdown: dict[Path, bool] = {}
        # One worker for slow disk work the append path hands off (fsync of rolled
        # segments, producer snapshots), in order, like Kafka's scheduler thread.
        self._io_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-io")

    # -- start, stop ---------------------------------------------------------------------
    def default_config(self) -> LogConfig:
        return LogConfig.build(self.broker_config, {})

    def startup(self, topic_configs: Callable[[str], LogConfig] | None = None) -> None:
        """Lock and load every log dir. ``topic_configs`` gives a topic's effective config."""
        configs = topic_configs or (lambda _topic: self.default_config())
        for log_dir in self.log_dirs:
            try:
                self._load_dir(log_dir, configs)
            except KafkaStorageError as exc:
                if not self.failure_channel.is_offline(log_dir):
                    raise  # not a disk error: the dir is locked by another broker
                log.error("log dir %s failed to load: %s", log_dir, exc)

    def _load_dir(self, log_dir: Path, configs: Callable[[str], LogConfig]) -> None:
        with self.failure_channel.guard(log_dir, "loading log dir"):
            log_dir.mkdir(parents=True, exist_ok=True)
            self._lock_dir(log_dir)
            meta = checkpoint.read_meta_properties(log_dir / files.META_PROPERTIES)  # or refuse
            marker = log_dir / files.CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery = self._read_checkpoint(log_dir / files.RECOVERY_POINT_CHECKPOINT)
            if recovery is None:  # recovery points lost: recover every log from 0
                recovery, clean = {}, False
            starts = self._read_checkpoint(log_dir / files.LOG_START_OFFSET_CHECKPOINT) or {}
            self.had_clean_shutdown[log_dir] = clean
            started = time.monotonic()
            count = rebuilt = 0
            for child in sorted(log_dir.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(files.DELETE_DIR_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                try:
                    topic, partition = parse_topic_partition(child.name)
                except ValueError:
                    continue
                tp = TopicPartition(topic, partition)
                if tp in self.logs:
                    raise KafkaStorageError(f"duplicate log directories for {tp}")
                self.logs[tp] = self._adopt(PartitionLog(
                    child, configs(topic), self.failure_channel,
                    recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp, 0),
                    had_clean_shutdown=clean, time_ms=self.time_ms,
                ))
                count += 1
                rebuilt += self.logs[tp].indexes_rebuilt
            if clean:
                marker.unlink()
                files.fsync_dir(log_dir)
            took_ms = (time.monotonic() - started) * 1000
            if not meta and count == 0:  # nothing to load, nothing to recover from
                log.info("new log dir %s", log_dir)
            elif clean:
                log.info("loaded %s from %s in %.0f ms (clean shutdown)",
                         plural(count, "log"), log_dir, took_ms)
            else:
                log.info("recovered %s from %s in %.0f ms after an unclean shutdown%s",
                         plural(count, "log"), log_dir, took_ms,
                         f" (indexes of {plural(rebuilt, 'segment')} rebuilt)" if rebuilt else "")

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[tuple[str, int], int] | None:
        """An offset checkpoint, or None when it is damaged: a cache of the logs, so
        warn once and rebuild (checkpoint.py "Damage")."""
        try:
            return checkpoint.read_offsets(path)
        except checkpoint.CheckpointError as exc:
            log.warning("ignoring a damaged checkpoint, rebuilding it from the logs: %s", exc)
            return None

    def _lock_dir(self, log_dir: Path) -> None:
        fd = os.open(log_dir / files.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise KafkaStorageError(
                f"log dir {log_dir} is locked by another process (another broker?)"
            ) from exc
        self._locks[log_dir] = fd

    def _adopt(self, partition_log: PartitionLog) -> PartitionLog:
        partition_log.schedule_io = self._submit_io
        return partition_log

    def _submit_io(self, fn: Callable[[], None]) -> None:
        def run() -> None:
            try:
                fn()
            except StorageError as exc:
                log.error("%s", exc)
            except Exception:
                log.exception("background log I/O failed")

        try:
            self._io_pool.submit(run)
        except RuntimeError:  # pool shut down: run inline
            run()

    def _snapshot(self) -> list[PartitionLog]:
        with self._lock:
            return list(self.logs.values())

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker."""
        self._io_pool.shutdown(wait=True)
        with self._lock:
            for tp, partition_log in list(self.logs.items()):
                try:
                    partition_log.close()
                except StorageError as exc:
                    log.error("closing %s failed: %s", tp, exc)
            self.delete_pending(force=True)
            for log_dir in self.online_dirs:
                try:
                    with self.failure_channel.guard(log_dir, "writing the clean-shutdown marker"):
                        self._checkpoint_dir(log_dir, True, True)
                        files.atomic_write(log_dir / files.CLEAN_SHUTDOWN_FILE, b"")
                except StorageError as exc:
                    log.error("%s", exc)
            for fd in self._locks.values():
                os.close(fd)
            self._locks.clear()
            self.logs.clear()

    # -- logs ----------------------------------------------------------------------------
    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig | None = None,
        prepare: Callable[[PartitionLog], None] | None = None,
    ) -> PartitionLog:
        """The log of ``tp``, created if missing. Safe from any thread; ``prepare`` sees a
        new log before anyone else can (the broker hooks its listeners there)."""
        with self._lock:
            existing = self.logs.get(tp)
            if existing is not None:
                return existing
            log_dir = self._next_log_dir()
            dir = log_dir / str(tp)
            fresh = not dir.exists()
            try:
                partition_log = self._adopt(PartitionLog(
                    dir, config or self.default_config(), self.failure_channel,
                    had_clean_shutdown=True, time_ms=self.time_ms,
                ))
            except StorageError:
                if fresh:
                    self._discard_half_made(dir)
                raise
            if prepare is not None:
                prepare(partition_log)
            self.logs[tp] = partition_log
            # DEBUG: the topic's creation is logged once with its partition count
            log.debug("created log for %s in %s", tp, log_dir)
            return partition_log

    def _discard_half_made(self, dir: Path) -> None:
        """A log whose creation failed half-way (out of descriptors, say) leaves nothing
        behind: its dir is renamed ``-delete`` (a rename needs no descriptor), which the
        next start removes if removing it now fails too."""
        topic, partition = parse_topic_partition(dir.name)
        target = dir.with_name(files.delete_dir_name(topic, partition, uuid.uuid4().hex))
        try:
            dir.rename(target)
        except OSError as exc:
            log.error("could not set aside the half-made log %s: %s", dir, exc)
            return
        shutil.rmtree(target, ignore_errors=True)

    def _next_log_dir(self) -> Path:
        online = self.online_dirs
        if not online:
            raise LogDirNotFoundError("no online log dir is left")
        if len(online) == 1:
            return online[0]
        # Counted by the paths' strings (cached by pathlib): comparing Path objects made
        # creating a 1,000-partition topic quadratic in the logs held.
        counts = Counter(str(partition_log.log_dir) for partition_log in self.logs.values())
        return min(online, key=lambda d: (counts[str(d)], online.index(d)))

    def delete_log(self, tp: TopicPartition) -> None:
        """Rename the partition dir ``<tp>.<uuid>-delete`` now (the topic cut to fit a file
        name: :func:`files.delete_dir_name`), remove it later."""
        self.delete_logs((tp,))

    def delete_logs(self, tps: Iterable[TopicPartition]) -> None:
        """:meth:`delete_log` for many partitions (a deleted topic's): every dir renamed,
        then each log dir they were in synced once for all its renames, as an fsync per
        partition made deleting a large topic take seconds on the event loop."""
        with self._lock:
            renamed: set[Path] = set()
            try:
                for tp in tps:
                    partition_log = self.logs.pop(tp, None)
                    if partition_log is None:
                        continue
                    target = self._rename_for_deletion(tp, partition_log)
                    renamed.add(partition_log.log_dir)
                    self._pending.append(_PendingDelete(
                        self.time_ms() + partition_log.config.file_delete_delay_ms,
                        dirs=[target]))
            finally:
                for log_dir in renamed:
                    with self.failure_channel.guard(log_dir, "syncing the renames of deleted "
                                                    "logs"):
                        files.fsync_dir(log_dir)

    def _rename_for_deletion(self, tp: TopicPartition, partition_log: PartitionLog) -> Path:
        with self.failure_channel.guard(partition_log.log_dir, f"deleting {tp}"), \
                partition_log._lock:
            # Background work on it becomes a no-op; segment descriptors close now, or when
            # the last fetch holding one lets go (LogSegment.abandon).
            partition_log.closed = True
            for segment in partition_log.segments:
                segment.abandon()
            target = partition_log.dir.with_name(
                files.delete_dir_name(tp.topic, tp.partition, uuid.uuid4().hex)
            )
            partition_log.dir.rename(target)
        return target

    def _on_dir_offline(self, log_dir: Path) -> None:
        with self._lock:
            for tp in [tp for tp, lg in self.logs.items() if lg.log_dir == log_dir]:
                log.error("%s is offline with its log dir %s", tp, log_dir)
                del self.logs[tp]

    # -- background work -----------------------------------------------------------------
    def cleanup_logs(self) -> int:
        """Retention over every log; returns the number of segments scheduled for deletion."""
        total = 0
        for partition_log in self._snapshot():
            try:
                removed = partition_log.delete_old_segments()
            except StorageError as exc:
                log.error("retention of %s failed: %s", partition_log.name, exc)
                continue
            if removed:
                total += len(removed)
                self.schedule_delete(partition_log, removed)
        return total

    def schedule_delete(self, partition_log: PartitionLog, segments: list[LogSegment]) -> None:
        """Remove segments already renamed ``.deleted`` after ``file.delete.delay.ms`` (the
        cleaner's replaced segments, retention's; readers may still hold their file
        descriptors). Added under the lock: retention, the cleaner's threads and the
        ``delete-pending`` worker (which replaces the list) run at the same time."""
        if segments:
            pending = _PendingDelete(self.time_ms() + partition_log.config.file_delete_delay_ms,
                                     segments=list(segments))
            with self._lock:
                self._pending.append(pending)

    def delete_pending(self, force: bool = False) -> None:
        """Remove ``.deleted`` segments and ``-delete`` dirs whose delay has passed (all of
        them when ``force``d). Blocking, gigabytes maybe: the broker runs it in a worker,
        the last time at its shutdown, before :meth:`shutdown` (which removes only what
        was scheduled since)."""
        now = self.time_ms()
        with self._lock:  # the cleaner threads add to it (schedule_delete)
            due = [p for p in self._pending if force or p.due_ms <= now]
            self._pending = [p for p in self._pending if p not in due]
        for pending in due:
            for segment in pending.segments:
                try:
                    with self.failure_channel.guard(segment.dir.parent, "removing a segment"):
                        segment.delete_files()
                except StorageError as exc:
                    log.error("%s", exc)
            for dir in pending.dirs:
                shutil.rmtree(dir, ignore_errors=True)
        removed = sum(len(pending.dirs) for pending in due)
        if removed:  # a deleted topic's partitions, seconds after the deletion
            log.info("removed the dirs of %s deleted", plural(removed, "log"))

    def flush_dirty_logs(self) -> None:
        """Time-based flush: logs whose ``flush.ms`` has passed since their last flush."""
        now = self.time_ms()
        for partition_log in self._snapshot():
            if now - partition_log.last_flush_ms >= partition_log.config.flush_ms:
                try:
                    partition_log.flush()
                except StorageError as exc:
                    log.error("flush of %s failed: %s", partition_log.name, exc)

    def checkpoint(self, recovery_points: bool = True, log_start_offsets: bool = True) -> None:
        """Write recovery-point and log-start-offset checkpoints of every online dir (each
        on its own schedule: ``log.flush.offset.checkpoint.interval.ms`` and
        ``log.flush.start.offset.checkpoint.interval.ms``; both at shutdown)."""
        for log_dir in self.online_dirs:
            try:
                with self.failure_channel.guard(log_dir, "writing checkpoints"):
                    self._checkpoint_dir(log_dir, recovery_points, log_start_offsets)
            except StorageError as exc:
                log.error("%s", exc)

    def _checkpoint_dir(self, log_dir: Path, recovery_points: bool,
                        log_start_offsets: bool) -> None:
        with self._lock:
            logs = {tp: lg for tp, lg in self.logs.items() if lg.log_dir == log_dir}
        if recovery_points:
            checkpoint.write_offsets(
                log_dir / files.RECOVERY_POINT_CHECKPOINT,
                {tuple(tp): lg.recovery_point for tp, lg in logs.items()},  # type: ignore[misc]
            )
        if log_start_offsets:
            checkpoint.write_offsets(
                log_dir / files.LOG_START_OFFSET_CHECKPOINT,
                {tuple(tp): lg.log_start_offset for tp, lg in logs.items()},  # type: ignore[misc]
            )

    def remove_expired_producers(self) -> int:
        """Forget idle producers (``producer.id.expiration.ms``) in every log."""
        expiration_ms = int(self.broker_config.get("producer.id.expiration.ms", 86400000))
        now = self.time_ms()
        return sum(
            partition_log.producer_state.remove_expired(now, expiration_ms)
            for partition_log in self._snapshot()
        )

    def periodic_tasks(self) -> list[tuple[str, int, Callable[[], object]]]:
        """(name, interval ms, function) for the broker's scheduler; Kafka's names."""
        cfg = self.broker_config

        def ms(key: str, default: int) -> int:
            return int(cfg.get(key, default))

        return [
            ("log-retention", ms("log.retention.check.interval.ms", 300000), self.cleanup_logs),
            ("log-flusher", ms("log.flush.scheduler.interval.ms", 1 << 62), self.flush_dirty_logs),
            ("recovery-point-checkpoint", ms("log.flush.offset.checkpoint.interval.ms", 60000),
             lambda: self.checkpoint(log_start_offsets=False)),
            ("log-start-offset-checkpoint",
             ms("log.flush.start.offset.checkpoint.interval.ms", 60000),
             lambda: self.checkpoint(recovery_points=False)),
            ("delete-pending", 1000, self.delete_pending),
            ("producer-id-expiration",
             ms("producer.id.expiration.check.interval.ms", 600000),
             self.remove_expired_producers),
        ]
