"""Helpers for the real-client interop tests: a broker subprocess, kcat and the Java client.

Not a conftest: import what you need, e.g.::

    from tests.interop._broker import java_client, kcat, start_broker

    def test_something(tmp_path):
        with start_broker(tmp_path) as broker:
            kcat("-b", broker.bootstrap, "-L")

The broker is started as ``.venv/bin/odradek serve --override listeners=PLAINTEXT://127.0.0.1:0
--override log.dirs=<dir> [--override key=value ...] --ready-file <file>`` in its own
process group: it binds port 0 itself (no free port probed and released beforehand, which
another process could take in between) and, once started, writes the ports it got to the
ready file, which :meth:`BrokerProcess.wait_ready` waits for.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests._deadlines import describe, expired
from tests._zygote import ForkedProcess, ZygoteGone, zygote

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
JAVA_DIR = Path(__file__).resolve().parent / "java"
JAVA_SOURCE = JAVA_DIR / "OdradekInterop.java"
JAVA_MAIN = "OdradekInterop"
#: jars shipped by the PyPI package shigawire-apache-flink-libraries (scripts/install-java-client)
JAVA_JARS = (
    "kafka-clients.jar",
    "slf4j-api.jar",
    "lz4-java.jar",
    "snappy-java.jar",
    "zstd-jni.jar",
)
#: jars needed at compile time (the others are runtime-only codec implementations)
JAVA_COMPILE_JARS = ("kafka-clients.jar", "slf4j-api.jar")

STARTUP_TIMEOUT = 30.0


def odradek_executable() -> Path:
    exe = VENV_BIN / "odradek"
    if exe.exists():
        return exe
    found = shutil.which("odradek")
    return Path(found) if found else exe


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind to port 0, read it back, close): another
    process may take it before it is bound again. For something that cannot bind port 0
    itself and report its port; a broker can (:func:`start_broker`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refusing_address(host: str = "127.0.0.1") -> Iterator[str]:
    """``host:port`` where connections are refused while the block runs: the port is bound
    and never listened on. A port merely found free (:func:`free_port`) can be taken
    meanwhile, by another worker's broker binding port 0, and a client meant to meet
    nothing there meets that broker (a whole run's mirror test, issue 51)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        yield f"{host}:{s.getsockname()[1]}"


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- broker process

_LIVE: set[BrokerProcess] = set()


@atexit.register
def _kill_leftovers() -> None:
    for broker in list(_LIVE):
        broker.kill9()


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    """One ``odradek serve`` subprocess. Use as a context manager, or call stop()/kill9().

    ``port`` is the first listener's (0 until :meth:`wait_ready` read the one it got);
    :attr:`ports` every listener's by name, :attr:`metrics_url` the metrics endpoint's."""

    def __init__(
        self,
        argv: list[str],
        *,
        host: str,
        port: int,
        data_dir: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.ports: dict[str, int] = {}
        self.metrics_url: str | None = None
        self.data_dir = data_dir
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = f"{int(time.time() * 1000)}-{port or uuid.uuid4().hex[:8]}"
        self.stdout_path = log_dir / f"broker-{stamp}.stdout"
        self.stderr_path = log_dir / f"broker-{stamp}.stderr"
        self.ready_path = log_dir / f"broker-{stamp}.ready"
        self.argv = [*argv, "--ready-file", str(self.ready_path)]
        self.stdout_path.write_bytes(b"")
        self.stderr_path.write_bytes(b"")
        forks = zygote()
        child_env = dict(env) if env is not None else dict(os.environ)
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        if forks is not None and forks.accepts(self.argv, child_env):
            # forked from a process that has imported the broker (tests/_zygote.py)
            with contextlib.suppress(ZygoteGone):  # then started below, as before
                self.proc = forks.spawn(self.argv, cwd=str(log_dir), env=child_env,
                                        stdout=self.stdout_path, stderr=self.stderr_path,
                                        session=True)
                _LIVE.add(self)
                return
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(log_dir),
                env=dict(env) if env is not None else None,
                start_new_session=True,  # own process group, so kill9() gets every child too
            )
        _LIVE.add(self)

    # ---- info
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def describe(self, tail: int = 4000) -> str:
        err = self.stderr()[-tail:]
        out = self.stdout()[-tail:]
        return (
            f"broker {' '.join(self.argv)}\n  pid={self.pid} returncode={self.proc.poll()}\n"
            f"--- stderr (tail) ---\n{err}\n--- stdout (tail) ---\n{out}"
        )

    # ---- lifecycle
    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Wait for the broker's ready file (written whole once it has started: listening,
        and registered in a cluster) and read the ports it bound from it; ``timeout``
        grows on a slow machine (tests/_deadlines.py)."""
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                _LIVE.discard(self)
                raise BrokerStartError("broker exited during startup\n" + self.describe())
            if self.ready_path.exists():
                ready = json.loads(self.ready_path.read_text())
                self.port = int(ready["port"])
                self.ports = {name: int(port) for name, port in ready["listeners"].items()}
                self.metrics_url = ready.get("metrics")
                return
            if expired(started, timeout):
                self.kill9()
                raise BrokerStartError(
                    f"broker did not start within {describe(started, timeout)} (no "
                    f"{self.ready_path.name})"
                    f"\n" + self.describe()
                )
            time.sleep(0.05)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill9(self) -> int | None:
        """SIGKILL the whole process group (a crash); returns the exit status."""
        if self.proc.poll() is None:
            self._signal_group(signal.SIGKILL)
        else:
            # the leader is gone, but children might not be
            self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        _LIVE.discard(self)
        return self.proc.poll()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout` seconds for a clean exit, then SIGKILL."""
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # reap any straggler children of the group
        self._signal_group(signal.SIGKILL)
        _LIVE.discard(self)
        return self.proc.poll()

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<BrokerProcess {self.bootstrap} pid={self.pid} rc={self.proc.poll()}>"


