"""A real Apache ZooKeeper for tests: one standalone server per session, on a free port.

The server is started by :mod:`odradek.cluster.local_zookeeper` (the launcher
``odradek dev-cluster`` uses too: Debian's zookeeper jar run directly with java, readiness
by ``ruok``), with a 200 ms tick so that sessions may be as short as 400 ms, and no fsync.
Its data and log live in a temp dir, removed at the end unless ``ODRADEK_KEEP_ZK_DIR`` is set.

Session loss, two ways: :func:`expire_session` opens a second client with the same session
id and password and closes it (the server then expires the session for the first client
too: its ephemeral nodes go at once); :meth:`ZooKeeperServer.paused` SIGSTOPs the server so
that clients lose their connection (and, if paused longer than the session timeout, their
sessions once it resumes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from odradek.cluster.local_zookeeper import (
    LocalZooKeeper,
    ServerTls,
    four_letter,
    start_zookeeper,
)
from odradek.cluster.zk_store import ZooKeeperStore
from tests._deadlines import expired

__all__ = ["ZooKeeperServer", "expire_session", "four_letter", "running_zookeeper", "wait_for"]

TICK_MS = 200  # sessions may then be as short as 2 ticks (minSessionTimeout)


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``condition`` until it is truthy, failing after ``timeout`` seconds."""
    started = time.monotonic()
    while not condition():
        if expired(started, timeout):
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.02)


@dataclass
class ZooKeeperServer:
    server: LocalZooKeeper
    workdir: Path

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return self.server.address

    def connect_string(self, chroot: str = "") -> str:
        return self.server.connect_string(chroot)

    def fresh_chroot(self) -> str:
        return f"/t-{uuid.uuid4().hex[:12]}"

    def store(self, chroot: str, session_timeout_ms: int = 4000) -> ZooKeeperStore:
        return ZooKeeperStore(self.connect_string(chroot), session_timeout_ms, 5000)

    def log_tail(self, lines: int = 40) -> str:
        return self.server.log_tail(lines)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the server for the duration of the block."""
        self.server.pause()
        try:
            yield
        finally:
            self.server.resume()


@contextlib.contextmanager
def running_zookeeper(heap_mb: int = 128,
                      sasl_users: Mapping[str, str] | None = None,
                      tls: ServerTls | None = None) -> Iterator[ZooKeeperServer]:
    """A server for the block; with ``sasl_users`` (name → password) clients authenticate
    with SASL DIGEST-MD5, with ``tls`` over mutual TLS only
    (:func:`~odradek.cluster.local_zookeeper.start_zookeeper`)."""
    workdir = Path(tempfile.mkdtemp(prefix="odradek-zk-"))
    try:
        server = start_zookeeper(workdir, tick_ms=TICK_MS, force_sync=False, heap_mb=heap_mb,
                                 sasl_users=sasl_users, tls=tls)
        try:
            yield ZooKeeperServer(server, workdir)
        finally:
            server.stop()  # SIGCONT first, in case a test left it paused
    finally:
        if os.environ.get("ODRADEK_KEEP_ZK_DIR") is None:
            shutil.rmtree(workdir, ignore_errors=True)


def expire_session(store: ZooKeeperStore, server: ZooKeeperServer, timeout: float = 10.0) -> None:
    """Expire ``store``'s session now, the classic way: a second client attaches to the same
    session (id + password) and closes it. Returns once the store has a new session."""
    client_id = store.client.client_id
    assert client_id is not None, "the store has no session to expire"
    old_session = client_id[0]
    twin = KazooClient(hosts=server.address, client_id=client_id, timeout=5.0)
    twin.start(timeout=timeout)
    twin.stop()
    twin.close()
    wait_for(lambda: store.session_id not in (0, old_session), timeout, "a new session")
