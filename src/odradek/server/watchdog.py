"""The event-loop watchdog: notices when the broker's event loop stops turning, says why.

How it works
------------
A broker serves every connection, timer and replica fetch from one asyncio event loop, so
code that holds the loop (a long loop over a count, a large synchronous computation)
holds all of them, and nothing inside the loop can notice: its own timers fire late, all
at once, afterwards. The watchdog has two halves, in the manner of the JVM's safepoint
and GC pause logging or Node's ``blocked-at``:

- *on the loop*, a heartbeat re-arms itself every ``interval`` (a quarter of the
  threshold) and notes when it ran. A heartbeat that ran late by more than the threshold
  measured a stall, which it counts (``stalls``, ``stall_seconds``, ``longest_stall_s``:
  the broker's Prometheus page shows them);
- *in a daemon thread*, a check every ``interval`` compares the time with the last
  heartbeat. Past the threshold, while the loop is still held, it takes the loop
  thread's stack (``sys._current_frames``) and logs one WARNING per stall with that stack
  and the request being handled: the innermost frame holding a
  :class:`~odradek.protocol.registry.RequestContext` (a handler at work: API, version,
  client id, correlation id, size, connection), or the network layer's decode step (a
  ``header`` and the ``frame`` it came in).

Python's cyclic garbage collector stops every thread while it runs, the loop's included,
and a full collection walks every tracked object. The watchdog follows collections
through ``gc.callbacks``: a warning says when a collection (and of which generation) is
running at that moment, and the longest collection is counted beside the stalls
(``longest_gc_s``). The broker freezes what it built at start-up (``gc.freeze``, see
:meth:`Broker.start <odradek.server.broker.Broker.start>`), so full collections walk only
what came after.

The thread only reads: it never touches the loop's objects beyond the frames' locals, and
a heartbeat costs the loop one callback every ``interval``. ``event.loop.stall.threshold.ms``
sets the threshold (default 1,000 ms; 0 turns the watchdog off).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.registry import RequestContext

__all__ = ["LoopWatchdog", "describe_request"]

log = logging.getLogger(__name__)

#: Frames of the loop thread's stack shown in the warning (innermost last).
STACK_LIMIT = 40


class LoopWatchdog:
    """Watches one event loop; :meth:`start` on that loop, :meth:`stop` from anywhere."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_ms: int) -> None:
        if threshold_ms <= 0:
            raise ValueError("the watchdog needs a positive threshold")
        self.threshold_s = threshold_ms / 1000
        self.interval_s = self.threshold_s / 4
        self.stalls = 0
        self.stall_seconds = 0.0
        self.longest_stall_s = 0.0
        self.warnings = 0
        self._loop = loop
        self._loop_thread_id: int | None = None
        self._last_beat = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned_beat: float | None = None  # the heartbeat a warning was logged after
        self.longest_gc_s = 0.0
        self._gc_started: float | None = None
        self._gc_generation = -1

    def start(self) -> None:
        """Start both halves; call on the watched loop's thread."""
        self._loop_thread_id = threading.get_ident()
        self._last_beat = time.monotonic()
        self._handle = self._loop.call_later(self.interval_s, self._beat, self._last_beat)
        self._thread = threading.Thread(target=self._watch, name="event-loop-watchdog",
                                        daemon=True)
        self._thread.start()
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        self._stopping.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # -- on the loop ----------------------------------------------------------------------

    def _beat(self, previous: float) -> None:
        now = time.monotonic()
        late = now - previous - self.interval_s
        if late > self.threshold_s:
            self.stalls += 1
            self.stall_seconds += late
            self.longest_stall_s = max(self.longest_stall_s, late)
            if self._warned_beat == previous:
                log.warning("event loop ran again after a stall of %.3f s", late)
        self._last_beat = now
        if not self._stopping.is_set():
            self._handle = self._loop.call_later(self.interval_s, self._beat, now)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """gc.callbacks: in whichever thread triggered the collection, every thread held."""
        if phase == "start":
            self._gc_generation = info["generation"]
            self._gc_started = time.monotonic()
        elif (started := self._gc_started) is not None:
            self._gc_started = None
            took = time.monotonic() - started
            if took > self.longest_gc_s:
                self.longest_gc_s = took

    # -- in the watchdog's thread ---------------------------------------------------------

    def _watch(self) -> None:
        while not self._stopping.wait(self.interval_s):
            last = self._last_beat
            held = time.monotonic() - last - self.interval_s
            if held <= self.threshold_s or self._warned_beat == last:
                continue
            frame = sys._current_frames().get(self._loop_thread_id or -1)
            if frame is None:  # the loop's thread is gone
                return
            self._warned_beat = last
            self.warnings += 1
            stack = "".join(traceback.format_stack(frame, limit=STACK_LIMIT))
            gc_started = self._gc_started
            collecting = ("" if gc_started is None else
                          f"; a garbage collection of generation {self._gc_generation} has "
                          f"been running for {time.monotonic() - gc_started:.3f} s")
            log.warning(
                "event loop blocked for %.3f s (event.loop.stall.threshold.ms=%d); handling: "
                "%s%s; the loop thread's stack:\n%s", held, round(self.threshold_s * 1000),
                describe_request(frame), collecting, stack.rstrip())
            del frame


def describe_request(frame: FrameType | None) -> str:
    """The request the stack whose innermost frame is ``frame`` is serving, in words."""
    while frame is not None:
        local_values = frame.f_locals
        for value in local_values.values():
            if isinstance(value, RequestContext):
                return _context_words(value)
        header = local_values.get("header")
        if header is not None and hasattr(header, "client_id") and "api_key" in local_values:
            size = _size(local_values.get("frame"))
            return (f"decoding {_api(local_values['api_key'])} "
                    f"v{local_values.get('api_version')} from client id "
                    f"{header.client_id!r} (correlation id "
                    f"{local_values.get('correlation_id')}, {size} bytes)")
        frame = frame.f_back
    return "no request (the loop is not inside a request's handling)"


def _context_words(ctx: RequestContext) -> str:
    return (f"{_api(ctx.api_key)} v{ctx.api_version} from client id {ctx.client_id!r} "
            f"(correlation id {ctx.correlation_id}, {ctx.size} bytes, connection "
            f"{ctx.connection_id})")


def _api(api_key: Any) -> str:
    try:
        return f"{ApiKey(api_key).name}({int(api_key)})"
    except (ValueError, TypeError):
        return f"API {api_key!r}"


def _size(frame: Any) -> str:
    try:
        return str(len(frame))
    except TypeError:
        return "?"
