"""Brokers and commands forked from a process that has imported them already (issue 51).

A broker's start in the tests was 0.76 s of CPU by the time it served, 0.55 s of it
Python importing the server's modules (spread over some 170 of them, no single part
worth deferring), and a whole run starts about 240 brokers (`start_broker`, clusters'
restarts included). Forked from a process that has done those imports, the same start
is 0.21 s of CPU and of wall time.

How it works: the first broker a test process starts brings up a zygote, ``python -m
tests._zygote`` with the test process's environment, which imports what ``odradek
serve`` imports, every command's module and what the tools import on their way
(:data:`_CLIENT_SCHEMAS`), and then waits for requests, one JSON line each on its stdin:
an id, the command line, the directory, the environment, the files for stdin, stdout and
stderr, whether to start a session. For each it forks; the child becomes the command as a fresh
process would: its own session (so a process-group kill reaches its children too), its
files as fds 0-2, the directory and environment it was given, ``sys.argv`` and its name
in ``ps`` set. Only then does the zygote answer with the child's pid (a pipe the child
closes once set up, as ``Popen``'s error pipe; a set-up that failed is answered with
its error, raised as ``OSError`` as ``Popen`` raises). The child runs the ``odradek``
entry point and leaves the interpreter the usual way (atexit handlers, flushes,
non-daemon threads joined). The zygote reaps its children as they exit (SIGCHLD) and
reports each status under its request's id, so a status is the handle's own even when
the system has given its pid to a later child. :class:`ForkedProcess` is the test
side's ``subprocess.Popen`` for such a child (``pid``, ``poll``, ``wait``,
``returncode``, signals): a broker killed -9 is a real process killed -9, and a
``wait()`` that returns means it was reaped. A zygote that does not answer within
:attr:`Zygote.ANSWER_S` is killed and the process started by ``subprocess`` instead; one
that died leaves its children to the system, whose end is then read from ``/proc``
(their status lost: -9 is said). Its own stderr goes to a file in the run's directory.

The tests' ``odradek`` commands that capture their output (:func:`run`, in place of
``subprocess.run``) are forked the same way, their stdin, stdout and stderr files in a
temporary directory (a command's start was about 0.3 s of CPU, some 360 a run).

What a fork does not give, and where a broker or command is still started by
``subprocess``: an environment that differs from the zygote's in what is read once at a
process's start (``PYTHON*``, ``LD_*``, the locale and ``TZ``, crc32c's and cramjam's
switches, OpenSSL's and glibc's: ``_AT_START``), a command line that is not the
``odradek`` console script (``prlimit`` before it), and ``ODRADEK_TEST_FORK=0`` for the
whole run. A test about a command's own start-up (what it imports) runs it directly.
Not carried: the umask and resource limits of the test process at the spawn (the
zygote's, from its start, which no test changes), ``/proc/<pid>/cmdline`` (the
zygote's), and the string hash seed, shared by the zygote's children.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
#: set to 0 to start every broker with subprocess.Popen
ENV = "ODRADEK_TEST_FORK"


# ============================================================== the zygote's side
def _serve() -> dict[str, Any] | None:
    """The zygote's loop; returns the request in a forked child once it is set up as a
    fresh process (:func:`_set_up`), None at the end (stdin closed: the test process is
    gone). Every answer carries the request's id: ``{"id", "pid"}`` once the child is set
    up, ``{"id", "error"}`` when the fork or the set-up failed, ``{"id", "exited",
    "status"}`` once the child is reaped."""
    sel = selectors.DefaultSelector()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    sel.register(0, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    buffered = b""
    ids: dict[int, int] = {}  # a live child's pid -> its request's id

    def answer(message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(1, data):]

    while True:
        for key, _ in sel.select():
            if key.fd == wake_r:
                os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    if pid in ids:
                        answer({"id": ids.pop(pid), "exited": pid, "status": status})
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return None
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                request: dict[str, Any] = json.loads(line)
                ready_r, ready_w = os.pipe()
                try:
                    pid = os.fork()
                except OSError as exc:
                    os.close(ready_r)
                    os.close(ready_w)
                    answer({"id": request["id"], "error": f"fork: {exc}"})
                    continue
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    sel.close()
                    for fd in (wake_r, wake_w, ready_r):
                        os.close(fd)
                    try:
                        _set_up(request)
                    except BaseException as exc:  # told to the zygote, as Popen's errpipe
                        os.write(ready_w, f"{type(exc).__name__}: {exc}".encode())
                        os._exit(127)
                    os.close(ready_w)  # set up: the zygote answers with the pid now
                    return request
                os.close(ready_w)
                failed = b""
                while chunk := os.read(ready_r, 4096):  # until the child closes its end
                    failed += chunk
                os.close(ready_r)
                if failed:
                    answer({"id": request["id"], "error": failed.decode(errors="replace")})
                    continue  # reaped with the others; no handle waits for it
                ids[pid] = request["id"]
                answer({"id": request["id"], "pid": pid})


def _set_up(request: dict[str, Any]) -> None:
    """In the forked child: what a fresh process would have (``Popen`` does these before
    it returns, so a signal to the process group right after reaches the command)."""
    if request["session"]:
        os.setsid()
    inp = os.open(request["stdin"], os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd, target in ((inp, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    with open("/proc/self/comm", "w") as comm:  # `ps` shows the command, not the zygote
        comm.write(Path(sys.argv[0]).name[:15])


def _become() -> int:
    """In the forked child, set up: run the command."""
    from odradek.cli._entry import main

    return main()


#: What the commands the tests run (topics, groups, configs, acls, produce, consume,
#: transactions, status) import on their way, beside every command module (the parser
#: imports them all): Odradek's client and the protocol schemas of the versions it asks
#: for. Counted over the commands of tests/cli, test_acls.py and test_user_quotas.py (238
#: commands, each listed here imported by at least three); without them each command
#: imported some 40-90 modules of its own after the fork. A name a kio upgrade dropped
#: is skipped: it only costs the command its import.
_COMMAND_MODULES = ("odradek.client.admin", "odradek.client.groups", "odradek.client.routing",
                    "odradek.server.limits", "encodings.idna", "stringprep", "unicodedata")
_CLIENT_SCHEMAS = (
    "alter_client_quotas.v1", "api_versions.v3", "consumer_group_describe.v1",
    "create_acls.v3", "create_partitions.v3", "create_topics.v5", "delete_acls.v3",
    "delete_groups.v2", "describe_acls.v3", "describe_client_quotas.v1",
    "describe_configs.v4", "describe_groups.v5", "describe_producers.v0",
    "describe_transactions.v0", "fetch.v16", "find_coordinator.v2", "find_coordinator.v3",
    "heartbeat.v3", "heartbeat.v4", "incremental_alter_configs.v1", "join_group.v5",
    "join_group.v7", "leave_group.v1", "leave_group.v4", "list_groups.v5",
    "list_offsets.v7", "metadata.v12", "offset_commit.v8", "offset_commit.v9",
    "offset_fetch.v7", "offset_fetch.v9", "produce.v9", "produce.v10", "sync_group.v3",
    "sync_group.v5",
)


def _preload_commands() -> None:
    from odradek.cli.main import build_parser

    build_parser()  # imports every command's module
    wanted = [*_COMMAND_MODULES, *(f"kio.schema.{schema}.{side}"
                                   for schema in _CLIENT_SCHEMAS
                                   for side in ("request", "response"))]
    for module in wanted:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def _warm_schema_index() -> None:
    """Which (API key, version) kio has schemas for, looked up once here: a broker's
    handler registration asks it for every version it serves (on disk, 1,780 lookups, 0.08 s
    of CPU a start), and the answers are cached (``has_kio_schema``)."""
    from kio.index import api_key_map, schema_name_map

    from odradek.protocol.codec import has_kio_schema

    for api_key, name in api_key_map.items():
        for version in schema_name_map[name]:
            has_kio_schema(api_key, version)


def _zygote_main() -> None:
    # as the console script: its directory first on the path, not the repository's
    sys.path[0] = str(VENV_BIN)
    from odradek.cli import _entry

    for name in _entry.UNUSED_OPTIONAL_IMPORTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    for module in ("odradek.cli.main", "odradek.server.broker"):  # what `serve` imports
        importlib.import_module(module)
    _preload_commands()
    _warm_schema_index()
    # What was loaded lives as long as each child: frozen (out of every collection's reach),
    # a child's collections walk only what it made itself. Without this, the full
    # collection a broker makes once started (run_broker) walked the zygote's whole heap:
    # 17 % of the brokers' CPU in test_replication.py and test_cluster.py, about 0.1 s a
    # start; and the pages it touched were copied out of the zygote's.
    gc.collect()
    gc.freeze()

    request = _serve()
    if request is None:
        return
    sys.exit(_become())


# ============================================================== the test process's side
#: what of an environment is read once at a process's start, by the interpreter, the C
#: library or a module's import (crc32c's CRC32C_SW_MODE, cramjam's backend, the locale)
_AT_START = ("PYTHON", "LD_", "CRC32C_", "CRAMJAM_", "OPENSSL_", "GLIBC_", "MALLOC_", "LC_")
_AT_START_NAMES = ("TZ", "LANG")


def _start_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_AT_START) or k in _AT_START_NAMES}


class ZygoteGone(RuntimeError):
    """The zygote is not there to fork: the caller starts the process itself."""


class ForkedProcess:
    """A child of the zygote, as ``subprocess.Popen`` shows a child of one's own."""

    def __init__(self, zygote: Zygote, spawn_id: int, pid: int, argv: Sequence[str]) -> None:
        self._zygote, self._id, self.pid, self.args = zygote, spawn_id, pid, list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self._id, self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._zygote.exit_code(self._id, self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # as Popen: nothing once it is known to have exited; an exit not yet reported
        # (reaped by the zygote, its answer on the way) is no error either
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's handle on its zygote (module docstring)."""

    #: a fork and a child's set-up take milliseconds; past this the zygote is dropped
    ANSWER_S = 30.0

    def __init__(self) -> None:
        self.env = dict(os.environ)
        python = VENV_BIN / "python"
        # its own traceback, if it has one, in the run's directory, not in the output
        # pytest captured for whichever test started it
        self.stderr_path = Path(tempfile.gettempdir()) / f"odradek-zygote-{os.getpid()}.stderr"
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [str(python if python.exists() else sys.executable), "-m", "tests._zygote"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(REPO),
                env=self.env, start_new_session=True)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._lock = threading.Lock()  # one request at a time
        self._changed = threading.Condition()
        self._next_id = 0
        self._answers: dict[int, dict[str, Any]] = {}  # spawn id -> its pid or error
        self._statuses: dict[int, int] = {}  # spawn id -> its wait status, once reaped
        self.gone = False
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,),
                                        name="zygote-reader", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            message = json.loads(line)
            with self._changed:
                if "exited" in message:
                    self._statuses[message["id"]] = message["status"]
                else:
                    self._answers[message["id"]] = message
                self._changed.notify_all()
        with self._changed:
            self.gone = True
            self._changed.notify_all()

    def accepts(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        """Whether a fork gives what a new process would for this command."""
        return (not self.gone and bool(argv) and Path(argv[0]) == VENV_BIN / "odradek"
                and _start_env(env) == _start_env(self.env))

    def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stdout: Path,
              stderr: Path, session: bool, stdin: Path | None = None) -> ForkedProcess:
        """The child forked and set up (its session, files, directory, environment), as
        ``Popen`` returns; OSError when its set-up failed, as ``Popen`` raises;
        :class:`ZygoteGone` when the zygote is not there."""
        with self._lock:
            self._next_id += 1
            spawn_id = self._next_id
            request = {"id": spawn_id, "argv": list(argv), "cwd": cwd, "env": dict(env),
                       "stdout": str(stdout), "stderr": str(stderr), "session": session,
                       "stdin": str(stdin) if stdin is not None else os.devnull}
            try:
                self._stdin.write((json.dumps(request) + "\n").encode())
                self._stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                self._drop()
                raise ZygoteGone(str(exc)) from exc
            with self._changed:
                self._changed.wait_for(lambda: spawn_id in self._answers or self.gone,
                                       self.ANSWER_S)
                answer = self._answers.pop(spawn_id, None)
            if answer is None:
                # no answer in time: whatever it forks late has no handle; it is dropped
                # (its process group killed with it), and the caller starts the process
                self._drop()
                raise ZygoteGone(f"the test zygote gave no answer within {self.ANSWER_S} s"
                                 f" (its stderr: {self.stderr_path})")
        if "error" in answer:
            raise OSError(f"{argv[0]}: {answer['error']}")
        return ForkedProcess(self, spawn_id, int(answer["pid"]), argv)

    def exit_code(self, spawn_id: int, pid: int, timeout: float | None) -> int | None:
        """The child's exit code (negative: the signal that ended it) once reaped, None
        if it runs still after ``timeout`` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: spawn_id in self._statuses or self.gone, timeout)
            if spawn_id in self._statuses:
                return os.waitstatus_to_exitcode(self._statuses[spawn_id])
            if not self.gone:  # running, or exited with its status on the way: as Popen's
                return None  # poll before it reaps (never the placeholder below)
        # the zygote is gone and its children with their statuses: the child is the
        # system's to reap now; it has ended once /proc shows it gone or a zombie
        started = time.monotonic()
        while True:
            if _ended(pid):
                return -signal.SIGKILL  # its status went with the zygote
            if timeout is not None and time.monotonic() - started >= timeout:
                return None
            time.sleep(0.05)

    def _drop(self) -> None:
        """The zygote is no longer used: killed with its process group (a command it
        forked for a request that has no handle); the brokers, each in a session of its
        own, stay with their owners."""
        with self._changed:
            self.gone = True
            self._changed.notify_all()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self._stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _ended(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def run(argv: Sequence[str], *, input: str | None = None,
        env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
        timeout: float | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, input=input, capture_output=True, text=True, env=env,
    cwd=cwd, timeout=timeout, check=check)`` for an ``odradek`` command, forked from the
    zygote when it can give what a new process would (:meth:`Zygote.accepts`): its
    stdin, stdout and stderr are files instead of pipes (none of them a terminal either
    way)."""
    child_env = dict(env) if env is not None else dict(os.environ)
    forks = zygote()
    if forks is not None and forks.accepts(argv, child_env):
        with contextlib.suppress(ZygoteGone):  # raised before any child ran: start it here
            return _run_forked(forks, argv, input, child_env, cwd, timeout, check)
    return subprocess.run(list(argv), input=input, capture_output=True, text=True,
                          env=child_env, cwd=cwd, timeout=timeout, check=check)


