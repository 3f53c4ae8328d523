"""The one choke point for disk I/O errors (Kafka's LogDirFailureChannel).

Every storage operation that touches the disk runs inside :meth:`LogDirFailureChannel.guard`.
An ``OSError`` there marks the whole log dir offline, logs one clear line naming the dir,
the operation and the cause, and surfaces as :class:`KafkaStorageError` (KAFKA_STORAGE_ERROR
to clients) instead of crashing the process. Logs in an offline dir refuse further I/O;
other dirs keep serving.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from odradek.storage.errors import KafkaStorageError

log = logging.getLogger(__name__)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Path], None]] = []

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

    def failed(self, log_dir: Path, operation: str, exc: OSError) -> KafkaStorageError:
        """Take ``log_dir`` offline for ``exc``; return the error to raise. For hot paths
        that cannot afford a context manager per call (the append path)."""
        reason = f"{operation} failed: {exc.strerror or exc} ({exc.filename or log_dir})"
        self.mark_offline(log_dir, reason)
        return KafkaStorageError(f"error while {operation} in {log_dir}: {exc}")

    @contextmanager
    def guard(self, log_dir: Path, operation: str) -> Iterator[None]:
        self.check(log_dir)
        try:
            yield
        except OSError as exc:
            raise self.failed(log_dir, operation, exc) from exc
