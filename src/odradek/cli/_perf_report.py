"""What ``odradek perf`` prints, shared by its two consumers' read paths (``perf.py``
and ``_perf_fetch.py``): the progress bar and Kafka's ConsumerPerformance lines."""

from __future__ import annotations

import logging
import shutil
import sys
import time
from datetime import datetime

#: how often the progress bar is redrawn on a terminal
BAR_INTERVAL_S = 0.2
MB = 1024 * 1024


#: librdkafka's own log lines (``%4|...|FAIL|...``) go through logging, where the CLI's
#: level and format apply, instead of straight to stderr.
LIBRDKAFKA_LOGGER = logging.getLogger("odradek.cli.librdkafka")


class ProgressBar:
    """A one-line bar on standard error, redrawn in place; silent unless it is a terminal."""

    def __init__(self, total: int, unit: str, enabled: bool | None = None) -> None:
        self.total = max(total, 1)
        self.unit = unit
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._next = 0.0
        self._start = time.monotonic()

    def update(self, done: int, now: float, force: bool = False) -> None:
        if not self.enabled or (now < self._next and not force):
            return
        self._next = now + BAR_INTERVAL_S
        width = max(10, shutil.get_terminal_size((80, 20)).columns - 40)
        frac = min(done / self.total, 1.0)
        filled = int(width * frac)
        rate = done / max(now - self._start, 1e-9)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}% "
                         f"{rate:,.0f} {self.unit}/s ")
        sys.stderr.flush()

    def clear(self) -> None:
        """Erase the bar so that the next line of output starts clean."""
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def stamp(t: float, fmt: str) -> str:
    dt = datetime.fromtimestamp(t)
    if fmt == "kafka":  # Kafka's default pattern, yyyy-MM-dd HH:mm:ss:SSS
        return dt.strftime("%Y-%m-%d %H:%M:%S:") + f"{dt.microsecond // 1000:03d}"
    return dt.strftime(fmt)


def consumer_line(start: float, end: float, nbytes: int, count: int, rebalance_s: float,
                  date_format: str) -> str:
    """Kafka's result line; the rates over the whole run and over the fetch time."""
    total = max(end - start, 1e-9)
    fetch = max(total - rebalance_s, 0.0)
    mb = nbytes / MB
    fetch_mb_s = mb / fetch if fetch > 0 else 0.0
    fetch_n_s = count / fetch if fetch > 0 else 0.0
    return (f"{stamp(start, date_format)}, {stamp(end, date_format)}, {mb:.4f}, "
            f"{mb / total:.4f}, {count}, {count / total:.4f}, {int(rebalance_s * 1000)}, "
            f"{int(fetch * 1000)}, {fetch_mb_s:.4f}, {fetch_n_s:.4f}")


def print_detailed(t: float, win_start: float, win_count: int, win_bytes: int, count: int,
                    nbytes: int, rebalance_s: float, date_format: str) -> None:
    span = max(t - win_start, 1e-9)
    mb = nbytes / MB
    print(f"{stamp(t, date_format)}, 0, {mb:.4f}, {win_bytes / MB / span:.4f}, {count}, "
          f"{win_count / span:.4f}, {int(rebalance_s * 1000)}, {int(span * 1000)}, "
          f"{win_bytes / MB / span:.4f}, {win_count / span:.4f}", flush=True)