def _run_forked(forks: Zygote, argv: Sequence[str], input: str | None,
                env: dict[str, str], cwd: str | Path | None, timeout: float | None,
                check: bool) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="odradek-run-") as tmp:
        files = Path(tmp)
        stdin, stdout, stderr = files / "stdin", files / "stdout", files / "stderr"
        stdin.write_text(input or "")
        child = forks.spawn(argv, cwd=str(cwd or os.getcwd()), env=env, stdout=stdout,
                            stderr=stderr, session=False, stdin=stdin)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            # as subprocess.run's: what was read so far, as bytes
            raise subprocess.TimeoutExpired(list(argv), timeout or 0,
                                            output=stdout.read_bytes(),
                                            stderr=stderr.read_bytes()) from None
        done = subprocess.CompletedProcess(list(argv), code, _text(stdout), _text(stderr))
    if check:
        done.check_returncode()
    return done


def _text(path: Path) -> str:
    """A captured stream as ``text=True`` gives it (universal newlines)."""
    data = path.read_bytes().decode() if path.exists() else ""
    return data.replace("\r\n", "\n").replace("\r", "\n")


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote | None:
    """This process's zygote, started on first use; None when ``ODRADEK_TEST_FORK=0``."""
    global _zygote
    if os.environ.get(ENV, "1") == "0":
        return None
    with _zygote_lock:
        if _zygote is None or _zygote.gone:
            _zygote = Zygote()
        return _zygote


def close_zygote() -> None:
    """Stop this process's zygote (the tests' end); the brokers it forked are stopped by
    their owners before."""
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


atexit.register(close_zygote)  # after the brokers' own atexit kill (registered later)

if __name__ == "__main__":
    _zygote_main()
