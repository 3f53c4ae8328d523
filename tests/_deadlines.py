"""Deadlines that grow on a slow machine (issue 51: a slow machine gets a longer deadline,
not a failure).

How it works: a test's wait names the deadline it needs on this machine kind during a
whole run (three xdist workers on two cores, a load average of 3-5), and polls its
condition as before. Only once that deadline has passed is the machine asked how slow it
is now (:func:`slowness`); the wait goes on until the deadline times that factor. A wait
that is met in time costs nothing more, and a condition that is never met still fails,
later by at most :data:`MAX_SLOWNESS` times its deadline.

The factor is the larger of two measures, each 1 on this machine kind in a usual run:

- the machine's speed at the run's start: a pure-Python loop timed by the pytest
  controller (:func:`measure_speed`, in ``tests/conftest.py``'s ``pytest_configure``)
  against :data:`REFERENCE_LOOP_MS`, passed to the xdist workers and to the processes the
  tests start in ``ODRADEK_TEST_SPEED`` (a day's machine ran the same suite in 9 minutes,
  the next day's in 17: docs/testing.md);
- the load now: the one-minute load average per core against :data:`REFERENCE_LOAD`
  per core (other work beside the run: whole run Q55 at a load of 10 failed two tests on
  waits that a load of 4 meets).

Timed assertions of speed do not belong here (they live in bench/); these are waits for
something to happen at all."""

from __future__ import annotations

import os
import time

#: A 1M-step loop of :func:`measure_speed` on this machine kind, quiet (ms, best of 3).
REFERENCE_LOOP_MS = 68.0
#: The load average per core of a whole run on this machine kind (3 workers, 2 cores).
REFERENCE_LOAD = 2.5
#: No deadline grows past this many times its own.
MAX_SLOWNESS = 4.0
ENV = "ODRADEK_TEST_SPEED"


def measure_speed() -> float:
    """The machine's slowness now against :data:`REFERENCE_LOOP_MS` (1 or more)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i % 7
        best = min(best, time.perf_counter() - started)
    return max(1.0, best * 1000.0 / REFERENCE_LOOP_MS)


def _speed() -> float:
    try:
        return max(1.0, float(os.environ.get(ENV, "1")))
    except ValueError:
        return 1.0


def slowness() -> float:
    """How many times longer than usual the machine needs now (1 to MAX_SLOWNESS)."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] / (REFERENCE_LOAD * cores)
    return min(MAX_SLOWNESS, max(1.0, _speed(), load))


def expired(started: float, timeout: float) -> bool:
    """Whether a wait begun at ``started`` (``time.monotonic()``) for ``timeout`` seconds
    is over: past ``timeout`` and past ``timeout`` times :func:`slowness`."""
    elapsed = time.monotonic() - started
    return elapsed > timeout and elapsed > timeout * slowness()


def describe(started: float, timeout: float) -> str:
    """The words for a wait that expired: how long it waited and against what."""
    waited = time.monotonic() - started
    return f"{waited:.0f} s (a deadline of {timeout:.0f} s, the machine {slowness():.1f}x slow)"
