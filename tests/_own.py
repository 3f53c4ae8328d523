"""What belongs to the test at hand, out of what is process-wide: one server's descriptors,
the log records of the test's own thread, and the CPU its own thread spends.

Tests count these rather than every entry of /proc/self/fd or every captured record:
tests of the same xdist worker may leave threads behind (a client's sender retrying a
stopped broker, a broker not yet stopped) that open descriptors and log meanwhile (whole
runs Q30, Q32 and Q33)."""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # an annotation only: the helpers import no broker
    from odradek.testing import RunningBroker


def _socket_inodes(port: int) -> set[str]:
    """The inodes of the TCP sockets, IPv4 and IPv6, whose local port is ``port``: the
    listening socket and every connection accepted on it."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def server_descriptors(port: int, data_dir: Path | None = None) -> list[str]:
    """What this process's descriptors on a socket with local port ``port`` (including
    any duplicate of one), or on a file under ``data_dir``, point at: a sorted list with
    a target once per descriptor. Compare these, not descriptor numbers: a broker may
    close a segment's file and open it again under another number (whole run Q34)."""
    targets = {f"socket:[{inode}]" for inode in _socket_inodes(port)}
    prefix = f"{Path(data_dir).resolve()}/" if data_dir is not None else None
    out: list[str] = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target in targets or (prefix is not None and target.startswith(prefix)):
                out.append(target)
    return sorted(out)


def own_records(
    caplog: pytest.LogCaptureFixture, broker: RunningBroker | None = None
) -> list[logging.LogRecord]:
    """The captured records logged on ``broker``'s loop thread or, without one, on the
    calling thread (a test whose server runs on its own ``asyncio.run`` loop): the
    records of the test's server and nobody else's."""
    thread = threading.get_ident() if broker is None else broker.call(threading.get_ident)
    return [r for r in caplog.records if r.thread == thread]


class ThreadCpu:
    """The CPU seconds of :func:`own_cpu`'s block, once it has ended."""

    seconds = 0.0


@contextlib.contextmanager
def own_cpu() -> Iterator[ThreadCpu]:
    """Time the block in this thread's CPU (``time.thread_time``), which other processes'
    load does not inflate as it does wall time, with the collector held off meanwhile (a
    full collection of the pytest worker's heap is not the code under test's)."""
    spent = ThreadCpu()
    collecting = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    try:
        yield spent
    finally:
        spent.seconds = time.thread_time() - started
        if collecting:
            gc.enable()
