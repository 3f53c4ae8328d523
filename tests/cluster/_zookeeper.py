"""A real Apache ZooKeeper for tests: one standalone server per session, on a free port.

How it starts: Debian's ``zookeeper`` package (3.8) puts the server in
/usr/share/java/zookeeper.jar, whose manifest Class-Path names every dependency. We run
``java -cp zookeeper.jar[:slf4j-simple.jar] org.apache.zookeeper.server.ZooKeeperServerMain
zoo.cfg`` directly. ``zkServer.sh start-foreground zoo.cfg`` works too, but it sources
/etc/zookeeper/conf/environment (``-Dzookeeper.log.dir=/var/log/zookeeper``, JMX on, /etc on
the classpath), runs the quorum peer main class, and with no slf4j binding on its classpath
the server logs nothing at all; the direct command depends on nothing but the jar and our
config in a temp dir, and its log (slf4j-simple, when installed) lands next to the data.
The admin server (Jetty on :8080) is off, the four-letter words we use are allowed, and
readiness is ``ruok`` → ``imok`` within a deadline.

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
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from odradek.cluster.zk_store import ZooKeeperStore

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")  # server log to stderr (our file)
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 200  # sessions may then be as short as 2 ticks (minSessionTimeout)
START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 10.0


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``condition`` until it is truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.02)


def four_letter(port: int, word: str, timeout: float = 1.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ZooKeeperServer:
    port: int
    workdir: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect_string(self, chroot: str = "") -> str:
        return self.address + chroot

    def fresh_chroot(self) -> str:
        return f"/t-{uuid.uuid4().hex[:12]}"

    def store(self, chroot: str, session_timeout_ms: int = 4000) -> ZooKeeperStore:
        return ZooKeeperStore(self.connect_string(chroot), session_timeout_ms, 5000)

    def log_tail(self, lines: int = 40) -> str:
        text = (self.workdir / "zookeeper.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the server for the duration of the block."""
        self.process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.process.send_signal(signal.SIGCONT)


def _ready(port: int) -> bool:
    try:
        return four_letter(port, "ruok", 0.5) == "imok"
    except OSError:
        return False


@contextlib.contextmanager
def running_zookeeper(heap_mb: int = 128) -> Iterator[ZooKeeperServer]:
    if not ZOOKEEPER_JAR.exists():
        raise RuntimeError(
            f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package "
            "(scripts/bootstrap --test does)"
        )
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH (ZooKeeper needs the machine's JVM)")
    workdir = Path(tempfile.mkdtemp(prefix="odradek-zk-"))
    port = _free_port()
    (workdir / "data").mkdir()
    (workdir / "zoo.cfg").write_text(
        f"tickTime={TICK_MS}\n"
        f"dataDir={workdir / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,cons\n"
        # Sessions are local to one test machine: fsync costs time and buys nothing here.
        "forceSync=no\n"
    )
    classpath = str(ZOOKEEPER_JAR)
    if SLF4J_BINDING.exists():
        classpath += f":{SLF4J_BINDING}"
    log_file = (workdir / "zookeeper.log").open("wb")
    process = subprocess.Popen(
        [
            java, f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-cp", classpath, MAIN_CLASS, str(workdir / "zoo.cfg"),
        ],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
    )
    server = ZooKeeperServer(port, workdir, process)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not _ready(port):
            if process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited at start:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper not ready in {START_DEADLINE_S}s:\n"
                                   f"{server.log_tail()}")
            time.sleep(0.05)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # in case a test left it paused
            process.terminate()
            try:
                process.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_DEADLINE_S)
        log_file.close()
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