def _override_args(overrides: Mapping[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in overrides.items():
        if value is True or value is False:
            value = "true" if value else "false"
        args += ["--override", f"{key}={value}"]
    return args


def start_broker(
    tmp_path: Path,
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = STARTUP_TIMEOUT,
    env: Mapping[str, str] | None = None,
    open_files_limit: int | None = None,
    wait: bool = True,
    **kw_overrides: Any,
) -> BrokerProcess:
    """Start ``odradek serve`` on loopback port 0 and wait until it has started; its
    ``port`` (and ``ports``) are the ones it bound.

    - ``port``: a fixed port (e.g. to restart a broker at the same address); default: 0, the
      broker binds a free one itself.
    - ``data_dir``: default ``tmp_path/"data"``; pass the previous broker's ``data_dir`` to restart
      on the same log after ``kill9()``.
    - ``overrides``: exact broker config keys, e.g. ``{"num.partitions": 3}``.
    - keyword overrides: underscores become dots, e.g. ``log_segment_bytes=1024`` ->
      ``--override log.segment.bytes=1024``. ``listeners``/``log.dirs`` may be overridden too.
    - Booleans become ``true``/``false``.
    - ``open_files_limit``: run the broker under this RLIMIT_NOFILE (soft and hard, with
      util-linux's ``prlimit``).
    - ``wait=False``: return at once; the caller calls :meth:`BrokerProcess.wait_ready`
      (brokers of a cluster start side by side).

    Raises BrokerStartError (with the broker's stderr) if it exits or is not listening within
    ``timeout`` seconds.
    """
    host = "127.0.0.1"
    data = Path(data_dir) if data_dir is not None else Path(tmp_path) / "data"
    data.mkdir(parents=True, exist_ok=True)
    merged: dict[str, Any] = {}
    merged.update({k.replace("_", "."): v for k, v in kw_overrides.items()})
    if overrides:
        merged.update(overrides)
    chosen = port if port is not None else 0
    conf: dict[str, Any] = {
        "listeners": f"PLAINTEXT://{host}:{chosen}",
        "log.dirs": str(data),
        "group.initial.rebalance.delay.ms": 0,  # as config/server.properties
    }
    conf.update(merged)
    argv = [str(odradek_executable()), "serve", *_override_args(conf), *extra_args]
    if open_files_limit is not None:
        limit = f"--nofile={open_files_limit}:{open_files_limit}"
        argv = ["prlimit", limit, "--", *argv]
    broker = BrokerProcess(
        argv, host=host, port=chosen, data_dir=data, log_dir=Path(tmp_path) / "logs", env=env
    )
    if wait:
        broker.wait_ready(timeout)
    return broker


# --------------------------------------------------------------------------- kcat


def kcat_path() -> str | None:
    return shutil.which("kcat") or shutil.which("kafkacat")


def kcat(
    *args: str,
    timeout: float = 60.0,
    input: str | bytes | None = None,
    check: bool = True,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """Run kcat with `args`; return the CompletedProcess (stdout/stderr are str unless text=False).

    Raises AssertionError (with kcat's output) on a non-zero exit when ``check`` and on timeout.
    Skips the test if kcat is not installed (scripts/install-java-client installs it).
    """
    exe = kcat_path()
    if exe is None:
        pytest.fail("kcat is not installed: run `make test` (scripts/install-java-client)")
    argv = [exe, *args]
    if text and isinstance(input, bytes):
        input = input.decode()
    if not text and isinstance(input, str):
        input = input.encode()
    try:
        kw: dict[str, Any] = {"encoding": "utf-8", "errors": "replace"} if text else {}
        res = subprocess.run(
            argv, input=input, capture_output=True, timeout=timeout, check=False, **kw
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"kcat timed out after {timeout} s: {argv}\nstdout: {e.stdout!r}\nstderr: {e.stderr!r}"
        ) from None
    if check and res.returncode != 0:
        raise AssertionError(
            f"kcat exited {res.returncode}: {argv}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        )
    return res


# --------------------------------------------------------------------------- Java client


def java_lib_dir() -> Path:
    """Where shigawire-apache-flink-libraries puts its jars in the venv."""
    venv_purelib = REPO / ".venv" / "lib"
    candidates = sorted(venv_purelib.glob("python3*/site-packages/pyflink/lib"))
    if candidates:
        return candidates[-1]
    return Path(sysconfig.get_paths()["purelib"]) / "pyflink" / "lib"


@dataclass
class JavaResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.summary.get("ok"))

    def describe(self, tail: int = 6000) -> str:
        return (
            f"{' '.join(self.argv)}\nexit={self.returncode}\nsummary={json.dumps(self.summary)}\n"
            f"--- stderr (tail) ---\n{self.stderr[-tail:]}\n"
            f"--- stdout (tail) ---\n{self.stdout[-tail:]}"
        )


def _parse_summary(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                return parsed
    return {}


class JavaClientUnavailable(RuntimeError):
    pass


def compile_java_client(
    build_root: Path | None = None, source: Path = JAVA_SOURCE
) -> tuple[Path, list[Path]]:
    """Compile OdradekInterop.java, or another ``source`` against the same jars (a bench's
    driver), if the source or jars changed; return (classes_dir, jars).

    Output goes to ``build_root``/<hash>/, by default tests/interop/java/build/ (gitignored).
    Safe to call from several processes at once (file lock). Raises JavaClientUnavailable if
    jars or javac are missing.
    """
    lib = java_lib_dir()
    jars = [lib / j for j in JAVA_JARS]
    missing = [str(j) for j in jars if not j.is_file()]
    if missing:
        raise JavaClientUnavailable(
            f"kafka-clients jars missing ({', '.join(missing)}): run scripts/install-java-client"
        )
    javac = shutil.which("javac")
    if javac is None or shutil.which("java") is None:
        raise JavaClientUnavailable("java/javac not found on PATH (need a JDK 11+)")
    root = build_root or (JAVA_DIR / "build")
    root.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256(source.read_bytes())
    for j in jars:
        st = j.stat()
        h.update(f"{j}:{st.st_size}:{st.st_mtime_ns}".encode())
    out = root / h.hexdigest()[:16]
    stamp = out / ".ok"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not stamp.exists():
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(parents=True)
                cp = os.pathsep.join(str(lib / j) for j in JAVA_COMPILE_JARS)
                res = subprocess.run(
                    [javac, "-nowarn", "-encoding", "UTF-8", "-d", str(out), "-cp", cp,
                     str(source)],
                    capture_output=True, text=True, timeout=180, check=False,
                )
                if res.returncode != 0:
                    raise RuntimeError(f"javac failed:\n{res.stdout}\n{res.stderr}")
                stamp.write_text("ok\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out, jars


JavaRunner = Callable[..., JavaResult]


class _ClassDataArchive:
    """The Java client's classes, mapped from a dynamic class data sharing archive (JDK
    13+ ``-XX:ArchiveClassesAtExit`` / ``-XX:SharedArchiveFile``) instead of loaded and
    verified anew by each run's JVM: a run took 1.8-1.9 s of CPU without it, 1.1-1.3 s
    with it (issue 51). The first run of a build (in any process) writes the archive at
    its exit; the runs after it use it. JDK 17 archives no class from a directory on the
    class path, so the compiled classes go into a jar beside them. The archive is named
    after the JDK binary it was made with, since it belongs to one JDK build; a JVM that
    cannot use it runs without it."""

    def __init__(self, java: str, classes: Path) -> None:
        real = Path(shutil.which(java) or java).resolve()
        stat = real.stat() if real.exists() else None
        tag = hashlib.sha256(f"{real}:{stat and stat.st_mtime_ns}".encode()).hexdigest()[:12]
        self.jar = classes / "interop.jar"
        self.path = classes / f"interop-{tag}.jsa"
        with open(classes / ".jar.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.jar.exists():
                made = classes / f"interop.jar.{os.getpid()}"
                with zipfile.ZipFile(made, "w") as jar:
                    for f in sorted(classes.rglob("*.class")):
                        jar.write(f, f.relative_to(classes).as_posix())
                made.replace(self.jar)

    def jvm_args(self, make: bool = True) -> tuple[list[str], Callable[[], None]]:
        """The JVM's options for this run, and what to do once it has exited; ``make``:
        whether a JVM that finds no archive makes it (at its exit, with the classes it
        loaded by then)."""
        if self.path.exists():
            return [f"-XX:SharedArchiveFile={self.path}", "-Xlog:cds=off",
                    "-Xlog:cds+dynamic=off"], lambda: None
        if not make:
            return [], lambda: None
        # made by this run at its exit, under a name of its own: runs of other processes
        # may be making one at the same time (the last rename wins, each one whole)
        made = self.path.with_name(f"{self.path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}")

        def keep() -> None:
            if made.exists():
                made.replace(self.path)

        return [f"-XX:ArchiveClassesAtExit={made}", "-Xlog:cds=off",
                "-Xlog:cds+dynamic=off"], keep


#: the JVM options of every Java client run
_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m")


class JavaServerGone(AssertionError):
    """The Java client's server JVM ended (or its reply pipe closed) before it answered."""


class _JavaServer:
    """One JVM running ``OdradekInterop --serve`` (see its ``Server``): a run is a line of
    base64 arguments on its stdin, answered with frames on a pipe of its own (fd 1 and 2
    of the JVM go to a temporary file: what the JVM itself prints, and writes of threads
    that belong to no run under way, marked). In a session of its own, so a kill reaches
    everything it started."""

    #: how long a server that was asked to exit (stdin closed) may take before it is killed
    EXIT_S = 10.0

    def __init__(self, command: Sequence[str], after: Callable[[], None]) -> None:
        self._after = after
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()/kill()
        replies, reply_end = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [*command, "--serve", f"/dev/fd/{reply_end}", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=self.log, stderr=self.log,
                pass_fds=(reply_end,), start_new_session=True,
            )
        except BaseException:
            os.close(replies)
            self.log.close()
            raise
        finally:
            os.close(reply_end)
        self._replies = replies
        self._pending = bytearray()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None and self._replies >= 0

    def send(self, request: Sequence[str]) -> None:
        """Send one run; BrokenPipeError if the server has gone (nothing was run)."""
        assert self.proc.stdin is not None
        line = " ".join(base64.b64encode(a.encode()).decode("ascii") for a in request)
        self.proc.stdin.write(line.encode("ascii") + b"\n")
        self.proc.stdin.flush()

    def answer(self, deadline: float, out: bytearray, err: bytearray) -> int | None:
        """Collect the run's output into ``out`` and ``err`` until its exit code arrives
        (returned) or ``deadline`` (time.monotonic()) passes (None). Raises JavaServerGone
        if the reply pipe ends first."""
        while True:
            while len(self._pending) >= 5:
                kind = self._pending[0:1]
                size = int.from_bytes(self._pending[1:5], "big")
                if len(self._pending) < 5 + size:
                    break
                body = bytes(self._pending[5:5 + size])
                del self._pending[:5 + size]
                if kind == b"X":
                    return int(body)
                (out if kind == b"O" else err).extend(body)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # poll, not select: the pipe's descriptor may be above select()'s 1023
            poller = select.poll()
            poller.register(self._replies, select.POLLIN)
            if poller.poll(left * 1000):
                chunk = os.read(self._replies, 1 << 16)
                if not chunk:
                    raise JavaServerGone(self._gone())
                self._pending.extend(chunk)

    def _gone(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - 6000))
        tail = self.log.read().decode(errors="replace")
        self.kill()
        return (f"the Java client's server JVM ended (exit {code})\n"
                f"--- its output (tail) ---\n{tail}")

    def stop(self) -> None:
        """Close its stdin (it exits); killed if it has not exited after EXIT_S."""
        if self._replies < 0:
            return
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=self.EXIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self._close()
        if self.proc.returncode == 0:
            self._after()

    def kill(self) -> None:
        """Kill it and everything it started (its session); no archive comes of it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        self._close()

    def _close(self) -> None:
        if self._replies >= 0:
            os.close(self._replies)
            self._replies = -1
            self.log.close()


class JavaClientRunner:
    """``run(bootstrap, mode, topic, *args, props=None, timeout=180.0, jvm_args=())``: one
    run of OdradekInterop, its result as a fresh JVM's would be. Runs without
    ``jvm_args`` go to one long-lived server JVM (started at the first, again after one
    that timed out or died); runs with ``jvm_args`` start a JVM of their own, as every
    run did before (issue 51: a JVM's start was 1.1-1.3 s of CPU, some 100 runs a whole
    test run). A run that does not answer within ``timeout`` kills the server and fails
    (AssertionError); the next run starts a new one. One run at a time (a lock). A run
    sees the environment and working directory the test process had when its server
    started, not those of the moment (no test changes them before a Java run; one that
    must, passes ``jvm_args`` for a JVM of its own).
    ``make_archive=False``: its JVMs do not make the class data archive (the runner's own
    tests, whose servers load few of kafka-clients' classes: an archive of those would
    serve the runs after it badly)."""

    def __init__(self, classes: Path, jars: Sequence[Path], make_archive: bool = True) -> None:
        self.make_archive = make_archive
        self.java = shutil.which("java") or "java"
        self.archive = _ClassDataArchive(self.java, classes)
        self.classpath = os.pathsep.join([str(self.archive.jar), *(str(j) for j in jars)])
        self._lock = threading.Lock()
        self._server: _JavaServer | None = None

    @property
    def server_pid(self) -> int | None:
        """The pid of the server JVM, if one is running."""
        server = self._server
        return server.pid if server is not None and server.alive() else None

    def __call__(
        self,
        bootstrap: str,
        mode: str,
        topic: str,
        *args: str | int,
        props: Mapping[str, Any] | None = None,
        timeout: float = 180.0,
        jvm_args: Iterable[str] = (),
    ) -> JavaResult:
        """Run ``OdradekInterop <bootstrap> <mode> <topic> [args] [-Xkey=value ...]``."""
        request = [bootstrap, mode, topic, *(str(a) for a in args),
                   *(f"-X{k}={v}" for k, v in (props or {}).items())]
        extra = list(jvm_args)
        with self._lock:
            if extra:
                return self._run_fresh(request, timeout, extra)
            return self._run_served(request, timeout)

    def _command(self, sharing: Sequence[str], jvm_args: Sequence[str] = ()) -> list[str]:
        return [self.java, *_JVM_OPTIONS, *sharing, *jvm_args, "-cp", self.classpath, JAVA_MAIN]

    def _start(self) -> _JavaServer:
        # A server uses the class data archive when there is one, and never makes it: it
        # would write it at its exit, the test process's end, for no run of this test run
        # (five workers, five 20 MB dumps, each at the run's tail). Runs with jvm_args
        # (fresh JVMs) still make it.
        sharing, after = self.archive.jvm_args(make=False)
        return _JavaServer(self._command(sharing), after)

    def _run_served(self, request: list[str], timeout: float) -> JavaResult:
        argv = [*self._command([]), *request]
        for attempt in (1, 2):
            if self._server is None or not self._server.alive():
                if self._server is not None:
                    self._server.kill()
                self._server = self._start()
            server = self._server
            try:
                server.send(request)
                break
            except (BrokenPipeError, ValueError):  # gone before it took the run: a new one
                server.kill()
                self._server = None
                if attempt == 2:
                    raise
            except BaseException:  # interrupted mid-line: the server may hold half a run
                server.kill()
                self._server = None
                raise
        out, err = bytearray(), bytearray()
        try:
            rc = server.answer(time.monotonic() + timeout, out, err)
        except JavaServerGone as e:
            self._server = None
            raise JavaServerGone(
                f"{e}\nduring {' '.join(argv)}\n--- the run's stderr ---\n"
                f"{err.decode(errors='replace')[-6000:]}\n--- the run's stdout ---\n"
                f"{out.decode(errors='replace')[-6000:]}"
            ) from None
        except BaseException:
            # interrupted while the run goes on (pytest-timeout's signal, a Ctrl-C): the
            # server is killed, as subprocess.run killed a fresh JVM, or the next run would
            # read this one's answer
            server.kill()
            self._server = None
            raise
        if rc is None:
            server.kill()
            self._server = None
            raise AssertionError(
                f"Java client timed out after {timeout} s: {' '.join(argv)}\n"
                f"--- stderr ---\n{err.decode(errors='replace')[-6000:]}\n"
                f"--- stdout ---\n{out.decode(errors='replace')[-6000:]}"
            )
        stdout = out.decode(errors="replace")
        return JavaResult(argv, rc, stdout, err.decode(errors="replace"), _parse_summary(stdout))

    def _run_fresh(self, request: list[str], timeout: float, jvm_args: list[str]) -> JavaResult:
        sharing, after = self.archive.jvm_args(self.make_archive)
        argv = [*self._command(sharing, jvm_args), *request]
        try:
            res = subprocess.run(
                argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                stdin=subprocess.DEVNULL, check=False,
            )
            if res.returncode >= 0:  # a JVM killed by a signal may have left half an archive
                after()
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
            raise AssertionError(
                f"Java client timed out after {timeout} s: {' '.join(argv)}\n"
                f"--- stderr ---\n{(err or '')[-6000:]}\n--- stdout ---\n{(out or '')[-6000:]}"
            ) from None
        return JavaResult(argv, res.returncode, res.stdout, res.stderr, _parse_summary(res.stdout))

    def close(self) -> None:
        """Stop the server JVM (it ends with this process's stdin pipe anyway)."""
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None


@cache
def _java_runner() -> JavaRunner:
    classes, jars = compile_java_client()
    runner = JavaClientRunner(classes, jars)
    atexit.register(runner.close)
    return runner


def java_client() -> JavaRunner:
    """Compile the Java client once per session and return ``run(bootstrap, mode, topic, *args,
    props=None, timeout=180.0, jvm_args=()) -> JavaResult``.

    Skips the calling test when the jars or the JDK are missing.
    """
    try:
        return _java_runner()
    except JavaClientUnavailable as e:
        pytest.fail(f"Java client unavailable ({e}): run `make test`")


if __name__ == "__main__":  # pragma: no cover - manual smoke test: compile and print the classpath
    classes_dir, jar_paths = compile_java_client()
    print(classes_dir)
    for jar in jar_paths:
        print(jar)
    sys.exit(0)
