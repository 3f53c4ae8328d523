"""The one choke point for disk I/O errors (Kafka's LogDirFailureChannel).

Every storage operation that touches the disk runs inside :meth:`LogDirFailureChannel.guard`.
An ``OSError`` there is classified once, here:

- A *disk* error (EIO, ENOSPC, EROFS, ENOENT on our own files ... anything not below)
  marks the whole log dir offline, logs one clear line naming the dir, the operation and
  the cause, and surfaces as :class:`KafkaStorageError` (KAFKA_STORAGE_ERROR to clients)
  instead of crashing the process. Logs in an offline dir refuse further I/O; other dirs
  keep serving.
- A *resource* error (:data:`RESOURCE_ERRNOS`: out of descriptors, process- or system-wide,
  or out of memory for a map) says nothing about the disk: Kafka takes the dir offline for
  it (an IOException like any other), which turned a flood of topic creations into a dead
  broker. Here only the operation fails, as :class:`ResourceLimitError` (REQUEST_TIMED_OUT,
  a retriable code: see that class for the choice); the dir stays online, the cold
  segments' descriptors are given back (:data:`~odradek.storage.segment.OPEN_COLD_SEGMENTS`)
  so that the next operation has a chance, and a warning is logged at most once per
  :data:`RESOURCE_WARNING_INTERVAL_S` with the count of the ones suppressed.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from odradek.storage.errors import KafkaStorageError, ResourceLimitError, StorageError
from odradek.storage.segment import OPEN_COLD_SEGMENTS

log = logging.getLogger(__name__)

# The process is out of something; the disk is fine. EMFILE: the process's descriptor limit
# (RLIMIT_NOFILE); ENFILE: the system's; ENOMEM: no memory for a map (or vm.max_map_count);
# ENOBUFS: no buffer space. Any other OSError is taken as the disk failing.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
RESOURCE_WARNING_INTERVAL_S = 10.0


def is_resource_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Path], None]] = []
        self._last_resource_warning = -RESOURCE_WARNING_INTERVAL_S
        self._resource_errors_unlogged = 0
        self.resource_errors = 0  # operations failed for a resource limit, ever

    def add_listener(self, listener: Callable[[Path], None]) -> None:
        self._listeners.append(listener)

    @property
    def offline_dirs(self) -> dict[Path, str]:
        return dict(self._offline)

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    def mark_offline(self, log_dir: Path, reason: str) -> None:
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline[log_dir] = reason
        log.critical("log dir %s is now offline: %s", log_dir, reason)
        for listener in self._listeners:
            listener(log_dir)

    def check(self, log_dir: Path) -> None:
        if log_dir in self._offline:
            raise KafkaStorageError(f"log dir {log_dir} is offline: {self._offline[log_dir]}")

    def failed(self, log_dir: Path, operation: str, exc: OSError) -> StorageError:
        """Classify ``exc`` (module doc): take ``log_dir`` offline for a disk error, or
        fail only this operation for a resource error; return the error to raise. For hot
        paths that cannot afford a context manager per call (the append path)."""
        if exc.errno in RESOURCE_ERRNOS:
            return self._resource_error(log_dir, operation, exc)
        reason = f"{operation} failed: {exc.strerror or exc} ({exc.filename or log_dir})"
        self.mark_offline(log_dir, reason)
        return KafkaStorageError(f"error while {operation} in {log_dir}: {exc}")

    def _resource_error(self, log_dir: Path, operation: str, exc: OSError) -> StorageError:
        released = OPEN_COLD_SEGMENTS.release_all()
        with self._lock:
            self.resource_errors += 1
            now = time.monotonic()
            quiet = now - self._last_resource_warning < RESOURCE_WARNING_INTERVAL_S
            if quiet:
                self._resource_errors_unlogged += 1
            else:
                self._last_resource_warning = now
                suppressed, self._resource_errors_unlogged = self._resource_errors_unlogged, 0
        if not quiet:
            log.warning(
                "%s failed for lack of a resource, not a disk error: %s (%s); log dir %s "
                "stays online, %d cold segments released%s", operation, exc.strerror or exc,
                exc.filename or log_dir, log_dir, released,
                f" ({suppressed} more since the last warning)" if suppressed else "",
            )
        return ResourceLimitError(
            f"{operation} failed: {exc.strerror or exc} (a resource limit of the broker "
            f"process, not a disk error)"
        )

    @contextmanager
    def guard(self, log_dir: Path, operation: str) -> Iterator[None]:
        self.check(log_dir)
        try:
            yield
        except OSError as exc:
            raise self.failed(log_dir, operation, exc) from exc
