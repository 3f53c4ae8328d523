"""One line saying how fast this machine is now, printed by scripts/test before the suite
starts (issue 51: a whole run's wall time is read beside the machine's speed, since the
same tests took 9 minutes on one day's machine and 17 on the next).

Two fixed single-threaded workloads, each timed once: a pure-Python loop (what the
brokers' and tools' start-ups and the tests' own code mostly are) and SHA-256 over 64 MiB
(C code, memory bandwidth). The figures are the best of three, in ms: lower is faster.
Taken before the checks and pytest start, the machine is as quiet as it will be."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable


def _python_loop() -> None:
    total = 0
    for i in range(3_000_000):
        total += i % 7
    assert total > 0


_DATA = bytes(64 * 1024 * 1024)


def _sha256() -> None:
    hashlib.sha256(_DATA).digest()


def _best_ms(work: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best * 1000.0


if __name__ == "__main__":
    loop_ms = _best_ms(_python_loop)
    sha_ms = _best_ms(_sha256)
    load = os.getloadavg()[0]
    print(f"machine speed: a 3M-step Python loop {loop_ms:.0f} ms, SHA-256 of 64 MiB "
          f"{sha_ms:.0f} ms (best of 3, lower is faster); {os.cpu_count()} cores, "
          f"load average {load:.1f}")
