"""Rejected-connection logging that does not flood: one full line, then a count.

How it works (sans-I/O, the clock is injected): every rejected connection is reported as
``record(cause, host)``, where ``cause`` is a short fixed phrase ("unknown API key",
"max.connections.per.ip") and ``host`` the peer address. The first rejection of a
(cause, host) opens a window of ``window_s`` seconds and is logged in full by the caller
(``record`` returns True). Repeats inside the window are only counted (``record`` returns
False). When the window ends, :meth:`due` returns one :class:`Summary` for it ("closed
5,312 connections from 127.0.0.1 for 'unknown API key' in the last 10 s"); a window that
had repeats is followed at once by the next, so a steady flood costs one line per cause
and host every ``window_s`` seconds, and a window without repeats is dropped, so the next
rejection after a quiet spell is logged in full again.

The table is bounded (``max_keys``): once full, new hosts are counted together under
:data:`OTHER_HOSTS` per cause, so a flood from many addresses cannot grow it.

Kafka has no such summariser: its ``SocketServer`` logs each rejection
("Rejected connection from …") and relies on log4j configuration to tame the volume.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["OTHER_HOSTS", "RejectionLog", "Summary"]

OTHER_HOSTS: Final = "other hosts"
# Distinct (cause, host) windows kept: a few causes times the peers a broker plausibly has.
DEFAULT_MAX_KEYS: Final = 1024
DEFAULT_WINDOW_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Summary:
    """Rejections of one cause from one host in one window, beyond the one logged in full."""

    cause: str
    host: str
    count: int
    window_s: float

    def message(self) -> str:
        noun = "connection" if self.count == 1 else "connections"
        return (
            f"closed {self.count:,} {noun} from {self.host} for '{self.cause}' "
            f"in the last {self.window_s:g} s"
        )


@dataclass(slots=True)
class _Window:
    ends: float
    repeats: int


class RejectionLog:
    """Decides which rejections get a full line and counts the rest per window."""

    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._windows: dict[tuple[str, str], _Window] = {}

    def record(self, cause: str, host: str) -> bool:
        """Count one rejection; True when the caller should log this one in full."""
        key = (cause, host)
        window = self._windows.get(key)
        if window is None and len(self._windows) >= self._max_keys:
            key = (cause, OTHER_HOSTS)
            window = self._windows.get(key)
        if window is not None:
            window.repeats += 1
            return False
        self._windows[key] = _Window(self._clock() + self.window_s, 0)
        return True

    def next_due(self) -> float | None:
        """When the earliest open window ends (clock time), or None if none is open."""
        if not self._windows:
            return None
        return min(w.ends for w in self._windows.values())

    def due(self) -> list[Summary]:
        """Summaries of the windows that have ended (those with repeats only)."""
        now = self._clock()
        summaries: list[Summary] = []
        for key, window in list(self._windows.items()):
            if window.ends > now:
                continue
            if window.repeats:
                summaries.append(Summary(key[0], key[1], window.repeats, self.window_s))
                # Still flooding: the next window starts now, with no full line.
                window.ends = now + self.window_s
                window.repeats = 0
            else:
                del self._windows[key]
        return summaries

    def flush(self) -> list[Summary]:
        """Summaries of every open window with repeats, ended or not (at shutdown)."""
        summaries = [
            Summary(cause, host, w.repeats, self.window_s)
            for (cause, host), w in self._windows.items()
            if w.repeats
        ]
        self._windows.clear()
        return summaries
