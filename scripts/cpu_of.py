#!/usr/bin/env python3
"""The CPU a command costs, with everything it starts: ``scripts/cpu_of.py CMD ARGS...``.

How it works: the script makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``),
runs the command and reaps every process of its tree, those orphaned on the way included
(an ``odradek mirror`` killed -9 leaves its Spark JVM to whoever reaps it), so
``getrusage(RUSAGE_CHILDREN)`` holds the user and system CPU of the whole tree. On a
machine shared with other work that is the figure to compare, before and after a change
to a test file (docs/testing.md): the wall time says more about the others' load. Prints
one line to standard error; exits with the command's status.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
#: how long processes the command left behind are waited for after it exits
LEFTOVER_S = 20.0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("cpu_of: cannot become a child subreaper (Linux only)", file=sys.stderr)
        return 2
    started = time.monotonic()
    proc = subprocess.Popen(argv)
    status = 1
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == proc.pid:
            status = os.waitstatus_to_exitcode(raw)
            break
    wall = time.monotonic() - started
    deadline = time.monotonic() + LEFTOVER_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.2)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    left = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True,
                          check=False).stdout.split()
    print(f"cpu_of: {usage.ru_utime + usage.ru_stime:.1f} s CPU (user {usage.ru_utime:.1f}, "
          f"system {usage.ru_stime:.1f}), {wall:.1f} s wall, exit {status}"
          + (f"; still running, not counted: {' '.join(left)}" if left else ""),
          file=sys.stderr)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
